"""The numeric precision a model computes in: per operator, per element type, and the dominant one.

An operator's *compute type* is the element type of its operands as a runtime executes them:

* a tensor produced by ``DequantizeLinear`` counts as its quantized (integer) input, because
  runtimes fuse QDQ pairs into integer kernels, and a folded ``DequantizeLinear`` of a weight
  already leaves the integer weight in the graph (:mod:`perfseer.graph.extract`);
* an operator with two 8-bit integer operands (``QLinearConv``, ``MatMulInteger``, a Conv
  between QDQ pairs) computes in ``int8`` (``uint8`` activations times ``int8`` weights included);
  one with a float and an integer operand (weight-only quantization) computes in the float type;
* otherwise the first floating-point operand's type, else the first output's.

:func:`precision` is the type holding most MACs (most FLOPs for a model without MACs): the
``precision`` field of ``PerfGraph.summary()``, which a predictor's domain of validity compares
with the precisions it was trained on.  It is deliberately not a feature column: the feature
schema (and every bundled predictor) stays as it is.
"""

from __future__ import annotations

from collections import defaultdict

from perfseer.graph.ir import FLOAT_DTYPES, Graph, TensorKind

INT8_TYPES = frozenset({"int8", "uint8"})
# Operators whose quantized operands are at known positions (activation, weight).
_QUANT_OPERANDS = {
    "QLinearConv": (0, 3), "QLinearMatMul": (0, 3), "ConvInteger": (0, 1), "MatMulInteger": (0, 1),
    "QGemm": (0, 3), "MatMulIntegerToFloat": (0, 1), "DynamicQuantizeMatMul": (1, 1), "DynamicQuantizeLSTM": (1, 2),
    "QLinearAdd": (0, 3), "QLinearMul": (0, 3), "QLinearGlobalAveragePool": (0, 0),
}


def node_compute_dtypes(graph: Graph) -> list[str]:
    """The compute element type of every node of ``graph`` (ONNX names: ``float32``, ``int8``...)."""
    producer = {o: n for n in graph.nodes for o in n.outputs if o}

    def effective(name: str) -> str | None:
        t = graph.tensors.get(name) if name else None
        if t is None:
            return None
        p = producer.get(name)
        if p is not None and p.op_type == "DequantizeLinear" and p.inputs:
            src = graph.tensors.get(p.inputs[0])
            if src is not None:
                return src.dtype
        return t.dtype

    out = []
    for node in graph.nodes:
        if node.op_type in _QUANT_OPERANDS and node.domain in ("", "ai.onnx", "com.microsoft"):
            dtypes = [effective(node.inputs[i]) for i in _QUANT_OPERANDS[node.op_type] if i < len(node.inputs)]
        else:
            dtypes = [effective(i) for i in node.inputs[:2] if i]
        dtypes = [d for d in dtypes if d is not None]
        if len(dtypes) >= 1 and all(d in INT8_TYPES for d in dtypes):
            out.append("int8")
            continue
        floats = [d for d in dtypes if d in FLOAT_DTYPES]
        if floats:
            out.append(floats[0])
            continue
        first = next((graph.tensors[o] for o in node.outputs if o in graph.tensors), None)
        out.append(first.dtype if first is not None else "float32")
    return out


def totals_by_dtype(dtypes: list[str], values) -> dict[str, float]:
    """Sum ``values`` (one per node) by compute type, largest first, zeros left out."""
    acc: dict[str, float] = defaultdict(float)
    for d, v in zip(dtypes, values):
        if v:
            acc[d] += float(v)
    return dict(sorted(acc.items(), key=lambda kv: -kv[1]))


def params_by_dtype(graph: Graph) -> dict[str, int]:
    """Trainable parameters by stored element type (int8 weights of a quantized model included)."""
    acc: dict[str, int] = defaultdict(int)
    for t in graph.tensors.values():
        if t.kind is TensorKind.PARAMETER:
            acc[t.dtype] += t.numel
    return dict(sorted(acc.items(), key=lambda kv: -kv[1]))


def dominant(macs_by_dtype: dict[str, float], flops_by_dtype: dict[str, float]) -> str:
    """The compute type holding most MACs, or most FLOPs when there are no MACs."""
    table = macs_by_dtype or flops_by_dtype
    return max(table, key=table.get) if table else "float32"
