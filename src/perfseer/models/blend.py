"""Blend: a weighted geometric mean of separately trained networks, weights fitted on validation.

Networks of different design err on different unseen families (on the timm leave-families-out
folds, SeerNet-Sum and PMGNS each lose some folds the other wins, ``docs/history.md``), so
averaging their log predictions cancels part of each one's family-specific error.  The blend is

.. math::
    \\log \\hat y = \\textstyle\\sum_m w_m \\log \\hat y_m, \\quad w_m \\ge 0, \\ \\sum_m w_m = 1

with each member trained on its own (same data, same seed, same recipe) and ``w`` chosen on the
validation rows afterwards (:func:`fit_weights`: the grid point of the simplex, step 1/20, with
the lowest validation MAPE).  With ``fit_shift`` the blend also adds a constant ``b`` to its log
prediction, ``b`` fitted on the same validation rows after the weights (:func:`fit_log_shift`:
the lowest validation MAPE on a grid of step 0.005 in ``[-0.3, 0.3]``).  The median of a log
prediction is not the MAPE-optimal point: MAPE charges an over-prediction more than an
under-prediction of the same log size, so with errors of spread ``s`` the best constant lies
below the median; on new families the spread is larger than on the training ones and the fitted
``b`` is negative (-0.02 to -0.065 on the timm leave-families-out folds, ``docs/history.md``).  Every member predicts the same standardised log target (the trainer
fits one target scaling on the training rows), so the blend is one network: its output is the
weighted sum of its members' outputs, and a card holds it like any other (``kind: neural``, model
``blend``, the members' full configs in ``member_configs``).

Members may repeat with their own training seeds (``members=pmgns+pmgns+pmgns``, ``seeds=0,1,2``:
a seed ensemble, whose average cancels part of the initialisation noise of one network);
``tie_seeds=true`` fits one weight per distinct member spec, split equally among its seeds
(:func:`fit_tied_weights`), so ``members=seernet[readout=sum]+seernet+pmgns+pmgns+pmgns``,
``seeds=0,0,0,1,2`` is SeerNet-Sum, SeerNet and the mean of three PMGNS seeds.
``perfseer train --model blend`` trains it (members ``seernet[readout=sum]+seernet+pmgns`` unless
``--set 'members=...'`` names others)
(:func:`train_blend`, called by :func:`perfseer.fit.methods.train_method`).

Example::

    from perfseer.fit.methods import train_method

    fitted = train_method("blend", sel.train, sel.val, {"members": "seernet[readout=sum]+pmgns", "hidden_dim": 64})
    fitted.config["weights"]          # e.g. "0.55,0.45", chosen on sel.val
    fitted.predict(sel.test)          # [N, T] milliseconds
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from perfseer.errors import PerfseerError
from perfseer.models.base import GraphRegressor, ModelConfig
from perfseer.models.registry import build_from_dict, config_class, is_neural, parse_overrides, register

MAX_MEMBERS = 4  # the weight search enumerates the simplex grid: 1,771 points at 4 members (or groups)
# with tie_seeds: members in all (their distinct specs are at most MAX_MEMBERS): three seeds of each
# of four kinds, the i9's choice of round 10 (docs/history.md)
MAX_TIED_MEMBERS = 12
GRID = 20  # weight steps of 1/GRID
_COMMON = ("node_dim", "edge_dim", "global_dim", "num_op_types", "num_targets")


@dataclass
class BlendConfig(ModelConfig):
    """Hyper-parameters of :class:`Blend`."""

    # the member networks, "+"-separated method specs NAME or NAME[FIELD=VALUE;...] of neural models
    # (the default: the lowest mean validation MAPE of the blends tried in the leave-families-out
    # runs on both timm settings, docs/history.md)
    members: str = "seernet[readout=sum]+seernet+pmgns"
    # one weight per member, comma-separated (>= 0, summing to 1); "" until fitted: equal weights
    weights: str = ""
    hidden_dim: int = 0  # > 0: every member's hidden_dim (and head_hidden_dim where it has one); 0: theirs
    head_hidden_dim: int = 0  # > 0: every member's head_hidden_dim; 0: theirs (as `perfseer train --hidden` leaves it)
    # JSON list of {"name", "config"}: the members' full configs, written when the blend is built
    # (a card rebuilds the members from these, not from `members`, so later default changes cannot move them)
    member_configs: str = ""
    # one training seed per member, comma-separated integers (e.g. pmgns+pmgns+pmgns with seeds=0,1,2:
    # a seed ensemble); "": every member gets the training config's seed
    seeds: str = ""
    # true: members with the same spec (seeds of one network, `seeds`) share one weight, split equally,
    # so the weight search sees the seeds' average, not the luckiest seed; allows up to 8 members
    tie_seeds: bool = False
    # fit `shift` on the validation rows after the weights (fit_log_shift); false: shift stays as given
    fit_shift: bool = False
    # per target, comma-separated: added to the blend's standardised output, i.e. the fitted log-space
    # shift b divided by the target's std (exp(b) multiplies the prediction in its unit); "": none
    shift: str = ""
    # a blend card (its .json), or a folder of them (a k-fold run's .stages/NAME), whose members are
    # reused where this blend has the same member (same name, full config and seed): the card trained
    # on the same rows (its scalings equal this training set's) is used; "": train every member.
    # Training is deterministic here, so a reused member is the network training would give again: a
    # recipe that changes one member retrains that member only
    warm_from: str = ""

    def validate(self) -> None:
        super().validate()
        if self.hidden_dim < 0 or self.head_hidden_dim < 0:
            raise PerfseerError("BlendConfig.hidden_dim and head_hidden_dim must be >= 0", "use 0 for the members' own")
        specs = split_members(self.members)
        if self.tie_seeds and 2 <= len(specs) <= MAX_TIED_MEMBERS and 1 <= len(set(specs)) <= MAX_MEMBERS:
            pass
        elif self.tie_seeds:
            raise PerfseerError(f"BlendConfig.members names {len(specs)} network(s) of {len(set(specs))} kinds "
                                f"with tie_seeds: {self.members!r}",
                                f"name 2 to {MAX_TIED_MEMBERS} networks of at most {MAX_MEMBERS} kinds joined by '+'")
        elif not 2 <= len(specs) <= MAX_MEMBERS:
            raise PerfseerError(f"BlendConfig.members names {len(specs)} network(s): {self.members!r}",
                                f"name 2 to {MAX_MEMBERS} networks joined by '+', e.g. seernet[readout=sum]+pmgns")
        if self.weights:
            parse_weights(self.weights, len(specs))
        if self.shift:
            parse_shift(self.shift, self.num_targets)
        if self.seeds:
            parse_seeds(self.seeds, len(specs))

    def member_list(self) -> list[tuple[str, dict]]:
        """``[(name, full config dict)]`` of the members: from ``member_configs`` when set, else
        built from ``members`` with the shared input sizes, targets and hidden widths."""

        if self.member_configs:
            try:
                items = json.loads(self.member_configs)
                out = [(str(i["name"]), dict(i["config"])) for i in items]
            except (ValueError, KeyError, TypeError) as e:
                raise PerfseerError(f"BlendConfig.member_configs is not a JSON list of {{name, config}} ({e})",
                                    "leave member_configs empty: it is written when the blend is built") from None
            if len(out) != len(split_members(self.members)):
                raise PerfseerError(f"BlendConfig.member_configs has {len(out)} members, members names "
                                    f"{len(split_members(self.members))}", "leave member_configs empty")
            return out
        out = []
        for spec in split_members(self.members):
            name, inner = _split_spec(spec)
            if name == "blend" or not is_neural(name):
                raise PerfseerError(f"blend member {name!r} is not a neural network",
                                    "blend neural models only (seernet, pmgns, gcn, gat, gin, mlp-node)")
            cls = config_class(name)
            fields = {f for f in cls.__dataclass_fields__}
            cfg = {k: getattr(self, k) for k in _COMMON}
            for width, value in (("hidden_dim", self.hidden_dim), ("head_hidden_dim", self.head_hidden_dim)):
                if value and width in fields:
                    cfg[width] = value
            if name == "gat" and self.hidden_dim and self.hidden_dim % 4:
                cfg["heads"] = 1  # GAT splits hidden_dim over its heads
            cfg |= parse_overrides(name, inner)
            out.append((name, cls.from_dict(cfg).to_dict()))
        return out


def split_members(text: str) -> list[str]:
    """``"seernet[readout=sum;dropout=0.1]+pmgns"`` to ``["seernet[readout=sum;dropout=0.1]", "pmgns"]``
    ("+" inside brackets does not split)."""
    out, depth, cur = [], 0, ""
    for ch in str(text):
        depth += (ch == "[") - (ch == "]")
        if ch == "+" and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [s for s in out if s]


def _split_spec(spec: str) -> tuple[str, list[str]]:
    name, _, inner = spec.partition("[")
    if inner and not inner.endswith("]"):
        raise PerfseerError(f"blend member {spec!r} has no closing ]", "write NAME[FIELD=VALUE;FIELD=VALUE]")
    return name.strip(), [i for i in inner[:-1].split(";") if i.strip()]


def parse_weights(text: str, n: int) -> list[float]:
    """``"0.55,0.45"`` to floats, checked: ``n`` of them, >= 0, summing to 1 (within 1e-3; renormalised)."""
    try:
        w = [float(x) for x in str(text).split(",")]
    except ValueError:
        raise PerfseerError(f"BlendConfig.weights {text!r} is not comma-separated numbers",
                            "write e.g. weights=0.55,0.45, or leave it empty to fit on validation") from None
    if len(w) != n or any(not np.isfinite(x) or x < 0 for x in w) or abs(sum(w) - 1) > 1e-3:
        raise PerfseerError(f"BlendConfig.weights {text!r}: need {n} weights >= 0 that sum to 1",
                            "leave weights empty to fit them on validation")
    return [x / sum(w) for x in w]


def parse_seeds(text: str, n: int) -> list[int]:
    """``"0,1,2"`` (one integer per member) to ints."""
    try:
        v = [int(x) for x in str(text).split(",")]
    except ValueError:
        v = []
    if len(v) != n:
        raise PerfseerError(f"BlendConfig.seeds {text!r}: need {n} integers, one per member, comma-separated",
                            "e.g. seeds=0,1,2 for three members, or leave seeds empty for the training seed")
    return v


def parse_shift(text: str, n: int) -> list[float]:
    """``"-0.05"`` (one finite number per target, comma-separated) to floats."""
    try:
        v = [float(x) for x in str(text).split(",")]
    except ValueError:
        v = []
    if len(v) != n or not all(np.isfinite(x) for x in v):
        raise PerfseerError(f"BlendConfig.shift {text!r}: need {n} finite number(s), comma-separated",
                            "leave shift empty (no shift), or set fit_shift=true to fit it on validation")
    return v


def format_weights(w) -> str:
    return ",".join(f"{float(x):.4g}" for x in w)


def member_groups(specs) -> list[int]:
    """Group index per member: members with the same spec share one (``tie_seeds``)."""
    first = {}
    return [first.setdefault(s, len(first)) for s in specs]


def fit_tied_weights(log_preds, y, groups) -> np.ndarray:
    """:func:`fit_weights` over the groups' mean log predictions; each group's weight split equally
    among its members.  ``groups``: one group index per member (:func:`member_groups`)."""
    L = np.asarray(log_preds, dtype=np.float64)
    groups = np.asarray(groups)
    ids = sorted(set(groups.tolist()))
    means = np.stack([L[groups == g].mean(axis=0) for g in ids])
    wg = fit_weights(means, y)
    return np.array([wg[ids.index(g)] / (groups == g).sum() for g in groups])


def fit_weights(log_preds, y) -> np.ndarray:
    """The simplex weights (step ``1 / GRID``) whose geometric-mean blend has the lowest MAPE on ``y``.

    Args:
        log_preds: ``[M, N]`` or ``[M, N, T]`` natural logs of each member's predictions.
        y: ``[N]`` or ``[N, T]`` measured values (> 0; non-finite ones are ignored).

    Ties go to the first grid point in enumeration order.  Raises :class:`PerfseerError` with no
    finite measurement or more than :data:`MAX_MEMBERS` members.
    """
    L = np.asarray(log_preds, dtype=np.float64)
    M = L.shape[0]
    if not 1 <= M <= MAX_MEMBERS:
        raise PerfseerError(f"cannot fit weights for {M} members", f"blend 2 to {MAX_MEMBERS} networks")
    L = L.reshape(M, -1)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    ok = np.isfinite(y) & (y > 0) & np.isfinite(L).all(0)
    if not ok.any():
        raise PerfseerError("no finite validation measurement to fit the blend's weights on",
                            "fit the blend with a validation split that has measurements")
    L, y = L[:, ok], y[ok]
    best, best_err = None, np.inf
    for c in itertools.product(range(GRID + 1), repeat=M - 1):
        if sum(c) > GRID:
            continue
        w = np.array([*c, GRID - sum(c)], dtype=np.float64) / GRID
        err = float(np.mean(np.abs(np.exp(w @ L) / y - 1)))
        if err < best_err - 1e-12:
            best, best_err = w, err
    return best


SHIFT_SPAN, SHIFT_STEP = 0.3, 0.005  # fit_log_shift's grid: [-0.3, 0.3] in log units, step 0.005


def fit_log_shift(log_pred, y) -> np.ndarray:
    """Per target, the constant ``b`` (grid step :data:`SHIFT_STEP` in ``[-SHIFT_SPAN, SHIFT_SPAN]``)
    for which ``exp(log_pred + b)`` has the lowest MAPE on ``y``.

    Args:
        log_pred: ``[N]`` or ``[N, T]`` natural logs of the predictions.
        y: the same shape, measured values (> 0; non-finite ones are ignored).

    Returns ``[T]``; ties go to the ``b`` closest to 0.  Raises :class:`PerfseerError` when a
    target has no finite measurement.
    """
    L = np.asarray(log_pred, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    L, y = L.reshape(len(L), -1), y.reshape(len(y), -1)
    grid = np.arange(-round(SHIFT_SPAN / SHIFT_STEP), round(SHIFT_SPAN / SHIFT_STEP) + 1) * SHIFT_STEP
    grid = grid[np.argsort(np.abs(grid), kind="stable")]  # ties to the smallest |b|
    out = []
    for t in range(L.shape[1]):
        ok = np.isfinite(y[:, t]) & (y[:, t] > 0) & np.isfinite(L[:, t])
        if not ok.any():
            raise PerfseerError("no finite validation measurement to fit the blend's shift on",
                                "fit the blend with a validation split that has measurements, or fit_shift=false")
        err = np.mean(np.abs(np.exp(L[ok, t][None] + grid[:, None]) / y[ok, t][None] - 1), axis=1)
        out.append(float(grid[int(np.argmin(err))]))
    return np.asarray(out)


class Blend(GraphRegressor):
    r"""A weighted geometric mean of member networks (see the module docstring).

    .. math::
        \mathrm{out}(G) = \textstyle\sum_m w_m\, \mathrm{member}_m(G)

    in the standardised log-target units every member predicts.

    Args:
        config: a :class:`BlendConfig`; building it writes ``config.member_configs``.

    Shapes: ``forward(data)`` -> [G, num_targets]; :meth:`embed` -> the members' embeddings side by
    side (members without ``embed`` contribute none).
    """

    name = "blend"
    config_class = BlendConfig

    def __init__(self, config: BlendConfig):
        super().__init__(config)

        members = config.member_list()
        self.members = nn.ModuleList(build_from_dict(name, cfg) for name, cfg in members)
        config.member_configs = json.dumps([{"name": n, "config": c} for n, c in members], sort_keys=True)
        w = parse_weights(config.weights, len(members)) if config.weights else [1 / len(members)] * len(members)
        self.register_buffer("weights", torch.tensor(w, dtype=torch.float32))
        shift = parse_shift(config.shift, config.num_targets) if config.shift else [0.0] * config.num_targets
        self.register_buffer("shift", torch.tensor(shift, dtype=torch.float32), persistent=False)

    def set_weights(self, w) -> None:
        """Set the blend weights (normalised to sum 1) and the config's ``weights``, which the card records."""
        w = np.asarray(w, dtype=np.float64).reshape(-1)
        if len(w) != len(self.members) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise PerfseerError(f"blend weights {w.tolist()} for {len(self.members)} members",
                                "pass one finite weight >= 0 per member, not all 0")
        w = w / w.sum()
        self.weights.copy_(torch.as_tensor(w, dtype=self.weights.dtype))
        self.config.weights = format_weights(w)

    def set_shift(self, z) -> None:
        """Set the per-target shift of the standardised output (and the config's ``shift``)."""
        z = np.asarray(z, dtype=np.float64).reshape(-1)
        self.config.shift = ",".join(f"{float(x):.6g}" for x in z)
        self.shift.copy_(torch.as_tensor(parse_shift(self.config.shift, len(self.shift)), dtype=self.shift.dtype))

    def set_target_scaling(self, mean, std) -> None:
        for m in self.members:
            hook = getattr(m, "set_target_scaling", None)
            if callable(hook):
                hook(mean, std)

    def _weighted(self) -> list[tuple[Tensor, nn.Module, bool]]:
        """``(weight, member, used)`` per member; a member of weight 0 is not used for the
        prediction (its output would be multiplied by 0: skipping it gives the same value and costs
        nothing; an 8-member card whose validation fit zeroed four runs half the networks)."""
        return [(w, m, float(w) != 0.0) for w, m in zip(self.weights, self.members)]

    def forward(self, data) -> Tensor:
        self._inputs(data)
        return sum(w * m(data) for w, m, used in self._weighted() if used) + self.shift

    @property
    def embed(self):
        """The members' embeddings side by side, ``embed(data) -> [G, sum of their widths]``; a blend
        with no member that has one has no ``embed`` (``hasattr`` is false, as for baselines), so
        the domain check skips the embedding distance."""
        parts = [m for m in self.members if hasattr(m, "embed")]
        if not parts:
            raise AttributeError("embed")
        return lambda data: torch.cat([m.embed(data) for m in parts], dim=-1)

    @property
    def forward_embed(self):
        """``forward_embed(data) -> (forward(data), embed(data))``, each member's network run once;
        absent where :attr:`embed` is."""
        if not any(hasattr(m, "embed") for m in self.members):
            raise AttributeError("forward_embed")

        def both(data) -> tuple[Tensor, Tensor]:
            self._inputs(data)
            total, embs = self.shift, []
            for w, m, used in self._weighted():
                if used and hasattr(m, "forward_embed"):
                    out, e = m.forward_embed(data)
                    embs.append(e)
                else:
                    if hasattr(m, "embed"):  # a member of weight 0 still lends its embedding to the domain check
                        embs.append(m.embed(data))
                    if not used:
                        continue
                    out = m(data)
                total = total + w * out
            return total, torch.cat(embs, dim=-1)

        return both


register(Blend.name, BlendConfig, Blend)
