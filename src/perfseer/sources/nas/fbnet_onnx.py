"""FBNet networks emitted directly as ONNX graphs: milliseconds per architecture.

Exporting each of HELP's 4,000 FBNet networks through ``torch.onnx`` takes seconds apiece; the
networks are a fixed chain of conv-BN(-ReLU) stacks, so writing the graph with ``onnx.helper`` is
simple.  The graph is the one the PyTorch builder (:mod:`.fbnet`) exports, operator for operator
as perfseer's extraction sees it: the same device operators in the same order, with the same
names (``blocks.2.shuffle/Transpose``), attributes, shapes and parameters.  What the exporter adds
and extraction folds away is left out: the computed zero bias of every bias-free convolution
(``Shape``/``Expand``/``CastLike``, dropped from the IR) and the ``Concat`` of constants behind each
reshape's target shape (here a ``Constant``).  ``tests/graph/test_fbnet_onnx.py`` checks that the
two give identical PerfGraph features.  Weights are declared, never written (graph-only skeleton).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from perfseer.errors import ShapeError
from perfseer.graph.onnx_io import Skeleton
from perfseer.graph.torch_export import META_BUFFERS, META_SOURCE
from perfseer.sources.nas.fbnet import (HEAD_CHANNELS, INPUT_SHAPE, NUM_CLASSES, STAGE_CHANNELS, STEM_CHANNELS,
                                        BlockSpec, parse_fbnet)
from perfseer.sources.nas.nb201_onnx import external_weight

_OPSET = 20


class _Graph:
    def __init__(self):
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self.buffers: list[str] = []
        self.count = 0
        self.names: dict[str, int] = {}

    def op(self, op_type: str, inputs: list[str], scope: str | None = None, name: str | None = None,
           **attrs) -> str:
        """Append a node; it is named ``scope/OpType`` (``_1``, ``_2`` for repeats), as the exporter
        names the nodes of a module, or ``name``."""
        self.count += 1
        out = f"{op_type.lower()}_{self.count}"
        if name is None:
            base = f"{scope}/{op_type}"
            seen = self.names.get(base, 0)
            self.names[base] = seen + 1
            name = base if seen == 0 else f"{base}_{seen}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def weight(self, name: str, dims: tuple[int, ...], buffer: bool = False) -> str:
        self.weights.append(external_weight(name, dims))
        if buffer:
            self.buffers.append(name)
        return name

    def const(self, values, scope: str) -> str:
        """An int64 vector, as a ``Constant`` node (folded by extraction, as the exporter's are)."""
        return self.op("Constant", [], scope, value=numpy_helper.from_array(np.asarray(values, np.int64)))

    def conv_bn(self, x: str, c_in: int, c_out: int, k: int, stride: int, groups: int, prefix: str,
                relu: bool = True) -> str:
        """:class:`~perfseer.sources.nas.fbnet.ConvBN`: modules ``prefix.0`` (conv, no bias),
        ``prefix.1`` (BN) and ``prefix.2`` (ReLU)."""
        w = self.weight(f"{prefix}.0.weight", (c_out, c_in // groups, k, k))
        y = self.op("Conv", [x, w], f"{prefix}.0", auto_pad="NOTSET", dilations=[1, 1], group=groups,
                    kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride])
        bn = f"{prefix}.1"
        y = self.op("BatchNormalization", [
            y, self.weight(f"{bn}.weight", (c_out,)), self.weight(f"{bn}.bias", (c_out,)),
            self.weight(f"{bn}.running_mean", (c_out,), buffer=True),
            self.weight(f"{bn}.running_var", (c_out,), buffer=True)], bn, epsilon=1e-5, momentum=0.9)
        return self.op("Relu", [y], f"{prefix}.2") if relu else y


def _out_size(size: int, k: int, stride: int) -> int:
    return (size + 2 * (k // 2) - k) // stride + 1


def _block(g: _Graph, x: str, spec: BlockSpec, hw: tuple[int, int], prefix: str) -> tuple[str, tuple[int, int]]:
    """One block at input resolution ``hw``: its output and output resolution."""
    if spec.is_skip:
        if spec.c_in == spec.c_out and spec.stride == 1:
            return x, hw  # nn.Identity exports nothing
        out_hw = tuple(_out_size(s, 1, spec.stride) for s in hw)
        return g.conv_bn(x, spec.c_in, spec.c_out, 1, spec.stride, 1, prefix), out_hw
    mid = spec.c_in * spec.expansion
    y = g.conv_bn(x, spec.c_in, mid, 1, 1, spec.groups, f"{prefix}.expand")
    if spec.groups > 1:
        # ChannelShuffle: reshape to [B, G, C/G, H, W], swap the channel axes, copy (torch's
        # `clone` before the view), reshape back.
        scope = f"{prefix}.shuffle"
        y = g.op("Reshape", [y, g.const([-1, spec.groups, mid // spec.groups, *hw], scope)], scope, allowzero=1)
        y = g.op("Transpose", [y], scope, perm=[0, 2, 1, 3, 4])
        y = g.op("Identity", [y], scope)
        y = g.op("Reshape", [y, g.const([-1, mid, *hw], scope)], scope, allowzero=1)
    out_hw = tuple(_out_size(s, spec.kernel, spec.stride) for s in hw)
    y = g.conv_bn(y, mid, mid, spec.kernel, spec.stride, mid, f"{prefix}.depthwise")
    y = g.conv_bn(y, mid, spec.c_out, 1, 1, spec.groups, f"{prefix}.project", relu=False)
    if spec.residual:
        y = g.op("Add", [x, y], prefix)
    return y, out_hw


def fbnet_skeleton(blocks: str, input_shape=(3, 32, 32)) -> Skeleton:
    """The graph-only ONNX skeleton of the FBNet network of ``blocks`` (22 space-separated choices).

    Raises:
        ModelLoadError: if ``blocks`` is malformed.
    """
    specs = parse_fbnet(blocks)
    if len(input_shape) != 3 or input_shape[0] != INPUT_SHAPE[0]:
        raise ShapeError(f"an FBNet network takes a 3 x H x W image, got input shape {tuple(input_shape)}",
                         "pass an input shape such as 3x32x32")
    g = _Graph()
    hw = tuple(int(d) for d in input_shape[1:])
    x = g.conv_bn("x", input_shape[0], STEM_CHANNELS, 3, 1, 1, "stem")
    for i, spec in enumerate(specs):
        x, hw = _block(g, x, spec, hw, f"blocks.{i}")
    x = g.conv_bn(x, STAGE_CHANNELS[-1], HEAD_CHANNELS, 1, 1, 1, "head")
    # AdaptiveAvgPool2d(1), then flatten(1): the exporter names that reshape after its count of
    # `view` calls (one per channel shuffle before it).
    pooled = g.op("ReduceMean", [x, g.const([-1, -2], "pool")], "pool", keepdims=1, noop_with_empty_axes=0)
    views = sum(s.groups > 1 for s in specs if not s.is_skip)
    flat = g.op("Reshape", [pooled, g.const([-1, HEAD_CHANNELS], "flatten")],
                name=f"node_view_{views}" if views else "node_view", allowzero=1)
    logits = g.op("Gemm", [flat, g.weight("classifier.weight", (NUM_CLASSES, HEAD_CHANNELS)),
                           g.weight("classifier.bias", (NUM_CLASSES,))], "classifier",
                  alpha=1.0, beta=1.0, transA=0, transB=1)
    graph = helper.make_graph(
        g.nodes, "fbnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", *input_shape])],
        [helper.make_tensor_value_info(logits, TensorProto.FLOAT, None)], initializer=g.weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="perfseer")
    for key, value in ((META_BUFFERS, json.dumps(g.buffers)), (META_SOURCE, f"fbnet:{blocks}")):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    return Skeleton(model, {t.name for t in g.weights}, f"fbnet:{blocks}", input_shape_applied=True)
