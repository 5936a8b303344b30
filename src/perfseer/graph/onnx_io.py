"""Reading ONNX models without their weights.

Performance features need the shape and type of every weight, never its values, so perfseer reads
a model as a *skeleton*: the graph, its value infos, and for each initializer its name, type and
dims.  Only small initializers (shape vectors, axes, scalars) keep their values, because shape
computations read them.  A file is scanned at the protobuf wire level through ``mmap``: the bytes of
large weights are skipped, never copied, so a 1 GB model costs what its graph costs.  Weights stored
as external data are never opened.
"""

from __future__ import annotations

import math
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from perfseer.errors import ModelLoadError

# Initializers with at most this many elements keep their values (shape and axis vectors,
# scalars, small lookup tables); the others keep name, type and dims only.
SMALL_VALUE_ELEMENTS = 4096
# The external-data location perfseer writes for weights it never exported (graph-only files).
NOT_EXPORTED = "perfseer-weights-not-exported"

_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_INITIALIZER = 5  # GraphProto.initializer
_T_DIMS, _T_DATA_TYPE, _T_NAME = 1, 2, 8  # TensorProto fields
_T_EXTERNAL_DATA, _T_DATA_LOCATION = 13, 14


@dataclass
class Skeleton:
    """An ONNX model minus the values of its large weights.

    Attributes:
        model: the ModelProto; stripped initializers carry dims and type but no data.
        stripped: names of initializers whose values were not read.
        source: where the model came from, for messages.
        input_shape_applied: the exporter already built the graph at the requested input shape.
    """

    model: onnx.ModelProto
    stripped: set[str] = field(default_factory=set)
    source: str = "<in-memory model>"
    input_shape_applied: bool = False


class _WireError(Exception):
    pass


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise _WireError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _WireError("varint too long")


def _fields(buf, start: int, end: int):
    """Yield ``(field_number, wire_type, value_start, value_end, field_start)`` of a message."""
    pos = start
    while pos < end:
        fstart = pos
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _WireError("field number 0")
        if wire == 0:
            _, nxt = _varint(buf, pos, end)
        elif wire == 1:
            nxt = pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            nxt = pos + length
        elif wire == 5:
            nxt = pos + 4
        else:
            raise _WireError(f"unsupported wire type {wire}")
        if nxt > end:
            raise _WireError("message runs past the end of the data")
        yield number, wire, pos, nxt, fstart
        pos = nxt


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _tensor_header(buf, start: int, end: int) -> tuple[str, list[int], bool]:
    """Name, dims and whether a TensorProto keeps its data outside the file."""
    name, dims, external = "", [], False
    for number, wire, vs, ve, _ in _fields(buf, start, end):
        if number == _T_DIMS:
            if wire == 0:
                dims.append(_varint(buf, vs, ve)[0])
            else:  # packed
                pos = vs
                while pos < ve:
                    d, pos = _varint(buf, pos, ve)
                    dims.append(d)
        elif number == _T_NAME:
            name = bytes(buf[vs:ve]).decode("utf-8", "replace")
        elif number == _T_DATA_LOCATION:
            external = _varint(buf, vs, ve)[0] == onnx.TensorProto.EXTERNAL
    return name, dims, external


def _strip_tensor_bytes(buf, start: int, end: int) -> bytes:
    """Re-encode a TensorProto keeping every field but its data."""
    keep = (_T_DIMS, _T_DATA_TYPE, _T_NAME, _T_EXTERNAL_DATA, _T_DATA_LOCATION)
    return b"".join(bytes(buf[fs:ve]) for n, _, _, ve, fs in _fields(buf, start, end) if n in keep)


def _skeleton_bytes(buf, size: int) -> tuple[bytes, set[str]]:
    parts: list[bytes] = []
    stripped: set[str] = set()
    graph_seen = False
    for number, wire, vs, ve, fs in _fields(buf, 0, size):
        if number != _MODEL_GRAPH or wire != 2:
            parts.append(bytes(buf[fs:ve]))
            continue
        graph_seen = True
        gparts: list[bytes] = []
        for gnum, gwire, gvs, gve, gfs in _fields(buf, vs, ve):
            if gnum != _GRAPH_INITIALIZER or gwire != 2:
                gparts.append(bytes(buf[gfs:gve]))
                continue
            name, dims, external = _tensor_header(buf, gvs, gve)
            if external or math.prod(dims) > SMALL_VALUE_ELEMENTS:
                body = _strip_tensor_bytes(buf, gvs, gve)
                gparts.append(bytes([(_GRAPH_INITIALIZER << 3) | 2]) + _encode_varint(len(body)) + body)
                stripped.add(name)
            else:
                gparts.append(bytes(buf[gfs:gve]))
        graph = b"".join(gparts)
        parts.append(bytes([(_MODEL_GRAPH << 3) | 2]) + _encode_varint(len(graph)) + graph)
    if not graph_seen:
        raise _WireError("no graph")
    return b"".join(parts), stripped


def _check_model(model: onnx.ModelProto, source: str) -> None:
    if not model.opset_import or len(model.graph.node) == 0:
        raise ModelLoadError(
            f"{source} is not an ONNX model (no operators or no opset found)",
            "pass a .onnx file exported by torch.onnx.export or another ONNX converter",
        )


def read_skeleton(path: str | os.PathLike) -> Skeleton:
    """Read an ONNX file as a :class:`Skeleton` without reading large weights.

    Raises:
        ModelLoadError: the file is missing, empty, truncated or not ONNX.
    """
    path = Path(path)
    source = str(path)
    if not path.exists():
        raise ModelLoadError(f"model file {source} does not exist",
                             "check the path, or use a reference such as timm:resnet50")
    if path.is_dir():
        raise ModelLoadError(f"{source} is a directory, not an ONNX file", "pass the .onnx file inside it")
    size = path.stat().st_size
    if size == 0:
        raise ModelLoadError(f"model file {source} is empty", "re-export the model to ONNX")
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            data, stripped = _skeleton_bytes(mm, size)
        model = onnx.ModelProto.FromString(data)
    except (_WireError, DecodeError, ValueError) as e:
        raise ModelLoadError(
            f"{source} is not a valid ONNX file ({e}): truncated or another format",
            "re-export the model to ONNX, or check that the download completed",
        ) from e
    _check_model(model, source)
    _load_small_external(model, path.parent, stripped)
    return Skeleton(model, stripped, source)


def _load_small_external(model: onnx.ModelProto, base_dir: Path, stripped: set[str]) -> None:
    """Read the values of small external initializers (shape vectors, axes), which shape
    computations need; weights stay unread.  A missing data file leaves them stripped."""
    from onnx.external_data_helper import load_external_data_for_tensor

    for t in model.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL or math.prod(t.dims) > SMALL_VALUE_ELEMENTS:
            continue
        if any(e.key == "location" and e.value == NOT_EXPORTED for e in t.external_data):
            continue  # perfseer's own skeletons: there is no data to read
        try:
            load_external_data_for_tensor(t, str(base_dir))
        except (OSError, ValueError, TypeError, onnx.checker.ValidationError):
            continue  # unreadable (or a corrupt location): the value stays unknown
        t.data_location = onnx.TensorProto.DEFAULT
        del t.external_data[:]
        stripped.discard(t.name)


def skeleton_from_proto(model: onnx.ModelProto, source: str = "<in-memory model>") -> Skeleton:
    """A :class:`Skeleton` of an in-memory model; the caller's proto is left untouched."""
    if not isinstance(model, onnx.ModelProto):
        raise ModelLoadError(f"expected an onnx.ModelProto, got {type(model).__name__}",
                             "pass onnx.load(path) or the path itself")
    _check_model(model, source)
    out = onnx.ModelProto()
    for f, value in model.ListFields():
        if f.name == "graph":
            continue
        if isinstance(value, (int, float, str, bytes)):
            setattr(out, f.name, value)
        elif hasattr(value, "extend"):  # repeated field
            getattr(out, f.name).extend(value)
        else:
            getattr(out, f.name).CopyFrom(value)
    g, src = out.graph, model.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    stripped: set[str] = set()
    for t in src.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL or math.prod(t.dims) > SMALL_VALUE_ELEMENTS:
            s = g.initializer.add()
            s.name, s.data_type = t.name, t.data_type
            s.dims.extend(t.dims)
            s.data_location = t.data_location
            s.external_data.extend(t.external_data)
            stripped.add(t.name)
        else:
            g.initializer.append(t)
    return Skeleton(out, stripped, source)
