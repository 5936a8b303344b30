"""A seeded sample of random and invalid request payloads (``benchmarks/lib/fuzz_payloads.py``)
through ``POST /v1/predict``, ``/v1/memory`` and ``/v1/compare`` with the several-GPU fields: every
answer a sane 2xx or a 4xx JSON error naming the problem, never a 5xx, a traceback or a host path.
The benchmark runs more (``python -m benchmarks run fuzz``)."""

import pytest

pytest.importorskip("fastapi")
from benchmarks.lib import fuzz_payloads


def test_random_payloads_are_answered_or_refused_never_a_500():
    payloads = fuzz_payloads.generate(45, seed=1)
    assert payloads == fuzz_payloads.generate(45, seed=1)  # seeded: the same payloads every run
    results = fuzz_payloads.run(payloads)
    bad = fuzz_payloads.failures(results)
    assert not bad, [(r["outcome"], r["entry"], r["name"], r.get("detail")) for r in bad[:10]]
    s = fuzz_payloads.summarise(results)
    for endpoint in fuzz_payloads.ENDPOINTS:
        assert s[endpoint]["cases"] == 15 and s[endpoint]["refusal"] >= 3, (endpoint, s[endpoint])
    assert s["all"]["answer"] >= 10  # both ends exercised
    assert all(400 <= r["status"] < 500 for r in results if r["outcome"] == "refusal")


@pytest.mark.parametrize(("status", "text", "outcome"), [
    (500, "Internal Server Error", "traceback"),
    (422, '{"detail": "x"}', "traceback"),  # not the error format
    (422, '{"error": {"type": "T", "message": "", "fix": ""}}', "traceback"),  # names nothing
    (422, '{"error": {"type": "T", "message": "m", "fix": ""}}', "refusal"),
    (200, '{"predictions": [{"value": 3.0, "compute_ms": 2.0, "comm_ms": 1.0, "bubble_ms": 0.0}]}', "answer"),
    (200, '{"predictions": [{"value": 3.0, "compute_ms": -1.0}]}', "absurd"),
    (200, '{"predictions": [{"value": null}]}', "absurd"),  # refused without a reason
    (200, '{"predictions": [{"value": 3.0, "memory_per_gpu_bytes": 0}]}', "absurd"),
    (200, '{"predictions": [{"value": 3.0, "basis": "/srv/secret/x"}]}', "leak"),
])
def test_the_outcomes_are_classified(status, text, outcome):
    assert fuzz_payloads.classify("/v1/predict", status, text, ["/srv/secret"])["outcome"] == outcome


def test_the_suite_renders_the_payload_table():
    from benchmarks.suites import fuzz

    meta = {"_meta": {"seconds": 1.0, "loadavg": [0.5] * 3, "finished": "2026-01-01 00:00:00 UTC", "cpus": 2}}
    rows = [{"name": "00000-none-api_fp16", "entry": "serve_compare", "outcome": "answer", "specific": None,
             "seconds": 0.1}]
    chunk = {"start": 0, "stop": 1, "rows": rows, "failures": [], "failures_total": 0, "xfail": 0, "refusal_types": {},
             **meta}
    results = [{"entry": "/v1/predict", "outcome": "refusal", "type": "ParallelError", "seconds": 0.01},
               {"entry": "/v1/compare", "outcome": "answer", "seconds": 0.2}]
    payloads = {"count": 2, "summary": fuzz_payloads.summarise(results), "refusal_types": {"ParallelError": 1},
                "failures": [], "failures_total": 0, **meta}
    text = fuzz.render(None, {"chunk-00000": chunk, "payloads": payloads})
    assert "| serve_compare | 1 |" in text and "### Request payloads" in text
    assert "| /v1/predict | 1 | 0 | 1 | 0 | 0 | 0 |" in text and "| all | 2 | 1 | 1 | 0 | 0 | 0 |" in text
    assert "Refusals by error type: ParallelError 1." in text
