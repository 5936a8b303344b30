"""MLP-Node: the per-node MLP baseline of PerfSeer §4.3 (no graph structure)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.utils import to_dense_batch

from perfseer.models.base import (ACTIVATIONS, GraphRegressor, ModelConfig, NodeInput, _check_choice, _check_dropout,
                                  _check_positive, mlp)


@dataclass
class MLPNodeConfig(ModelConfig):
    """Hyper-parameters of :class:`MLPNode`.  PerfSeer reports MLP-Node with over four times
    SeerNet's parameters (> 4 M); the defaults give about 5.4 M."""

    max_nodes: int = 256  # node slots: larger graphs are truncated, smaller ones zero-padded
    op_embedding_dim: int = 8  # op_type embedding width per node slot (0: leave op_type out)
    hidden_dim: int = 512  # units of every hidden layer
    num_layers: int = 2  # hidden layers before the output layer
    use_global_features: bool = True  # append u to the flattened nodes
    activation: str = "relu"  # non-linearity of the hidden layers
    dropout: float = 0.0  # dropout after every hidden layer

    def validate(self) -> None:
        super().validate()
        for name in ("max_nodes", "hidden_dim", "num_layers"):
            _check_positive(self, name)
        _check_positive(self, "op_embedding_dim", allow_zero=True)
        _check_choice(self, "activation", tuple(ACTIVATIONS))
        _check_dropout(self)


class MLPNode(GraphRegressor):
    r"""MLP-Node (PerfSeer §4.3 baseline): an MLP on the concatenated features of all nodes.

    .. math::
        \hat y = \mathrm{MLP}([\tilde v_1, m_1 \| \dots \| \tilde v_K, m_K \| u]),
        \quad \tilde v_i = x_i \| \mathrm{embed}(\mathrm{op}_i)

    Nodes are read in stored (topological) order and padded with zeros or truncated to
    :math:`K` = ``max_nodes`` slots; :math:`m_i` is 1 for a real node and 0 for padding, so a padded
    slot differs from a node whose standardised features are all 0.  Not invariant to node order.

    Args:
        config: a :class:`MLPNodeConfig`.

    Shapes: ``forward(data)`` -> [G, num_targets]; input layer width
    ``max_nodes * (node_dim + op_embedding_dim + 1) + global_dim``.
    """

    name = "mlp-node"
    config_class = MLPNodeConfig
    permutation_invariant = False

    def __init__(self, config: MLPNodeConfig):
        super().__init__(config)
        self.node_input = NodeInput(config.node_dim, config.num_op_types, config.op_embedding_dim)
        width = config.max_nodes * (self.node_input.out_dim + 1)
        width += config.global_dim if config.use_global_features else 0
        dims = [width] + [config.hidden_dim] * config.num_layers + [config.num_targets]
        self.mlp = mlp(dims, config.activation, config.dropout)

    def forward(self, data) -> Tensor:
        batch, u, num_graphs = self._inputs(data)
        v = self.node_input(data.x, getattr(data, "op_type", None))
        v = torch.cat([v, torch.ones_like(v[:, :1])], dim=-1)  # the slot-is-a-node indicator m_i
        dense, _ = to_dense_batch(v, batch, max_num_nodes=self.config.max_nodes, batch_size=num_graphs)
        h = dense.flatten(1)
        if self.config.use_global_features:
            h = torch.cat([h, u], dim=-1)
        return self.mlp(h)
