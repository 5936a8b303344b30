"""SeerNet's trunk as a graph auto-encoder: semi-supervised pre-training on unlabelled PerfGraphs.

TraPPM (Panner Selvam and Brorsson) pre-trains its graph encoder as a graph auto-encoder (Kipf and
Welling 2016) on unlabelled graphs, then fine-tunes it on the measured ones.  Here the encoder is
SeerNet's trunk (:class:`~perfseer.models.seernet.SeerNetTrunk`, the part every SeerNet head
reads) and three decoders reconstruct the input from its states:

- **edges** (TraPPM's objective): :math:`p(i \\to j) = \\sigma(\\langle W x'_i, W x'_j \\rangle)`, binary
  cross-entropy on every edge against as many random node pairs of the same graph;
- **node features**: a 2-layer MLP from :math:`x'_i` back to the node's scaled features ``x``;
- **global features**: a linear map from :math:`u'` back to the scaled ``u``.

No label is read, so every graph we can build — every timm and torchvision model at several
resolutions, the model space, the NAS spaces — can be used.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from perfseer.models.base import mlp
from perfseer.models.seernet import SeerNetConfig, SeerNetTrunk


class GraphAutoEncoder(nn.Module):
    r"""SeerNet's trunk with edge, node-feature and global-feature decoders.

    Args:
        config: the :class:`~perfseer.models.seernet.SeerNetConfig` of the SeerNet to fine-tune later
            (its trunk's shapes must match).

    Shapes: ``forward(batch)`` with a PyG ``Batch`` of scaled PerfGraphs returns
    ``(x' [N, hidden], u' [G, hidden])``; :meth:`losses` returns a dict of three scalars.

    Example::

        gae = GraphAutoEncoder(SeerNetConfig(hidden_dim=64))
        loss = sum(gae.losses(batch, generator).values())
        seernet.trunk.load_state_dict(gae.trunk.state_dict())   # then fine-tune on labels
    """

    name = "seernet-gae"

    def __init__(self, config: SeerNetConfig):
        super().__init__()
        self.config = config
        h = config.hidden_dim
        self.trunk = SeerNetTrunk(config)
        self.edge_proj = nn.Linear(h, h, bias=False)
        self.node_decoder = mlp([h, h, config.node_dim], config.activation, 0.0)
        self.global_decoder = nn.Linear(h, config.global_dim)

    def forward(self, data) -> tuple[Tensor, Tensor]:
        batch = data.batch if getattr(data, "batch", None) is not None else torch.zeros(
            data.x.shape[0], dtype=torch.long, device=data.x.device)
        u = data.u if data.u.dim() == 2 else data.u.unsqueeze(0)
        return self.trunk(data, batch, u, u.shape[0], return_nodes=True)

    def losses(self, data, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """Edge BCE, node-feature MSE and global-feature MSE of one batch."""
        x, u = self(data)
        src, dst = data.edge_index
        batch = data.batch if getattr(data, "batch", None) is not None else torch.zeros(
            x.shape[0], dtype=torch.long, device=x.device)
        counts = torch.bincount(batch, minlength=u.shape[0])
        starts = torch.cumsum(counts, 0) - counts
        g = batch[src]  # a negative pair: the edge's source and a random node of its own graph
        r = torch.rand(src.shape[0], generator=generator).to(x.device)
        neg = starts[g] + (r * counts[g]).long().clamp(max=counts[g] - 1)
        z = self.edge_proj(x)
        pos_logit = (z[src] * z[dst]).sum(-1)
        neg_logit = (z[src] * z[neg]).sum(-1)
        edge = (F.binary_cross_entropy_with_logits(pos_logit, torch.ones_like(pos_logit))
                + F.binary_cross_entropy_with_logits(neg_logit, torch.zeros_like(neg_logit))) / 2
        return {"edge": edge, "node": F.mse_loss(self.node_decoder(x), data.x),
                "global": F.mse_loss(self.global_decoder(u), data.u.reshape(u.shape[0], -1))}
