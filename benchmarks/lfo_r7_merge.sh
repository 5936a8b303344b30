#!/bin/bash
# Round 7 completed: the merges and blends of docs/generalisation.md ("Round 7, completed"), from the
# per-run files in benchmarks/results/r7 (their commands: that section). Run from the repository root.
set -e
R=benchmarks/results/r7; D=benchmarks/data; PY=${PY:-python}
LFO="$PY benchmarks/leave_families_out.py"
A='seernet[readout=sum]'; P=pmgns@200ep; Q=pmgns-phys@200ep; J=pmgns-4090@200ep
# --- i9 ---
$LFO --merge $R/lfo_i9_f?_seer_sum.json $R/lfo_i9_f?_seer_plain.json $R/lfo_i9_f?_seer200_sum.json \
  $R/lfo_i9_f?_seer200_plain.json $R/lfo_i9_f?_seer200_sum_s?.json --json $D/lfo_r7_seernets_timm-i9.json > $R/m_seer_i9.log
ST="$A+seernet+$P-seedmean+$Q-seedmean,$A+seernet+$P-r7-seedmean+$Q-r7-seedmean"
ST+=",$A-r7+seernet-r7+$P-r7-seedmean+$Q-r7-seedmean,$A@200ep-r7+seernet@200ep-r7+$P-r7-seedmean+$Q-r7-seedmean"
ST+=",$A@200ep-r7-seedmean+seernet@200ep-r7+$P-r7-seedmean+$Q-r7-seedmean,$A@200ep-r7-seedmean+$P-r7-seedmean+$Q-r7-seedmean"
ST+=",$A@200ep-r7+$P-r7-seedmean+$Q-r7-seedmean,seernet@200ep-r7+$P-r7-seedmean+$Q-r7-seedmean,$P-r7-seedmean+$Q-r7-seedmean"
$LFO --merge $D/lfo_timm-i9.json $D/lfo_phys_timm-i9.json $D/lfo_r6_gbmops_timm-i9.json $D/lfo_r7_fast_timm-i9.json \
  $D/lfo_r7_pmgns_timm-i9.json $D/lfo_r7_seernets_timm-i9.json \
  --seed-mean $P,$Q,$P-r7,$Q-r7,$A@200ep-r7 --shift --stack "$ST" --json $R/r7b_merged_i9.json > $R/m_i9.log
# --- RTX 3090 ---
$LFO --merge $R/lfo_3090_f?_phys_s?.json $R/lfo_3090_f?_joint_s?.json $R/lfo_3090_f?_seer_*.json \
  $R/lfo_3090_f?_seer200_*.json --json $D/lfo_r7_nets_timm-3090-infer.json > $R/m_nets_3090.log
S3="$A+seernet+$J-seedmean+$Q-seedmean,$A-r7+seernet-r7+$J-r7-seedmean+$Q-r7-seedmean,$J-r7-seedmean+$Q-r7-seedmean"
S3+=",$A@200ep-r7+seernet@200ep-r7+$J-r7-seedmean+$Q-r7-seedmean,$A@200ep-r7+$J-r7-seedmean+$Q-r7-seedmean,seernet@200ep-r7+$J-r7-seedmean+$Q-r7-seedmean"
S3+=",$A-r7+$J-r7-seedmean+$Q-r7-seedmean,$A@200ep-r7+$Q-r7-seedmean,$A-r7+seernet-r7+$Q-r7-seedmean,$A@200ep-r7+seernet@200ep-r7+$Q-r7-seedmean"
$LFO --merge $D/lfo_timm-3090-infer.json $D/lfo_phys_timm-3090-infer.json $D/lfo_r5_timm-3090-infer.json \
  $D/lfo_r6_gbmops_timm-3090-infer.json $D/lfo_r7_fast_timm-3090-infer.json $D/lfo_r7_nets_timm-3090-infer.json \
  --seed-mean $P,$Q,$J,$Q-r7,$J-r7 --shift --stack "$S3" --json $R/r7b_merged_3090.json > $R/m_3090.log
echo merged
