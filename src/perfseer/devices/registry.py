"""The device registry: the bundled spec files plus the user's, looked up by name or alias.

Names are matched case- and separator-insensitively (``"H100 SXM"``, ``"h100_sxm"`` and
``"h100-sxm"`` are one name), with vendor words (NVIDIA, GeForce, Tesla, AMD, Instinct, Intel)
optional, so ``torch.cuda.get_device_name()`` strings resolve.  A measurement-table device string
resolves by its part before ``/`` (``rtx3090/amp-nchw-pt240`` -> ``rtx3090``).  ``NAME:PROFILE``
is a MIG slice of a registered GPU (``a100-80gb-sxm:1g.10gb``).

User spec files: every ``*.json`` in the folder ``$PERFSEER_DEVICES`` (default
``~/.config/perfseer/devices``) is read after the bundled ones; a user device with a bundled
device's name replaces it.  ``perfseer devices --add FILE`` validates a file and copies it there.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
from pathlib import Path

from perfseer.devices.spec import DeviceSpec, DeviceSpecError, parse_file_content
from perfseer.errors import PerfseerError

BUNDLED_DIR = Path(__file__).resolve().parent / "data"
_VENDOR_WORDS = ("nvidia", "geforce", "tesla", "amd", "instinct", "intel", "core", "quadro", "radeon")


class UnknownDeviceError(PerfseerError, KeyError):
    """A device name that matches no registered device (the message lists close matches)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return Exception.__str__(self)


def user_dir() -> Path:
    """The folder of the user's device spec files: ``$PERFSEER_DEVICES`` or ``~/.config/perfseer/devices``."""
    env = os.environ.get("PERFSEER_DEVICES")
    return Path(env).expanduser() if env else Path.home() / ".config" / "perfseer" / "devices"


def normalize(name: str) -> str:
    """The lookup key of a name: lower case, letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


def _keys(name: str) -> set[str]:
    """Lookup keys of a name: normalised, and with vendor words and a memory suffix removed."""
    low = str(name).lower()
    out = {normalize(low)}
    words = [w for w in re.split(r"[^a-z0-9]+", low) if w and w not in _VENDOR_WORDS]
    out.add("".join(words))
    return {k for k in out if k}


def read_spec_file(path: str | os.PathLike) -> list[DeviceSpec]:
    """The devices of one spec file.

    Raises:
        DeviceSpecError: the file is missing, not JSON, or a device in it is invalid.
    """
    p = Path(path)
    try:
        obj = json.loads(p.read_text())
    except FileNotFoundError:
        raise DeviceSpecError(f"device spec file {p} does not exist", "pass the path of a JSON spec file") from None
    except (OSError, ValueError) as e:
        raise DeviceSpecError(f"device spec file {p} is not readable JSON ({e})",
                              "fix the file (format: docs/concepts/spec-model.md)") from e
    return parse_file_content(obj, str(p))


class Registry:
    """Devices by canonical name, with an alias index.  :func:`registry` gives the default one."""

    def __init__(self, specs: list[DeviceSpec]):
        self.devices: dict[str, DeviceSpec] = {}
        for s in specs:
            self.devices[s.name] = s  # later files (the user's) replace earlier ones
        self._index: dict[str, str] = {}
        for s in self.devices.values():
            for alias in (s.name, s.display_name, *s.aliases):
                for k in _keys(alias):
                    self._index.setdefault(k, s.name)
        for s in self.devices.values():  # a canonical name always wins over another device's alias
            for k in _keys(s.name):
                self._index[k] = s.name

    @classmethod
    def load(cls, extra_dirs: list[Path] | None = None) -> "Registry":
        specs: list[DeviceSpec] = []
        for f in sorted(BUNDLED_DIR.glob("*.json")):
            specs.extend(read_spec_file(f))
        for d in extra_dirs if extra_dirs is not None else [user_dir()]:
            if d.is_dir():
                for f in sorted(d.glob("*.json")):
                    specs.extend(read_spec_file(f))
        return cls(specs)

    def resolve(self, name: str) -> str | None:
        """The canonical name ``name`` refers to, or ``None``."""
        for k in _keys(name):
            if k in self._index:
                return self._index[k]
        return None

    def get(self, name: str) -> DeviceSpec:
        if not isinstance(name, str) or not name.strip():
            raise UnknownDeviceError(f"device name must be a non-empty string, got {name!r}",
                                     "pass a name from perfseer devices, e.g. 'h100-sxm'")
        text = name.strip()
        base = text.split("/", 1)[0]  # measurement-table device strings: rtx3090/amp-nchw-pt240
        profile = None
        if ":" in base:
            base, profile = base.split(":", 1)
        canon = self.resolve(base)
        if canon is None:
            raise UnknownDeviceError(
                f"unknown device {text!r}" + (f"; close matches: {', '.join(self.close_matches(base))}"
                                              if self.close_matches(base) else ""),
                "run 'perfseer devices' for the known ones, or describe yours in a JSON spec file and add it with "
                f"'perfseer devices --add FILE' (copied to {user_dir()}; format in docs/concepts/spec-model.md)")
        spec = self.devices[canon]
        return spec.mig(profile) if profile else spec

    def close_matches(self, name: str, n: int = 5) -> list[str]:
        key = normalize(name)
        hits = difflib.get_close_matches(key, list(self._index), n=12, cutoff=0.5)
        hits += [k for k in self._index if key and (key in k or k in key) and len(key) >= 2]
        out: list[str] = []
        for h in hits:
            c = self._index[h]
            if c not in out:
                out.append(c)
        return out[:n]


_REGISTRY: Registry | None = None
_REGISTRY_DIR: str | None = None


def registry() -> Registry:
    """The registry of the bundled and user spec files (re-read when ``$PERFSEER_DEVICES`` changes)."""
    global _REGISTRY, _REGISTRY_DIR
    d = str(user_dir())
    if _REGISTRY is None or _REGISTRY_DIR != d:
        _REGISTRY, _REGISTRY_DIR = Registry.load(), d
    return _REGISTRY


def reload() -> Registry:
    """Read the spec files again (after adding one)."""
    global _REGISTRY
    _REGISTRY = None
    return registry()


def get_device(name: str) -> DeviceSpec:
    """The :class:`DeviceSpec` of ``name``: a canonical name, an alias, a measurement-table device
    string (``rtx3090/amp-nchw-pt240``) or ``GPU:MIGPROFILE`` (``a100-80gb-sxm:1g.10gb``).

    Raises:
        UnknownDeviceError: no such device (the message lists close matches and how to add one).
        DeviceSpecError: the GPU has no such MIG profile.

    Example::

        >>> get_device("H100 SXM").mem_bandwidth_gbs
        3350.0
    """
    return registry().get(name)


def list_devices(kind: str | None = None, include_mig: bool = False) -> list[DeviceSpec]:
    """All registered devices (``kind``: only ``gpu`` or ``cpu``), sorted by kind and name; with
    ``include_mig`` also every MIG slice as a derived device."""
    out = []
    for s in sorted(registry().devices.values(), key=lambda s: (s.kind != "gpu", s.name)):
        if kind is None or s.kind == kind:
            out.append(s)
            if include_mig:
                out.extend(s.mig(p.name) for p in s.mig_profiles)
    return out


def add_device_file(path: str | os.PathLike, directory: str | os.PathLike | None = None) -> list[DeviceSpec]:
    """Validate a spec file and copy it into the user's device folder (atomically).

    Returns:
        The devices it defines.

    Raises:
        DeviceSpecError: the file is invalid (nothing is copied).
    """
    specs = read_spec_file(path)
    dest_dir = Path(directory) if directory is not None else user_dir()
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / Path(path).name
    if not dest.name.endswith(".json"):
        dest = dest.with_name(dest.name + ".json")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.copyfile(path, tmp)
    os.replace(tmp, dest)
    reload()
    return specs
