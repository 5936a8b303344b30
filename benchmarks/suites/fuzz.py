"""The fuzz corpus: malformed ONNX files through ``perfseer`` in a sandboxed worker.

A seeded corpus (the same files for the same seed) of mutants of the bundled example graphs,
ONNX's backend test models and small hand-built models (byte flips, truncation, protobuf edits:
absurd attributes, wrong dtypes, dangling inputs, cycles, unknown domains, huge shapes ...), each
extracted and predicted in a worker process with a memory and time limit.  A file must end in a
result or a clear ``PerfseerError``; uncaught exceptions, aborts, hangs and memory blow-ups are
failures.  The counts are exact for a given seed and code; the times are this machine's.
"""

from __future__ import annotations

import contextlib
import io
import json

from benchmarks.lib import fuzz_corpus
from benchmarks.runner import Context, Step, Suite, atomic_write, load_config, md_table, timing_note


def _run(ctx: Context, count: int, seed: int) -> dict:
    out = ctx.work / f"corpus-{seed}.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fuzz_corpus.main(["--count", str(count), "--seed", str(seed), "--json", str(out)])  # rc 1: failures found
    atomic_write(out.with_suffix(".txt"), buf.getvalue())
    d = json.loads(out.read_text())
    bad = [r for r in d["results"] if r["outcome"] in fuzz_corpus.FAILURES]
    return {"summary": d["summary"], "failures": bad[:20], "count": count, "seed": seed}


def steps(ctx: Context) -> list[Step]:
    cfg = load_config("fuzz")  # benchmarks/configs/fuzz.json
    count = cfg["quick"]["count"] if ctx.quick else cfg["count"]
    return [Step("corpus", lambda: _run(ctx, count, cfg["seed"]))]


def render(ctx: Context, res: dict[str, dict]) -> str:
    r = res["corpus"]
    s = r["summary"]
    row = [s["files"], s["ok"], s["specific_errors"], s["error"] - s["specific_errors"], s["uncaught"], s["abort"],
           s["hang"], s["memory"], s["absurd"], f"{100 * (s['specific_share'] or 0):.1f} %", s["median_s"], s["max_s"]]
    fails = "".join(f"\n- {x['outcome']}: {x['name']}: {x.get('detail', '')[:160]}" for x in r["failures"])
    return ("## Fuzz corpus\n\n"
            f"{r['count']} malformed ONNX files (seed {r['seed']}) through extraction and prediction in a sandboxed "
            f"worker. {timing_note(res)}\n\n"
            + md_table(["files", "ok", "specific errors", "generic errors", "uncaught", "aborts", "hangs",
                        "over the memory limit", "absurd successes", "errors naming the cause", "median s", "max s"], [row])
            + (f"\n\nFailures:{fails}" if fails else "\n\nNo failure (uncaught, abort, hang, memory)."))


SUITE = Suite(
    name="fuzz",
    description="1,200 seeded malformed ONNX files: clear errors, no crash, hang or blow-up",
    reads="bundled example graphs, the onnx package's backend test models (generated corpus, not stored)",
    time_full="~1 min", time_quick="~15 s (60 files)",
    steps=steps, render=render)
