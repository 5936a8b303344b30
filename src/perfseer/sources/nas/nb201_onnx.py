"""NAS-Bench-201 networks emitted directly as ONNX graphs: milliseconds per architecture.

Exporting each of the 12,500 networks through ``torch.onnx`` takes seconds apiece (hours for
the space); the networks are so regular that writing their graph with ``onnx.helper`` is simple.
The graph is the one the PyTorch builder (:mod:`.nb201`) exports, operator for operator: same
operators, attributes, shapes and parameters, the same zero node (``cell_input * 0`` when read)
and the same extra outputs for nodes no edge reads — ``tests/graph/test_spaces.py`` checks that the
two give identical PerfGraph features.  Weights are declared, never written (graph-only skeleton).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from perfseer.graph.onnx_io import NOT_EXPORTED, Skeleton
from perfseer.graph.torch_export import META_BUFFERS, META_SOURCE
from perfseer.sources.nas.nb201 import CELLS_PER_STAGE, CHANNELS, NODES, NUM_CLASSES, parse_nb201

_OPSET = 20


def external_weight(name: str, dims: tuple[int, ...]) -> TensorProto:
    """A float initializer that names its shape but holds no data (skeletons carry no weights)."""
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    entry = t.external_data.add()
    entry.key, entry.value = "location", NOT_EXPORTED
    return t


class _Graph:
    def __init__(self):
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self.small: list[onnx.TensorProto] = []
        self.buffers: list[str] = []
        self.count = 0

    def tmp(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = self.tmp(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def weight(self, name: str, dims: tuple[int, ...], buffer: bool = False) -> str:
        self.weights.append(external_weight(name, dims))
        if buffer:
            self.buffers.append(name)
        return name

    def const(self, value) -> str:
        name = self.tmp("const")
        self.small.append(numpy_helper.from_array(np.asarray(value), name))
        self.buffers.append(name)
        return name

    def batch_norm(self, x: str, c: int, prefix: str) -> str:
        return self.op("BatchNormalization", [
            x, self.weight(f"{prefix}.weight", (c,)), self.weight(f"{prefix}.bias", (c,)),
            self.weight(f"{prefix}.running_mean", (c,), buffer=True),
            self.weight(f"{prefix}.running_var", (c,), buffer=True)], epsilon=1e-5, momentum=0.9)

    def conv(self, x: str, c_in: int, c_out: int, k: int, stride: int, pad: int, prefix: str) -> str:
        w = self.weight(f"{prefix}.weight", (c_out, c_in, k, k))
        return self.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                       dilations=[1, 1], group=1)

    def relu_conv_bn(self, x: str, c_in: int, c_out: int, k: int, stride: int, pad: int, prefix: str) -> str:
        y = self.conv(self.op("Relu", [x]), c_in, c_out, k, stride, pad, f"{prefix}.1")
        return self.batch_norm(y, c_out, f"{prefix}.2")

    def avg_pool(self, x: str, k: int, stride: int, pad: int, include_pad: int = 0) -> str:
        return self.op("AveragePool", [x], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                       count_include_pad=include_pad, ceil_mode=0)


def _cell(g: _Graph, x: str, genotype, c: int, prefix: str) -> tuple[str, list[str]]:
    nodes: list[str | None] = [x]
    zero: list[str] = []

    def read(j: int) -> str:
        if nodes[j] is not None:
            return nodes[j]
        if not zero:
            zero.append(g.op("Mul", [x, g.op("Constant", [], value=numpy_helper.from_array(np.array(0.0, np.float32)))]))
        return zero[0]

    for i, ops in enumerate(genotype, start=1):
        total = None
        for j, op in enumerate(ops):
            if op == "none":
                continue
            src, edge = read(j), f"{prefix}.edges.{j}->{i}"
            if op == "skip_connect":
                term = src
            elif op == "avg_pool_3x3":
                term = g.avg_pool(src, 3, 1, 1)
            else:
                k = 3 if op == "nor_conv_3x3" else 1
                term = g.relu_conv_bn(src, c, c, k, 1, k // 2, edge)
            total = term if total is None else g.op("Add", [total, term])
        nodes.append(total)
    read_nodes = {j for ops in genotype for j, op in enumerate(ops) if op != "none"}
    computed = {i for i, ops in enumerate(genotype, start=1) if any(op != "none" for op in ops)}
    unused = sorted((computed - read_nodes) - {NODES - 1})
    return read(NODES - 1), [nodes[j] for j in unused]


def nb201_skeleton(arch_str: str, input_shape=(3, 32, 32)) -> Skeleton:
    """The graph-only ONNX skeleton of the NAS-Bench-201 network of ``arch_str``."""
    genotype = parse_nb201(arch_str)
    g = _Graph()
    x = g.conv("x", input_shape[0], CHANNELS, 3, 1, 1, "stem.0")
    x = g.batch_norm(x, CHANNELS, "stem.1")
    width, extra, block = CHANNELS, [], 0
    for stage in range(3):
        if stage:
            p = f"cells.{block}"
            a = g.relu_conv_bn(x, width, width * 2, 3, 2, 1, f"{p}.conv_a")
            b = g.relu_conv_bn(a, width * 2, width * 2, 3, 1, 1, f"{p}.conv_b")
            # nn.AvgPool2d's default counts padding (there is none here, but the attribute shows).
            s = g.conv(g.avg_pool(x, 2, 2, 0, include_pad=1), width, width * 2, 1, 1, 0, f"{p}.shortcut.1")
            x, width, block = g.op("Add", [b, s]), width * 2, block + 1
        for _ in range(CELLS_PER_STAGE):
            x, unused = _cell(g, x, genotype, width, f"cells.{block}")
            extra.extend(unused)
            block += 1
    x = g.op("Relu", [g.batch_norm(x, width, "lastact.0")])
    pooled = g.op("ReduceMean", [x, g.const(np.array([-1, -2], np.int64))], keepdims=1)
    flat = g.op("Reshape", [pooled, g.const(np.array([0, -1], np.int64))])
    logits = g.op("Gemm", [flat, g.weight("classifier.weight", (NUM_CLASSES, width)),
                           g.weight("classifier.bias", (NUM_CLASSES,))], transB=1)
    outputs = [logits, *dict.fromkeys(extra)]
    graph = helper.make_graph(
        g.nodes, "nb201", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", *input_shape])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=[*g.weights, *g.small])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="perfseer")
    for key, value in ((META_BUFFERS, json.dumps(g.buffers)), (META_SOURCE, f"nb201:{arch_str}")):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    return Skeleton(model, {t.name for t in g.weights}, f"nb201:{arch_str}", input_shape_applied=True)
