"""Shared pieces of the accuracy benchmarks (``compare_methods.py``, ``ablations.py``).

Not a benchmark itself: the named settings, dataset lookup, hash-stable subsampling, the budget
flags every training benchmark takes, and the rich/JSON output helpers.

Settings name a dataset, device(s), phase and split column.  A setting with several devices is
trained and scored per device (one single-target predictor each), and SeerNet-Multi can take the
devices as its targets.

Subsampling (``--archs N``) keeps the N architectures (``model`` values) with the smallest
``sha256("perfseer-bench-v1:<model>")``: the same N for every method, setting, device and run,
independent of ``--seed``, and nested (the first 200 are among the first 1,000).  The dataset's
own split column then splits them, so a subsample keeps the 2:1:1 split by architecture.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from perfseer.cli.train import positive  # the CLI's "number > 0" argument type; used by every script

ROOT = Path(__file__).resolve().parents[2]
CACHE_DATASETS = ROOT / ".cache" / "datasets"
SUBSAMPLE_SALT = "perfseer-bench-v1"
HELP_GPUS = ("1080ti", "2080ti", "titan_rtx", "titanx", "titanxp")
NEURAL = ("seernet", "pmgns", "gcn", "gat", "gin", "mlp-node")
BASELINES = ("additive", "gbm", "flops")
DEFAULT_METHODS = NEURAL + BASELINES


@dataclass(frozen=True)
class Setting:
    """One prediction task: ``metric`` of ``devices`` in ``phase``, split by ``split_column``."""

    name: str
    dataset: str
    devices: tuple[str, ...]
    phase: str = "infer"
    split_column: str = "split"
    metric: str = "latency_ms"
    about: str = ""

    @property
    def per_device(self) -> bool:
        return len(self.devices) > 1


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("timm-3090-infer", "timm", ("rtx3090/amp-nchw-pt240",), "infer", "split",
            about="timm models, RTX 3090 AMP inference (PyTorch 2.4), unseen architectures"),
    Setting("timm-3090-infer-family", "timm", ("rtx3090/amp-nchw-pt240",), "infer", "family_split",
            about="as timm-3090-infer, test on unseen model families"),
    Setting("timm-3090-train", "timm", ("rtx3090/amp-nchw-pt112",), "train", "split",
            about="timm models, RTX 3090 AMP training step (PyTorch 1.12)"),
    Setting("timm-i9", "timm", ("i9_10940x/fp32-nchw-pt240-dynamo",), "infer", "split",
            about="timm models, Core i9-10940X fp32 inference (torch.compile)"),
    Setting("nb201-gpus", "nb201", HELP_GPUS, "infer", "split",
            about="NAS-Bench-201 (HELP latencies), each of five GPUs"),
    Setting("fbnet-gpus", "fbnet", HELP_GPUS, "infer", "split",
            about="FBNet (HELP latencies), each of five GPUs"),
)}


def parse_settings(text: str) -> list[Setting]:
    """Named presets, or ad-hoc ``DATASET:DEVICE[+DEVICE...]:PHASE[:SPLIT_COLUMN]`` settings
    (e.g. ``fbnet:1080ti:infer``, ``nb201:1080ti+titanxp:infer``)."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    out, unknown = [], []
    for n in names:
        if n in SETTINGS:
            out.append(SETTINGS[n])
            continue
        parts = n.split(":")
        if len(parts) in (3, 4) and all(parts) and parts[2] in ("infer", "train") and \
                (len(parts) == 3 or parts[3] in ("split", "family_split")):
            out.append(Setting(n, parts[0], tuple(parts[1].split("+")), parts[2],
                               parts[3] if len(parts) == 4 else "split", about=f"ad-hoc setting {n}"))
        else:
            unknown.append(n)
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown setting(s) {', '.join(unknown) or repr(text)}; choose from "
                                         f"{', '.join(SETTINGS)}, or write DATASET:DEVICE[+DEVICE...]:PHASE[:SPLIT]")
    return out


def parse_list(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def add_common_args(ap: argparse.ArgumentParser) -> None:
    """The budget, data and output flags shared by the training benchmarks."""
    ap.add_argument("--epochs", type=positive(int), default=100,
                    help="at most this many epochs per neural model (default 100; the paper's recipe: 500)")
    ap.add_argument("--time-limit", type=positive(float), default=None, metavar="S",
                    help="per neural model: stop after the epoch that ends past S seconds")
    ap.add_argument("--patience", type=positive(int), default=20,
                    help="early stopping after this many epochs without a better val loss (default 20)")
    ap.add_argument("--hidden", type=positive(int), default=None,
                    help="override every neural model's hidden widths (hidden_dim, head_hidden_dim)")
    ap.add_argument("--batch-size", type=positive(int), default=None, metavar="G",
                    help="graphs per optimizer step (default: the trainer's, about 32 steps per epoch)")
    ap.add_argument("--seed", type=int, default=0, help="training seed (the subsample does not depend on it)")
    ap.add_argument("--archs", type=positive(int), default=None, metavar="N",
                    help="keep N architectures, chosen by a hash of the model name (default: all)")
    ap.add_argument("--batch", type=positive(int), default=None, metavar="B",
                    help="keep only rows at batch size B (e.g. 256: HELP's batch-256 columns)")
    ap.add_argument("--threads", type=positive(int), default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--cuda", action="store_true", help="train and evaluate the networks on CUDA")
    ap.add_argument("--data-root", default=None, metavar="DIR",
                    help="folder holding <dataset>/ folders (default: the committed dataset by name, "
                         "else .cache/datasets/<name>)")
    ap.add_argument("--json", default=None, metavar="OUT", help="write the results as JSON to OUT")


# -- data -------------------------------------------------------------------------------------------

def dataset_path(name: str, data_root: str | None = None) -> Path:
    """``DATA_ROOT/name``, else the committed dataset ``name``, else ``.cache/datasets/name``."""
    from perfseer.data.dataset import resolve_dataset
    from perfseer.errors import PerfseerError

    if data_root is not None:
        return Path(data_root) / name
    try:
        return resolve_dataset(name)
    except PerfseerError:
        return CACHE_DATASETS / name


class MemoGraphs:
    """A dataset's graph sequence that builds each graph once (compact datasets rebuild a graph on
    every access; the per-device selections read the same graphs five times)."""

    def __init__(self, graphs):
        self._graphs, self._memo = graphs, {}

    def __len__(self) -> int:
        return len(self._graphs)

    def __getitem__(self, i: int):
        i = int(i)
        g = self._memo.get(i)
        if g is None:
            g = self._memo[i] = self._graphs[i]
        return g


@dataclass
class View:
    """What :func:`perfseer.fit.data.select` reads: graphs and (filtered) labels."""

    graphs: object
    labels: object


_LOADED: dict[Path, object] = {}


def load(name: str, data_root: str | None = None):
    """The dataset ``name`` (loaded once per process), its graphs memoised."""
    from perfseer.data.dataset import load_dataset

    path = dataset_path(name, data_root)
    if path not in _LOADED:
        ds = load_dataset(path)
        _LOADED[path] = View(MemoGraphs(ds.graphs), ds.labels)
    return _LOADED[path]


def stable_key(model: str) -> str:
    return hashlib.sha256(f"{SUBSAMPLE_SALT}:{model}".encode()).hexdigest()


def setting_view(setting: Setting, data_root: str | None = None, archs: int | None = None,
                 batch: int | None = None, devices=None) -> tuple[View, dict]:
    """The setting's rows (its devices and phase), optionally at one batch size and on the first
    ``archs`` architectures by :func:`stable_key`; returns the view and what was kept."""
    ds = load(setting.dataset, data_root)
    labels = ds.labels
    devices = list(devices or setting.devices)
    rows = labels[labels["device"].astype(str).isin(devices) & (labels["phase"].astype(str) == setting.phase)]
    if rows.empty:
        have = ", ".join(sorted(labels["device"].astype(str).unique()))
        raise SystemExit(f"error: {setting.dataset} has no {setting.phase} rows of {', '.join(devices)} "
                         f"(its devices: {have})")
    if batch is not None:
        rows = rows[rows["batch_size"] == batch]
        if rows.empty:
            have = sorted(int(b) for b in labels[labels["device"].astype(str).isin(devices)]["batch_size"].unique())
            raise SystemExit(f"error: no {setting.name} rows at batch {batch}; batch sizes there: {have}")
    models = sorted(rows["model"].astype(str).unique(), key=stable_key)
    if archs is not None:
        keep = set(models[:archs])
        rows = rows[rows["model"].astype(str).isin(keep)]
    info = {"dataset": str(dataset_path(setting.dataset, data_root)), "rows": int(len(rows)),
            "architectures": int(rows["model"].nunique()), "architectures_available": len(models),
            "batch_sizes": sorted(int(b) for b in rows["batch_size"].unique()),
            "subsample": f"first {archs} by sha256('{SUBSAMPLE_SALT}:<model>')" if archs else None}
    return View(ds.graphs, rows.reset_index(drop=True)), info


# -- training ---------------------------------------------------------------------------------------

def train_config(args, **overrides):
    from perfseer.fit.trainer import TrainConfig

    kw = dict(max_epochs=args.epochs, time_limit_s=args.time_limit, early_stopping_patience=args.patience,
              seed=args.seed, num_threads=args.threads, progress=False,
              batch_size=getattr(args, "batch_size", None),
              device="cuda" if getattr(args, "cuda", False) else "cpu")
    kw.update(overrides)
    return TrainConfig(**kw)


def model_config(method: str, hidden: int | None, extra: dict | None = None) -> dict | None:
    """Config overrides: every hidden width set to ``hidden`` (the fields the model has)."""
    import dataclasses

    from perfseer.models.registry import MODELS, is_neural

    cfg = dict(extra or {})
    if hidden is not None and method in MODELS and is_neural(method):
        fields = {f.name for f in dataclasses.fields(MODELS[method][0])}
        for name in ("hidden_dim", "head_hidden_dim"):
            if name in fields:
                cfg[name] = hidden
        if "heads" in fields and hidden % 4:  # GAT splits hidden_dim over its heads
            cfg["heads"] = 1
    return cfg or None


def add_set_arg(ap: argparse.ArgumentParser) -> None:
    """``--set FIELD=VALUE`` (repeatable): a model config field for every method that has it."""
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="set a model config field (JSON value) in every method that has it; repeatable, "
                         "e.g. --set op_embedding_dim=16 --set dropout=0.1")


def check_set_fields(ap: argparse.ArgumentParser, methods, settings: list[str]) -> None:
    """Refuse a ``--set`` field that none of ``methods`` has: a typo would otherwise change nothing."""
    from perfseer.errors import PerfseerError
    from perfseer.models.registry import config_fields, parse_override

    fields = set().union(*(config_fields(m) for m in methods))
    try:
        unknown = sorted({parse_override(item)[0] for item in settings} - fields)
    except PerfseerError as e:
        ap.error(f"--set: {e}")
    if unknown:
        ap.error(f"--set {', '.join(unknown)}: no method run here has such a config field "
                 f"(theirs: {', '.join(sorted(fields))})")


def overrides_for(method: str, settings: list[str] | None) -> dict | None:
    """The ``FIELD=VALUE`` settings (``--set``) that ``method``'s config has, values read as JSON
    (else kept as text); ``None`` when none applies."""
    from perfseer.errors import PerfseerError
    from perfseer.models.registry import config_fields, parse_override

    fields = config_fields(method)
    if not settings or not fields:
        return None
    out = {}
    for item in settings:
        try:
            name, value = parse_override(item)
        except PerfseerError as e:
            raise SystemExit(f"error: --set: {e}") from None
        if name in fields:
            out[name] = value
    return out or None


def parameters(fitted) -> tuple[int | None, str]:
    """``(count, label)`` of a fitted method's learned parameters (trees for the GBM)."""
    est = fitted.estimator
    if fitted.neural:
        n = int(sum(p.numel() for p in est.model.parameters()))
        return n, human(n)
    if hasattr(est, "boosters_"):
        trees = sum(int(b.num_trees()) for b in est.boosters_)
        return None, f"{trees} trees"
    if hasattr(est, "W_"):
        seen = len(getattr(est, "seen_ops_", [])) or est.W_.shape[0]
        n = int(seen * (est.W_.shape[1] * est.W_.shape[2] + est.b_.shape[-1])) if est.W_.ndim == 3 else int(est.W_.size)
        return n, human(n)
    if hasattr(est, "coef_"):
        return int(est.coef_.size), str(int(est.coef_.size))
    return None, "-"


def human(n: int | None) -> str:
    if n is None:
        return "-"
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e3:
        return f"{n / 1e3:.1f}k"
    return str(n)


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)
    os.environ.setdefault("OMP_NUM_THREADS", str(n))


# -- output -----------------------------------------------------------------------------------------

def run_subcommand(args, commands: dict, report) -> int:
    """The tail of a ``cache|sweep|...|report`` benchmark's ``main``: ``report`` prints
    ``report(args)``; any other subcommand sets the threads and runs ``commands[args.cmd](args, console)``
    with a rich console on stderr."""
    from rich.console import Console

    console = Console(stderr=True)
    if args.cmd == "report":
        print(report(args))
        return 0
    set_threads(getattr(args, "threads", 1))
    commands[args.cmd](args, console)
    return 0


def environment() -> dict:
    import torch

    from perfseer import __version__

    try:
        affinity = sorted(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {"perfseer": __version__, "torch": torch.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "processor": _cpu_name(), "cpu_affinity": affinity,
            "torch_threads": torch.get_num_threads(), "argv": sys.argv,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def write_json(path: str | None, obj: dict) -> None:
    """Write ``obj`` atomically (called after every setting, so a long run keeps what it finished)."""
    if not path:
        return
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=_json_default) + "\n")
    os.replace(tmp, p)


def _json_default(o):
    import numpy as np

    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if dataclasses_is(o):
        return asdict(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def dataclasses_is(o) -> bool:
    import dataclasses

    return dataclasses.is_dataclass(o) and not isinstance(o, type)


def f1(v, digits: int = 2) -> str:
    import math

    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}"


def log(console, text: str) -> None:
    console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {text}", highlight=False)


def run_main(main) -> None:
    """Run a benchmark's ``main``: a perfseer error (no such dataset, device...) is one line on stderr
    and exit status 2, not a traceback."""
    from perfseer.errors import PerfseerError

    try:
        code = main()
    except PerfseerError as e:
        print(f"error: {e}", file=sys.stderr)
        code = 2
    sys.exit(code)
