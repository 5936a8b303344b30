"""ONNX skeleton -> typed :class:`~perfseer.graph.ir.Graph`: bind inputs, infer shapes, fold.

The steps, in order:

1. reject what cannot be represented (control flow, a graph without inputs);
2. bind every input dimension: the batch axis to a sentinel size, other symbolic dimensions to
   the values the user gave, or fail naming the dimension;
3. infer every tensor's shape with ONNX's shape inference (with data propagation);
4. walk the operators in order: an operator whose inputs are all static (weights, constants,
   shapes) is folded, and small folded values are computed, because later shapes may need them;
   when they do, the computed values go back into shape inference.  With
   ``PERFSEER_WEIGHT_WORK=1`` (:func:`weight_work_enabled`), work on weights that is more than a
   view (weight standardisation, a bias-table gather) is not folded: frameworks like PyTorch
   repeat it at every forward, so it stays a device operator;
5. build the IR, with each dimension's multiple of the batch recorded for re-binding.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
from collections import Counter

import numpy as np
import onnx
from onnx import helper, numpy_helper

from perfseer.errors import ShapeError, UnsupportedModelError
from perfseer.graph import fold, safe_infer
from perfseer.graph.canonical import canonicalize
from perfseer.graph.functions import check_constant_sizes, inline_functions
from perfseer.graph.ir import FLOAT_DTYPES, DropoutSite, Graph, Node, Tensor, TensorKind
from perfseer.graph.legacy import upgrade_legacy
from perfseer.graph.node_fields import NodeFields, attribute_values, read_nodes
from perfseer.graph.onnx_io import SMALL_VALUE_ELEMENTS, Skeleton
from perfseer.graph.sequences import SEQUENCE_OPS, expand_sequences, unsupported_sequence
from perfseer.graph.torch_export import (BATCH_SENTINEL, META_BUFFERS, META_DROPOUT, META_FIXED_BATCH, META_SENTINEL,
                                         META_SOURCE, input_channel_error)
from perfseer.graph.validate import validate_model
from perfseer.switches import env_flag

CONTROL_FLOW = frozenset({"Loop", "If", "Scan"})
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training"})
# Operators with no inputs that still do device work.
_SOURCE_OPS = frozenset({"RandomNormal", "RandomUniform", "EyeLike"})
_NONDETERMINISTIC = frozenset({"RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"})
_FLOAT_TENSOR_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                                 onnx.TensorProto.BFLOAT16})
# Folded values handed to ONNX shape inference: shape vectors, axes and indices are small, and
# larger ones (an arange over the batch) only slow its data propagation down.
_MAX_INJECTED = 256
# Operators that only re-view a tensor (PyTorch runs them without a kernel, ONNX Runtime without a
# copy) or convert its representation: applied to weights they stay folded.  Any other operator
# on a weight-derived tensor is work the framework repeats at every forward (timm's weight-
# standardised convolutions, a relative-position-bias gather): a device operator.
_VIEW_OPS = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Slice",
                       "Split", "Constant", "QuantizeLinear", "DequantizeLinear"})
# Whether that work is kept (see :func:`weight_work_enabled`).
WEIGHT_WORK_ENV = "PERFSEER_WEIGHT_WORK"
# Operators whose first output has the shape and type of their first input.
SAME_SHAPE_OPS = frozenset({
    "BatchNormalization", "LayerNormalization", "GroupNormalization", "InstanceNormalization",
    "RMSNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization", "LpNormalization", "LRN",
    "MeanVarianceNormalization", "Softmax", "LogSoftmax", "Hardmax", "Dropout", "Identity", "Relu", "LeakyRelu",
    "PRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish", "Swish", "Tanh", "Softplus", "Softsign",
    "Mish", "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs",
    "Clip", "Floor", "Ceil", "Round", "Sign",
})
# Operators whose output shape depends on their input's values.
_DATA_DEPENDENT = frozenset({"NonZero", "Unique", "StringNormalizer", "Compress", "NonMaxSuppression",
                             "TfIdfVectorizer", "StringSplit", "RegexFullMatch"})
# Operators that read a shape (or sizes) from an input's values.
_SHAPE_INPUT_OPS = frozenset({"Expand", "Reshape", "ConstantOfShape", "Tile", "Range", "Resize", "Upsample", "Pad",
                              "Slice", "TopK", "Split", "OneHot", "Squeeze", "Unsqueeze", "ReduceSum", "ReduceMean",
                              "ReduceMax", "ReduceMin", "ReduceProd", "CenterCropPad", "Col2Im"})
# Operators whose third input is a bias.
_BIAS_OPS = frozenset({"Conv", "ConvTranspose", "Gemm"})
# Shape-preserving standard ops whose ONNX schema has no shape inference (custom-domain ops in
# SAME_SHAPE_OPS have none either).
_UNINFERABLE_SAME_SHAPE = frozenset({"GroupNormalization", "SimplifiedLayerNormalization"})
# onnxruntime's quantized operators, which ONNX cannot infer: a standard operator with the same
# output shape stands in during shape inference: (op type, inputs by position, attributes kept,
# output element type when it differs from the stand-in's).
_MS_STANDINS = {
    "QLinearAdd": ("Add", (0, 3), (), None), "QLinearMul": ("Mul", (0, 3), (), None),
    "QGemm": ("Gemm", (0, 3), ("transA", "transB"), None),
    "QLinearGlobalAveragePool": ("GlobalAveragePool", (0,), (), None),
    "MatMulIntegerToFloat": ("MatMul", (0, 1), (), onnx.TensorProto.FLOAT),
    "DynamicQuantizeMatMul": ("MatMul", (0, 1), (), None),
    "DynamicQuantizeLSTM": ("LSTM", (0, 1, 2), ("hidden_size", "direction", "layout"), None),
}
# Inputs (by position) of quantized operators that hold weights: stored as integers, they are
# parameters (counted in `params`), not buffers like other integer initializers.
_QUANT_WEIGHT_INPUTS = {
    "QLinearConv": (3, 8), "ConvInteger": (1,), "QLinearMatMul": (0, 3), "MatMulInteger": (0, 1),
    "DequantizeLinear": (0,), "QGemm": (0, 3, 6), "MatMulIntegerToFloat": (0, 1), "DynamicQuantizeMatMul": (1,),
    "DynamicQuantizeLSTM": (1, 2),
}
# Scales and zero points of quantized operators: stored tensors, not trainable parameters.
_QUANT_PARAM_INPUTS = {
    "QLinearConv": (1, 2, 4, 5, 6, 7), "QLinearMatMul": (1, 2, 4, 5, 6, 7), "ConvInteger": (2, 3),
    "MatMulInteger": (2, 3), "QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2), "QGemm": (1, 2, 4, 5, 7, 8),
    "MatMulIntegerToFloat": (2, 3, 4, 5), "DynamicQuantizeMatMul": (2, 3), "DynamicQuantizeLSTM": (8, 9, 10, 11),
    "QLinearAdd": (1, 2, 4, 5, 6, 7), "QLinearMul": (1, 2, 4, 5, 6, 7), "QLinearGlobalAveragePool": (1, 2, 3, 4),
}
# Inputs (by position) of these operators are running statistics, not trainable parameters.
_BUFFER_INPUTS = {"BatchNormalization": (3, 4)}

DTYPE_NAMES = {
    v: helper.tensor_dtype_to_np_dtype(v).name if v not in (0, 16) + tuple(range(17, 27)) else None
    for v in onnx.TensorProto.DataType.values()
}
DTYPE_NAMES.update({0: "undefined", 8: "string", 16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz",
                    19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1"})
for _v in onnx.TensorProto.DataType.values():
    DTYPE_NAMES.setdefault(_v, onnx.TensorProto.DataType.Name(_v).lower())
    if DTYPE_NAMES[_v] is None:
        DTYPE_NAMES[_v] = onnx.TensorProto.DataType.Name(_v).lower()


def _inferred_type(typ: onnx.TypeProto) -> tuple[int, tuple[int, ...] | None] | None:
    """``(element type, dims)`` of an inferred tensor type (see :func:`_inferred_shape`);
    ``None`` for a type that is not a tensor (a sequence, a map)."""
    if not typ.HasField("tensor_type"):
        return None
    tt = typ.tensor_type
    return tt.elem_type, _inferred_shape(tt)


def _inferred_shape(tt: onnx.TypeProto.Tensor) -> tuple[int, ...] | None:
    """The dims of an inferred tensor type; ``None`` without a shape or with a dimension that is
    unknown (symbolic) or negative."""
    if not tt.HasField("shape"):
        return None
    dims = tt.shape.dim
    values = [d.dim_value for d in dims]
    if 0 in values:  # a 0 is a size only where it is set: unset (symbolic) dims read 0 too
        values = [d.dim_value if d.HasField("dim_value") else -1 for d in dims]
    return None if any(v < 0 for v in values) else tuple(values)


class _Extraction:
    def __init__(self, skel: Skeleton, batch, input_shape, dims):
        self.skel = skel
        self.weight_work = weight_work_enabled()
        self.model = skel.model
        self.g = self.model.graph
        self.source = skel.source
        self.batch = batch
        self.input_shape = tuple(input_shape) if input_shape is not None else None
        self.dims = dict(dims or {})
        self.meta = {p.key: p.value for p in self.model.metadata_props}
        self.sentinel = int(self.meta.get(META_SENTINEL, 0)) or None
        self.init_names = {t.name for t in self.g.initializer}
        self.injected: set[str] = set()  # folded values fed back to shape inference as initializers
        self.removed: Counter = Counter()  # op types of folded nodes replaced by those initializers
        self.opset = next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 0)
        self.bounded: dict[str, onnx.ValueInfoProto] = {}  # stated shapes of data-dependent outputs (NMS)
        self.dequantized: dict[str, str] = {}  # injected DequantizeLinear output -> its integer weight
        self.nodes: list[NodeFields] = []  # the graph's nodes, read once (:meth:`read_nodes`)
        self._init_types: dict[str, tuple[int, tuple[int, ...]]] = {}  # :meth:`initializer_types`
        self._init_read = 0  # how many initializers it has read

    # -- 1. what cannot be represented ------------------------------------------------------------
    def check_supported(self) -> None:
        # nodes counted (functions followed, recursion and arity checked) before any expansion
        self.model = inline_functions(self.model, self.source)
        self.g = self.model.graph
        check_constant_sizes(self.model, self.source)
        self.read_nodes()  # shared with validation and the legacy check, which keep them in step
        for node in self.nodes:
            if node.op_type in CONTROL_FLOW and node.domain in STANDARD_DOMAINS:
                raise UnsupportedModelError(
                    f"{self.source} contains control flow ({node.op_type} node '{node.name or node.output[0]}'), "
                    "whose cost depends on run-time data",
                    "export with static control flow (trace the model at fixed shapes, unroll loops) and retry",
                )
        opset = validate_model(self.model, self.source, self.skel.stripped, self.nodes)
        self.opset = upgrade_legacy(self.model, opset, self.nodes)
        declared = {o.domain for o in self.model.opset_import}
        for domain in sorted({n.domain for n in self.nodes} - declared - {"", "ai.onnx"}):
            self.model.opset_import.add(domain=domain, version=1)  # lets shape inference reach the op
        custom = {o for n in self.nodes if n.domain not in STANDARD_DOMAINS for o in n.output}
        self.declared_custom = [vi for vi in self.g.value_info if vi.name in custom]
        # Exporter annotations (stack traces, FX names) and value infos (re-inferred here) only
        # slow down every serialisation that shape inference does.
        del self.g.value_info[:]
        for node in self.g.node:
            if node.metadata_props:
                del node.metadata_props[:]
            node.doc_string = ""
        self.has_range = any(n.op_type == "Range" for n in self.nodes)
        self.real_inputs = [vi for vi in self.g.input if vi.name not in self.init_names]
        if not self.real_inputs:
            raise UnsupportedModelError(
                f"{self.source} has no graph inputs: nothing is fed to it at run time",
                "export the model with its input tensors (e.g. the image) as graph inputs",
            )

    # -- 2. bind input dimensions -----------------------------------------------------------------
    def bind_inputs(self, static_batch_as_sentinel: bool = True) -> None:
        """Give every input dimension a value; axis 0 is the batch.

        The batch axis gets the sentinel size so that batch-proportional dimensions can be told
        apart.  A static batch is treated the same way unless ``static_batch_as_sentinel`` is off
        (the fallback for graphs whose batch size is baked into constants).
        """
        self.batch_bound = False  # whether axis 0 of the inputs carries the sentinel batch
        self.default_batch = 1
        self.batch_names = batch_names = set()
        first_static = None
        for index, vi in enumerate(self.real_inputs):
            tt = vi.type.tensor_type
            if not tt.HasField("shape"):
                raise ShapeError(f"input '{vi.name}' of {self.source} has no declared shape",
                                 "export the model with input shapes, or pass --input-shape")
            dims = list(tt.shape.dim)
            if index == 0 and self.input_shape is not None:
                if len(self.input_shape) != len(dims) - 1:
                    raise ShapeError(
                        f"--input-shape {'x'.join(map(str, self.input_shape))} has {len(self.input_shape)} "
                        f"dimensions but input '{vi.name}' has {len(dims) - 1} besides the batch",
                        f"give {len(dims) - 1} dimensions, e.g. "
                        f"{'x'.join(str(d.dim_value or 1) for d in dims[1:])}",
                    )
                for d, v in zip(dims[1:], self.input_shape):
                    d.Clear()
                    d.dim_value = int(v)
            for axis, d in enumerate(dims):
                # Some exporters write 0 for an unknown batch size.
                static = d.HasField("dim_value") and (axis > 0 or d.dim_value > 0)
                if axis == 0 and index == 0 and d.dim_param and d.dim_param in self.dims:
                    value = int(self.dims[d.dim_param])
                    if self.batch is not None and self.batch != value:
                        raise ShapeError(
                            f"'{d.dim_param}' is the batch axis of input '{vi.name}': dims gives {value}, "
                            f"batch gives {self.batch}", f"pass only --batch {self.batch}")
                    self.batch = value
                if axis == 0:
                    sentinel = static and self.sentinel is not None and d.dim_value == self.sentinel
                    if index == 0 and static and not sentinel:
                        first_static = d.dim_value
                        self.default_batch = d.dim_value
                    is_batch = (
                        sentinel
                        or (not static and (index == 0 or d.dim_param in batch_names or d.dim_param not in self.dims))
                        or (static and static_batch_as_sentinel and d.dim_value == first_static)
                    )
                    if is_batch:
                        if d.dim_param:
                            batch_names.add(d.dim_param)
                        d.Clear()
                        d.dim_value = BATCH_SENTINEL
                        self.batch_bound = True
                        continue
                if static:
                    if d.dim_value <= 0:
                        raise ShapeError(
                            f"input '{vi.name}' has a zero-size dimension (axis {axis}): it would do no work",
                            "export the model with a non-empty example input, or pass --input-shape",
                        )
                    continue
                name = d.dim_param
                if name in batch_names:
                    d.Clear()
                    d.dim_value = BATCH_SENTINEL
                    continue
                value = self.dims.get(name)
                if value is None:
                    raise ShapeError(
                        f"input '{vi.name}' has a symbolic dimension '{name or '?'}' (axis {axis}) that "
                        "cannot be bound",
                        f"pass --dim {name or 'NAME'}=VALUE (Python: dims={{'{name}': VALUE}})",
                    )
                if int(value) <= 0:
                    raise ShapeError(f"dimension '{name}' bound to {value}", "bind it to a positive integer")
                d.Clear()
                d.dim_value = int(value)
        # Symbolic dims elsewhere (outputs, value_info) are re-derived by shape inference.
        del self.g.output[:]
        self.g.output.extend(helper.make_tensor_value_info(o, 0, None) for o in self._output_names)

    # -- 3./4. shapes and folding -----------------------------------------------------------------
    def infer(self) -> dict[str, tuple[int, tuple[int, ...] | None]]:
        del self.g.value_info[:]
        # ONNX cannot infer custom-domain ops: keep their declared output shapes, re-bound.
        self.g.value_info.extend(self._bind_declared(vi) for vi in self.declared_custom)
        self.g.value_info.extend(self.bounded.values())
        # Shape-preserving ops ONNX has no inference for (GroupNormalization, contrib activations
        # and normalisations) pass as Identity during inference, so shapes flow through a chain
        # of them in one pass (49 GroupNorms: 1 pass, not 49).
        swapped, retyped = [], {}
        for n, fields in zip(self.g.node, self.nodes):  # the fields to read, the proto to change
            standard = fields.domain in STANDARD_DOMAINS
            if fields.input and fields.op_type in SAME_SHAPE_OPS and (
                    not standard or fields.op_type in _UNINFERABLE_SAME_SHAPE):
                swapped.append((n, fields.op_type, fields.domain, list(fields.input), list(n.attribute)))
                n.op_type, n.domain = "Identity", ""
                del n.input[1:]
                del n.attribute[:]
            elif fields.domain == "com.microsoft" and fields.op_type in _MS_STANDINS and not self._declared(fields):
                op, positions, keep, elem = _MS_STANDINS[fields.op_type]
                inputs, attrs = list(fields.input), list(n.attribute)
                if any(p >= len(inputs) or not inputs[p] for p in positions):
                    continue
                swapped.append((n, n.op_type, n.domain, inputs, attrs))
                n.op_type, n.domain = op, ""
                del n.input[:]
                n.input.extend(inputs[p] for p in positions)
                del n.attribute[:]
                n.attribute.extend(a for a in attrs if a.name in keep)
                if elem is not None:
                    retyped[n.output[0]] = elem
        try:
            # ONNX's data propagation follows Shape -> Gather -> Concat -> Reshape chains in one
            # pass, but it also materialises index arithmetic built on Range (an `as_strided`
            # lowered to Range/Add/Gather at the batch size) and then takes seconds; with Range in
            # the graph, perfseer's own folding (one level per pass) does the job instead.
            inferred = safe_infer.infer_shapes(self.model, self.source, check_type=False, strict_mode=False,
                                               data_prop=not self.has_range)
        except safe_infer.InferenceFailed as e:  # onnx raises InferenceError or RuntimeError with a long message
            raise ShapeError(f"shape inference failed for {self.source}: {str(e).splitlines()[0][:300]}",
                             "check --input-shape and --batch against what the model accepts") from e
        finally:
            for n, op, domain, inputs, attrs in swapped:
                n.op_type, n.domain = op, domain
                del n.input[:]
                n.input.extend(inputs)
                n.attribute.extend(attrs)
        types: dict[str, tuple[int, tuple[int, ...] | None]] = {}
        read: dict[bytes, tuple[int, tuple[int, ...] | None] | None] = {}  # by serialised TypeProto
        for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
            typ = vi.type
            key = typ.SerializeToString()  # tensors share a few types: each is decoded once
            if key not in read:
                read[key] = _inferred_type(typ)
            elem_shape = read[key]
            if elem_shape is None:
                continue
            elem, shape = elem_shape
            name = vi.name
            if shape is not None or name not in types:  # a graph output may repeat it shapeless
                types[name] = (elem or types.get(name, (0,))[0], shape)
        types.update(self.initializer_types())
        for name, elem in retyped.items():
            if name in types:
                types[name] = (elem, types[name][1])
        for n in self.nodes:  # Dropout-7..11 has no inference for its mask: the input's shape, bool
            if n.op_type == "Dropout" and len(n.output) > 1 and n.output[1] and types.get(n.output[1], (0, None))[1] \
                    is None and types.get(n.input[0], (0, None))[1] is not None:
                types[n.output[1]] = (onnx.TensorProto.BOOL, types[n.input[0]][1])
        return types

    def _declared(self, node: NodeFields) -> bool:
        names = {vi.name for vi in self.declared_custom}
        return all(o in names for o in node.output if o)

    def _bind_declared(self, vi: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
        out = onnx.ValueInfoProto()
        out.CopyFrom(vi)
        for axis, d in enumerate(out.type.tensor_type.shape.dim):
            if d.dim_param and d.dim_param in self.batch_names or (
                    axis == 0 and self.batch_bound and d.HasField("dim_value") and d.dim_value == self.default_batch):
                d.Clear()
                d.dim_value = BATCH_SENTINEL
            elif d.dim_param in self.dims:
                value = int(self.dims[d.dim_param])  # read before Clear() empties dim_param
                d.Clear()
                d.dim_value = value
        return out

    def run(self) -> Graph:
        self._output_names = [o.name for o in self.g.output]
        self.check_supported()
        original = onnx.ModelProto()
        original.CopyFrom(self.model)  # the skeleton is small: weights were never read
        static_first = self.default_batch_static()
        if self.meta.get(META_FIXED_BATCH):  # exported at a fixed batch (detectors): never re-bound
            self.bind_inputs(static_batch_as_sentinel=False)
            return self._run_bound()
        try:
            self.bind_inputs()
            return self._run_bound()
        except ShapeError:
            if not static_first:
                raise
        # The batch size may be baked into the graph (a Reshape to [1, ...]): keep it fixed.
        self.model = original
        self.g = self.model.graph
        self.read_nodes()
        self.init_names = {t.name for t in self.g.initializer}
        self.injected, self.removed, self.dequantized = set(), Counter(), {}
        self.real_inputs = [vi for vi in self.g.input if vi.name not in self.init_names]
        self.bind_inputs(static_batch_as_sentinel=False)
        return self._run_bound()

    def default_batch_static(self) -> bool:
        dims = self.real_inputs[0].type.tensor_type.shape.dim
        return bool(dims) and dims[0].HasField("dim_value") and dims[0].dim_value != (self.sentinel or 0)

    def read_nodes(self) -> None:
        """(Re-)read :attr:`nodes`, the fields of the graph's nodes in order (after any change to
        the node list other than :meth:`_inject`'s, which keeps them in step)."""
        self.nodes = read_nodes(self.g)

    def initializer_types(self) -> dict[str, tuple[int, tuple[int, ...]]]:
        """``{name: (element type, dims)}`` of every initializer.  Initializers are only ever
        appended during a bound run (folded values, sequence sizes), so the ones read before are
        not read again."""
        inits = self.g.initializer
        for i in range(self._init_read, len(inits)):
            t = inits[i]
            self._init_types[t.name] = (t.data_type, tuple(t.dims))
        self._init_read = len(inits)
        return self._init_types

    def _run_bound(self) -> Graph:
        init_values: dict[str, np.ndarray] = {}
        for t in self.g.initializer:
            if t.name not in self.skel.stripped and math.prod(t.dims) <= SMALL_VALUE_ELEMENTS:
                try:
                    init_values[t.name] = fold.to_array(t)
                except Exception:  # unreadable small tensor: its value is just unknown
                    pass
        self._drop_weight_data(init_values)
        changed, added = expand_sequences(self.g, init_values, self.opset, self.source, self._output_names)
        for t in self.g.initializer if changed else ():
            if t.name in added:
                self.init_names.add(t.name)
                self.injected.add(t.name)
                init_values[t.name] = fold.to_array(t)
        if changed:
            self.read_nodes()
        self._init_types, self._init_read = {}, 0  # this graph's (on the fallback, a fresh copy)
        # Constant sub-graphs that ONNX's data propagation cannot follow (a Reshape of constants
        # feeding ReduceMean's axes) are computed first, so one inference pass usually suffices.
        types0 = dict(self.initializer_types())
        for vi in self.real_inputs:  # bound by now: Shape(input) folds before inference too
            tt = vi.type.tensor_type
            types0[vi.name] = (tt.elem_type, tuple(d.dim_value for d in tt.shape.dim))
        _, values0, folded0, _ = self.classify(types0, init_values)
        computed = {o: values0[o] for n in folded0 if n.op_type != "Constant"
                    for o in n.output if o in values0 and values0[o].size <= _MAX_INJECTED}
        if computed:
            self._inject(computed)
            init_values.update(computed)
        for _ in range(len(self.g.node) + 4):  # each pass resolves at least one more value or stops
            types = self.infer()
            static, values, folded, device = self.classify(types, init_values)
            missing = self.missing_shapes(types, device)
            # A folded tensor a device node reads (an attention mask built from the input's
            # shape) needs its shape too, for the bytes that node reads.
            unshaped = [i for n in device for i in n.input if i in static and i and types.get(i, (0, None))[1] is None]
            if not missing and not unshaped:
                break
            if self._rewrite_sequences(types, values):
                continue
            if self._bound_data_dependent(missing, types, values):
                continue
            # Values we computed that ONNX could not: feed them back as initializers and retry.
            feeding = self._shape_feeding(device, folded)
            new = {n: v for n, v in values.items()
                   if n not in init_values and n in feeding and v.size <= _MAX_INJECTED}
            if not new:
                break
            self._inject(new)
            init_values.update(new)
        if missing:
            node, tensor = missing[0]
            if node.op_type in SEQUENCE_OPS and node.domain in STANDARD_DOMAINS:
                raise unsupported_sequence(node, self.source)
            if node.domain not in STANDARD_DOMAINS:
                raise UnsupportedModelError(
                    f"operator {node.domain}::{node.op_type} (node '{node.name}') is a custom-domain op "
                    "whose output shape perfseer cannot infer",
                    "export with standard ONNX operators, or add the output shapes to the model's value_info",
                )
            self._explain_missing(node, tensor)
            raise ShapeError(
                f"the shape of tensor '{tensor}' (output of {node.op_type} node '{node.name}') cannot be "
                "determined",
                "export with static shapes (or a dynamic batch only) and pass --dim for other symbolic dims",
            )
        return self.build(types, static, values, folded, device)

    def _drop_weight_data(self, init_values: dict[str, np.ndarray]) -> None:
        """Clear from the model the stored values of the floating-point initializers of more than
        :data:`_MAX_INJECTED` elements that ``init_values`` holds: shape inference reads no such
        value (ONNX propagates integer shape data only), and they were most of the bytes each pass
        serialises for it and sends to its helper process (ResNet-50: 1.1 MB of 1.2, the BatchNorm
        parameters).  Folding and the IR read them from ``init_values``."""
        for t in self.g.initializer:
            if (t.data_type in _FLOAT_TENSOR_TYPES and t.name in init_values and math.prod(t.dims) > _MAX_INJECTED
                    and t.HasField("raw_data")):
                t.ClearField("raw_data")

    def _explain_missing(self, node: NodeFields, tensor: str) -> None:
        """Raise the real cause of a missing shape where one can be named."""
        where = f"{node.op_type} node '{node.name or tensor}' of {self.source}"
        if node.domain == "ai.onnx.preview.training":
            raise UnsupportedModelError(f"{where} is a training-graph operator (ai.onnx.preview.training)",
                                        "pass the inference graph; perfseer models a training step from it")
        if node.op_type in _DATA_DEPENDENT:
            raise UnsupportedModelError(
                f"the output shape of {where} depends on the values of its input, known only at run time",
                "export the model with this step outside the graph, or with a static size")
        runtime = [i for i in node.input if i in {vi.name for vi in self.real_inputs}
                   and self.real_inputs[0].name != i and node.op_type in _SHAPE_INPUT_OPS]
        if runtime:
            raise UnsupportedModelError(
                f"the output shape of {where} depends on the values of graph input '{runtime[0]}', known only "
                "at run time", f"make '{runtime[0]}' an initializer (a constant) of the model")
        try:  # strict inference names the node and the rule a permissive pass skipped
            safe_infer.infer_shapes(self.model, self.source, check_type=True, strict_mode=True, data_prop=False)
        except safe_infer.InferenceFailed as e:
            raise ShapeError(f"{where}: {str(e).splitlines()[0][:400]}",
                             "check --input-shape and --batch, or fix the model") from e

    def _is_view(self, node: NodeFields, types) -> bool:
        op = node.op_type
        if op in _VIEW_OPS:
            return True
        if op in ("Cast", "CastLike"):  # a cast to the type it already has
            return types.get(node.input[0], (0, None))[0] == types.get(node.output[0], (-1, None))[0]
        if op == "Gather":  # a scalar index selects a slice (a view in PyTorch)
            idx = types.get(node.input[1], (0, None))[1] if len(node.input) > 1 else None
            return idx is not None and len(idx) == 0
        return False

    def classify(self, types, init_values):
        static: set[str] = set(self.init_names) | {""}
        # Tensors computed from floating-point weights: an operator on them that is more than a
        # view runs at every forward of a framework like PyTorch, so it is device work.
        # (Scalars and small tensors whose values are stored are constants, not weights.)
        weight_derived = {t.name for t in self.g.initializer
                          if DTYPE_NAMES.get(t.data_type) in FLOAT_DTYPES and t.name not in self.injected
                          and (t.name not in init_values or math.prod(t.dims) > _MAX_INJECTED)
                          } if self.weight_work else set()
        values: dict[str, np.ndarray] = dict(init_values)
        folded: list[NodeFields] = []
        device: list[NodeFields] = []
        for node in self.nodes:
            op = node.op_type
            attrs = None
            if op in ("Shape", "Size") and node.domain in STANDARD_DOMAINS:
                shape = types.get(node.input[0], (0, None))[1]
                if shape is not None:
                    attrs = node.attrs
                    if op == "Size":
                        values[node.output[0]] = np.asarray(math.prod(shape), np.int64)
                    else:
                        start, end = attrs.get("start", 0), attrs.get("end", None)
                        values[node.output[0]] = np.asarray(shape[start:end], np.int64)
                    static.add(node.output[0])
                    folded.append(node)
                    continue
            # CastLike reads only the type of its second input, like Shape reads only the shape.
            data_inputs = node.input[:1] if op == "CastLike" else node.input
            is_static = (
                node.domain in STANDARD_DOMAINS
                and op not in _NONDETERMINISTIC and op not in _SOURCE_OPS
                and static.issuperset(data_inputs)
            )
            if is_static and weight_derived and not weight_derived.isdisjoint(data_inputs):
                if self._is_view(node, types):
                    weight_derived.update(node.output)
                else:
                    is_static = False
            if not is_static:
                device.append(node)
                continue
            folded.append(node)
            static.update(node.output)
            if op == "Constant":
                v = node.constant
                if v is not None:
                    values[node.output[0]] = v
                continue
            ins = [values.get(i) if i else None for i in node.input]
            if op == "CastLike" and ins[0] is not None and len(ins) > 1 and ins[1] is None:
                elem = types.get(node.input[1], (0, None))[0]
                if elem:
                    values[node.output[0]] = ins[0].astype(helper.tensor_dtype_to_np_dtype(elem))
                continue
            if any(v is None for v, i in zip(ins, node.input) if i):
                continue
            out_shape = types.get(node.output[0], (0, None))[1] if node.output else None
            try:
                out = fold.evaluate(node.proto, attrs or node.attrs, ins,
                                    None if out_shape is None else math.prod(out_shape))
            except fold.FoldError as e:
                raise ShapeError(f"{op} node '{node.name or node.output[0]}' of {self.source} is invalid: {e}",
                                 "fix the model (a valid export does not produce this)") from e
            if out is not None:
                for name, v in zip(node.output, out):
                    # (a sequence-valued output comes back as a list: not a foldable tensor)
                    if name and isinstance(v, np.ndarray) and v.size <= fold.MAX_FOLD_ELEMENTS:
                        values[name] = v
        return static, values, folded, device

    @staticmethod
    def missing_shapes(types, device) -> list[tuple[NodeFields, str]]:
        out = []
        for node in device:
            for o in node.output:
                if o and types.get(o, (0, None))[1] is None:
                    out.append((node, o))
        return out

    @staticmethod
    def _shape_feeding(device, folded) -> set[str]:
        # Any folded tensor read by a device node or another folded node may steer a shape.
        return {i for n in (*device, *folded) for i in n.input}

    def _rewrite_sequences(self, types, values) -> bool:
        """``SplitToSequence`` read only by ``SequenceAt`` at static positions -> one ``Split``.

        Exporters emit this pair for ``torch.split``/``chunk``; a tensor sequence has no shape for
        the IR, while the equivalent ``Split`` does, and costs the same.  Every pair whose input
        shape is known is rewritten in one pass over the nodes.
        """
        nodes = list(self.g.node)
        users: dict[str, list[int]] = {}
        for i, n in enumerate(nodes):
            for name in n.input:
                users.setdefault(name, []).append(i)
        replace: dict[int, onnx.NodeProto] = {}
        drop: set[int] = set()
        rename: dict[str, str] = {}
        for i, node in enumerate(nodes):
            if node.op_type != "SplitToSequence" or node.domain not in STANDARD_DOMAINS:
                continue
            seq = node.output[0]
            readers = [nodes[j] for j in users.get(seq, [])]
            shape = types.get(node.input[0], (0, None))[1]
            if not readers or shape is None or any(u.op_type not in ("SequenceAt", "SequenceLength")
                                                   for u in readers):
                continue
            lengths = [u for u in readers if u.op_type == "SequenceLength"]
            readers = [u for u in readers if u.op_type == "SequenceAt"]
            positions = [values.get(u.input[1]) if len(u.input) > 1 else None for u in readers]
            attrs = attribute_values(node)
            split = values.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
            if len(node.input) > 1 and node.input[1] and split is None:
                continue  # sizes known only at run time
            if any(p is None for p in positions) or (split is None and attrs.get("keepdims", 1) == 0):
                continue
            where = f"SplitToSequence node '{node.name or seq}' of {self.source}"
            if not -len(shape) <= attrs.get("axis", 0) < len(shape):
                raise ShapeError(f"{where}: axis {attrs.get('axis', 0)} is outside a rank-{len(shape)} input",
                                 "fix the model")
            axis = attrs.get("axis", 0) % len(shape)
            dim = shape[axis]
            if split is None:
                sizes = [1] * dim
            elif np.asarray(split).ndim == 0:
                step = int(split)
                if step < 1:
                    raise ShapeError(f"{where}: split size {step} is not positive", "fix the model")
                sizes = [step] * (dim // step) + ([dim % step] if dim % step else [])
            else:
                sizes = [int(v) for v in np.asarray(split).ravel()]
                if any(v < 0 for v in sizes) or sum(sizes) != dim:
                    raise ShapeError(f"{where}: split sizes {sizes[:8]} do not add up to the axis length {dim}",
                                     "fix the model")
            if len(sizes) > fold.MAX_FOLD_ELEMENTS:
                raise UnsupportedModelError(f"{where} splits into {len(sizes)} tensors",
                                            "export with torch.split into fewer, larger pieces")
            parts = [f"{seq}__part{k}" for k in range(len(sizes))]
            sizes_name = f"{seq}__sizes"
            self.g.initializer.append(numpy_helper.from_array(np.asarray(sizes, np.int64), sizes_name))
            self.init_names.add(sizes_name)
            self.injected.add(sizes_name)
            for u, p in zip(readers, positions):
                k = int(np.asarray(p).ravel()[0])
                if not -len(sizes) <= k < len(sizes):
                    raise ShapeError(f"SequenceAt node '{u.name or u.output[0]}' of {self.source} reads position {k} "
                                     f"of a sequence of {len(sizes)} tensors",
                                     f"use a position from {-len(sizes)} to {len(sizes) - 1}")
                rename[u.output[0]] = parts[k % len(sizes)]
            for u in lengths:
                self.g.initializer.append(numpy_helper.from_array(np.asarray(len(sizes), np.int64), u.output[0]))
                self.init_names.add(u.output[0])
                self.injected.add(u.output[0])
            replace[i] = helper.make_node("Split", [node.input[0], sizes_name], parts, name=node.name or seq, axis=axis)
            drop.update(users[seq])
        if not replace:
            return False
        out = []
        for i, n in enumerate(nodes):
            if i in replace:
                out.append(replace[i])
            elif i not in drop:
                for k, name in enumerate(n.input):
                    if name in rename:
                        n.input[k] = rename[name]
                out.append(n)
        self._output_names = [rename.get(o, o) for o in self._output_names]
        self.removed.update(nodes[i].op_type for i in drop)
        del self.g.node[:]
        self.g.node.extend(out)
        self.read_nodes()
        return True

    def _bound_data_dependent(self, missing, types, values) -> bool:
        """Give ``NonMaxSuppression`` outputs their stated size: no box suppressed.

        ONNX leaves the number of selected boxes unknown.  perfseer assumes the worst case, every
        box kept up to ``max_output_boxes_per_class``: ``batch * classes * min(boxes, max)`` rows
        (:mod:`perfseer.features.ops.detection` documents the cost under the same assumption).
        """
        added = False
        for node, tensor in missing:
            if node.op_type != "NonMaxSuppression" or node.domain not in STANDARD_DOMAINS or tensor in self.bounded:
                continue
            boxes = types.get(node.input[0], (0, None))[1]
            scores = types.get(node.input[1], (0, None))[1] if len(node.input) > 1 else None
            if boxes is None or scores is None or len(boxes) != 3 or len(scores) != 3:
                continue
            n = boxes[1]
            limit = values.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            per_class = n if limit is None else min(n, max(int(np.asarray(limit).ravel()[0]), 0))
            self.bounded[tensor] = helper.make_tensor_value_info(
                tensor, onnx.TensorProto.INT64, [scores[0] * scores[1] * per_class, 3])
            added = True
        return added

    def check_channels(self, tensors: dict[str, Tensor], device) -> None:
        """A convolution whose input channels contradict its weight is an input-shape error."""
        inputs = set(self.g.input[i].name for i in range(len(self.g.input)))
        for n in device:
            if n.op_type != "Conv" or n.domain not in STANDARD_DOMAINS or len(n.input) < 2:
                continue
            x, w = tensors.get(n.input[0]), tensors.get(n.input[1])
            if x is None or w is None or x.rank < 3 or w.rank < 3:
                continue
            group = int(n.attrs.get("group", 1) or 1)
            expected = w.shape[1] * group
            if x.shape[1] == expected:
                continue
            where = f"Conv node '{n.name or n.output[0]}' (weight {list(w.shape)}, group {group})"
            if n.input[0] in inputs:
                raise input_channel_error(x.shape[1:], expected, x.shape[1], where, weight_rank=w.rank)
            raise ShapeError(f"tensor '{n.input[0]}' has {x.shape[1]} channels but {where} expects {expected}",
                             "check --input-shape against the model's input")

    def _inject(self, new: dict[str, np.ndarray]) -> None:
        """Replace the producers of ``new`` tensors by initializers holding the computed values."""
        gone = [i for i, n in enumerate(self.nodes) if n.output and all(o in new or not o for o in n.output)]
        self.removed.update(self.nodes[i].op_type for i in gone)
        for i in gone:  # a de-quantised weight stays the integer weight it was computed from
            n = self.nodes[i]
            if n.op_type == "DequantizeLinear" and n.input[0] in self.init_names and n.input[0] not in self.injected:
                self.dequantized[n.output[0]] = n.input[0]
        for i in reversed(gone):  # in place: the other nodes (and their fields) stay as they are
            del self.g.node[i]
            del self.nodes[i]
        for name, v in new.items():
            self.g.initializer.append(numpy_helper.from_array(np.asarray(v), name))
            self.init_names.add(name)
            self.injected.add(name)

    # -- 5. the IR --------------------------------------------------------------------------------
    def build(self, types, static, values, folded, device) -> Graph:
        sentinel = BATCH_SENTINEL if self.batch_bound else None
        buffers = set(json.loads(self.meta[META_BUFFERS])) if META_BUFFERS in self.meta else None
        bn_stats = {n.input[i] for n in self.nodes for i in _BUFFER_INPUTS.get(n.op_type, ()) if i < len(n.input)}
        bn_stats |= {n.input[i] for n in self.nodes for i in _QUANT_PARAM_INPUTS.get(n.op_type, ()) if i < len(n.input)}
        constant_outputs = {o for n in folded for o in n.output} | self.injected
        input_names = {vi.name for vi in self.real_inputs}
        used = {i for n in (*device, *folded) for i in n.input if i} | {o for n in device for o in n.output if o}
        used |= input_names | set(self._output_names)
        tensors: dict[str, Tensor] = {}
        # Exporters that de-duplicate equal initializers leave `Identity(weight)` per extra user:
        # each such alias is a parameter of its own in the source model.
        # (A copy that is then modified, like the dynamo exporter's `clone`, is not: only aliases
        # read directly by device operators count.)
        folded_inputs = {i for n in folded for i in n.input}
        alias = {} if buffers is not None else {
            n.output[0]: n.input[0] for n in folded
            if n.op_type == "Identity" and n.input[0] in self.init_names and n.input[0] not in self.injected
            and n.output[0] not in folded_inputs}
        # QDQ models store weights as integers and de-quantise them with a DequantizeLinear that
        # folds away: the operator reading it reads the stored integer weight (what a runtime runs).
        for n in folded:
            if (n.op_type == "DequantizeLinear" and n.input[0] in self.init_names and n.input[0] not in self.injected
                    and n.output[0] not in folded_inputs):
                alias[n.output[0]] = n.input[0]
        alias.update(self.dequantized)
        quant_weights = set(self.dequantized.values()) | {n.input[i] for n in (*device, *folded) for i in _QUANT_WEIGHT_INPUTS.get(n.op_type, ())
                         if i < len(n.input) and n.input[i] in self.init_names}
        # A stored weight that device operators read only through its aliases is counted once, as
        # the alias.
        device_reads = {i for n in device for i in n.input}
        only_aliased = set(alias.values()) - device_reads
        scales: dict[tuple[int, ...], tuple[int, ...]] = {}  # batch scale by shape (tensors share shapes)
        for name in used:
            elem, shape = types.get(name, (1, None))
            if shape is None:
                continue  # only folded values can lack a shape here; no device node reads them
            if name in only_aliased:
                continue
            stored = alias.get(name, name)
            if stored != name and stored in types:
                elem = types[stored][0]
            if stored in self.init_names and stored not in constant_outputs:
                dtype = DTYPE_NAMES.get(elem, "float32")
                is_buffer = (not dtype.startswith(("float", "bfloat")) and stored not in quant_weights) or (
                    stored in buffers if buffers is not None else (stored in bn_stats or name in bn_stats))
                kind = TensorKind.BUFFER if is_buffer else TensorKind.PARAMETER
            elif name in input_names:
                kind = TensorKind.INPUT
            elif name in constant_outputs:
                kind = TensorKind.CONSTANT
            else:
                kind = TensorKind.ACTIVATION
            scale = scales.get(shape)
            if scale is None:
                scale = scales[shape] = tuple(d // sentinel if sentinel and d % sentinel == 0 and d > 0 else 0
                                              for d in shape)
            value = values.get(name)
            if value is not None and value.size > SMALL_VALUE_ELEMENTS:
                value = None
            tensors[name] = Tensor(name, DTYPE_NAMES.get(elem, "float32"), shape, scale, kind, value)
        self.check_channels(tensors, device)
        # Empty pieces are legitimate inside a model (a slice of zero prefix tokens later
        # concatenated) and cost nothing; a model whose *output* is empty does no work at all,
        # usually because the input is too small: name the first empty tensor on the way.
        empty_output = any(0 in tensors[o].shape for o in self._output_names if o in tensors)
        for node in device if empty_output else ():
            for o in node.output:
                t = tensors.get(o)
                if t is not None and 0 in t.shape:
                    shown = t.at_batch(self.batch or self.default_batch).shape if sentinel else t.shape
                    raise ShapeError(
                        f"tensor '{o}' ({node.op_type} node '{node.name}') has a zero-size dimension "
                        f"{list(shown)}: the model does no work there",
                        "check --input-shape and --batch (an input too small for the model's strides?)",
                    )
        for node in device:  # ONNX's inference of Reshape to a constant shape does not check the count
            if node.op_type == "Reshape" and len(node.input) > 1:
                src, dst = tensors.get(node.input[0]), tensors.get(node.output[0])
                if src is not None and dst is not None and math.prod(src.shape) != math.prod(dst.shape):
                    raise ShapeError(
                        f"Reshape node '{node.name or node.output[0]}' of {self.source} turns {math.prod(src.shape)} "
                        f"elements {list(src.shape)} into {list(dst.shape)}, {math.prod(dst.shape)} elements",
                        "fix the model's target shape, or check --input-shape")
        nodes = []
        for i, n in enumerate(device):
            name = n.name or f"{n.op_type}_{i}"
            inputs = tuple(n.input)
            if n.op_type in _BIAS_OPS and len(inputs) > 2 and self._computed_zeros(tensors.get(inputs[2])):
                # torch's exporter gives a bias-free conv a bias of computed zeros; no framework
                # reads (or adds) it, so the node has no bias.
                inputs = inputs[:2] + ("",) + inputs[3:]
            nodes.append(Node(name, n.op_type, n.domain, inputs, n.output, n.attrs))
        graph = Graph(
            name=self.meta.get(META_SOURCE) or self.source, nodes=tuple(nodes), tensors=tensors,
            inputs=tuple(vi.name for vi in self.real_inputs), outputs=tuple(self._output_names),
            batch_size=BATCH_SENTINEL if sentinel else self._static_batch(), opset=self.opset,
            folded_ops=dict(Counter(n.op_type for n in folded) + self.removed),
            dropout=self._dropout_sites(sentinel), weight_work=self.weight_work,
        )
        if sentinel:
            return graph.with_batch(self.batch or self.default_batch)
        if self.batch is not None and self.batch != graph.batch_size:
            raise ShapeError(
                f"{self.source} has its batch size fixed at {graph.batch_size}",
                "re-export the model with a dynamic batch axis to predict other batch sizes",
            )
        return graph

    def _dropout_sites(self, sentinel: int | None) -> tuple[DropoutSite, ...]:
        """The training-mode dropouts recorded at export (:data:`META_DROPOUT`), with the batch
        dimensions told apart as for tensors.  None when the inputs were re-shaped here (the
        recorded shapes are the export's)."""
        text = self.meta.get(META_DROPOUT)
        if not text or self.input_shape is not None or self.dims:
            return ()
        try:
            sites = json.loads(text)["sites"]
            return tuple(DropoutSite(float(p), tuple(int(d) for d in shape), tuple(
                d // sentinel if sentinel and d % sentinel == 0 and d > 0 else 0 for d in shape))
                for p, shape in sites)
        except (ValueError, KeyError, TypeError):
            return ()  # written by another tool: ignored

    @staticmethod
    def _computed_zeros(t: Tensor | None) -> bool:
        return t is not None and t.kind is TensorKind.CONSTANT and t.value is not None and not t.value.any()

    def _static_batch(self) -> int:
        dims = self.real_inputs[0].type.tensor_type.shape.dim
        return dims[0].dim_value if dims and dims[0].dim_value > 0 else 1


_WEIGHT_WORK: contextvars.ContextVar[bool | None] = contextvars.ContextVar("perfseer_weight_work", default=None)


def weight_work_enabled() -> bool:
    """Whether the extractor keeps work on weights as device operators (module docstring, step 4).

    Off by default while most bundled predictors are ones trained on graphs where that work was
    folded: a graph extracted the other way is not what they learned from (what that costs them:
    docs/concepts/perfgraph.md).  A predictor card records the extraction its training graphs had
    (``extraction.weight_work``) and a prediction with it extracts the same way
    (:func:`keep_weight_work`).  ``PERFSEER_WEIGHT_WORK=1`` switches it on for everything else (dataset
    builds, physics estimates); it is read at every extraction, so worker processes follow it.
    """
    override = _WEIGHT_WORK.get()
    return env_flag(WEIGHT_WORK_ENV) if override is None else override


@contextlib.contextmanager
def keep_weight_work(on: bool | None):
    """Extract with work on weights kept (``True``) or folded (``False``) inside the block, whatever
    ``PERFSEER_WEIGHT_WORK`` says; ``None`` leaves the environment's choice."""
    token = _WEIGHT_WORK.set(None if on is None else bool(on))
    try:
        yield
    finally:
        _WEIGHT_WORK.reset(token)


def extract_graph(skeleton: Skeleton, batch: int | None = None, input_shape=None,
                  dims: dict[str, int] | None = None, weight_work: bool | None = None) -> Graph:
    """Build the IR of ``skeleton`` at ``batch``.

    Args:
        skeleton: from :func:`perfseer.sources.load.load_skeleton`; it is consumed (modified).
        batch: batch size to bind (default 1, or the model's own fixed batch).
        input_shape: the first input's shape without the batch, overriding the model's.
        dims: values for other symbolic input dimensions, by name.
        weight_work: keep work on weights as device operators (``None``: :func:`weight_work_enabled`);
            the graph records it (``Graph.weight_work``).

    Raises:
        UnsupportedModelError, ShapeError: with the problem and the fix.
    """
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
        raise ShapeError(f"batch size must be a positive integer, got {batch!r}", "pass --batch N with N >= 1")

    with keep_weight_work(weight_work):
        return canonicalize(_Extraction(skeleton, batch, input_shape, dims).run())

