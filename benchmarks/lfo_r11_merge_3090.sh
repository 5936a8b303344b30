#!/bin/bash
# Round 11 on the RTX 3090 (docs/generalisation.md, "Round 11"): PMGNS on the per-group roofline with
# recurrent steps (GS), 3 seeds, beside round 9's members; merges the GS seed reports when they are
# there (their command: that section), else reads the committed merge.  Run from the repository root.
set -e
R=benchmarks/results/r11; D=benchmarks/data; PY=${PY:-python}
mkdir -p $R
if [[ -f $R/lfo_3090_physgrp_steps_s0.json ]]; then
  $PY benchmarks/leave_families_out.py --merge $R/lfo_3090_physgrp_steps_s0.json $R/lfo_3090_physgrp_steps_s1.json \
    $R/lfo_3090_physgrp_steps_s2.json --json $D/lfo_r11_physgrp_steps_timm-3090-infer.json > $R/m_r11_3090_steps_seeds.log
fi
A='seernet[readout=sum]'; S=seernet; P=pmgns@200ep; Q=pmgns-phys@200ep; G=pmgns-physgrp@200ep; GS=pmgns-physgrp-steps@200ep
q=$Q-seedmean; g=$G-seedmean; gs=$GS-seedmean; p=$P-seedmean
ST=""   # the first blend is round 9's choice (the shipped card's recipe)
for b in "$A $S $q $g" "$A $S $q $gs" "$A $S $g $gs" "$A $q $g $gs" "$S $q $g $gs" "$A $S $gs" "$A $q $gs" \
         "$q $gs" "$p $gs" "$A $S $p $gs"; do
  ST+="${ST:+,}${b// /+}"
done
$PY benchmarks/leave_families_out.py --merge $D/lfo_timm-3090-infer.json $D/lfo_phys_timm-3090-infer.json \
  $D/lfo_r9_physgrp_timm-3090-infer.json $D/lfo_r11_physgrp_steps_timm-3090-infer.json \
  --seed-mean $P,$Q,$G,$GS --shift --stack "$ST" --json $R/r11_merged_3090.json > $R/m_r11_3090.log
echo merged
