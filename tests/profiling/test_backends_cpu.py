"""The CPU backends for real, on tiny models: ONNX Runtime in-process, PyTorch through a worker
(the fork path, as a collection runs it)."""

from __future__ import annotations

import onnx
import pytest

from helpers import conv_model
from perfseer.profiling.backends import create_backend
from perfseer.profiling.backends.base import RssProbe, is_oom
from perfseer.profiling.jobs import Job
from perfseer.profiling.protocol import Protocol
from perfseer.sources.space import space_ref
from perfseer.profiling.worker import Worker

FAST = Protocol(warmup_reps=1, warmup_s=0.0, min_reps=6, max_reps=30, time_cap_s=1.0).to_dict()
TINY = {"v": 1, "stem": 8, "act": "relu", "classes": 10, "stages": [
    {"style": "vgg", "depth": 1, "width": 8, "down": "first", "kernel": 3},
    {"style": "mobilenet", "depth": 1, "width": 16, "down": "first", "expand": 2, "kernel": 3, "se": True},
    {"style": "resnet", "depth": 1, "width": 16, "down": "last", "block": "bottleneck", "mid": 8, "groups": 2},
    {"style": "densenet", "depth": 2, "width": 24, "down": "last", "growth": 4, "bn_size": 2}]}


def test_ort_measures_an_onnx_file(tmp_path):
    path = tmp_path / "conv.onnx"
    model = conv_model(batch="N", hw=16, with_fc=True)
    model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    model.ir_version = 9  # what any onnxruntime reads
    onnx.save(model, path)
    b = create_backend("ort-cpu", threads=1, protocol=FAST)
    try:
        m = b.measure(str(path), (3, 16, 16), 4, "infer")
        assert m.status == "ok", m.error
        assert m.latency_ms > 0 and m.timing["reps"] >= 6
        assert m.memory_mb is not None and m.memory_mb >= 0
        assert 0 <= m.util_pct <= 100
        assert m.extra["threads"] == 1
        train = b.measure(str(path), (3, 16, 16), 4, "train")
        assert train.status == "unsupported" and "train" in train.error
        assert b.measure(str(path), (3, 16, 16), 4, "infer", "amp_bf16").status == "unsupported"
        missing = b.measure(str(tmp_path / "nope.onnx"), (3, 16, 16), 1, "infer")
        assert missing.status == "error"
    finally:
        b.close()


def test_ort_exports_a_space_model_once(tmp_path):
    b = create_backend("ort-cpu", threads=1, protocol=FAST, cache_dir=str(tmp_path))
    ref = space_ref(TINY)
    m1 = b.measure(ref, (3, 32, 32), 1, "infer")
    m2 = b.measure(ref, (3, 32, 32), 3, "infer")  # the same file, another batch (dynamic axis)
    assert m1.status == m2.status == "ok", (m1.error, m2.error)
    assert len(list(tmp_path.glob("*.onnx"))) == 1
    assert b.measure("example:resnet18", (3, 32, 32), 1, "infer").status == "error"  # a graph without weights


def test_an_export_that_fixes_the_batch_axis_is_refused_with_both_exporters_named(tmp_path, monkeypatch):
    """If the TorchScript exporter fails and the dynamo fallback fixes the batch axis, the export
    fails at once, naming both, instead of ORT refusing other batch sizes later."""
    import torch

    from perfseer.errors import ModelLoadError
    from perfseer.sources.runnable import export_onnx

    real = torch.onnx.export

    def fake(module, args, f=None, *, dynamo=True, dynamic_shapes=None, **kw):
        if not dynamo:
            raise RuntimeError("tracer refused")
        return real(module, args, dynamo=True, verbose=False)  # static shapes

    monkeypatch.setattr(torch.onnx, "export", fake)
    with pytest.raises(ModelLoadError, match="fixed the batch axis at 2") as e:
        export_onnx(space_ref(TINY), (3, 32, 32), str(tmp_path / "m.onnx"))
    assert "fixed the batch axis at 2" in str(e.value) and "RuntimeError: tracer refused" in str(e.value)
    assert not list(tmp_path.iterdir())  # nothing written


def test_torch_cpu_in_a_worker():
    with Worker("torch-cpu", {"threads": 1, "protocol": FAST}) as w:
        info = w.start()
        assert info["isolation"] == "fork" and info["setting"] == "torch-t1"
        assert info["env"]["threads"] == 1 and info["env"]["libraries"]["torch"]
        ref = space_ref(TINY)
        infer = w.run(Job(ref, "3x32x32", 2, "infer", "fp32", w.device("infer", "sgd")), timeout=120)
        train = w.run(Job(ref, "3x32x32", 2, "train", "fp32", w.device("train", "adamw"), "adamw"), timeout=120)
    for m in (infer, train):
        assert m.status == "ok", m.error
        assert m.latency_ms > 0 and 0 < m.util_pct <= 100
        assert m.extra["hwm_reset"] is True and m.extra["memory_method"] == "rss-hwm-fork"
        assert m.memory_mb > 0
    # training holds gradients and AdamW's two moments besides the weights
    assert train.memory_mb > infer.memory_mb
    assert train.extra["weights_mb"] == infer.extra["weights_mb"]
    assert w.device("train", "adamw").endswith("/torch-t1-adamw")


def test_rss_probe_sees_a_large_allocation():
    probe = RssProbe()
    probe.start()
    block = bytearray(64 * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    del block
    assert probe.peak_mb() >= 60  # the peak stays after the memory is freed


@pytest.mark.parametrize("error, expected", [
    (MemoryError(), True), (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't "
                                         "allocate memory: you tried to allocate 68719476736 bytes"), True),
    (RuntimeError("shape mismatch"), False), (ValueError("out of memory"), False)])
def test_oom_detection(error, expected):
    assert is_oom(error) is expected
