"""PMGNS, the predictor of DIPPM (Panner Selvam & Brorsson, 2023): GraphSAGE + static features."""

from __future__ import annotations

from dataclasses import dataclass

from torch_geometric.nn import SAGEConv

from perfseer.models.base import _check_choice
from perfseer.models.gnn import ConvStack, ConvStackConfig


@dataclass
class PMGNSConfig(ConvStackConfig):
    """Hyper-parameters of :class:`PMGNS`; defaults from DIPPM §3.4 and Table 3."""

    hidden_dim: int = 512  # DIPPM Table 3: 512 hidden
    num_layers: int = 3  # DIPPM §3.4: three sequential GraphSAGE blocks
    head_hidden_dim: int = 512  # width of the fully connected blocks
    head_layers: int = 2  # DIPPM §3.4: three FC blocks, i.e. two hidden layers and the output layer
    aggr: str = "mean"  # GraphSAGE neighbour aggregation (mean, max, add)
    dropout: float = 0.05  # DIPPM Table 3
    loss: str = "huber"  # DIPPM §4: Huber beat MSE

    def validate(self) -> None:
        super().validate()
        _check_choice(self, "aggr", ("mean", "max", "add"))


class PMGNS(ConvStack):
    r"""PMGNS (DIPPM §3.4): GraphSAGE node embeddings, pooled, concatenated with the static
    (global) features ``u`` and fed to fully connected layers.

    .. math::
        x'_i = W_1 x_i + W_2 \cdot \mathrm{mean}_{j \in N(i)} x_j, \quad
        \hat y = \mathrm{FC}(\mathrm{pool}(X^{(L)}) \| u)

    with :class:`~torch_geometric.nn.SAGEConv`.  DIPPM's static features are five counts (MACs,
    convolutions, dense, ReLU, batch size); here ``u`` is the PerfGraph's global features.  DIPPM
    predicts several metrics from one network; ``num_targets`` sets how many.  It was trained with
    the Huber loss, hence ``loss = "huber"``.

    Args:
        config: a :class:`PMGNSConfig`.

    Shapes: ``forward(data)`` -> [G, num_targets].
    """

    name = "pmgns"
    config_class = PMGNSConfig

    def make_conv(self, i, in_dim, out_dim):
        return SAGEConv(in_dim, out_dim, aggr=self.config.aggr)
