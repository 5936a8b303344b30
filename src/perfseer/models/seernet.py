"""SeerNet and SeerNet-Multi (PerfSeer, §3.2): a graph network over node, edge and global features.

One :class:`SeerBlock` updates, in order, every edge, every node, a *global node* ``z`` (GNPB)
and the global features ``u`` (from a max-and-mean node aggregation, SynMM); the final ``u`` is the
graph embedding a 2-layer MLP head maps to the metrics.  SeerNet-Multi shares the encoders and the
blocks between metrics and gives each metric its own head, so PCGrad can project the gradients of
the shared part.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch_geometric.nn.aggr import Aggregation, MaxAggregation, MeanAggregation, SoftmaxAggregation
from torch_geometric.utils import scatter

from perfseer.errors import PerfseerError
from perfseer.models.base import (ACTIVATIONS, GraphRegressor, ModelConfig, NodeInput, _check_choice, _check_dropout,
                                  _check_positive, mlp, task_losses)


@dataclass
class SeerNetConfig(ModelConfig):
    """Hyper-parameters of :class:`SeerNet`.  The defaults are the paper's: 256 units in every
    SeerBlock MLP and in the head, one SeerBlock, SynMM and GNPB on (about 1.0 M parameters)."""

    hidden_dim: int = 256  # width of node/edge/global/z states (§3.2: "one layer with 256 hidden dimensions")
    num_blocks: int = 1  # SeerBlocks stacked (§3.2: "SeerNet comprises a SeerBlock")
    head_hidden_dim: int = 256  # hidden units of the 2-layer prediction head (§3.2)
    # op_type embedding width; 0 follows the paper, whose §4.2 found one-hot node categories slightly
    # hurt SeerNet (+0.42 % MAPE).  Here a 16-wide embedding cost 4.8 points of MAPE on unseen timm
    # families (19.07 % against 14.29 %, benchmarks/compare_methods.py at tag research-2026-11, timm-3090-infer-family).
    op_embedding_dim: int = 0
    synmm: bool = True  # global update reads max and mean of the nodes (False: mean only; ablation, Table 2)
    gnpb: bool = True  # keep a global node z (False: no global node; ablation, Table 2)
    use_edge_features: bool = True  # encode edge_attr (False: edges carry topology only; ablation, Table 1)
    use_global_features: bool = True  # read u (False: the first block sees no u; ablation, Table 1)
    edge_update_global: bool = False  # also feed u to the edge update (eq. 2 does not; Battaglia et al. do)
    activation: str = "relu"  # non-linearity after every SeerBlock layer (the paper names none)
    dropout: float = 0.0  # dropout after every hidden layer (the paper uses none)
    # the head also reads the raw global features: MLP_head(u' || u), as PMGNS's FC layers read
    # [pooled || u] (the paper's head reads u' only)
    head_globals: bool = False
    # how the metric is read out: "graph" is the paper's head on the graph embedding u'; "sum"
    # predicts a log-cost per node and one for the global node and sums their exponentials
    # (SeerNet-Sum, see SeerNet's docstring).  Cards written before this field existed read "graph".
    readout: str = "graph"

    def validate(self) -> None:
        super().validate()
        for name in ("hidden_dim", "num_blocks", "head_hidden_dim"):
            _check_positive(self, name)
        _check_positive(self, "op_embedding_dim", allow_zero=True)
        _check_choice(self, "activation", tuple(ACTIVATIONS))
        _check_choice(self, "readout", READOUTS)
        _check_dropout(self)

    @classmethod
    def from_dict(cls, d: dict) -> SeerNetConfig:
        """As :meth:`ModelConfig.from_dict`; a card without ``readout`` predates the field and
        was trained with the paper's ``"graph"`` readout."""
        if isinstance(d, dict) and "readout" not in d:
            d = {**d, "readout": "graph"}
        return super().from_dict(d)


READOUTS = ("graph", "sum")


@dataclass
class SeerNetMultiConfig(SeerNetConfig):
    """Hyper-parameters of :class:`SeerNetMulti`: those of SeerNet; ``num_targets`` heads, each
    reading the graph embedding (the ``"sum"`` readout is SeerNet's only)."""

    readout: str = "graph"  # one head per target on u' (the "sum" readout is not implemented here)

    def validate(self) -> None:
        super().validate()
        if self.readout != "graph":
            raise PerfseerError(f"SeerNetMultiConfig.readout must be 'graph', got {self.readout!r}",
                                "use seernet (one target per network) for the 'sum' readout")


class SynMM(Aggregation):
    r"""Synergistic Max-Mean aggregation (PerfSeer §3.2, Fig. 3).

    .. math::
        \bar{v} = W \,[\max_{i \in G} v_i \,\|\, \tfrac{1}{|G|}\textstyle\sum_{i \in G} v_i] + b

    Max picks the dominant operators, mean the overall character; a learned linear layer combines
    them.

    Args:
        channels: width of the node states (input and output).

    Shapes: ``x`` [N, channels], ``index`` [N] -> [num_groups, channels].
    """

    def __init__(self, channels: int):
        super().__init__()
        self.max = MaxAggregation()
        self.mean = MeanAggregation()
        self.lin = nn.Linear(2 * channels, channels)

    def forward(self, x: Tensor, index: Tensor | None = None, ptr: Tensor | None = None,
                dim_size: int | None = None, dim: int = -2, **kwargs) -> Tensor:
        hi = self.max(x, index, ptr=ptr, dim_size=dim_size, dim=dim)
        avg = self.mean(x, index, ptr=ptr, dim_size=dim_size, dim=dim)
        return self.lin(_cat(hi, avg))


def _head_reads_u(cfg: SeerNetConfig) -> bool:
    return cfg.head_globals and cfg.use_global_features  # without global features there is no u


def _head_in(cfg: SeerNetConfig) -> int:
    """Width of what the head reads: ``u'``, and ``u`` with ``head_globals``."""
    return cfg.hidden_dim + (cfg.global_dim if _head_reads_u(cfg) else 0)


def _readout(cfg: SeerNetConfig, emb: Tensor, u: Tensor) -> Tensor:
    """The head's input: the trunk's ``u'`` [G, hidden], with ``head_globals`` followed by ``u``."""
    return _cat(emb, u) if _head_reads_u(cfg) else emb


def _take(t: Tensor, index: Tensor) -> Tensor:
    """``t[index]`` for a 1-D index: by ``index_select`` in prediction (the same rows, several
    times faster on CPU than advanced indexing), by indexing when gradients flow (training
    unchanged)."""
    return t[index] if torch.is_grad_enabled() else t.index_select(0, index)


def _cat(*parts: Tensor | None) -> Tensor:
    return torch.cat([p for p in parts if p is not None], dim=-1)


def _softmax_aggregate(agg: Aggregation, x: Tensor, index: Tensor, dim_size: int) -> Tensor:
    """``agg(x, index, dim_size=dim_size)``.  In prediction (no gradients) a
    :class:`~torch_geometric.nn.aggr.SoftmaxAggregation` with a learned temperature is computed
    here with PyG's own operations in PyG's order (``torch_geometric.utils.softmax`` by
    ``index``, then the weighted sum), each in place on one ``[N, C]`` tensor where PyG makes a
    new one per step: the same values, a third of the allocations (on a batch of 64 cells of
    NAS-Bench-201, several MiB each).  Anything else is ``agg``'s own call."""
    t = getattr(agg, "t", None)
    if (torch.is_grad_enabled() or type(agg) is not SoftmaxAggregation or not isinstance(t, Tensor)
            or agg._forward_hooks or agg._forward_pre_hooks or x.dim() != 2 or index is None):
        return agg(x, index, dim_size=dim_size)
    if agg.channels != 1:
        t = t.view(-1, agg.channels)
    size = (dim_size, x.shape[1])
    idx = index.view(-1, 1).expand_as(x)
    alpha = x * t
    top = x.new_zeros(size).scatter_reduce_(0, idx, alpha, reduce="amax", include_self=False)
    alpha.sub_(top.index_select(0, index)).exp_()
    total = x.new_zeros(size).scatter_add_(0, idx, alpha).add_(1e-16)
    alpha.div_(total.index_select(0, index)).mul_(x)  # x * softmax: products commute exactly
    return x.new_zeros(size).scatter_add_(0, idx, alpha)


def _scatter_mean(src: Tensor, index: Tensor, dim_size: int) -> Tensor:
    """``scatter(src, index, dim=0, dim_size=dim_size, reduce="mean")`` for a 2-D ``src``; in
    prediction PyG's operations with the division in place (the same values, one tensor fewer)."""
    if torch.is_grad_enabled() or src.dim() != 2:
        return scatter(src, index, dim=0, dim_size=dim_size, reduce="mean")
    count = src.new_zeros(dim_size).scatter_add_(0, index, src.new_ones(src.shape[0])).clamp(min=1)
    out = src.new_zeros((dim_size, src.shape[1])).scatter_add_(0, index.view(-1, 1).expand_as(src), src)
    return out.div_(count.view(-1, 1).expand_as(out))


class SeerBlock(nn.Module):
    r"""One SeerBlock (PerfSeer §3.2, equations 1-8).

    For edges :math:`j` from :math:`s_j` to :math:`t_j`, nodes :math:`i`, global node :math:`z`
    and global features :math:`u` of each graph:

    .. math::
        e'_j &= \mathrm{MLP}_e(e_j \| v_{s_j} \| v_{t_j})                          && (2) \\
        \bar e'_i &= \mathrm{mean}_{j: t_j = i}\, e'_j                              && (3) \\
        v'_i &= \mathrm{MLP}_v(\bar e'_i \| (v_i + z) \| u)                         && (4) \\
        \bar v'_z &= \mathrm{softmax}(V') = \textstyle\sum_i \mathrm{softmax}_i(\tau \odot v'_i) \odot v'_i && (5) \\
        z' &= \mathrm{MLP}_z(\bar v'_z + z)                                          && (6) \\
        \bar v'_u &= \mathrm{SynMM}(V')                                              && (7) \\
        u' &= \mathrm{MLP}_u(\bar v'_u \| z' \| u)                                   && (8)

    Every MLP is one ``Linear -> activation`` layer of ``hidden`` units except
    :math:`\mathrm{MLP}_z`, which has two.  The softmax of (5) is PyG's
    :class:`~torch_geometric.nn.aggr.SoftmaxAggregation` with a learned per-channel temperature
    :math:`\tau`.  A node without incoming edges gets :math:`\bar e'_i = 0`.

    Args:
        hidden: width of every state it outputs.
        edge_in: width of the incoming edge states (0: no edge features, MLP_e reads the two nodes).
        global_in: width of the incoming ``u`` (0: none; it is left out of (4) and (8)).
        gnpb: use the global node; False drops ``z`` from (4) and (8) and skips (5)-(6).
        synmm: aggregate (7) with :class:`SynMM`; False uses the mean.
        edge_update_global: also feed ``u`` (of the edge's graph) to :math:`\mathrm{MLP}_e`.
        activation, dropout: of every layer.

    Shapes:
        ``forward(x [N, hidden], edge_index [2, E], edge_attr [E, edge_in] or None,
        u [G, global_in] or None, z [G, hidden] or None, batch [N], num_graphs)``
        returns ``(x' [N, hidden], edge_attr' [E, hidden], u' [G, hidden], z' [G, hidden] or None)``.
    """

    def __init__(self, hidden: int, edge_in: int, global_in: int, *, gnpb: bool = True, synmm: bool = True,
                 edge_update_global: bool = False, activation: str = "relu", dropout: float = 0.0):
        super().__init__()
        self.edge_update_global = edge_update_global and global_in > 0
        edge_cat = edge_in + 2 * hidden + (global_in if self.edge_update_global else 0)
        self.mlp_e = mlp([edge_cat, hidden], activation, dropout, final_activation=True)
        self.mlp_v = mlp([2 * hidden + global_in, hidden], activation, dropout, final_activation=True)
        if gnpb:
            self.agg_z = SoftmaxAggregation(learn=True, channels=hidden)
            self.mlp_z = mlp([hidden, hidden, hidden], activation, dropout, final_activation=True)
        else:
            self.agg_z = self.mlp_z = None
        self.agg_u = SynMM(hidden) if synmm else MeanAggregation()
        self.mlp_u = mlp([hidden + (hidden if gnpb else 0) + global_in, hidden], activation, dropout,
                         final_activation=True)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None, u: Tensor | None,
                z: Tensor | None, batch: Tensor, num_graphs: int):
        src, dst = edge_index
        u_edge = _take(u, _take(batch, src)) if self.edge_update_global else None
        edge_attr = self.mlp_e(_cat(edge_attr, _take(x, src), _take(x, dst), u_edge))          # (2)
        e_bar = _scatter_mean(edge_attr, dst, x.shape[0])                                      # (3)
        v = x if z is None or self.mlp_z is None else x + _take(z, batch)
        x = self.mlp_v(_cat(e_bar, v, None if u is None else _take(u, batch)))                # (4)
        if self.mlp_z is not None:
            z = self.mlp_z(_softmax_aggregate(self.agg_z, x, batch, num_graphs) + z)          # (5), (6)
        else:
            z = None
        u = self.mlp_u(_cat(self.agg_u(x, batch, dim_size=num_graphs), z, u))                 # (7), (8)
        return x, edge_attr, u, z


class SeerNetTrunk(nn.Module):
    r"""Encoders and SeerBlocks: a batch of PerfGraphs to graph embeddings ``u'`` [G, hidden].

    Encoders (one ``Linear -> activation`` each): nodes from ``x || embed(op_type)``, edges from
    ``edge_attr``, globals from ``u``.  With GNPB the global node starts as the softmax aggregation
    of the encoded nodes, :math:`z_0 = \mathrm{softmax}(V_0)` (§3.2, GNPB).  Shared by
    :class:`SeerNet` and :class:`SeerNetMulti`.
    """

    def __init__(self, cfg: SeerNetConfig):
        super().__init__()
        h, act, p = cfg.hidden_dim, cfg.activation, cfg.dropout
        self.node_input = NodeInput(cfg.node_dim, cfg.num_op_types, cfg.op_embedding_dim)
        self.node_encoder = mlp([self.node_input.out_dim, h], act, p, final_activation=True)
        self.edge_encoder = mlp([cfg.edge_dim, h], act, p, final_activation=True) if cfg.use_edge_features else None
        self.global_encoder = (mlp([cfg.global_dim, h], act, p, final_activation=True)
                               if cfg.use_global_features else None)
        self.z_init = SoftmaxAggregation(learn=True, channels=h) if cfg.gnpb else None
        self.blocks = nn.ModuleList(
            SeerBlock(h, edge_in=h if (i > 0 or cfg.use_edge_features) else 0,
                      global_in=h if (i > 0 or cfg.use_global_features) else 0,
                      gnpb=cfg.gnpb, synmm=cfg.synmm, edge_update_global=cfg.edge_update_global,
                      activation=act, dropout=p)
            for i in range(cfg.num_blocks))

    def forward(self, data, batch: Tensor, u: Tensor, num_graphs: int, return_nodes: bool = False):
        """``u'`` [G, hidden]; with ``return_nodes`` also the final node states: ``(x' [N, hidden], u')``
        (what the graph auto-encoder of :mod:`perfseer.models.gae` decodes)."""
        x, u = self.states(data, batch, u, num_graphs)
        return (x, u) if return_nodes else u

    def states(self, data, batch: Tensor, u: Tensor, num_graphs: int) -> tuple[Tensor, Tensor]:
        """The last block's node states ``x'`` [N, hidden] and graph states ``u'`` [G, hidden]."""
        x = self.node_encoder(self.node_input(data.x, getattr(data, "op_type", None)))
        e = self.edge_encoder(data.edge_attr) if self.edge_encoder is not None else None
        u = self.global_encoder(u) if self.global_encoder is not None else None
        z = _softmax_aggregate(self.z_init, x, batch, num_graphs) if self.z_init is not None else None
        for block in self.blocks:
            x, e, u, z = block(x, data.edge_index, e, u, z, batch, num_graphs)
        return x, u


class SumReadout(nn.Module):
    r"""Per-operator costs composed by a sum: the ``"sum"`` readout of :class:`SeerNet`.

    Each node :math:`i` of a graph gets a log-cost, and so does the graph itself (the global node:
    what no operator accounts for, such as a per-step framework overhead); the prediction is the
    log of the sum of their exponentials:

    .. math::
        s_i = \mathrm{MLP}_n(x'_i \| x_i) + c, \quad
        s_G = \mathrm{MLP}_g(u' [\| u]) + c, \quad
        \log \hat y_G = \log\big(e^{s_G} + \textstyle\sum_{i \in G} e^{s_i}\big)

    The output is :math:`(\log \hat y_G - \mu) / \sigma`, the standardised log target the trainer
    fits, with :math:`\mu, \sigma` the target scaling it hands over through
    :meth:`set_target_scaling` (buffers, so they are saved with the weights), so that
    :math:`\hat y_G = e^{s_G} + \sum_i e^{s_i}` holds exactly in the target's unit (milliseconds).
    The offset :math:`c` is set once from the first training batch so that the mean prediction
    starts at the mean target (data-dependent initialisation, as ActNorm's).

    Args:
        node_in: width of the node input (``hidden + node_dim``).
        global_in: width of the global input (``hidden``, ``+ global_dim`` with ``head_globals``).
        hidden: hidden units of the two MLPs.
        num_targets: targets (one log-cost per node and target).
        activation, dropout: of the hidden layers.

    Shapes: ``forward(node_in [N, node_in], global_in [G, global_in], batch [N])`` -> [G, T].
    """

    def __init__(self, node_in: int, global_in: int, hidden: int, num_targets: int, activation: str = "relu",
                 dropout: float = 0.0):
        super().__init__()
        self.node_head = mlp([node_in, hidden, num_targets], activation, dropout)
        self.global_head = mlp([global_in, hidden, num_targets], activation, dropout)
        self.offset = nn.Parameter(torch.zeros(num_targets))
        self.register_buffer("target_mean", torch.zeros(num_targets))
        self.register_buffer("target_std", torch.ones(num_targets))
        self.register_buffer("initialised", torch.zeros((), dtype=torch.bool))

    def set_target_scaling(self, mean, std) -> None:
        """Take the trainer's target standardisation (``mean``, ``std`` of the log targets, [T])."""
        self.target_mean.copy_(torch.as_tensor(mean, dtype=self.target_mean.dtype).reshape(-1))
        self.target_std.copy_(torch.as_tensor(std, dtype=self.target_std.dtype).reshape(-1))

    def log_total(self, node_in: Tensor, global_in: Tensor, batch: Tensor) -> Tensor:
        """log y_hat [G, T], in the log of the target unit (before standardisation)."""
        s_node = self.node_head(node_in) + self.offset                      # [N, T]
        s_glob = self.global_head(global_in) + self.offset                  # [G, T]
        G = global_in.shape[0]
        m = scatter(s_node.detach(), batch, dim=0, dim_size=G, reduce="max")
        m = torch.maximum(m, s_glob.detach())                                # a stable log-sum-exp
        total = scatter(torch.exp(s_node - _take(m, batch)), batch, dim=0, dim_size=G, reduce="sum")
        return torch.log(total + torch.exp(s_glob - m)) + m

    def forward(self, node_in: Tensor, global_in: Tensor, batch: Tensor) -> Tensor:
        if self.training and not bool(self.initialised):
            with torch.no_grad():
                first = self.log_total(node_in, global_in, batch)
                self.offset.add_(self.target_mean - first.mean(0))
                self.initialised.fill_(True)
        return (self.log_total(node_in, global_in, batch) - self.target_mean) / self.target_std


class SeerNet(GraphRegressor):
    r"""SeerNet (PerfSeer, Zhao et al., §3.2): SeerBlocks and a 2-layer MLP head.

    .. math::
        \hat y = \mathrm{MLP}_{head}(u'), \quad u' = \mathrm{SeerBlock}^{L}(\mathrm{enc}(V, E, u))

    See :class:`SeerBlock` for equations 1-8.  At the default sizes (256 units, one block) it has
    about 1.0 M parameters (the paper reports 1.02 M).

    With ``readout="sum"`` (SeerNet-Sum) the head is a :class:`SumReadout` instead: a log-cost per
    node, read from its final state ``x'_i`` and its own features ``x_i``, plus one for the global
    node from ``u'``; the metric is the sum of their exponentials.  A graph's cost is then composed
    from its operators' costs, as nn-Meter composes kernels, but each operator's cost is read in
    context (its neighbours, the global node and ``u`` reach ``x'_i`` through the SeerBlock).

    Args:
        config: a :class:`SeerNetConfig`.

    Shapes: ``forward(data)`` with a PyG ``Batch`` (``x`` [N, node_dim], ``edge_index`` [2, E],
    ``edge_attr`` [E, edge_dim], ``u`` [G, global_dim], ``op_type`` [N], ``batch`` [N])
    returns [G, num_targets].

    Example::

        model = SeerNet(SeerNetConfig(num_targets=2))
        pred = model(Batch.from_data_list(graphs))   # [len(graphs), 2]
    """

    name = "seernet"
    config_class = SeerNetConfig

    def __init__(self, config: SeerNetConfig):
        super().__init__(config)
        self.trunk = SeerNetTrunk(config)
        if config.readout == "sum":
            self.head = SumReadout(config.hidden_dim + config.node_dim, _head_in(config), config.head_hidden_dim,
                                   config.num_targets, config.activation, config.dropout)
        else:
            self.head = mlp([_head_in(config), config.head_hidden_dim, config.num_targets],
                            config.activation, config.dropout)

    def set_target_scaling(self, mean, std) -> None:
        """Called by the trainer with the log-target standardisation (used by the ``"sum"`` readout)."""
        if isinstance(self.head, SumReadout):
            self.head.set_target_scaling(mean, std)

    def embed(self, data) -> Tensor:
        """The graph embedding the head reads: [G, hidden_dim] (``u`` appended with ``head_globals``);
        predictors measure how far a graph lies from the training graphs in this space."""
        batch, u, num_graphs = self._inputs(data)
        return _readout(self.config, self.trunk(data, batch, u, num_graphs), u)

    def forward(self, data) -> Tensor:
        return self.forward_embed(data)[0]

    def forward_embed(self, data) -> tuple[Tensor, Tensor]:
        """``(forward(data), embed(data))`` from one pass through the trunk: [G, num_targets] and
        [G, hidden_dim] (what a predictor needs for a prediction and its domain distance)."""
        batch, u, num_graphs = self._inputs(data)
        if isinstance(self.head, SumReadout):
            x, emb = self.trunk.states(data, batch, u, num_graphs)
            h = _readout(self.config, emb, u)
            return self.head(_cat(x, data.x), h, batch), h
        h = _readout(self.config, self.trunk(data, batch, u, num_graphs), u)
        return self.head(h), h


class SeerNetMulti(GraphRegressor):
    r"""SeerNet-Multi (PerfSeer §3.2): one shared trunk, one 2-layer MLP head per metric.

    .. math::
        \hat y_t = \mathrm{MLP}^{(t)}_{head}(u'), \quad t = 1 \dots T

    Trained with PCGrad (Yu et al., 2020): the gradient of each task loss on the
    :meth:`shared_parameters` is projected off the others' where they conflict; each head's
    parameters (:meth:`task_parameters`) get only their own task's gradient.  :meth:`task_losses`
    gives the per-task losses to project.

    Args:
        config: a :class:`SeerNetMultiConfig`; ``num_targets`` is the number of heads.

    Shapes: as :class:`SeerNet`: ``forward(data)`` returns [G, num_targets], column ``t`` from head
    ``t``; :meth:`embed` returns the shared embedding the heads read, [G, hidden_dim]
    (``hidden_dim + global_dim`` with ``head_globals``).

    Example::

        pred = model(batch)                                   # [G, T]
        losses = model.task_losses(pred, batch.y)             # T scalars
        grads = [torch.autograd.grad(l, list(model.shared_parameters()), retain_graph=True)
                 for l in losses]                             # what PCGrad projects
    """

    name = "seernet-multi"
    config_class = SeerNetMultiConfig

    def __init__(self, config: SeerNetMultiConfig):
        super().__init__(config)
        self.trunk = SeerNetTrunk(config)
        self.heads = nn.ModuleList(
            mlp([_head_in(config), config.head_hidden_dim, 1], config.activation, config.dropout)
            for _ in range(config.num_targets))

    def embed(self, data) -> Tensor:
        """The shared graph embedding the heads read: [G, hidden_dim], ``u`` appended with ``head_globals``."""
        batch, u, num_graphs = self._inputs(data)
        return _readout(self.config, self.trunk(data, batch, u, num_graphs), u)

    def forward(self, data) -> Tensor:
        return self.forward_embed(data)[0]

    def forward_embed(self, data) -> tuple[Tensor, Tensor]:
        """``(forward(data), embed(data))`` from one pass through the trunk."""
        h = self.embed(data)
        return _cat(*(head(h) for head in self.heads)), h

    def shared_parameters(self):
        """Parameters every task's loss reaches (encoders and SeerBlocks): what PCGrad projects."""
        return self.trunk.parameters()

    def task_parameters(self, t: int | None = None):
        """Parameters of head ``t`` (all heads when ``t`` is None): each reached by one task only."""
        if t is None:
            return self.heads.parameters()
        if not 0 <= t < len(self.heads):
            raise PerfseerError(f"task {t} is out of range, this model has {len(self.heads)} heads",
                                f"pass 0 <= t < {len(self.heads)}")
        return self.heads[t].parameters()

    def task_losses(self, pred: Tensor, target: Tensor, loss: str | None = None) -> list[Tensor]:
        """One scalar loss per metric (non-finite targets ignored); ``loss`` defaults to the config's."""
        return task_losses(pred, target, loss or self.config.loss)
