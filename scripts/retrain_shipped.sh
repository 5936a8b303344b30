#!/usr/bin/env bash
# Retrain the bundled predictors on train + test (validation kept for early stopping) and score each
# recipe by a 3-fold cross-validation by architecture (issue 17, item 4; docs/concepts/trust.md).
#
#   scripts/retrain_shipped.sh NAME [extra perfseer-train args]    # one predictor
#   scripts/retrain_shipped.sh all  [extra perfseer-train args]    # all ten, in the order below
#   python scripts/ship_predictor.py .cache/trust/CARD/CARD.json --tolerance 0   # then install it
#
# NAME: rtx3090-infer rtx3090-train i9-infer (i9-infer-r10) rtx4090-infer rtx5090-infer epyc-infer epyc-train nb201
#       memsim-infer memsim-train
# (and rtx3090-infer-family, the unseen-family interval benchmark's network: fitted on the family
# split's train, not shipped).
#
# Each run trains the final network on train + test, then fold 0, 1, 2 (every model's rows in one
# fold: timm architectures, PerfSeer-space networks, NAS-Bench-201 cells), all with the same recipe:
# the card's model, seed and --set, an explicit batch size (the final network's, so that the folds,
# with a third fewer rows, do not get a smaller automatic one), at most --epochs and early stopping
# after 20 epochs without a better validation loss.  No wall-clock limit: the result does not depend
# on the machine's load.  Every stage is saved under .cache/trust/CARD/.stages and every epoch is
# checkpointed, so running the same command again resumes where it stopped.  On several cores the
# stages can run side by side, then the plain command builds the card from them:
#
#   scripts/retrain_shipped.sh NAME --stage final --stage fold0 &
#   scripts/retrain_shipped.sh NAME --stage fold1 --stage fold2; wait
#   scripts/retrain_shipped.sh NAME
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
ORDER=(rtx3090-infer rtx3090-train i9-infer rtx4090-infer rtx5090-infer epyc-infer epyc-train nb201 memsim-infer memsim-train)
if [[ "${1:-}" == all ]]; then
  shift
  for n in "${ORDER[@]}"; do "$0" "$n" "$@"; done
  exit 0
fi
timm=(--data timm --model seernet --hidden 64 --epochs 500)
R='pmgns[baseline=roofline;baseline_device=rtx3090;baseline_precision=fp16]'
BLEND3090="seernet[readout=sum]+seernet+pmgns+pmgns+pmgns+$R+$R+$R"
RG='pmgns[baseline=roofline;baseline_device=rtx3090;baseline_precision=fp16;baseline_fit=groups]'
BLEND3090_R9="seernet[readout=sum]+seernet+$R+$R+$R+$RG+$RG+$RG"
R9='pmgns[baseline=roofline;baseline_device=i9-10940x;baseline_precision=fp32]'
BLEND_I9="seernet[readout=sum]+seernet+pmgns+pmgns+pmgns+$R9+$R9+$R9"
G9='pmgns[baseline=roofline;baseline_device=i9-10940x;baseline_precision=fp32;baseline_fit=groups]'
A='seernet[readout=sum]'
BLEND_I9_R10="$A+$A+$A+pmgns+pmgns+pmgns+$R9+$R9+$R9+$G9+$G9+$G9"
# recipe of the epyc-torch-t1 cards (their training dict): SeerNet-Multi, 3 heads, PCGrad, 128 per step
cpu=(--data cpu --device epyc/torch-t1 --model seernet-multi --metric latency_ms --metric memory_mb
     --metric util_pct --hidden 64 --epochs 300 --batch-size 128 --seed 0)
case "${1:-}" in
  # a blend: the leave-families-out validation choice of round 9 (docs/history.md, "Round 9"; shipped
  # 2026-11-28): SeerNet-Sum + SeerNet + 3 PMGNS seeds on the roofline offset + 3 PMGNS seeds on the
  # per-operator-group roofline offset, + a validation-fitted shift.  The card before it (round 4) had 3 plain
  # PMGNS seeds where the per-group ones are (members BLEND3090).  The members the two share train to the
  # same weights: `--set warm_from=DIR` (a folder of round 4's stage cards) reuses them, so only the three
  # new members train; without it every member trains
  rtx3090-infer) args=("${timm[@]}" --device rtx3090/amp-nchw-pt240 --phase infer --seed 0 --batch-size 32
                       --model blend --set head_hidden_dim=64 --set "members=$BLEND3090_R9" --set seeds=0,0,0,1,2,0,1,2
                       --set tie_seeds=true --set fit_shift=true --name rtx3090-amp-nchw-pt240.infer) ;;
  rtx3090-train) args=("${timm[@]}" --device rtx3090/amp-nchw-pt112 --phase train --seed 1 --batch-size 16
                       --name rtx3090-amp-nchw-pt112.train) ;;
  # the same blend for the i9 (shipped 2026-11-28), the roofline offset on the i9-10940X's spec; the SeerNet
  # card it replaced was `--seed 1 --set head_globals=true` with the timm recipe above
  i9-infer) args=("${timm[@]}" --device i9_10940x/fp32-nchw-pt240-dynamo --phase infer --seed 1 --batch-size 32
                  --model blend --set head_hidden_dim=64 --set "members=$BLEND_I9" --set seeds=1,1,0,1,2,0,1,2
                  --set tie_seeds=true --set fit_shift=true --name i9_10940x-fp32-nchw-pt240-dynamo.infer) ;;
  # round 10's validation choice for the i9 (docs/history.md, "Round 10"; not yet trained): on the
  # graphs that keep the work models do on their weights (datasets/timm_weight_work, the card records it),
  # three seeds each of SeerNet-Sum, PMGNS, PMGNS on the roofline offset and PMGNS on the per-group one
  i9-infer-r10) args=(--data timm_weight_work --model seernet --hidden 64 --epochs 500
                      --device i9_10940x/fp32-nchw-pt240-dynamo --phase infer --seed 0 --batch-size 32
                      --model blend --set head_hidden_dim=64 --set "members=$BLEND_I9_R10"
                      --set seeds=0,1,2,0,1,2,0,1,2,0,1,2 --set tie_seeds=true --set fit_shift=true
                      --name i9_10940x-fp32-nchw-pt240-dynamo.infer) ;;
  rtx4090-infer) args=("${timm[@]}" --device rtx4090/amp-nchw-pt291 --phase infer --seed 0 --batch-size 32
                       --name rtx4090-amp-nchw-pt291.infer) ;;
  rtx5090-infer) args=("${timm[@]}" --device rtx5090/amp-nchw-pt291 --phase infer --seed 0 --batch-size 32
                       --name rtx5090-amp-nchw-pt291.infer) ;;
  # seed 2: seed 0's retraining was refused by ship_predictor.py (validation latency 20.92 % against 20.05 %)
  epyc-infer) args=("${cpu[@]}" --phase infer --seed 2 --name epyc-torch-t1.infer) ;;
  epyc-train) args=("${cpu[@]}" --phase train --name epyc-torch-t1.train) ;;
  # recipe of nb201-gpus.infer: SeerNet-Multi over five GPUs without PCGrad, 2,000 architectures
  # (hash-chosen, now from train + test), 32 per step
  nb201) args=(--data nb201 --device 1080ti --device 2080ti --device titan_rtx --device titanx --device titanxp
               --phase infer --model seernet-multi --no-pcgrad --hidden 64 --max-train-models 2000 --batch-size 32
               --epochs 500 --seed 0 --name nb201-gpus.infer) ;;
  # recipe of the memory-sim cards (benchmarks/memory_learned.py at tag research-2026-11 --ship, at tag research-2026-11): SeerNet-Multi with PCGrad on the
  # simulator's labels, the rest of the peak (*_extra_mb) per optimizer, split by family, 16 per step
  memsim-infer) args=(--data datasets/memory_sim --device cuda-sim/fp32 --phase infer --model seernet-multi --hidden 64
                      --metric reserved_extra_mb --metric allocated_extra_mb --split family_split --batch-size 16
                      --epochs 300 --seed 0 --name memory-sim.infer) ;;
  memsim-train) args=(--data datasets/memory_sim --device cuda-sim/fp32 --phase train --model seernet-multi --hidden 64
                      --metric sgdm_reserved_extra_mb --metric sgdm_allocated_extra_mb --metric adamw_reserved_extra_mb
                      --metric adamw_allocated_extra_mb --split family_split --batch-size 16 --epochs 300 --seed 0
                      --name memory-sim.train) ;;
  rtx3090-infer-family) args=("${timm[@]}" --device rtx3090/amp-nchw-pt240 --phase infer --seed 0
                              --split family_split --name rtx3090-amp-nchw-pt240.infer.family) ;;
  *) echo "unknown NAME '${1:-}'; use one of: all ${ORDER[*]} i9-infer-r10 rtx3090-infer-family" >&2; exit 2 ;;
esac
fit=(--fit train+test --kfold 3)
[[ "$1" == *-family ]] && fit=(--fit train)
shift
exec nice -n 10 env OMP_NUM_THREADS=1 "$PY" -m perfseer.cli.main train "${args[@]}" "${fit[@]}" --threads 1 --resume \
  "$@" --out ".cache/trust/${args[-1]}"
