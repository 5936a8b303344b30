#!/bin/bash
# Round 10: the per-group roofline offset on the refreshed graphs of round 7, i9 (docs/generalisation.md,
# "Round 10").  Merges the three seed runs (their command: that section), then merges them with the
# committed reports of rounds 1-7 and fits every candidate blend.  Run from the repository root.
set -e
R=benchmarks/results/r10; D=benchmarks/data; PY=${PY:-python}
LFO="$PY benchmarks/leave_families_out.py"
mkdir -p $R
# the seed reports are not committed (their merge is): without them, the committed merge is used
if [[ -f $R/lfo_i9_r7_physgrp_s0.json ]]; then
  $LFO --merge $R/lfo_i9_r7_physgrp_s0.json $R/lfo_i9_r7_physgrp_s1.json $R/lfo_i9_r7_physgrp_s2.json \
    --json $D/lfo_r10_physgrp_timm-i9.json > $R/m_r10_i9_seeds.log
fi
A='seernet[readout=sum]@200ep-r7'; S=seernet@200ep-r7; P=pmgns@200ep-r7; Q=pmgns-phys@200ep-r7; G=pmgns-physgrp@200ep-r7
ST="$A-seedmean+$S+$P-seedmean+$Q-seedmean"           # round 7's choice
ST+=",$A-seedmean+$S+$P-seedmean+$G-seedmean,$A-seedmean+$S+$Q-seedmean+$G-seedmean"
ST+=",$A-seedmean+$P-seedmean+$Q-seedmean+$G-seedmean,$S+$P-seedmean+$Q-seedmean+$G-seedmean"
ST+=",$A-seedmean+$S+$G-seedmean,$A-seedmean+$P-seedmean+$G-seedmean,$A-seedmean+$Q-seedmean+$G-seedmean"
ST+=",$S+$Q-seedmean+$G-seedmean,$S+$P-seedmean+$G-seedmean,$P-seedmean+$G-seedmean,$Q-seedmean+$G-seedmean"
ST+=",$P-seedmean+$Q-seedmean+$G-seedmean,$A-seedmean+$G-seedmean"
$LFO --merge $D/lfo_timm-i9.json $D/lfo_r6_gbmops_timm-i9.json $D/lfo_r7_fast_timm-i9.json \
  $D/lfo_r7_pmgns_timm-i9.json $D/lfo_r7_seernets_timm-i9.json $D/lfo_r10_physgrp_timm-i9.json \
  --seed-mean $P,$Q,$G,$A --shift --stack "$ST" --json $R/r10_merged_i9.json > $R/m_r10_i9.log
echo merged
