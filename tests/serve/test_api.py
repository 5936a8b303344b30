"""The REST API through FastAPI's TestClient (no network): bundled example graphs, bad input."""

import io

import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from perfseer.serve.app import ServeConfig, create_app  # noqa: E402

P3090 = "rtx3090-amp-nchw-pt240.infer"
P4090 = "rtx4090-amp-nchw-pt291.infer"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    models = tmp_path_factory.mktemp("served")
    (models / "nets").mkdir()
    (models / "nets" / "tiny.onnx").write_bytes(_tiny_conv())
    app = create_app(ServeConfig(jobs=1, job_time_s=300, cache_size=4, max_upload_mb=1, models_dir=str(models),
                                 upload_dir=str(tmp_path_factory.mktemp("uploads"))))
    with TestClient(app) as c:
        yield c


def _tiny_conv(channels: int = 8) -> bytes:
    w = helper.make_tensor("w", TensorProto.FLOAT, [channels, 3, 3, 3], [0.0] * (channels * 27))
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels, 32, 32])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_predict_returns_the_cli_rows_with_throughput(client):
    r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [1, 8, 32], "predictors": [P3090, P4090]})
    assert r.status_code == 200, r.text
    body = r.json()
    rows = body["predictions"]
    assert {(x["predictor"], x["batch_size"]) for x in rows} == {(p, b) for p in (P3090, P4090) for b in (1, 8, 32)}
    for x in rows:
        assert x["metric"] == "latency_ms" and x["value"] > 0
        assert x["throughput_per_s"] == pytest.approx(x["batch_size"] * 1000 / x["value"])
    assert body["summary"]["params"] == pytest.approx(11.69e6, rel=0.01)


def test_the_same_graph_is_extracted_once(client):
    client.post("/v1/predict", json={"model": "example:mobilenet_v3_small", "batch": [1], "predictors": [P3090]})
    r = client.post("/v1/predict", json={"model": "example:mobilenet_v3_small", "batch": [4], "predictors": [P3090]})
    assert r.json()["cached"] is True


def test_a_request_whose_predictors_extract_one_way_extracts_once(client):
    from perfseer.graph.extract import weight_work_enabled
    from perfseer.runtime.predictor import load_predictor

    svc = client.app.state.service
    i9 = next(n for n in svc.predictor_names() if load_predictor(n).weight_work)  # the card that keeps weight work
    assert not weight_work_enabled()  # the server's default folds it: the i9 card extracts the other way
    misses = svc.graphs.misses
    r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [1], "predictors": [i9],
                                         "input_shape": "3x160x160"})
    assert r.status_code == 200, r.text
    assert svc.graphs.misses == misses + 1 and r.json()["cached"] is False  # one extraction, the card's way
    assert {x["predictor"] for x in r.json()["predictions"]} == {i9}
    # the default and the folded setting name the same graph: one cache entry for both
    r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [1], "predictors": [P3090],
                                         "input_shape": "3x160x160"})
    r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [1], "devices": ["rtx3090/amp-nchw-pt112"],
                                         "phase": "train", "input_shape": "3x160x160"})
    assert svc.graphs.misses == misses + 2 and r.json()["cached"] is True


def test_device_and_phase_filters(client):
    r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [2], "phase": "train",
                                         "devices": ["rtx3090/amp-nchw-pt112"]})
    rows = r.json()["predictions"]
    assert rows and all(x["phase"] == "train" and x["device"] == "rtx3090/amp-nchw-pt112" for x in rows)


@pytest.mark.parametrize("payload, status, words", [
    ({"model": "timm_typo:resnet50", "batch": [1]}, 422, "unknown model reference kind"),
    ({"model": "/etc/passwd", "batch": [1]}, 422, "does not serve that model"),
    ({"model": "../../etc/passwd.onnx", "batch": [1]}, 422, "does not serve that model"),
    ({"model": "example:nope", "batch": [1]}, 422, "does not serve that model"),
    ({"model": "example:resnet18", "batch": [0]}, 422, "batch sizes must lie"),
    ({"model": "example:resnet18", "batch": list(range(1, 40))}, 422, "at most 32"),
    ({"model": "example:resnet18", "batch": "many"}, 422, "valid list"),
    ({"model": "example:resnet18", "batch": [1], "predictors": ["nope"]}, 404, "no predictor named"),
    ({"model": "example:resnet18", "batch": [1], "phase": "both"}, 422, "neither infer nor train"),
    ({"model": "example:resnet18", "batch": [1], "input_shape": "abc"}, 422, "cannot read input shape"),
])
def test_bad_requests_are_json_errors_with_a_4xx(client, payload, status, words):
    r = client.post("/v1/predict", json=payload)
    assert r.status_code == status
    err = r.json()["error"]
    assert words in err["message"] and err["type"]


def test_a_served_folder_file_by_relative_path(client):
    r = client.post("/v1/predict", json={"model": "nets/tiny.onnx", "batch": [1, 2], "predictors": [P3090]})
    assert r.status_code == 200, r.text
    assert r.json()["summary"]["macs"] == 8 * 3 * 9 * 32 * 32


def test_upload_then_predict_by_digest(client):
    r = client.post("/v1/models", files={"file": ("tiny.onnx", io.BytesIO(_tiny_conv()), "application/octet-stream")})
    assert r.status_code == 200, r.text
    ref = r.json()["model"]
    assert ref.startswith("upload:") and r.json()["summary"]["params"] == 216
    r = client.post("/v1/predict", json={"model": ref, "batch": [1], "predictors": [P3090]})
    assert r.status_code == 200 and r.json()["cached"] is True


def test_a_broken_upload_names_the_problem_without_server_paths(client):
    r = client.post("/v1/models", files={"file": ("bad.onnx", io.BytesIO(b"\x08\x07garbage"), "application/octet-stream")})
    assert r.status_code == 422
    msg = r.json()["error"]["message"]
    assert "upload:" in msg and "/tmp" not in msg


def test_an_upload_over_the_limit_is_413(client):
    r = client.post("/v1/models", files={"file": ("big.onnx", io.BytesIO(b"\0" * (2 * 2**20)), "application/octet-stream")})
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]


def test_listing_endpoints_and_the_page(client):
    names = [p["name"] for p in client.get("/v1/predictors").json()]
    assert P3090 in names and P4090 in names
    # the learned memory fallback cards answer through /v1/memory, not as latency predictors
    assert not any(n.startswith("memory-sim") for n in names)
    devices = {d["name"]: d for d in client.get("/v1/devices").json()}
    assert "rtx3090/amp-nchw-pt240" in devices["rtx3090"]["settings"] and P3090 in devices["rtx3090"]["predictors"]
    assert devices["h100-sxm"]["memory_gib"] == 80 and devices["h100-sxm"]["predictors"] == []
    assert client.get("/v1/models", params={"q": "example:res"}).json()[:2] == ["example:resnet18", "example:resnet50"]
    health = client.get("/v1/health").json()
    assert health["status"] == "ok" and health["cache"]["entries"] >= 1
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    assert client.get("/static/plot.js").status_code == 200
    assert "/v1/predict" in client.get("/openapi.json").json()["paths"]


def test_without_a_served_folder_no_path_is_read(tmp_path):
    from perfseer.errors import ModelLoadError
    from perfseer.serve.graphs import ModelStore

    store = ModelStore(tmp_path / "up")
    assert store.resolve("timm:resnet50") == "timm:resnet50"
    for path in ("/etc/passwd", "model.onnx", str(tmp_path / "up")):
        with pytest.raises(ModelLoadError, match="does not serve that model"):
            store.resolve(path)
    with pytest.raises(ModelLoadError, match="no uploaded model"):
        store.resolve("upload:" + "0" * 64)
    with pytest.raises(ModelLoadError, match="does not serve that model"):
        store.resolve("upload:../../etc/passwd")


NB201 = "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def test_memory_of_a_training_step_with_the_largest_batch(client):
    r = client.post("/v1/memory", json={"model": NB201, "batch": [1, 64], "phase": "train", "optimizer": "sgd",
                                        "device": "a100-40gb-sxm", "max_batch": True})
    assert r.status_code == 200, r.text
    body = r.json()
    small, big = body["estimates"]
    assert small["method"] == "simulation" and small["fits"] is True
    assert big["breakdown"]["activations"] > small["breakdown"]["activations"] > 0
    assert sum(big["breakdown"].values()) == big["total"]
    assert body["max_batch"]["batch"] > 64
    again = client.post("/v1/memory", json={"model": NB201, "batch": [1, 64], "phase": "train", "optimizer": "sgd",
                                            "device": "a100-40gb-sxm", "max_batch": True})
    assert again.json()["cached"] is True and again.json()["estimates"] == body["estimates"]


def test_memory_errors_are_json(client):
    r = client.post("/v1/memory", json={"model": "example:resnet18", "batch": [4], "phase": "train"})
    assert r.status_code == 422 and "ONNX graph has no backward pass" in r.json()["error"]["message"]
    r = client.post("/v1/memory", json={"model": NB201, "batch": [4], "device": "no-such-gpu"})
    assert r.status_code == 422 and r.json()["error"]["type"] == "UnknownDeviceError"
    r = client.post("/v1/memory", json={"model": NB201, "batch": [4], "max_batch": True})
    assert r.status_code == 422 and "needs a device" in r.json()["error"]["message"]


def test_any_registered_device_through_the_spec_model(client):
    r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [1, 32], "devices": ["h100-sxm", "l4"],
                                         "precision": "fp32"})
    assert r.status_code == 200, r.text
    rows = r.json()["predictions"]
    assert {(x["batch_size"], x["basis"].split()[0]) for x in rows} >= {(1, "spec"), (32, "spec")}
    by = {(x["device"], x["batch_size"]): x["value"] for x in rows}
    assert len(by) == 4 and all(v > 0 for v in by.values())
    r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [1], "devices": ["no-such-gpu"]})
    assert r.status_code == 422 and r.json()["error"]["type"] == "UnknownDeviceError"


def test_a_repeated_request_is_answered_from_the_row_cache(client):
    ask = {"model": "example:resnet18", "batch": [3, 5], "predictors": [P3090, P4090]}
    first = client.post("/v1/predict", json=ask).json()
    again = client.post("/v1/predict", json=ask).json()
    assert first["row_cache"] == {"hits": 0, "misses": 4} and again["row_cache"] == {"hits": 4, "misses": 0}
    assert again["predictions"] == first["predictions"]
    svc = client.app.state.service
    pg, _ = svc.graphs.get("example:resnet18")
    direct = svc.predictor(P4090).predict(pg, batch=[3, 5])
    assert [r["value"] for r in first["predictions"] if r["predictor"] == P4090] == pytest.approx(
        [r["value"] for r in direct], rel=1e-6)
    part = client.post("/v1/predict", json=dict(ask, batch=[5, 6, 5])).json()  # one new batch size, one repeated
    assert part["row_cache"] == {"hits": 2, "misses": 2}
    assert [r["batch_size"] for r in part["predictions"]] == [5, 6, 5, 5, 6, 5]
    assert client.get("/v1/health").json()["row_cache"]["hits"] >= 6


def test_misses_bind_each_batch_once_and_run_each_network_once(client, monkeypatch):
    from perfseer.features.perfgraph import PerfGraph
    from perfseer.models.seernet import SeerNetTrunk
    from perfseer.runtime.monotone import ladder
    from perfseer.runtime.predictor import Predictor, card_weight_work, load_predictor

    binds, forwards, trunks = [], [], []
    with_batch, predict = PerfGraph.with_batch, Predictor.predict_with_embeddings
    trunk = SeerNetTrunk.states  # every pass through a trunk (forward, or a sum readout's states)
    monkeypatch.setattr(PerfGraph, "with_batch", lambda self, b: binds.append(b) or with_batch(self, b))
    monkeypatch.setattr(Predictor, "predict_with_embeddings",
                        lambda self, graphs: forwards.append((self.name, len(graphs))) or predict(self, graphs))
    monkeypatch.setattr(SeerNetTrunk, "states", lambda self, data, *a, **k: trunks.append(data.num_graphs)
                        or trunk(self, data, *a, **k))
    svc = client.app.state.service
    jobs, run = [], svc.sandbox.run
    monkeypatch.setattr(svc.sandbox, "run", lambda fn, *a, **k: jobs.append((fn.__name__, a[1:])) or run(fn, *a, **k))
    r = client.post("/v1/predict", json={"model": "example:mobilenet_v3_small", "batch": [9, 10, 11]}).json()
    names = svc.predictor_names()
    # once per batch size for every predictor that extracts the same way (the i9 card keeps the work
    # on weights, the others fold it: two graphs, each bound once per batch size), in the sandbox:
    # nothing is re-bound in the server process
    settings = {card_weight_work(load_predictor(n).card) for n in names}
    assert binds == []
    # with the powers of two the batch envelope reads (perfseer.runtime.monotone): 2, 4, 8, 16
    asked = [b for b in ladder([9, 10, 11]) if b != 1]
    assert [a for name, a in jobs if name == "bind_job"] == [(asked,)] * len(settings)
    n = len(asked) + 1
    assert sorted(forwards) == sorted((p, n) for p in names)  # one call per predictor, all its devices and phases
    # and one pass through each network's trunk for the predictions and the domain embeddings together
    # (a blend card, the RTX 3090's, has one trunk per SeerNet member)
    per_card = [sum(isinstance(m, SeerNetTrunk) for m in load_predictor(n).net.model.modules()) for n in names]
    assert min(per_card) >= 1 and trunks == [n] * sum(per_card)
    # every predictor answers, or refuses with the reason: the cards of 32x32 inputs (NAS-Bench-201
    # cells, the EPYC's) do not answer for a 224x224 ImageNet model, which is outside their model space
    answered = {x["predictor"] for x in r["predictions"]}
    refused = {n for n in names if any(w.startswith(f"{n}:") and "model space" in w for w in r["warnings"])}
    assert answered | refused == set(names) and not answered & refused
    assert "nb201-gpus.infer" in refused and "rtx3090-amp-nchw-pt240.infer" in answered


def test_a_served_file_replaced_in_place_is_extracted_again(client):
    folder = client.app.state.service.store.models_dir / "nets"
    (folder / "swap.onnx").write_bytes(_tiny_conv(8))
    ask = {"model": "nets/swap.onnx", "batch": [2], "predictors": [P3090]}
    a = client.post("/v1/predict", json=ask).json()
    (folder / "swap.onnx").write_bytes(_tiny_conv(16))
    b = client.post("/v1/predict", json=ask).json()
    assert b["cached"] is False and b["row_cache"]["hits"] == 0
    assert b["summary"]["macs"] == 2 * a["summary"]["macs"]
    assert client.post("/v1/predict", json=ask).json()["row_cache"] == {"hits": 1, "misses": 0}


def test_row_cache_bound_and_graph_eviction():
    from perfseer.serve.graphs import GraphCache
    from perfseer.serve.rows import RowCache

    rows = RowCache(size=3)
    for b in range(5):
        rows.put((1, b, "u"), [{"batch_size": b}], [])
    assert len(rows) == 3 and rows.get((1, 0, "u")) is None and rows.get((1, 4, "u"))[0] == ({"batch_size": 4},)
    rows.put((2, 1, "u"), [], ["w"])
    rows.drop_graph(1)
    assert len(rows) == 1 and rows.get((2, 1, "u")) == ((), ("w",))
    assert RowCache(size=0).put((1, 1, "u"), [], []) is None and len(RowCache(size=0)) == 0

    class Store:
        def resolve(self, model):
            return model

        def version(self, target):
            return ""

    class Sandbox:
        def run(self, fn, model, *args, wait_s=None):
            return f"graph of {model}"

    dropped = []
    graphs = GraphCache(Sandbox(), Store(), size=1, on_evict=dropped.append)
    a, _ = graphs.entry("a")
    b, cached = graphs.entry("b")
    assert dropped == [a.token] and a.token != b.token and not cached
    again, _ = graphs.entry("a")  # extracted again: a new token, so no old row can answer for it
    assert again.token not in (a.token, b.token) and dropped == [a.token, b.token]


def test_serve_refuses_a_negative_row_cache(capsys):
    from helpers import run_cli

    code, _, err = run_cli(capsys, "serve", "--row-cache", "-1")
    assert code == 2 and "--row-cache: expected a whole number >= 0, got '-1'" in err


def test_a_predictor_trained_with_weight_work_answers_from_its_own_extraction(client, monkeypatch):
    """A card whose training graphs kept the work on weights gets the model extracted that way; the
    others keep the default extraction (neither is then out of domain for the extraction)."""
    import copy

    from perfseer.runtime.predictor import Predictor

    svc = client.app.state.service
    real = svc.predictor(P4090)
    kept = Predictor(dict(copy.deepcopy(real.card), extraction={"weight_work": True}), real.net, real.name)
    kept.domain_embeddings = real.domain_embeddings
    monkeypatch.setitem(svc._predictors, P4090, kept)
    r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [2], "predictors": [P3090, P4090]})
    assert r.status_code == 200, r.text
    rows = r.json()["predictions"]
    assert {x["predictor"] for x in rows} == {P3090, P4090}
    assert not any("work on weights" in reason for x in rows for reason in x["domain_reasons"])
    settings = [k[-1] for k in svc.graphs._items if "resnet18" in str(k[0])]
    assert False in settings and True in settings  # two extractions of the model, the default (named) and the card's


def test_predict_with_energy_on_gpus_and_a_note_for_a_cpu(client):
    r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [4], "devices": ["l4", "epyc-vm"],
                                         "precision": "fp32", "energy": True})
    assert r.status_code == 200, r.text
    rows = {p["device"]: p for p in r.json()["predictions"] if p.get("metric") == "latency_ms"}
    gpu = rows["l4"]
    assert gpu["energy_j"] == pytest.approx(gpu["power_w"] * gpu["value"] / 1000, rel=1e-3)
    assert gpu["energy_j_per_sample"] == pytest.approx(gpu["energy_j"] / 4, rel=1e-3) and 0 <= gpu["util_pct"] <= 100
    cpu = [p for d, p in rows.items() if d != "l4"]
    assert all("power_w" not in p for p in cpu)
    r = client.post("/v1/predict", json={"model": "example:resnet18", "devices": ["l4"], "energy": True,
                                         "power_limit_w": -5})
    assert r.status_code == 422 and "power_limit_w" in r.json()["error"]["message"]
