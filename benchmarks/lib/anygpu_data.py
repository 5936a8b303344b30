"""Every GPU measurement the project has, as whole-step labels with their kernel tables: the data
of the any-GPU model's leave-one-GPU-out (:mod:`benchmarks.lib.anygpu_logo`).

Sources (one row per measured step; ``kind`` cnn / transformer, ``phase`` infer / train,
``precision`` fp32 / fp16 / amp):

- ``gpu-benchmark``: ``../shared/datasets/gpu-benchmark``, 15-32 torchvision CNNs at batch 12 on a
  GTX 1080 Ti, Titan Xp, Titan V and RTX 2080 Ti (one GPU), fp32 and ``model.half()`` fp16,
  inference and the training step without optimizer; the step includes the host-to-device copy
  of the batch (``h2d_bytes``).  Median of the timed steps.
- ``timm``: ``datasets/timm`` (the timm benchmark), AMP NCHW eager: RTX 3090 (PyTorch 2.4
  inference, 1.12 training step with SGD), RTX 4090 / 5090 / PRO 6000 Max-Q (2.9.1 inference); a
  hashed sample of models per setting.
- ``nb201``: ``datasets/nb201`` (HELP's NAS-Bench-201 latencies), fp32 inference at batch 1, 32
  and 256 on a GTX 1080 Ti, RTX 2080 Ti, Titan RTX, Titan X (Pascal) and Titan Xp; a hashed
  sample of architectures.
- ``h200``: ``datasets/h200`` (perfseer's own collection): timm and ``space:`` models, AMP and
  fp32, inference and AdamW training steps (every training and fp32 row, the AMP inference rows
  of the models with a training row, and 10 more by a hash of the model name).
- ``neusight``: NeuSight's end-to-end transformer runs with a per-operator trace (BERT-large,
  GPT-2 large, GPT-3 XL / 2.7B, OPT-1.3B, Switch) on P4, P100, T4, V100, A100-40GB and the AMD
  MI100 / MI210, fp32, inference and training (forward + backward).
- ``vidur``: ``../shared/datasets/vidur/profiling/compute`` (Vidur, MIT; read by
  :func:`benchmarks.lib.llm_fit.load`): the median CUDA time of single operators of one LLM layer
  (Llama-2 7B / 70B, Llama-3 8B / 70B (A100 only), CodeLlama-34B, InternLM-20B, Qwen-72B, Phi-2)
  in fp16 on an A100 80GB SXM (``a100-80gb-sxm``: its residual adds stream at 1.8 TB/s, above the
  40 GB A100's 1.56) and an A40.  Each row is a one-kernel "step" of kind ``llm-op``: the QKV,
  output, MLP up and down projections as GEMMs (``M`` = tokens, ``N``/``K`` from the hidden and
  FFN widths and heads over the tensor-parallel degree), the input norm as a row-wise kernel, the
  rotary embedding (not Phi-2's: its partial rotation is not in Vidur's columns), the MLP
  activation and the residual add as element-wise ones.  Sample: per (model, tensor-parallel
  degree, power-of-two bin of ``num_tokens``) the token count with the smallest hash (the same
  on both GPUs); the embedding (several kernels under vocabulary parallelism) and the
  post-attention norm (the input norm's shape again) are left out.  Labels are kernel times:
  their setting has no host or step overhead (``KERNEL_TIME_SETTINGS``).  ``vidur-gemm``: the
  four projections only.  Neither is in the default :data:`SOURCES` (``--sources`` adds one): in
  the leave-one-GPU-out both made held-out H200 cells worse (all operators: by 6-16 points on
  its CNN cells; the GEMMs: by 1-2 points on four cells).

Kernel tables are device-independent (:mod:`perfseer.specmodel.compose`); they are cached as
parquet under ``--cache`` (one file per source), so a second build reads them.

    python -m benchmarks.lib.anygpu_data --cache .bench-work/anygpu-cache [--quick]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "datasets"
KCOLS = ["family", "flops", "bytes", "dtype_bytes", "B", "M", "N", "K", "kernel", "rows", "cols", "elems", "inputs",
         "weights", "pass", "scale"]  # perfseer.specmodel.kernels.COLUMNS + pass and repetitions

GPU_BENCH = {  # folder, file prefix -> registry name
    "gtx1080ti": ("1080TI", "GeForce GTX 1080 Ti_{prec}_model_{ph}_benchmark.csv", {"fp32": "single", "fp16": "half"},
                  {"infer": "inference", "train": "training"}),
    "titan-v": ("TitanV", "TITAN V_{prec}_model_{ph}_benchmark.csv", {"fp32": "single", "fp16": "half"},
                {"infer": "inference", "train": "training"}),
    "titan-xp": ("TITANXP", "TITAN Xp_1_gpus__{prec}_model_{ph}_benchmark.csv", {"fp32": "float", "fp16": "half"},
                 {"infer": "inference", "train": "train"}),
    "rtx2080ti": ("2080TI", "GeForce RTX 2080 Ti_1_gpus__{prec}_model_{ph}_benchmark.csv", {"fp32": "float", "fp16": "half"},
                  {"infer": "inference", "train": "training"}),
}
TIMM = {"rtx3090/amp-nchw-pt240": ("rtx3090", "infer", "sgd"), "rtx4090/amp-nchw-pt291": ("rtx4090", "infer", "sgd"),
        "rtx5090/amp-nchw-pt291": ("rtx5090", "infer", "sgd"),
        "rtxpro6000maxq/amp-nchw-pt291": ("rtx-pro-6000-maxq", "infer", "sgd"),
        "rtx3090/amp-nchw-pt112": ("rtx3090", "train", "sgd")}
NB201 = {"1080ti": "gtx1080ti", "2080ti": "rtx2080ti", "titan_rtx": "titan-rtx", "titanx": "titan-x-pascal",
         "titanxp": "titan-xp"}


def hkey(s: str) -> str:
    return hashlib.sha1(s.encode()).hexdigest()


def kind_of(table: pd.DataFrame) -> str:
    """``cnn`` when convolutions hold most of the step's FLOPs, else ``transformer``."""
    f = table["flops"].to_numpy() * table["scale"].to_numpy()
    conv = f[(table["family"] == "conv").to_numpy()].sum()
    return "cnn" if conv > 0.5 * max(f.sum(), 1.0) else "transformer"


def graph_tables(x, ops, edge_index, params: float, dropout=(), phases=("infer",), precisions=("fp32",),
                 optimizer: str | None = "adamw") -> dict:
    """``{(phase, precision): kernel table}`` of one graph (``KCOLS`` columns)."""
    from perfseer.specmodel.compose import step_kernels

    out = {}
    for ph in phases:
        for p in precisions:
            t = step_kernels(x, ops, phase=ph, precision=p, optimizer=optimizer or "adamw",
                             params=params if optimizer else 0.0, edge_index=edge_index, dropout=dropout)
            t["scale"] = 1.0
            out[(ph, p)] = t[KCOLS].copy()
    return out


def _pg_tables(pg, **kw) -> dict:
    return graph_tables(pg.x.astype(np.float64), pg.op_types, pg.edge_index, float(pg.params),
                        dropout=pg.dropout_elements, **kw)


def _store(rows: list, tables: dict, key: str, t: pd.DataFrame, **row) -> None:
    tables.setdefault(key, t)
    rows.append({"key": key, **row})


def gpu_benchmark(quick: bool, log) -> tuple[list, dict]:
    from perfseer.features.extract import extract

    base = SHARED / "gpu-benchmark" / "results"
    labels = []
    for gpu, (folder, pat, precs, phs) in GPU_BENCH.items():
        for p, ptag in precs.items():
            for ph, phtag in phs.items():
                f = base / folder / pat.format(prec=ptag, ph=phtag)
                df = pd.read_csv(f)
                for m in df.columns:
                    v = pd.to_numeric(df[m], errors="coerce").dropna().to_numpy()
                    if len(v) >= 3:
                        labels.append((gpu, m, ph, p, float(np.median(v[1:]))))
    models = sorted({m for _, m, *_ in labels})
    if quick:
        models = models[::4]
    rows, tables = [], {}
    for i, m in enumerate(models):
        try:
            pg = extract(f"torchvision:{m}", batch=12)
        except Exception as e:  # noqa: BLE001 - a model that does not export is reported, not fatal
            log(f"  torchvision:{m}: {type(e).__name__}: {e}")
            continue
        tb = _pg_tables(pg, phases=("infer", "train"), precisions=("fp32", "fp16"), optimizer=None)
        for gpu, mm, ph, p, ms in labels:
            if mm == m:
                _store(rows, tables, f"tv:{m}:{ph}:{p}", tb[(ph, p)], source="gpu-benchmark", gpu=gpu,
                       model=f"torchvision:{m}", phase=ph, precision=p, batch=12, measured_ms=ms,
                       h2d_bytes=12 * 3 * 224 * 224 * (4 if p == "fp32" else 2))
        log(f"  gpu-benchmark {i + 1}/{len(models)} {m}")
    return rows, tables


def timm(quick: bool, log, per_setting: int) -> tuple[list, dict]:
    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.features.pyg import OP_VOCAB

    ds = load_dataset(resolve_dataset("timm"))
    lab = ds.labels
    lab = lab[lab["device"].isin(list(TIMM)) & lab["latency_ms"].notna()]
    n = max(per_setting // (4 if quick else 1), 8)
    rows, tables = [], {}
    for setting, (gpu, ph, opt) in TIMM.items():
        s = lab[(lab["device"] == setting) & (lab["phase"] == ph)]
        keep = sorted(s["model"].unique(), key=hkey)[:n]
        s = s[s["model"].isin(keep)]
        for r in s.itertuples():
            key = f"timm:{int(r.graph)}:{ph}"
            if key not in tables:
                d = ds.graphs[int(r.graph)]
                x = d.x.numpy().astype(np.float64)
                ops = [OP_VOCAB[int(o)] for o in d.op_type]
                params = float(x[:, _col("weight_bytes")].sum() / 4.0)
                t = graph_tables(x, ops, d.edge_index.numpy(), params, phases=(ph,), precisions=("fp16",),
                                 optimizer=opt)[(ph, "fp16")]
            else:
                t = tables[key]
            _store(rows, tables, key, t, source="timm", gpu=gpu, model=r.model, phase=ph, precision="amp",
                   batch=int(r.batch_size), measured_ms=float(r.latency_ms), h2d_bytes=0.0)
        log(f"  timm {setting}: {len(s)} rows")
    return rows, tables


def _col(name: str) -> int:
    from perfseer.features import schema

    return list(schema.NODE_FEATURES).index(name)


def nb201(quick: bool, log, archs: int) -> tuple[list, dict]:
    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.features.pyg import OP_VOCAB

    ds = load_dataset(resolve_dataset("nb201"))
    lab = ds.labels
    lab = lab[lab["device"].isin(list(NB201)) & lab["latency_ms"].notna() & (lab["latency_ms"] > 0.05)]
    keep = sorted(lab["model"].unique(), key=hkey)[: max(archs // (4 if quick else 1), 5)]
    lab = lab[lab["model"].isin(keep)]
    rows, tables = [], {}
    for r in lab.itertuples():
        key = f"nb201:{int(r.graph)}"
        if key not in tables:
            d = ds.graphs[int(r.graph)]
            ops = [OP_VOCAB[int(o)] for o in d.op_type]
            t = graph_tables(d.x.numpy().astype(np.float64), ops, d.edge_index.numpy(), 0.0)[("infer", "fp32")]
        else:
            t = tables[key]
        _store(rows, tables, key, t, source="nb201", gpu=NB201[r.device], model=r.model, phase="infer",
               precision="fp32", batch=int(r.batch_size), measured_ms=float(r.latency_ms), h2d_bytes=0.0)
    log(f"  nb201: {len(rows)} rows")
    return rows, tables


def h200(quick: bool, log, extra_amp_infer: int = 10) -> tuple[list, dict]:
    """The H200 rows: every training and fp32 row, the AMP inference rows of the models that have a
    training row (the calibration set), and ``extra_amp_infer`` more by a hash of the model name
    (exporting is slow); each model exported once and re-bound to each batch."""
    from perfseer.features.extract import extract

    with open(ROOT / "datasets" / "h200" / "h200-torch-cuda.csv", newline="") as fh:
        recs = list(csv.DictReader(fh))
    trained = {r["model"] for r in recs if r["phase"] == "train"}
    amp_infer = sorted({r["model"] for r in recs if r["phase"] == "infer" and r["precision"] != "fp32"} - trained,
                       key=hkey)
    keep = trained | {r["model"] for r in recs if r["precision"] == "fp32"} | set(amp_infer[:extra_amp_infer])
    if quick:
        keep = {m for m in keep if hkey(m)[0] in "01234567"}
    recs = [r for r in recs if r["model"] in keep]
    rows, tables, graphs = [], {}, {}
    for i, r in enumerate(recs):
        p = "fp32" if r["precision"] == "fp32" else "fp16"
        b, ph = int(r["batch_size"]), r["phase"]
        key = f"h200:{hkey(r['model'])[:12]}:{b}:{ph}:{p}"
        if key not in tables:
            if r["model"] not in graphs:
                try:
                    graphs[r["model"]] = extract(r["model"], batch=b)
                except Exception as e:  # noqa: BLE001
                    log(f"  {r['model'][:60]}: {type(e).__name__}: {str(e)[:100]}")
                    graphs[r["model"]] = None
            pg = graphs[r["model"]]
            if pg is None:
                continue
            pg = pg if pg.batch_size == b else pg.with_batch(b)
            t = _pg_tables(pg, phases=(ph,), precisions=(p,), optimizer=r.get("optimizer") or "adamw")[(ph, p)]
        else:
            t = tables[key]
        _store(rows, tables, key, t, source="h200", gpu="h200", model=r["model"], phase=ph,
               precision="amp" if p == "fp16" else "fp32", batch=b, measured_ms=float(r["latency_ms"]), h2d_bytes=0.0)
        log(f"  h200 {i + 1}/{len(recs)} ({len(graphs)} models exported)")
    return rows, tables


def neusight(quick: bool, log) -> tuple[list, dict]:
    from perfseer.specmodel.neusight import AMD_LABEL_DIRS, LABEL_DIRS, load_workloads

    root = SHARED / "neusight"
    rows, tables = [], {}
    for dirs in (LABEL_DIRS, AMD_LABEL_DIRS):
        for w in load_workloads(root, label_dirs=dirs):
            key = f"neusight:{w.device}:{w.name}"
            t = w.trace.copy()
            _store(rows, tables, key, t[KCOLS], source="neusight", gpu=w.device, model=w.model + f"-{w.seq_len}-{w.batch}",
                   phase=w.phase, precision="fp32", batch=int(w.batch), measured_ms=float(w.e2e_ms), h2d_bytes=0.0,
                   workload=w.name)
    log(f"  neusight: {len(rows)} rows")
    return rows, tables


VIDUR_OPS = ("qkv_proj", "out_proj", "mlp_up", "mlp_down", "input_norm", "rope", "mlp_act", "residual_add")


def vidur_table(r) -> pd.DataFrame:
    """The one-kernel table (``KCOLS``, fp16) of one operator row of :func:`benchmarks.lib.llm_fit.load`."""
    from perfseer.specmodel import kernels as kt

    T, h, tp, op = float(r["tokens"]), float(r["hidden"]), float(r["tp"]), r["op"]
    if op in ("qkv_proj", "out_proj", "mlp_up", "mlp_down"):
        t = kt.gemm_rows(1, r["M"], r["N"], r["K"], dtype_bytes=2.0, shared_b=1.0)
    elif op == "input_norm":
        t = kt.rowwise_rows("ln", T, h, dtype_bytes=2.0)
    elif op == "rope":  # in place over the query and key heads of this GPU (perfseer.llm.cost: 4 FLOPs each)
        elems = float(r["flops"]) / 4.0
        t = kt.vec_rows(elems, 1, 4, dtype_bytes=2.0)
    elif op == "mlp_act":  # gated: silu(gate) * up, reading both halves of the up projection
        t = kt.vec_rows(T * float(r["ffn"]) / tp, 2 if r["gated"] else 1, 5 if r["gated"] else 8, dtype_bytes=2.0)
    elif op == "residual_add":
        t = kt.vec_rows(T * h, 2, 1, dtype_bytes=2.0)
    else:
        raise ValueError(f"no kernel for the Vidur operator {op!r} (one of {VIDUR_OPS})")
    t["pass"], t["scale"] = "fw", 1.0
    return t[KCOLS]


def vidur_sample(ops: pd.DataFrame, quick: bool = False, keep=VIDUR_OPS) -> pd.DataFrame:
    """The rows of ``ops`` (:func:`benchmarks.lib.llm_fit.load`) in the sample: the operators
    ``keep`` (no rope for Phi-2) at, per (model, tensor-parallel degree, power-of-two bin of
    tokens), the token count with the smallest hash (``quick``: every second bin)."""
    ops = ops[ops["op"].isin(keep) & ~((ops["model"] == "phi-2") & (ops["op"] == "rope"))]
    ops = ops.drop_duplicates(["model", "tp", "tokens", "op"])  # a few (tokens, tp) are profiled twice
    grid = ops[["model", "tp", "tokens"]].drop_duplicates().copy()
    grid["bin"] = np.floor(np.log2(grid["tokens"])).astype(int)
    grid["h"] = [hkey(f"{m}:{tp}:{t}") for m, tp, t in zip(grid["model"], grid["tp"], grid["tokens"])]
    pick = grid.sort_values("h").drop_duplicates(["model", "tp", "bin"])
    if quick:
        pick = pick[pick["bin"] % 2 == 0]
    return ops.merge(pick[["model", "tp", "tokens"]], on=["model", "tp", "tokens"])


def vidur(quick: bool, log, source: str = "vidur") -> tuple[list, dict]:
    """The ``vidur`` source (every operator of :data:`VIDUR_OPS`) or ``vidur-gemm`` (the four GEMMs)."""
    from benchmarks.lib import llm_fit

    rows, tables = [], {}
    for g, name in llm_fit.DEVICES.items():
        ops = llm_fit.load(g)
        if ops.empty:
            log(f"  vidur {g}: no operators")
            continue
        s = vidur_sample(ops, quick, VIDUR_OPS[:4] if source == "vidur-gemm" else VIDUR_OPS)
        for _, r in s.iterrows():
            key = f"vidur:{r['model']}:{r['tp']}:{r['tokens']}:{r['op']}"
            if key not in tables:
                tables[key] = vidur_table(r)
            _store(rows, tables, key, tables[key], source=source, gpu=name, model=f"{r['model']}/{r['op']}/tp{r['tp']}",
                   phase="infer", precision="fp16", batch=int(r["tokens"]), measured_ms=float(r["time_us"]) / 1000,
                   h2d_bytes=0.0, kind="llm-op")
        log(f"  vidur {g}: {len(s)} operators")
    return rows, tables


# sources whose labels are kernel (CUDA) times: their setting's host and step overheads are held at
# nothing (perfseer.specmodel.anygpu.KERNEL_TIME), not fitted
KERNEL_TIME_SETTINGS = ("vidur", "vidur-gemm")
SOURCES = ("neusight", "nb201", "timm", "gpu-benchmark", "h200")
ALL_SOURCES = (*SOURCES, "vidur", "vidur-gemm")  # one of the two vidur sources at a time


def build(cache: Path, quick: bool = False, log=print, timm_per_setting: int = 120, nb201_archs: int = 40,
          sources=SOURCES) -> tuple[pd.DataFrame, dict]:
    """All rows (a frame) and kernel tables (key -> frame), read from ``cache`` where built before."""
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    all_rows, all_tables = [], {}
    for src in sources:
        tag = f"{src}{'-quick' if quick else ''}"
        rp, kp = cache / f"{tag}.rows.parquet", cache / f"{tag}.kernels.parquet"
        if rp.exists() and kp.exists():
            rows = pd.read_parquet(rp)
            k = pd.read_parquet(kp)
            tables = {key: part.drop(columns="key").reset_index(drop=True) for key, part in k.groupby("key", sort=False)}
        else:
            log(f"building {src}")
            fn = {"gpu-benchmark": lambda: gpu_benchmark(quick, log), "timm": lambda: timm(quick, log, timm_per_setting),
                  "nb201": lambda: nb201(quick, log, nb201_archs), "h200": lambda: h200(quick, log),
                  "neusight": lambda: neusight(quick, log), "vidur": lambda: vidur(quick, log),
                  "vidur-gemm": lambda: vidur(quick, log, "vidur-gemm")}[src]
            r, tables = fn()
            rows = pd.DataFrame(r)
            k = pd.concat([t.assign(key=key) for key, t in tables.items()], ignore_index=True)
            for c in KCOLS:
                if c not in ("family", "pass"):
                    k[c] = k[c].astype(float)
            k.to_parquet(kp.with_suffix(".tmp"))
            kp.with_suffix(".tmp").replace(kp)
            rows.to_parquet(rp.with_suffix(".tmp"))
            rp.with_suffix(".tmp").replace(rp)
        rows = rows.copy()
        if "kind" not in rows:  # a source may name its kind (vidur: llm-op); else by the step's FLOPs
            rows["kind"] = [kind_of(tables[k]) for k in rows["key"]]
        all_rows.append(rows)
        all_tables.update(tables)
    df = pd.concat(all_rows, ignore_index=True)
    if "workload" not in df:
        df["workload"] = None
    return df, all_tables


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=str(ROOT / ".bench-work" / "anygpu-cache"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sources", default=",".join(SOURCES), help=f"default: %(default)s; all: {','.join(ALL_SOURCES)}")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    df, _ = build(Path(args.cache), args.quick, log=lambda s: print(s, file=sys.stderr, flush=True),
                  sources=args.sources.split(","))
    print(df.groupby(["source", "gpu", "kind", "phase", "precision"]).size().to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
