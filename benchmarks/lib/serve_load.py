"""Load test of ``perfseer serve``: concurrent clients against a local server (loopback only).

    python -m benchmarks.lib.serve_load --clients 50 --duration 60 --json benchmarks/results/serve_load.json

Starts ``perfseer serve`` on a free port of 127.0.0.1 in a child process, waits for it, then runs
two phases of ``--duration`` seconds each, ``--clients`` concurrent clients (asyncio + httpx), each
sending its next request as soon as the last answered:

* **cached**: ``POST /v1/predict`` of the bundled example graphs at random batch sizes with one
  predictor (the graphs are extracted in a warm-up before the clock starts, then served from the
  graph cache; the 16 (graph, batch) rows from the row cache after their first request, unless
  ``--row-cache 0``);
* **uncached**: every request a NAS-Bench-201 architecture not asked for before (an extraction in
  a sandboxed child each time), so the extraction slots (``--jobs``) are the bottleneck and clients
  past them wait or get the documented 503 (Busy, Retry-After).

Per phase: requests, throughput, p50 / p99 latency, responses by status, and the peak resident
memory of the server process tree (server + fork server + extraction children, sampled every
0.2 s with psutil).  Every loop is bounded by ``--duration``; the server is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.lib import _training_bench as tb  # noqa: E402

OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
EXAMPLES = ("example:resnet18", "example:resnet50", "example:mobilenet_v3_small", "example:vit_b_16")


def nb201_archs(seed: int):
    """Distinct NAS-Bench-201 cell strings in a seeded random order (15,625 exist)."""
    cells = list(itertools.product(OPS, repeat=6))
    random.Random(seed).shuffle(cells)
    for c in cells:
        yield f"nb201:|{c[0]}~0|+|{c[1]}~0|{c[2]}~1|+|{c[3]}~0|{c[4]}~1|{c[5]}~2|"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RssSampler(threading.Thread):
    """Peak RSS of a process and its descendants, sampled until stopped."""

    def __init__(self, pid: int, every: float = 0.2):
        super().__init__(daemon=True)
        import psutil

        self.proc, self.every, self.peak, self._halt = psutil.Process(pid), every, 0, threading.Event()

    def run(self) -> None:
        import psutil

        while not self._halt.is_set():
            try:
                procs = [self.proc, *self.proc.children(recursive=True)]
                total = 0
                for p in procs:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                self.peak = max(self.peak, total)
            except psutil.Error:
                return
            self._halt.wait(self.every)

    def stop(self) -> int:
        self._halt.set()
        self.join(5)
        return self.peak


async def run_phase(base: str, clients: int, duration: float, make_request, timeout: float) -> dict:
    import httpx

    latencies, statuses = [], {}
    deadline = time.monotonic() + duration
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits) as http:
        async def client(i: int) -> None:
            rng = random.Random(i)
            while time.monotonic() < deadline:
                payload = make_request(rng)
                t0 = time.perf_counter()
                try:
                    r = await http.post("/v1/predict", json=payload)
                    code = str(r.status_code)
                except httpx.HTTPError as e:
                    code = type(e).__name__
                latencies.append(time.perf_counter() - t0)
                statuses[code] = statuses.get(code, 0) + 1

        t0 = time.monotonic()
        await asyncio.gather(*(client(i) for i in range(clients)))
        elapsed = time.monotonic() - t0
    lat = sorted(latencies)
    pct = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3) if lat else (lambda q: float("nan"))
    return {"requests": len(lat), "seconds": round(elapsed, 1), "throughput_rps": round(len(lat) / elapsed, 2),
            "p50_ms": round(pct(0.50), 1), "p99_ms": round(pct(0.99), 1),
            "mean_ms": round(statistics.fmean(lat) * 1e3, 1) if lat else None, "statuses": statuses}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds per phase")
    ap.add_argument("--jobs", type=int, default=2, help="the server's extraction slots")
    ap.add_argument("--predictor", default="rtx3090-amp-nchw-pt240.infer")
    ap.add_argument("--phases", default="cached,uncached")
    ap.add_argument("--row-cache", type=int, default=4096,
                    help="the server's row cache (entries; 0: off, every cached-phase request recomputes its rows)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "perfseer.cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--jobs", str(args.jobs), "--predictor", args.predictor, "--row-cache", str(args.row_cache)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ})
    import httpx

    try:
        for _ in range(600):
            try:
                if httpx.get(base + "/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None:
                raise SystemExit(f"the server exited: {server.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
        sampler = RssSampler(server.pid)
        sampler.start()
        warm = time.perf_counter()  # the fork server's start, the predictor's load, the cached phase's graphs
        for model in EXAMPLES:
            httpx.post(base + "/v1/predict", json={"model": model, "batch": [1], "predictors": [args.predictor]},
                       timeout=300).raise_for_status()
        warm = time.perf_counter() - warm
        archs = nb201_archs(0)
        makers = {
            "cached": lambda rng: {"model": rng.choice(EXAMPLES), "batch": [rng.choice([1, 8, 32, 128])],
                                   "predictors": [args.predictor]},
            "uncached": lambda rng: {"model": next(archs), "batch": [1, 64], "predictors": [args.predictor]},
        }
        results = {}
        for phase in args.phases.split(","):
            results[phase] = asyncio.run(run_phase(base, args.clients, args.duration, makers[phase],
                                                   timeout=args.duration + 60))
            results[phase]["peak_rss_mb_so_far"] = round(sampler.peak / 2**20)
        peak = sampler.stop()
        health = httpx.get(base + "/v1/health", timeout=10).json()
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()

    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"perfseer serve: {args.clients} clients, {args.duration:g} s per phase, {args.jobs} extraction "
                    f"slots, row cache {args.row_cache or 'off'}, {os.cpu_count()} CPUs", title_justify="left")
    for c in ("phase", "requests", "req/s", "p50 ms", "p99 ms", "responses", "peak RSS MB"):
        t.add_column(c, justify="left" if c in ("phase", "responses") else "right")
    for phase, r in results.items():
        t.add_row(phase, str(r["requests"]), f"{r['throughput_rps']:.1f}", f"{r['p50_ms']:.0f}", f"{r['p99_ms']:.0f}",
                  " ".join(f"{k}:{v}" for k, v in sorted(r["statuses"].items())), str(r["peak_rss_mb_so_far"]))
    Console().print(t)
    print(f"warm-up (fork server, predictor, {len(EXAMPLES)} example graphs): {warm:.1f} s")
    print(f"server after the run: {health}")
    tb.write_json(args.json, {"clients": args.clients, "duration_s": args.duration, "jobs": args.jobs,
                              "row_cache": args.row_cache, "warmup_s": warm,
                              "cpus": os.cpu_count(), "phases": results, "peak_rss_mb": round(peak / 2**20),
                              "health": health})
    return 0


if __name__ == "__main__":
    sys.exit(main())
