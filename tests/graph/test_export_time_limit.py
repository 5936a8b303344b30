"""The export time limit (perfseer.graph.torch_export.time_limit, on perfseer.deadline): a clear
error, never a hang, and never an interrupt that corrupts torch's global state for the rest of the
process.

The alarm used to be raised wherever it landed, and again every 0.5 s until the export stopped:
one landed in a weakref callback (Python swallows those) and the repeats landed in the exporter's
own unwinding, which left a TorchFunctionMode on torch's stack, grad mode off, or "PythonDispatcherTLS
was not set" for every later call in the process (a CI run failed two unrelated tests that way).
"""

from __future__ import annotations

import gc
import time
import weakref

import pytest
import torch

import perfseer
from helpers import assert_user_error
from perfseer.errors import ExportTimeoutError
from perfseer import deadline as deadline_module
from perfseer.deadline import in_cleanup
from perfseer.graph import torch_export
from perfseer.graph.torch_export import time_limit


class Box:
    pass


def torch_state() -> dict:
    """The global state an interrupted export has been seen to leave behind."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    torch.manual_seed(0)
    weight = torch.nn.Linear(8, 8).weight.detach()
    return {"function modes": [type(m).__name__ for m in _get_current_function_mode_stack()],
            "dispatch modes": [type(m).__name__ for m in _get_current_dispatch_mode_stack()],
            "grad": torch.is_grad_enabled(), "weights": weight.tolist()}


class Slow(torch.nn.Module):
    def forward(self, x):
        time.sleep(30)
        return x + 1


def test_an_export_past_the_time_limit_is_a_clear_error(monkeypatch, capsys):
    before = torch_state()
    monkeypatch.setenv("PERFSEER_EXPORT_TIMEOUT", "1")
    monkeypatch.setattr(torch_export, "PROGRESS_EVERY_S", 0.3)
    start = time.monotonic()
    with pytest.raises(ExportTimeoutError) as info:
        perfseer.extract(Slow(), input_shape=(4,))
    assert time.monotonic() - start < 20
    assert_user_error(str(info.value), "Slow", "within 1 s", "PERFSEER_EXPORT_TIMEOUT")
    assert "perfseer: still exporting Slow" in capsys.readouterr().err  # progress while it ran
    assert torch_state() == before  # torch is left as it was: later exports and models work


def test_an_interrupt_waits_for_a_finalizer_to_finish():
    ran = []
    start = time.monotonic()
    with pytest.raises(ExportTimeoutError):
        with time_limit("x", seconds=0.2):
            box = Box()
            weakref.finalize(box, lambda: (time.sleep(0.8), ran.append(time.monotonic() - start)))
            del box  # the finalizer runs here, through the limit: it is cleanup, not interrupted
            time.sleep(20)
    assert len(ran) == 1 and ran[0] >= 0.8  # it finished
    assert time.monotonic() - start < 5


def test_an_interrupt_swallowed_in_a_weakref_callback_is_raised_again(capsys):
    hook = __import__("sys").unraisablehook
    start = time.monotonic()
    with pytest.raises(ExportTimeoutError):
        with time_limit("x", seconds=0.2):
            box = Box()
            ref = weakref.ref(box, lambda _: time.sleep(1.0))  # noqa: F841 - kept alive: the callback runs
            del box
            gc.collect()
            time.sleep(20)
    assert time.monotonic() - start < 3  # retried at once, not after AGAIN_S
    assert "Exception ignored" not in capsys.readouterr().err
    assert __import__("sys").unraisablehook is hook  # restored


def test_an_interrupt_a_bare_except_swallowed_is_raised_again(monkeypatch):
    monkeypatch.setattr(deadline_module, "AGAIN_S", 0.5)
    start = time.monotonic()
    swallowed = []
    with pytest.raises(ExportTimeoutError):
        with time_limit("x", seconds=0.2):
            try:
                time.sleep(20)
            except BaseException as e:  # noqa: BLE001 - what some tracing code does
                swallowed.append(type(e).__name__)
            time.sleep(20)
    assert swallowed == ["Expired"]
    assert time.monotonic() - start < 3


def test_the_alarm_is_off_after_the_block():
    import signal

    previous = signal.getsignal(signal.SIGALRM)
    with time_limit("x", seconds=5):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is previous


def test_cleanup_frames_are_recognised():
    import sys

    class Manager:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            seen.append(in_cleanup(sys._getframe()))

    seen = []
    with Manager():
        seen.append(in_cleanup(sys._getframe()))
    assert seen == [False, True]
