"""The typed graph IR that every model frontend produces and every feature is computed from.

A :class:`Graph` holds only the operators that do device work: sub-graphs that compute shapes or
constants were folded away by the extractor.  Shapes are concrete at the graph's batch size, and
each tensor records how its dimensions scale with the batch (``batch_scale``), so the same graph
re-binds to another batch size without re-exporting (:meth:`Graph.with_batch`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfseer.errors import ShapeError


class TensorKind(enum.Enum):
    INPUT = "input"  # a model input fed at run time (images, token ids)
    PARAMETER = "parameter"  # a trainable weight (counted in `params`)
    BUFFER = "buffer"  # a stored non-trainable tensor (BatchNorm running stats, index tables)
    CONSTANT = "constant"  # computed from weights/shapes only: folded, no device work
    ACTIVATION = "activation"  # produced by a device operator

    @property
    def is_static(self) -> bool:
        return self in (TensorKind.PARAMETER, TensorKind.BUFFER, TensorKind.CONSTANT)


# Bytes per element of ONNX element types (TensorProto.DataType values).
DTYPE_BYTES: dict[str, float] = {
    "float32": 4, "uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "int32": 4, "int64": 8,
    "string": 8, "bool": 1, "float16": 2, "float64": 8, "uint32": 4, "uint64": 8,
    "complex64": 8, "complex128": 16, "bfloat16": 2, "float8e4m3fn": 1, "float8e4m3fnuz": 1,
    "float8e5m2": 1, "float8e5m2fnuz": 1, "uint4": 0.5, "int4": 0.5, "float4e2m1": 0.5,
    "float8e8m0": 1, "undefined": 4,
}
FLOAT_DTYPES = frozenset(
    {"float32", "float16", "float64", "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
     "float8e5m2fnuz", "float4e2m1", "float8e8m0"}
)


@dataclass(frozen=True, slots=True)
class Tensor:
    """A tensor of the graph.

    Attributes:
        name: unique name (the ONNX value name).
        dtype: element type, numpy-style name (``"float32"``).
        shape: dimensions at the graph's batch size.
        batch_scale: per axis, ``k`` if the dimension equals ``k * batch`` and 0 if it is fixed.
        kind: where the tensor comes from (see :class:`TensorKind`).
        value: the value of a small static tensor (shape vectors, axes), else ``None``.
        numel: the number of elements (the product of ``shape``), computed once: features read it
            several times per tensor.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    batch_scale: tuple[int, ...]
    kind: TensorKind
    value: np.ndarray | None = field(default=None, compare=False, repr=False)
    numel: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "numel", math.prod(self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> float:
        return DTYPE_BYTES.get(self.dtype, 4)

    @property
    def nbytes(self) -> float:
        return self.numel * self.itemsize

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    @property
    def depends_on_batch(self) -> bool:
        return any(self.batch_scale)

    def at_batch(self, batch: int) -> "Tensor":
        if not self.depends_on_batch:
            return self
        shape = tuple(k * batch if k else d for d, k in zip(self.shape, self.batch_scale))
        return Tensor(self.name, self.dtype, shape, self.batch_scale, self.kind, self.value)


@dataclass(frozen=True, slots=True)
class Node:
    """One operator that runs on the device.

    ``inputs`` keeps ONNX positions: an absent optional input is the empty string.
    """

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DropoutSite:
    """A dropout that a training step applies: the probability and the shape of the tensor it
    acts on (at the graph's batch size, with its ``batch_scale`` as in :class:`Tensor`).

    Not a node of the graph: models export in eval mode, where dropout is the identity.  Recorded
    by a training-mode pass of a PyTorch module at export (:mod:`perfseer.graph.torch_export`);
    node and global features never read it.
    """

    p: float
    shape: tuple[int, ...]
    batch_scale: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def at_batch(self, batch: int) -> "DropoutSite":
        if not any(self.batch_scale):
            return self
        shape = tuple(k * batch if k else d for d, k in zip(self.shape, self.batch_scale))
        return DropoutSite(self.p, shape, self.batch_scale)


_SHARED_AT_EVERY_BATCH = ("batch_dependent", "edges")  # Graph's cached properties that re-binding keeps


@dataclass(frozen=True)
class Graph:
    """A model's device computation: operators in topological order and every tensor they touch."""

    name: str
    nodes: tuple[Node, ...]
    tensors: dict[str, Tensor]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    batch_size: int
    opset: int
    folded_ops: dict[str, int] = field(default_factory=dict)  # op types removed as shape/constant work
    # training-mode dropouts of a PyTorch module (recorded at export; empty when unknown or none)
    dropout: tuple[DropoutSite, ...] = ()
    # work on weights kept as device operators (perfseer.graph.extract.weight_work_enabled)
    weight_work: bool = False

    @property
    def folded_nodes(self) -> int:
        """How many operators were folded away because they only compute shapes or constants."""
        return sum(self.folded_ops.values())

    def tensor(self, name: str) -> Tensor | None:
        return self.tensors.get(name) if name else None

    def with_batch(self, batch: int) -> "Graph":
        """The same graph at another batch size (shapes re-bound, no re-export).

        Raises:
            ShapeError: a bad batch size, or a graph whose batch is fixed (no tensor scales with it).
        """
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ShapeError(f"batch size must be a positive integer, got {batch!r}",
                             "pass --batch N with N >= 1")
        if batch == self.batch_size:
            return self
        dependent = self.batch_dependent
        if self.tensors and not dependent:
            # re-bound, every shape would stay at the old batch: batch-N costs labelled batch M
            raise ShapeError(
                f"{self.name or 'the model'} has its batch size fixed at {self.batch_size}: no tensor of its graph "
                f"scales with the batch (the export baked it into the shapes, as torch.onnx.export does without "
                f"dynamic_axes), so it cannot be re-bound to batch {batch}",
                f"re-export it with a dynamic batch axis (torch.onnx.export(..., dynamic_axes={{'input': {{0: "
                f"'batch'}}}}), or dynamo=True with dynamic_shapes), or ask for --batch {self.batch_size} only")
        tensors = dict(self.tensors)  # the same names in the same order; the fixed tensors shared
        for name in dependent:
            tensors[name] = tensors[name].at_batch(batch)
        out = dataclasses.replace(self, tensors=tensors, batch_size=batch,
                                  dropout=tuple(d.at_batch(batch) for d in self.dropout))
        for key in _SHARED_AT_EVERY_BATCH:  # the same in the re-bound copy: handed on, not recomputed
            if key in self.__dict__:
                out.__dict__[key] = self.__dict__[key]
        return out

    # Derived once per graph (functools.cached_property, in the instance's __dict__) from what
    # re-binding leaves alone: the nodes, and which tensors scale with the batch.

    @functools.cached_property
    def batch_dependent(self) -> tuple[str, ...]:
        """Names of the tensors with a dimension that scales with the batch (``batch_scale``)."""
        return tuple(n for n, t in self.tensors.items() if t.depends_on_batch)

    @functools.cached_property
    def edges(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[str, ...]]:
        """The data-flow edges ``(sources, targets, tensor names)``: one for each node input that
        another node produces, in the order of the consuming nodes and their inputs."""
        producer = {o: i for i, node in enumerate(self.nodes) for o in node.outputs if o}
        src, dst, names = [], [], []
        for j, node in enumerate(self.nodes):
            for name in node.inputs:
                i = producer.get(name)
                if i is not None:
                    src.append(i)
                    dst.append(j)
                    names.append(name)
        return tuple(src), tuple(dst), tuple(names)

    @property
    def parameter_count(self) -> int:
        return sum(t.numel for t in self.tensors.values() if t.kind is TensorKind.PARAMETER)
