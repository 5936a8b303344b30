"""Checking an ONNX graph before anything is folded or inferred.

A file a user uploads may be malformed in ways that ONNX's shape inference either reports as a
missing shape ("cannot be determined", which hides the cause) or does not survive.  The checks
here run first, on the graph alone, and name the node and the real cause:

* the default-domain opset exists (1 to the newest this onnx knows);
* every standard operator exists at that opset, with an acceptable number of inputs and
  outputs, attributes of the right type, and geometry attributes in range (strides, dilations,
  kernels and groups >= 1, pads >= 0, all <= ``MAX_GEOMETRY``);
* element types are defined ONNX types (inputs, initializers, ``Cast``'s ``to``);
* small initializers hold as many values as their dims say; no dimension is negative;
* every input a node reads exists (a graph input, an initializer or another node's output);
* no tensor is produced twice;
* the nodes form no cycle (nodes merely out of order are sorted, as ONNX requires them to be);
* input dimensions are at most ``MAX_DIM`` and an input sample at most ``MAX_INPUT_ELEMENTS``.

Every failure is a :class:`~perfseer.errors.ShapeError` or
:class:`~perfseer.errors.UnsupportedModelError` whose message says which node and why.
"""

from __future__ import annotations

import functools
import math
from collections import deque

import onnx
from onnx import defs

from perfseer.errors import ModelLoadError, ShapeError, UnsupportedModelError
from perfseer.graph.limits import MAX_DIM, MAX_INPUT_ELEMENTS  # noqa: F401 - read here and by importers
from perfseer.graph.node_fields import NodeFields, read_nodes

STANDARD = frozenset({"", "ai.onnx"})
_ONNX_OTHER = frozenset({"ai.onnx.ml", "ai.onnx.preview.training"})
MAX_GEOMETRY = 1 << 20  # kernel / stride / dilation / pad / group values above this are corrupt
_GEOMETRY_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool",
                           "LpPool", "MaxUnpool", "DeformConv", "MaxRoiPool", "RoiAlign"})
# attribute -> smallest allowed value
_GEOMETRY_MIN = {"strides": 1, "dilations": 1, "kernel_shape": 1, "group": 1, "pads": 0, "output_padding": 0}
_POSITIVE_INT_ATTRS = {"DepthToSpace": ("blocksize",), "SpaceToDepth": ("blocksize",), "LRN": ("size",),
                       "Split": ("num_outputs",), "TopK": ("k",)}
# operators with value checks beyond their schema
_SPECIAL = _GEOMETRY_OPS | frozenset(_POSITIVE_INT_ATTRS) | frozenset({
    "Cast", "EyeLike", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Dropout"})
_VALID_TYPES = frozenset(v for v in onnx.TensorProto.DataType.values() if v != onnx.TensorProto.UNDEFINED)
_ATTR_TYPE_NAMES = {v: k for k, v in onnx.AttributeProto.AttributeType.items()}


def _has_schema(op: str, domain: str) -> bool:
    try:
        defs.get_schema(op, domain)
    except defs.SchemaError:
        return False
    return True


def _name(node: onnx.NodeProto) -> str:
    return node.name or (node.output[0] if node.output else node.op_type)


def default_opset(model: onnx.ModelProto, source: str) -> int:
    """The default-domain opset, checked against what this onnx knows."""
    versions = [o.version for o in model.opset_import if o.domain in STANDARD]
    newest = defs.onnx_opset_version()
    if not versions:
        if any(n.domain in STANDARD for n in model.graph.node):
            raise ModelLoadError(f"{source} imports no opset of the default ONNX domain but uses its operators",
                                 "re-export the model; its opset_import list is missing or corrupt")
        return 0
    v = versions[0]
    if not 1 <= v <= newest:
        raise ModelLoadError(
            f"{source} declares default-domain opset {v}, which does not exist (this onnx knows 1 to {newest})",
            "re-export the model; its opset_import is corrupt" if v < 1 else
            f"re-export the model at opset {newest} or lower, or upgrade onnx")
    return v


@functools.lru_cache(maxsize=4096)
def _schema(op: str, opset: int):
    """``(since_version, min_in, max_in, min_out, max_out, {attr: (type, required)})``; ``None`` for no
    such operator; ``()`` for a deprecated one (runtimes still run e.g. Upsample after opset 9)."""
    try:
        s = defs.get_schema(op, opset, "")
    except defs.SchemaError:
        return None
    if s.deprecated:
        return ()
    return (s.since_version, s.min_input, s.max_input, s.min_output, s.max_output,
            {name: (spec.type.value, spec.type.name, spec.required) for name, spec in s.attributes.items()})


@functools.lru_cache(maxsize=65536)
def _signature_ok(op: str, opset: int, n_in: int, n_out: int, attrs: tuple) -> bool:
    """Whether a node of this op, input/output counts and (attribute name, type) pairs passes the
    schema checks; cached, since a model repeats a few signatures many times."""
    schema = _schema(op, opset)
    if schema == ():
        return True
    if schema is None:
        return False
    _, min_in, max_in, min_out, max_out, specs = schema
    given = dict(attrs)
    return (min_in <= n_in <= max_in and max(min_out, 1) <= n_out <= max_out
            and all(given.get(k) == t if k in given else not req for k, (t, _, req) in specs.items()))


# Operators with value checks (``_SPECIAL``) that passed them, by everything the checks read:
# ``(op, opset, inputs, outputs, the serialised attributes)``; a model repeats a few of them (its
# convolutions) many times.  Bounded: cleared when full.
_SPECIAL_PASSED: set[tuple] = set()
_SPECIAL_PASSED_MAX = 65536


def _check_node(node: NodeFields, opset: int, source: str) -> None:
    op = node.op_type
    if op not in _SPECIAL:
        if _signature_ok(op, opset, len(node.input), len(node.output), node.signature):
            return
        _check_node_fully(node.proto, opset, source)
        return
    key = (op, opset, len(node.input), len(node.output),
           tuple(a.SerializeToString() for a in node.proto.attribute))
    if key in _SPECIAL_PASSED:
        return
    _check_node_fully(node.proto, opset, source)
    if len(_SPECIAL_PASSED) >= _SPECIAL_PASSED_MAX:
        _SPECIAL_PASSED.clear()
    _SPECIAL_PASSED.add(key)


def _check_node_fully(node: onnx.NodeProto, opset: int, source: str) -> None:
    """Every check of :func:`_check_node`, raising with the node's name."""
    op = node.op_type
    schema = _schema(op, opset)
    if schema == ():
        return
    if schema is None:
        raise UnsupportedModelError(f"{op} node '{_name(node)}' of {source}: there is no operator '{op}' in ONNX "
                                    f"opset {opset}", "export with standard ONNX operators of the model's opset")
    since, min_in, max_in, min_out, max_out, attr_specs = schema
    n_in, n_out = len(node.input), len(node.output)
    given = {a.name: a for a in node.attribute}
    if min_in <= n_in <= max_in and max(min_out, 1) <= n_out <= max_out and all(
            (a := given.get(k)) is None and not req or a is not None and a.type == t
            for k, (t, _, req) in attr_specs.items()) and op not in _SPECIAL:
        return  # the common case, checked in one pass
    where = f"{op} node '{_name(node)}' of {source}"
    if n_in < min_in or n_in > max_in:
        raise ShapeError(f"{where} has {n_in} inputs; {op}-{since} takes {min_in} to {max_in}",
                         "fix the model: re-export it")
    if n_out < max(min_out, 1) or n_out > max_out:
        raise ShapeError(f"{where} has {n_out} outputs; {op}-{since} gives {min_out} to {max_out}",
                         "fix the model: re-export it")
    for name, (t, tname, required) in attr_specs.items():
        a = given.get(name)
        if a is None:
            if required:
                raise ShapeError(f"{where} lacks its required attribute '{name}'", "fix the model: re-export it")
            continue
        if a.type != t:
            raise ShapeError(f"{where}: attribute '{name}' is of type {_ATTR_TYPE_NAMES.get(a.type, a.type)}, "
                             f"expected {tname}", "fix the model: re-export it")
    if op in _GEOMETRY_OPS:
        for name, low in _GEOMETRY_MIN.items():
            a = given.get(name)
            if a is None:
                continue
            values = list(a.ints) if a.type == onnx.AttributeProto.INTS else [a.i]
            bad = [v for v in values if v < low or v > MAX_GEOMETRY]
            if bad:
                raise ShapeError(f"{where}: {name} {values} is out of range (each must be {low} to {MAX_GEOMETRY})",
                                 "fix the model: a valid export never writes these values")
    for name in _POSITIVE_INT_ATTRS.get(op, ()):
        a = given.get(name)
        if a is not None and a.type == onnx.AttributeProto.INT and not 1 <= a.i <= MAX_GEOMETRY:
            raise ShapeError(f"{where}: {name} {a.i} is out of range (1 to {MAX_GEOMETRY})", "fix the model")
    if op in ("Cast", "EyeLike", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"):
        for key in ("to", "dtype"):
            a = given.get(key)
            if a is not None and a.i not in _VALID_TYPES:
                raise ShapeError(f"{where}: '{key}' is {a.i}, not an ONNX element type", "fix the model")
    if op == "Dropout":
        a = given.get("ratio")
        if a is not None and a.type == onnx.AttributeProto.FLOAT and not 0 <= a.f < 1:
            raise ShapeError(f"{where}: ratio {a.f} is not in [0, 1)", "fix the model")


def _check_tensors(graph: onnx.GraphProto, source: str, stripped: set[str]) -> None:
    for t in graph.initializer:
        if t.data_type not in _VALID_TYPES:
            raise ShapeError(f"initializer '{t.name}' of {source} has element type {t.data_type}, not an ONNX type",
                             "fix the model: re-export it")
        if any(d < 0 for d in t.dims):
            raise ShapeError(f"initializer '{t.name}' of {source} has a negative dimension {list(t.dims)}",
                             "fix the model: re-export it")
        if t.name in stripped or t.data_location == onnx.TensorProto.EXTERNAL:
            continue
        n = math.prod(t.dims)
        if t.raw_data:
            size = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize if t.data_type not in (
                onnx.TensorProto.STRING,) else 0
            have = len(t.raw_data) // size if size else n
            # sub-byte types (int4, float4) pack two values per byte
            if size and have != n and len(t.raw_data) != (n + 1) // 2:
                raise ShapeError(f"initializer '{t.name}' of {source} has dims {list(t.dims)} ({n} values) but "
                                 f"{len(t.raw_data)} bytes of data", "fix the model: the file is corrupt")
    for vi in graph.input:
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if tt.elem_type not in _VALID_TYPES:
            raise ShapeError(f"input '{vi.name}' of {source} has element type {tt.elem_type}, not an ONNX type",
                             "fix the model: re-export it")
        dims = [d.dim_value for d in tt.shape.dim if d.HasField("dim_value")]
        bad = [d for d in dims if d < 0 or d > MAX_DIM]
        if bad:
            raise ShapeError(f"input '{vi.name}' of {source} has a dimension {bad[0]} (each must be 0 to {MAX_DIM})",
                             "fix the model, or pass --input-shape with the real sizes")
        if math.prod(dims[1:]) > MAX_INPUT_ELEMENTS:
            raise ShapeError(f"input '{vi.name}' of {source} holds {math.prod(dims[1:])} elements per sample "
                             f"(at most {MAX_INPUT_ELEMENTS})", "pass --input-shape with the real sizes")


def _check_wiring(graph: onnx.GraphProto, source: str, nodes: list[NodeFields]) -> bool:
    """Dangling inputs, tensors produced twice, cycles; sorts nodes that are merely out of order
    (and then returns True).  ``nodes``: the fields of ``graph``'s nodes."""
    declared = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    available = declared | {""}
    declared.discard("")
    inputs = [node.input for node in nodes]
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for o in node.output:
            if not o:
                continue
            if o in producer:
                first = nodes[producer[o]]
                raise ShapeError(f"tensor '{o}' of {source} is produced twice, by {first.op_type} "
                                 f"node '{_name(first)}' and {node.op_type} node '{_name(node)}'",
                                 "fix the model: every tensor name must be written once")
            if o in declared:
                raise ShapeError(f"{node.op_type} node '{_name(node)}' of {source} writes '{o}', which is already a "
                                 "graph input or initializer", "fix the model: every tensor name must be written once")
            producer[o] = i
    for node in nodes:
        for name in node.input:
            if name not in available and name not in producer:
                raise ShapeError(f"{node.op_type} node '{_name(node)}' of {source} reads '{name}', which no node, "
                                 "input or initializer provides", "fix the model: the input is dangling")
    for out in graph.output:
        if out.name not in available and out.name not in producer:
            raise ShapeError(f"graph output '{out.name}' of {source} is produced by no node",
                             "fix the model: the output is dangling")
    # Kahn's algorithm: keeps the file's order where it is already topological
    if all(producer.get(name, -1) < i for i, names in enumerate(inputs) for name in names):
        return False
    n = len(graph.node)
    deps = [{producer[i] for i in names if i in producer} for names in inputs]
    users: list[list[int]] = [[] for _ in range(n)]
    missing = [len(ds) for ds in deps]
    for i, ds in enumerate(deps):
        for d in ds:
            users[d].append(i)
    ready = deque(i for i in range(n) if not missing[i])
    order = []
    while ready:
        i = ready.popleft()
        order.append(i)
        for u in users[i]:
            missing[u] -= 1
            if not missing[u]:
                ready.append(u)
    if len(order) < n:
        stuck = next(nodes[i] for i in range(n) if missing[i])
        raise ShapeError(f"the graph of {source} has a cycle through {stuck.op_type} node '{_name(stuck)}'",
                         "fix the model: an ONNX graph must be acyclic")
    in_order = [graph.node[i] for i in order]
    sorted_nodes = [onnx.NodeProto() for _ in in_order]
    for dst, src in zip(sorted_nodes, in_order):
        dst.CopyFrom(src)
    del graph.node[:]
    graph.node.extend(sorted_nodes)
    return True


def validate_model(model: onnx.ModelProto, source: str, stripped: set[str] | None = None,
                   nodes: list[NodeFields] | None = None) -> int:
    """Check ``model`` (see the module docstring) and return its default-domain opset.

    ``nodes``: the fields of the graph's nodes (:func:`~perfseer.graph.node_fields.read_nodes`),
    read here when not given; where the nodes are sorted, the list is re-read in place.

    Raises:
        ModelLoadError, ShapeError, UnsupportedModelError: naming the node and the cause.
    """
    g = model.graph
    if nodes is None:
        nodes = read_nodes(g)
    # protobuf hands back bytes for a string field that is not UTF-8; a bytes tensor name fails the
    # wiring check below as a dangling or unknown name, so only these are checked here
    names = [x for n in nodes for x in (n.op_type, n.domain)] + [o.domain for o in model.opset_import]
    if not all(type(x) is str for x in names):
        raise ModelLoadError(f"{source} holds a node or tensor name that is not valid UTF-8: the file is corrupt",
                             "re-export the model, or check that the download completed")
    opset = default_opset(model, source)
    _check_tensors(g, source, stripped or set())
    if _check_wiring(g, source, nodes):
        nodes[:] = read_nodes(g)  # sorted: the caller's list follows the new order
    declared = {o.domain: o.version for o in model.opset_import}
    for node in nodes:
        if node.domain in STANDARD and opset:
            _check_node(node, opset, source)
        elif node.domain in _ONNX_OTHER and not _has_schema(node.op_type, node.domain):
            raise UnsupportedModelError(
                f"{node.op_type} node '{_name(node)}' of {source}: there is no operator '{node.op_type}' in ONNX's "
                f"'{node.domain}' domain (opset {declared.get(node.domain, 'undeclared')})",
                "export with operators of the domain the model declares")
    return opset
