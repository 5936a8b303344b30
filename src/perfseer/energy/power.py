"""A GPU's average power, energy and utilisation over a step, from its spec sheet and the step's activity.

**Utilisation** (NVML's definition: the share of time with at least one kernel running).  In
eager PyTorch the host launches every kernel; a step is about ``max(T_gpu, T_host)`` long, with
``T_host = n_kernels x h`` (``h``: host time per kernel, fitted, one for inference and one for a
training step, whose host also runs autograd, the optimizer and the gradient scaler) and the
GPU's own time at least ``T_gpu = kappa x G + n_kernels x g`` (``G``: the kernels' time on the
GPU, each kernel's predicted time above the launch floor of the latency model's measurements and
at least its roofline, :attr:`~perfseer.energy.activity.Activity.gpu_ms`; ``kappa`` and ``g``, a
kernel's least time, fitted).  Given the step's predicted latency ``T`` (any basis), the busy time is
``max(T_gpu, T - T_host)`` (GPU-bound: nearly all of ``T``; launch-bound: the kernels' own time)
and ``util = u_max min(1, busy / T)``.

**Power.**  Between the board's idle power and its limit (the TDP unless lowered)::

    P = P_idle + (P_tdp - P_idle) x util x clip(a0 + a_c x compute_tensor + a_cc x compute_cuda + a_m x memory, 0, 1)

``compute`` (``compute_tensor + compute_cuda``) and ``memory`` are the shares of the compute peak
(at the step's precision, on the unit each kernel runs on) and of the memory bandwidth its
kernels achieve: the step's FLOPs and bytes over its kernels' time
(:mod:`perfseer.energy.activity`).  ``a0`` is the power of a running GPU doing little (clocks up,
schedulers busy), ``a_c`` and ``a_m`` what full tensor-core compute and full bandwidth add, and
``a_cc`` what full CUDA-core compute adds (a CUDA-core kernel at its peak does a fraction of a
tensor core's work per joule; a constants file without it takes ``a_c``).  The constants are shared by every GPU: the model carries to
another GPU through its TDP, its idle power, its peaks and bandwidth.  They are fitted on this
project's H200 steps and the ML.ENERGY A100 serving runs (``power-constants.json`` records the
fit, its data and command).  The result is clipped to ``[P_idle, limit]``.

**Idle power**: measured where the fact file has it (H200: 80 W, NVML before a run), else a rule
of thumb per class of board (the ratio of idle power to TDP of the measured boards), and the
estimate says so (``idle_source``).

**A lower power limit** (``power_limit_w``, as ``nvidia-smi -pl`` sets it).  Where the step's
power at the default limit exceeds it, the GPU lowers its clock: the power above idle scales as
the clock cubed (dynamic power ``f V^2`` with the voltage following the clock on the DVFS curve),
so the clock falls to ``s = ((limit - P_idle) / (P - P_idle))^(1/3)`` of its own; the compute-bound
share of the busy time (``compute_bound``) stretches by ``1/s``, the memory-bound share and the
host time do not.  This rule is physics only: no step was measured under a lowered limit.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from perfseer.devices import DeviceSpec, get_device
from perfseer.energy.activity import Activity
from perfseer.errors import PerfseerError

CONSTANTS_FILE = Path(__file__).resolve().parent / "data" / "power-constants.json"
#: The exponent of the clock in the dynamic power under a power limit (see the module doc).
CLOCK_POWER_EXPONENT = 3.0


class EnergyError(PerfseerError):
    """A power or energy request that cannot be answered (a CPU, a MIG slice, a bad power limit)."""


@lru_cache(maxsize=None)
def _constants_file(path: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise EnergyError(f"the power model's constants ({path}) are unreadable ({e})", "reinstall perfseer") from e
    if doc.get("format") != "perfseer.power-constants":
        raise EnergyError(f"{path} is not a perfseer power-constants file", "reinstall perfseer")
    return doc


def constants(path: str | Path | None = None) -> dict:
    """The fitted constants and facts (``power-constants.json``; ``path``: another file of that format)."""
    return _constants_file(str(path or CONSTANTS_FILE))


@dataclass(frozen=True)
class PowerSpec:
    """What the power model knows of a GPU's board.

    Attributes:
        device: the registry name.
        tdp_w: the board's default power limit (its TDP), W.
        idle_w: its power with no kernel running, W.
        idle_source: ``measured (...)`` or ``rule of thumb (...)``.
        limit_w: the power limit the step runs under (the TDP unless lowered), W.
        clock_mhz: the boost clock of the spec sheet.
    """

    device: str
    tdp_w: float
    idle_w: float
    idle_source: str
    limit_w: float
    clock_mhz: float | None


def _board_class(spec: DeviceSpec) -> str:
    """``hbm`` (a data-centre board with HBM) or ``other``: by the sheet's memory type where it
    has one, else by the name's prefix (``power-constants.json``)."""
    c = constants()["idle"]["classes"]
    memory = str(getattr(spec, "memory_type", "") or "").upper()
    if memory:
        return "hbm" if memory.startswith("HBM") else "other"
    name = spec.name.lower()
    for cls, rule in c.items():
        if any(name.startswith(p) for p in rule["prefixes"]):
            return cls
    return "other"


def power_spec(device: str | DeviceSpec, power_limit_w: float | None = None) -> PowerSpec:
    """The :class:`PowerSpec` of ``device`` (a registry name or alias, or a :class:`DeviceSpec`).

    Raises:
        EnergyError: a CPU (no GPU power model: its measured cards predict ``util_pct`` and
            ``energy_j`` where trained on them), a MIG slice or a GPU without a TDP in its spec
            sheet, or a power limit that is not a number between the idle power and the TDP.
    """
    spec = device if isinstance(device, DeviceSpec) else get_device(device)
    if spec.kind != "gpu":
        raise EnergyError(f"the power model covers GPUs; {spec.name} is a {spec.kind}",
                          "drop --energy for it; a measured CPU card predicts util_pct and energy_j where it was "
                          "trained on them (perfseer predictors)")
    if spec.parent is not None:
        raise EnergyError(f"{spec.name} is a MIG slice: it shares the board's power with the other slices, and "
                          "NVML reports energy for the whole board", f"ask for the whole GPU ({spec.parent})")
    if not spec.tdp_w:
        raise EnergyError(f"{spec.name}'s spec sheet has no tdp_w, which the power model needs",
                          "add \"tdp_w\" to its spec file (perfseer devices --add FILE)")
    c = constants()["idle"]
    if spec.name in c["measured"]:
        m = c["measured"][spec.name]
        idle, source = float(m["idle_w"]), f"measured ({m['source']})"
    else:
        cls = _board_class(spec)
        rule = c["classes"].get(cls) or c["classes"]["other"]
        idle = rule["idle_fraction"] * spec.tdp_w
        source = f"rule of thumb: {rule['idle_fraction']:.3g} x TDP for {cls} boards ({rule['source']})"
    limit = float(spec.tdp_w)
    if power_limit_w is not None:
        limit = check_power_limit(power_limit_w, spec.name, spec.tdp_w, idle)
    return PowerSpec(spec.name, float(spec.tdp_w), float(idle), source, limit, spec.clock_mhz)


#: A limit under this share of the TDP is refused: NVIDIA boards accept limits down to about a
#: third to a half of their TDP (``nvidia-smi -q -d POWER``, "Min Power Limit").
MIN_LIMIT_FRACTION = 0.25


def check_power_limit(value, device: str, tdp_w: float, idle_w: float) -> float:
    """``value`` as a power limit for ``device``, or a clear refusal."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EnergyError(f"power limit must be a number of watts, got {value!r}", f"pass e.g. --power-limit {tdp_w * 0.7:.0f}")
    if value > tdp_w:
        raise EnergyError(f"power limit {value:g} W is above {device}'s TDP ({tdp_w:g} W), the default limit the "
                          "model assumes", f"pass a limit up to {tdp_w:g} W, or none")
    if value < max(MIN_LIMIT_FRACTION * tdp_w, idle_w):
        raise EnergyError(f"power limit {value:g} W is below what {device} can run at (its idle power is about "
                          f"{idle_w:.0f} W; boards accept limits down to about a third of their TDP, {tdp_w:g} W)",
                          f"pass a limit between {max(MIN_LIMIT_FRACTION * tdp_w, idle_w):.0f} and {tdp_w:g} W")
    return float(value)


@dataclass(frozen=True)
class EnergyEstimate:
    """Power and energy of one step on one GPU.

    Attributes:
        power_w: average board power over the step, W (within ``[idle_w, limit_w]``).
        energy_j: energy of the step, J (``power_w x latency_ms / 1000``).
        energy_j_per_sample: ``energy_j / batch``.
        util_pct: the share of the step with a kernel running, % (NVML's utilisation).
        latency_ms: the step's time: the one given, or longer under a lowered power limit.
        clock_scale: the clock as a share of its own under the limit (1: not limited).
        idle_w, limit_w, tdp_w: the board's idle power, the limit it ran under and its TDP.
        idle_source: where the idle power comes from.
        notes: what the estimate assumed (a rule-of-thumb idle power, a power limit's clock rule).
    """

    power_w: float
    energy_j: float
    energy_j_per_sample: float
    util_pct: float
    latency_ms: float
    clock_scale: float
    idle_w: float
    limit_w: float
    tdp_w: float
    idle_source: str
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def utilization(activity: Activity | None, latency_ms: float, const: dict | None = None) -> float:
    """NVML utilisation (share, [0, 1]) of a step ``latency_ms`` long with ``activity`` (``None``:
    a GPU-bound step, ``u_max``)."""
    u = (const or constants())["utilization"]
    if activity is None or activity.kernels <= 0:
        return float(u["u_max"])
    per_kernel = u["host_us_per_kernel_train" if activity.training else "host_us_per_kernel"]
    host = activity.kernels * per_kernel / 1000
    gpu = u["kappa"] * activity.gpu_ms + activity.kernels * u["gpu_us_per_kernel"] / 1000
    busy = max(gpu, latency_ms - host)
    return float(u["u_max"] * min(1.0, max(busy, 0.0) / latency_ms))


def busy_power(ps: PowerSpec, util: float, compute: float, memory: float, const: dict | None = None,
               compute_cuda: float = 0.0) -> float:
    """Average power (W) at ``util`` (share of time busy) with ``compute``/``memory`` shares while
    busy (``compute_cuda`` of ``compute`` on the CUDA cores), at the default limit (the TDP),
    before any lowered limit."""
    p = (const or constants())["power"]
    cc = min(max(compute_cuda, 0.0), compute)
    g = min(1.0, max(0.0, p["a0"] + p["a_c"] * (compute - cc) + p.get("a_cc", p["a_c"]) * cc + p["a_m"] * memory))
    return ps.idle_w + (ps.tdp_w - ps.idle_w) * min(1.0, max(0.0, util)) * g


def _limited(ps: PowerSpec, p: float, u: float, latency_ms: float, compute_bound: float):
    """``(clock share, step ms, util, power W)`` under ``ps.limit_w`` of a step drawing ``p`` W
    at the default limit: the busy time's power above idle scales as the clock cubed, its
    compute-bound share stretches by 1 / clock; the gaps between kernels stay as they are."""
    busy = u * latency_ms
    gap = latency_ms - busy
    dyn = (p - ps.idle_w) * latency_ms / max(busy, 1e-12)  # power above idle while busy

    def at(s):
        b = busy * (compute_bound / s + 1.0 - compute_bound)
        t = gap + b
        return t, b / t, ps.idle_w + dyn * s ** CLOCK_POWER_EXPONENT * b / t

    lo, hi = 1e-3, 1.0
    for _ in range(60):  # the power falls monotonically with the clock
        mid = 0.5 * (lo + hi)
        if at(mid)[2] > ps.limit_w:
            hi = mid
        else:
            lo = mid
    t, share, pw = at(lo)
    return lo, t, share, pw


def step_energy(device: str | DeviceSpec, latency_ms: float, activity: Activity | None = None, *, batch: int = 1,
                util: float | None = None, power_limit_w: float | None = None, const: dict | None = None) -> EnergyEstimate:
    """Power, energy and utilisation of one step of ``latency_ms`` on ``device``.

    The plain function other parts of perfseer (and users) call: give it a latency from any
    basis and, for a better answer, the step's :class:`~perfseer.energy.activity.Activity`
    (:func:`~perfseer.energy.activity.activity_from_kernels` of the spec model's kernels, or
    :func:`~perfseer.energy.activity.activity_from_totals`).

    Args:
        device: a registry GPU (name, alias or :class:`~perfseer.devices.DeviceSpec`).
        latency_ms: the step's time at the default power limit, ms.
        activity: the step's kernels' activity; ``None``: a GPU-bound step of unknown intensity
            (the model's ``a0`` only).
        batch: samples in the step (for ``energy_j_per_sample``).
        util: the share of the step busy, [0, 1], where known (else :func:`utilization`).
        power_limit_w: a lower power limit (W); the step slows by the clock rule of the module doc.

    Returns:
        An :class:`EnergyEstimate`.

    Raises:
        EnergyError: a latency or batch that is not a positive number, a device the power model
            does not cover, a power limit out of range (:func:`power_spec`).

    Example::

        >>> e = step_energy("h200", 24.7)          # doctest: +SKIP
        >>> e.power_w, e.energy_j                   # doctest: +SKIP
    """
    if isinstance(latency_ms, bool) or not isinstance(latency_ms, (int, float)) or not math.isfinite(latency_ms) \
            or latency_ms <= 0:
        raise EnergyError(f"latency must be a positive number of ms, got {latency_ms!r}", "pass the step's latency")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise EnergyError(f"batch must be an integer >= 1, got {batch!r}", "pass the step's batch size")
    if util is not None and not (isinstance(util, (int, float)) and 0.0 <= util <= 1.0):
        raise EnergyError(f"util must be a share in [0, 1], got {util!r}", "pass e.g. util=0.9, or none")
    const = const or constants()
    ps = power_spec(device, power_limit_w)
    notes = [] if ps.idle_source.startswith("measured") else [f"idle power {ps.idle_w:.0f} W: {ps.idle_source}"]
    u = utilization(activity, latency_ms, const) if util is None else float(util)
    c, m, cc = (activity.compute, activity.memory, activity.compute_cuda) if activity is not None else (0.0, 0.0, 0.0)
    p = min(busy_power(ps, u, c, m, const, cc), ps.tdp_w)
    t, s = float(latency_ms), 1.0
    if p > ps.limit_w:  # the clock falls until the average power fits under the lowered limit
        s, t, u, p = _limited(ps, p, u, float(latency_ms), activity.compute_bound if activity is not None else 1.0)
        notes.append(f"power limit {ps.limit_w:g} W (TDP {ps.tdp_w:g} W): clock at {s:.2f} of its own"
                     + (f" ({ps.clock_mhz * s:.0f} MHz)" if ps.clock_mhz else "")
                     + f", step {t / latency_ms:.2f}x longer (power above idle taken as the clock cubed, the "
                       "compute-bound kernels slowed by the clock: physics only, not measured)")
    p = min(max(p, ps.idle_w), ps.limit_w)
    e = p * t / 1000
    return EnergyEstimate(power_w=p, energy_j=e, energy_j_per_sample=e / batch, util_pct=100.0 * min(u, 1.0),
                          latency_ms=t, clock_scale=s, idle_w=ps.idle_w, limit_w=ps.limit_w, tdp_w=ps.tdp_w,
                          idle_source=ps.idle_source, notes=notes)
