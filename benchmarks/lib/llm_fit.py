"""Fit the LLM operator time model (``perfseer/llm/data/op_model.json``) on Vidur's per-operator
CUDA times, and score it on held-out models and on the other GPU.

Data: ``../shared/datasets/vidur/profiling/compute/{a100,a40}/{org}/{model}/mlp.csv`` (Vidur,
MIT): the median CUDA time of each operator of one transformer layer at 1-4,096 (Llama-3: 32,768)
tokens per step and tensor-parallel degrees 1-8.  The A100 there is Vidur's A100 80GB SXM (a DGX
node); the A40 its 48 GB PCIe card.  Each row's operators are costed by :mod:`perfseer.llm.cost`
from the model's shape (Vidur's own columns) and timed by :mod:`perfseer.llm.timing`; the
constants minimise the squared log error.

Splits (whole models): train on Llama-2-7B, Llama-2-70B, Llama-3-70B, Qwen-72B and Phi-2; hold
out Llama-3-8B, CodeLlama-34B and InternLM-20B.  Cross-GPU: fit on one GPU's training models,
score on every model of the other GPU.  The shipped constants are fitted on the training models
of both GPUs.

Run: ``python -m benchmarks.lib.llm_fit [--write]`` (``--write`` updates the shipped file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from perfseer.devices import DeviceSpec, get_device
from perfseer.devices.registry import UnknownDeviceError
from perfseer.llm import cost
from perfseer.llm.config import ModelConfig
from perfseer.llm.precision import make_quant
from perfseer.llm.timing import OP_MODEL, VEC_KINDS, device_terms, gemm_time_us, vec_time_us

ROOT = Path(__file__).resolve().parents[2]
VIDUR = ROOT.parent / "shared" / "datasets" / "vidur" / "profiling" / "compute"
TRAIN = ("Llama-2-7b-hf", "Llama-2-70b-hf", "Meta-Llama-3-70B", "Qwen-72B", "phi-2")
HELD_OUT = ("Meta-Llama-3-8B", "CodeLlama-34b-Instruct-hf", "internlm-20b")
DEVICES = {"a100": "a100-80gb-sxm", "a40": "a40"}
# Vidur operator -> (our operator name, kind)
OPS = {"emb": "embedding", "input_layernorm": "input_norm", "attn_pre_proj": "qkv_proj", "attn_rope": "rope",
       "attn_post_proj": "out_proj", "post_attention_layernorm": "post_norm", "mlp_up_proj": "mlp_up",
       "mlp_act": "mlp_act", "mlp_down_proj": "mlp_down", "add": "residual_add"}
# the A40's datasheet (NVIDIA A40 datasheet, dense rates), used when the registry has no 'a40'
A40 = DeviceSpec(name="a40", kind="gpu", sms=84, memory_gib=48, mem_bandwidth_gbs=696, cores_per_sm=128, clock_mhz=1740,
                 l2_mib=6, peak_tflops={"fp32": 37.4, "tf32": 74.8, "fp16": 149.7, "bf16": 149.7, "int8": 299.3},
                 source="NVIDIA A40 datasheet (dense = half the sparsity figures)")


def device(gpu: str) -> dict:
    try:
        spec = get_device(DEVICES[gpu])
    except UnknownDeviceError:
        spec = A40
    return device_terms(spec, "fp16")


def load(gpu: str, root: Path = VIDUR) -> pd.DataFrame:
    """One row per (model, tokens, tp, operator) with its measured median time (us), the FLOPs,
    bytes and GEMM shape our cost model gives it, and the model's shape (``hidden``, ``heads``,
    ``kv_heads``, ``ffn``, ``gated``: Vidur's ``n_embd``, ``n_head``, ``n_kv_head``,
    ``n_expanded_embd``, ``use_gated_mlp``)."""
    rows = []
    q = make_quant("fp16")
    for f in sorted((root / gpu).glob("*/*/mlp.csv")):
        model = f.parent.name
        d = pd.read_csv(f)
        r0 = d.iloc[0]
        for (tp,), g in d.groupby(["num_tensor_parallel_workers"]):
            cfg = ModelConfig(name=model, hidden=int(r0.n_embd), layers=1, heads=int(r0.n_head), kv_heads=int(r0.n_kv_head),
                              ffn=int(r0.n_expanded_embd), vocab=int(r0.vocab_size), max_context=1 << 20,
                              gated_mlp=bool(r0.use_gated_mlp), norm="rmsnorm" if r0.use_gated_mlp else "layernorm",
                              act="silu" if r0.use_gated_mlp else "gelu")
            for _, r in g.iterrows():
                T = int(r.num_tokens)
                ops = {o.name: o for o in cost.step_ops(cfg, q, cost.StepShape(tokens=T, seqs=1, pf_pairs=1.0), tp=int(tp))}
                for vop, ours in OPS.items():
                    col = f"time_stats.{vop}.median"
                    if col not in d.columns or not np.isfinite(r[col]) or r[col] <= 0:
                        continue
                    o = ops[ours]
                    rows.append({"gpu": gpu, "model": model, "tp": int(tp), "tokens": T, "op": ours, "kind": o.kind,
                                 "flops": o.flops, "bytes": o.bytes, "M": o.M, "N": o.N, "K": o.K,
                                 "time_us": float(r[col]) * 1000.0, "hidden": cfg.hidden, "heads": cfg.heads,
                                 "kv_heads": cfg.kv_heads, "ffn": cfg.ffn, "gated": cfg.gated_mlp})
    return pd.DataFrame(rows)


def predict(df: pd.DataFrame, c: dict, devs: dict) -> np.ndarray:
    out = np.zeros(len(df))
    for gpu, idx in df.groupby("gpu").groups.items():
        sub = df.loc[idx]
        dev = devs[gpu]
        pos = df.index.get_indexer(idx)
        gm = (sub["kind"] == "gemm").to_numpy()
        t = np.zeros(len(sub))
        t[gm] = gemm_time_us(sub["flops"].to_numpy()[gm], sub["bytes"].to_numpy()[gm], sub["M"].to_numpy()[gm],
                             sub["N"].to_numpy()[gm], sub["K"].to_numpy()[gm], dev, c["gemm"])
        for kind in VEC_KINDS:
            m = (sub["kind"] == kind).to_numpy()
            if m.any():
                t[m] = vec_time_us(sub["bytes"].to_numpy()[m], kind if kind in c["vec"] else "add", dev, c)
        out[pos] = t
    return out


_KINDS_FIT = ("norm", "rope", "act", "add", "emb")


def _unpack(x: np.ndarray, tile: int) -> dict:
    c = {"gemm": {"e_c": float(np.exp(x[0])), "e_m": float(np.exp(x[1])), "p": float(1.0 + np.exp(x[2])),
                  "o": float(np.exp(x[3])), "tile": tile}, "vec": {}}
    for i, k in enumerate(_KINDS_FIT):
        c["vec"][k] = {"e": float(np.exp(x[4 + 3 * i])), "o": float(np.exp(x[5 + 3 * i])),
                       "f": float(np.exp(x[6 + 3 * i]))}
    return c


def fit(df: pd.DataFrame, devs: dict, tile: int = 0) -> dict:
    """Constants minimising the squared log error of every operator time of ``df``."""
    from scipy.optimize import least_squares

    y = np.log(df["time_us"].to_numpy())

    def resid(x):
        return np.log(np.maximum(predict(df, _unpack(x, tile), devs), 1e-9)) - y

    x0 = np.array([np.log(0.7), np.log(0.8), np.log(2.0), np.log(5.0)] + [np.log(0.8), np.log(3.0), np.log(8.0)] * len(_KINDS_FIT))
    r = least_squares(resid, x0, loss="soft_l1", f_scale=0.1, max_nfev=400)
    return _unpack(r.x, tile)


def score(df: pd.DataFrame, c: dict, devs: dict) -> dict:
    """Per-operator absolute percentage errors (mean and median) and the error of the whole layer
    (the sum of its operators) per (model, tokens, tp)."""
    pred = predict(df, c, devs)
    ape = np.abs(pred / df["time_us"].to_numpy() - 1.0)
    d = df.assign(pred=pred, ape=ape)
    layer = d.groupby(["gpu", "model", "tp", "tokens"])[["time_us", "pred"]].sum()
    lape = np.abs(layer["pred"] / layer["time_us"] - 1.0)
    by_op = {op: round(float(g["ape"].mean()) * 100, 1) for op, g in d.groupby("op")}
    by_model = {m: round(float(g["ape"].mean()) * 100, 1) for m, g in d.groupby("model")}
    # time-weighted per-operator error: what the operators that dominate a layer get
    w = d["time_us"] / d["time_us"].sum()
    return {"rows": len(d), "op_mape": round(float(ape.mean()) * 100, 1),
            "op_median_ape": round(float(np.median(ape)) * 100, 1),
            "op_weighted_ape": round(float((w * ape).sum()) * 100, 1),
            "layer_mape": round(float(lape.mean()) * 100, 1), "layer_median_ape": round(float(lape.median()) * 100, 1),
            "by_op": by_op, "by_model": by_model}


def run(write: bool = False, tiles=(0, 64, 128), log=print) -> dict:
    devs = {g: device(g) for g in DEVICES}
    data = {g: load(g) for g in DEVICES}
    a100, a40 = data["a100"], data["a40"]
    tr = lambda d: d[d["model"].isin(TRAIN)].reset_index(drop=True)
    ho = lambda d: d[d["model"].isin(HELD_OUT)].reset_index(drop=True)
    # the tile of the wave model: chosen on the training models of the A100 by the A40 score of
    # the same models (the held-out models and GPUs never choose it)
    best = None
    for t in tiles:
        c = fit(tr(a100), devs, t)
        s = score(tr(a40), c, devs)["op_mape"]
        log(f"tile {t}: A100-train -> A40-train op MAPE {s} %")
        if best is None or s < best[1]:
            best = (t, s)
    tile = best[0]
    c100 = fit(tr(a100), devs, tile)
    c40 = fit(tr(a40), devs, tile)
    both = fit(pd.concat([tr(a100), tr(a40)], ignore_index=True), devs, tile)
    res = {
        "tile": tile,
        "a100_train_fit": score(tr(a100), c100, devs),
        "a100_heldout_models": score(ho(a100), c100, devs),
        "a100_to_a40_all": score(a40, c100, devs),
        "a40_to_a100_all": score(a100, c40, devs),
        "a40_heldout_models": score(ho(a40), c40, devs),
        "shipped_heldout_a100": score(ho(a100), both, devs),
        "shipped_heldout_a40": score(ho(a40), both, devs),
    }
    for k, v in res.items():
        if isinstance(v, dict):
            log(f"{k:>24}: op MAPE {v['op_mape']} % (median {v['op_median_ape']}, time-weighted {v['op_weighted_ape']}), "
                f"layer MAPE {v['layer_mape']} %  [{v['rows']} rows]")
    if write:
        out = {
            "format": "perfseer.llm.op_model", "format_version": 1,
            "fitted_by": "python -m benchmarks.lib.llm_fit --write",
            "data": "Vidur profiling/compute (MIT), A100 80GB SXM and A40, per-operator median CUDA times of one layer",
            "train_models": list(TRAIN), "held_out_models": list(HELD_OUT),
            "gemm": both["gemm"], "vec": {**both["vec"], "copy": both["vec"]["add"], "softmax": both["vec"]["norm"]},
            "moe_overhead_us": 10.0,
            "attention": {"prefill_compute_eff": 0.45, "decode_bw_eff": 0.7, "o": 8.0,
                          "source": "not in the fitting data (Vidur's snapshot has no attention kernels): FlashAttention-2 "
                                    "forward reaches about 50-70 % of an A100's fp16 peak at long sequences and less at "
                                    "short ones (Dao, 2023, fig. 4-5); vLLM's paged attention reads the KV cache at "
                                    "about 70 % of peak bandwidth (Kwon et al., SOSP'23). Checked end to end against "
                                    "ML.ENERGY's vLLM runs (benchmarks suite llm)."},
            "scores": {k: {kk: vv for kk, vv in v.items() if kk not in ("by_model",)} if isinstance(v, dict) else v
                       for k, v in res.items()},
        }
        OP_MODEL.write_text(json.dumps(out, indent=1) + "\n")
        log(f"wrote {OP_MODEL}")
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="update perfseer/llm/data/op_model.json")
    args = ap.parse_args(argv)
    if not VIDUR.exists():
        print(f"error: no Vidur data at {VIDUR}", file=sys.stderr)
        return 2
    run(write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
