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
        key = buf[pos]
        if key < 0x80:  # one-byte keys (field numbers below 16) are the common case
            pos += 1
        else:
            key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _WireError("field number 0")
        if wire == 2:
            length = buf[pos] if pos < end else 0x80
            if length < 0x80:
                pos += 1
            else:
                length, pos = _varint(buf, pos, end)
            nxt = pos + length
        elif wire == 0:
            _, nxt = _varint(buf, pos, end)
        elif wire == 1:
            nxt = pos + 8
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


_KEEP = frozenset({_T_DIMS, _T_DATA_TYPE, _T_NAME, _T_EXTERNAL_DATA, _T_DATA_LOCATION})
# The external-data entry ``location: NOT_EXPORTED`` as protobuf encodes it (StringStringEntryProto).
_NOT_EXPORTED_ENTRY = onnx.StringStringEntryProto(key="location", value=NOT_EXPORTED).SerializeToString()


@dataclass
class _Header:
    """What one walk over a TensorProto's fields finds (:func:`_tensor_header`).

    Attributes:
        name, dims: the tensor's name and dims (as the wire holds them: unsigned).
        external: its data live outside the file.
        loadable: its values may lie in an external file to read (:func:`_load_small_external`):
            it has a data location field (of any value) and no ``location: NOT_EXPORTED`` entry.
        kept: the ``(start, end)`` byte ranges of its fields other than data (those
            :data:`_KEEP` names), in order.
        data: whether it holds any other field (data, doc string...).
    """

    name: str
    dims: list[int]
    external: bool
    loadable: bool
    kept: list[tuple[int, int]]
    data: bool

    @property
    def stripped(self) -> bool:
        """Whether the skeleton drops its values: they live outside the file, or are large."""
        return self.external or math.prod(self.dims) > SMALL_VALUE_ELEMENTS


def _tensor_header(buf, start: int, end: int) -> _Header:
    """Walk a TensorProto's fields once: its header and where its non-data fields lie."""
    name, dims, external, located, not_exported = "", [], False, False, False
    kept: list[tuple[int, int]] = []
    data = False
    for number, wire, vs, ve, fs in _fields(buf, start, end):
        if number not in _KEEP:
            data = True
            continue
        kept.append((fs, ve))
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
            located = True
        elif number == _T_EXTERNAL_DATA and wire == 2 and buf[vs:ve] == _NOT_EXPORTED_ENTRY:
            not_exported = True
    return _Header(name, dims, external, located and not not_exported, kept, data)


def _skeleton_graph(buf, start: int, end: int, stripped: set[str], loadable: list[int],
                    index: int) -> tuple[bytes | None, int]:
    """The skeleton of the GraphProto at ``buf[start:end]``: ``(bytes, next initializer index)``,
    the bytes ``None`` where no initializer changed (the graph is kept as it is).

    Fields other than initializers are copied as whole runs of bytes; an initializer is re-encoded
    only when its data are dropped.  Stripped initializers go into ``stripped`` (by name) and the
    positions of those that may have data to read into ``loadable`` (``_Header.loadable``)."""
    parts: list[bytes] = []
    run = start  # where the bytes copied unchanged begin
    for number, wire, vs, ve, fs in _fields(buf, start, end):
        if number != _GRAPH_INITIALIZER or wire != 2:
            continue
        header = _tensor_header(buf, vs, ve)
        if header.loadable:
            loadable.append(index)
        index += 1
        if not header.stripped:
            continue
        stripped.add(header.name)
        if header.data:
            body = b"".join(buf[a:b] for a, b in header.kept)
            parts += [buf[run:fs], bytes([(_GRAPH_INITIALIZER << 3) | 2]), _encode_varint(len(body)), body]
            run = ve
    if run == start:
        return None, index
    parts.append(buf[run:end])
    return b"".join(parts), index


def _skeleton_bytes(buf, size: int) -> tuple[bytes, set[str], list[int]]:
    """The skeleton's serialised ModelProto, the names of stripped initializers and the positions
    (in ``graph.initializer``) of those that may have external data to read."""
    parts: list[bytes] = []
    stripped: set[str] = set()
    loadable: list[int] = []
    index = 0
    graph_seen = False
    for number, wire, vs, ve, fs in _fields(buf, 0, size):
        if number == _MODEL_GRAPH and wire == 2:
            graph_seen = True
            graph, index = _skeleton_graph(buf, vs, ve, stripped, loadable, index)
            if graph is not None:
                parts += [bytes([(_MODEL_GRAPH << 3) | 2]), _encode_varint(len(graph)), graph]
                continue
        parts.append(buf[fs:ve])
    if not graph_seen:
        raise _WireError("no graph")
    return b"".join(parts), stripped, loadable


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
            data, stripped, loadable = _skeleton_bytes(mm, size)
        model = onnx.ModelProto.FromString(data)
    except (_WireError, DecodeError, ValueError) as e:
        raise ModelLoadError(
            f"{source} is not a valid ONNX file ({e}): truncated or another format",
            "re-export the model to ONNX, or check that the download completed",
        ) from e
    _check_model(model, source)
    _load_small_external(model, path.parent, stripped, loadable)
    return Skeleton(model, stripped, source)


def _load_small_external(model: onnx.ModelProto, base_dir: Path, stripped: set[str], loadable: list[int]) -> None:
    """Read the values of small external initializers (shape vectors, axes), which shape
    computations need; weights stay unread.  A missing data file leaves them stripped.
    ``loadable``: the positions of the initializers that may have such data (:func:`_skeleton_bytes`);
    the others are not looked at."""
    from onnx.external_data_helper import load_external_data_for_tensor  # deferred: heavy, loaded on first use

    for i in loadable:
        t = model.graph.initializer[i]
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
