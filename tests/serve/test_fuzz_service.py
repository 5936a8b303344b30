"""A fixed sample of the seeded fuzz corpus (``benchmarks/lib/fuzz_api.py``) through the service's
own endpoints, in-process: ``POST /v1/models`` (upload), ``POST /v1/predict`` and ``POST /v1/memory``
(the file by name in ``--models-dir``), the service and its sandbox limited to 3 GB: no traceback
(5xx), sandbox stop, hang, absurd answer, host path in an answer or refused upload kept.  The
whole corpus runs in the benchmark (``python -m benchmarks run fuzz``)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
from benchmarks.lib import fuzz_api

COUNT = 1600  # the benchmark's corpus (benchmarks/configs/fuzz.json)
SAMPLE = 50  # the 15 unmutated new seeds, then every 45th mutant: 150 requests (~2.5x the time per request of test_fuzz.py)
#: the entry points added later (compare, ZeRO-2 on 4 GPUs) take the first 25 of the sample (the
#: benchmark sends the whole corpus to every entry point)
LATER = ("serve_compare", "serve_predict_gpus")
LATER_SAMPLE = 25


def _sample() -> list[tuple[str, bytes]]:
    corpus = fuzz_api.generate(COUNT, seed=0)
    fresh = [c for c in corpus if "-none-" in c[0]]
    rest = [c for c in corpus if "-none-" not in c[0]]
    return fresh + rest[::len(rest) // (SAMPLE - len(fresh))][:SAMPLE - len(fresh)]


def test_fuzz_sample_through_the_service_endpoints():
    sample = _sample()
    assert len(sample) == SAMPLE
    first = tuple(e for e in fuzz_api.SERVICE_ENTRY_POINTS if e not in LATER)
    results = fuzz_api.run_cases(sample, entries=lambda k: first + LATER if k < LATER_SAMPLE else first)
    bad, _expected = fuzz_api.failures(results)
    assert not bad, [(r["outcome"], r["entry"], r["name"], r.get("detail", "")) for r in bad[:10]]
    s = fuzz_api.summarise(results)
    for entry in fuzz_api.SERVICE_ENTRY_POINTS:
        c, n = s[entry], (LATER_SAMPLE if entry in LATER else SAMPLE)
        assert c["cases"] == n and c["refusal"] + c["answer"] == n, (entry, c)
        assert c["answer"] >= 0.16 * n and c["refusal"] >= 0.4 * n, (entry, c)  # both ends exercised
        assert c["refusals_specific"] >= 0.9 * c["refusal"], (entry, c)
    # the unmutated seeds the library answers are answered by the service too, the others refused
    fresh = {(r["seed"], r["entry"]): r for r in results if "-none-" in r["name"]}
    for seed in ("api_func_valid", "api_q_qdq", "api_fp16", "api_opset23", "api_opset7", "api_external_data"):
        assert all(fresh[seed, e]["outcome"] == "answer" for e in fuzz_api.SERVICE_ENTRY_POINTS), seed
    for seed in ("api_func_recursive", "api_func_wrong_arity", "api_func_deep_chain", "api_func_fanout", "api_cf_loop"):
        assert all(fresh[seed, e]["outcome"] == "refusal" and fresh[seed, e]["specific"]
                   for e in fuzz_api.SERVICE_ENTRY_POINTS), seed


class _Answer:
    def __init__(self, status, body, text=None):
        import json

        self.status_code, self._body = status, body
        self.text = text if text is not None else json.dumps(body)

    def json(self):
        return self._body


class _Client:
    """Answers every request with the next canned answer; an upload may leave a file behind."""

    def __init__(self, answers, uploads, leave=None):
        self.answers, self.uploads, self.leave = list(answers), uploads, leave

    def post(self, url, **kw):
        if self.leave:
            (self.uploads / self.leave).write_bytes(b"x")
        return self.answers.pop(0)


def test_the_service_outcomes_are_classified(tmp_path, monkeypatch):
    """What counts as a leak, a traceback or a sandbox stop (the full run reports them)."""
    uploads = tmp_path / ".uploads"
    uploads.mkdir()
    path = tmp_path / "m.onnx"
    path.write_bytes(b"x")

    def outcome(entry, answer, leave=None):
        client = _Client([answer], uploads, leave)
        monkeypatch.setattr(fuzz_api, "_SERVICE", {"models_dir": tmp_path, "client": client, "uploads": uploads,
                                                   "hidden": [str(tmp_path)]})
        return fuzz_api._call_service(entry, str(path))["outcome"]

    err = lambda kind, msg="the graph has a cycle": {"error": {"type": kind, "message": msg, "fix": "f"}}  # noqa: E731
    assert outcome("serve_predict", _Answer(422, err("ShapeError"))) == "refusal"
    assert outcome("serve_predict", _Answer(422, err("ShapeError", f"no file {tmp_path}/m.onnx"))) == "leak"
    assert outcome("serve_upload", _Answer(422, err("OnnxError")), leave="abc.onnx") == "leak"
    assert outcome("serve_memory", _Answer(500, None, "Internal Server Error")) == "traceback"
    assert outcome("serve_memory", _Answer(422, {"detail": "x"})) == "traceback"  # not the error format
    assert outcome("serve_memory", _Answer(422, err("SandboxMemory"))) == "memory"
    assert outcome("serve_predict", _Answer(422, err("SandboxTimeout"))) == "hang"
    assert outcome("serve_memory", _Answer(200, {"estimates": [{"total": 5.5e19}]})) == "absurd"
    assert outcome("serve_memory", _Answer(200, {"estimates": [{"total": 2.0e9}]})) == "answer"
    row = {"metric": "latency_ms", "batch_size": 1, "value": 3.0, "flags": [], "reason": None}
    assert outcome("serve_predict", _Answer(200, {"predictions": [row]})) == "answer"
    assert outcome("serve_predict", _Answer(200, {"predictions": [dict(row, value=0.0)]})) == "absurd"
