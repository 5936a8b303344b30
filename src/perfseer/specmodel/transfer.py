"""Spec-conditioned transfer: a model's latency on a GPU nobody measured, carried over from a GPU
that was measured, through the two GPUs' spec sheets.

For a graph ``g``, a *source* GPU ``s`` (its latency measured, or predicted by its measured-device
SeerNet) and a *target* GPU ``t`` known only from its spec sheet::

    log y_t(g) = log y_s(g) + f(spec ratios of t vs s, graph features of g)

``f`` is a ridge regression (no intercept: ``s -> s`` is the identity) on the pair's log spec
ratios (FP16 tensor peak, memory bandwidth, SMs, clock, L2) and the graph's roofline-time ratio
``log R_t(g) / R_s(g)`` (``R``: the per-node ``max(FLOPs / peak, bytes / bandwidth)`` summed over
the PerfGraph's nodes), each optionally crossed with standardized graph features (log source
latency, FLOPs, memory traffic, node count, batch size, arithmetic intensity).  It is fitted on
ordered pairs of *measured* GPUs only.  A target is answered from every source and the answers
combined (geometric mean, or the source nearest in spec space).  Which feature set, ridge
strength and combination: chosen by an inner leave-one-GPU-out over the training GPUs
(``benchmarks/lib/spec_transfer_logo.py``).

A :class:`Transfer` is plain JSON (``to_dict``/``from_dict``); the bundled one
(``perfseer/predictors/spec-transfer.json``) is fitted on every measured RTX GPU of the timm
benchmark (AMP inference) and carries its leave-one-GPU-out residual quantile (``q``) and the
spec ranges of its GPUs (``domain``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from perfseer.errors import PerfseerError
from perfseer.features import schema

SPEC_KEYS = ("fp16_tflops", "mem_bandwidth_gbs", "sms", "clock_mhz", "l2_mib")
GRAPH_KEYS = ("log_y_src", "log_flops", "log_mem", "log_nodes", "log_batch", "log_ai")
# feature sets: which pair features enter, and whether they are crossed with the graph features
FEATURE_SETS = {
    "identity": None,  # y_t = y_s
    "roofline": None,  # y_t = y_s * R_t / R_s, nothing fitted
    "roof": (("d_roof",), False),
    "roof-x": (("d_roof",), True),
    "roof-batch": (("d_roof", "d_batch"), False),
    "spec": (("d_roof", "d_batch") + tuple(f"d_{k}" for k in SPEC_KEYS), False),
    "spec-x": (("d_roof", "d_batch") + tuple(f"d_{k}" for k in SPEC_KEYS), True),
}
FP16_BYTES_SCALE = 0.5  # PerfGraph bytes are those of the FP32 export; AMP moves about half


class TransferError(PerfseerError):
    """A transfer model that cannot be fitted or used."""


def spec_vector(spec) -> np.ndarray:
    """``SPEC_KEYS`` of a :class:`~perfseer.devices.DeviceSpec` (FP16 peak: the tensor-core rate)."""
    vals = [spec.peak("fp16"), spec.mem_bandwidth_gbs, spec.sms, spec.clock_mhz, spec.l2_mib]
    if any(v is None or not float(v) > 0 for v in vals):
        missing = [k for k, v in zip(SPEC_KEYS, vals) if v is None or not float(v) > 0]
        raise TransferError(f"{spec.name}'s spec sheet lacks {', '.join(missing)}",
                            "add them to its device spec file (perfseer devices --show NAME)")
    return np.array([float(v) for v in vals])


def roofline_ms(x: np.ndarray, spec_vec: np.ndarray) -> float:
    """Per-node roofline time summed, ms: ``max(FLOPs / FP16 peak, bytes / bandwidth)``, the FP32
    export's bytes scaled to AMP's; :func:`perfseer.models.roofline.baseline_ms` without overheads."""

    from perfseer.models.roofline import RooflineParams, baseline_ms  # deferred: loads torch, pandas

    params = RooflineParams(P=spec_vec[0] * 1e9, W=spec_vec[1] * 1e6 / FP16_BYTES_SCALE, a=1.0, c1=0.0, c2=0.0)
    return float(baseline_ms([SimpleNamespace(x=x)], params)[0]) + 1e-6


def graph_terms(u: np.ndarray) -> np.ndarray:
    """The graph features but the source latency (``GRAPH_KEYS[1:]``) from a PerfGraph's globals."""
    u = np.asarray(u, dtype=np.float64).reshape(-1)
    g = schema.GLOBAL_FEATURES
    flops, mem = u[g.index("flops_total")], u[g.index("memory_access_total")]
    return np.array([np.log10(flops + 1), np.log10(mem + 1), np.log10(u[g.index("num_nodes")] + 1),
                     np.log10(max(u[g.index("batch_size")], 1)), np.log10(flops / max(mem, 1) + 1e-6)])


def pair_features(names, log_y_src: np.ndarray, terms: np.ndarray, roof_src: np.ndarray, roof_tgt: np.ndarray,
                  spec_src: np.ndarray, spec_tgt: np.ndarray, mean: np.ndarray, scale: np.ndarray,
                  cross: bool, batch_ratio: np.ndarray | None = None) -> np.ndarray:
    """Rows of pair features for ``names`` (``d_roof``, ``d_batch``, ``d_<spec key>``), crossed
    with the standardized graph features when ``cross``.  ``spec_*``: ``[N, 5]`` or ``[5]``;
    ``roof_src``/``roof_tgt``: the roofline times of the source's and the target's graph (they
    differ in batch size where the source ran another batch: ``batch_ratio`` = target / source
    batch, default 1)."""
    n = len(log_y_src)
    spec_src = np.broadcast_to(spec_src, (n, len(SPEC_KEYS)))
    spec_tgt = np.broadcast_to(spec_tgt, (n, len(SPEC_KEYS)))
    cols = {"d_roof": np.log10(roof_tgt / roof_src),
            "d_batch": np.zeros(n) if batch_ratio is None else np.log10(np.broadcast_to(batch_ratio, (n,)))}
    for i, k in enumerate(SPEC_KEYS):
        cols[f"d_{k}"] = np.log10(spec_tgt[:, i] / spec_src[:, i])
    base = np.stack([cols[k] for k in names], axis=1)
    if not cross:
        return base
    z = (np.column_stack([log_y_src, terms]) - mean) / scale
    return np.concatenate([base] + [base * z[:, [j]] for j in range(z.shape[1])], axis=1)


@dataclass
class Transfer:
    """A fitted transfer ``f`` (see the module doc).  ``coef`` is empty for ``identity``/``roofline``."""

    feature_set: str = "roof-x"
    alpha: float = 1.0
    combine: str = "geomean"
    coef: list = field(default_factory=list)
    mean: list = field(default_factory=lambda: [0.0] * len(GRAPH_KEYS))
    scale: list = field(default_factory=lambda: [1.0] * len(GRAPH_KEYS))
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.feature_set not in FEATURE_SETS:
            raise TransferError(f"unknown transfer feature set {self.feature_set!r}",
                                f"use one of {', '.join(FEATURE_SETS)}")
        if self.combine not in ("geomean", "nearest"):
            raise TransferError(f"unknown combination {self.combine!r}", "use geomean or nearest")

    # -- fitting -------------------------------------------------------------------------------
    def fit(self, pairs: list[dict]) -> Transfer:
        """Fit on ordered pairs of measured GPUs, each ``{"log_y_src", "log_y_tgt", "terms",
        "roof_src", "roof_tgt", "spec_src", "spec_tgt"}`` and optionally ``"batch_ratio"`` (arrays
        over the target's runs matched to the source's runs of the same model; log10 ms; ``terms``
        of the target's graph)."""
        if FEATURE_SETS[self.feature_set] is None:
            self.coef = []
            return self
        if not pairs:
            raise TransferError("no GPU pairs to fit the transfer on", "measure the models on at least two GPUs")
        names, cross = FEATURE_SETS[self.feature_set]
        z = np.concatenate([np.column_stack([p["log_y_src"], p["terms"]]) for p in pairs])
        self.mean, self.scale = z.mean(0).tolist(), np.maximum(z.std(0), 1e-6).tolist()
        X = np.concatenate([self._features(p["log_y_src"], p["terms"], p["roof_src"], p["roof_tgt"],
                                           p["spec_src"], p["spec_tgt"], p.get("batch_ratio")) for p in pairs])
        y = np.concatenate([p["log_y_tgt"] - p["log_y_src"] for p in pairs])
        a = X.T @ X + self.alpha * len(y) * 1e-3 * np.eye(X.shape[1])
        self.coef = np.linalg.solve(a, X.T @ y).tolist()
        return self

    def _features(self, log_y_src, terms, roof_src, roof_tgt, spec_src, spec_tgt, batch_ratio=None) -> np.ndarray:
        names, cross = FEATURE_SETS[self.feature_set]
        return pair_features(names, np.asarray(log_y_src, float), np.asarray(terms, float), np.asarray(roof_src, float),
                             np.asarray(roof_tgt, float), np.asarray(spec_src, float), np.asarray(spec_tgt, float),
                             np.asarray(self.mean), np.asarray(self.scale), cross,
                             None if batch_ratio is None else np.asarray(batch_ratio, float))

    # -- prediction ----------------------------------------------------------------------------
    def shift(self, log_y_src, terms, roof_src, roof_tgt, spec_src, spec_tgt, batch_ratio=None) -> np.ndarray:
        """``log10 y_t - log10 y_s`` for rows of one source/target pair."""
        log_y_src = np.asarray(log_y_src, float)
        if self.feature_set == "identity":
            return np.zeros_like(log_y_src)
        if self.feature_set == "roofline":
            return np.log10(np.asarray(roof_tgt, float) / np.asarray(roof_src, float))
        return self._features(log_y_src, terms, roof_src, roof_tgt, spec_src, spec_tgt, batch_ratio) \
            @ np.asarray(self.coef)

    def combine_sources(self, log_preds: np.ndarray, spec_srcs: np.ndarray, spec_tgt: np.ndarray) -> np.ndarray:
        """Combine per-source predictions ``[S, N]`` (log10 ms; NaN where a source lacks the row)
        into ``[N]``: their mean (a geometric mean of latencies) or the nearest source's (in log
        spec space; the next nearest where it is NaN)."""
        log_preds = np.asarray(log_preds, float)
        if self.combine == "geomean":
            with np.errstate(all="ignore"):
                return np.nanmean(log_preds, axis=0)
        d = np.linalg.norm(np.log10(np.asarray(spec_srcs, float) / np.asarray(spec_tgt, float)), axis=1)
        out = np.full(log_preds.shape[1], np.nan)
        for i in np.argsort(d)[::-1]:  # nearest last, so it wins where present
            ok = np.isfinite(log_preds[i])
            out[ok] = log_preds[i][ok]
        return out

    # -- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"feature_set": self.feature_set, "alpha": self.alpha, "combine": self.combine, "coef": list(self.coef),
                "mean": list(self.mean), "scale": list(self.scale), **({"extra": self.extra} if self.extra else {})}

    @classmethod
    def from_dict(cls, d: dict) -> Transfer:
        try:
            t = cls(feature_set=d["feature_set"], alpha=float(d["alpha"]), combine=d["combine"],
                    coef=[float(c) for c in d.get("coef", [])], mean=[float(v) for v in d["mean"]],
                    scale=[float(v) for v in d["scale"]], extra=dict(d.get("extra", {})))
        except (KeyError, TypeError, ValueError) as e:
            raise TransferError(f"bad transfer model: {e}", "rewrite it with benchmarks/lib/spec_transfer_logo.py "
                                                             "--fit-all") from e
        if FEATURE_SETS[t.feature_set] is not None:
            names, cross = FEATURE_SETS[t.feature_set]
            want = len(names) * (1 + len(GRAPH_KEYS) if cross else 1)
            if len(t.coef) != want:
                raise TransferError(f"transfer model {t.feature_set} has {len(t.coef)} coefficients, expected {want}",
                                    "rewrite it with benchmarks/lib/spec_transfer_logo.py --fit-all")
        return t
