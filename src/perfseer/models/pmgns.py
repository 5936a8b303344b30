"""PMGNS, the predictor of DIPPM (Panner Selvam & Brorsson, 2023): GraphSAGE + static features."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch_geometric.nn import SAGEConv

from perfseer.errors import PerfseerError
from perfseer.features.schema import NODE_FEATURES
from perfseer.models import roofline as rl
from perfseer.models.base import _check_choice
from perfseer.models.estimator import OP_GROUP_NAMES, _group_lookup
from perfseer.models.gnn import ConvStack, ConvStackConfig
from perfseer.models.roofline import (BYTES_COL, FLOPS_COL, STEPS_COLS, log_baseline_torch, log_group_baseline_torch,
                                      recurrent_op_ids)

SHAPE_COLS = tuple(NODE_FEATURES.index(n) for n in ("kernel_h", "kernel_w", "groups"))

BASELINES = ("none", "roofline")


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
    baseline: str = "none"  # "roofline": predict log y - log b(g), b the roofline time (models/roofline.py)
    baseline_device: str = ""  # spec sheet of the roofline's peak and bandwidth ("" : all five parameters fitted)
    baseline_precision: str = "fp32"  # which peak of the spec (fp16 for AMP)
    baseline_fit: str = "overheads"  # roofline parameters fitted on the training graphs: none, overheads, all,
    # or groups (a rate pair and an overhead per operator group: roofline.fit_group_params)
    baseline_penalty: float = 0.3  # baseline_fit=groups: the pull of each group towards the shared roofline
    baseline_steps: bool = False  # a recurrent node pays the roofline's overhead per time step and direction
    # (roofline.node_launches), not once

    def validate(self) -> None:
        super().validate()
        _check_choice(self, "aggr", ("mean", "max", "add"))
        _check_choice(self, "baseline", BASELINES)
        _check_choice(self, "baseline_fit", ("none", "overheads", "all", "groups"))
        if not self.baseline_penalty > 0:
            raise PerfseerError(f"PMGNSConfig: baseline_penalty {self.baseline_penalty} is not positive",
                                "set baseline_penalty > 0 (0.3 by default)")
        if self.baseline == "roofline" and not self.baseline_device and self.baseline_fit not in ("all", "groups"):
            raise PerfseerError("PMGNSConfig: a roofline baseline without baseline_device needs baseline_fit='all'",
                                "set baseline_device (a name from 'perfseer devices') or baseline_fit=all")


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

    With ``baseline="roofline"`` the network's output is added to the standardised log of a
    per-graph roofline time :math:`b(g)` (:mod:`perfseer.models.roofline`), so it learns only
    :math:`\log y - \log b(g)`.  The roofline's parameters are fitted on the training graphs
    before training (:meth:`fit_baseline`, called by the trainer) and kept, with the feature and
    target scaling the forward needs to recover raw FLOPs and bytes, as buffers of the state: a
    card reproduces its predictions exactly.

    Args:
        config: a :class:`PMGNSConfig`.

    Shapes: ``forward(data)`` -> [G, num_targets].
    """

    name = "pmgns"
    config_class = PMGNSConfig

    def __init__(self, config: PMGNSConfig):
        super().__init__(config)
        if config.baseline == "roofline":
            T = config.num_targets
            self.register_buffer("baseline_params", torch.ones(T, 5, dtype=torch.float64))
            self.register_buffer("cost_mean", torch.zeros(2, dtype=torch.float64))
            self.register_buffer("cost_std", torch.ones(2, dtype=torch.float64))
            self.register_buffer("target_mean", torch.zeros(T, dtype=torch.float64))
            self.register_buffer("target_std", torch.ones(T, dtype=torch.float64))
            self.register_buffer("baseline_fitted", torch.zeros((), dtype=torch.bool))
            if config.baseline_fit == "groups":
                group_of, conv = _group_lookup()
                self.register_buffer("baseline_groups", torch.ones(T, len(OP_GROUP_NAMES), 3, dtype=torch.float64))
                # the operator vocabulary's groups, rebuilt from the code's vocabulary (the one the
                # inputs' op_type ids come from), so they are not part of the saved state
                self.register_buffer("group_of", torch.as_tensor(group_of), persistent=False)
                self.register_buffer("conv_ops", torch.as_tensor(conv, dtype=torch.long), persistent=False)
                self.register_buffer("shape_mean", torch.zeros(3, dtype=torch.float64))
                self.register_buffer("shape_std", torch.ones(3, dtype=torch.float64))
            if config.baseline_steps:
                self.register_buffer("steps_mean", torch.zeros(2, dtype=torch.float64))
                self.register_buffer("steps_std", torch.ones(2, dtype=torch.float64))
                self.register_buffer("recurrent_ops", torch.as_tensor(recurrent_op_ids()), persistent=False)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for key in ("group_of", "conv_ops"):  # saved by the first version of baseline_fit=groups
            state_dict.pop(prefix + key, None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def make_conv(self, i, in_dim, out_dim):
        return SAGEConv(in_dim, out_dim, aggr=self.config.aggr)

    def conv(self, layer, x: Tensor, data) -> Tensor:
        """The layer on ``x``; without gradients (prediction) by :func:`sage_inference`, the same
        values without PyG's message-passing machinery around them (a third of a blend card's
        prediction of one model)."""
        if torch.is_grad_enabled() or not plain_sage(layer):
            return layer(x, data.edge_index)
        return sage_inference(layer, x, data.edge_index)

    def set_target_scaling(self, mean, std) -> None:
        """Called by the trainer with the log-target standardisation (used by the roofline offset)."""
        if self.config.baseline == "roofline":
            self.target_mean.copy_(torch.as_tensor(np.asarray(mean, dtype=np.float64)).reshape(-1))
            self.target_std.copy_(torch.as_tensor(np.asarray(std, dtype=np.float64)).reshape(-1))

    def fit_baseline(self, graphs, y, feature_scaler) -> None:
        """Fit the roofline's parameters per target on the raw training ``graphs`` and targets
        ``y`` ``[N, T]`` (ms), and keep the scaling of the FLOPs and bytes columns; called by the
        trainer before the first epoch (a resumed run restores them)."""

        if self.config.baseline != "roofline":
            return
        if feature_scaler.mask:
            raise PerfseerError("the roofline baseline reads the node costs, which a feature mask hides",
                                "train without --feature-mask, or with baseline=none")
        c = self.config
        init = rl.spec_params(c.baseline_device, c.baseline_precision) if c.baseline_device else rl.RooflineParams(*rl.GENERIC)
        y = np.asarray(y, dtype=np.float64).reshape(len(graphs), -1)
        groups = c.baseline_fit == "groups"
        shared_fit = ("overheads" if c.baseline_device else "all") if groups else c.baseline_fit
        steps = c.baseline_steps
        for t in range(y.shape[1]):
            p = rl.fit_params(graphs, y[:, t], init, rl.FITS[shared_fit], steps)
            self.baseline_params[t] = torch.as_tensor(p.as_array())
            if groups:
                theta = rl.fit_group_params(graphs, y[:, t], rl.group_start(graphs, p), c.baseline_penalty, steps)
                self.baseline_groups[t] = torch.as_tensor(theta)
        cols = [rl.FLOPS_COL, rl.BYTES_COL]
        self.cost_mean.copy_(torch.as_tensor(feature_scaler.mean_["x"][cols]))
        self.cost_std.copy_(torch.as_tensor(feature_scaler.std_["x"][cols]))
        if groups:
            self.shape_mean.copy_(torch.as_tensor(feature_scaler.mean_["x"][list(SHAPE_COLS)]))
            self.shape_std.copy_(torch.as_tensor(feature_scaler.std_["x"][list(SHAPE_COLS)]))
        if steps:
            self.steps_mean.copy_(torch.as_tensor(feature_scaler.mean_["x"][list(STEPS_COLS)]))
            self.steps_std.copy_(torch.as_tensor(feature_scaler.std_["x"][list(STEPS_COLS)]))
        self.baseline_fitted.fill_(True)

    def log_baseline(self, data) -> Tensor:
        """``log b(g)`` ``[G, T]`` of a batch of scaled graphs (the trainer's input)."""

        batch, _, num_graphs = self._inputs(data)
        v = data.x[:, [FLOPS_COL, BYTES_COL]].double() * self.cost_std + self.cost_mean
        raw = torch.sign(v) * torch.expm1(v.abs())                          # undo signed_log1p
        L = self.node_launches(data) if self.config.baseline_steps else None
        if self.config.baseline_fit == "groups":
            grp = self.node_groups(data)
            return torch.stack([log_group_baseline_torch(raw[:, 0], raw[:, 1], grp, batch, num_graphs, th, L)
                                for th in self.baseline_groups], dim=1)
        return torch.stack([log_baseline_torch(raw[:, 0], raw[:, 1], batch, num_graphs, p, L)
                            for p in self.baseline_params], dim=1)

    def node_launches(self, data) -> Tensor:
        """Every node's launches from its type and its (scaled) ``axis_size`` and ``mm_batch`` features:
        :func:`perfseer.models.roofline.node_launches` in torch."""
        v = data.x[:, list(STEPS_COLS)].double() * self.steps_std + self.steps_mean
        t, d = torch.round(torch.sign(v) * torch.expm1(v.abs())).clamp_min(1.0).unbind(1)
        return torch.where(torch.isin(data.op_type.reshape(-1), self.recurrent_ops), t * d, torch.ones_like(t))

    def node_groups(self, data) -> Tensor:
        """Every node's operator group from its type and its (scaled) kernel and ``groups`` features:
        :func:`perfseer.models.estimator.node_groups` in torch."""
        v = data.x[:, list(SHAPE_COLS)].double() * self.shape_std + self.shape_mean
        kh, kw, g = (torch.sign(v) * torch.expm1(v.abs())).unbind(1)
        op = data.op_type.reshape(-1)
        is_conv = torch.isin(op, self.conv_ops)
        k1 = (kh < 1.5) & (kw < 1.5)                        # integers: <= 1, robust to the round trip
        return torch.where(is_conv & (g > 1.5), 0, torch.where(is_conv & k1, 1, torch.where(is_conv, 2, self.group_of[op])))

    def forward(self, data) -> Tensor:
        out = super().forward(data)
        if self.config.baseline != "roofline":
            return out
        if not bool(self.baseline_fitted):
            raise PerfseerError("this PMGNS has a roofline baseline that was never fitted",
                                "train it with perfseer.fit (the trainer calls fit_baseline)")
        off = (self.log_baseline(data) - self.target_mean) / self.target_std
        return out + off.to(out.dtype)


def plain_sage(layer) -> bool:
    """Whether :func:`sage_inference` computes ``layer``: a :class:`~torch_geometric.nn.SAGEConv`
    with a root weight, no projection, no normalisation, a mean or sum aggregation and no hooks."""
    return (type(layer) is SAGEConv and layer.root_weight and not layer.project and not layer.normalize
            and layer.aggr in ("mean", "add", "sum") and layer.lin_r is not None
            and not layer._propagate_forward_pre_hooks and not layer._propagate_forward_hooks
            and not layer._message_forward_pre_hooks and not layer._message_forward_hooks
            and not layer._aggregate_forward_pre_hooks and not layer._aggregate_forward_hooks
            and not layer._forward_hooks and not layer._forward_pre_hooks and not layer.explain
            and layer.decomposed_layers == 1)


def sage_inference(layer, x: Tensor, edge_index: Tensor) -> Tensor:
    """``layer(x, edge_index)`` of a :func:`plain_sage` layer with the tensor operations PyG's
    ``SAGEConv.forward`` performs (gather the sources, ``scatter_add_`` onto the targets, divide
    by the clamped in-degree for the mean, ``lin_l(aggregate) + lin_r(x)``), so the values are
    the same bit for bit (tests/models/test_pmgns_fast.py)."""
    src, dst = edge_index[0], edge_index[1]
    msg = x.index_select(0, src)
    n = x.size(0)
    out = msg.new_zeros((n,) + msg.shape[1:]).scatter_add_(0, dst.view(-1, 1).expand_as(msg), msg)
    if layer.aggr == "mean":
        out = out / _in_degree(edge_index, dst, n, msg).view(-1, 1).expand_as(out)
    return layer.lin_l(out) + layer.lin_r(x)


_DEGREE: list = []  # [(edge_index, its version, nodes, dtype, clamped in-degree)]: the last graph's


def _in_degree(edge_index: Tensor, dst: Tensor, n: int, msg: Tensor) -> Tensor:
    """The clamped in-degree PyG's mean divides by, computed once per batch of graphs for all the
    layers of all the members of a card (a blend of nine PMGNS has 27 such layers); kept for the
    last ``edge_index`` only, and recomputed when that tensor was changed in place (its version)."""
    count = lambda: msg.new_zeros(n).scatter_add_(0, dst, msg.new_ones(msg.size(0))).clamp(min=1)  # noqa: E731
    if edge_index.is_inference():  # made in inference mode (a collated batch): no version to check
        return count()
    key = (edge_index._version, n, msg.dtype, msg.device)
    last = _DEGREE[0] if _DEGREE else None  # read once: another thread may replace the entry meanwhile
    if last is not None and last[0] is edge_index and last[1] == key:
        return last[2]
    out = count()
    _DEGREE[:] = [(edge_index, key, out)]
    return out

