"""Spec-conditioned transfer on timm inference, leave-one-GPU-out over the RTX GPUs of the timm benchmark.

Settings (``datasets/timm``, AMP, NCHW, eager; the same as ``benchmarks/lib/spec_timm_logo.py``):
``rtx3090/amp-nchw-pt240``, ``rtx4090/amp-nchw-pt291``, ``rtx5090/amp-nchw-pt291``,
``rtxpro6000maxq/amp-nchw-pt291`` (the 3090 is on PyTorch 2.4.0, the others on 2.9.1).

For each held-out GPU ``H`` the transfer ``f`` (:mod:`perfseer.specmodel.transfer`) is fitted on
ordered pairs of the other three GPUs' runs of the train/validation split models; ``H``'s
test-split runs (the rows ``spec_timm_logo.py`` scores) are then predicted from each other GPU
as the source and the answers combined.  Two sources:

- **(a) measured**: the source GPU's measured latency of the same (model, batch, input shape);
- **(b) SeerNet**: the source GPU's bundled measured-device SeerNet's prediction (trained on the
  source GPU's train/val models only, so the test models are new to it: what a user gets for a
  new model).  Only 3090, 4090 and 5090 have one.

Feature set, ridge strength and combination are chosen per held-out GPU by an inner
leave-one-GPU-out over its three training GPUs (scored on their train/val runs, measured
sources), never by ``H``.  The spec model's columns are read from
``benchmarks/data/spec/spec_timm_logo.json`` (same test rows).

    python -m benchmarks.lib.spec_transfer_logo --json benchmarks/data/spec/spec_transfer_logo.json \
        --fit-all src/perfseer/predictors/spec-transfer.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd


from benchmarks.lib.spec_timm_logo import _atomic_json, spearman  # noqa: E402  (the same JSON writer and rank correlation)

SETTINGS = ("rtx3090/amp-nchw-pt240", "rtx4090/amp-nchw-pt291", "rtx5090/amp-nchw-pt291",
            "rtxpro6000maxq/amp-nchw-pt291")
SEERNET_CARDS = {"rtx3090/amp-nchw-pt240": "rtx3090-amp-nchw-pt240.infer",
                 "rtx4090/amp-nchw-pt291": "rtx4090-amp-nchw-pt291.infer",
                 "rtx5090/amp-nchw-pt291": "rtx5090-amp-nchw-pt291.infer"}
# README, "Bundled predictors": test MAPE % / Spearman of the measured-device SeerNets (same split)
SEERNET = {"rtx3090/amp-nchw-pt240": (6.52, 0.994), "rtx4090/amp-nchw-pt291": (7.54, 0.994),
           "rtx5090/amp-nchw-pt291": (7.42, 0.995)}
SPEC_LOGO = Path(__file__).resolve().parents[1] / "data" / "spec" / "spec_timm_logo.json"
ALPHAS = (0.01, 0.1, 1.0, 10.0)
COMBINES = ("geomean", "nearest")


def configs():
    from perfseer.specmodel.transfer import FEATURE_SETS

    for fs in FEATURE_SETS:
        for a in (ALPHAS if FEATURE_SETS[fs] is not None else (0.0,)):
            for c in COMBINES:
                yield fs, a, c


class Table:
    """The runs (one row per device, model, batch, input shape), their graphs' terms and per-GPU
    roofline times.  A target run is matched to a source GPU's run of the same model and input
    shape at the nearest batch size (the benchmark ran each GPU at the largest batch that fits:
    2048 on the 96 GB RTX PRO 6000, 1024 on the others, less for big models)."""

    def __init__(self, runs: pd.DataFrame, terms: np.ndarray, roof: dict, specs: dict):
        self.runs, self.terms, self.roof, self.specs = runs.reset_index(drop=True), terms, roof, specs
        self.logy = np.log10(self.runs["latency_ms"].to_numpy())
        self.gpos = self.runs["gpos"].to_numpy()
        self.batch = self.runs["batch_size"].to_numpy().astype(float)
        self._index = {}
        for s, part in self.runs.groupby("device"):
            d = {}
            for k, idx in part.groupby(["model", "input_shape"]).groups.items():
                idx = np.asarray(idx)
                d[k] = (np.log(self.batch[idx]), idx)
            self._index[s] = d
        self._match = {}

    def rows(self, device, split_test: bool | None = None) -> np.ndarray:
        m = (self.runs["device"] == device).to_numpy()
        if split_test is not None:
            m = m & ((self.runs["split"] == "test").to_numpy() == split_test)
        return np.flatnonzero(m)

    def match(self, rows: np.ndarray, s: str) -> np.ndarray:
        """The source ``s`` run matched to each of ``rows`` (-1: ``s`` did not run that model)."""
        out = np.full(len(rows), -1)
        d = self._index.get(s, {})
        mod, shp = self.runs["model"].to_numpy(), self.runs["input_shape"].to_numpy()
        for n, r in enumerate(rows):
            hit = d.get((mod[r], shp[r]))
            if hit is not None:
                lb, idx = hit
                out[n] = idx[int(np.argmin(np.abs(lb - np.log(self.batch[r]))))]
        return out

    def _src(self, rows, s, src_logy):
        """Source log latency, source roofline and batch ratio for target ``rows`` (NaN: no source)."""
        if src_logy is not None:  # a SeerNet of s, run on the target's own graph
            g = self.gpos[rows]
            return src_logy[s][g], self.roof[s][g], np.ones(len(rows))
        m = self.match(rows, s)
        ok = m >= 0
        mm = np.where(ok, m, 0)
        ly = np.where(ok, self.logy[mm], np.nan)
        return ly, self.roof[s][self.gpos[mm]], self.batch[rows] / self.batch[mm]

    def pairs(self, gpus, test: bool = False) -> list[dict]:
        out = []
        for s, t in itertools.permutations(gpus, 2):
            rows = self.rows(t, test)
            ly, rs, br = self._src(rows, s, None)
            ok = np.isfinite(ly)
            rows = rows[ok]
            out.append({"log_y_src": ly[ok], "log_y_tgt": self.logy[rows], "terms": self.terms[self.gpos[rows]],
                        "roof_src": rs[ok], "roof_tgt": self.roof[t][self.gpos[rows]], "batch_ratio": br[ok],
                        "spec_src": self.specs[s], "spec_tgt": self.specs[t]})
        return out

    def predict(self, tr, target, sources, rows, src_logy=None) -> np.ndarray:
        """log10 prediction of ``target``'s ``rows`` from ``sources`` (measured, or ``src_logy[s]``
        indexed by graph position), combined as ``tr`` says."""
        per = []
        for s in sources:
            ly, rs, br = self._src(rows, s, src_logy)
            ok = np.isfinite(ly)
            p = np.full(len(rows), np.nan)
            if ok.any():
                p[ok] = ly[ok] + tr.shift(ly[ok], self.terms[self.gpos[rows[ok]]], rs[ok],
                                          self.roof[target][self.gpos[rows[ok]]], self.specs[s], self.specs[target],
                                          br[ok])
            per.append(p)
        return tr.combine_sources(np.stack(per), np.stack([self.specs[s] for s in sources]), self.specs[target])


def mape(logp, logm) -> float:
    return float(np.mean(np.abs(10 ** (logp - logm) - 1)) * 100)


def select(tab: Table, gpus) -> tuple[tuple, list]:
    """The config with the lowest mean MAPE over an inner leave-one-GPU-out among ``gpus``."""
    from perfseer.specmodel.transfer import Transfer

    scores = []
    for fs, a, c in configs():
        m = []
        for inner in gpus:
            rest = [g for g in gpus if g != inner]
            tr = Transfer(feature_set=fs, alpha=a, combine=c).fit(tab.pairs(rest))
            rows = tab.rows(inner, False)
            p = tab.predict(tr, inner, rest, rows)
            f = np.isfinite(p)
            m.append(mape(p[f], tab.logy[rows][f]))
        scores.append(((fs, a, c), float(np.mean(m))))
    scores.sort(key=lambda r: r[1])
    return scores[0][0], scores


def build_table(ds, lab) -> Table:
    from perfseer.devices import get_device
    from perfseer.specmodel.transfer import graph_terms, roofline_ms, spec_vector

    graphs = np.array(sorted(lab["graph"].unique()))
    runs = lab[["device", "model", "input_shape", "batch_size", "graph", "split", "latency_ms"]].copy()
    runs["gpos"] = np.searchsorted(graphs, runs["graph"].to_numpy())
    specs = {s: spec_vector(get_device(s)) for s in SETTINGS}
    terms, roof = [], {s: [] for s in SETTINGS}
    for g in graphs:
        d = ds.graphs[int(g)]
        terms.append(graph_terms(d.u.numpy()))
        x = d.x.numpy()
        for s in SETTINGS:
            roof[s].append(roofline_ms(x, specs[s]))
    tab = Table(runs, np.array(terms), {s: np.array(v) for s, v in roof.items()}, specs)
    tab.graphs = graphs
    return tab


def seernet_logy(ds, tab: Table, gpos: np.ndarray) -> dict:
    """log10 SeerNet predictions of each source GPU on the graphs at positions ``gpos`` (NaN elsewhere)."""
    from perfseer.runtime.predictor import load_predictor

    gpos = np.unique(gpos)
    graphs = [ds.graphs[int(tab.graphs[i])] for i in gpos]
    out = {}
    for s, card in SEERNET_CARDS.items():
        p = load_predictor(card)
        col = p.columns(s, "infer")[0]
        v = np.full(len(tab.graphs), np.nan)
        v[gpos] = np.log10(np.asarray(p.predict_graphs(graphs))[:, col])
        out[s] = v
        print(f"  SeerNet {card}: {len(graphs)} graphs", file=sys.stderr, flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="timm", help="dataset name or folder (default: datasets/timm)")
    ap.add_argument("--json", default=None, help="write the table and the choices here")
    ap.add_argument("--fit-all", default=None,
                    help="also fit the transfer on all four GPUs (config by leave-one-GPU-out over them) and write "
                         "the bundled transfer card here, with the held-out residual quantile of the SeerNet source")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.specmodel.transfer import SPEC_KEYS, Transfer
    from perfseer.trust import intervals as itv

    ds = load_dataset(resolve_dataset(args.data))
    lab = ds.labels
    lab = lab[lab["device"].isin(SETTINGS) & (lab["phase"] == "infer") & lab["latency_ms"].notna()].copy()
    tab = build_table(ds, lab)
    print(f"{len(tab.runs)} runs, {len(tab.graphs)} graphs", file=sys.stderr, flush=True)
    sn = seernet_logy(ds, tab, tab.gpos[(tab.runs["split"] == "test").to_numpy()])
    spec_rows = {r["gpu"]: r for r in json.loads(SPEC_LOGO.read_text())["rows"]} if SPEC_LOGO.exists() else {}
    rows, choices, resid = [], {}, {"measured": {}, "seernet": {}}
    for hold in SETTINGS:
        train = [g for g in SETTINGS if g != hold]
        (fs, a, c), scores = select(tab, train)
        choices[hold] = {"feature_set": fs, "alpha": a, "combine": c, "inner_mape": scores[0][1],
                         "top": [[list(k), v] for k, v in scores[:5]]}
        tr = Transfer(feature_set=fs, alpha=a, combine=c).fit(tab.pairs(train))
        te = tab.rows(hold, True)
        meas = tab.logy[te]
        pa = tab.predict(tr, hold, train, te)
        sn_src = [g for g in train if g in sn]
        pb = tab.predict(tr, hold, sn_src, te, src_logy=sn)
        row = {"gpu": hold, "test_rows": int(len(te)), "choice": f"{fs}, alpha {a:g}, {c}"}
        for name, p, srcs in (("measured", pa, train), ("seernet", pb, sn_src)):
            f = np.isfinite(p)
            row[f"from_{name}_rows"] = int(f.sum())
            row[f"from_{name}_sources"] = srcs
            row[f"from_{name}_mape"] = mape(p[f], meas[f])
            row[f"from_{name}_spearman"] = spearman(10 ** p[f], 10 ** meas[f])
            resid[name][hold] = np.log(10 ** meas[f] / 10 ** p[f])
        row["by_feature_set"] = {}
        for fs2 in dict.fromkeys(k[0] for k, _ in scores):  # ablation: each feature set at its best inner config
            (_, a2, c2), inner2 = next((k, v) for k, v in scores if k[0] == fs2)
            t2 = Transfer(feature_set=fs2, alpha=a2, combine=c2).fit(tab.pairs(train))
            p2 = tab.predict(t2, hold, train, te)
            f2 = np.isfinite(p2)
            row["by_feature_set"][fs2] = {"alpha": a2, "combine": c2, "inner_mape": inner2,
                                          "measured_source_mape": mape(p2[f2], meas[f2])}
        sr = spec_rows.get(hold, {})
        row.update({k: sr.get(k) for k in ("zero_shot_mape", "zero_shot_spearman", "calibrated_mape",
                                           "calibrated_spearman")})
        s = SEERNET.get(hold)
        row["seernet_mape"], row["seernet_spearman"] = (s[0], s[1]) if s else (None, None)
        rows.append(row)
        print(f"  {hold}: {row['choice']}", file=sys.stderr, flush=True)

    def fmt(v, d):
        return "-" if v is None else f"{v:.{d}f}"

    print("| held-out GPU | test rows | transfer from measured GPUs: MAPE % | Spearman | transfer from SeerNets: "
          "MAPE % | Spearman | spec model zero-shot: MAPE % | Spearman | spec model calibrated: MAPE % | Spearman | "
          "measured-device SeerNet: MAPE % | Spearman |")
    print("| --- " * 12 + "|")
    for r in rows:
        print(f"| {r['gpu']} | {r['test_rows']} | {fmt(r['from_measured_mape'], 1)} | "
              f"{fmt(r['from_measured_spearman'], 3)} | "
              f"{fmt(r['from_seernet_mape'], 1)} | {fmt(r['from_seernet_spearman'], 3)} | "
              f"{fmt(r['zero_shot_mape'], 1)} | {fmt(r['zero_shot_spearman'], 3)} | {fmt(r['calibrated_mape'], 1)} | "
              f"{fmt(r['calibrated_spearman'], 3)} | {fmt(r['seernet_mape'], 2)} | {fmt(r['seernet_spearman'], 3)} |")
    print()
    print("| held-out GPU | choice (inner leave-one-GPU-out) | inner MAPE % | "
          "rows scored (measured / SeerNet sources) |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['gpu']} | {r['choice']} | {choices[r['gpu']]['inner_mape']:.1f} | "
              f"{r['from_measured_rows']} / {r['from_seernet_rows']} |")
    print()
    fsets = list(rows[0]["by_feature_set"])
    print("Ablation (not used for any choice): held-out MAPE % from measured sources of each feature set at its best "
          "inner config (inner MAPE % in brackets)")
    print()
    print("| held-out GPU | " + " | ".join(fsets) + " |")
    print("| --- " * (len(fsets) + 1) + "|")
    for r in rows:
        print(f"| {r['gpu']} | " + " | ".join(f"{r['by_feature_set'][f]['measured_source_mape']:.1f} "
                                             f"({r['by_feature_set'][f]['inner_mape']:.1f})" for f in fsets) + " |")
    cov = interval_coverage(resid)
    print()
    print("| held-out GPU | source | q from the other GPUs' runs (x/÷) | 90 % interval holds % |")
    print("| --- | --- | --- | --- |")
    for kind, per in cov.items():
        for g, v in per.items():
            qs = f"{v['q']:.3f} ({np.exp(v['q']):.2f})" if v["q"] is not None else "-"
            print(f"| {g} | {kind} | {qs} | {v['coverage_pct']:.1f} |")
    cmd = "python -m benchmarks.lib.spec_transfer_logo " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.json:
        _atomic_json(args.json, {"command": cmd, "settings": list(SETTINGS), "rows": rows, "choices": choices,
                                 "coverage": cov})
    if args.fit_all:
        (fs, a, c), scores = select(tab, list(SETTINGS))
        tr = Transfer(feature_set=fs, alpha=a, combine=c).fit(tab.pairs(list(SETTINGS)))
        r = np.concatenate(list(resid["seernet"].values()))
        rm = np.concatenate(list(resid["measured"].values()))
        from perfseer.devices import get_device

        sv = np.stack([tab.specs[s] for s in SETTINGS])
        xfer_mape = float(np.mean([r_["from_seernet_mape"] for r_ in rows]))
        zero = [r_["zero_shot_mape"] for r_ in rows if r_["zero_shot_mape"] is not None]
        cal = [r_["calibrated_mape"] for r_ in rows if r_["calibrated_mape"] is not None]
        card = {
            "format": "perfseer.spec-transfer", "format_version": 1, "name": "spec-transfer",
            "source": f"{cmd}: timm AMP inference (NCHW, eager) of {', '.join(SETTINGS)}, train/val split models",
            "precision": "fp16", "phase": "infer",
            "sources": {s: {"device": get_device(s).name, "predictor": SEERNET_CARDS[s], "spec": tab.specs[s].tolist()}
                        for s in SEERNET_CARDS},
            "transfer": tr.to_dict(), "inner_mape": scores[0][1],
            "domain": {"devices": [get_device(s).name for s in SETTINGS], "spec_keys": list(SPEC_KEYS),
                       "ranges": {k: [float(sv[:, i].min()), float(sv[:, i].max())] for i, k in enumerate(SPEC_KEYS)},
                       "tolerance": 1.5, "vendors": ["nvidia"]},
            "intervals": {"seernet-source": {"q": itv.conformal_quantile(r), "n": int(len(r)),
                                             "median_abs": float(np.median(np.abs(r)))},
                          "measured-source": {"q": itv.conformal_quantile(rm), "n": int(len(rm)),
                                              "median_abs": float(np.median(np.abs(rm)))}},
            "ood_factor": 2.0,
            "logo": {"transfer_from_seernet_mape": xfer_mape,
                     "spec_zero_shot_mape": float(np.mean(zero)) if zero else None,
                     "spec_calibrated_mape": float(np.mean(cal)) if cal else None,
                     "by_gpu": {r_["gpu"]: {k: r_[k] for k in ("from_measured_mape", "from_seernet_mape",
                                                              "zero_shot_mape", "calibrated_mape")} for r_ in rows}},
        }
        _atomic_json(args.fit_all, card)
        print(f"wrote {args.fit_all}: {fs}, alpha {a:g}, {c}", file=sys.stderr)
    return 0


def interval_coverage(resid: dict) -> dict:
    """Per source kind and held-out GPU: the 90 % conformal quantile of the *other* GPUs' log
    residuals and the share of this GPU's runs inside it."""
    from perfseer.trust import intervals as itv

    out = {}
    for kind, per in resid.items():
        out[kind] = {}
        for g, r in per.items():
            q = itv.conformal_quantile(np.concatenate([v for h, v in per.items() if h != g]))
            out[kind][g] = {"runs": int(len(r)), "q": q, "coverage_pct": float(np.mean(np.abs(r) <= q) * 100)}
        allr = np.concatenate([np.abs(r) <= out[kind][g]["q"] for g, r in per.items()])
        out[kind]["all"] = {"runs": int(len(allr)), "q": None, "coverage_pct": float(allr.mean() * 100)}
    return out


if __name__ == "__main__":
    sys.exit(main())
