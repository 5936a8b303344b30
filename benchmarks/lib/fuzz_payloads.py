"""Seeded random and invalid JSON payloads through the service's ``POST /v1/predict``,
``POST /v1/memory`` and ``POST /v1/compare``: every answer must be a 2xx with sane values or a 4xx
in the error format (``{"error": {"type", "message", "fix"}}``) that names the problem; a 5xx, an
exception out of the application, another error format, an absurd value or a host path in an
answer is a failure.

    python -m benchmarks.lib.fuzz_payloads [--count 300] [--seed 0]

Each payload starts from a valid request of its endpoint, with the several-GPU fields (``gpus``,
``parallel``, ``tp``, ``pp``, ``dp``, ``microbatches``, ``schedule``, ``sequence_parallel``,
``nodes``, ``node``, ``interconnect``, ``memory``, ``checkpoint``, ``layouts``) drawn at random,
then 0-4 fields are set to a value drawn from a pool of edge values (wrong types, zero, negative,
2^63, 10^30, huge or odd strings, nested objects, host paths), dropped, or added unknown; about one
in twelve is a raw body (``NaN``, ``Infinity``, truncated or non-UTF-8 JSON).  Models are the bundled
ONNX examples (cheap to answer), so a run is dominated by the refusals and answers it checks, not by
exports.  The service runs in-process (FastAPI's ``TestClient``) with its sandbox limited to 3 GB
and 30 s per job.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ENDPOINTS = ("/v1/predict", "/v1/memory", "/v1/compare")
MODELS = ("example:resnet18", "example:mobilenet_v3_small")
GPUS = ("a100-40gb", "h100-sxm", "l4", "rtx3090", "a100-80gb-sxm")
STRATEGIES = ("dp", "ddp", "tp", "pp", "fsdp", "zero1", "zero2", "zero3", "dataparallel")
BATCHES = (1, 2, 4, 8, 16, 32, 64)
EDGE = (None, True, False, 0, -1, 1, 2, 3, 7, 8, 16, 4096, 4097, 2**31, 2**63, 10**30, 1.5, -0.0, 1e308, "", " ",
        "8", "x" * 300, "dp", "tp", "zero3", "gpipe", "1f1b", "nvlink", "ib-ndr", "dgx-h100", "pcie-8", "infer",
        "train", "fp16", "../../etc/passwd", "/etc/passwd", "\u0000", "\u202e", "１", [], [1, 2], [[1]], ["a"],
        {}, {"a": 1}, {"gpus": 2}, [None])
FIELDS = ("model", "batch", "devices", "device", "predictors", "phase", "precision", "basis", "energy", "power_limit_w",
          "input_shape", "seq_len", "dims", "optimizer", "mig", "max_batch", "rank_by", "gpus", "parallel", "tp", "pp",
          "dp", "microbatches", "schedule", "sequence_parallel", "nodes", "node", "interconnect", "memory",
          "checkpoint", "layouts")
RAW = (b'{"model": "example:resnet18", "batch": [NaN], "gpus": 2}', b'{"model": "example:resnet18", "gpus": Infinity}',
       b'{"model": "example:resnet18", "gpus": 4, "parallel": "dp", "batch": [8]', b'{"gpus": -Infinity}',
       b'\xff{"gpus": 2}', b'{"model": "example:resnet18", "tp": 1e999}', b'[{"gpus": 2}]',
       b'{"model": "example:resnet18", "devices": ["a100-40gb"], "gpus": 2, "parallel": "dp", "gpus": "x"}')
FAILURES = ("traceback", "absurd", "leak")
MEMORY_LIMIT_MB = 3072
TIME_LIMIT = 30.0


def _layout(rng: random.Random) -> dict:
    """Random several-GPU fields, mostly plausible."""
    out: dict = {}
    if rng.random() < 0.7:
        out["gpus"] = rng.choice((1, 2, 2, 4, 4, 8, 16, 3))
    if rng.random() < 0.7:  # mostly the data-parallel flavours: the models here are CNNs (TP/PP refused)
        out["parallel"] = rng.choice(STRATEGIES) if rng.random() < 0.3 else rng.choice(("dp", "fsdp", "zero1", "zero3"))
    for k, p in (("tp", 0.1), ("pp", 0.1), ("dp", 0.1)):
        if rng.random() < p:
            out[k] = rng.choice((1, 2, 4, 8))
    if rng.random() < (0.5 if out.get("pp") else 0.05):
        out["microbatches"] = rng.choice((1, 2, 4, 8))
    if rng.random() < 0.1:
        out["schedule"] = rng.choice(("1f1b", "gpipe"))
    if rng.random() < 0.1:
        out["sequence_parallel"] = True
    if rng.random() < 0.15:
        out["nodes"] = rng.choice((1, 2, 4))
    if rng.random() < 0.1:
        out["node"] = rng.choice(("dgx-a100", "dgx-h100", "pcie-8", "pcie-4", "nope"))
    if rng.random() < 0.1:
        out["interconnect"] = rng.choice(("nvlink", "pcie", "ib-ndr", "ib-hdr", "roce"))
    return out


def _base(endpoint: str, rng: random.Random) -> dict:
    model = rng.choice(MODELS)
    if endpoint == "/v1/compare":
        body = {"model": model, "batch": rng.choice(BATCHES), "devices": rng.sample(GPUS, rng.randint(1, 3))}
        if rng.random() < 0.3:
            body["phase"] = rng.choice(("infer", "train"))
        return body  # compare has no several-GPU fields: any given is refused by validation or ignored
    body = {"model": model, "batch": rng.sample(BATCHES[3:], rng.randint(1, 2)), **_layout(rng)}
    if endpoint == "/v1/predict":
        body["devices"] = [rng.choice(GPUS)]
        if rng.random() < 0.2:
            body["memory"] = True
        if rng.random() < 0.3:
            body["phase"] = rng.choice(("infer", "train"))
    else:
        body["phase"] = "infer" if rng.random() < 0.7 else "train"
        if rng.random() < 0.4:
            body["device"] = rng.choice(GPUS)
        if rng.random() < 0.1:
            body["layouts"] = True
        if rng.random() < 0.1:
            body["checkpoint"] = True
    return body


def generate(count: int = 300, seed: int = 0) -> list[tuple[str, str, object]]:
    """``count`` payloads ``(name, endpoint, body)``: ``body`` a dict (sent as JSON) or raw bytes."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        endpoint = ENDPOINTS[i % len(ENDPOINTS)]
        if rng.random() < 1 / 12:
            out.append((f"p{i:05d}-raw", endpoint, rng.choice(RAW)))
            continue
        body = _base(endpoint, rng)
        what = []
        for _ in range(rng.choice((0, 0, 1, 1, 2, 3, 4))):
            field = rng.choice(FIELDS)
            r = rng.random()
            if r < 0.15 and field in body:
                del body[field]
                what.append(f"-{field}")
            elif r < 0.2:
                body[f"unknown_{field}"] = rng.choice(EDGE)
                what.append(f"+unknown_{field}")
            else:
                body[field] = rng.choice(EDGE)
                what.append(field)
        out.append((f"p{i:05d}-{'-'.join(what) or 'valid'}", endpoint, body))
    return out


def _finite(v, low: float = 0.0) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > low


def classify(endpoint: str, status: int, text: str, hidden) -> dict:
    """The outcome of one answer (see the module docstring)."""
    shown = [h for h in hidden if h and h in text]
    if shown:
        return {"outcome": "leak", "detail": f"the answer ({status}) shows a host path: {text[:200]}"}
    if not 200 <= status < 500:
        return {"outcome": "traceback", "type": f"HTTP {status}", "detail": text[:300]}
    try:
        body = json.loads(text)
    except ValueError:
        return {"outcome": "traceback", "type": f"HTTP {status}", "detail": f"not JSON: {text[:200]}"}
    if status >= 400:
        err = body.get("error") if isinstance(body, dict) else None
        if not isinstance(err, dict) or not {"type", "message", "fix"} <= set(err) or not str(err["message"]).strip():
            return {"outcome": "traceback", "type": f"HTTP {status}", "detail": f"not the error format: {text[:200]}"}
        return {"outcome": "refusal", "type": str(err["type"]), "status": status, "detail": str(err["message"])[:300]}
    if endpoint == "/v1/memory":
        bad = [e.get("total") for e in body.get("estimates") or [] if not _finite(e.get("total"))]
        if bad or not body.get("estimates"):
            return {"outcome": "absurd", "detail": f"memory totals {bad[:3]}"}
        return {"outcome": "answer"}
    rows = body.get("predictions") if endpoint == "/v1/predict" else body.get("rows")
    bad = []
    for r in rows or []:
        v = r.get("value")
        if v is None and not r.get("reason"):
            bad.append(f"refused without a reason: {r.get('device')}")
        elif v is not None and (not _finite(v, 1e-3) or v > 1e6):
            bad.append(f"{r.get('device')} batch {r.get('batch_size')}: {v!r}")
        for k in ("compute_ms", "comm_ms", "bubble_ms"):
            if k in r and v is not None and not (isinstance(r[k], (int, float)) and math.isfinite(r[k]) and r[k] >= 0):
                bad.append(f"{k} {r[k]!r}")
        if "memory_per_gpu_bytes" in r and not _finite(r["memory_per_gpu_bytes"]):
            bad.append(f"memory_per_gpu_bytes {r['memory_per_gpu_bytes']!r}")
    if bad or not rows:
        return {"outcome": "absurd", "detail": "; ".join(bad)[:300] or "no rows"}
    return {"outcome": "answer"}


def run(payloads: list[tuple[str, str, object]], log=None) -> list[dict]:
    """Each payload through the service (in-process); one outcome per payload."""
    from fastapi.testclient import TestClient

    import perfseer
    from perfseer.serve.app import ServeConfig, create_app

    results = []
    with tempfile.TemporaryDirectory(prefix="perfseer-fuzz-payloads-") as d:
        app = create_app(ServeConfig(jobs=1, job_time_s=TIME_LIMIT, job_memory_mb=MEMORY_LIMIT_MB,
                                     queue_wait_s=TIME_LIMIT, upload_dir=d))
        hidden = sorted({d, str(Path(d).resolve()), str(Path(perfseer.__file__).resolve().parents[1])}, key=len)
        with TestClient(app, raise_server_exceptions=True) as client:
            for k, (name, endpoint, body) in enumerate(payloads):
                t0 = time.perf_counter()
                try:
                    if isinstance(body, bytes):
                        r = client.post(endpoint, content=body, headers={"content-type": "application/json"})
                    else:
                        r = client.post(endpoint, json=body)
                    res = classify(endpoint, r.status_code, r.text, hidden)
                except Exception as e:  # noqa: BLE001 - an exception out of the application is what is counted
                    res = {"outcome": "traceback", "type": type(e).__name__, "detail": str(e)[:300]}
                res.update(name=name, entry=endpoint, seconds=round(time.perf_counter() - t0, 3))
                results.append(res)
                if log and (k + 1) % 50 == 0:
                    log(f"  {k + 1}/{len(payloads)} payloads")
    return results


def summarise(results: list[dict]) -> dict:
    """Per endpoint (and ``all``): payloads, answers, refusals, failures of each kind, times."""
    out = {}
    for entry in (*ENDPOINTS, "all"):
        rs = [r for r in results if entry == "all" or r["entry"] == entry]
        c = Counter(r["outcome"] for r in rs)
        secs = sorted(r["seconds"] for r in rs)
        out[entry] = {"cases": len(rs), "answer": c.get("answer", 0), "refusal": c.get("refusal", 0),
                      **{k: c.get(k, 0) for k in FAILURES},
                      "median_s": secs[len(secs) // 2] if secs else None, "max_s": secs[-1] if secs else None}
    return out


def failures(results: list[dict]) -> list[dict]:
    return [r for r in results if r["outcome"] in FAILURES]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    results = run(generate(args.count, args.seed), log=lambda m: print(m, file=sys.stderr))
    for entry, c in summarise(results).items():
        print(entry, json.dumps(c))
    for r in failures(results)[:20]:
        print(f"  {r['outcome']} [{r['entry']}] {r['name']}: {r.get('detail', '')}")
    return 1 if failures(results) else 0


if __name__ == "__main__":
    sys.exit(main())
