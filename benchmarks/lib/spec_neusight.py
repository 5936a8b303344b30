"""The spec model on NeuSight's end-to-end workloads, leave-one-GPU-out, with the kernel
configuration chosen by a nested leave-one-GPU-out on the training GPUs only.

For each of NeuSight's five NVIDIA training GPUs (P4, P100, T4, V100, A100-40GB PCIe), the
kernel model is trained on the kernel measurements of the *other four* only, then predicts every
labelled end-to-end run of the held-out GPU (BERT-large, GPT-2 large, GPT-3 XL / 2.7B, OPT-1.3B;
inference and training) from its per-operator trace: each traced operation becomes kernels
(``perfseer.specmodel.neusight.op_kernels``; training adds the backward kernels of
``perfseer.specmodel.backward``), the traced layer's kernels count ``num_layer`` times, and the
predicted step is the sum.  The error is against the measured end-to-end latency of the full
model (NeuSight's ``e2e_latency``).  Roofline (``max(FLOPs / peak, bytes / bandwidth)`` per
kernel, summed the same way) is computed on the same kernels.

Selection (``--configs A,B,...``, names of :data:`CONFIGS`): for a held-out GPU ``h``, every
candidate configuration is scored by leave-one-GPU-out over the *four training GPUs* (trained
on three, scored on the end-to-end runs of the fourth; mean over the four of the per-GPU mean
error); the best is retrained on the four and predicts ``h``.  ``h``'s measurements play no part
in the choice.  Every fit is cached by (configuration, training GPUs) under ``--cache``, so an
interrupted run resumes.

    python -m benchmarks.lib.spec_neusight --data ../shared/datasets/neusight \
        --json benchmarks/results/spec_neusight.json

Prints per workload, per GPU, per kernel family (predicted against the trace's measured per-op
times) and the per-GPU comparison with the figures NeuSight's paper reports, and the coverage of
split-conformal intervals calibrated leave-one-GPU-out (``--trust`` writes what the spec card
stores: ``scripts/train_spec_model.py --attach-only --trust FILE``).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

FAMILIES = ("gemm", "vec", "ln", "softmax")  # NeuSight's transformers use no convolution
GPUS = ("a100-40gb-pcie", "t4", "tesla-p100-pcie-16gb", "tesla-p4", "v100-pcie-32gb")
# Candidate kernel configurations (perfseer.specmodel.net.KernelModelConfig fields).
CONFIGS = {
    "full": {},  # the bundled MLPs alone (the bundled recipe before the out-of-range rule)
    "relative": {"feature_set": "relative"},
    "relative-gemm": {"feature_set": "relative-gemm"},
    "full-s1": {"seed": 1},  # seed variation of the MLPs alone
    "full-s2": {"seed": 2},
    "relative-gemm-s1": {"feature_set": "relative-gemm", "seed": 1},
    "full-h32": {"hidden": 32},
    "relative-h32": {"feature_set": "relative", "hidden": 32},
    "full-power": {"device_features": "power"},  # + log10(TDP / FP32 peak)
    "full-tdp": {"device_features": "tdp"},  # + log10(TDP)
    # beyond the training GPUs' range: t_mlp ** w * (t_roof + floor) ** (1 - w) (KernelModelConfig.ood_weight)
    "full-ood50": {"ood_weight": 0.5},  # the bundled recipe
    "full-ood40": {"ood_weight": 0.4},
    "full-ood60": {"ood_weight": 0.6},
    "full-ood75": {"ood_weight": 0.75},
    "full-ood50-s1": {"ood_weight": 0.5, "seed": 1},
    "full-ood50-s2": {"ood_weight": 0.5, "seed": 2},
}
# Figures reported by NeuSight's authors on these GPUs and workloads, with their source.  The
# shared snapshot holds NeuSight's measurements only: its predictions, its evaluation summaries
# (scripts/asplos/results/, summarize.py's output) and its Habitat/roofline baselines' outputs are
# not in it (shared/datasets/neusight/README.md, "Files of the snapshot that are absent"), and its
# paper's per-GPU tables are not among the project's documents (shared/seeds).  None can be
# derived here: the columns say so rather than quote figures nobody can check from this repository.
REPORTED = {
    "neusight": None,
    "habitat": None,
}
REPORTED_SOURCE = ("not in the shared data: shared/datasets/neusight holds NeuSight's measurements, not its or "
                   "Habitat's predictions (its results/ and predictor/ files are absent from the snapshot)")
# No reported figure is quoted, not even the paper's abstract: neither the paper nor its summaries
# are in /work/shared, so no number of theirs can be checked from this repository.


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets" / "neusight"))
    ap.add_argument("--gpus", default=None, help="comma-separated registry names to hold out (default: all five)")
    ap.add_argument("--configs", default="full",
                    help=f"candidate configurations, comma-separated, of: {', '.join(CONFIGS)}; more than one: "
                         "nested selection on the training GPUs")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--time-limit", type=float, default=20.0,
                    help="CPU seconds per kernel family and fit (a safety net; epochs and early stopping bound it)")
    ap.add_argument("--max-rows", type=int, default=8000,
                    help="kernel rows per family and training GPU (a seeded sample; 0: all)")
    ap.add_argument("--cache", default="benchmarks/results/spec_neusight_cache",
                    help="folder of per-fit results (resumable; '' to disable)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--trust", default=None,
                    help="write the interval calibration (LOGO end-to-end log residuals) here for the spec card")
    args = ap.parse_args(argv)
    configs = args.configs.split(",")
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        ap.error(f"unknown configuration(s) {bad}; choose from {', '.join(CONFIGS)}")
    gpus = args.gpus.split(",") if args.gpus else list(GPUS)

    from perfseer.specmodel import neusight as ns

    kernels = ns.load_kernels(args.data)
    kernels = kernels[kernels["family"].isin(FAMILIES)].reset_index(drop=True)
    if args.max_rows:
        kernels = (kernels.sample(frac=1.0, random_state=0).groupby(["family", "device"]).head(args.max_rows)
                   .reset_index(drop=True))
    workloads = ns.load_workloads(args.data)
    fitter = _Fitter(kernels, workloads, args)

    rows, chosen, inner_scores = [], {}, {}
    for hold in gpus:
        train = tuple(g for g in GPUS if g != hold)
        if len(configs) > 1:
            scores = {c: _inner_score(fitter, c, train) for c in configs}
            inner_scores[hold] = scores
            best = min(configs, key=lambda c: scores[c])
        else:
            best = configs[0]
        chosen[hold] = best
        res = fitter.fit(best, train)
        for r in res["workloads"]:
            if r["gpu"] == hold:
                rows.append({**r, "config": best})
        print(f"held out {hold}: config {best}"
              + (f" (inner scores {', '.join(f'{c} {v:.1f}' for c, v in inner_scores[hold].items())})"
                 if hold in inner_scores else "")
              + f", kernel MAPE " + ", ".join(f"{f} {v:.1f}" for f, v in res["kernel_mape"][hold].items()),
              file=sys.stderr, flush=True)
    if len(configs) > 1:  # every candidate's plain leave-one-GPU-out score: what picks the bundled model's config
        print(_per_config_table(fitter, configs, gpus))
        print()
    df = pd.DataFrame(rows)
    df["spec_err_pct"] = (df["spec_ms"] / df["measured_ms"] - 1).abs() * 100
    df["roofline_err_pct"] = (df["roofline_ms"] / df["measured_ms"] - 1).abs() * 100
    print(_workload_table(df))
    print()
    print(_gpu_table(df))
    print()
    print(_family_table(df))
    cov = _conformal_coverage(df)
    print()
    print(_coverage_table(cov))
    cmd = "python -m benchmarks.lib.spec_neusight " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.json:
        _atomic_json(args.json, {"command": cmd, "config": vars(args), "chosen": chosen, "inner_scores": inner_scores,
                                 "workloads": df.drop(columns=["by_family"]).to_dict("records"),
                                 "coverage": cov})
    if args.trust:
        _atomic_json(args.trust, trust_calibration(df, cmd))
    return 0


# -- fitting, cached -----------------------------------------------------------------------------
class _Fitter:
    """Fits the kernel model of one configuration on a set of GPUs and predicts every workload of
    the other GPUs; results cached as JSON by (configuration, GPUs, recipe)."""

    def __init__(self, kernels, workloads, args):
        self.kernels, self.workloads, self.args = kernels, workloads, args
        self.memo: dict = {}

    def _key(self, config: str, train) -> str:
        recipe = {"config": CONFIGS[config], "train": sorted(train), "epochs": self.args.epochs,
                  "time_limit": self.args.time_limit, "max_rows": self.args.max_rows, "v": 2}
        return config + "-" + hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]

    def fit(self, config: str, train) -> dict:
        key = self._key(config, train)
        if key in self.memo:
            return self.memo[key]
        path = Path(self.args.cache) / f"{key}.result.json" if self.args.cache else None
        if path is not None and path.is_file():
            self.memo[key] = json.loads(path.read_text())
            return self.memo[key]
        import torch

        from perfseer.devices import get_device
        from perfseer.specmodel import kernels as kt
        from perfseer.specmodel.net import KernelModel, KernelModelConfig

        torch.set_num_threads(1)
        spec = functools.lru_cache(maxsize=None)(get_device)

        def dev(t):
            return kt.device_frame([spec(d) for d in t["device"]], ["fp32"] * len(t), t["family"])

        t0 = time.process_time()
        k = self.kernels
        tr = k[k["device"].isin(train)].reset_index(drop=True)
        cfg = KernelModelConfig(epochs=self.args.epochs, time_limit_s=self.args.time_limit, **CONFIGS[config])
        model = KernelModel(cfg).fit(tr, dev(tr), tr["latency_us"])
        out = {"config": config, "train": sorted(train), "kernel_mape": {}, "workloads": []}
        for g in GPUS:
            if g in train:
                continue
            te = k[k["device"] == g].reset_index(drop=True)
            err = np.abs(model.predict(te, dev(te)) / te["latency_us"].to_numpy() - 1)
            out["kernel_mape"][g] = {f: float(err[te["family"].to_numpy() == f].mean() * 100) for f in FAMILIES}
        for w in self.workloads:
            if w.device in train:
                continue
            out["workloads"].append(predict_workload(model, w, spec(w.device)))
        out["cpu_s"] = round(time.process_time() - t0, 1)
        if path is not None:
            model.save(path.parent, key)  # the fitted MLPs too (safetensors + card): post-hoc analyses reload them
            _atomic_json(path, out)
        self.memo[key] = out
        print(f"  fitted {config} on {','.join(sorted(train))}: {out['cpu_s']} CPU s", file=sys.stderr, flush=True)
        return out


def predict_workload(model, w, spec, matrix_fp32: bool = False) -> dict:
    """Predicted, roofline and measured time of one workload, overall and per kernel family (the
    measured per family: the trace's per-op times, each op given the family of its costliest
    predicted kernel).  ``matrix_fp32``: GEMMs at the sheet's FP32 matrix peak
    (:func:`perfseer.specmodel.kernels.device_frame`)."""
    from perfseer.specmodel import kernels as kt

    k = w.trace
    d = kt.device_frame([spec] * len(k), ["fp32"] * len(k), k["family"], matrix_fp32=matrix_fp32)
    p = model.predict(k.drop(columns=["scale", "pass", "node"]), d)
    tf, tm = kt.roofline_us(k, d)
    sc = k["scale"].to_numpy()
    kk = k.assign(pred_ms=p * sc / 1000, roof_ms=np.maximum(tf, tm) * sc / 1000)
    by_family = {}
    if w.node_ms is not None:
        fam_of = (kk.assign(one=p).sort_values("one", ascending=False).drop_duplicates("node")
                  .set_index("node")["family"])
        nm = w.node_ms.copy()
        nm["family"] = nm["node"].map(fam_of).fillna("none")
        nm["meas_ms"] = (nm["fw_ms"] + (nm["bw_ms"] if w.phase == "train" else 0.0)) * nm["scale"]
        meas = nm.groupby("family")["meas_ms"].sum()
        pred = kk.groupby("family")["pred_ms"].sum()
        roof = kk.groupby("family")["roof_ms"].sum()
        for f in sorted(set(meas.index) | set(pred.index)):
            by_family[f] = {"measured_ms": float(meas.get(f, 0.0)), "spec_ms": float(pred.get(f, 0.0)),
                            "roofline_ms": float(roof.get(f, 0.0))}
    return {"gpu": w.device, "workload": w.name, "phase": w.phase, "measured_ms": w.e2e_ms,
            "spec_ms": float(kk["pred_ms"].sum()), "roofline_ms": float(kk["roof_ms"].sum()),
            "kernels": int(len(k)), "by_family": by_family}


def _inner_score(fitter: _Fitter, config: str, train) -> float:
    """Mean over the training GPUs of the per-GPU mean end-to-end error when each is held out of
    the other training GPUs."""
    per_gpu = []
    for inner in train:
        res = fitter.fit(config, tuple(g for g in train if g != inner))
        errs = [abs(r["spec_ms"] / r["measured_ms"] - 1) * 100 for r in res["workloads"] if r["gpu"] == inner]
        if errs:
            per_gpu.append(float(np.mean(errs)))
    return float(np.mean(per_gpu))


# -- intervals -----------------------------------------------------------------------------------
def _conformal_coverage(df: pd.DataFrame) -> dict:
    """Coverage of 90 % split-conformal intervals on the leave-one-GPU-out runs: for each GPU, the
    quantile of |ln(measured / predicted)| over the *other* GPUs' runs, applied to its runs."""
    from perfseer.trust import intervals as itv

    from perfseer.devices import get_device
    from perfseer.specmodel.trust import OOD_FACTOR, build_domain, device_reasons

    res = np.log(df["measured_ms"].to_numpy() / df["spec_ms"].to_numpy())
    out = {"per_gpu": {}, "level": itv.LEVEL}
    inside = np.zeros(len(df), dtype=bool)
    widened = np.zeros(len(df), dtype=bool)
    for g in sorted(df["gpu"].unique()):
        m = (df["gpu"] == g).to_numpy()
        q = itv.conformal_quantile(res[~m])
        # the held-out GPU against the domain of the other four, as the card's domain would judge it
        reasons = device_reasons(get_device(g), build_domain([get_device(x) for x in GPUS if x != g]))
        f = OOD_FACTOR if reasons else 1.0
        inside[m] = np.abs(res[m]) <= q
        widened[m] = np.abs(res[m]) <= q * f
        out["per_gpu"][g] = {"runs": int(m.sum()), "q": q, "coverage_pct": float(inside[m].mean() * 100),
                             "in_domain": not reasons, "domain_reasons": reasons,
                             "coverage_widened_pct": float(widened[m].mean() * 100)}
    out["all"] = {"runs": int(len(df)), "coverage_pct": float(inside.mean() * 100),
                  "coverage_widened_pct": float(widened.mean() * 100), "q_all_runs": itv.conformal_quantile(res)}
    return out


def trust_calibration(df: pd.DataFrame, cmd: str) -> dict:
    """What the spec card stores for intervals: the conformal quantile of the leave-one-GPU-out
    end-to-end log residuals (inference and training pooled) and the residuals themselves."""
    from perfseer.trust import intervals as itv

    res = np.log(df["measured_ms"].to_numpy() / df["spec_ms"].to_numpy())
    cal = itv.calibrate(df["measured_ms"].to_numpy(), df["spec_ms"].to_numpy())
    return {"source": f"{cmd}: leave-one-GPU-out end-to-end runs of NeuSight's workloads "
                      f"({len(df)} runs on {df['gpu'].nunique()} GPUs, FP32, inference and training pooled)",
            "fp32": {"q": cal["q"], "n": cal["n"], "median_abs": cal["median_abs"], "families": list(FAMILIES),
                     "log_residuals": [round(float(r), 5) for r in res]},
            "coverage": _conformal_coverage(df)}


# -- tables --------------------------------------------------------------------------------------
def _workload_table(df: pd.DataFrame) -> str:
    lines = ["| GPU (held out) | config | workload | measured ms | spec model ms | error % | roofline error % | "
             "trace per-op sum / measured - 1 % |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    gaps = []
    for r in df.itertuples():
        trace = sum(v["measured_ms"] for v in r.by_family.values())
        gap = (trace / r.measured_ms - 1) * 100 if trace > 0 else float("nan")
        gaps.append(abs(gap))
        lines.append(f"| {r.gpu} | {r.config} | {r.workload} | {r.measured_ms:.1f} | {r.spec_ms:.1f} | "
                     f"{r.spec_err_pct:.1f} | {r.roofline_err_pct:.1f} | {gap:+.1f} |")
    lines.append(f"\ntrace per-op sum against the end-to-end measurement: median |gap| {np.nanmedian(gaps):.1f} %, "
                 f"mean {np.nanmean(gaps):.1f} % over {len(gaps)} runs")
    return "\n".join(lines)


def _gpu_table(df: pd.DataFrame) -> str:
    na = "n/a [1]"
    lines = ["| GPU (held out) | phase | runs | perfseer spec model (LOGO) MAPE % | roofline MAPE % | "
             "NeuSight reported % | Habitat reported % |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for (g, ph), s in df.groupby(["gpu", "phase"]):
        lines.append(f"| {g} | {ph} | {len(s)} | {s.spec_err_pct.mean():.1f} | {s.roofline_err_pct.mean():.1f} | "
                     f"{na} | {na} |")
    for ph, s in df.groupby("phase"):
        lines.append(f"| all | {ph} | {len(s)} | {s.spec_err_pct.mean():.1f} | {s.roofline_err_pct.mean():.1f} | "
                     f"{na} | {na} |")
    labelled = set(df["gpu"])
    for g in GPUS:
        if g not in labelled:
            continue
        phases = set(df.loc[df["gpu"] == g, "phase"])
        if "train" not in phases:
            lines.append(f"| {g} | train | 0 | - [2] | - | - | - |")
    lines += ["", f"[1] {REPORTED_SOURCE}; NeuSight's paper is not among the shared documents either.",
              "[2] no training-step label with a per-operator trace for this GPU in the shared data."]
    return "\n".join(lines)


def _per_config_table(fitter: _Fitter, configs, gpus) -> str:
    """Each candidate trained on four GPUs, scored on the fifth: per-GPU mean error and their mean
    (the bundled model is trained on all five GPUs, so its configuration is chosen on this, with
    no GPU left to score it on: its expected error on a new GPU is the nested figure)."""
    lines = ["| configuration | " + " | ".join(gpus) + " | mean of per-GPU MAPE % |",
             "| --- | " + " | ".join("---" for _ in gpus) + " | --- |"]
    for c in configs:
        per = []
        for g in gpus:
            res = fitter.fit(c, tuple(x for x in GPUS if x != g))
            per.append(float(np.mean([abs(r["spec_ms"] / r["measured_ms"] - 1) * 100 for r in res["workloads"]
                                      if r["gpu"] == g])))
        lines.append(f"| {c} | " + " | ".join(f"{v:.1f}" for v in per) + f" | {np.mean(per):.1f} |")
    return "\n".join(lines)


def _family_table(df: pd.DataFrame, roofline: bool = False) -> str:
    """Per GPU and kernel family: the trace's measured per-op time against the predicted kernels,
    summed over the GPU's runs (signed error: + = predicted slower); ``roofline``: the roofline
    sum of the same kernels too."""
    agg: dict = {}
    for r in df.itertuples():
        for f, v in r.by_family.items():
            a = agg.setdefault((r.gpu, f), [0.0, 0.0, 0.0])
            a[0] += v["measured_ms"]
            a[1] += v["spec_ms"]
            a[2] += v.get("roofline_ms", float("nan"))
    extra = (" roofline ms | roofline signed error % |", " --- | --- |") if roofline else ("", "")
    lines = ["| GPU (held out) | family | trace-measured ms (all runs) | predicted ms | signed error % |" + extra[0]
             + " share of measured % |", "| --- | --- | --- | --- | --- |" + extra[1] + " --- |"]
    tot = {g: sum(v[0] for (gg, _), v in agg.items() if gg == g) for g in df["gpu"].unique()}
    signed = lambda p, m: f"{(p / m - 1) * 100:+.1f}" if m > 0 else "-"  # noqa: E731
    for (g, f), (m, p, rf) in sorted(agg.items()):
        roof = f" {rf:.0f} | {signed(rf, m)} |" if roofline else ""
        lines.append(f"| {g} | {f} | {m:.0f} | {p:.0f} | {signed(p, m)} |{roof} {m / tot[g] * 100:.1f} |")
    return "\n".join(lines)


def _coverage_table(cov: dict) -> str:
    lines = ["| GPU (held out) | runs | q from the other GPUs' runs (x/÷) | 90 % interval holds % | "
             "domain of the other four | holds %, widened x2 out of domain |", "| --- | --- | --- | --- | --- | --- |"]
    for g, v in cov["per_gpu"].items():
        dom = "in" if v["in_domain"] else "OUT: " + "; ".join(r.split(":")[0] for r in v["domain_reasons"])
        lines.append(f"| {g} | {v['runs']} | {v['q']:.3f} ({np.exp(v['q']):.2f}) | {v['coverage_pct']:.1f} | {dom} | "
                     f"{v['coverage_widened_pct']:.1f} |")
    lines.append(f"| all | {cov['all']['runs']} | - | {cov['all']['coverage_pct']:.1f} | | "
                 f"{cov['all']['coverage_widened_pct']:.1f} |")
    return "\n".join(lines)


def _atomic_json(path, obj) -> None:
    from perfseer.atomic import atomic_write_text

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(obj, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
