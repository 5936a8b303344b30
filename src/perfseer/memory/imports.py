"""Keeping ``torch._dynamo`` out of the first ``perfseer memory`` call.

Importing ``torch._dynamo`` (and sympy through it) costs about 1.5 s of CPU, a third of a cold
``perfseer memory timm:resnet50 ...`` before this module, and nothing on the simulation's path
uses it.  It gets imported anyway, three ways:

* ``import timm`` imports torchvision, whose ``torchvision.ops.roi_align`` does
  ``from torch._dynamo.utils import is_compile_supported``;
* timm decorates a few functions with ``torch.compiler.disable`` at import time, which calls
  ``torch._dynamo.disable``;
* PyTorch wraps parts of its own Python code (``TorchDispatchMode`` handling, the Python
  references of some operators) with ``torch._compile._disable_dynamo``, which imports
  ``torch._dynamo`` at the first call to ask it for a "do not compile" wrapper.

:func:`without_dynamo` puts stand-in modules ``torch._dynamo`` and ``torch._dynamo.utils`` in
``sys.modules`` for the duration of a ``with`` block: their ``disable(fn)`` returns ``fn`` itself
(there is no compiler running to skip it) and ``is_compile_supported`` imports the real one when
called (``graph_break``, which ``torch.optim`` calls, does nothing, as outside a compiled
region; any other attribute is missing, so the meta run fails and the step runs on the fake
backend).  On exit the stand-ins are removed and every "do not compile" wrapper they handed out is
forgotten (PyTorch caches it on the function as ``__dynamo_disable``; the attribute is deleted,
so the next call outside the block asks the real ``torch._dynamo``), and timm's decorated
functions ask the real one at their first call.  A later ``import torch._dynamo``
(``torch.compile``, ``torch.export`` in the ONNX fallback, ``FakeTensorMode``) imports the real
package as usual.  Nothing is cached across processes: the first call stays a first call.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import types

_STUBS = ("torch._dynamo", "torch._dynamo.utils")


def _is_compile_supported(device_type):
    from torch._dynamo.utils import is_compile_supported

    return is_compile_supported(device_type)


def _lazy_disable(fn=None, recursive=True, *, reason=None):
    """``torch.compiler.disable`` for timm's decorators: the real one at the first call."""
    if fn is None:
        return lambda f: _lazy_disable(f, recursive, reason=reason)
    real = None

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        nonlocal real
        if real is None:
            if "torch._dynamo" in sys.modules and isinstance(sys.modules["torch._dynamo"], _Stub):
                return fn(*args, **kwargs)  # still inside without_dynamo(): nothing compiles
            import torch._dynamo

            real = torch._dynamo.disable(fn, recursive, reason=reason)
        return real(*args, **kwargs)

    return wrapper


class _Stub(types.ModuleType):
    pass


@contextlib.contextmanager
def without_dynamo():
    """Run the block with stand-ins for ``torch._dynamo`` (see the module docstring); a no-op
    when the real package is loaded already."""
    if "torch._dynamo" in sys.modules:
        yield
        return
    import torch

    handed_out = []  # functions whose __dynamo_disable cache PyTorch set to the stand-in's answer

    def disable(fn=None, recursive=True, wrapping=True, reason=None):
        if fn is None:
            return functools.partial(disable, recursive=recursive, wrapping=wrapping, reason=reason)
        if wrapping:  # torch.compiler.disable (timm's decorators at import time)
            return _lazy_disable(fn, recursive, reason=reason)
        handed_out.append(fn)  # torch._compile._disable_dynamo caches this on fn
        return fn

    package = _Stub("torch._dynamo")
    package.__path__ = []
    package.disable = disable
    package.graph_break = lambda *a, **k: None  # torch.optim's _use_grad: a no-op when not compiling
    package.is_compiling = lambda: False
    utils = _Stub("torch._dynamo.utils")
    utils.is_compile_supported = _is_compile_supported
    had = "_dynamo" in vars(torch)
    sys.modules["torch._dynamo"], sys.modules["torch._dynamo.utils"] = package, utils
    try:
        yield
    finally:
        for name in _STUBS:
            if isinstance(sys.modules.get(name), _Stub):
                del sys.modules[name]
        if not had and isinstance(vars(torch).get("_dynamo"), _Stub):
            delattr(torch, "_dynamo")
        for fn in handed_out:
            with contextlib.suppress(AttributeError):
                delattr(fn, "__dynamo_disable")


def import_zoo(zoo: str):
    """``import timm`` / ``import torchvision`` without importing ``torch._dynamo``."""
    if zoo not in ("timm", "torchvision") or zoo in sys.modules:
        return importlib.import_module(zoo)
    from perfseer.graph.zoo import _prepare_torchvision

    _prepare_torchvision()
    with without_dynamo():
        return importlib.import_module(zoo)


#: in-place operators of weight initialisation (``torch.nn.init``, timm's ``trunc_normal_``...);
#: none changes a tensor's shape
_INIT_OPS = frozenset({"normal_", "uniform_", "zero_", "fill_", "copy_", "erfinv_", "mul_", "add_", "sub_", "div_",
                       "clamp_", "clamp_min_", "clamp_max_", "exponential_", "bernoulli_", "random_", "log_normal_",
                       "geometric_", "cauchy_", "fill_diagonal_", "sqrt_", "abs_", "neg_", "exp_", "log_"})


def skip_meta_init():
    """A ``TorchFunctionMode`` that, while a model is built on the meta device, skips the in-place
    initialisation of its meta tensors (they hold no values; some of those operators are Python
    references, slow next to a no-op).  Use it around ``with torch.device("meta")``."""
    import torch
    from torch.overrides import TorchFunctionMode

    class SkipMetaInit(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if (getattr(func, "__name__", "") in _INIT_OPS and args and isinstance(args[0], torch.Tensor)
                    and args[0].device.type == "meta"):
                return args[0]
            return func(*args, **(kwargs or {}))

    return SkipMetaInit()
