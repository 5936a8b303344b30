#!/usr/bin/env bash
# GPU labels with the collection kit, in one call of a lent GPU machine (the grids' time bounds,
# A_S + B_S + C_S + D_S = 520 s by default, plus set-up and export).
#   bash benchmarks/gpu/collect_gpu.sh OUTDIR [BACKEND]
# Runs the image's python3 on src/ (no install).  Three grids, each bounded in time so that a
# slow step cannot starve the next; the store is resumable (run again to finish a cut-off grid):
#   A. the calibration set (datasets/calibration/calibration-set-20.txt): infer, amp_fp16, batch 256
#   B. memory models (benchmarks/gpu/memory-models.txt): infer and AdamW train, fp32, batch 32
#   C. one timm model per family (benchmarks/gpu/heldout-families.txt): infer, amp_fp16, batch 256
#   D. the calibration set again: an AdamW training step, amp_fp16, batch 64
# (on an H200, 2026-11-27: A 83 s, B 52 s, C 338 s in two calls, D 17 of 20 in 100 s; datasets/h200/)
# Writes OUTDIR/gpu.sqlite (checkpointed), gpu.csv, gpu-failures.csv, env.txt, log.txt, worker.log.
# Afterwards, here (no GPU needed):
#   python -m benchmarks.lib.new_device --measurements OUTDIR/gpu.csv --predictor rtx4090-amp-nchw-pt291.infer \
#       --device DEVICE_OF_THE_AMP_ROWS --out .cache/gpu-card      # calibrate on A, score on C
#   simulator vs B: benchmarks/suites/memory.py compare_store(OUTDIR/gpu.csv, DEVICE_NAME), which the memory
#   suite runs on datasets/h200/ (python -m benchmarks run memory)
set -u
OUT=${1:?usage: collect_gpu.sh OUTDIR [BACKEND]}
BACKEND=${2:-torch-cuda}
A_S=${A_S:-110}; B_S=${B_S:-80}; C_S=${C_S:-240}; D_S=${D_S:-90}; SHAPE=${SHAPE:-3x224x224}
BIG=${BIG:-256}; SMALL=${SMALL:-32}; TRAIN=${TRAIN:-64}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PY:-python3}
ps() { "$PY" -m perfseer.cli.main "$@"; }
DB="$OUT/gpu.sqlite"
{
  date -u; nvidia-smi 2>&1 | head -20
  "$PY" -c "import torch, timm, torchvision; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'timm', timm.__version__, 'tv', torchvision.__version__, 'gpu', torch.cuda.is_available() and torch.cuda.get_device_name())"
  "$PY" -c "import pynvml; pynvml.nvmlInit(); print('nvml ok')" 2>&1
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
common=(--db "$DB" --backend "$BACKEND" --input-shape "$SHAPE" --time-cap 2 --min-reps 10 --timeout 90
        --worker-log "$OUT/worker.log" --quiet)
step() {  # seconds, then collect run arguments
  local secs=$1; shift
  echo "== $(date -u +%T) step ($secs s): $*"
  # its own process group, so that what a cut-off step leaves behind (its workers) can be killed
  # without matching command lines (a pattern also matches the shell that called this script)
  setsid timeout --kill-after=10 "$secs" "$PY" -m perfseer.cli.main collect run "${common[@]}" "$@" &
  local pid=$!
  wait "$pid"
  local rc=$?
  echo "== $(date -u +%T) rc $rc"
  kill -KILL -- "-$pid" 2>/dev/null; sleep 1
}
{
  step "$A_S" --models datasets/calibration/calibration-set-20.txt --phases infer --precisions amp_fp16 --batches "$BIG"
  step "$B_S" --models benchmarks/gpu/memory-models.txt --phases infer,train --precisions fp32 --optimizer adamw --batches "$SMALL"
  step "$C_S" --models benchmarks/gpu/heldout-families.txt --phases infer --precisions amp_fp16 --batches "$BIG"
  step "$D_S" --models datasets/calibration/calibration-set-20.txt --phases train --precisions amp_fp16 --optimizer adamw --batches "$TRAIN"
  "$PY" -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('pragma wal_checkpoint(TRUNCATE)'); c.close()" "$DB"
  ps collect status --db "$DB"
  ps collect export --db "$DB" --out "$OUT/gpu.csv" --failures "$OUT/gpu-failures.csv"
} 2>&1 | tee "$OUT/log.txt"
