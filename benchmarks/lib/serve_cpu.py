"""CPU time of one ``POST /v1/predict`` inside the service process, without the network.

    OMP_NUM_THREADS=1 nice -n 10 python -m benchmarks.lib.serve_cpu --requests 200 --json benchmarks/results/serve_cpu.json

Builds the app (:func:`perfseer.serve.app.create_app`, one predictor, one torch thread) and calls it
through FastAPI's ``TestClient`` (routing, validation and JSON included, no sockets).  The bundled
example graphs are extracted in a warm-up, so every timed request finds its graph in the graph
cache, as in the *cached* phase of ``benchmarks/lib/serve_load.py`` (the same request mix: a random
example graph at a random batch size of 1, 8, 32 or 128, one predictor).  Reported per request:
process CPU time (``time.process_time``: the server's own work; the extraction children are not
involved) and wall time, the median and mean of ``--requests``, in three settings:

* **row cache off** (``row_cache_size=0``): every request re-binds the batch, builds the features,
  runs the network and the trust checks — the service before the row cache;
* **row-cache misses**: the row cache on, every request at a batch size not asked before (what a
  request costs the first time);
* **row-cache hits**: the request mix above after one pass over its 16 keys; and the same calls
  to ``Service.predict`` directly (the service's own work, without HTTP, validation and JSON).

``--multi`` adds a request of 4 batch sizes on every bundled predictor (several predictors, one
feature build per batch size), with the row cache off, to show the batched path.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

from benchmarks.lib import _training_bench as tb  # noqa: E402

EXAMPLES = ("example:resnet18", "example:resnet50", "example:mobilenet_v3_small", "example:vit_b_16")
BATCHES = (1, 8, 32, 128)


def timed(client, payloads) -> dict:
    cpu, wall = [], []
    for p in payloads:
        c0, w0 = time.process_time(), time.perf_counter()
        r = client.post("/v1/predict", json=p)
        cpu.append((time.process_time() - c0) * 1e3)
        wall.append((time.perf_counter() - w0) * 1e3)
        if r.status_code != 200:
            raise SystemExit(f"{p}: {r.status_code} {r.text[:500]}")
    return {"requests": len(cpu), "cpu_ms_median": round(statistics.median(cpu), 2),
            "cpu_ms_mean": round(statistics.fmean(cpu), 2), "wall_ms_median": round(statistics.median(wall), 2),
            "wall_ms_mean": round(statistics.fmean(wall), 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=200, help="timed requests per setting")
    ap.add_argument("--predictor", default="rtx3090-amp-nchw-pt240.infer")
    ap.add_argument("--multi", action="store_true", help="also 4 batch sizes on every bundled predictor")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from fastapi.testclient import TestClient

    from perfseer.serve.app import ServeConfig, create_app

    load = round(os.getloadavg()[0], 2)  # other processes' load inflates even CPU time (shared caches, SMT)
    rng = random.Random(args.seed)
    mix = [{"model": rng.choice(EXAMPLES), "batch": [rng.choice(BATCHES)], "predictors": [args.predictor]}
           for _ in range(args.requests)]
    # batch sizes never asked before: every request misses the row cache (the graph cache still hits)
    fresh = [{"model": rng.choice(EXAMPLES), "batch": [1000 + i], "predictors": [args.predictor]}
             for i in range(args.requests)]
    results = {}
    has_rows = "row_cache_size" in ServeConfig.__dataclass_fields__  # False: a service from before the row cache
    settings = (("row cache off", 0), ("row-cache misses", 4096), ("row-cache hits", 4096))
    for setting, row_cache in settings if has_rows else settings[:1]:
        app = create_app(ServeConfig(jobs=1, torch_threads=1, **({"row_cache_size": row_cache} if has_rows else {})))
        with TestClient(app) as client:
            for m in EXAMPLES:  # the fork server, the predictor, the graphs
                client.post("/v1/predict", json={"model": m, "batch": [1], "predictors": [args.predictor]})
            if setting == "row-cache hits":
                for m in EXAMPLES:
                    for b in BATCHES:
                        client.post("/v1/predict", json={"model": m, "batch": [b], "predictors": [args.predictor]})
            results[setting] = timed(client, fresh if setting == "row-cache misses" else mix)
            if setting == "row-cache hits":  # the service's own work, without HTTP, validation and JSON
                from perfseer.serve.app import PredictRequest

                svc, reqs = app.state.service, [PredictRequest(**p) for p in mix]
                c0 = time.process_time()
                for r in reqs:
                    svc.predict(r)
                results["row-cache hits, Service.predict alone"] = {
                    "requests": len(reqs), "cpu_ms_mean": round((time.process_time() - c0) * 1e3 / len(reqs), 4)}
            if args.multi and setting == "row cache off":
                from perfseer.runtime.predictor import list_predictors

                names = [p["name"] for p in list_predictors()]
                multi = [{"model": m, "batch": [1, 8, 32, 128], "predictors": names} for m in EXAMPLES] * 3
                results["4 batches x all predictors, row cache off"] = dict(timed(client, multi),
                                                                           predictors=len(names))

    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"POST /v1/predict in-process (TestClient), {args.requests} requests per setting, 1 torch thread",
              title_justify="left")
    for c in ("setting", "requests", "CPU ms median", "CPU ms mean", "wall ms median"):
        t.add_column(c, justify="left" if c == "setting" else "right")
    for k, r in results.items():
        t.add_row(k, str(r["requests"]), f"{r['cpu_ms_median']:.2f}" if "cpu_ms_median" in r else "",
                  f"{r['cpu_ms_mean']:.3f}", f"{r['wall_ms_median']:.2f}" if "wall_ms_median" in r else "")
    Console().print(t)
    tb.write_json(args.json, {"predictor": args.predictor, "requests": args.requests, "cpus": os.cpu_count(),
                              "load_average_1min_at_start": load, "settings": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
