"""Tiny synthetic PerfGraphs and a tiny model with the neural-predictor interface."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.utils import scatter

from perfseer.features import schema
from perfseer.features.pyg import OP_VOCAB

NODE = {n: i for i, n in enumerate(schema.NODE_FEATURES)}
GLOBAL = {n: i for i, n in enumerate(schema.GLOBAL_FEATURES)}
CONV, RELU = OP_VOCAB.index("Conv"), OP_VOCAB.index("Relu")


def chain_graph(rng: np.random.Generator, batch: int | None = None) -> Data:
    """A chain of 3-7 alternating Conv/Relu nodes with random raw costs, batch 1-64."""
    n = int(rng.integers(3, 8))
    batch = int(batch or rng.choice([1, 2, 4, 8, 16, 32, 64]))
    x = np.zeros((n, len(schema.NODE_FEATURES)), np.float32)
    op = np.array([CONV if i % 2 == 0 else RELU for i in range(n)])
    flops = np.where(op == CONV, rng.uniform(1e6, 1e8, n), rng.uniform(1e4, 1e6, n)) * batch
    x[:, NODE["flops"]] = flops
    x[:, NODE["macs"]] = np.where(op == CONV, flops / 2, 0)
    x[:, NODE["memory_access_bytes"]] = flops / rng.uniform(5, 50)
    x[:, NODE["kernel_h"]] = np.where(op == CONV, 3, 0)
    x[:, NODE["flops_share"]] = flops / flops.sum()
    e = n - 1
    edge_index = np.stack([np.arange(e), np.arange(1, e + 1)]).astype(np.int64)
    edge_attr = np.zeros((e, len(schema.EDGE_FEATURES)), np.float32)
    edge_attr[:, 0] = rng.uniform(1e3, 1e6, e) * batch
    edge_attr[:, 3] = batch
    u = np.zeros((1, len(schema.GLOBAL_FEATURES)), np.float32)
    u[0, GLOBAL["num_nodes"]] = n
    u[0, GLOBAL["num_edges"]] = e
    u[0, GLOBAL["flops_total"]] = flops.sum()
    u[0, GLOBAL["batch_size"]] = batch
    u[0, GLOBAL["memory_access_total"]] = x[:, NODE["memory_access_bytes"]].sum()
    return Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(edge_index), edge_attr=torch.from_numpy(edge_attr),
                u=torch.from_numpy(u), op_type=torch.from_numpy(op), num_nodes=n)


def flops_dataset(n: int, seed: int = 0, c: float = 1e-6, targets: int = 1, noise: float = 0.0) -> list[Data]:
    """Graphs with ``y`` = ``c * flops_total`` (column 0) and ``0.5 * c * memory_access_total + 1``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        g = chain_graph(rng)
        cols = [c * float(g.u[0, GLOBAL["flops_total"]]), 0.5 * c * float(g.u[0, GLOBAL["memory_access_total"]]) + 1]
        y = np.array(cols[:targets]) * np.exp(noise * rng.standard_normal(targets))
        g.y = torch.from_numpy(y.astype(np.float32)).reshape(1, -1)
        out.append(g)
    return out


@dataclass
class TinyConfig:
    num_targets: int = 1
    hidden: int = 16
    loss: str = "mse"
    dropout: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


class TinyNet(nn.Module):
    """Mean-pooled node MLP concatenated with u -> a shared layer -> one head per target."""

    def __init__(self, config: TinyConfig | None = None):
        super().__init__()
        self.config = config or TinyConfig()
        h = self.config.hidden
        self.node = nn.Sequential(nn.Linear(len(schema.NODE_FEATURES), h), nn.ReLU())
        self.body = nn.Sequential(nn.Linear(h + len(schema.GLOBAL_FEATURES), h), nn.ReLU(),
                                  nn.Dropout(self.config.dropout))
        self.heads = nn.ModuleList(nn.Linear(h, 1) for _ in range(self.config.num_targets))

    def forward(self, data) -> torch.Tensor:
        batch = data.batch if getattr(data, "batch", None) is not None else torch.zeros(data.num_nodes, dtype=torch.long)
        pooled = scatter(self.node(data.x), batch, dim=0, dim_size=data.u.shape[0], reduce="mean")
        z = self.body(torch.cat([pooled, data.u], dim=1))
        return torch.cat([head(z) for head in self.heads], dim=1)

    def shared_parameters(self):
        return [*self.node.parameters(), *self.body.parameters()]
