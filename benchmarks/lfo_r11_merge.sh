#!/bin/bash
# Round 11 (docs/generalisation.md): round 10's i9 blends with the per-group roofline itself (no
# network, times a constant; benchmarks/lfo_cache_roofline.py --kappa 1) as a fourth member, and with
# PMGNS on the per-group roofline with recurrent steps (GS) in place of or beside G.
# Run from the repository root; merges the GS seed reports when they are there (their command: that
# section), else reads the committed merge.
set -e
R=benchmarks/results/r11; D=benchmarks/data; PY=${PY:-python}
mkdir -p $R
if [[ -f $R/lfo_i9_physgrp_steps_s0.json ]]; then
  $PY benchmarks/leave_families_out.py --merge $R/lfo_i9_physgrp_steps_s0.json $R/lfo_i9_physgrp_steps_s1.json \
    $R/lfo_i9_physgrp_steps_s2.json --json $D/lfo_r11_physgrp_steps_timm-i9.json > $R/m_r11_i9_steps_seeds.log
fi
A='seernet[readout=sum]@200ep-r7'; P=pmgns@200ep-r7; Q=pmgns-phys@200ep-r7; G=pmgns-physgrp@200ep-r7
RG='roofline[device=i9-10940x;precision=fp32;fit=groups]@kappa1'; GS=pmgns-physgrp-steps@200ep-r7
a=$A-seedmean; p=$P-seedmean; q=$Q-seedmean; g=$G-seedmean; gs=$GS-seedmean
ST=""   # the first blend is round 10's choice; members joined by '+', blends by ','
for b in "$a $p $q $g" "$a $p $g $RG" "$a $q $g $RG" "$a $p $q $RG" "$p $q $g $RG" "$a $g $RG" "$a $p $RG" \
         "$a $p $q $gs" "$a $p $g $gs" "$a $q $g $gs" "$p $q $g $gs" "$a $p $gs" "$a $q $gs" "$p $gs" "$a $gs" \
         "$q $gs" "$p $q $gs"; do
  ST+="${ST:+,}${b// /+}"
done
$PY benchmarks/leave_families_out.py --merge $D/lfo_timm-i9.json $D/lfo_r6_gbmops_timm-i9.json $D/lfo_r7_fast_timm-i9.json \
  $D/lfo_r7_pmgns_timm-i9.json $D/lfo_r7_seernets_timm-i9.json $D/lfo_r10_physgrp_timm-i9.json \
  $D/lfo_r11_cache_roofline_k1_timm-i9.json $D/lfo_r11_cache_roofline_k4_timm-i9.json \
  $D/lfo_r11_roofline_steps_timm-i9.json $D/lfo_r11_physgrp_steps_timm-i9.json \
  --seed-mean $P,$Q,$G,$A,$GS --shift --stack "$ST" --json $R/r11_merged_i9.json > $R/m_r11_i9.log
echo merged
