"""POST /v1/memory on several GPUs through FastAPI's TestClient: one GPU's share (ZeRO-3 divides
the states by the GPUs, hand-checked), the layouts that would fit a step one GPU does not hold, and
the refusals."""

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from perfseer.serve.app import ServeConfig, create_app


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = create_app(ServeConfig(jobs=1, job_time_s=300, cache_size=8,
                                 upload_dir=str(tmp_path_factory.mktemp("uploads"))))
    with TestClient(app) as c:
        yield c


def test_zero3_divides_the_states_over_the_gpus(client):
    r = client.post("/v1/memory", json={"model": "timm:resnet18", "batch": [64], "device": "a100-40gb", "gpus": 4,
                                        "parallel": "zero3"})
    assert r.status_code == 200, r.text
    body = r.json()
    (e,) = body["estimates"]
    assert body["layout"] == e["layout"] == "4 GPUs: ZeRO-3 4" and e["gpus"] == 4 and e["per_gpu_batch"] == 16
    assert e["memory_per_gpu_bytes"] == e["total"] == sum(e["breakdown"].values()) and e["fits"] is True
    one = e["single"]["breakdown"]  # the one-GPU step at the 16 samples each GPU runs
    # ZeRO-3: parameters, gradients and AdamW's two moments each split four ways
    assert e["breakdown"]["optimizer_state"] == pytest.approx(one["optimizer_state"] / 4, rel=0.01)
    assert e["breakdown"]["optimizer_state"] == pytest.approx(2 * 4 * 11_689_512 / 4, rel=0.01)
    # the activations of a GPU's 16 samples stay whole (with the states sharded, the peak moves to the
    # end of the forward pass, where every activation is live)
    assert e["breakdown"]["activations"] >= one["activations"]
    assert e["total"] < e["single"]["total"] and e["model"] == "timm:resnet18"
    again = client.post("/v1/memory", json={"model": "timm:resnet18", "batch": [64], "device": "a100-40gb",
                                            "gpus": 4, "parallel": "zero3"}).json()
    assert again["cached"] is True and again["estimates"] == body["estimates"]


def test_which_layouts_would_fit_a_step_one_gpu_does_not_hold(client):
    # GPT-2 large (774 M parameters) trained with AdamW in fp32: ~12 GiB of states, over an 8 GB RTX 3070
    body = {"model": "hf:gpt2-large", "batch": [1], "input_shape": "16", "device": "rtx3070", "layouts": True}
    r = client.post("/v1/memory", json=body)
    assert r.status_code == 200, r.text
    (e,) = r.json()["estimates"]
    assert e["fits"] is False
    layouts = {x["strategy"]: x for x in e["layouts"]}
    assert {"zero3", "fsdp", "tp"} <= set(layouts)
    for x in layouts.values():
        assert x["memory_per_gpu_bytes"] <= x["capacity"] == 8 * 2**30 and x["per_gpu_batch"] == 1
    assert layouts["zero3"]["gpus"] == layouts["fsdp"]["gpus"] == 4
    assert layouts["zero1"]["gpus"] > layouts["zero2"]["gpus"] >= layouts["zero3"]["gpus"]  # less sharded, more GPUs


@pytest.mark.parametrize(("extra", "problem", "fix"), [
    ({"batch": [2], "gpus": 4, "parallel": "zero3"}, "smaller than the data-parallel degree 4", '"batch" 4'),
    ({"gpus": 4, "parallel": "tp"}, "modelled for transformers", '"parallel" dp'),
    ({"gpus": 16, "parallel": "dp", "device": "a100-40gb"}, "16 GPUs per node", '"nodes" 2'),
    ({"gpus": 4, "parallel": "zero3", "max_batch": True, "device": "a100-40gb"}, "answer one GPU", "drop"),
    ({"gpus": 4, "parallel": "zero3", "layouts": True}, "layouts answers for one GPU", "drop"),
    ({"layouts": True}, "layouts needs a device", '"device"'),
    ({"layouts": True, "device": "a100-40gb", "phase": "infer"}, "for a training step", '"phase": "train"'),
    ({"checkpoint": True}, "no known layers", "hf: model"),
    ({"nodes": 2}, "nodes describes a step on several GPUs", '"gpus"'),
])
def test_a_memory_layout_that_cannot_run_is_a_422_naming_the_fix(client, extra, problem, fix):
    jobs = client.app.state.service.sandbox.stats["jobs"]
    r = client.post("/v1/memory", json={"model": "timm:resnet18", "batch": [64], **extra})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert problem in err["message"] and fix in err["fix"], err
    assert client.app.state.service.sandbox.stats["jobs"] == jobs  # refused before any simulation
