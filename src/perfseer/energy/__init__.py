"""GPU power, energy and utilisation of a step, from the GPU's spec sheet and the step's activity.

Example::

    from perfseer.energy import step_energy

    e = step_energy("h200", latency_ms=24.7, batch=256)       # any basis's latency
    e.power_w, e.energy_j, e.energy_j_per_sample, e.util_pct

:func:`step_energy` is the one function the routing (``perfseer predict --energy``) and other
callers use; :mod:`perfseer.energy.power` explains the model, :mod:`perfseer.energy.llm` gives an
LLM decoding step's work and energy per token.  See docs/guide/energy.md.
"""

from perfseer.energy.activity import Activity, activity_from_kernels, activity_from_totals
from perfseer.energy.llm import DecodeWork, decode_energy, decode_work
from perfseer.energy.power import EnergyError, EnergyEstimate, PowerSpec, power_spec, step_energy

__all__ = ["Activity", "activity_from_kernels", "activity_from_totals", "DecodeWork", "decode_energy", "decode_work",
           "EnergyError", "EnergyEstimate", "PowerSpec", "power_spec", "step_energy"]
