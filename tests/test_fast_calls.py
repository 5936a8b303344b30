"""Fast repeat calls: cards loaded once per process, thread pools sized to the call, the graph cache
bounded and switchable, and the warm process of ``perfseer predict`` answering what the calling
process would."""

import json
import os
import shutil
import threading
import time
import warnings

import pytest

from perfseer.cli import warm
from perfseer.cli.main import main
from perfseer.data.dataset import SkeletonCache
from perfseer.errors import PerfseerError
from perfseer.runtime import predictor as rp
from perfseer.runtime import route, threads

NB201 = "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def test_a_card_is_loaded_once_and_again_when_its_file_changes(tmp_path):
    a = rp.cached_predictor("nb201-gpus.infer")
    assert rp.cached_predictor("nb201-gpus.infer") is a
    for suffix in (".json", ".safetensors"):
        shutil.copy(rp.BUNDLED / f"nb201-gpus.infer{suffix}", tmp_path / f"mine{suffix}")
    card = tmp_path / "mine.json"
    b = rp.cached_predictor(card)
    assert b is not a and rp.cached_predictor(str(card)) is b
    data = json.loads(card.read_text())
    data["name"] = "mine-renamed"
    card.write_text(json.dumps(data))
    os.utime(card, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))  # a newer file, whatever the clock's grain
    c = rp.cached_predictor(card)
    assert c is not b and c.name == "mine-renamed"
    assert sum(1 for k in rp._LOADED if k[0] == str(card.resolve())) == 1  # the old version is dropped


def test_the_routing_lists_cards_without_copying_them_and_users_get_copies():
    listed = rp.listed_predictors()
    assert [c["name"] for c in listed] == [c["name"] for c in rp.list_predictors()]
    assert rp.listed_predictors()[0] is listed[0]
    mine = rp.list_predictors()
    mine[0]["name"] = "changed"
    assert rp.listed_predictors()[0]["name"] != "changed"


def test_a_small_call_runs_on_one_thread_and_gives_the_setting_back(monkeypatch):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with threads.limited(4):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with monkeypatch.context() as m:
            m.setattr(threads, "idle_cores", lambda: 8)
            with threads.limited(1000):  # never more than the caller had
                assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert threads.threads_for(1) == 1 and threads.usable_cores() >= 1
    monkeypatch.setattr(os, "getloadavg", lambda: (50.0, 50.0, 50.0))
    assert threads.idle_cores() == 1  # a busy machine: one


def test_the_graph_cache_keeps_the_most_recently_used_within_its_bound(tmp_path):
    cache = SkeletonCache(tmp_path)
    for i, name in enumerate("abcd"):
        (tmp_path / f"{name}.onnx").write_bytes(b"x" * 1000)
        os.utime(tmp_path / f"{name}.onnx", (1000 + i, 1000 + i))
    os.utime(tmp_path / "a.onnx", (5000, 5000))  # used last
    assert cache.prune(2500) == 2
    assert sorted(p.name for p in tmp_path.glob("*.onnx")) == ["a.onnx", "d.onnx"]


def test_no_cache_exports_again(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFSEER_CACHE", str(tmp_path))
    calls = []
    real = route.load_skeleton
    monkeypatch.setattr(route, "load_skeleton", lambda *a, **k: calls.append(a) or real(*a, **k))
    pytest.importorskip("torchvision")
    for _ in range(2):
        route.cached_extract("torchvision:squeezenet1_0", 1)
    assert len(calls) == 1  # the first call exported and kept it, the second read it
    assert len(list((tmp_path / "skeletons").glob("*.onnx"))) == 1
    plain = []
    monkeypatch.setattr(route, "extract", lambda *a, **k: plain.append(a) or "exported")
    assert route.cached_extract("torchvision:squeezenet1_0", 1, cache=False) == "exported"
    assert len(calls) == 1 and len(plain) == 1  # no cache: exported again, the cache not read


@pytest.fixture
def warm_process(monkeypatch, tmp_path):
    """A warm process of this environment, serving from a thread of this test process."""
    folder = tmp_path / "w"
    monkeypatch.setenv("PERFSEER_WARM", "1")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("PERFSEER_CACHE", str(folder))
    monkeypatch.setattr(warm, "_warm_up", lambda: None)  # the cards load on the first question instead
    started = []
    monkeypatch.setattr(warm, "start", lambda paths: started.append(paths))
    sock = warm._paths(warm.key())["socket"]
    assert warm._private(sock.parent)
    cwd = os.getcwd()
    t = threading.Thread(target=warm.serve, args=(sock, 60.0), daemon=True)
    t.start()
    for _ in range(200):
        if sock.exists():
            break
        time.sleep(0.05)
    yield sock, started
    warm.stop()
    t.join(10)
    os.chdir(cwd)
    assert not t.is_alive() and not sock.exists()


def test_the_warm_process_answers_what_this_process_would(warm_process, capsys):
    _, started = warm_process
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local, _ = warm.local_rows({"model": NB201, "device": ["a100-40gb"], "batch": [1, 8]})
    answered, _ = warm.predict_rows({"model": NB201, "device": ["a100-40gb"], "batch": [1, 8]})
    assert answered == json.loads(json.dumps(local))
    assert not started  # it answered: nothing new started
    assert main(["predict", NB201, "--device", "a100-40gb", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["predictions"][0]["batch_size"] == 1
    # a refusal comes back as the same error, with its fix
    with pytest.raises(PerfseerError, match="unknown device 'nosuch'.*perfseer devices"):
        warm.predict_rows({"model": NB201, "device": ["nosuch"], "batch": [1]})
    assert main(["predict", NB201, "--device", "nosuch"]) == 2
    assert "unknown device" in capsys.readouterr().err


def test_without_a_warm_process_the_call_answers_itself_and_starts_one(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFSEER_WARM", "1")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("PERFSEER_CACHE", str(tmp_path))
    started = []
    monkeypatch.setattr(warm, "start", lambda paths: started.append(paths))
    rows, _ = warm.predict_rows({"model": NB201, "device": ["a100-40gb"], "batch": [1]})
    assert rows[0]["value"] > 0 and len(started) == 1
    assert oct(os.stat(started[0]["socket"].parent).st_mode & 0o777) == "0o700"
    monkeypatch.setenv("PERFSEER_WARM", "0")  # off: nothing started
    warm.predict_rows({"model": NB201, "device": ["a100-40gb"], "batch": [1]})
    assert len(started) == 1


def test_a_folder_others_can_write_to_is_not_used(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFSEER_WARM", "1")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("PERFSEER_CACHE", str(tmp_path))
    (tmp_path / "warm").mkdir(mode=0o777)
    os.chmod(tmp_path / "warm", 0o777)
    started = []
    monkeypatch.setattr(warm, "start", lambda paths: started.append(paths))
    rows, _ = warm.predict_rows({"model": NB201, "device": ["a100-40gb"], "batch": [1]})
    assert rows and not started


def test_the_key_follows_the_environment(monkeypatch):
    monkeypatch.delenv("PERFSEER_PREDICTORS", raising=False)
    a = warm.key()
    monkeypatch.setenv("PERFSEER_PREDICTORS", "/somewhere")
    assert warm.key() != a
    monkeypatch.setenv("PERFSEER_WARM_IDLE", "5")  # how long it waits changes no answer
    monkeypatch.delenv("PERFSEER_PREDICTORS")
    assert warm.key() == a
