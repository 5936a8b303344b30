"""NeuSight's data as kernel tables: the per-kernel measurements (training data of the spec
model) and the per-operator traces of its end-to-end workloads (its evaluation).

Data: ``shared/datasets/neusight/`` (MIT licence; see its README), from the ASPLOS'25 artefact of
NeuSight (Lee, Phanishayee, Mahajan, github.com/sitar-lab/NeuSight).  Kernel rows are single
PyTorch ops in FP32 (cuDNN TF32 off) timed with CUDA events (mean of the 5 fastest of 25), so a
kernel's time includes its launch.  The traces are torch.fx traces of a one-layer copy of each
model, with the measured time of every node; NeuSight multiplies the layer's nodes by the number
of layers and compares the sum with the end-to-end measurement of the full model.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perfseer.errors import PerfseerError
from perfseer.specmodel import kernels as kt
from perfseer.specmodel.backward import backward_kernels

# NeuSight's device names -> registry names.
DEVICES = {
    "Tesla P4": "tesla-p4", "Tesla P100-PCIE-16GB": "tesla-p100-pcie-16gb", "Tesla T4": "t4",
    "Tesla V100-PCIE-32GB": "v100-pcie-32gb", "NVIDIA A100-PCIE-40GB": "a100-40gb-pcie",
    "NVIDIA A100 80GB PCIe": "a100-80gb-pcie", "NVIDIA H100 80GB HBM3": "h100-sxm", "NVIDIA L4": "l4",
}
LABEL_DIRS = {"Tesla_P4": "tesla-p4", "Tesla_P100-PCIE-16GB": "tesla-p100-pcie-16gb", "Tesla_T4": "t4",
              "Tesla_V100-PCIE-32GB": "v100-pcie-32gb", "NVIDIA_A100-PCIE-40GB": "a100-40gb-pcie"}
# The AMD GPUs' labels: never in the spec model's training data (its kernels are NVIDIA's), an unseen vendor.
AMD_LABEL_DIRS = {"AMD_Instinct_MI100": "mi100", "AMD_Instinct_MI210": "mi210"}
# FLOPs per output element of the element-wise kernels (one convention, used for training and prediction)
ELEMWISE_FLOPS = {"add": 1, "sub": 1, "mul": 1, "div": 1, "truediv": 1, "pow": 1, "relu": 1, "gelu": 8, "tanh": 5,
                  "where": 1, "masked_fill": 1, "max": 1, "lt": 1, "gt": 1, "eq": 1, "ne": 1, "dropout": kt.DROPOUT_FLOPS,
                  "cumsum": 1, "copy": 0, "fill": 0, "gather": 0}


class NeuSightDataError(PerfseerError):
    """The NeuSight data folder is missing or not as expected."""


def _check(root: Path) -> Path:
    root = Path(root)
    if not (root / "kernels").is_dir():
        raise NeuSightDataError(f"{root} has no kernels/ folder (not the NeuSight data)",
                                "pass the shared/datasets/neusight folder (--data)")
    return root


def load_kernels(root, devices=None) -> pd.DataFrame:
    """Every NVIDIA kernel measurement as a kernel table with ``device`` (registry name),
    ``op``, ``set`` and ``latency_us`` columns.  AMD rows are left out (their GEMM training sweep is
    not in the snapshot)."""
    root = _check(root)
    parts = []
    read = lambda name: pd.read_csv(root / "kernels" / name, low_memory=False)  # noqa: E731
    d = pd.concat([read("bmm.csv.gz"), read("linear.csv.gz")])
    d = d[d["Device"].isin(DEVICES)]
    lin = (d["OPName"] == "linear").to_numpy()
    B, M, N, K = (d[c].to_numpy(float) for c in "BMNK")
    # bmm: (B x M x N) @ (B x N x K); linear: (B, M, N) through Linear(N, K) = one (B M) x N @ N x K GEMM + bias
    t = kt.gemm_rows(np.where(lin, 1, B), np.where(lin, B * M, M), K, N, bias=lin.astype(float),
                     shared_b=lin.astype(float))
    parts.append(_tag(t, d))
    d = read("conv.csv.gz")
    d = d[d["Device"].isin(DEVICES)]
    t = kt.conv_rows(d["B"], d["Input_Channel"], d["Output_Channel"], d["Kernel_Szie"], d["Input_Size"],
                     d["Input_Size"], d["Stride"], d["Padding"])
    parts.append(_tag(t, d))
    d = read("elementwise.csv.gz")
    d = d[d["Device"].isin(DEVICES)]
    op = d["OPName"].astype(str)
    base = op.str.rstrip("u").where(~op.isin(["relu", "gelu", "tanh"]), op)
    binary = op.isin(["add", "mul", "div", "pow"]).to_numpy()
    n = d["B"].to_numpy(float) * d["H"].to_numpy(float)
    t = kt.vec_rows(n, np.where(binary, 2.0, 1.0), base.map(ELEMWISE_FLOPS).to_numpy(float))
    parts.append(_tag(t, d))
    for fname, fam in (("layernorm.csv.gz", "ln"), ("softmax.csv.gz", "softmax")):
        d = read(fname)
        d = d[d["Device"].isin(DEVICES)]
        parts.append(_tag(kt.rowwise_rows(fam, d["B"], d["H"]), d))
    out = pd.concat(parts, ignore_index=True)
    if devices is not None:
        out = out[out["device"].isin(devices)].reset_index(drop=True)
    return out


def _tag(t: pd.DataFrame, d: pd.DataFrame) -> pd.DataFrame:
    t = t.copy()
    t["device"] = d["Device"].map(DEVICES).to_numpy()
    t["op"] = d["OPName"].astype(str).to_numpy()
    t["set"] = d["Set"].astype(str).to_numpy()
    t["latency_us"] = d["Latency"].to_numpy(float) * 1000.0
    return t


# -- end-to-end workloads ------------------------------------------------------------------------
@dataclass
class Workload:
    """One labelled end-to-end run: a model on a GPU at a sequence length and batch size."""

    device: str  # registry name
    model: str  # NeuSight's config name (bert_large, gpt2_large, ...)
    phase: str  # "infer" or "train"
    seq_len: int
    batch: int
    num_layer: int
    fw_ms: float
    bw_ms: float
    trace: pd.DataFrame  # kernel table with "scale" (times it runs) and "pass" (fw/bw) columns
    node_ms: pd.DataFrame | None = None  # measured time of each traced node: node, fw_ms, bw_ms, scale

    @property
    def e2e_ms(self) -> float:
        return self.fw_ms + self.bw_ms

    @property
    def name(self) -> str:
        return f"{self.model}-{'inf' if self.phase == 'infer' else 'train'}-{self.seq_len}-{self.batch}"


def load_workloads(root, devices=None, label_dirs=None) -> list[Workload]:
    """The end-to-end workloads that have a per-operator trace, of the NVIDIA training GPUs
    (``label_dirs``: label folder -> registry name; default :data:`LABEL_DIRS`, or
    :data:`AMD_LABEL_DIRS`)."""
    root = _check(root)
    out = []
    for folder, dev in (LABEL_DIRS if label_dirs is None else label_dirs).items():
        if devices is not None and dev not in devices:
            continue
        for f in sorted((root / "labels" / folder).glob("*.csv.gz")):
            m = re.fullmatch(r"(.+)-(inf|train)-(\d+)-(\d+)\.csv\.gz", f.name)
            if not m:
                continue  # fusion / distributed variants have no trace
            meta = json.loads(f.with_name(f.name.replace(".csv.gz", ".json")).read_text())
            phase = "infer" if m.group(2) == "inf" else "train"
            raw = pd.read_csv(f)
            trace = trace_kernels(raw, int(meta["num_layer"]), phase)
            out.append(Workload(dev, m.group(1), phase, int(m.group(3)), int(m.group(4)), int(meta["num_layer"]),
                                float(meta["fw_latency"]), float(meta.get("bwall_latency") or 0.0), trace,
                                trace_node_ms(raw, int(meta["num_layer"]))))
    return out


_DTYPE_BYTES = {"torch.float32": 4, "torch.float16": 2, "torch.bfloat16": 2, "torch.int64": 8, "torch.int32": 4,
                "torch.bool": 1, "torch.uint8": 1}
_NO_KERNEL = {"size", "getitem", "view", "permute", "transpose", "reshape", "split", "unsqueeze", "getattr", "dim",
              "finfo", "expand", "to", "type", "type_as", "long", "bool", "float", "contiguous_view", "chunk",
              "squeeze", "flatten", "detach", "Identity"}
_LAYER_RE = re.compile(r"(layer|layers|\.h|block|blocks)\.0['.]")


def trace_node_ms(trace: pd.DataFrame, num_layer: int) -> pd.DataFrame:
    """The measured time of every traced node (``node``, ``fw_ms``, ``bw_ms`` with the gradient
    accumulation, ``scale`` as in :func:`trace_kernels`): what the per-operator error breakdown of
    ``benchmarks/lib/spec_neusight.py`` compares the predicted kernels with."""
    t = trace[trace["op"].isin(["call_module", "call_function", "call_method"])]
    bw = t["bw_latency"].fillna(0).to_numpy(float) + t.get("acc_latency", pd.Series(0.0, index=t.index)).fillna(0).to_numpy(float)
    scale = np.array([float(num_layer) if _LAYER_RE.search(m) else 1.0 for m in t["meta"].astype(str)])
    return pd.DataFrame({"node": t["Name"].astype(str).to_numpy(), "fw_ms": t["fw_latency"].fillna(0).to_numpy(float),
                         "bw_ms": bw, "scale": scale})


def _fn_name(row) -> str:
    op, target = row["op"], str(row["target"])
    if op == "call_module":
        m = re.findall(r"<class '[\w.]*?\.(\w+)'>", str(row["meta"]))
        return m[-1] if m else target
    m = re.match(r"<(?:built-in (?:method|function)|function) (\w+)", target)
    return m.group(1) if m else target


def trace_kernels(trace: pd.DataFrame, num_layer: int, phase: str) -> pd.DataFrame:
    """The kernels of a NeuSight per-operator trace: forward kernels (and for ``train`` the
    backward ones, :mod:`perfseer.specmodel.backward`), each with ``scale`` = how many times it
    runs (``num_layer`` for a node of the traced layer, else 1) and ``pass``."""

    rows = []
    for _, r in trace.iterrows():
        if r["op"] not in ("call_module", "call_function", "call_method"):
            continue
        fn = _fn_name(r)
        shapes = ast.literal_eval(r["input_shapes"]) if isinstance(r["input_shapes"], str) else []
        out_shape = ast.literal_eval(r["output_shape"]) if isinstance(r["output_shape"], str) else ()
        out_shape = tuple(out_shape) if isinstance(out_shape, (tuple, list)) else ()
        db = _DTYPE_BYTES.get(str(r["dtype"]), 4)
        scale = float(num_layer) if _LAYER_RE.search(str(r["meta"])) else 1.0
        k = op_kernels(fn, shapes, out_shape, db, training=phase == "train")
        if k is None or not len(k):
            continue
        k["scale"], k["pass"], k["node"] = scale, "fw", str(r["Name"])
        rows.append(k)
        if phase == "train":
            b = backward_kernels(k, fn)
            if len(b):
                b["scale"], b["pass"], b["node"] = scale, "bw", str(r["Name"])
                rows.append(b)
    return pd.concat(rows, ignore_index=True) if rows else kt.empty_table()


def op_kernels(fn: str, shapes: list, out_shape: tuple, db: int, training: bool) -> pd.DataFrame | None:
    """The forward kernel(s) of one traced PyTorch operation, or ``None`` (no device work: views,
    shape arithmetic, no-op casts; dropout at inference)."""
    numel = lambda s: float(math.prod(s)) if s else 1.0  # noqa: E731
    out_n = numel(out_shape)
    if fn in _NO_KERNEL or out_n <= 1 or not out_shape:
        return None
    tensors = [s for s in shapes if isinstance(s, list) and numel(s) > 1]
    if fn in ("Linear", "linear"):
        x = tensors[0]
        return kt.gemm_rows(1, numel(x[:-1]), out_shape[-1], x[-1], dtype_bytes=db, bias=1, shared_b=1)
    if fn == "Conv1D" or fn == "addmm":  # GPT-2's Conv1D: addmm(bias, x, W)
        (m, k), (_, n) = [s for s in tensors if len(s) == 2][:2]
        return kt.gemm_rows(1, m, n, k, dtype_bytes=db, bias=1, shared_b=1)
    if fn in ("matmul", "bmm", "baddbmm"):
        a, b = tensors[-2], tensors[-1]
        batch = numel(a[:-2]) if len(a) > 2 else 1.0
        return kt.gemm_rows(batch, a[-2], b[-1], a[-1], dtype_bytes=db, shared_b=float(len(b) == 2))
    if fn in ("softmax", "Softmax"):
        s = tensors[0]
        return kt.rowwise_rows("softmax", numel(s[:-1]), s[-1], dtype_bytes=db)
    if fn in ("LayerNorm", "layer_norm"):
        s = tensors[0]
        return kt.rowwise_rows("ln", numel(s[:-1]), s[-1], dtype_bytes=db)
    if fn in ("Embedding", "embedding"):
        idx = numel(tensors[0]) if tensors else out_n / max(out_shape[-1], 1)
        return kt.vec_rows(out_n, 1, 0, dtype_bytes=db, read_bytes=out_n * db + idx * 8, write_bytes=out_n * db)
    if fn in ("Dropout", "dropout"):
        return kt.dropout_rows(out_n, dtype_bytes=db) if training else None
    if fn in ("full", "ones", "zeros", "arange", "fill_", "fill", "zero_"):
        return kt.vec_rows(out_n, 0, 0, dtype_bytes=db)
    if fn == "contiguous":
        return kt.vec_rows(out_n, 1, 0, dtype_bytes=db)
    if fn in ("ReLU", "GELU", "Tanh", "NewGELUActivation", "GELUActivation"):
        fn = {"ReLU": "relu", "Tanh": "tanh"}.get(fn, "gelu")
    flops = ELEMWISE_FLOPS.get(fn.rstrip("_"), 1)
    read = sum(numel(s) for s in tensors) * db
    return kt.vec_rows(out_n, max(len(tensors), 1), flops, dtype_bytes=db, read_bytes=max(read, out_n * db),
                       write_bytes=out_n * db)
