"""POST /v1/predict on several GPUs through FastAPI's TestClient: the rows' compute, exposed
communication and bubble (hand-checked against the one-GPU step and the 1F1B bubble), memory per
GPU, and the layouts refused with a 422 naming the fix before anything is extracted."""

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from perfseer.serve.app import ServeConfig, create_app

GPU = "a100-40gb"
MINILM = "hf:sentence-transformers/all-MiniLM-L6-v2"  # 6 layers, 12 heads, hidden 384: a small transformer


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = create_app(ServeConfig(jobs=1, job_time_s=300, cache_size=4,
                                 upload_dir=str(tmp_path_factory.mktemp("uploads"))))
    with TestClient(app) as c:
        yield c


def _predict(client, **body):
    return client.post("/v1/predict", json={"model": "example:resnet18", "devices": [GPU], **body})


def test_data_parallel_row_is_the_one_gpu_step_of_its_share_plus_the_exposed_all_reduce(client):
    r = _predict(client, batch=[32], gpus=4, parallel="dp")
    assert r.status_code == 200, r.text
    body = r.json()
    (row,) = body["predictions"]
    assert body["layout"] == "4 GPUs: DDP 4" and row["parallel"] == "4 GPUs: DDP 4"
    assert row["gpus"] == 4 and row["batch_size"] == 32 and row["per_gpu_batch"] == 8 and row["phase"] == "train"
    # DDP: each GPU runs the one-GPU training step at 8 samples (the optimizer pass included); the
    # bucketed all-reduce overlaps the backward pass and only what sticks out is added
    one = _predict(client, batch=[8], phase="train").json()["predictions"][0]
    assert row["compute_ms"] == pytest.approx(one["value"], rel=1e-9)
    assert 0 < row["comm_ms"] <= row["comm"]["dp"]["total_ms"] and row["bubble_ms"] == 0
    assert row["value"] == pytest.approx(row["compute_ms"] + row["comm_ms"] + row["bubble_ms"])
    assert row["throughput_per_s"] == pytest.approx(32 * 1000 / row["value"])
    # ResNet-18's 11.69 M fp32 gradients are what each GPU all-reduces
    assert row["comm"]["dp"]["bytes_per_gpu"] == pytest.approx(4 * 11_689_512, rel=1e-3)
    assert body["summary"]["model"] == "example:resnet18" and row["model"] == "example:resnet18"


def test_tensor_and_pipeline_parallel_rows_split_compute_and_show_the_1f1b_bubble(client):
    body = {"model": MINILM, "devices": [GPU], "batch": [24], "seq_len": 32, "tp": 2, "pp": 3}
    r = client.post("/v1/predict", json={**body, "phase": "infer"})
    assert r.status_code == 200, r.text
    (row,) = r.json()["predictions"]
    assert row["parallel"] == "6 GPUs: TP 2 x PP 3 (1f1b, 12 microbatches)" and row["microbatch"] == 2
    # 1F1B with 3 stages and 12 microbatches: the bubble is (p-1)/(m+p-1) = 2/14 of the step
    assert row["bubble_ms"] / row["value"] == pytest.approx(2 / 14, rel=1e-9)
    assert row["comm"]["tp"]["exposed_ms"] > 0 and row["comm"]["pp"]["exposed_ms"] > 0
    assert row["value"] == pytest.approx(row["compute_ms"] + row["comm_ms"] + row["bubble_ms"])
    # training: the optimizer step runs once per step, outside the pipeline: a little under 2/14
    (train,) = client.post("/v1/predict", json=body).json()["predictions"]
    assert train["phase"] == "train" and 0.99 * 2 / 14 < train["bubble_ms"] / train["value"] < 2 / 14


@pytest.mark.parametrize(("extra", "problem", "fix"), [
    ({"batch": [2], "gpus": 4, "parallel": "dp"}, "smaller than the data-parallel degree 4", '"batch" 4 or more'),
    ({"batch": [30], "gpus": 4, "parallel": "dp"}, "does not split evenly into 4 replicas", "multiple of 4"),
    ({"gpus": 16, "parallel": "dp"}, "16 GPUs per node", '"nodes" 2'),
    ({"gpus": 6, "tp": 4}, "6 GPUs are not a multiple of tp x pp = 4 x 1", '"gpus" 8'),
    ({"gpus": 4, "parallel": "tp"}, "modelled for transformers", '"parallel" dp'),
    ({"model": MINILM, "seq_len": 32, "gpus": 5, "parallel": "tp"}, "does not divide the 12 attention heads",
     "tp among 2, 3, 4"),
    ({"model": MINILM, "seq_len": 32, "gpus": 4, "parallel": "pp"}, "does not divide the 6 layers", "pp among 2, 3"),
    ({"gpus": 2, "tp": 2, "parallel": "dataparallel"}, "DataParallel runs in one process", '"parallel" dp'),
    ({"gpus": 2, "parallel": "dp", "microbatches": 4}, "microbatches without pipeline stages", '"pp"'),
    ({"nodes": 2}, "nodes describes a step on several GPUs", '"gpus"'),
    ({"memory": True}, "memory describes a step on several GPUs", "POST /v1/memory"),
    ({"gpus": 2, "parallel": "dp", "checkpoint": True}, "checkpoint changes only the memory", '"memory": true'),
    ({"gpus": 2, "parallel": "dp", "devices": [GPU, "l4"]}, "one GPU model at a time", "one GPU"),
    ({"gpus": 2, "parallel": "dp", "devices": []}, "one GPU model at a time", "one GPU"),
    ({"gpus": 2, "parallel": "dp", "predictors": ["rtx3090-amp-nchw-pt240.infer"]}, "not with named predictors",
     "one device"),
    ({"gpus": 2, "parallel": "dp", "energy": True}, "energy on several GPUs", "drop"),
    ({"gpus": 2, "parallel": "dp", "devices": ["xeon-gold-6226"]}, "not a GPU", "GET /v1/devices"),
    ({"tp": 4096, "pp": 4096}, "over this server's 4096", "fewer GPUs"),
    ({"gpus": 2, "parallel": "dp", "interconnect": "nvlink", "devices": ["l4"]}, "has no NVLink", "pcie"),
])
def test_a_layout_that_cannot_run_is_a_422_naming_the_fix(client, extra, problem, fix):
    body = {"model": "example:resnet18", "devices": [GPU], "batch": [32], **extra}
    jobs = client.app.state.service.sandbox.stats["jobs"]
    r = client.post("/v1/predict", json=body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert problem in err["message"] and fix in err["fix"], err
    assert "--" not in err["message"] + err["fix"]  # the API's field names, not the CLI's options
    assert client.app.state.service.sandbox.stats["jobs"] == jobs  # refused before any extraction


@pytest.mark.parametrize("extra", [
    {"gpus": 0}, {"gpus": 10**6}, {"gpus": "eight"}, {"gpus": 2.5}, {"gpus": [2]}, {"parallel": "mpi"}, {"parallel": 3},
    {"tp": -1}, {"pp": 0}, {"dp": 10**9}, {"microbatches": 0}, {"microbatches": 10**7}, {"schedule": "zb-v"},
    {"nodes": 0}, {"nodes": 10**4}, {"node": "x" * 1000}, {"interconnect": "ethernet"}, {"sequence_parallel": "maybe"},
    {"memory": {"a": 1}}, {"checkpoint": [True]},
])
def test_fields_out_of_bounds_are_refused_by_validation(client, extra):
    r = client.post("/v1/predict", json={"model": "example:resnet18", "devices": [GPU], "batch": [32], **extra})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["type"] == "InvalidRequest" and next(iter(extra)) in err["message"] and len(r.text) < 2000


def test_an_unknown_node_type_is_a_422(client):
    r = _predict(client, batch=[32], gpus=8, parallel="dp", node="dgx-nope")
    assert r.status_code == 422 and "dgx-nope" in r.json()["error"]["message"], r.text


def test_sixteen_gpus_over_two_nodes_add_the_network(client):
    one = _predict(client, batch=[64], gpus=8, parallel="dp").json()["predictions"][0]
    two = _predict(client, batch=[128], gpus=16, parallel="dp", nodes=2).json()["predictions"][0]
    assert two["parallel"] == "16 GPUs: DDP 16 on 2 nodes" and two["per_gpu_batch"] == one["per_gpu_batch"] == 8
    assert two["compute_ms"] == pytest.approx(one["compute_ms"])
    assert two["comm"]["dp"]["total_ms"] > one["comm"]["dp"]["total_ms"]  # the all-reduce crosses the network


def test_memory_per_gpu_on_the_rows(client):
    r = _predict(client, batch=[16], gpus=2, parallel="zero3", phase="infer", memory=True)
    assert r.status_code == 200, r.text
    (row,) = r.json()["predictions"]
    assert row["memory_per_gpu_bytes"] > 0 and row["memory_fits"] is True  # ResNet-18 inference on an A100
    # memory per GPU of the same layout from /v1/memory (the same simulation and sharding)
    m = client.post("/v1/memory", json={"model": "example:resnet18", "batch": [16], "phase": "infer", "gpus": 2,
                                        "parallel": "zero3", "device": GPU}).json()
    assert m["estimates"][0]["memory_per_gpu_bytes"] == row["memory_per_gpu_bytes"]
    # an ONNX graph has no backward pass: the step is answered, its memory is not, and the row says why
    r = _predict(client, batch=[16], gpus=2, parallel="zero3", memory=True)
    (row,) = r.json()["predictions"]
    assert row["value"] > 0 and "memory_per_gpu_bytes" not in row
    assert any("memory per GPU not simulated" in n and "PyTorch model" in n and '"phase" infer' in n
               for n in row["notes"]), row["notes"]
