"""The service under abuse: references that name the host's files, oversized uploads and fields.

Every reference the service does not serve gets the same answer whatever exists on disk, no answer
shows a path of the host or anything of a file, and an upload over the limit is refused while it
streams (nothing past the limit is written, nothing of it kept)."""

import io
import json
import os
import stat

import pytest
from onnx import TensorProto, helper

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from perfseer.errors import ModelLoadError
from perfseer.serve.app import ServeConfig, create_app
from perfseer.serve.graphs import ModelStore
from perfseer.serve.limits import BodyLimit


def _tiny() -> bytes:
    node = helper.make_node("Relu", ["x"], ["y"])
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """Files an attacker would like to read: an ONNX graph and a HF config outside any served folder."""
    root = tmp_path_factory.mktemp("secret")
    (root / "x.onnx").write_bytes(_tiny())
    (root / "config.json").write_text(json.dumps({"model_type": "SECRET_TYPE", "architectures": ["os.system"]}))
    return root


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    uploads = tmp_path_factory.mktemp("uploads")
    app = create_app(ServeConfig(jobs=1, job_time_s=120, cache_size=2, max_upload_mb=0.05,
                                 upload_dir=str(uploads)))
    with TestClient(app) as c:
        c.uploads = uploads
        yield c


def _references(host):
    depth = "../" * 12
    return [f"example:{depth}{str(host / 'x')[1:]}", f"example:{host / 'x'}", "example:../examples/resnet18",
            "example:/etc/passwd", f"{host / 'x.onnx'}", f"{depth}{str(host / 'x.onnx')[1:]}", "/etc/passwd",
            f"hf:{host / 'config.json'}", f"hf:{host}", "hf:/etc/passwd", "hf:/nonexistent/config.json",
            "hf:./config.json", "timm:hf-hub:org/name", "timm:../../x", "torchvision:/etc/x",
            "upload:../../etc/passwd", "example:nope"]


def test_every_unserved_reference_gets_one_identical_answer(client, host):
    answers = set()
    for ref in _references(host):
        for endpoint in ("/v1/predict", "/v1/memory", "/v1/compare"):
            r = client.post(endpoint, json={"model": ref, "batch": 1 if endpoint == "/v1/compare" else [1]})
            assert r.status_code == 422, (ref, r.text)
            answers.add(json.dumps(r.json(), sort_keys=True))
            assert str(host) not in r.text and "SECRET_TYPE" not in r.text and "os.system" not in r.text
    assert len(answers) == 1, answers


def test_the_store_refuses_without_touching_the_disk(tmp_path, host):
    store = ModelStore(tmp_path / "up")
    messages = set()
    for ref in _references(host):
        with pytest.raises(ModelLoadError) as e:
            store.resolve(ref)
        messages.add(str(e.value))
    assert len(messages) == 1
    assert store.resolve("example:resnet18") == "example:resnet18"
    assert store.resolve("hf:gpt2@eager") == "hf:gpt2@eager"


def test_the_upload_folder_is_private(client):
    assert stat.S_IMODE(os.stat(client.uploads).st_mode) == 0o700


def test_an_upload_answer_shows_no_host_path(client):
    r = client.post("/v1/models", files={"file": ("../../a/b/t.onnx", io.BytesIO(_tiny()), "application/octet-stream")})
    assert r.status_code == 200, r.text
    assert r.json()["filename"] == "t.onnx" and str(client.uploads) not in r.text and "/tmp" not in r.text


def test_a_rejected_upload_is_deleted(client):
    before = set(os.listdir(client.uploads))
    r = client.post("/v1/models", files={"file": ("bad.onnx", io.BytesIO(b"\x08\x07garbage"), "application/octet-stream")})
    assert r.status_code == 422 and str(client.uploads) not in r.text
    assert set(os.listdir(client.uploads)) == before


def test_an_oversized_upload_is_refused_while_it_streams(client):
    r = client.post("/v1/models", files={"file": ("big.onnx", io.BytesIO(b"\0" * 2**20), "application/octet-stream")})
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]
    assert not [n for n in os.listdir(client.uploads) if n.startswith(".incoming")]


def test_an_oversized_upload_is_refused_before_anything_is_written(client, monkeypatch):
    """A declared length over the limit: refused before the route runs, so no file is ever opened."""
    store = client.app.state.service.store
    calls = []
    monkeypatch.setattr(store, "add_upload", lambda chunks: calls.append(1))
    before = set(os.listdir(client.uploads))
    r = client.post("/v1/models", files={"file": ("big.onnx", io.BytesIO(b"\0" * 2**20), "application/octet-stream")})
    assert r.status_code == 413 and r.json()["error"]["type"] == "PayloadTooLarge"
    assert calls == [] and set(os.listdir(client.uploads)) == before


@pytest.mark.parametrize("body, content_type", [
    # a multipart body cut off before its closing boundary (the client went away mid-upload)
    (b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="a.onnx"\r\n'
     b'Content-Type: application/octet-stream\r\n\r\n' + _tiny()[:20], "multipart/form-data; boundary=xyz"),
    (b"garbage", "multipart/form-data; boundary=xyz"),
    (b"garbage", "multipart/form-data"),
    (_tiny(), "application/octet-stream"),
])
def test_a_truncated_or_broken_upload_body_is_refused_and_nothing_kept(client, body, content_type):
    before = set(os.listdir(client.uploads))
    r = client.post("/v1/models", content=body, headers={"content-type": content_type})
    assert 400 <= r.status_code < 500, r.text
    err = r.json()["error"]
    assert err["message"] and "Traceback" not in r.text and str(client.uploads) not in r.text
    assert set(os.listdir(client.uploads)) == before


def test_a_truncated_onnx_upload_is_refused_and_deleted(client):
    before = set(os.listdir(client.uploads))
    r = client.post("/v1/models", files={"file": ("t.onnx", io.BytesIO(_tiny()[:-7]), "application/octet-stream")})
    assert r.status_code == 422, r.text
    assert set(os.listdir(client.uploads)) == before


@pytest.mark.parametrize("body", [
    b'{"model": ', b"[1, 2]", b'"x"', b"null", b"\xff\xfe", b"", b'{"model": "example:resnet18", "batch": "x"}',
    b'{"model": "example:resnet18", "batch": [1e400]}', b'{"model": {"a": 1}}', b'{"model": "example:resnet18",,}',
    b"[" * 100_000 + b"]" * 100_000,  # nested past the JSON parser's depth
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
])
@pytest.mark.parametrize("endpoint", ["/v1/predict", "/v1/memory", "/v1/compare"])
def test_malformed_json_gets_one_json_error(client, endpoint, body):
    r = client.post(endpoint, content=body, headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500, r.text
    err = r.json()["error"]  # the documented error format, whatever part of the stack refused it
    assert set(err) == {"type", "message", "fix"} and err["message"] and len(r.text) < 2000


def test_unknown_paths_and_methods_get_the_json_error_format(client):
    for r, status in ((client.get("/v1/nowhere"), 404), (client.get("/v1/predict"), 405)):
        assert r.status_code == status and set(r.json()["error"]) == {"type", "message", "fix"}


def test_a_chunked_body_is_cut_at_the_limit():
    """A body without Content-Length: the application never receives the bytes past the limit."""
    import asyncio

    got = []

    async def app(scope, receive, send):
        while True:
            m = await receive()
            if m["type"] != "http.request":
                break
            got.append(len(m["body"]))
            if not m.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    chunks = [{"type": "http.request", "body": b"\0" * 1000, "more_body": True} for _ in range(100)]
    sent = []

    async def receive():
        return chunks.pop(0)

    async def send(m):
        sent.append(m)

    guard = BodyLimit(app, limit_for=lambda path: 4500, message=lambda limit: ("too large", "smaller"))
    asyncio.run(guard({"type": "http", "path": "/v1/models", "headers": []}, receive, send))
    assert sum(got) <= 4500 and sent[0]["status"] == 413 and len(chunks) >= 90


@pytest.mark.parametrize("payload", [
    {"model": "example:resnet18", "dims": {f"d{i}": 1 for i in range(100_000)}},
    {"model": "example:resnet18", "dims": {"x" * 10_000: 1}},
    {"model": "example:resnet18", "dims": {"N": 10**30}},
    {"model": "example:resnet18", "batch": list(range(1, 10_000))},
    {"model": "space:" + "x" * 100_000},
    {"model": "example:resnet18", "input_shape": "3x" * 10_000 + "3"},
    {"model": "example:resnet18", "predictors": ["p" * 10_000]},
])
def test_huge_fields_are_refused(client, payload):
    r = client.post("/v1/predict", json=payload)
    assert r.status_code in (413, 422), r.text
    assert len(r.text) < 2000  # the field is not echoed back


def test_a_huge_json_body_is_refused(client):
    r = client.post("/v1/predict", content=b'{"model": "' + b"x" * (2 << 20) + b'"}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_hf_builds_only_known_model_classes():
    pytest.importorskip("transformers")
    from perfseer.sources.hf import HFReference, _model_class

    ref = HFReference("x", {"model_type": "gpt2", "architectures": ["AutoTokenizer"]}, "local")
    with pytest.raises(ModelLoadError, match="not a model class"):
        _model_class(ref, None)
    ref = HFReference("x", {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "local")
    assert _model_class(ref, None).__name__ == "GPT2LMHeadModel"


def test_rebinding_runs_in_the_sandbox_and_is_bounded(client):
    svc = client.app.state.service
    one = ["rtx3090-amp-nchw-pt240.infer"]  # one predictor: one extraction, one graph to re-bind
    r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [1], "predictors": one})
    assert r.status_code == 200, r.text
    jobs = svc.sandbox.stats["jobs"]
    r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [3, 5], "predictors": one})
    assert r.status_code == 200, r.text
    assert svc.sandbox.stats["jobs"] == jobs + 1  # one job re-bound both batch sizes
    assert {x["batch_size"] for x in r.json()["predictions"]} == {3, 5}
    budget = svc.config.max_bind_nodes
    svc.config.max_bind_nodes = 10
    try:
        r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [7, 9]})
    finally:
        svc.config.max_bind_nodes = budget
    assert r.status_code == 422 and "budget" in r.json()["error"]["message"]


def test_a_stalled_body_is_dropped_with_408():
    import asyncio

    async def app(scope, receive, send):
        while (await receive())["type"] == "http.request":
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sent = []

    async def receive():
        await asyncio.sleep(30)  # a client that never sends its body

    async def send(m):
        sent.append(m)

    guard = BodyLimit(app, limit_for=lambda path: 10**6, message=lambda limit: ("too large", "smaller"), timeout_s=0.05)
    asyncio.run(guard({"type": "http", "path": "/v1/predict", "headers": []}, receive, send))
    assert sent[0]["status"] == 408 and b"stalled" in sent[1]["body"]


def test_a_connection_whose_headers_stall_is_closed():
    """A slow-loris client (half a request line, then nothing) loses its connection; a whole
    request on another connection is answered."""
    import asyncio
    import socket
    import threading

    uvicorn = pytest.importorskip("uvicorn")
    from perfseer.serve.http import header_timeout_protocol

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="off",
                            http=header_timeout_protocol(0.3))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            threading.Event().wait(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=20) as slow:
            slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the headers never end
            assert slow.recv(1024) == b""  # closed by the server (a hang would time out the socket)
        with socket.create_connection(("127.0.0.1", port), timeout=20) as fine:
            fine.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert fine.recv(1024).startswith(b"HTTP/1.1 200")
    finally:
        server.should_exit = True
        thread.join(10)
