"""POST /v1/compare through FastAPI's TestClient: the ranked GPUs, energy ranking, bad fields."""

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from perfseer.devices import get_device
from perfseer.serve.app import ServeConfig, create_app

GPUS = ["l4", "a10g", "h100-sxm", "rtx3090"]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = create_app(ServeConfig(jobs=1, job_time_s=300, cache_size=4,
                                 upload_dir=str(tmp_path_factory.mktemp("uploads"))))
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def by_energy(client):
    r = client.post("/v1/compare", json={"model": "example:resnet18", "batch": 8, "devices": GPUS, "energy": True,
                                         "rank_by": "energy"})
    assert r.status_code == 200, r.text
    return r.json()


def test_compare_ranks_the_asked_gpus_with_the_predict_rows(client):
    r = client.post("/v1/compare", json={"model": "example:resnet18", "batch": 8, "devices": GPUS})
    assert r.status_code == 200, r.text
    body = r.json()
    rows = body["rows"]
    assert sorted(x["device"] for x in rows) == sorted(GPUS)
    assert [x["rank"] for x in rows] == [1, 2, 3, 4]
    times = [x["value"] for x in rows]
    assert times == sorted(times) and all(t > 0 for t in times)
    for x in rows:
        assert x["throughput_per_s"] == pytest.approx(8 * 1000 / x["value"])
        assert x["basis"] and x["fits"] is None and x["memory_basis"] == "not asked"
        assert x["model"] == "example:resnet18"
    # the same step times /v1/predict answers for these devices at this precision
    p = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [8], "devices": GPUS,
                                         "precision": rows[0]["precision"]}).json()
    same = {get_device(q["device"]).name: q["value"] for q in p["predictions"]}
    for x in rows:
        assert x["value"] == pytest.approx(same[x["device"]])
    assert body["summary"]["model"] == "example:resnet18"


def test_energy_ranking_puts_the_least_energy_per_sample_first(by_energy):
    rows = by_energy["rows"]
    per_sample = [x["energy_j_per_sample"] for x in rows]
    assert per_sample == sorted(per_sample) and per_sample[0] > 0
    for x in rows:
        assert x["energy_j"] == pytest.approx(x["power_w"] * x["value"] / 1000, rel=1e-3)
        assert 0 <= x["util_pct"] <= 100
    # the energy order is not the time order on these GPUs (else the test would not tell them apart)
    assert [x["device"] for x in rows] != [x["device"] for x in sorted(rows, key=lambda x: x["value"])]


@pytest.mark.parametrize("body, words", [
    ({"model": "example:resnet18", "batch": 0}, "batch"),
    ({"model": "example:resnet18", "batch": [8]}, "batch"),
    ({"model": "example:resnet18", "phase": "fly"}, "phase"),
    ({"model": "example:resnet18", "rank_by": "price"}, "rank_by"),
    ({"model": "example:resnet18", "rank_by": "energy"}, "energy"),
    ({"model": "example:resnet18", "energy": True, "power_limit_w": -5}, "power_limit_w"),
    ({"model": "example:resnet18", "power_limit_w": 300}, "energy"),
    ({"model": "example:resnet18", "optimizer": "lion", "memory": True}, "optimizer"),
    ({"model": "example:resnet18", "devices": ["x" * 500]}, "devices"),
    ({"model": "example:resnet18", "devices": ["l4"] * 300}, "devices"),
    ({"model": "example:resnet18", "devices": ["no-such-gpu"]}, "no-such-gpu"),
    ({"model": "example:resnet18", "devices": ["i9-10940x"]}, "GPU"),
    ({"model": "/etc/passwd"}, "model"),
    ({"batch": 8}, "model"),
])
def test_bad_fields_are_422_in_the_error_format(client, body, words):
    r = client.post("/v1/compare", json=body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert set(err) == {"type", "message", "fix"} and err["message"]
    assert words.lower() in (err["message"] + " " + err["fix"]).lower()
    assert "/etc" not in err["message"]


NB201 = "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def test_memory_is_simulated_in_the_sandbox_and_marks_the_fit(client):
    client.post("/v1/compare", json={"model": NB201, "batch": 64, "phase": "train", "devices": ["l4", "a10g"]})
    jobs = client.get("/v1/health").json()["sandbox"]["jobs"]  # the graph is now cached
    r = client.post("/v1/compare", json={"model": NB201, "batch": 64, "phase": "train", "devices": ["l4", "a10g"],
                                         "memory": True, "optimizer": "sgd"})
    assert r.status_code == 200, r.text
    rows = r.json()["rows"]
    for x in rows:
        assert 0 < x["memory_gib"] < x["device_memory_gib"] and x["fits"] is True
        assert x["memory_basis"] and x["memory_basis"] != "not asked"
    assert client.get("/v1/health").json()["sandbox"]["jobs"] == jobs + 1  # the simulation ran as a sandbox job
