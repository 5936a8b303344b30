"""PerfSeer's ablations (Tables 1-3) redone with SeerNet on one setting: feature groups, SynMM and
GNPB, and the amount of training data.

    taskset -c 0 python benchmarks/ablations.py --archs 600 --epochs 200 --time-limit 400 --json benchmarks/results/ablations_nb201.json
    taskset -c 0 python benchmarks/ablations.py --setting timm-3090-infer --epochs 300 --time-limit 300 --json benchmarks/results/ablations_timm.json
    taskset -c 0 python benchmarks/ablations.py --archs 200 --epochs 2   # smoke

13 SeerNet runs (7 feature variants, 3 more component variants, 3 more data scales), each about
its ``--time-limit`` on one core unless early stopping ends it: ~1.6 h for the first line (600
architectures x 3 batch sizes: ~900 training examples, ~12 s per epoch, ~30 epochs in 400 s).

Default setting: NAS-Bench-201 latencies on one GPU (``--setting nb201-gpus --device 1080ti``, all
three batch sizes unless ``--batch``), subsampled to ``--archs`` architectures (default 600 on
NB201 and FBNet, all of timm; a hash of the model name picks them, see ``_training_bench.py``).
Every run is SeerNet at its paper configuration (``--hidden`` overrides the widths), trained with the same seed, split and budget:

* **features** (Table 1): all features; without the node hyper-parameters (``node_hp``), the node
  cost features (``node_cost``: FLOPs, MACs, memory access, bytes, intensity, proportions), the edge
  features, the global features; node features only; and with a 16-wide op-type embedding added
  (the paper, and SeerNet's default, leave node categories out).  A group is removed by
  ``TrainConfig.feature_mask``, which sets its standardised columns to 0 (their training mean): the
  network keeps its shape and sees nothing there.
* **components** (Table 2): SynMM and GNPB on and off (``SeerNetConfig.synmm`` / ``gnpb``).
* **scale** (Table 3): 10, 25, 50, 100 % of the training architectures (nested, hash-stable), the
  validation and test splits unchanged.

The reference (all features, SynMM + GNPB, 100 % of the data) is trained once and shown in each table.
``ΔMAPE`` is the test MAPE minus the reference's.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402
from compare_methods import _epochs, fit_and_score  # noqa: E402

GROUPS = ("features", "components", "scale")
DEFAULT_NAS_ARCHS = 600  # --archs when not given, on nb201 and fbnet (``--archs 12500``: all of NB201)
# (label, feature_mask, model config overrides)
FEATURE_VARIANTS = (
    ("all features", (), {}),
    ("without node hyper-parameters", ("node_hp",), {}),
    ("without node cost features", ("node_cost",), {}),
    ("without edge features", ("edge",), {}),
    ("without global features", ("global",), {}),
    ("node features only", ("edge", "global"), {}),
    ("with a 16-wide op-type embedding", (), {"op_embedding_dim": 16}),
)
COMPONENT_VARIANTS = (
    ("no SynMM, no GNPB", {"synmm": False, "gnpb": False}),
    ("SynMM", {"synmm": True, "gnpb": False}),
    ("GNPB", {"synmm": False, "gnpb": True}),
    ("SynMM + GNPB", {"synmm": True, "gnpb": True}),
)


def _fractions(text: str) -> list[float]:
    try:
        v = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        v = []
    if not v or any(not 0 < x <= 100 for x in v):
        raise argparse.ArgumentTypeError(f"expected comma-separated percentages in (0, 100], got {text!r}")
    return sorted(set(v))


def train_subset(sel, pct: float) -> list:
    """The training examples of the first ``pct`` % of the training architectures (by stable key)."""
    if pct >= 100:
        return sel.train
    models = sel.labels["model"].astype(str).to_numpy()
    archs = sorted({models[int(g.row)] for g in sel.train}, key=tb.stable_key)
    keep = set(archs[:max(1, round(len(archs) * pct / 100))])
    return [g for g in sel.train if models[int(g.row)] in keep]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setting", type=tb.parse_settings, default=tb.parse_settings("nb201-gpus"),
                    help=f"one of {', '.join(tb.SETTINGS)}, or DATASET:DEVICE:PHASE[:SPLIT] (default nb201-gpus)")
    ap.add_argument("--device", default=None, help="the setting's device to use (default: its first)")
    ap.add_argument("--groups", type=tb.parse_list, default=list(GROUPS),
                    help=f"comma-separated, from {', '.join(GROUPS)} (default all)")
    ap.add_argument("--fractions", type=_fractions, default=[10.0, 25.0, 50.0, 100.0], metavar="P,P,...",
                    help="percentages of the training architectures for the scale table (default 10,25,50,100)")
    tb.add_common_args(ap)
    args = ap.parse_args(argv)
    if len(args.setting) != 1:
        ap.error("--setting takes one setting")
    setting = args.setting[0]
    if args.archs is None and setting.dataset in ("nb201", "fbnet"):
        args.archs = DEFAULT_NAS_ARCHS  # the NAS spaces are large; timm is used whole
    bad = [g for g in args.groups if g not in GROUPS]
    if bad or not args.groups:
        ap.error(f"unknown group(s) {', '.join(bad)}; choose from {', '.join(GROUPS)}")
    device = args.device or setting.devices[0]
    if device not in setting.devices and ":" not in setting.name:
        ap.error(f"{setting.name} has devices {', '.join(setting.devices)}, not {device}")

    from rich.console import Console
    from rich.table import Table

    from perfseer.fit.data import select

    tb.set_threads(args.threads)
    console, err = Console(width=200), Console(stderr=True, width=200)
    t_start = time.perf_counter()
    view, info = tb.setting_view(setting, args.data_root, args.archs, args.batch, devices=[device])
    sel = select(view, setting.metric, [device], setting.phase, setting.split_column)
    tb.log(err, f"[bold]{setting.name} / {device}[/bold]: {sel.describe()}")

    cache: dict[tuple, dict] = {}

    def run(label: str, mask=(), config=None, pct: float = 100.0) -> dict:
        cfg = {"synmm": True, "gnpb": True, **(config or {})}
        key = (tuple(sorted(mask)), tuple(sorted(cfg.items())), pct)
        if key not in cache:
            train = train_subset(sel, pct)
            part = SimpleNamespace(train=train, val=sel.val, test=sel.test, targets=sel.targets)
            row = fit_and_score("seernet", part, args, err, label=label, model_extra=cfg, feature_mask=tuple(mask))
            row.update(feature_mask=list(mask), model_overrides=cfg, train_fraction_pct=pct,
                       train_examples=len(train),
                       train_architectures=int(sel.labels["model"].iloc[[int(g.row) for g in train]].nunique()))
            if "error" not in row:
                row["metrics"] = row["test"][sel.targets[0]]
            cache[key] = row
        return dict(cache[key], variant=label)

    tables: dict[str, list[dict]] = {}
    if "features" in args.groups:
        tables["features"] = [run(label, mask, cfg) for label, mask, cfg in FEATURE_VARIANTS]
    if "components" in args.groups:
        tables["components"] = [run(label, (), cfg) for label, cfg in COMPONENT_VARIANTS]
    if "scale" in args.groups:
        tables["scale"] = [run(f"{p:g} % of the training architectures", pct=p) for p in args.fractions]
    ref = run("reference")
    ref_mape = ref.get("metrics", {}).get("mape")

    titles = {"features": "Table 1: feature groups", "components": "Table 2: SynMM and GNPB",
              "scale": "Table 3: training data"}
    report = {"benchmark": "ablations", "environment": tb.environment(),
              "args": {k: v for k, v in vars(args).items() if k != "setting"} | {"setting": setting.name,
                                                                                  "device": device},
              "setting": asdict(setting), "device": device, "data": info, "selection": sel.describe(),
              "sizes": {s: len(sel.split(s)) for s in ("train", "val", "test")},
              "reference": ref, "tables": tables, "wall_time_s": round(time.perf_counter() - t_start, 1)}
    for group, rows in tables.items():
        t = Table(title=f"{titles[group]} -- SeerNet, {setting.metric} on {device} ({setting.phase}), split by "
                        f"{setting.split_column}; val/test {len(sel.val)}/{len(sel.test)} examples")
        for c, just in (("variant", "left"), ("train ex.", "right"), ("params", "right"), ("fit s", "right"),
                        ("epochs", "right"), ("MAPE %", "right"), ("ΔMAPE", "right"), ("acc@10 %", "right"),
                        ("acc@20 %", "right"), ("Spearman", "right"), ("Kendall", "right")):
            t.add_column(c, justify=just)
        for r in rows:
            m = r.get("metrics")
            is_ref = r["feature_mask"] == [] and r["model_overrides"] == {"synmm": True, "gnpb": True} \
                and r["train_fraction_pct"] >= 100
            name = r["variant"] + (" (reference)" if is_ref else "")
            if m is None:
                t.add_row(name, str(r["train_examples"]), "-", tb.f1(r.get("fit_time_s"), 1), "-",
                          f"[red]{r.get('error', '')[:50]}[/red]", *["-"] * 5)
                continue
            delta = m["mape"] - ref_mape if ref_mape is not None else None
            t.add_row(name, str(r["train_examples"]), r["params_label"], tb.f1(r["fit_time_s"], 1), _epochs(r),
                      tb.f1(m["mape"]), "" if is_ref or delta is None else f"{delta:+.2f}", tb.f1(m["acc10"], 1),
                      tb.f1(m["acc20"], 1), tb.f1(m["spearman"], 4), tb.f1(m["kendall"], 4),
                      style="bold" if is_ref else None)
        t.caption = (f"{setting.about}; {info['architectures']} architectures"
                     + (f" (of {info['architectures_available']})" if args.archs else "")
                     + (f", batch {args.batch}" if args.batch else f", batch sizes {info['batch_sizes']}")
                     + f"; epochs <= {args.epochs}" + (f", <= {args.time_limit:g} s" if args.time_limit else "")
                     + f" per run, seed {args.seed}; the reference is trained once")
        console.print(t)
    tb.write_json(args.json, report)
    tb.log(err, f"done in {report['wall_time_s']:.0f} s" + (f"; wrote {args.json}" if args.json else ""))
    return 0


if __name__ == "__main__":
    tb.run_main(main)
