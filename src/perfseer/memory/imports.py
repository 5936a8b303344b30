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

from perfseer.sources.zoo import _prepare_torchvision

_STUBS = ("torch._dynamo", "torch._dynamo.utils")
_SHAPES = "torch.fx.experimental.symbolic_shapes"


def _is_compile_supported(device_type):
    from torch._dynamo.utils import is_compile_supported  # deferred: heavy, loaded on first use

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
            import torch._dynamo  # deferred: heavy, loaded on first use

            real = torch._dynamo.disable(fn, recursive, reason=reason)
        return real(*args, **kwargs)

    return wrapper


class _Stub(types.ModuleType):
    pass


def _concrete(x) -> bool:
    """A plain Python bool/int, or a list/tuple of them (no symbolic value anywhere)."""
    if type(x) in (bool, int):
        return True
    return isinstance(x, (tuple, list)) and all(_concrete(v) for v in x)  # torch.Size is a tuple


def _concrete_value(name, types_, answer):
    """A function whose answer for a plain value of ``types_`` (its first argument) is
    ``answer(value)``; any other argument goes to the real function."""

    def fast(a, *args, **kwargs):
        if type(a) in types_:
            return answer(a)
        return getattr(_SHAPES_STUB._load(), name)(a, *args, **kwargs)

    return fast


def _echo(a):
    return a


def _sym_fold(name, op):
    def fast(x, *others):
        if type(x) is bool and all(type(y) is bool for y in others):
            for y in others:
                x = op(x, y)
            return x
        return getattr(_SHAPES_STUB._load(), name)(x, *others)

    return fast


def _sym_eq(x, y):
    if _concrete(x) and _concrete(y):
        if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
            return len(x) == len(y) and all(_sym_eq(a, b) for a, b in zip(x, y))
        if type(x) is int and type(y) is int:
            return x == y
    return _SHAPES_STUB._load().sym_eq(x, y)


def _free_unbacked_symbols(x):
    import torch  # deferred: heavy, loaded on first use

    if isinstance(x, torch.Tensor):  # sizes, strides and offset all plain ints: no symbol at all
        if _concrete(tuple(x.shape)) and _concrete(x.stride()) and type(x.storage_offset()) is int:
            from torch.utils._ordered_set import OrderedSet  # deferred: heavy, loaded on first use

            return OrderedSet()
    return _SHAPES_STUB._load().free_unbacked_symbols(x)


#: what PyTorch's meta kernels and Python references ask of ``symbolic_shapes`` on a step with
#: concrete shapes, answered as the real functions answer plain Python values (torch 2.13's
#: ``torch/fx/experimental/symbolic_shapes.py``); any symbolic argument goes to the real function
_FAST = {
    **{n: _concrete_value(n, (bool,), _echo)
       for n in ("expect_true", "guard_or_false", "guard_or_true", "statically_known_true", "guard_size_oblivious")},
    "sym_and": _sym_fold("sym_and", lambda a, b: a & b),
    "sym_or": _sym_fold("sym_or", lambda a, b: a | b),
    "sym_eq": _sym_eq,
    "is_nested_int": _concrete_value("is_nested_int", (bool, int, float), lambda a: False),
    "statically_known_false": _concrete_value("statically_known_false", (bool,), lambda a: not a),
    "guard_bool": _concrete_value("guard_bool", (bool,), _echo),
    "guard_int": _concrete_value("guard_int", (int,), _echo),
    "guarding_hint_or_throw": _concrete_value("guarding_hint_or_throw", (bool, int), _echo),
    "has_guarding_hint": _concrete_value("has_guarding_hint", (bool, int, float), lambda a: True),
    "is_concrete_int": _concrete_value("is_concrete_int", (bool, int), lambda a: True),
    "is_concrete_bool": _concrete_value("is_concrete_bool", (bool,), lambda a: True),
    "free_unbacked_symbols": _free_unbacked_symbols,
    "is_symbolic": _concrete_value("is_symbolic", (bool, int, float), lambda a: False),
}


class _Deferred(types.ModuleType):
    """A stand-in for a module that is slow to import: it answers the names in ``fast`` itself
    and, for anything else, imports the real module in its own place and forwards to it.

    Once the real module is loaded, every name (those in ``fast`` too) comes from it."""

    def __init__(self, name: str, fast: dict, package: bool):
        super().__init__(name)
        self._fast = fast
        self._package = package  # a package has __path__ (the import system asks for it)
        self._real = None

    def _load(self):
        if self._real is None:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            self._real = importlib.import_module(self.__name__)
        return self._real

    def __getattr__(self, name):
        if name == "__path__" and self._package:
            return self._load().__path__  # importing a submodule, or `from package import name`
        if name.startswith("_"):
            raise AttributeError(name)
        if self._real is None and name in self._fast:
            return self._fast[name]
        return getattr(self._load(), name)


class _NeverInstantiated:
    """No object is an instance of this class: the answer to ``isinstance(x, sympy.Basic)`` for
    every ``x`` while sympy has not been imported (no sympy object can exist then)."""


#: ``torch.fx.experimental.symbolic_shapes`` imports sympy (about 0.4 s of CPU); PyTorch's meta
#: kernels and Python references import a few of its functions at every call (``torch._check``
#: its ``expect_true``, the stride checks ``guard_or_false``...), which on a step with concrete
#: shapes only echo plain bools and compare ints (:data:`_FAST`)
_SHAPES_STUB = _Deferred(_SHAPES, _FAST, package=False)
#: ``torch._prims_common.elementwise_dtypes`` imports sympy for one ``isinstance(x, sympy.Basic)``
_SYMPY_STUB = _Deferred("sympy", {"Basic": _NeverInstantiated}, package=True)


@contextlib.contextmanager
def without_dynamo():
    """Run the block with stand-ins for ``torch._dynamo`` (see the module docstring); a no-op
    when the real package is loaded already."""
    if "torch._dynamo" in sys.modules:
        yield
        return
    import torch  # deferred: heavy, loaded on first use

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
    deferred = [stub for stub in (_SHAPES_STUB, _SYMPY_STUB)
                if stub.__name__ not in sys.modules and stub._real is None]
    for stub in deferred:
        sys.modules[stub.__name__] = stub
    try:
        yield
    finally:
        for stub in deferred:
            if sys.modules.get(stub.__name__) is stub:
                del sys.modules[stub.__name__]
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

    _prepare_torchvision()
    # timm imports huggingface_hub (and its HTTP stack, about 0.2 s) only to download pretrained
    # weights, which perfseer never asks for (``pretrained=False``, no network): hidden while timm
    # is imported, timm records that the hub is not installed.  Nothing else sees the difference.
    hide = zoo == "timm" and "huggingface_hub" not in sys.modules
    if hide:
        sys.modules["huggingface_hub"] = None  # `import huggingface_hub` raises ImportError
    try:
        with without_dynamo():
            return importlib.import_module(zoo)
    finally:
        if hide and sys.modules.get("huggingface_hub", 0) is None:
            del sys.modules["huggingface_hub"]


#: in-place operators of weight initialisation (``torch.nn.init``, timm's ``trunc_normal_``...);
#: none changes a tensor's shape
_INIT_OPS = frozenset({"normal_", "uniform_", "zero_", "fill_", "copy_", "erfinv_", "mul_", "add_", "sub_", "div_",
                       "clamp_", "clamp_min_", "clamp_max_", "exponential_", "bernoulli_", "random_", "log_normal_",
                       "geometric_", "cauchy_", "fill_diagonal_", "sqrt_", "abs_", "neg_", "exp_", "log_"})


def skip_meta_init():
    """A ``TorchFunctionMode`` that, while a model is built on the meta device, skips the in-place
    initialisation of its meta tensors (they hold no values; some of those operators are Python
    references, slow next to a no-op).  Use it around ``with torch.device("meta")``."""
    import torch  # deferred: heavy, loaded on first use
    from torch.overrides import TorchFunctionMode  # deferred: heavy, loaded on first use

    class SkipMetaInit(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if (getattr(func, "__name__", "") in _INIT_OPS and args and isinstance(args[0], torch.Tensor)
                    and args[0].device.type == "meta"):
                return args[0]
            return func(*args, **(kwargs or {}))

    return SkipMetaInit()
