import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# perfseer predict hands questions to a warm background process (perfseer.cli.warm): tests answer in
# their own process unless a test starts one itself
os.environ.setdefault("PERFSEER_WARM", "0")


def _torch_global_state():
    """torch's process-wide state that a test (or an interrupted tracer) could leave changed, or
    None before torch is imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return {"function modes": [type(m).__name__ for m in _get_current_function_mode_stack()],
            "dispatch modes": [type(m).__name__ for m in _get_current_dispatch_mode_stack()],
            "grad enabled": torch.is_grad_enabled(), "inference mode": torch.is_inference_mode_enabled(),
            "default dtype": str(torch.get_default_dtype())}


@pytest.fixture(autouse=True)
def torch_state_is_left_as_found():
    """Every test leaves torch's global state as it found it: a leak fails the test that caused it,
    not an unrelated one later (a CI run once failed two profiling tests after an export's
    interrupted unwinding left state behind)."""
    before = _torch_global_state()
    yield
    if before is not None:
        after = _torch_global_state()
        assert after == before, f"the test changed torch's global state: {before} -> {after}"


@pytest.fixture(scope="session")
def nb201_dataset(tmp_path_factory):
    """A builder of tiny measured-looking datasets of NAS-Bench-201 cells (what predictor tests train on).

    ``nb201_dataset(seed, draws, batches, devices, keep=None)`` draws ``draws`` cells from
    ``random.Random(seed)``, keeps the first ``keep`` distinct ones (sorted; ``None``: all), and
    writes one ``infer`` row per cell, batch size and device, with a latency that grows with the
    FLOPs: ``k * (0.5 + 3 * GFLOPs * batch)`` ms for each ``device: k`` of ``devices``.  Returns a
    new folder holding the table ``t.csv`` and the compact dataset ``ds/``.
    """
    import random

    from helpers import nb201_arch
    from perfseer.api import extract
    from perfseer.data.dataset import build_dataset
    from perfseer.data.table import write_table

    def build(seed: int, draws: int, batches, devices: dict, keep: int | None = None) -> Path:
        rng = random.Random(seed)
        archs = sorted({nb201_arch(rng) for _ in range(draws)})[:keep]
        rows = []
        for a in archs:
            gflops = extract(a).flops / 1e9
            for b in batches:
                for dev, k in devices.items():
                    rows.append({"model": a, "input_shape": "3x32x32", "batch_size": b, "phase": "infer",
                                 "device": dev, "latency_ms": k * (0.5 + 3.0 * gflops * b)})
        d = tmp_path_factory.mktemp("nb201")
        write_table(rows, d / "t.csv")
        build_dataset(d / "t.csv", d / "ds", workers=0, compact=True)
        return d

    return build
