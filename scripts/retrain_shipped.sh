#!/usr/bin/env bash
# Retrain the bundled timm predictors on train + test (validation kept for early stopping) and
# score the recipe by 3-fold cross-validation by architecture (issue 17, item 4).  Each stage (the
# final network, then each fold) is saved under .cache/trust/NAME/.stages, so running this again
# resumes after the last finished stage.  Usage: scripts/retrain_shipped.sh NAME [--kfold 3]
# NAME: rtx3090-infer, rtx3090-train, rtx4090-infer, rtx5090-infer, i9-infer, rtx3090-infer-family.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
common=(--data timm --hidden 64 --threads 1 --epochs 500 --time-limit 900 --resume)
case "$1" in
  rtx3090-infer) args=(--device rtx3090/amp-nchw-pt240 --phase infer --seed 0 --name rtx3090-amp-nchw-pt240.infer) ;;
  rtx3090-train) args=(--device rtx3090/amp-nchw-pt112 --phase train --seed 1 --name rtx3090-amp-nchw-pt112.train) ;;
  rtx4090-infer) args=(--device rtx4090/amp-nchw-pt291 --phase infer --seed 0 --name rtx4090-amp-nchw-pt291.infer) ;;
  rtx5090-infer) args=(--device rtx5090/amp-nchw-pt291 --phase infer --seed 0 --name rtx5090-amp-nchw-pt291.infer) ;;
  i9-infer) args=(--device i9_10940x/fp32-nchw-pt240-dynamo --phase infer --seed 1 --set head_globals=true
                  --name i9_10940x-fp32-nchw-pt240-dynamo.infer) ;;
  # the unseen-family interval benchmark's network: fitted on the family split's train, not shipped
  rtx3090-infer-family) args=(--device rtx3090/amp-nchw-pt240 --phase infer --seed 0 --split family_split
                              --name rtx3090-amp-nchw-pt240.infer.family) ;;
  *) echo "unknown NAME $1" >&2; exit 2 ;;
esac
fit=(--fit train+test)
[[ "$1" == *-family ]] && fit=(--fit train)
shift
exec nice -n 5 "$PY" -m perfseer.cli.main train "${common[@]}" "${args[@]}" "${fit[@]}" "$@" --out ".cache/trust/${args[-1]}"
