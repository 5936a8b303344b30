"""Pre-training SeerNet's trunk as a graph auto-encoder (TraPPM) and fine-tuning from it.

:func:`pretrain` fits a :class:`~perfseer.models.gae.GraphAutoEncoder` on unlabelled graphs;
:func:`save_pretrained` writes it as a card like a predictor's (``NAME.safetensors`` with the
trunk's weights, ``NAME.json`` with the SeerNet config, the feature scaling, the graphs it saw and
its loss history; format ``perfseer.pretrained-encoder``, no pickle); :func:`init_from_pretrained`
puts the trunk into a SeerNet and returns the feature scaling to train it with (the trunk was
pre-trained on inputs scaled that way).

Example::

    gae, fs, history = pretrain(unlabelled_graphs, {"hidden_dim": 64}, PretrainConfig(time_limit_s=300))
    save_pretrained("preds/", "gae-timm", gae, fs, {"graphs": len(unlabelled_graphs)}, history)
    model = build_model("seernet", hidden_dim=64, head_hidden_dim=64)
    fs = init_from_pretrained(model, "preds/gae-timm.json")
    train(model, sel.train, sel.val, TrainConfig(), feature_scaler=fs)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from perfseer import __version__
from perfseer.cards import CardFormat, read_card, read_weights, weights_path
from perfseer.errors import PerfseerError
from perfseer.features import schema
from perfseer.models.gae import GraphAutoEncoder
from perfseer.models.seernet import SeerNetConfig
from perfseer.runtime.net import _model_input
from perfseer.runtime.scaling import FeatureScaler

FORMAT = "perfseer.pretrained-encoder"
VERSION = 1
PRETRAINED_CARD = CardFormat(FORMAT, VERSION, "pre-trained encoder", writer="save_pretrained",
                             remedy="pre-train it again (benchmarks/pretraining.py at tag research-2026-11)", schema=True)


@dataclass
class PretrainConfig:
    """How to pre-train.  Each default says where it comes from."""

    epochs: int = 50  # upper bound; the time limit usually ends it on a CPU
    batch_size: int = 32  # graphs per step (timm graphs have hundreds of nodes each)
    lr: float = 1e-3  # Adam, as the supervised recipe (PerfSeer §4.1)
    edge_weight: float = 1.0  # TraPPM's edge reconstruction
    node_weight: float = 1.0  # node-feature reconstruction
    global_weight: float = 1.0  # global-feature reconstruction
    time_limit_s: float | None = None  # stop after the epoch that ends past this
    seed: int = 0


def pretrain(graphs: Sequence, model_config: dict | None = None, config: PretrainConfig | None = None,
             progress=None):
    """Pre-train on raw (unscaled) PyG graphs; returns ``(gae, feature_scaler, history)``."""
    from torch_geometric.data import Batch  # deferred: heavy, loaded on first use

    cfg = config or PretrainConfig()
    if len(graphs) < 2:
        raise PerfseerError(f"pre-training needs graphs, got {len(graphs)}", "pass unlabelled PerfGraphs")
    fs = FeatureScaler().fit(graphs)
    data = [_model_input(fs.transform(g)) for g in graphs]
    torch.manual_seed(cfg.seed)
    gae = GraphAutoEncoder(SeerNetConfig(**(model_config or {})))
    opt = torch.optim.Adam(gae.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    history, start = [], time.perf_counter()
    gae.train()
    for epoch in range(cfg.epochs):
        perm = torch.randperm(len(data), generator=gen)
        sums = {"edge": 0.0, "node": 0.0, "global": 0.0}
        steps = 0
        for i in range(0, len(data), cfg.batch_size):
            b = Batch.from_data_list([data[j] for j in perm[i:i + cfg.batch_size].tolist()])
            parts = gae.losses(b, gen)
            loss = cfg.edge_weight * parts["edge"] + cfg.node_weight * parts["node"] + cfg.global_weight * parts["global"]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            for k in sums:
                sums[k] += float(parts[k].detach())
            steps += 1
        history.append({"epoch": epoch + 1, **{k: round(v / steps, 5) for k, v in sums.items()},
                        "seconds": round(time.perf_counter() - start, 1)})
        if progress is not None:
            progress(history[-1])
        if cfg.time_limit_s is not None and time.perf_counter() - start >= cfg.time_limit_s:
            break
    gae.eval()
    return gae, fs, history


def save_pretrained(directory, name: str, gae, feature_scaler, data: dict, history: list[dict],
                    config: PretrainConfig | None = None) -> Path:
    """Write ``NAME.safetensors`` (the trunk) and ``NAME.json`` (its card), each atomically."""

    from safetensors.torch import save_file  # deferred: heavy, loaded on first use

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = directory / f"{name}.safetensors"
    tmp = weights.with_name(weights.name + ".tmp")
    save_file({k: v.detach().cpu().contiguous() for k, v in gae.trunk.state_dict().items()}, str(tmp),
              metadata={"format": FORMAT, "name": name})
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # safetensors writes 0600; cards are shared files
    os.replace(tmp, weights)
    card = {"format": FORMAT, "format_version": VERSION, "name": name, "perfseer_version": __version__,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "schema_version": schema.SCHEMA_VERSION,
            "model": {"name": "seernet", "part": "trunk", "config": gae.config.to_dict(),
                      "parameters": int(sum(p.numel() for p in gae.trunk.parameters()))},
            "objective": "graph auto-encoder: edge BCE (TraPPM) + node-feature MSE + global-feature MSE",
            "scaling": {"features": feature_scaler.to_dict()}, "data": data,
            "pretrain_config": asdict(config) if config is not None else None, "history": history}
    path = directory / f"{name}.json"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(card, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def pretrained_config(card_path) -> dict:
    """The SeerNet trunk fields of a pre-trained card's config (``hidden_dim`` and the switches),
    without ``num_targets`` and the head's width."""
    card = _card(Path(card_path))
    return {k: v for k, v in card["model"]["config"].items() if k not in ("num_targets", "head_hidden_dim", "loss",
                                                                          "head_globals", "dropout")}


def _card(card_path: Path) -> dict:
    return read_card(card_path, PRETRAINED_CARD)


def init_from_pretrained(model, card_path) -> object:
    """Load a pre-trained trunk into ``model`` (a SeerNet or SeerNet-Multi of the same trunk
    shape); returns the :class:`~perfseer.runtime.scaling.FeatureScaler` to train it with.

    Raises:
        PerfseerError: not a pre-trained card, missing weights, or a trunk of another shape.
    """

    card_path = Path(card_path)
    card = _card(card_path)
    state = read_weights(weights_path(card_path), PRETRAINED_CARD)
    try:
        model.trunk.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise PerfseerError(f"the pre-trained trunk of {card_path} does not fit this model "
                            f"({str(e).splitlines()[0]})",
                            f"build the model with the card's config ({card['model']['config']})") from e
    return FeatureScaler.from_dict(card["scaling"]["features"])
