"""The learned part of the spec model: per kernel family, a small MLP that predicts how far a
kernel runs above its roofline bound (NeuSight's idea: predict utilisation of the bound, not
time), from the roofline / wave / device features of :func:`perfseer.specmodel.kernels.features`.

``latency_us = t_roof * 10 ** mlp(features)``, trained with MSE on ``log10(latency / t_roof)``
(so on relative error), features standardised with the training set's mean and deviation.
On a device beyond the training devices' range (``KernelModel.beyond_range``) the answer is
pulled toward the physics estimate ``t_roof + floor`` (``KernelModelConfig.ood_weight``; the
bundled card: their geometric mean), measured in docs/concepts/spec-model.md.

Saved as ``NAME.safetensors`` (weights and scalers) + ``NAME.json`` (the card: config, feature
count per family, training data and scores); nothing is unpickled.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from perfseer.cards import CardFormat, read_card, read_weights, weights_path
from perfseer.errors import PerfseerError
from perfseer.specmodel import kernels as kt

RANGE_COLUMNS = ("peak_tflops", "bw_gbs", "sms")  # device inputs whose training range bounds extrapolation
CARD_FORMAT = "perfseer.specmodel"
CARD_VERSION = 1


def launch_floor_us(latency_us) -> float:
    """The time no kernel of a family goes below on the training GPUs: the 1st percentile of its
    measured latencies (NeuSight's single-op CUDA-event timings: launch and framework overhead,
    25-60 µs by family).  Device-independent: it is the ``+ floor`` of the physics estimate."""
    return float(np.quantile(np.asarray(latency_us, dtype=float), 0.01))


class SpecModelError(PerfseerError):
    """A spec-model file that cannot be used, or a model used before it was fitted."""


SPEC_CARD = CardFormat(CARD_FORMAT, CARD_VERSION, "spec-model", writer="KernelModel.save",
                       remedy="retrain the spec model, or reinstall perfseer", error=SpecModelError)


@dataclass
class KernelModelConfig:
    hidden: int = 64  # width of each hidden layer
    layers: int = 2  # hidden layers
    epochs: int = 40  # passes over each family's rows (early stop on a 10 % hold-out of rows)
    batch_size: int = 512
    lr: float = 2e-3  # Adam, halved when the hold-out loss stalls for 3 epochs
    weight_decay: float = 1e-5
    time_limit_s: float = 120.0  # CPU seconds per family (process time: robust to a busy machine)
    seed: int = 0
    device_features: bool = False  # see perfseer.specmodel.kernels.features
    feature_set: str = "full"  # perfseer.specmodel.kernels.FEATURE_SETS
    threads: int = 1  # torch threads while fitting: these MLPs are too small to gain from more
    # Kernels on a device beyond the training devices' range (peak at the kernel's precision,
    # bandwidth or SMs more than ``ood_tolerance`` times outside it) are predicted at
    # ``t_mlp ** ood_weight * t_phys ** (1 - ood_weight)``, ``t_phys = t_roof + floor`` (the
    # roofline bound plus the family's launch floor, see KernelModel.floor_us_): 1 trusts the
    # MLP's extrapolation, 0 answers with the physics estimate, 0.5 with the geometric mean.
    ood_weight: float = 1.0
    ood_tolerance: float = 1.5  # the domain's tolerance (perfseer.specmodel.trust.TOLERANCE)

    def to_dict(self) -> dict:
        return asdict(self)


def _mlp(n_in: int, cfg: KernelModelConfig):
    import torch  # deferred: heavy, loaded on first use

    layers, d = [], n_in
    for _ in range(cfg.layers):
        layers += [torch.nn.Linear(d, cfg.hidden), torch.nn.SiLU()]
        d = cfg.hidden
    layers.append(torch.nn.Linear(d, 1))
    return torch.nn.Sequential(*layers)


@dataclass
class KernelModel:
    """One MLP per kernel family (:data:`perfseer.specmodel.kernels.FAMILIES`).

    ``fit(table, dev, latency_us)`` -> self; ``predict(table, dev)`` -> µs per row.
    """

    config: KernelModelConfig = field(default_factory=KernelModelConfig)
    nets_: dict = field(default_factory=dict)
    scalers_: dict = field(default_factory=dict)
    history_: dict = field(default_factory=dict)
    device_range_: dict = field(default_factory=dict)  # per family: [min, max] of each of RANGE_COLUMNS
    floor_us_: dict = field(default_factory=dict)  # per family: launch_floor_us of its training latencies

    def fit(self, table: pd.DataFrame, dev: pd.DataFrame, latency_us, verbose: bool = False) -> "KernelModel":
        import torch  # deferred: heavy, loaded on first use

        torch.manual_seed(self.config.seed)
        before = torch.get_num_threads()
        torch.set_num_threads(self.config.threads)
        try:
            return self._fit(table, dev, latency_us, verbose)
        finally:
            torch.set_num_threads(before)

    def _fit(self, table, dev, latency_us, verbose):
        import torch  # deferred: heavy, loaded on first use

        y_all = np.asarray(latency_us, dtype=float)
        fam_col = table["family"].to_numpy()
        for fam in kt.FAMILIES:
            idx = np.flatnonzero(fam_col == fam)
            if len(idx) == 0:
                continue
            x, t_roof = kt.features(fam, table.iloc[idx], dev.iloc[idx], self.config.device_features,
                                    self.config.feature_set)
            y = np.log10(y_all[idx] / t_roof).astype(np.float32)
            mu, sd = x.mean(0), x.std(0) + 1e-6
            ym, ys = float(y.mean()), float(y.std() + 1e-6)
            d = dev.iloc[idx]
            self.device_range_[fam] = {c: [float(d[c].min()), float(d[c].max())] for c in RANGE_COLUMNS}
            self.floor_us_[fam] = launch_floor_us(y_all[idx])
            self.scalers_[fam] = {"x_mean": mu, "x_std": sd, "x_min": x.min(0), "x_max": x.max(0),
                                  "y_mean": ym, "y_std": ys,
                                  "y_min": float(y.min()), "y_max": float(y.max())}
            net, hist = self._train(torch.from_numpy((x - mu) / sd), torch.from_numpy((y - ym) / ys), x.shape[1])
            self.nets_[fam] = net
            self.history_[fam] = hist
            if verbose:
                print(f"  {fam}: {len(idx)} rows, {hist['epochs']} epochs, {hist['cpu_seconds']:.0f} CPU s, "
                      f"hold-out rmse(log10) {hist['best_val']:.4f}")
        if "conv" in self.floor_us_ and "gemm" in self.floor_us_:
            # a convolution is an implicit GEMM; NeuSight's convolution sweep has no kernel under
            # ~120 µs, so its 1st percentile is the sweep's smallest size, not a launch floor
            self.floor_us_["conv"] = min(self.floor_us_["conv"], self.floor_us_["gemm"])
        return self

    def _train(self, x, y, n_in):
        import torch  # deferred: heavy, loaded on first use

        cfg = self.config
        g = torch.Generator().manual_seed(cfg.seed)
        perm = torch.randperm(len(x), generator=g)
        n_val = max(1, len(x) // 10)
        vi, ti = perm[:n_val], perm[n_val:]
        net = _mlp(n_in, cfg)
        opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=3)
        best, best_state, t0, stale, ep = float("inf"), None, time.process_time(), 0, 0
        for ep in range(1, cfg.epochs + 1):
            net.train()
            order = ti[torch.randperm(len(ti), generator=g)]
            for s in range(0, len(order), cfg.batch_size):
                b = order[s:s + cfg.batch_size]
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(net(x[b]).squeeze(1), y[b])
                loss.backward()
                opt.step()
            net.eval()
            with torch.no_grad():
                val = float(torch.nn.functional.mse_loss(net(x[vi]).squeeze(1), y[vi]))
            sched.step(val)
            if val < best - 1e-6:
                best, stale = val, 0
                best_state = {k: v.clone() for k, v in net.state_dict().items()}
            else:
                stale += 1
            if stale >= 8 or time.process_time() - t0 > cfg.time_limit_s:
                break
        net.load_state_dict(best_state)
        net.eval()
        ys = float(self.scalers_[next(reversed(self.scalers_))]["y_std"])
        return net, {"epochs": ep, "cpu_seconds": time.process_time() - t0, "best_val": float(np.sqrt(best)) * ys}

    def predict(self, table: pd.DataFrame, dev: pd.DataFrame) -> np.ndarray:
        """Latency of each kernel row, microseconds (``table``, ``dev``: DataFrames or dicts of
        column arrays, :func:`perfseer.specmodel.kernels.columns`)."""
        import torch  # deferred: heavy, loaded on first use

        if not self.nets_:
            raise SpecModelError("this KernelModel is not fitted", "call fit() or load a trained one")
        tab, devc = kt.columns(table), kt.columns(dev)  # arrays once; each family's rows taken by numpy
        fam_col = tab["family"]
        out = np.zeros(len(fam_col))
        for fam in set(fam_col):
            idx = np.flatnonzero(fam_col == fam)
            use = fam if fam in self.nets_ else ("gemm" if fam == "conv" else None)
            if use is None:
                raise SpecModelError(f"no model for kernel family {fam!r}", "train with data of that family")
            rows_dev = {k: v[idx] for k, v in devc.items()}
            x, t_roof = kt.features(use, {k: v[idx] for k, v in tab.items()}, rows_dev, self.config.device_features,
                                    self.config.feature_set)
            s = self.scalers_[use]
            if "x_min" in s:  # inputs outside the training range are held at its edge
                x = np.clip(x, s["x_min"], s["x_max"])
            with torch.no_grad():
                z = self.nets_[use](torch.from_numpy(((x - s["x_mean"]) / s["x_std"]).astype(np.float32)))
            logr = z.squeeze(1).numpy().astype(float) * s["y_std"] + s["y_mean"]
            # never beyond what training saw, +-0.5 decades: an MLP extrapolates without bound
            logr = np.clip(logr, s.get("y_min", -1.0) - 0.5, s.get("y_max", 4.0) + 0.5)
            far = self.beyond_range(use, rows_dev)
            if far.any() and self.config.ood_weight != 1.0:
                w = self.config.ood_weight
                phys = np.log10((t_roof + self.floor_us_.get(use, 0.0)) / t_roof)
                logr = np.where(far, w * logr + (1 - w) * phys, logr)
            out[idx] = t_roof * 10 ** logr
        return out

    def beyond_range(self, family: str, dev: pd.DataFrame) -> np.ndarray:
        """Per row of ``dev`` (a DataFrame or a dict of columns): is the device beyond the training
        devices' range for ``family`` (peak at the row's precision, bandwidth or SMs more than
        ``ood_tolerance`` times outside it)?  All ``False`` for a model saved before ranges were
        recorded."""
        rng = self.device_range_.get(family)
        far = np.zeros(len(np.asarray(dev[RANGE_COLUMNS[0]])), dtype=bool)
        if not rng:
            return far
        tol = float(self.config.ood_tolerance)
        for c in RANGE_COLUMNS:
            v = np.asarray(dev[c], dtype=float)
            lo, hi = rng[c]
            far |= (v < lo / tol) | (v > hi * tol)
        return far

    # -- files ---------------------------------------------------------------------------------
    def save(self, directory, name: str, extra: dict | None = None) -> Path:
        """Write ``NAME.safetensors`` and ``NAME.json`` into ``directory`` (atomically)."""
        import torch  # deferred: heavy, loaded on first use
        from safetensors.torch import save_file  # deferred: heavy, loaded on first use

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {}
        for fam, net in self.nets_.items():
            for k, v in net.state_dict().items():
                state[f"{fam}.net.{k}"] = v.detach().contiguous()
            for k in ("x_mean", "x_std", "x_min", "x_max"):
                state[f"{fam}.{k}"] = torch.from_numpy(np.asarray(self.scalers_[fam][k], dtype=np.float32))
        w = directory / f"{name}.safetensors"
        tmp = w.with_name(w.name + ".tmp")
        save_file(state, str(tmp), metadata={"format": CARD_FORMAT, "name": name})
        os.chmod(tmp, 0o644)
        os.replace(tmp, w)
        card = {"format": CARD_FORMAT, "format_version": CARD_VERSION, "name": name,
                "config": self.config.to_dict(), "families": sorted(self.nets_),
                "target_scaling": {f: {k: s[k] for k in ("y_mean", "y_std", "y_min", "y_max")}
                                   for f, s in self.scalers_.items()},
                "history": self.history_, "device_range": self.device_range_, "floor_us": self.floor_us_, **(extra or {})}
        c = directory / f"{name}.json"
        tmp = c.with_name(c.name + ".tmp")
        tmp.write_text(json.dumps(card, indent=1) + "\n")
        os.replace(tmp, c)
        return c

    @classmethod
    def load(cls, card_path) -> tuple["KernelModel", dict]:
        """A saved model and its card.

        Raises:
            SpecModelError: missing, corrupt or foreign files.
        """

        card = read_card(card_path, SPEC_CARD)
        fams = card.get("families") or []
        state = read_weights(weights_path(card_path), SPEC_CARD,
                             required=[f"{f}.{k}" for f in fams for k in ("x_mean", "x_std", "x_min", "x_max")])
        m = cls(KernelModelConfig(**card["config"]))
        try:
            for fam in card["families"]:
                sd = {k[len(fam) + 5:]: v for k, v in state.items() if k.startswith(f"{fam}.net.")}
                mu, sdv = state[f"{fam}.x_mean"].numpy(), state[f"{fam}.x_std"].numpy()
                lo, hi = state[f"{fam}.x_min"].numpy(), state[f"{fam}.x_max"].numpy()
                net = _mlp(len(mu), m.config)
                net.load_state_dict(sd, strict=True)
                net.eval()
                m.nets_[fam] = net
                m.scalers_[fam] = {"x_mean": mu, "x_std": sdv, "x_min": lo, "x_max": hi, **card["target_scaling"][fam]}
        except (KeyError, RuntimeError) as e:
            raise SpecModelError(f"spec-model weights do not fit card {card_path} ({str(e).splitlines()[0]})",
                                 "retrain the spec model") from e
        m.history_ = card.get("history", {})
        m.device_range_ = card.get("device_range") or {}
        m.floor_us_ = card.get("floor_us") or {}
        return m, card
