"""POST /v1/llm through FastAPI's TestClient: the batch answer, serving, bounded and refused input."""

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from perfseer.serve.app import ServeConfig, create_app


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = create_app(ServeConfig(jobs=1, job_time_s=60, cache_size=2, upload_dir=str(tmp_path_factory.mktemp("up"))))
    with TestClient(app) as c:
        yield c


def test_batch_answer(client):
    r = client.post("/v1/llm", json={"model": "llama-3-8b", "device": "a100-80gb-sxm", "prompt_len": "512",
                                     "output_len": "64", "batch": 4})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["kind"] == "batch" and d["kv_bytes_per_token"] == 131072 and d["ttft_ms"] > 0 and d["tpot_ms"] > 0
    assert d["breakdown"]["decode_step"]


def test_serving_answer(client):
    r = client.post("/v1/llm", json={"model": "meta-llama/Meta-Llama-3-8B", "device": "h100-sxm", "rate": 2,
                                     "requests": 100, "prompt_len": "200:50", "output_len": "100"})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["kind"] == "serving" and d["requests"] == 100 and d["tpot_ms"]["p50"] > 0


@pytest.mark.parametrize("body, status, words", [
    ({"model": "../../etc/passwd", "device": "h100-sxm"}, 422, ""),
    ({"model": "etc/passwd", "device": "h100-sxm"}, 422, "unknown LLM"),
    ({"model": "config.json", "device": "h100-sxm"}, 422, "unknown LLM"),
    ({"model": "llama-3-8b", "device": "h100-sxm", "batch": 100000}, 422, ""),
    ({"model": "llama-3-8b", "device": "h100-sxm", "requests": 10 ** 6, "rate": 1}, 422, ""),
    ({"model": "llama-3-8b", "device": "h100-sxm", "prompt_len": "/etc/hosts", "rate": 1}, 422, ""),
    ({"model": "llama-3-8b", "device": "h100-sxm", "precision": "fp7"}, 422, "unknown precision"),
    ({"model": "llama-3-8b", "device": "h100-sxm", "prompt_len": "9000"}, 422, "maximum context"),
    ({"model": "llama-3-8b", "device": "h100-sxm", "prompt_len": "200:50"}, 422, "MEAN:SD is for serving"),
])
def test_bad_input_is_refused(client, body, status, words):
    r = client.post("/v1/llm", json=body)
    assert r.status_code == status, r.text
    assert words in r.text
