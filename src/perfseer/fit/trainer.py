"""Training a neural predictor: PerfSeer's recipe, reproducible and resumable.

The recipe (PerfSeer §4.1): mini-batches of 128 graphs, Adam at learning rate 1e-3, halved after 5
epochs without a better validation loss down to 1e-6, up to 500 epochs, MSE loss.  The loss is
taken on standardised log targets (:mod:`perfseer.runtime.scaling`), so it weighs relative
errors; a model whose config says ``loss="huber"`` (PMGNS) or ``"l1"`` is trained with that.
With several targets and ``pcgrad=True`` each target's loss is a task and the shared parameters
get PCGrad's projected gradient (SeerNet-Multi, :mod:`perfseer.fit.pcgrad`).

Added to the paper's recipe, and why:

- **batch size by data size** (:func:`auto_batch_size`): the paper's 128 graphs per step on its
  ~50 k graphs is hundreds of steps per epoch; on a few hundred graphs it is 3-4.  Unless
  ``batch_size`` is set, an epoch is about 32 steps, between 16 and 128 graphs each.
- **early stopping** after ``early_stopping_patience`` (20) epochs without a better validation
  loss: by then the learning rate has been halved three times without effect; the paper's 500
  epochs would mostly train a model that no longer improves.  The weights of the best validation
  epoch are restored at the end (the paper does not say which epoch it reports).
- **seeded data order**: epoch ``e`` visits the training examples in ``randperm`` order of a
  generator seeded with ``(seed, e)``, and PCGrad's projection order likewise, so a resumed run
  sees the same batches as an uninterrupted one.
- **a checkpoint** in ``checkpoint_dir`` after every epoch (see :func:`train`), and
  ``time_limit_s`` / ``max_epochs`` so that benchmarks can cap the cost.

Example::

    from perfseer.models.registry import build_model
    from perfseer.fit.data import select
    from perfseer.fit.trainer import TrainConfig, train

    sel = select("runs-dataset", "latency_ms", devices="rtx3090", phase="infer")
    torch.manual_seed(0)
    model = build_model("seernet", num_targets=1)
    result = train(model, sel.train, sel.val, TrainConfig(max_epochs=100), targets=sel.targets, test_set=sel.test)
    result.metrics["test"]["latency_ms"]["mape"]
    result.predict(graphs)   # [N, 1] milliseconds
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from torch import nn

from perfseer.errors import PerfseerError
from perfseer.fit.metrics import evaluate_targets
from perfseer.fit.pcgrad import pcgrad_backward
from perfseer.runtime.net import NeuralPredictor, _as_2d, _model_input, resolve_device
from perfseer.runtime.scaling import FeatureScaler, TargetScaler

LOSSES = ("mse", "huber", "l1")
CHECKPOINT_FORMAT = "perfseer.train-checkpoint"
CHECKPOINT_VERSION = 1
STATE_FILE = "trainer_state.json"
# Fields of TrainConfig that may differ between a checkpointed run and its resumption.
_RESUME_FREE = {"max_epochs", "time_limit_s", "progress", "resume", "checkpoint_dir", "device", "eval_batch_size",
                "num_threads"}


@dataclass
class TrainConfig:
    """How to train.  Defaults follow PerfSeer §4.1 unless the comment says otherwise."""

    # graphs per step; None: :func:`auto_batch_size` of the training set, about 32 steps per epoch
    # between 16 and the paper's 128 (PerfSeer §4.1 trains ~50k graphs at 128; on the 319-501 graphs
    # of the timm settings 128 is 3-4 steps per epoch: SeerNet's timm-3090-infer MAPE was 9.35 % at
    # 128, 8.25 at 64, 7.45 at 32, 6.74 at 16 and 7.75 at 8, with the same 240 s budget)
    batch_size: int | None = None
    lr: float = 1e-3  # Adam's initial learning rate (PerfSeer §4.1)
    weight_decay: float = 0.0  # Adam's L2 penalty (the paper uses none)
    lr_factor: float = 0.5  # ReduceLROnPlateau factor: "halving it" (PerfSeer §4.1)
    lr_patience: int = 5  # epochs without a better val loss before halving (PerfSeer §4.1)
    min_lr: float = 1e-6  # the learning rate is not reduced below this (PerfSeer §4.1)
    max_epochs: int = 500  # upper bound on epochs (PerfSeer §4.1); benchmarks lower it
    # stop after this many epochs without a better val loss; None trains all max_epochs.  20: three
    # halvings of the learning rate (one per 6 bad epochs) have not helped (not in the paper).
    early_stopping_patience: int | None = 20
    loss: str | None = None  # "mse", "huber" or "l1"; None: the model config's `loss`, else "mse"
    huber_delta: float = 1.0  # Huber's delta, in standardised log-target units (~ one std)
    pcgrad: bool = True  # PCGrad on the shared parameters when there are >= 2 targets (SeerNet-Multi)
    grad_clip: float | None = None  # clip the gradient's global norm to this (None: no clipping, as the paper)
    seed: int = 0  # seeds torch's RNG (dropout), the data order and PCGrad's projection order
    device: str = "cpu"  # "cpu", "cuda", "cuda:N" or "auto" (CUDA when available)
    feature_mask: tuple[str, ...] = ()  # feature groups to zero (ablations): node_hp, node_cost, edge, global
    eval_batch_size: int = 64  # graphs per forward pass when evaluating (speed and memory only; 64 is ~2x faster on CPU than 1024)
    # torch intra-op CPU threads while training (None: leave torch's setting).  Batches of small
    # graphs gain little from threads, and OpenMP threads on a busy machine can slow them 10x.
    num_threads: int | None = None
    progress: bool = True  # show a rich progress bar (on stderr)
    time_limit_s: float | None = None  # stop after the first epoch that ends past this many seconds
    checkpoint_dir: str | None = None  # where to write the resumable checkpoint each epoch (None: none)
    resume: bool = False  # continue from checkpoint_dir's checkpoint if there is one

    def __post_init__(self) -> None:
        self.feature_mask = tuple(self.feature_mask)
        for name in ("batch_size", "max_epochs", "eval_batch_size"):
            if name == "batch_size" and self.batch_size is None:
                continue
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise PerfseerError(f"TrainConfig.{name} must be an integer >= 1, got {getattr(self, name)!r}",
                                    f"set {name} to a positive integer")
        for name in ("lr", "lr_factor", "min_lr", "huber_delta"):
            if not getattr(self, name) > 0:
                raise PerfseerError(f"TrainConfig.{name} must be > 0, got {getattr(self, name)!r}", f"set {name} > 0")
        if not self.lr_factor < 1:
            raise PerfseerError(f"TrainConfig.lr_factor must be < 1, got {self.lr_factor!r}", "use e.g. 0.5")
        if self.lr_patience < 0 or (self.early_stopping_patience is not None and self.early_stopping_patience < 1):
            raise PerfseerError("TrainConfig patiences must be >= 0 (lr) and >= 1 (early stopping)",
                                "set lr_patience >= 0 and early_stopping_patience >= 1 or None")
        if self.num_threads is not None and (not isinstance(self.num_threads, int) or self.num_threads < 1):
            raise PerfseerError(f"TrainConfig.num_threads must be an integer >= 1 or None, got {self.num_threads!r}",
                                "set num_threads to e.g. 1")
        if self.loss is not None and self.loss not in LOSSES:
            raise PerfseerError(f"TrainConfig.loss is {self.loss!r}", f"use one of {', '.join(LOSSES)} or None")
        if self.resume and not self.checkpoint_dir:
            raise PerfseerError("TrainConfig.resume needs a checkpoint_dir", "set checkpoint_dir")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["feature_mask"] = list(self.feature_mask)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise PerfseerError(f"TrainConfig has no field(s) {', '.join(unknown)}", f"use only: {', '.join(sorted(names))}")
        return cls(**d)


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        predictor: the trained :class:`NeuralPredictor` (best validation weights).
        metrics: ``{split: {target: evaluate() dict}}`` in the targets' units, for ``train``,
            ``val`` and (when given) ``test``.
        epochs_run: epochs completed in total (including those before a resumption).
        best_epoch: the epoch (1-based) whose weights were kept; ``best_val_loss`` its val loss.
        stopped: why training ended: ``max_epochs``, ``early_stopping`` or ``time_limit``.
        wall_time_s: seconds this call took (not counting a resumed run's earlier time).
        history: one dict per epoch: ``epoch``, ``train_loss``, ``val_loss``, ``lr``, ``seconds``;
            with PCGrad also ``conflict_share`` (the share of task pairs, over the epoch's steps,
            whose shared gradients had a negative cosine) and ``mean_cos`` (their mean cosine).
    """

    predictor: NeuralPredictor
    metrics: dict
    epochs_run: int
    best_epoch: int
    best_val_loss: float
    stopped: str
    wall_time_s: float
    history: list[dict] = field(default_factory=list)
    config: TrainConfig | None = None

    @property
    def model(self) -> nn.Module:
        return self.predictor.model

    def predict(self, graphs: Sequence) -> np.ndarray:
        return self.predictor.predict(graphs)


# -- helpers ----------------------------------------------------------------------------------------


def _loss_name(cfg: TrainConfig, model: nn.Module) -> str:
    if cfg.loss is not None:
        return cfg.loss
    name = getattr(getattr(model, "config", None), "loss", "mse") or "mse"
    if name not in LOSSES:
        raise PerfseerError(f"the model config asks for loss {name!r}", f"set TrainConfig.loss to one of {', '.join(LOSSES)}")
    return name


def _task_losses(pred: torch.Tensor, y: torch.Tensor, loss: str, delta: float) -> list[torch.Tensor]:
    if pred.shape != y.shape:
        raise PerfseerError(f"the model predicts {pred.shape[1]} target(s) but the data has {y.shape[1]}",
                            "build the model with num_targets equal to the number of targets")
    if loss == "mse":
        per = (pred - y) ** 2
    elif loss == "l1":
        per = (pred - y).abs()
    else:
        per = nn.functional.huber_loss(pred, y, reduction="none", delta=delta)
    return list(per.mean(0).unbind())


def auto_batch_size(num_train: int, steps: int = 32, low: int = 16, high: int = 128) -> int:
    """The power of two nearest ``num_train / steps``, clipped to ``[low, high]``: about ``steps``
    optimizer steps per epoch (up to 724 graphs: 16; 1,000: 32; 2,900 and more: 128)."""
    if num_train < 1:
        return low
    return int(min(high, max(low, 2 ** round(math.log2(num_train / steps)))))


def _batches(n: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    perm = torch.randperm(n, generator=generator)
    chunks = list(perm.split(batch_size))
    if len(chunks) > 1 and len(chunks[-1]) == 1:  # a 1-graph batch breaks batch-norm layers
        chunks[-2] = torch.cat([chunks[-2], chunks[-1]])
        chunks.pop()
    return chunks


def _epoch_generator(seed: int, epoch: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# -- checkpoints ------------------------------------------------------------------------------------

def _save_checkpoint(folder: Path, epoch: int, model: nn.Module, best_state: dict, optimizer, scheduler,
                     meta: dict) -> None:
    """Weights, best weights, optimizer tensors and RNG state in ``ckpt-<epoch>.safetensors``; the
    rest in ``trainer_state.json``, written last: a checkpoint exists once its JSON names it."""
    from safetensors.torch import save as st_save  # deferred: heavy, loaded on first use

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    tensors.update({f"best.{k}": v.detach().cpu().contiguous() for k, v in best_state.items()})
    opt = optimizer.state_dict()
    opt_scalars: dict[str, dict] = {}
    for pid, st in opt["state"].items():
        for name, value in st.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{pid}.{name}"] = value.detach().cpu().contiguous()
            else:
                opt_scalars.setdefault(str(pid), {})[name] = value
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    name = f"ckpt-{epoch}.safetensors"
    _atomic_write(folder / name, st_save(tensors))
    state = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "epoch": epoch, "tensors": name,
             "optimizer_param_groups": opt["param_groups"], "optimizer_scalars": opt_scalars,
             "optimizer_state_ids": [int(k) for k in opt["state"]],
             "scheduler": scheduler.state_dict(), **meta}
    _atomic_write(folder / STATE_FILE, json.dumps(state, indent=1).encode())
    for old in folder.glob("ckpt-*.safetensors"):
        if old.name != name:
            old.unlink(missing_ok=True)


def load_checkpoint(folder: str | os.PathLike) -> tuple[dict, dict[str, torch.Tensor]] | None:
    """``(state, tensors)`` of the checkpoint in ``folder``, or ``None`` if there is none."""
    from safetensors.torch import load_file  # deferred: heavy, loaded on first use

    folder = Path(folder)
    path = folder / STATE_FILE
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text())
    except ValueError as e:
        raise PerfseerError(f"{path} is not valid JSON ({e})", "delete the checkpoint folder and train again") from e
    if state.get("format") != CHECKPOINT_FORMAT or state.get("version") != CHECKPOINT_VERSION:
        raise PerfseerError(f"{path} is not a perfseer training checkpoint (version {CHECKPOINT_VERSION})",
                            "point checkpoint_dir at a folder written by perfseer's trainer")
    return state, load_file(str(folder / state["tensors"]))


def _restore(state: dict, tensors: dict, model: nn.Module, optimizer, scheduler) -> dict:
    def strip(prefix):
        return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}

    try:
        model.load_state_dict(strip("model."))
    except RuntimeError as e:
        raise PerfseerError("the checkpoint's weights do not fit this model",
                            "resume with the same model config, or use a new checkpoint_dir") from e
    best = strip("best.")
    opt_state = {}
    for pid in state["optimizer_state_ids"]:
        entry = {k.split(".", 2)[2]: v for k, v in tensors.items() if k.startswith(f"optim.{pid}.")}
        entry.update(state["optimizer_scalars"].get(str(pid), {}))
        opt_state[pid] = entry
    optimizer.load_state_dict({"state": opt_state, "param_groups": state["optimizer_param_groups"]})
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    return best


# -- training ---------------------------------------------------------------------------------------

def _progress(enabled: bool):
    return Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[info]}"), disable=not enabled, transient=False)


def train(model: nn.Module, train_set: Sequence, val_set: Sequence, config: TrainConfig | None = None, *,
          targets: Sequence[str] | None = None, test_set: Sequence | None = None,
          feature_scaler: FeatureScaler | None = None, target_scaler: TargetScaler | None = None) -> TrainResult:
    """Train ``model`` on ``train_set``, selecting the epoch on ``val_set``.

    Args:
        model: an ``nn.Module`` whose ``forward(batch)`` returns ``[G, T]``; build (and seed) it
            before calling, e.g. ``torch.manual_seed(0); build_model("seernet", num_targets=T)``.
        train_set, val_set: lists of PyG ``Data`` with raw features and ``y`` ``[1, T]`` targets in
            their units (:func:`perfseer.fit.data.select`).
        config: a :class:`TrainConfig` (default: the paper's recipe).
        targets: the target names (default ``target0, ...``), for metrics and the target scaling.
        test_set: evaluated at the end if given (never used for any choice).
        feature_scaler, target_scaler: fitted scalers to use instead of fitting on ``train_set``.

    Returns:
        A :class:`TrainResult` with the best-on-validation weights loaded into ``model``.

    Checkpoint (``config.checkpoint_dir``): after each epoch, ``ckpt-<epoch>.safetensors`` (weights,
    best weights, Adam's moments, RNG state) then ``trainer_state.json`` (epoch, scheduler, history,
    best epoch, configs, scalers) are written atomically; the JSON is written last and names the
    tensors file, so a crash leaves the previous checkpoint usable.  With ``resume=True`` training
    continues after the checkpoint's epoch and reaches the weights an uninterrupted run would
    (same seed, config and data).

    Raises:
        PerfseerError: empty splits, missing or mismatched targets, a bad config, an unavailable
            device, or a checkpoint that does not fit.
    """

    cfg = config or TrainConfig()
    if cfg.num_threads is None:
        return _train(model, train_set, val_set, cfg, targets, test_set, feature_scaler, target_scaler)
    before = torch.get_num_threads()
    torch.set_num_threads(cfg.num_threads)
    try:
        return _train(model, train_set, val_set, cfg, targets, test_set, feature_scaler, target_scaler)
    finally:
        torch.set_num_threads(before)


def _train(model, train_set, val_set, cfg, targets, test_set, feature_scaler, target_scaler) -> TrainResult:
    from torch_geometric.data import Batch  # deferred: heavy, loaded on first use

    start = time.perf_counter()
    if len(train_set) == 0 or len(val_set) == 0:
        raise PerfseerError(f"training needs non-empty train and val sets, got {len(train_set)} and {len(val_set)}",
                            "check the selection (devices, phase, metric) and the split column")
    for name, dataset in (("train", train_set), ("val", val_set), ("test", test_set or [])):
        if any(getattr(g, "y", None) is None for g in dataset):
            raise PerfseerError(f"some {name} graphs have no y", "build the examples with perfseer.fit.data.select")
    y_train = torch.cat([g.y.reshape(1, -1) for g in train_set]).double().numpy()
    num_targets = y_train.shape[1]
    targets = list(targets) if targets is not None else (
        target_scaler.targets if target_scaler is not None else [f"target{i}" for i in range(num_targets)])
    if len(targets) != num_targets:
        raise PerfseerError(f"{len(targets)} target names for {num_targets} target columns", "pass one name per column of y")
    device = resolve_device(cfg.device)
    loss_name = _loss_name(cfg, model)

    folder = Path(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
    loaded = load_checkpoint(folder) if cfg.resume and folder is not None else None
    if loaded is not None:
        _check_resumable(loaded[0], folder, cfg, targets, [len(train_set), len(val_set)])
        state, tensors = loaded
        # the scalers the checkpointed run fitted (identical unless the data changed)
        fs = feature_scaler or FeatureScaler.from_dict(state["feature_scaler"])
        ts = target_scaler or TargetScaler.from_dict(state["target_scaler"])
    else:
        fs = feature_scaler or FeatureScaler(mask=cfg.feature_mask).fit(train_set)
        ts = target_scaler or TargetScaler(targets).fit(y_train)

    def prepare(dataset) -> list:
        y = torch.cat([g.y.reshape(1, -1) for g in dataset]).double().numpy()
        z = torch.from_numpy(ts.transform(y)).float()
        return [_model_input(fs.transform(g), z[i:i + 1]) for i, g in enumerate(dataset)]

    train_data, val_data = prepare(train_set), prepare(val_set)
    batch_size = cfg.batch_size or auto_batch_size(len(train_data))

    torch.manual_seed(cfg.seed)
    hook = getattr(model, "set_target_scaling", None)
    if callable(hook) and loaded is None:  # a model that composes costs in the target's unit (SeerNet-Sum)
        hook(ts.mean_, ts.std_)
    fit_baseline = getattr(model, "fit_baseline", None)
    if callable(fit_baseline) and loaded is None:  # a physics offset fitted on the raw training graphs (PMGNS)
        fit_baseline(train_set, y_train, fs)
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=cfg.lr_factor,
                                                           patience=cfg.lr_patience, min_lr=cfg.min_lr)
    shared = list(model.shared_parameters()) if hasattr(model, "shared_parameters") else None
    params = [p for p in model.parameters() if p.requires_grad]
    use_pcgrad = cfg.pcgrad and num_targets > 1

    epoch, best_epoch, best_val = 0, 0, math.inf
    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    history: list[dict] = []
    if loaded is not None:
        best = _restore(state, tensors, model, optimizer, scheduler)
        best_state = {k: v.to(device) for k, v in best.items()}
        epoch, best_epoch, best_val = state["epoch"], state["best_epoch"], state["best_val_loss"]
        history = state["history"]

    def evaluate_loss(data) -> float:
        model.eval()
        total, n = 0.0, 0
        with torch.no_grad():
            for i in range(0, len(data), cfg.eval_batch_size):
                chunk = data[i:i + cfg.eval_batch_size]
                b = Batch.from_data_list(chunk).to(device)
                losses = _task_losses(_as_2d(model(b), len(chunk)), b.y, loss_name, cfg.huber_delta)
                total += float(torch.stack(losses).mean()) * len(chunk)
                n += len(chunk)
        model.train()
        return total / n

    stopped = "max_epochs"
    if cfg.early_stopping_patience is not None and epoch - best_epoch >= cfg.early_stopping_patience and epoch:
        stopped = "early_stopping"
    model.train()
    with _progress(cfg.progress) as bar:
        task = bar.add_task("train", total=cfg.max_epochs, completed=epoch, info="")
        while epoch < cfg.max_epochs and stopped == "max_epochs":
            t0 = time.perf_counter()
            gen = _epoch_generator(cfg.seed, epoch)
            rng = random.Random(int(cfg.seed) * 1_000_003 + epoch)
            total, n = 0.0, 0
            pairs = conflicting = 0
            cos_sum = 0.0
            for idx in _batches(len(train_data), batch_size, gen):
                b = Batch.from_data_list([train_data[i] for i in idx.tolist()]).to(device)
                pred = _as_2d(model(b), len(idx))
                losses = _task_losses(pred, b.y, loss_name, cfg.huber_delta)
                optimizer.zero_grad(set_to_none=True)
                if use_pcgrad:
                    st = pcgrad_backward(losses, shared, params, rng=rng)
                    pairs, conflicting = pairs + st.pairs, conflicting + st.conflicting
                    cos_sum += st.mean_cos * st.pairs if st.pairs else 0.0
                    loss = torch.stack(losses).mean()
                else:
                    loss = torch.stack(losses).mean()
                    loss.backward()
                if cfg.grad_clip is not None:
                    nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                optimizer.step()
                total += float(loss.detach()) * len(idx)
                n += len(idx)
            if not math.isfinite(total):
                raise PerfseerError(f"the training loss became {total} in epoch {epoch + 1}",
                                    "lower the learning rate, or set grad_clip")
            val_loss = evaluate_loss(val_data)
            scheduler.step(val_loss)
            epoch += 1
            lr = optimizer.param_groups[0]["lr"]
            if val_loss < best_val:
                best_val, best_epoch = val_loss, epoch
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            history.append({"epoch": epoch, "train_loss": total / n, "val_loss": val_loss, "lr": lr,
                            "seconds": round(time.perf_counter() - t0, 4)})
            if pairs:  # PCGrad: share of task pairs whose gradients conflicted, and their mean cosine
                history[-1].update(conflict_share=round(conflicting / pairs, 4), mean_cos=round(cos_sum / pairs, 4))
            if cfg.early_stopping_patience is not None and epoch - best_epoch >= cfg.early_stopping_patience:
                stopped = "early_stopping"
            elif cfg.time_limit_s is not None and time.perf_counter() - start >= cfg.time_limit_s:
                stopped = "time_limit"
            if folder is not None:
                _save_checkpoint(folder, epoch, model, best_state, optimizer, scheduler, {
                    "best_epoch": best_epoch, "best_val_loss": best_val, "history": history, "targets": targets,
                    "sizes": [len(train_set), len(val_set)],
                    "train_config": cfg.to_dict(), "loss": loss_name,
                    "model_config": _model_config(model),
                    "feature_scaler": fs.to_dict(), "target_scaler": ts.to_dict()})
            bar.update(task, completed=epoch,
                       info=f"loss {total / n:.4f}  val {val_loss:.4f}  best {best_val:.4f}@{best_epoch}  lr {lr:.1e}")

    model.load_state_dict(best_state)
    model.eval()
    predictor = NeuralPredictor(model, fs, ts, batch_size=cfg.eval_batch_size, device=device)
    metrics = {}
    for name, dataset in (("train", train_set), ("val", val_set), ("test", test_set)):
        if dataset:
            y = torch.cat([g.y.reshape(1, -1) for g in dataset]).double().numpy()
            metrics[name] = evaluate_targets(y, predictor.predict(dataset), targets)
    used = dataclasses.replace(cfg, batch_size=batch_size)  # the config as run (batch size resolved)
    return TrainResult(predictor, metrics, epoch, best_epoch, best_val, stopped,
                       time.perf_counter() - start, history, used)


def _check_resumable(state: dict, folder: Path, cfg: TrainConfig, targets: list[str], sizes: list[int]) -> None:
    before = {k: v for k, v in state["train_config"].items() if k not in _RESUME_FREE}
    now = {k: v for k, v in cfg.to_dict().items() if k not in _RESUME_FREE}
    if before != now:
        diff = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
        raise PerfseerError(f"the checkpoint in {folder} was trained with other settings ({', '.join(diff)})",
                            "resume with the same TrainConfig (max_epochs and time_limit_s may change), "
                            "or use a new checkpoint_dir")
    if state.get("targets") != targets:
        raise PerfseerError(f"the checkpoint in {folder} was trained on {state.get('targets')}, not {targets}",
                            "use a new checkpoint_dir")
    if state.get("sizes", sizes) != sizes:
        raise PerfseerError(f"the checkpoint in {folder} was trained on {state['sizes'][0]} train and "
                            f"{state['sizes'][1]} val examples, not {sizes[0]} and {sizes[1]}",
                            "resume with the same data, or use a new checkpoint_dir")


def _model_config(model: nn.Module) -> dict | None:
    cfg = getattr(model, "config", None)
    to_dict = getattr(cfg, "to_dict", None)
    try:
        return to_dict() if callable(to_dict) else None
    except Exception:  # noqa: BLE001 - the card is informative; training must not fail on it
        return None


@dataclass
class FittedMethod:
    """A trained method of either kind.

    Attributes:
        name: the method name.
        targets: target names, the columns of :meth:`predict`.
        estimator: the fitted baseline (``GraphEstimator``) or the trained ``NeuralPredictor``.
        fit_time_s: seconds spent fitting (training included).
        train_result: the neural :class:`~perfseer.fit.trainer.TrainResult` (``None`` for baselines).
        config: the model or baseline config dict used.
    """

    name: str
    targets: list[str]
    estimator: object
    fit_time_s: float
    train_result: TrainResult | None = None
    config: dict = field(default_factory=dict)

    @property
    def neural(self) -> bool:
        return self.train_result is not None

    def predict(self, graphs: Sequence) -> np.ndarray:
        """``[N, T]`` predictions in the targets' units."""
        out = np.asarray(self.estimator.predict(graphs), dtype=np.float64)
        return out.reshape(len(graphs), len(self.targets))
