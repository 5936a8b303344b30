"""Every device at every batch size: what ``perfseer.predict`` answers for a zoo model on each device
of ``perfseer devices``, in both phases, at batch 1, 2, 4, ..., 1024, and whether the answers are
consistent across batch sizes.

    python -m benchmarks.lib.batch_sweep timm:resnet50 torchvision:vgg16 hf:gpt2 [--devices a100-40gb,rtx3090]

For each (model, device, phase) one call, as a user would make it (``perfseer.predict(model,
device=D, batch=[1..1024], phase=P)``; the graph is extracted once per model and extraction
setting and handed in), and the rows it returns are counted:

* **answered**: a row with a value; **fell back**: answered by a basis after the first passed
  over it (``fallback_from``); **refused**: a row without a value (its ``reason`` kept), or the
  whole call refused with a :class:`~perfseer.errors.PerfseerError` (counted once per batch size);
* **violations**: along the batch sizes of one (model, device, phase), the latency a user reads
  (the valued row of each batch size) must not decrease: ``latency(2b) >= latency(b)``, which is
  the same as throughput growing at most in proportion to the batch (``tput(2b) <= 2 tput(b)``).
  A decrease of more than :data:`TOLERANCE` (relative) is a violation; each is listed with the
  bases that answered the two batch sizes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

BATCHES = [2**i for i in range(11)]  # 1 .. 1024
PHASES = ("infer", "train")
TOLERANCE = 1e-6  # relative: rounding in the answer, not a real decrease


def devices() -> list[str]:
    """Every device of ``perfseer devices`` (the registry), by name."""
    from perfseer.devices import list_devices

    return [d.name for d in list_devices()]


def _graphs(model: str):
    """The model's PerfGraph per extraction setting, extracted on first use."""
    from perfseer.runtime.route import cached_extract

    cache: dict = {}

    def get(weight_work):
        if weight_work not in cache:
            cache[weight_work] = cached_extract(model, batch=1, weight_work=weight_work)
        return cache[weight_work]

    return get


def sweep_model(model: str, device_names: list[str] | None = None, batches: list[int] | None = None,
                phases=PHASES, log=None) -> dict:
    """The counts and the violations of one model over ``device_names`` (default: all) and
    ``phases`` at ``batches`` (default 1..1024); ``log(text)`` hears of each device done."""
    import perfseer
    from perfseer.errors import PerfseerError
    from perfseer.graph.extract import weight_work_enabled
    from perfseer.runtime import route

    batches = batches or BATCHES
    device_names = device_names or devices()
    graph = _graphs(model)
    out = {"model": model, "calls": 0, "rows": 0, "answered": 0, "fell_back": 0, "refused": 0,
           "refused_calls": 0, "violations": [], "refusal_reasons": {}, "fallback_reasons": {}, "bases": {},
           "seconds": 0.0}
    t0 = time.perf_counter()
    try:
        graph(None)
    except PerfseerError as e:
        out["extract_error"] = str(e)[:300]
        out["seconds"] = time.perf_counter() - t0
        return out
    for device in device_names:
        for phase in phases:
            out["calls"] += 1
            try:
                units, _ = route.plan([device], phase=phase)
                k = route.extraction(units[0])
                pg = graph(weight_work_enabled() if k is None else k)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    rows = perfseer.predict(pg, device=device, batch=batches, phase=phase)
            except PerfseerError as e:
                out["refused_calls"] += 1
                out["refused"] += len(batches)
                _count(out["refusal_reasons"], _kind(str(e)))
                continue
            _tally(out, rows, model, device, phase)
        if log is not None:
            log(f"{model}: {device} done ({time.perf_counter() - t0:.0f} s)")
    out["seconds"] = time.perf_counter() - t0
    return out


def _kind(reason: str) -> str:
    """A reason without its numbers and names, so that reasons of one kind count together."""
    import re

    text = re.sub(r"[0-9][0-9.,e+-]*", "N", reason.split("; fix:")[0])
    return text[:160]


def _count(d: dict, key: str) -> None:
    d[key] = d.get(key, 0) + 1


def _tally(out: dict, rows: list[dict], model: str, device: str, phase: str) -> None:
    latency = [r for r in rows if r.get("metric") == "latency_ms"]
    out["rows"] += len(latency)
    shown: dict[int, dict] = {}
    for r in latency:
        if r.get("value") is None:
            out["refused"] += 1
            _count(out["refusal_reasons"], _kind(str(r.get("reason"))))
            continue
        out["answered"] += 1
        basis = str(r.get("basis") or "?").split(" (")[0]
        _count(out["bases"], basis)
        if r.get("fallback_from"):
            out["fell_back"] += 1
            _count(out["fallback_reasons"], _kind(str(r["fallback_from"].get("reason"))))
        shown.setdefault(int(r["batch_size"]), r)
    bs = sorted(shown)
    for a, b in zip(bs, bs[1:]):
        va, vb = shown[a]["value"], shown[b]["value"]
        if vb < va * (1 - TOLERANCE):
            out["violations"].append({"device": device, "phase": phase, "batch": [a, b], "latency_ms": [va, vb],
                                      "basis": [str(shown[a].get("basis")), str(shown[b].get("basis"))]})


def summarise(results: list[dict]) -> dict:
    """Totals over models."""
    keys = ("calls", "rows", "answered", "fell_back", "refused", "refused_calls")
    tot = {k: sum(r.get(k, 0) for r in results) for k in keys}
    tot["models"] = len(results)
    tot["extract_errors"] = sum(1 for r in results if r.get("extract_error"))
    tot["violations"] = sum(len(r.get("violations", [])) for r in results)
    for name in ("refusal_reasons", "fallback_reasons", "bases"):
        merged: dict = {}
        for r in results:
            for k, v in r.get(name, {}).items():
                merged[k] = merged.get(k, 0) + v
        tot[name] = dict(sorted(merged.items(), key=lambda kv: -kv[1]))
    return tot


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", metavar="MODEL")
    ap.add_argument("--devices", default=None, help="comma-separated (default: every device of perfseer devices)")
    ap.add_argument("--json", default=None, metavar="OUT")
    args = ap.parse_args(argv)
    devs = args.devices.split(",") if args.devices else None
    results = []
    for m in args.models:
        r = sweep_model(m, devs, log=lambda t: print(t, file=sys.stderr, flush=True))
        results.append(r)
        print(f"{m}: {r['answered']} answered, {r['fell_back']} fell back, {r['refused']} refused, "
              f"{len(r['violations'])} violations ({r['seconds']:.0f} s)", flush=True)
        for v in r["violations"][:10]:
            print(f"  {v}")
    print(json.dumps({k: v for k, v in summarise(results).items() if not isinstance(v, dict)}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
