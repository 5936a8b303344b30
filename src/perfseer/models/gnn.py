"""Message-passing baselines built from PyG layers: GCN (BRP-NAS/Eagle), GAT, GIN, and the
GraphSAGE stack PMGNS (:mod:`perfseer.models.pmgns`) shares.

Each is ``node input -> L convolutions -> global pooling -> [pooled || u] -> MLP head``.  The
graphs are used as stored: directed edges, messages flowing from producer to consumer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, GINConv, global_add_pool, global_max_pool, global_mean_pool

from perfseer.errors import PerfseerError
from perfseer.models.base import (ACTIVATIONS, GraphRegressor, ModelConfig, NodeInput, _check_choice, _check_dropout,
                                  _check_positive, _hooked, mlp)

POOLS = {"mean": global_mean_pool, "add": global_add_pool, "max": global_max_pool}


@dataclass
class ConvStackConfig(ModelConfig):
    """Fields shared by the convolution-stack baselines; each subclass sets its paper's defaults."""

    hidden_dim: int = 256  # width of every convolution output
    num_layers: int = 3  # graph convolutions
    head_hidden_dim: int = 256  # hidden units of the MLP head
    head_layers: int = 1  # hidden layers of the head (before the output layer)
    op_embedding_dim: int = 16  # op_type embedding width (0: leave op_type out)
    pool: str = "mean"  # graph readout: mean, add or max of the node states
    use_global_features: bool = True  # concatenate u to the pooled nodes
    activation: str = "relu"  # non-linearity after every convolution and hidden layer
    dropout: float = 0.0  # dropout after every convolution and hidden layer

    def validate(self) -> None:
        super().validate()
        for name in ("hidden_dim", "num_layers", "head_hidden_dim"):
            _check_positive(self, name)
        for name in ("op_embedding_dim", "head_layers"):
            _check_positive(self, name, allow_zero=True)
        _check_choice(self, "pool", tuple(POOLS))
        _check_choice(self, "activation", tuple(ACTIVATIONS))
        _check_dropout(self)


class ConvStack(GraphRegressor):
    """Base of the convolution-stack baselines: subclasses implement :meth:`make_conv` (and
    :meth:`conv` when a layer needs more than ``(x, edge_index)``)."""

    def __init__(self, config: ConvStackConfig):
        super().__init__(config)
        self.node_input = NodeInput(config.node_dim, config.num_op_types, config.op_embedding_dim)
        dims = [self.node_input.out_dim] + [config.hidden_dim] * config.num_layers
        self.convs = nn.ModuleList(self.make_conv(i, d_in, d_out)
                                   for i, (d_in, d_out) in enumerate(zip(dims, dims[1:])))
        self.act = ACTIVATIONS[config.activation]()
        self.dropout = nn.Dropout(config.dropout)
        readout = config.hidden_dim + (config.global_dim if config.use_global_features else 0)
        head = [readout] + [config.head_hidden_dim] * config.head_layers + [config.num_targets]
        self.head = mlp(head, config.activation, config.dropout)

    def make_conv(self, i: int, in_dim: int, out_dim: int) -> nn.Module:
        raise NotImplementedError

    def conv(self, layer: nn.Module, x: Tensor, data) -> Tensor:
        return layer(x, data.edge_index)

    def forward(self, data) -> Tensor:
        batch, u, num_graphs = self._inputs(data)
        x = self.node_input(data.x, getattr(data, "op_type", None))
        dropout = self.training or _hooked(self.dropout)  # else the identity: skipped
        for layer in self.convs:
            x = self.act(self.conv(layer, x, data))
            if dropout:
                x = self.dropout(x)
        h = POOLS[self.config.pool](x, batch, size=num_graphs)
        if self.config.use_global_features:
            h = torch.cat([h, u], dim=-1)
        return self.head(h)


@dataclass
class GCNConfig(ConvStackConfig):
    """Hyper-parameters of :class:`GCN`; defaults follow the BRP-NAS predictor (4 layers of 600)."""

    hidden_dim: int = 600  # BRP-NAS: 600 hidden units
    num_layers: int = 4  # BRP-NAS: 4 GCN layers
    dropout: float = 0.2  # BRP-NAS: dropout 0.2


class GCN(ConvStack):
    r"""GCN predictor (Kipf & Welling, 2017), as BRP-NAS/Eagle (Dudziak et al., 2020) use it.

    .. math::
        X^{(l+1)} = \sigma\big(\hat D^{-1/2} (A + I) \hat D^{-1/2} X^{(l)} W^{(l)}\big), \quad
        \hat y = \mathrm{MLP}(\mathrm{pool}(X^{(L)}) \| u)

    with :class:`~torch_geometric.nn.GCNConv`, :math:`X^{(0)} = x \| \mathrm{embed}(\mathrm{op})`.
    Edge features are not used.  Here the readout is a global pooling plus ``u`` (BRP-NAS reads
    a global node; the pooling makes it usable on any graph).

    Shapes: ``forward(data)`` -> [G, num_targets].
    """

    name = "gcn"
    config_class = GCNConfig

    def make_conv(self, i, in_dim, out_dim):
        return GCNConv(in_dim, out_dim)


@dataclass
class GATConfig(ConvStackConfig):
    """Hyper-parameters of :class:`GAT`; sizes follow DIPPM's GNN comparison (Table 3: 512 hidden,
    dropout 0.05) with PMGNS's three layers."""

    hidden_dim: int = 512  # DIPPM Table 3: 512 hidden
    num_layers: int = 3  # as PMGNS's three blocks
    heads: int = 4  # attention heads per layer, concatenated (hidden_dim / heads units each)
    use_edge_features: bool = False  # feed edge_attr to the attention (DNNPerf-style); plain GAT does not
    dropout: float = 0.05  # DIPPM Table 3

    def validate(self) -> None:
        super().validate()
        _check_positive(self, "heads")
        if self.hidden_dim % self.heads:
            raise PerfseerError(f"GATConfig.hidden_dim ({self.hidden_dim}) is not divisible by heads ({self.heads})",
                                "pick hidden_dim a multiple of heads")


class GAT(ConvStack):
    r"""GAT predictor (Veličković et al., 2018) with :class:`~torch_geometric.nn.GATConv`.

    .. math::
        x'_i = \Big\Vert_{k=1}^{K} \sum_{j \in N(i) \cup \{i\}} \alpha^k_{ij} W^k x_j, \quad
        \alpha^k_{ij} = \mathrm{softmax}_j\big(\mathrm{LeakyReLU}(a^{k\top}[W^k x_i \| W^k x_j \| W^k_e e_{ij}])\big)

    (the edge term only with ``use_edge_features``), then pooling, ``u`` and an MLP head.

    Shapes: ``forward(data)`` -> [G, num_targets].
    """

    name = "gat"
    config_class = GATConfig

    def make_conv(self, i, in_dim, out_dim):
        cfg = self.config
        return GATConv(in_dim, out_dim // cfg.heads, heads=cfg.heads,
                       edge_dim=cfg.edge_dim if cfg.use_edge_features else None)

    def conv(self, layer, x, data):
        if self.config.use_edge_features:
            return layer(x, data.edge_index, edge_attr=data.edge_attr)
        return layer(x, data.edge_index)


@dataclass
class GINConfig(ConvStackConfig):
    """Hyper-parameters of :class:`GIN`; sizes follow DIPPM's GNN comparison (512 hidden,
    dropout 0.05) with PMGNS's three layers."""

    hidden_dim: int = 512  # DIPPM Table 3: 512 hidden
    num_layers: int = 3  # as PMGNS's three blocks
    train_eps: bool = True  # learn the self-weight epsilon (GIN-eps)
    dropout: float = 0.05  # DIPPM Table 3


class GIN(ConvStack):
    r"""GIN predictor (Xu et al., 2019) with :class:`~torch_geometric.nn.GINConv`.

    .. math::
        x'_i = \mathrm{MLP}\Big((1 + \epsilon)\, x_i + \sum_{j \in N(i)} x_j\Big)

    each MLP ``Linear -> act -> Linear``; then pooling, ``u`` and an MLP head.  No batch
    normalisation inside the MLPs, so a batch of one single-node graph trains too.

    Shapes: ``forward(data)`` -> [G, num_targets].
    """

    name = "gin"
    config_class = GINConfig

    def make_conv(self, i, in_dim, out_dim):
        cfg = self.config
        return GINConv(mlp([in_dim, out_dim, out_dim], cfg.activation), train_eps=cfg.train_eps)
