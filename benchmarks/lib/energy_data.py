"""The energy data sets as the power model sees them: one record per measured step or serving run.

Two sources (both real measurements, nothing simulated):

- ``datasets/h200/h200-torch-cuda.csv``: this project's 150 steps on an NVIDIA H200 (NVML energy
  per step and utilisation).  Each row is extracted (the skeleton cache makes a second run fast)
  and composed into the spec model's kernels on ``h200`` (:meth:`perfseer.runtime.spec.SpecModel.graph_latency`),
  from which :func:`perfseer.energy.activity_from_kernels` computes its activity.  The records are
  cached, one JSON file per row, under ``<work>/energy-h200/`` (resumable).
- ``../shared/datasets/mlenergy/``: the ML.ENERGY leaderboard's vLLM serving runs on A100-SXM4-40GB
  (energy per request over all GPUs used).  A decode step's activity comes from the model's
  architecture (:data:`ARCHITECTURES`, :func:`perfseer.energy.llm.decode_work`) and the measured time per output token.

    python -m benchmarks.lib.energy_data h200 --work .bench-work/energy-h200     # builds the cache
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
H200_TABLE = ROOT / "datasets" / "h200" / "h200-torch-cuda.csv"
MLENERGY = ROOT.parent / "shared" / "datasets" / "mlenergy" / "llm_text_generation"
SPEC_PRECISION = {"amp_fp16": "fp16", "fp32": "fp32"}


def h200_table(path: Path = H200_TABLE) -> pd.DataFrame:
    """The H200 measurements with the columns the power model needs (every row has energy and
    utilisation); ``power_w`` = NVML energy per step / step time."""
    t = pd.read_csv(path)
    t = t[t["energy_j"].notna() & t["util_pct"].notna() & (t["latency_ms"] > 0)].reset_index(drop=True)
    t["power_w"] = t["energy_j"] / (t["latency_ms"] / 1000)
    t["arch"] = t["model"].str.replace("@reparam", "", regex=False)
    return t


def _key(row) -> str:
    text = f"{row.model}|{row.input_shape}|{row.batch_size}|{row.phase}|{row.precision}|{row.optimizer}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class _Graph:
    """The fields of a PerfGraph the spec model composes (x, op types, edges, parameters, dropouts)."""

    def __init__(self, x, op_types, edge_index, params, dropout=()):
        self.x, self.op_types, self.edge_index, self.params, self.dropout_elements = x, op_types, edge_index, params, dropout


_TIMM = {}


def _timm_graph(model: str, input_shape: str, batch: int):
    """``model``'s graph from the committed timm dataset (``datasets/timm``: the same extraction,
    already done) re-bound to ``batch``, or ``None`` where it has none."""
    from perfseer.data.dataset import load_dataset
    from perfseer.features.pyg import OP_VOCAB

    if "ds" not in _TIMM:
        ds = load_dataset(ROOT / "datasets" / "timm")
        _TIMM["ds"] = ds
        _TIMM["index"] = {(m, s): int(g) for m, s, g in zip(ds.labels["model"], ds.labels["input_shape"],
                                                            ds.labels["graph"])}
    g = _TIMM["index"].get((model, input_shape))
    if g is None:
        return None
    d = _TIMM["ds"].graphs.at_batch(g, batch)
    return _Graph(d.x.numpy().astype(np.float64), [OP_VOCAB[int(o)] for o in d.op_type], d.edge_index.numpy(), 0.0)


def h200_record(row, sm=None) -> dict:
    """One H200 row's record: the measurement and the activity of its spec-model kernels.  An
    inference row's graph comes from the timm dataset where it has the model at this input
    shape, else (and for every training row: it needs the dropouts and parameters) from an
    extraction."""
    from perfseer.devices import get_device
    from perfseer.energy import activity_from_kernels
    from perfseer.runtime.route import cached_extract
    from perfseer.runtime.spec import load_spec_model
    from perfseer.specmodel import rules

    sm = sm or load_spec_model()
    spec = get_device("h200")
    pg = _timm_graph(row.model, str(row.input_shape), int(row.batch_size)) if row.phase == "infer" else None
    if pg is None:
        shape = tuple(int(s) for s in str(row.input_shape).split("x"))
        pg = cached_extract(row.model, batch=int(row.batch_size), input_shape=shape)
    prec = SPEC_PRECISION[row.precision]
    opt = row.optimizer if isinstance(row.optimizer, str) and row.optimizer else "adamw"
    r = sm.graph_latency(pg.x, pg.op_types, spec, phase=row.phase, precision=prec, params=float(pg.params),
                         optimizer=opt, edge_index=pg.edge_index, dropout=pg.dropout_elements)
    # the collection kit measured fp32 with TF32 off (cudnn.allow_tf32 = False): convolutions at the FP32 peak
    act = activity_from_kernels(r["kernel_table"], r["kernel_us"], spec, rules.FP32_IEEE if prec == "fp32" else prec)
    return {"model": row.model, "arch": row.arch, "batch_size": int(row.batch_size), "phase": row.phase,
            "precision": row.precision, "converged": bool(row.converged),
            "latency_ms": float(row.latency_ms), "util_pct": float(row.util_pct), "energy_j": float(row.energy_j),
            "power_w": float(row.power_w), "spec_ms": float(r["latency_ms"]), "calibrated": bool(r["calibrated"]),
            "activity": act.to_dict()}


def h200_records(work: Path, log=print, limit: int | None = None) -> list[dict]:
    """Every H200 row's record, built where not cached under ``work`` (one file per row)."""
    from perfseer.runtime.spec import load_spec_model

    work.mkdir(parents=True, exist_ok=True)
    t = h200_table()
    sm = load_spec_model()
    out = []
    for i, row in enumerate(t.itertuples()):
        if limit is not None and i >= limit:
            break
        path = work / f"{_key(row)}.json"
        if path.exists():
            out.append(json.loads(path.read_text()))
            continue
        try:
            rec = h200_record(row, sm)
        except Exception as e:  # a model that no longer extracts: recorded, not fitted on
            rec = {"model": row.model, "error": f"{type(e).__name__}: {e}"}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec))
        tmp.replace(path)
        log(f"  [{i + 1}/{len(t)}] {row.model[:60]} {row.phase} {row.precision}"
            + (f": {rec['error']}" if "error" in rec else ""))
        out.append(rec)
    return out


#: The served models' shapes, from each model's ``config.json`` on huggingface.co (published facts):
#: parameters (all experts), active parameters per token (mixtures of experts: Mistral AI's figures),
#: layers, query heads x head size, key/value heads, head size.
ARCHITECTURES = {
    "google/gemma-2-2b-it": (2.61e9, None, 26, 2048, 4, 256),
    "google/gemma-2-9b-it": (9.24e9, None, 42, 4096, 8, 256),
    "google/gemma-2-27b-it": (27.2e9, None, 46, 4096, 16, 128),
    "meta-llama/Meta-Llama-3.1-8B-Instruct": (8.03e9, None, 32, 4096, 8, 128),
    "meta-llama/Meta-Llama-3.1-70B-Instruct": (70.6e9, None, 80, 8192, 8, 128),
    "microsoft/Phi-3-mini-4k-instruct": (3.82e9, None, 32, 3072, 32, 96),
    "microsoft/Phi-3-small-8k-instruct": (7.39e9, None, 32, 4096, 8, 128),
    "microsoft/Phi-3-medium-4k-instruct": (14.0e9, None, 40, 5120, 10, 128),
    "mistralai/Mistral-7B-Instruct-v0.3": (7.25e9, None, 32, 4096, 8, 128),
    "mistralai/Mistral-Nemo-Instruct-2407": (12.2e9, None, 40, 4096, 8, 128),
    "mistralai/Mistral-Large-Instruct-2407": (123e9, None, 88, 12288, 8, 128),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": (46.7e9, 12.9e9, 32, 4096, 8, 128),
    "mistralai/Mixtral-8x22B-Instruct-v0.1": (141e9, 39e9, 56, 6144, 8, 128),
    "bigcode/starcoder2-3b": (3.03e9, None, 30, 3072, 2, 128),
    "bigcode/starcoder2-7b": (7.17e9, None, 32, 4608, 4, 128),
    "bigcode/starcoder2-15b": (15.96e9, None, 40, 6144, 4, 128),
    "codellama/CodeLlama-7b-hf": (6.74e9, None, 32, 4096, 32, 128),
    "codellama/CodeLlama-13b-hf": (13.0e9, None, 40, 5120, 40, 128),
    "codellama/CodeLlama-34b-hf": (33.7e9, None, 48, 8192, 8, 128),
    "codellama/CodeLlama-70b-hf": (69.0e9, None, 80, 8192, 8, 128),
    "google/codegemma-7b": (8.54e9, None, 28, 4096, 16, 256),
    "google/codegemma-1.1-2b": (2.51e9, None, 18, 2048, 1, 256),
}


def mlenergy_work(t: pd.DataFrame) -> pd.DataFrame:
    """``t`` (:func:`mlenergy_table`) with each run's decoding-step work per GPU (``flops``,
    ``bytes``: :func:`perfseer.energy.llm.decode_work` at the run's mean batch, a mean context of
    the mean output length: the prompt plus half the output, taking a prompt of about half the
    output, which the leaderboard does not record per run)."""
    from perfseer.energy.llm import decode_work

    fl, by = [], []
    for r in t.itertuples():
        n, act, layers, d_attn, kv, hd = ARCHITECTURES[r.model]
        w = decode_work(n, layers, kv, hd, d_attn, batch=r.avg_bs, context=r.out_tokens, gpus=int(r.gpus),
                        active_params=act)
        fl.append(w.flops)
        by.append(w.bytes)
    return t.assign(flops=fl, bytes=by)


def mlenergy_table(root: Path = MLENERGY) -> pd.DataFrame:
    """One row per serving run (task, model, max batch, TP, PP), with what was measured and
    per-GPU power ``power_w`` = energy per request x requests per second / GPUs, where requests
    per second = output tokens per second / output tokens per request."""
    rows = []
    for f in sorted(root.glob("*/A100-SXM4-40GB/*/*/bs*+tp*+pp*.json")):
        d = json.loads(f.read_text())
        rows.append({"task": f.parts[-5], "model": d["Model"], "tp": int(d["TP"]), "pp": int(d["PP"]),
                     "max_bs": int(d["Max BS (reqs)"]), "avg_bs": float(d["Avg BS (reqs)"]),
                     "tpot_s": float(d["Avg TPOT (s)"]), "tokens_per_s": float(d["Token tput (tok/s)"]),
                     "out_tokens": float(d["Avg Output Tokens"]), "energy_per_req_j": float(d["Energy/req (J)"]),
                     "file": str(f.relative_to(root))})
    t = pd.DataFrame(rows)
    if t.empty:
        raise SystemExit(f"no ML.ENERGY runs under {root}")
    t["gpus"] = t["tp"] * t["pp"]
    t["energy_per_token_j"] = t["energy_per_req_j"] / t["out_tokens"]
    t["power_w"] = t["energy_per_token_j"] * t["tokens_per_s"] / t["gpus"]
    return t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", choices=["h200", "mlenergy"])
    ap.add_argument("--work", default=str(ROOT / ".bench-work" / "energy-h200"))
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args(argv)
    if args.source == "h200":
        recs = h200_records(Path(args.work), log=lambda m: print(m, file=sys.stderr, flush=True), limit=args.limit)
        ok = [r for r in recs if "error" not in r]
        print(f"{len(ok)} of {len(recs)} rows with kernels")
    else:
        t = mlenergy_table()
        print(t.describe().T.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
