#!/bin/bash
# Round 12 (docs/generalisation.md): the members of the leave-families-out blends trained again on
# train + validation families for the epochs their committed stage-one runs chose (--refit-from).
#
#   bash benchmarks/lfo_refit.sh i9      # the i9's members, seeds 0-2 (15 runs), refreshed graphs
#   bash benchmarks/lfo_refit.sh 3090    # round 9's RTX 3090 members (8 runs)
#
# Run from the repository root; JOBS processes at a time (default 2); a finished report is skipped,
# so running it again resumes.  A replicate with other initial weights (same epochs, same data):
# TAG=Rb SEED_OFFSET=10 ONLY="g q p a" (labels ...Rb[-sK], reports lfo_<T>_<member>_refitRb_sK.json).  The i9 needs the refreshed graphs at /tmp/r7/timm:
# mkdir -p /tmp/r7 && ln -sfn $PWD/datasets/timm_weight_work /tmp/r7/timm
set -e
R=benchmarks/results/r12; D=benchmarks/data; PY=${PY:-python}; JOBS=${JOBS:-2}
TAG=${TAG:-R}; SEED_OFFSET=${SEED_OFFSET:-0}; X=${TAG#R}
mkdir -p $R
PM="--hidden 64 --epochs 200 --patience 20 --batch-size 32 --threads 1"
case "${1:-}" in
  i9) S=timm-i9; T=i9; SEEDS="0 1 2"; DATA="--data-root /tmp/r7"
      ROOF="--set baseline=roofline --set baseline_device=i9-10940x --set baseline_precision=fp32"
      # name | method | stage-one report | its label suffix (before -sK) | options
      MEMBERS=(
        "gs|pmgns|lfo_r11_physgrp_steps_timm-i9|-physgrp-steps@200ep-r7|$PM $ROOF --set baseline_fit=groups --set baseline_steps=true"
        "g|pmgns|lfo_r10_physgrp_timm-i9|-physgrp@200ep-r7|$PM $ROOF --set baseline_fit=groups"
        "q|pmgns|lfo_r7_pmgns_timm-i9|-phys@200ep-r7|$PM $ROOF"
        "p|pmgns|lfo_r7_pmgns_timm-i9|@200ep-r7|$PM"
        "a|seernet[readout=sum]|lfo_r7_seernets_timm-i9|@200ep-r7|$PM") ;;
  3090) S=timm-3090-infer; T=3090; DATA=""
      ROOF="--set baseline=roofline --set baseline_device=rtx3090 --set baseline_precision=fp16"
      SN="--hidden 64 --patience 8 --threads 1"   # round 3's SeerNets: 15 epochs, automatic batch size
      MEMBERS=(
        "g|pmgns|lfo_r9_physgrp_timm-3090-infer|-physgrp@200ep|$PM $ROOF --set baseline_fit=groups"
        "q|pmgns|lfo_phys_timm-3090-infer|-phys@200ep|$PM $ROOF"
        "a|seernet[readout=sum]|lfo_timm-3090-infer||$SN|0"
        "s|seernet|lfo_timm-3090-infer||$SN|0") ;;
  *) echo "usage: bash benchmarks/lfo_refit.sh i9|3090" >&2; exit 2 ;;
esac
jobs_list() {
  for m in "${MEMBERS[@]}"; do
    IFS='|' read -r name method src sfx opts seeds <<< "$m"
    [[ -n ${ONLY:-} && " $ONLY " != *" $name "* ]] && continue
    for k in ${seeds:-0 1 2}; do
      s=""; [[ $k != 0 ]] && s=-s$k
      out=$R/lfo_${T}_${name}_refit${X}_s$k.json
      if [[ -f $out ]] && grep -q '"pooled"' $out; then continue; fi
      echo "$PY benchmarks/leave_families_out.py --settings $S $DATA --methods '$method' $opts --seed $((k + SEED_OFFSET)) \
--refit-from $D/$src.json --refit-of=$sfx$s --label-suffix=${sfx}$TAG$s --json $out > ${out%.json}.log 2>&1"
    done
  done
}
jobs_list | xargs -P "$JOBS" -I{} bash -c {}
echo "refits of $S done"
