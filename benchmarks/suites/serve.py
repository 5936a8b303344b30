"""``perfseer serve`` under load, and the CPU cost of one request.

* **load**: ``perfseer serve`` on a free loopback port in a child process, concurrent clients
  (asyncio + httpx) each sending its next request as soon as the last answered, for a fixed time
  per phase: *cached* (the bundled example graphs at random batch sizes, one predictor: graph and
  row caches) and *uncached* (a NAS-Bench-201 architecture never asked for before: an extraction
  in a sandboxed child each time).
* **cpu**: the app in-process through FastAPI's ``TestClient`` (no sockets), process CPU time per
  ``POST /v1/predict`` with the row cache on and off.

Throughput and latency depend on the machine and its load: the tolerance is stated in the
section, with the load average beside each figure.
"""

from __future__ import annotations

from benchmarks.lib import serve_cpu, serve_load
from benchmarks.runner import Context, Step, Suite, f, load_config, md_table, run_main, timing_note

TOLERANCE = "± 30 % at a 1-minute load average under 2 on this 2-core VM (throughput falls as the load rises)"


def steps(ctx: Context) -> list[Step]:
    cfg = load_config("serve")  # benchmarks/configs/serve.json
    cfg = {**cfg, **cfg["quick"]} if ctx.quick else cfg
    load = ["--clients", str(cfg["load"]["clients"]), "--duration", str(cfg["load"]["duration_s"])]
    cpu = ["--requests", str(cfg["cpu"]["requests"])]
    return [Step("load", lambda: run_main(serve_load.main, load, ctx.work / "load.json")),
            Step("cpu", lambda: run_main(serve_cpu.main, cpu, ctx.work / "cpu.json"))]


def render(ctx: Context, res: dict[str, dict]) -> str:
    ld = res["load"]
    la = f"{ld['_meta']['loadavg'][0]:.1f}"
    t1 = [[ph, r["requests"], f(r["throughput_rps"]), f(r["p50_ms"], 0), f(r["p99_ms"], 0),
           " ".join(f"{k}:{v}" for k, v in sorted(r["statuses"].items())), la] for ph, r in ld["phases"].items()]
    cp = res["cpu"]
    t2 = [[k, r["requests"], f(r.get("cpu_ms_median"), 2), f(r.get("cpu_ms_mean"), 2), f(r.get("wall_ms_median"), 2)]
          for k, r in cp["settings"].items()]
    return ("## Service load\n\n"
            f"`perfseer serve` with {ld['clients']} concurrent clients for {ld['duration_s']:g} s per phase "
            f"(peak RSS {ld['peak_rss_mb']} MB; warm-up {ld['warmup_s']:.1f} s). Tolerance: {TOLERANCE}. "
            f"{timing_note(res)}\n\n"
            + md_table(["phase", "requests", "req/s", "p50 ms", "p99 ms", "responses", "load avg"], t1)
            + "\n\nCPU time of one `POST /v1/predict` in the service process (in-process client, 1 torch thread, "
            f"load average {cp['load_average_1min_at_start']:.1f} at the start):\n\n"
            + md_table(["setting", "requests", "CPU ms median", "CPU ms mean", "wall ms median"], t2))


SUITE = Suite(
    name="serve", kind="timing",
    description="perfseer serve under concurrent load (cached / uncached) and CPU per request",
    reads="the bundled example graphs and the RTX 3090 card (a local server on 127.0.0.1)",
    time_full="~4 min (2 phases x 60 s, 50 clients)", time_quick="~1 min (10 clients, 10 s)",
    steps=steps, render=render)
