"""Devices by their spec sheets: a registry of GPUs and CPUs (``perfseer devices``).

Example::

    from perfseer.devices import get_device, list_devices

    spec = get_device("h100-sxm")            # or "H100 SXM", "NVIDIA H100 80GB HBM3", "h100"
    spec.mem_bandwidth_gbs, spec.peak("bf16")
    get_device("a100-80gb-sxm:1g.10gb")      # a MIG slice as a device of its own
    get_device("rtx3090/amp-nchw-pt240")     # a measurement-table device string

The bundled spec files are under ``perfseer/devices/data/``, each device with its ``source``;
users add their own (see :mod:`perfseer.devices.registry`).
"""

from perfseer.devices.registry import (UnknownDeviceError, add_device_file, get_device, list_devices, read_spec_file,
                                       registry, user_dir)
from perfseer.devices.spec import DeviceSpec, DeviceSpecError, MigProfile

__all__ = ["DeviceSpec", "MigProfile", "DeviceSpecError", "UnknownDeviceError", "get_device", "list_devices",
           "add_device_file", "read_spec_file", "registry", "user_dir"]
