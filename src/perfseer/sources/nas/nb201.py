"""The NAS-Bench-201 network on CIFAR-10, built from its architecture string.

The network (input 3x32x32, ``C = 16``, ``N = 5``)::

    stem: conv 3x3 (3 -> C, padding 1, no bias) + BN
    5 cells at C, reduction block C -> 2C, 5 cells at 2C, reduction block 2C -> 4C, 5 cells at 4C
    BN + ReLU, global average pool, linear 4C -> 10

A cell has four nodes: node 0 is the cell input, node ``i`` (1..3) is the sum of ``op(node j)``
over ``j < i``, and node 3 is the cell output.  The architecture string names the op of every edge,
node by node: ``|op~0|+|op~0|op~1|+|op~0|op~1|op~2|`` (``op~j`` is the edge from node ``j``).

Ops: ``none`` (zero: the edge does not exist), ``skip_connect`` (identity), ``nor_conv_1x1`` and
``nor_conv_3x3`` (ReLU, conv with padding 0 / 1 and no bias, BN), ``avg_pool_3x3`` (3x3, stride 1,
padding 1, ``count_include_pad=False``).  Reduction block: ReLU-conv 3x3 stride 2-BN, ReLU-conv
3x3-BN, plus a shortcut of avg-pool 2x2 stride 2 and conv 1x1 (no BN, no bias), added.

How the graph shows what the measured networks run (NAS-Bench-201's own implementation, which
HELP timed, applies every edge's op and computes every node):

- ``none`` edges emit nothing.
- A node whose every incoming edge is ``none`` is zero.  Operations that read it still run, and
  cost as much as on any other tensor (HELP's latencies show it, on every device), so when a
  zero node is read (by an op, or as the cell output) it is made once per cell as
  ``cell_input * 0``: a device tensor, which keeps those operations in the exported graph; a
  constant zero would have perfseer fold them away as work on constants.
- A node 1 or 2 that no edge reads is still computed by the measured networks (its cost shows in
  HELP's GPU, CPU and accelerator latencies; only the Raspberry Pi 4 and Pixel 3 ones skip
  it).  An exporter
  would drop it, so the network built with ``keep_unused=True`` (as the ``nb201:`` reference
  does) also returns these nodes, after the logits, to keep them in the graph.

Example:
    >>> net = build_nb201("|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+"
    ...                   "|skip_connect~0|nor_conv_3x3~1|skip_connect~2|")
"""

from __future__ import annotations

from torch import Tensor, nn

from perfseer.errors import ModelLoadError

OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
CHANNELS = 16          # C: width of the first stage
CELLS_PER_STAGE = 5    # N
NUM_CLASSES = 10
INPUT_SHAPE = (3, 32, 32)
NODES = 4              # node 0 = cell input, node 3 = cell output

_FORM = "|op~0|+|op~0|op~1|+|op~0|op~1|op~2|"
_FIX = f"write the cell as {_FORM} with each op one of {', '.join(OPS)}"

Genotype = tuple[tuple[str, ...], ...]  # genotype[i - 1][j]: op of the edge from node j to node i


def parse_nb201(arch_str: str) -> Genotype:
    """Read a NAS-Bench-201 architecture string.

    Only the canonical form is accepted (edges of node ``i`` listed from node 0 up), so each
    architecture has one spelling, which is what identifies it in a measurement table.

    Returns:
        ``((op_01,), (op_02, op_12), (op_03, op_13, op_23))``: the op of each edge ``j -> i``.

    Raises:
        ModelLoadError: naming the malformed part and the expected form.
    """
    if not isinstance(arch_str, str):
        raise ModelLoadError(f"a NAS-Bench-201 architecture must be a string, got {type(arch_str).__name__}", _FIX)
    groups = arch_str.split("+")
    if len(groups) != NODES - 1:
        raise ModelLoadError(
            f"NAS-Bench-201 architecture {arch_str!r} has {len(groups)} node group(s) separated by '+', "
            f"expected {NODES - 1}", _FIX)
    genotype = []
    for node, group in enumerate(groups, start=1):
        if len(group) < 2 or not (group.startswith("|") and group.endswith("|")):
            raise ModelLoadError(
                f"node {node} of NAS-Bench-201 architecture {arch_str!r} is {group!r}, "
                "which is not enclosed in '|'", _FIX)
        edges = group[1:-1].split("|")
        if len(edges) != node:
            raise ModelLoadError(
                f"node {node} of NAS-Bench-201 architecture {arch_str!r} has {len(edges)} edge(s) in {group!r}, "
                f"expected {node} (from nodes {', '.join(map(str, range(node)))})", _FIX)
        ops = []
        for source, edge in enumerate(edges):
            op, sep, index = edge.partition("~")
            if not sep or index != str(source):
                raise ModelLoadError(
                    f"edge {edge!r} of node {node} in NAS-Bench-201 architecture {arch_str!r} should read "
                    f"'op~{source}' (edge {source + 1} of the node comes from node {source})", _FIX)
            if op not in OPS:
                raise ModelLoadError(
                    f"unknown NAS-Bench-201 operation {op!r} in edge {edge!r} of node {node} "
                    f"(architecture {arch_str!r})", _FIX)
            ops.append(op)
        genotype.append(tuple(ops))
    return tuple(genotype)


class ReLUConvBN(nn.Sequential):
    """ReLU, conv (no bias), BatchNorm: the convolution of cells and reduction blocks."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, padding: int):
        super().__init__(nn.ReLU(), nn.Conv2d(c_in, c_out, kernel, stride, padding, bias=False),
                         nn.BatchNorm2d(c_out))


def make_op(name: str, channels: int) -> nn.Module:
    """The module of a non-``none`` edge op, ``channels`` in and out, stride 1."""
    if name == "skip_connect":
        return nn.Identity()
    if name == "nor_conv_1x1":
        return ReLUConvBN(channels, channels, 1, 1, 0)
    if name == "nor_conv_3x3":
        return ReLUConvBN(channels, channels, 3, 1, 1)
    if name == "avg_pool_3x3":
        return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
    raise ValueError(f"no module for NAS-Bench-201 op {name!r}")  # parse_nb201 admits no other name


class Cell(nn.Module):
    """A NAS-Bench-201 cell: ``node_i = sum(op_ji(node_j) for j < i)``; returns node 3.

    Shapes: ``x`` ``[B, C, H, W]`` -> ``[B, C, H, W]``.
    """

    def __init__(self, genotype: Genotype, channels: int):
        super().__init__()
        self.genotype = genotype
        # Key "j->i": the edge from node j to node i; `none` edges get no module.
        self.edges = nn.ModuleDict({
            f"{j}->{i}": make_op(op, channels)
            for i, ops in enumerate(genotype, start=1) for j, op in enumerate(ops) if op != "none"})
        read = {j for i, ops in enumerate(genotype, start=1) for j, op in enumerate(ops) if op != "none"}
        computed = {i for i, ops in enumerate(genotype, start=1) if any(op != "none" for op in ops)}
        # Intermediate nodes that are computed but that nothing reads.
        self.unused = tuple(sorted((computed - read) - {NODES - 1}))

    def forward(self, x: Tensor) -> Tensor:
        return self.compute(x)[0]

    def compute(self, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """The cell output and the values of the unused nodes (:attr:`unused`)."""
        nodes: list[Tensor | None] = [x]  # None: a zero node
        zero = None

        def read(j: int) -> Tensor:
            nonlocal zero
            if nodes[j] is not None:
                return nodes[j]
            if zero is None:
                zero = x * 0.0  # see the module docstring: a device tensor, made once per cell
            return zero

        for i, ops in enumerate(self.genotype, start=1):
            terms = [self.edges[f"{j}->{i}"](read(j)) for j, op in enumerate(ops) if op != "none"]
            total = None
            for t in terms:
                total = t if total is None else total + t
            nodes.append(total)
        return read(NODES - 1), [nodes[j] for j in self.unused]


class ReductionBlock(nn.Module):
    """The residual block between stages: ``[B, C, H, W]`` -> ``[B, 2C, H/2, W/2]``."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv_a = ReLUConvBN(c_in, c_out, 3, 2, 1)
        self.conv_b = ReLUConvBN(c_out, c_out, 3, 1, 1)
        self.shortcut = nn.Sequential(nn.AvgPool2d(2, stride=2), nn.Conv2d(c_in, c_out, 1, bias=False))

    def forward(self, x: Tensor) -> Tensor:
        return self.conv_b(self.conv_a(x)) + self.shortcut(x)


class NB201Network(nn.Module):
    """The NAS-Bench-201 CIFAR-10 network of one architecture.

    Args:
        genotype: from :func:`parse_nb201`.
        keep_unused: also return the cells' unused nodes (see the module docstring).

    Shapes: ``x`` ``[B, 3, 32, 32]`` -> logits ``[B, 10]``, followed with ``keep_unused`` by each
    unused node's ``[B, C, H, W]`` (other resolutions work too: the classifier follows a global
    average pool).
    """

    def __init__(self, genotype: Genotype, channels: int = CHANNELS, cells_per_stage: int = CELLS_PER_STAGE,
                 num_classes: int = NUM_CLASSES, keep_unused: bool = False):
        super().__init__()
        self.genotype = genotype
        self.keep_unused = keep_unused
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels))
        cells: list[nn.Module] = []
        width = channels
        for stage in range(3):
            if stage:
                cells.append(ReductionBlock(width, width * 2))
                width *= 2
            cells.extend(Cell(genotype, width) for _ in range(cells_per_stage))
        self.cells = nn.Sequential(*cells)
        self.lastact = nn.Sequential(nn.BatchNorm2d(width), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(width, num_classes)

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, ...]:
        x = self.stem(x)
        unused: list[Tensor] = []
        for block in self.cells:
            if isinstance(block, Cell):
                x, dropped = block.compute(x)
                unused.extend(dropped)
            else:
                x = block(x)
        logits = self.classifier(self.pool(self.lastact(x)).flatten(1))
        return (logits, *unused) if self.keep_unused and unused else logits


def build_nb201(arch_str: str, keep_unused: bool = False) -> NB201Network:
    """The NAS-Bench-201 CIFAR-10 network of ``arch_str`` (random weights, on the current device;
    build it under ``with torch.device("meta")`` to allocate nothing).

    Args:
        keep_unused: return the cells' unused nodes after the logits, so that an export keeps
            them (the ``nb201:`` reference does).

    Raises:
        ModelLoadError: if ``arch_str`` is malformed.
    """
    return NB201Network(parse_nb201(arch_str), keep_unused=keep_unused)
