"""A whole model's step from its PerfGraph: node features -> GPU kernels -> summed latency.

How a PerfGraph node becomes kernels (PyTorch eager execution: one kernel per operator):

- ``MatMul``/``Gemm``: a GEMM of ``mm_batch`` products ``mm_m x in_features @ in_features x
  out_features``; a product by one weight matrix (the node's weights are one ``in_features x
  out_features`` matrix) is one GEMM of ``mm_batch * mm_m`` rows, the weight read once: PyTorch
  runs ``nn.Linear`` / ``torch.matmul`` of an N-D input by a 2-D matrix as a single
  ``addmm``/``mm`` over the flattened rows (NeuSight's ``linear`` kernels are measured that way);
- a linear layer's bias: ONNX writes ``nn.Linear`` on an N-D input as ``MatMul`` + ``Add`` of
  the bias; where an ``Add`` of ``out_features`` weights takes the output of a weight
  ``MatMul`` that feeds nothing else (``edge_index`` given), it is the bias of that GEMM (PyTorch's
  ``addmm`` adds it in the same kernel): no kernel of its own, the GEMM has a bias (whose
  gradient a training step reduces);
- ``Conv``/``ConvTranspose``: the implicit GEMM of each group (``M`` = output pixels x batch,
  ``N`` = output channels / groups, ``K`` = MACs / (M N groups)); a depthwise-like convolution
  (grouped, fewer than 8 output channels per group) is a ``vec`` kernel carrying its kernel side
  (``kernel``), output elements (``M``), output channels (``N``) and MACs per output element
  (``K``: the kernel area of a depthwise one), :func:`perfseer.specmodel.kernels.depthwise`;
- attention (an ONNX ``Attention`` node, or the exporter's decomposition of PyTorch's
  ``scaled_dot_product_attention`` into scaled ``MatMul``, ``Softmax``, ``MatMul``): as PyTorch 1.x
  and the math fallback run it, two batched GEMMs (scores, weighted values) and a softmax with the
  score matrix in memory, each attention's kernels numbered in the ``attn`` column
  (:func:`perfseer.specmodel.attention.attention_groups`; 0 elsewhere).  PyTorch 2 runs it as one
  fused kernel: :func:`perfseer.specmodel.attention.fuse_attention` makes that table of this one
  where a basis models the software (the any-GPU model, :mod:`perfseer.specmodel.anygpu`);
- ``LayerNormalization``/``RMSNormalization``: ``ln``; ``Softmax``/``LogSoftmax``: ``softmax``;
- every other operator with memory traffic: one memory-bound ``vec`` kernel reading its inputs
  and weights and writing its output (a reduction counts the elements it reads); pure views (``Reshape``, ``Flatten``, ``Squeeze``,
  ``Unsqueeze``, ``Identity``, ``Dropout`` at inference) launch nothing.

Precision: the graph's float tensors are FP32; at ``fp16``/``bf16`` (autocast) every kernel moves
2 bytes per element and GEMMs/convolutions run at the precision's tensor-core peak.

Training step = forward + backward (:mod:`perfseer.specmodel.backward`: two GEMMs per GEMM, one
gradient kernel per element-wise operator, the parameter gradients accumulated) + the model's
training-mode dropouts, which its eval-mode graph does not have (``dropout``: the element count of
each, recorded at export, :attr:`perfseer.features.perfgraph.PerfGraph.dropout_elements`; forward:
one kernel reading the tensor and writing it scaled and its mask, backward: one multiply) + one
optimizer pass over the parameters (``adamw``: reads parameter, gradient and two moments, writes three;
``sgd`` with momentum: reads three, writes two; 4-byte master weights either way).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfseer.features import schema
from perfseer.specmodel import kernels as kt
from perfseer.specmodel.attention import attention_groups
from perfseer.specmodel.backward import backward_kernels, backward_table

_I = {n: i for i, n in enumerate(schema.NODE_FEATURES)}
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Shape", "Constant", "Size",
            "ConstantOfShape"}
PASS_THROUGH_OPS = {"Add", "Sub", "Sum", "Concat", "Split", "Slice", "Pad", "Expand", "Cast"}
OPTIMIZER_BYTES = {"adamw": (4 * 4, 3 * 4), "sgd": (3 * 4, 2 * 4)}  # (read, write) per parameter
PRECISION_BYTES = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0}
DROPOUT_NODE = -2  # the node index of a training step's dropout kernels (not graph nodes); the optimizer's is -1


def node_kernels(x: np.ndarray, op_types, precision: str = "fp32",
                 edge_index: np.ndarray | None = None) -> pd.DataFrame:
    """Forward kernels of a graph's nodes, a kernel table with a ``node`` (index) and ``op`` column.

    Args:
        x: node features ``[num_nodes, len(schema.NODE_FEATURES)]`` (raw, as in a PerfGraph).
        op_types: the ONNX op type of each node.
        precision: ``fp32``, ``tf32``, ``fp16`` or ``bf16``.
        edge_index: the PerfGraph's ``[2, num_edges]`` data-flow edges; with them a linear
            layer's bias ``Add`` joins its ``MatMul`` (:func:`linear_bias_adds`).
    """
    db = PRECISION_BYTES[precision]
    scale = db / 4.0
    ops = np.asarray(list(op_types), dtype=object)
    col = lambda name: x[:, _I[name]].astype(float)  # noqa: E731
    macs, flops = col("macs"), col("flops")
    inb, outb, wb = col("input_bytes"), col("output_bytes"), col("weight_bytes")
    mm_m, kin, nout, mmb = col("mm_m"), col("in_features"), col("out_features"), col("mm_batch")
    groups, kh, axis, bias = col("groups"), col("kernel_h"), col("axis_size"), col("has_bias")
    out_el = outb / 4.0
    parts = []
    done = np.isin(ops, list(VIEW_OPS))

    def add(t: dict, idx: np.ndarray):  # a kernel table's columns (frame=False), one DataFrame at the end
        t["node"] = idx
        parts.append(t)

    mm_ops = np.isin(ops, ["MatMul", "Gemm", "MatMulInteger", "FusedMatMul"]) & (macs > 0) & ~done
    one_matrix = _one_weight_matrix(x)  # by one 2-D weight: the rows folded into one GEMM
    bias_of = linear_bias_adds(x, ops, edge_index, one_matrix) if edge_index is not None else {}
    has_bias = bias > 0
    for a_node, mm_node in bias_of.items():
        done[a_node] = True
        has_bias[mm_node] = True
    sel = np.flatnonzero(mm_ops)
    if len(sel):
        b, m, k, n = (np.maximum(v[sel], 1.0) for v in (mmb, mm_m, kin, nout))
        m = np.where(np.abs(b * m * k * n - macs[sel]) > 0.01 * macs[sel], macs[sel] / (b * k * n), m)
        one = one_matrix[sel]
        m, b = np.where(one, b * m, m), np.where(one, 1.0, b)
        add(kt.gemm_rows(b, m, n, k, dtype_bytes=db, bias=has_bias[sel].astype(float),
                         shared_b=(wb[sel] > 0).astype(float), frame=False), sel)
        done[sel] = True
    conv = np.isin(ops, ["Conv", "ConvTranspose"]) & (macs > 0) & ~done
    g = np.maximum(groups, 1.0)
    cout = np.maximum(nout, 1.0)
    depthwise = conv & (g > 1) & (cout / g < 8)
    sel = np.flatnonzero(conv & ~depthwise)
    if len(sel):
        mm = out_el[sel] / cout[sel]
        t = kt.gemm_rows(g[sel], mm, cout[sel] / g[sel], macs[sel] / (mm * cout[sel]), dtype_bytes=db, shared_b=1.0,
                         frame=False)
        t["family"], t["kernel"] = np.full(len(sel), "conv", dtype=object), np.maximum(kh[sel], 1.0)
        t["bytes"] = (inb[sel] + wb[sel] + outb[sel]) * scale
        t["weights"] = g[sel] * (cout[sel] / g[sel]) * (macs[sel] / (mm * cout[sel]))
        add(t, sel)
        done[sel] = True
    sel = np.flatnonzero((ops == "Attention") & (macs > 0) & ~done)
    if len(sel):
        length, e, ev, s_ = (np.maximum(v[sel], 1.0) for v in (mm_m, kin, nout, axis))
        bh = macs[sel] / (length * s_ * (e + ev))
        add(kt.gemm_rows(bh, length, s_, e, dtype_bytes=db, frame=False), sel)
        add(kt.rowwise_rows("softmax", bh * length, s_, dtype_bytes=db, frame=False), sel)
        add(kt.gemm_rows(bh, length, ev, s_, dtype_bytes=db, frame=False), sel)
        done[sel] = True
    for fam, names in (("ln", ["LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization"]),
                       ("softmax", ["Softmax", "LogSoftmax"])):
        sel = np.flatnonzero(np.isin(ops, names) & (axis > 0) & ~done)
        if len(sel):
            add(kt.rowwise_rows(fam, out_el[sel] / axis[sel], axis[sel], dtype_bytes=db, frame=False), sel)
            done[sel] = True
    sel = np.flatnonzero(~done & (inb + wb + outb > 0))
    if len(sel):
        # elements of the larger side: a reduction (pooling, ReduceMean) is a pass over its input
        e = np.maximum(np.maximum(out_el[sel], inb[sel] / 4.0), 1.0)
        n_in = np.maximum(np.round(inb[sel] / (4.0 * e)), 1.0)
        t = kt.vec_rows(e, n_in, flops[sel] / e, dtype_bytes=db, read_bytes=(inb[sel] + wb[sel]) * scale,
                        write_bytes=outb[sel] * scale, frame=False)
        dw = depthwise[sel]  # a depthwise convolution: kernel side, output elements, channels, MACs per output
        t["kernel"] = np.where(dw, np.maximum(kh[sel], 1.0), 0.0)
        t["M"], t["N"] = np.where(dw, out_el[sel], 0.0), np.where(dw, cout[sel], 0.0)
        t["K"] = np.where(dw, macs[sel] / np.maximum(out_el[sel], 1.0), 0.0)
        add(t, sel)
    if not parts:
        t = kt.empty_table()
        t["node"], t["op"], t["attn"] = pd.Series(dtype=int), pd.Series(dtype=object), pd.Series(dtype=int)
        return t
    cols = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    order = np.argsort(cols["node"], kind="stable")  # the nodes' order, each node's kernels as added
    t = pd.DataFrame({k: v[order] for k, v in cols.items()})
    t["op"] = ops[t["node"].to_numpy()]
    t["attn"] = attention_groups(x, ops, edge_index)[t["node"].to_numpy()]
    return t


def _one_weight_matrix(x: np.ndarray) -> np.ndarray:
    """Whether each node's weights are one ``in_features x out_features`` matrix (at the element
    size of its output: ``output_bytes / (mm_batch mm_m out_features)``), not a batch of them."""
    col = lambda name: x[:, _I[name]].astype(float)  # noqa: E731
    b, m, k, n = (np.maximum(col(c), 1.0) for c in ("mm_batch", "mm_m", "in_features", "out_features"))
    elem = col("output_bytes") / (b * m * n)
    return (col("weight_bytes") > 0) & (np.abs(col("weight_bytes") - elem * k * n) <= 0.01 * elem * k * n)


def linear_bias_adds(x: np.ndarray, ops, edge_index: np.ndarray, one: np.ndarray | None = None) -> dict[int, int]:
    """``{Add node: MatMul node}`` of the linear layers' biases: an ``Add`` whose weights are
    ``out_features`` values (a bias vector), taking the output of a ``MatMul`` by one weight matrix
    that feeds nothing else, with as many output bytes as that ``MatMul``.  ``one``:
    :func:`_one_weight_matrix` of ``x`` when the caller has it."""
    ops = np.asarray(list(ops), dtype=object)
    e = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    col = lambda name: x[:, _I[name]].astype(float)  # noqa: E731
    wb, kin, nout, outb = col("weight_bytes"), col("in_features"), col("out_features"), col("output_bytes")
    one = _one_weight_matrix(x) if one is None else one
    out_degree = np.bincount(e[0], minlength=len(ops)) if e.size else np.zeros(len(ops), dtype=np.int64)
    if not e.size:
        return {}
    src, dst = e[0], e[1]
    ok = ((ops[dst] == "Add") & (ops[src] == "MatMul") & one[src] & (out_degree[src] == 1) & (wb[dst] > 0)
          & (np.abs(wb[dst] * kin[src] - wb[src]) <= 0.01 * wb[src])  # bias: n values, weight: k n
          & (outb[dst] == outb[src]))
    idx = np.flatnonzero(ok)
    _, first = np.unique(dst[idx], return_index=True)  # the first such edge of each Add
    found = {int(dst[i]): int(src[i]) for i in idx[np.sort(first)]}
    return found


def step_kernels(x: np.ndarray, op_types, phase: str = "infer", precision: str = "fp32",
                 optimizer: str = "adamw", params: float = 0.0, edge_index: np.ndarray | None = None,
                 dropout=()) -> pd.DataFrame:
    """All kernels of one inference (``infer``) or training (``train``) step, with a ``pass``
    column (``fw``, ``bw``, ``opt``); ``edge_index`` as in :func:`node_kernels`.

    ``dropout``: the element count of each dropout a training step applies (a training-mode
    PyTorch module's, :attr:`~perfseer.features.perfgraph.PerfGraph.dropout_elements`); a training
    step adds a forward kernel (:func:`perfseer.specmodel.kernels.dropout_rows`) and its backward
    for each, with node ``-2`` and op ``Dropout``.  Ignored at inference, where dropout is the
    identity."""
    fw = node_kernels(x, op_types, precision, edge_index)
    fw["pass"] = "fw"
    if phase == "infer":
        return fw
    if phase != "train":
        raise ValueError(f"phase must be 'infer' or 'train', got {phase!r}")
    columns = list(fw.columns)
    parts = [{k: fw[k].to_numpy() for k in columns}]  # the tables' columns as arrays, one DataFrame at the end
    ops = parts[0]["op"].astype(object)
    uniq, inv = np.unique(ops.astype(str), return_inverse=True) if len(ops) else (np.zeros(0, str), np.zeros(0, int))
    fns = np.asarray(["add" if op in PASS_THROUGH_OPS else op.lower() for op in uniq], dtype=object)[inv]
    b = backward_table(parts[0], fns, frame=False)  # each forward kernel's gradient kernels, in the forward's order
    if len(b["src"]):
        src = b.pop("src")
        b["node"], b["op"], b["pass"] = parts[0]["node"][src], ops[src], _full(len(src), "bw")
        b["attn"] = parts[0]["attn"][src]
        parts.append(b)
    elems = np.asarray(list(dropout), dtype=float)
    elems = elems[elems > 0]
    if len(elems):
        d = kt.dropout_rows(elems, dtype_bytes=PRECISION_BYTES[precision], frame=False)
        b = backward_table(d, np.full(len(elems), "dropout", dtype=object), frame=False)
        b.pop("src")
        for t, p in ((d, "fw"), (b, "bw")):
            n = len(t["flops"])
            t["node"], t["op"], t["pass"] = np.full(n, DROPOUT_NODE), _full(n, "Dropout"), _full(n, p)
            t["attn"] = np.zeros(n, dtype=np.int64)
            parts.append(t)
    if params > 0:
        rd, wr = OPTIMIZER_BYTES[optimizer]
        o = kt.vec_rows(params, rd / 4, 4, dtype_bytes=4.0, read_bytes=params * rd, write_bytes=params * wr,
                        frame=False)
        o["node"], o["op"], o["pass"] = np.full(1, -1), _full(1, f"optimizer:{optimizer}"), _full(1, "opt")
        o["attn"] = np.zeros(1, dtype=np.int64)
        parts.append(o)
    return pd.DataFrame({k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in columns})


def _full(n: int, text: str) -> np.ndarray:
    return np.full(n, text, dtype=object)



def with_autocast(table: pd.DataFrame) -> pd.DataFrame:
    """The kernels of a step run under PyTorch's autocast, from its kernels ``table`` composed at
    16 bits (``fp16``/``bf16``; its ``pass`` and ``scale`` columns kept where it has them): the
    table with its layer norms at FP32 and the casts autocast adds, appended.

    Under ``torch.autocast`` the parameters stay FP32: every forward GEMM / convolution with a
    weight first casts that weight to 16 bits (one element-wise kernel reading 4 bytes and
    writing 2 per weight, redone each step), and a training step casts the 16-bit gradient back
    to the FP32 parameter's (2 bytes read, 4 written).  Layer norm is on autocast's FP32 list:
    its 16-bit input is cast up, the norm runs in FP32 (twice its 16-bit bytes, its backward
    too) and the next 16-bit operator casts the output back down (two kernels of 6 bytes per
    element); a training step has the two casts' gradients as well."""
    fam = table["family"].to_numpy()
    passes = table["pass"].to_numpy() if "pass" in table else np.full(len(table), "fw", dtype=object)
    scale = table["scale"].to_numpy(dtype=float) if "scale" in table else np.ones(len(table))
    train = bool((passes == "bw").any())
    w = table["weights"].to_numpy(dtype=float)
    parts = []

    def add(t: dict, p: str, sc: np.ndarray):
        t["pass"], t["scale"] = np.full(len(sc), p, dtype=object), sc
        parts.append(t)

    mat = np.isin(fam, ["gemm", "conv"]) & (passes == "fw") & (w > 0)
    if mat.any():
        e = w[mat]
        add(kt.vec_rows(e, 1, 1, dtype_bytes=2.0, read_bytes=4 * e, write_bytes=2 * e, frame=False), "fw", scale[mat])
        if train:
            add(kt.vec_rows(e, 1, 1, dtype_bytes=4.0, read_bytes=2 * e, write_bytes=4 * e, frame=False), "bw",
                scale[mat])
    ln = fam == "ln"
    out = table.copy()
    if ln.any():
        out.loc[ln, "bytes"] = out.loc[ln, "bytes"].to_numpy(dtype=float) * 2.0
        e = table["elems"].to_numpy(dtype=float)[ln]
        for p in ("fw", "bw"):
            sel = passes[ln] == p
            if sel.any():
                ee = e[sel]
                for _ in range(2):
                    add(kt.vec_rows(ee, 1, 1, dtype_bytes=2.0, read_bytes=3 * ee, write_bytes=3 * ee, frame=False), p,
                        scale[ln][sel])
    if not parts:
        return out
    extra = pd.DataFrame({k: np.concatenate([np.asarray(q[k]) for q in parts]) for k in parts[0]})
    for c in out.columns:
        if c not in extra:
            extra[c] = 0.0 if c not in ("node", "op") else (-3 if c == "node" else "Cast")
    return pd.concat([out, extra[list(out.columns)]], ignore_index=True)
