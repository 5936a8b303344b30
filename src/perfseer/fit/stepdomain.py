"""Give a measured training card its step domain (:mod:`perfseer.trust.step`) from its own rows.

The memory estimate behind the step domain (``fixed + per_param x params + per_act x activation
bytes``) is fitted to perfseer's memory simulator (:mod:`perfseer.memory`) at the card's precision
and the benchmark's optimizer: for a hashed sample of the card's models the simulator's total
(reserved + CUDA context) at batch 8 and 32 gives each model's bytes per sample and fixed bytes;
``per_act`` is the median ratio of the simulator's bytes per sample to the graph's activation
bytes per sample, and ``fixed``, ``per_param`` a least-squares line of the fixed bytes on the
parameter count.  A 2-fold check (every other model of the sample) scores the largest batch the estimate gives against
the simulator's on the half it was not fitted on.  Then the ratio ``batch / min(top, largest batch
that fits)`` of every fitted and validation row gives the range (:func:`perfseer.trust.step.build_step`).

    python scripts/calibrate_predictors.py --step-domain src/perfseer/predictors/rtx3090-amp-nchw-pt112.train.json

Simulations are cached (``.cache/step-domain/CARD.sim.json``), so a second run reads them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from perfseer.errors import PerfseerError
from perfseer.fit.intervals import selection_for
from perfseer.trust import step as st

SIM_BATCHES = (8, 32)  # the two batch sizes the simulator runs each sampled model at
SAMPLE = 32  # models simulated (a hash of the model name chooses them)


def _hash(s: str) -> str:
    return hashlib.sha1(s.encode()).hexdigest()


def simulate_sample(card: dict, sel, n: int, optimizer: str, cache: Path, log=print) -> list[dict]:
    """``[{model, input_shape, fixed, per_sample}]`` from the simulator (bytes), for ``n`` of the
    card's models (hash order), cached in ``cache``."""
    from perfseer.devices import get_device
    from perfseer.memory.api import memory
    from perfseer.runtime.predictor import setting_precision

    dev = card["targets"][0]["device"]
    device = get_device(dev.split("/")[0]).name
    precision = setting_precision(dev) or "fp32"
    lab = sel.labels
    pairs = sorted({(str(lab.iloc[int(g.row)]["model"]), str(lab.iloc[int(g.row)]["input_shape"]))
                    for g in list(sel.train) + list(sel.val)}, key=lambda p: _hash(p[0]))
    done = json.loads(cache.read_text()) if cache.is_file() else {}
    out = []
    for model, shape in pairs:
        if len(out) >= n:
            break
        key = f"{model}|{shape}|{optimizer}|{precision}|{device}"
        if key not in done:
            try:
                t = [memory(model, batch=b, phase="train", optimizer=optimizer, precision=precision, device=device,
                            input_shape=tuple(int(x) for x in shape.split("x"))).total for b in SIM_BATCHES]
                done[key] = {"totals": [float(x) for x in t]}
            except Exception as e:  # noqa: BLE001 - a model the simulator cannot run is left out, with why
                done[key] = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(done, indent=1))
            log(f"  {len(out) + 1}/{n} {model}: {done[key]}")
        if "totals" in done[key]:
            t1, t2 = done[key]["totals"]
            per = (t2 - t1) / (SIM_BATCHES[1] - SIM_BATCHES[0])
            out.append({"model": model, "input_shape": shape, "per_sample": per, "fixed": t1 - per * SIM_BATCHES[0]})
    return out


def fit_memory(sims: list[dict], graph_of: dict, capacity: float) -> dict:
    """The memory estimate's constants from simulated models (``graph_of``: (model, shape) -> PyG graph)."""
    a = np.array([st.memory_terms(graph_of[s["model"], s["input_shape"]])[2]
                  / st.memory_terms(graph_of[s["model"], s["input_shape"]])[0] for s in sims])
    p = np.array([st.memory_terms(graph_of[s["model"], s["input_shape"]])[1] for s in sims])
    per = np.array([s["per_sample"] for s in sims])
    fixed = np.array([s["fixed"] for s in sims])
    per_act = float(np.median(per / a))
    coef, *_ = np.linalg.lstsq(np.stack([np.ones_like(p), p], 1), fixed, rcond=None)
    return {"fixed": float(coef[0]), "per_param": float(max(coef[1], 0.0)), "per_act": per_act,
            "capacity": float(capacity)}


def holdout_error(sims: list[dict], graph_of: dict, capacity: float) -> dict:
    """2-fold over the sample (every other model): the median and 90th percentile |log2| of the estimate's largest batch
    against the simulator's, on the half each fit did not see."""
    errs = []
    for k in (0, 1):  # the sample is in hash order: every other model
        fit = [s for i, s in enumerate(sims) if i % 2 != k]
        held = [s for i, s in enumerate(sims) if i % 2 == k]
        if len(fit) < 3 or not held:
            continue
        mem = fit_memory(fit, graph_of, capacity)
        for s in held:
            sim = (capacity - s["fixed"]) / s["per_sample"]
            est = st.largest_batch(graph_of[s["model"], s["input_shape"]], mem)
            if sim > 0 and est > 0:
                errs.append(abs(np.log2(est / sim)))
    return {"models": len(errs), "median_abs_log2": float(np.median(errs)) if errs else None,
            "p90_abs_log2": float(np.quantile(errs, 0.9)) if errs else None}


def calibrate_step(card: dict, n: int = SAMPLE, optimizer: str = "sgd-momentum", cache_dir: Path = Path(".cache"),
                   log=print) -> dict:
    """Compute ``card["domain"]["step"]`` (returned; the caller writes the card)."""
    from perfseer.devices import get_device

    if card["targets"][0]["phase"] != "train":
        raise PerfseerError(f"{card.get('name')} is not a training card", "pass a measured training card")
    sel = selection_for(card)
    graphs = list(sel.train) + list(sel.val)
    lab = sel.labels
    rows = lab.iloc[[int(g.row) for g in graphs]]
    per_model = rows.groupby(["model", "input_shape"])["batch_size"].nunique()
    if per_model.max() > 1:  # labels taken at several batch sizes per model: the card has seen the batch vary
        raise PerfseerError(f"{card.get('name')} was measured at several batch sizes per model "
                            f"({int((per_model > 1).sum())} of {len(per_model)} models)",
                            "a step domain is for cards measured at one batch per model")
    graph_of = {(str(lab.iloc[int(g.row)]["model"]), str(lab.iloc[int(g.row)]["input_shape"])): g for g in graphs}
    dev = get_device(card["targets"][0]["device"].split("/")[0])
    capacity = float(dev.memory_gib) * 2**30
    sims = simulate_sample(card, sel, n, optimizer, cache_dir / "step-domain" / f"{card['name']}.sim.json", log)
    if len(sims) < 6:
        raise PerfseerError(f"only {len(sims)} models could be simulated", "check the simulator on the card's models")
    mem = fit_memory(sims, graph_of, capacity)
    mem["fit"] = {"simulator": f"perfseer.memory at batch {SIM_BATCHES[0]} and {SIM_BATCHES[1]}, {optimizer}, "
                               f"the card's precision, {dev.name} ({dev.memory_gib:g} GiB)",
                  "models": len(sims), "holdout": holdout_error(sims, graph_of, capacity)}
    top = int(lab["batch_size"].to_numpy()[[int(g.row) for g in graphs]].max())
    source = f"{len(graphs)} fitted and validation rows of {card['training'].get('dataset')}"
    return st.build_step(graphs, mem, top, source)
