"""The meta backend (the simulation's fast path) against the fake-tensor backend it replaces:
the same allocations, frees and peak, byte for byte; and the import stand-ins leave no trace."""

import subprocess
import sys

import pytest
import torch
from torch import nn

from perfseer.memory.step import StepConfig, meta_backend_ok, trace_step

from .steps import cpu_step, module

CONFIGS = [cpu_step("infer"), cpu_step("train", "sgd-momentum"),
           StepConfig(phase="train", optimizer="adamw")]  # CUDA defaults: foreach, CUDA dropout


def _same(build, shape, batch, cfg):
    meta = trace_step(build(), shape, batch, cfg, backend="meta")
    fake = trace_step(build(), shape, batch, cfg, backend="fake")
    assert (meta.backend, fake.backend) == ("meta", "fake")
    assert meta.peak() == fake.peak()
    assert [a.nbytes for a in meta.allocations] == [a.nbytes for a in fake.allocations]
    assert meta.events == fake.events
    assert [a.kind() for a in meta.allocations] == [a.kind() for a in fake.allocations]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.phase}-{c.optimizer}")
@pytest.mark.parametrize("name", ["resnet18", "test_vit"])
def test_meta_backend_gives_the_fake_backends_trace(name, cfg):
    pytest.importorskip("timm")
    from perfseer.sources.zoo import build_zoo_model

    def build():
        return build_zoo_model("timm", name, meta=True)[0]

    shape = build_zoo_model("timm", name, meta=True)[1]
    _same(build, shape, 2, cfg)


def test_attention_takes_the_cpu_flash_kernel_on_meta():
    def attn(self, x):
        q, k, v = self.qkv(x).reshape(x.shape[0], 16, 3, 4, 8).permute(2, 0, 3, 1, 4).unbind(0)
        return nn.functional.scaled_dot_product_attention(q, k, v).mean((1, 2))

    def build():
        return module(attn, qkv=nn.Linear(32, 96))

    for cfg in CONFIGS:
        _same(build, (16, 32), 3, cfg)
    t = trace_step(build(), (16, 32), 3, CONFIGS[1], backend="meta")
    assert any(a.op.startswith("_scaled_dot_product_flash_attention_for_cpu") for a in t.allocations)


def test_device_dependent_modules_and_value_reads_use_the_fake_backend():
    mha = nn.Sequential(nn.Linear(8, 8))
    mha.attn = nn.MultiheadAttention(8, 2)
    assert not meta_backend_ok(mha)

    def scaled(self, x):
        return self.fc(x) * self.scale

    # scale is neither parameter nor buffer: it stays a CPU tensor, which fails on meta
    plain = module(scaled, fc=nn.Linear(4, 4), scale=torch.ones(4))
    assert [n for n, _ in plain.named_parameters()] == ["fc.weight", "fc.bias"] and not list(plain.buffers())
    t = trace_step(plain, (4,), 2, StepConfig(phase="train", optimizer="sgd"))
    assert t.backend == "fake"
    # low precision runs on the fake backend (batch norm's saved statistics differ on meta)
    t = trace_step(nn.Sequential(nn.Linear(4, 4)), (4,), 2, StepConfig(phase="infer", precision="amp-bf16"))
    assert t.backend == "fake"


def _first_call_in_a_fresh_process(code: str) -> None:
    """Run ``code`` (a first ``perfseer.memory`` call and its checks) in a new Python process."""
    pytest.importorskip("timm")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=None)
    assert out.returncode == 0, out.stderr[-2000:]


def test_first_call_leaves_torch_dynamo_importable():
    code = ("import sys, torch\n"
            "from perfseer.memory.api import memory\n"
            "memory('timm:test_resnet', batch=2, phase='train', optimizer='sgd')\n"
            "assert 'torch._dynamo' not in sys.modules, 'imported on the fast path'\n"
            "import torch._dynamo\n"
            "assert hasattr(torch._dynamo, 'optimize') and torch._dynamo.utils.is_compile_supported('cpu') in (True, False)\n"
            "from perfseer.memory.imports import _Stub\n"
            "assert not isinstance(torch._dynamo, _Stub) and not isinstance(torch._dynamo.utils, _Stub)\n")
    _first_call_in_a_fresh_process(code)


def test_first_call_defers_sympy_and_the_hub_and_leaves_them_importable():
    code = ("import sys, torch\n"
            "from perfseer.memory.api import memory\n"
            "memory('timm:test_vit', batch=2, phase='train', optimizer='adamw')\n"
            "for name in ('sympy', 'torch.fx.experimental.symbolic_shapes', 'huggingface_hub'):\n"
            "    assert name not in sys.modules, name + ' imported on the fast path'\n"
            "import sympy, huggingface_hub\n"
            "from torch.fx.experimental import symbolic_shapes\n"
            "from perfseer.memory.imports import _Deferred\n"
            "assert not isinstance(sympy, _Deferred) and not isinstance(symbolic_shapes, _Deferred)\n"
            "assert isinstance(sympy.Symbol('x'), sympy.Basic) and symbolic_shapes.guard_or_false(True)\n")
    _first_call_in_a_fresh_process(code)


def test_deferred_symbolic_shapes_answers_plain_values_as_the_real_module():
    from torch.fx.experimental import symbolic_shapes as real

    from perfseer.memory.imports import _FAST

    values = [True, False]
    for name in ("expect_true", "guard_or_false", "guard_or_true", "statically_known_true", "statically_known_false",
                 "guard_size_oblivious", "guard_bool", "is_concrete_bool"):
        for v in values:
            assert _FAST[name](v) == getattr(real, name)(v), (name, v)
    for name in ("guard_int", "guarding_hint_or_throw", "has_guarding_hint", "is_concrete_int", "is_nested_int",
                 "is_symbolic"):
        for v in (0, 3, -7):
            assert _FAST[name](v) == getattr(real, name)(v), (name, v)
    for args in [(True,), (True, False), (True, True, True), (False, True)]:
        assert _FAST["sym_and"](*args) == real.sym_and(*args)
        assert _FAST["sym_or"](*args) == real.sym_or(*args)
    for x, y in [(3, 3), (3, 4), ((1, 2), (1, 2)), ((1, 2), [1, 2]), ((1, 2), (1, 2, 3)), (torch.Size([2, 3]), (2, 3)),
                 ((1, (2, 3)), (1, (2, 4)))]:
        assert _FAST["sym_eq"](x, y) == real.sym_eq(x, y), (x, y)
    t = torch.empty(2, 3, device="meta")
    assert list(_FAST["free_unbacked_symbols"](t)) == list(real.free_unbacked_symbols(t)) == []
