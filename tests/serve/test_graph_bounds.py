"""What the service holds and does for one large graph is bounded: the graph cache by nodes as well
as entries, and re-binding a 100,000-node upload to many batch sizes by a node budget, refused
before any work, the server process growing by no more than a few megabytes."""

import time
from types import SimpleNamespace

import pytest
from onnx import TensorProto, helper

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from perfseer.serve.app import ServeConfig, create_app
from perfseer.serve.graphs import GraphCache


class _Store:
    def resolve(self, model):
        return model

    def version(self, target):
        return ""


class _Sandbox:
    """Extraction without a child: a model named ``m<N>`` is a graph of N nodes."""

    def __init__(self):
        self.jobs = 0

    def run(self, fn, target, *args, wait_s=None):
        self.jobs += 1
        return SimpleNamespace(num_nodes=int(target[1:]))


def test_the_graph_cache_is_bounded_in_nodes_as_well_as_entries():
    box, dropped = _Sandbox(), []
    cache = GraphCache(box, _Store(), size=10, on_evict=dropped.append, max_nodes=1000)
    for name in ("m400", "m300", "m200"):
        cache.get(name, weight_work=False)
    assert len(cache) == 3 and cache.nodes == 900
    cache.get("m400", weight_work=False)  # a hit: now the most recently used
    cache.get("m250", weight_work=False)  # 1,150 nodes: the least recently used (m300) goes
    assert cache.nodes == 850 and len(cache) == 3 and len(dropped) == 1
    assert cache.get("m400", weight_work=False)[1] and not cache.get("m300", weight_work=False)[1]
    assert cache.nodes <= 1000
    jobs = box.jobs
    pg, cached = cache.get("m5000", weight_work=False)  # larger than the whole cache: answered, not kept
    assert pg.num_nodes == 5000 and not cached and cache.nodes <= 1000
    assert not cache.get("m5000", weight_work=False)[1] and box.jobs == jobs + 2


def _chain(n: int) -> bytes:
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, ["N", 8])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="reads /proc/self/statm")
def test_rebinding_a_100k_node_upload_to_32_batch_sizes_is_refused_at_once(tmp_path):
    """The audit's case: one 2.4 MB upload, a chain of 100,000 nodes, asked at 32 batch sizes (it
    took 163-214 s and 10.8 GB in the server process).  The re-binding budget refuses it before
    any work and the server does not grow (a request within the budget re-binds in the sandbox:
    ``test_abuse.py::test_rebinding_runs_in_the_sandbox_and_is_bounded``)."""
    app = create_app(ServeConfig(jobs=1, job_time_s=180, upload_dir=str(tmp_path / "up")))
    svc = app.state.service
    with TestClient(app) as client:
        r = client.post("/v1/models", files={"file": ("chain.onnx", _chain(100_000), "application/octet-stream")})
        assert r.status_code == 200, r.text
        ref = r.json()["model"]
        assert r.json()["summary"]["num_nodes"] == 100_000
        assert svc.graphs.nodes == 100_000  # the cache counts what it holds
        before, jobs, t0 = _rss_mb(), svc.sandbox.stats["jobs"], time.perf_counter()
        r = client.post("/v1/predict", json={"model": ref, "devices": ["a100-40gb"], "batch": list(range(1, 33))})
        assert r.status_code == 422 and "budget" in r.json()["error"]["message"], r.text
        assert time.perf_counter() - t0 < 5.0
        assert _rss_mb() - before < 50  # megabytes: nothing was re-bound in the server process
        assert svc.sandbox.stats["jobs"] == jobs  # and nothing in the sandbox either
