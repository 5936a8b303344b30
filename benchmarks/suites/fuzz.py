"""The fuzz corpus through what users call: ``perfseer.predict`` (auto and ``basis="spec"``),
``perfseer.memory`` and the service's endpoints (upload, predict on one and on several GPUs, memory,
compare), each call in a worker limited to 3 GB of address space and 30 s (the service: its sandbox's
jobs too); and seeded random and invalid request payloads through predict, memory and compare
(``benchmarks/lib/fuzz_payloads.py``).

A seeded corpus (the same files for the same seed) of mutants of the bundled example graphs, ONNX's
backend test models, small hand-built models and the seed kinds of issue 38 (model-local functions,
If/Loop/Scan, quantized graphs, external data, opsets 7 and 23, fp16): see
``benchmarks/lib/fuzz_api.py``.  Every call must end in an answer that passes the sanity check or
a ``PerfseerError`` (the service: a 4xx JSON error); tracebacks, absurd answers, crashes, hangs,
memory over the limit, a read of the external-data file and (service) a host path in an answer or a
refused upload kept are failures.  The corpus runs in chunks (one resumable step each).  The
counts are exact for a given seed and code; the times are this machine's.
"""

from __future__ import annotations

from benchmarks.lib import fuzz_api, fuzz_payloads
from benchmarks.runner import Context, Step, Suite, load_config, md_table, timing_note

_COLUMNS = ["entry point", "cases", "refusals", "naming the cause", "answers", "absurd answers", "tracebacks",
            "over memory", "hangs", "crashes", "external data read", "host path or upload leaked", "median s", "max s"]
ENTRIES = fuzz_api.ENTRY_POINTS + fuzz_api.SERVICE_ENTRY_POINTS


def _chunk(count: int, seed: int, start: int, stop: int) -> dict:
    results = fuzz_api.run_cases(fuzz_api.generate(count, seed)[start:stop], entries=ENTRIES)
    bad, expected = fuzz_api.failures(results)
    slim = [{k: r.get(k) for k in ("name", "entry", "outcome", "detail")} for r in bad[:30]]
    refusals = {}
    for r in results:
        if r["outcome"] == "refusal":
            refusals[r.get("type", "?")] = refusals.get(r.get("type", "?"), 0) + 1
    return {"start": start, "stop": stop, "summary": fuzz_api.summarise(results), "failures": slim,
            "failures_total": len(bad), "xfail": len(expected), "refusal_types": refusals,
            "rows": [{k: r.get(k) for k in ("name", "entry", "outcome", "specific", "seconds")} for r in results]}


def steps(ctx: Context) -> list[Step]:
    cfg = load_config("fuzz")  # benchmarks/configs/fuzz.json
    count = cfg["quick"]["count"] if ctx.quick else cfg["count"]
    chunk = cfg["chunk"]
    payloads = cfg["quick"]["payloads"] if ctx.quick else cfg["payloads"]
    return [Step(f"chunk-{i:05d}", lambda i=i: _chunk(count, cfg["seed"], i, min(i + chunk, count)))
            for i in range(0, count, chunk)] + [Step("payloads", lambda: _payloads(payloads, cfg["seed"]))]


def _payloads(count: int, seed: int) -> dict:
    results = fuzz_payloads.run(fuzz_payloads.generate(count, seed))
    bad = fuzz_payloads.failures(results)
    refusals: dict[str, int] = {}
    for r in results:
        if r["outcome"] == "refusal":
            refusals[r.get("type", "?")] = refusals.get(r.get("type", "?"), 0) + 1
    return {"count": count, "summary": fuzz_payloads.summarise(results), "refusal_types": refusals,
            "failures": [{k: r.get(k) for k in ("name", "entry", "outcome", "detail")} for r in bad[:30]],
            "failures_total": len(bad)}


_PAYLOAD_COLUMNS = ["endpoint", "payloads", "answers", "4xx refusals", "5xx or tracebacks", "absurd answers",
                    "host path leaked", "median s", "max s"]


def _render_payloads(p: dict) -> str:
    table = [[e, s["cases"], s["answer"], s["refusal"], s["traceback"], s["absurd"], s["leak"], s["median_s"], s["max_s"]]
             for e, s in p["summary"].items()]
    kinds = ", ".join(f"{t} {n}" for t, n in sorted(p["refusal_types"].items(), key=lambda kv: -kv[1])[:8])
    listed = "".join(f"\n- {x['outcome']} [{x['entry']}]: {x['name']}: {(x.get('detail') or '')[:160]}"
                     for x in p["failures"][:20])
    return ("\n\n### Request payloads\n\n"
            f"{p['count']} seeded random and invalid JSON payloads (`python -m benchmarks.lib.fuzz_payloads`) through "
            "`POST /v1/predict`, `/v1/memory` and `/v1/compare`: valid requests of the bundled ONNX examples with "
            "random several-GPU fields (gpus, parallel, tp, pp, dp, microbatches, schedule, nodes, node, "
            "interconnect, memory, checkpoint, layouts), then 0-4 fields set to edge values (wrong types, zero, "
            "negative, 2^63, 10^30, odd strings, host paths, nested objects), dropped or added unknown, and raw "
            "bodies (NaN, Infinity, truncated or non-UTF-8 JSON). Each must be a sane 2xx or a 4xx JSON error "
            f"naming the problem. {timing_note({'payloads': p})}\n\n"
            + md_table(_PAYLOAD_COLUMNS, table)
            + (f"\n\nRefusals by error type: {kinds}." if kinds else "")
            + (f"\n\nFailures ({p['failures_total']}):{listed}" if p["failures_total"] else
               "\n\nNo failure (5xx, traceback, other error format, absurd answer, leak)."))


def _merge(res: dict[str, dict]) -> tuple[dict, list[dict], int, int, dict]:
    rows = [r for k, v in sorted(res.items()) if k.startswith("chunk-") for r in v["rows"]]
    fails = [f for k, v in sorted(res.items()) if k.startswith("chunk-") for f in v["failures"]]
    total = sum(v.get("failures_total", len(v["failures"])) for k, v in res.items() if k.startswith("chunk-"))
    xfail = sum(v.get("xfail", 0) for k, v in res.items() if k.startswith("chunk-"))
    types: dict[str, int] = {}
    for k, v in res.items():
        for t, n in v.get("refusal_types", {}).items() if k.startswith("chunk-") else ():
            types[t] = types.get(t, 0) + n
    return fuzz_api.summarise(rows) if rows else {}, fails, total, xfail, types


def render(ctx: Context, res: dict[str, dict]) -> str:
    summary, fails, total, xfail, types = _merge(res)
    files = len({r["name"] for v in res.values() for r in v.get("rows", [])})
    table = [[e, s["cases"], s["refusal"], s["refusals_specific"], s["answer"], s["absurd"], s["traceback"],
              s["memory"], s["hang"], s["crash"], s["read"], s.get("leak", 0), s["median_s"], s["max_s"]]
             for e, s in summary.items()]
    listed = "".join(f"\n- {x['outcome']} [{x['entry']}]: {x['name']}: {(x.get('detail') or '')[:160]}"
                     for x in fails[:20])
    kinds = ", ".join(f"{t} {n}" for t, n in sorted(types.items(), key=lambda kv: -kv[1])[:8])
    return ("## Fuzz corpus\n\n"
            f"{files} seeded mutants of ONNX files (seed kinds: bundled examples, ONNX backend models, hand-built "
            "Range/Expand/sequence/legacy graphs, model-local functions, If/Loop/Scan, QDQ/QLinearConv/"
            "DynamicQuantizeLinear, external data, opsets 7 and 23, fp16) through `perfseer.predict(path, "
            f"device=\"{fuzz_api.DEVICE}\", batch=[1, 8])`, the same with `basis=\"spec\"` and "
            "`perfseer.memory(path, batch=2, phase=\"infer\")`, each call in a worker limited to "
            f"{fuzz_api.MEMORY_LIMIT >> 30} GB of address space and {fuzz_api.TIME_LIMIT:.0f} s; and through the "
            "service's endpoints, in-process (`perfseer serve`'s application under FastAPI's TestClient, the "
            "mutants' folder as `--models-dir`): `POST /v1/models` (upload), `POST /v1/predict` (`devices: "
            f"[\"{fuzz_api.DEVICE}\"], batch: [1, 8]`), `POST /v1/memory` (`batch: [2], phase: infer`), `POST "
            f"/v1/compare` (`batch: 8, devices: [\"{fuzz_api.DEVICE}\"]`) and `POST /v1/predict` on several GPUs "
            "(`serve_predict_gpus`: `batch: [8], gpus: 4, parallel: zero2`), the "
            f"service's sandbox at the same limits per job ({fuzz_api.MEMORY_LIMIT >> 30} GB, "
            f"{fuzz_api.TIME_LIMIT:.0f} s; its stops count as over memory, hangs or crashes). Each worker loads the "
            "cards and networks once before its first case; the first service call of a worker also starts the "
            "service and its fork server (in that case's time). An answer is absurd "
            "when it is non-finite, <= 0, under 1 us, flagged above the sanity ceiling or above "
            f"{fuzz_api.LATENCY_CEILING_MS:.0e} ms (memory: above 1 PiB). {timing_note(res)}\n\n"
            + md_table(_COLUMNS, table)
            + (f"\n\nRefusals by error type: {kinds}." if kinds else "")
            + (f"\n\nExpected failures (xfail seed kinds): {xfail}." if xfail else "")
            + (f"\n\nFailures ({total}):{listed}" if total else
               "\n\nNo failure (traceback, absurd answer, crash, hang, memory, external-data read, leak).")
            + (_render_payloads(res["payloads"]) if "payloads" in res else ""))


SUITE = Suite(
    name="fuzz",
    description="1,600 seeded malformed ONNX files through perfseer.predict (auto, spec), perfseer.memory and "
                "the service's upload, predict (one and several GPUs), memory and compare endpoints, and 600 random "
                "and invalid request payloads through predict, memory and compare: refusals naming the cause, sane "
                "answers; no traceback, 5xx, crash, hang, blow-up or leak",
    reads="bundled example graphs, the onnx package's backend test models, seeds built in code (generated, not stored)",
    time_full="~45 min", time_quick="~3 min (60 files, 120 payloads)",
    steps=steps, render=render)
