"""Importer of the HELP latency data: three NAS search spaces measured on many devices.

HELP (github.com/HayeonLee/HELP) publishes, per search space, one row per architecture and one
column per device and batch size; each value is the latency in ms of one inference.  Files are
recognised by their architecture columns, not their names:

==============  =====================  ===============================================  ===========
space           architecture columns   ``model``                                        input_shape
==============  =====================  ===============================================  ===========
NAS-Bench-201   ``arch_str``           ``nb201:`` + the cell string                     ``3x32x32``
FBNet           ``blocks``             ``fbnet:`` + the 22 blocks, space-separated      ``3x32x32``
Once-for-All    ``ks``, ``e``, ``d``,  ``ofa:ks=..;e=..;d=..;r=..`` (below)             ``3xRxR``
                ``r``
==============  =====================  ===============================================  ===========

One table row per (architecture, device column): ``phase`` is ``infer``, ``latency_ms`` the
value, ``source`` the file name, ``precision`` empty (HELP does not say).  A device column is
``<device>[_<batch>]``: a trailing ``_1``, ``_32``, ``_64`` or ``_256`` (HELP's batch sizes) is the
batch; no such suffix means batch 1.  A trailing ``_1`` counts as a batch only for a device that
also has another batch column in the folder, so ``essential_ph_1`` (the Essential PH-1 phone, one
column) stays a device name while ``titan_rtx_1`` is the Titan RTX at batch 1.  ``titan_xp``
(Once-for-All's file) and ``titanxp`` (the others) are the same GPU: both become ``titanxp``.

The Once-for-All reference encodes the MobileNetV3 sub-network reversibly
(:class:`perfseer.sources.nas.ofa.OFAArch`):
``ofa:ks=K1,...,K20;e=E1,...,E20;d=D1,...,D5;r=R`` -- the kernel size and expansion ratio of each
of the 20 block slots (5 stages x 4; slots past a stage's depth are unused but kept as HELP gives
them), the depth of each of the 5 stages, and the input resolution.

Files without architecture columns are ignored.  Latencies that are missing, non-numeric or at
most 0.05 ms are dropped and counted (see :mod:`perfseer.data.importers.base`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from perfseer.data.importers.base import (BAD_ARCHITECTURE, ImportReport, first_reason, list_folder, positive_ints,
                                          read_header, read_source_csv, screen_latency)
from perfseer.data.table import validate
from perfseer.errors import TableError
from perfseer.sources.nas.ofa import SLOTS as OFA_SLOTS
from perfseer.sources.nas.ofa import STAGES as OFA_STAGES
from perfseer.sources.nas.ofa import OFAArch

__all__ = ["OFAArch", "import_help_nas", "space_of", "split_device_columns"]

SOURCE = "help-nas"
BATCH_SIZES = (1, 32, 64, 256)
SPACES = {"nb201": ("arch_str",), "fbnet": ("blocks",), "ofa": ("ks", "e", "d", "r")}
ARCHITECTURE_COLUMNS = frozenset({"arch_index", *(c for cols in SPACES.values() for c in cols)})
# One name per device across HELP's files.
DEVICE_NAMES = {"titan_xp": "titanxp"}

FBNET_BLOCKS = 22

_NB201_OP = r"[a-z0-9_]+"
_NB201 = re.compile(
    rf"\|{_NB201_OP}~0\|\+\|{_NB201_OP}~0\|{_NB201_OP}~1\|\+\|{_NB201_OP}~0\|{_NB201_OP}~1\|{_NB201_OP}~2\|"
)
_FBNET_BLOCK = r"(?:skip|k\d+_e\d+(?:_g\d+)?)"
_FBNET = re.compile(rf"(?:{_FBNET_BLOCK} ){{{FBNET_BLOCKS - 1}}}{_FBNET_BLOCK}")
_BATCH_SUFFIX = re.compile(r"^(?P<device>.+?)_(?P<batch>\d+)$")


def split_device_columns(columns: Iterable[str]) -> dict[str, tuple[str, int]]:
    """Map each device column to ``(device, batch size)``.

    A trailing ``_N`` with N one of :data:`BATCH_SIZES` is the batch, except a ``_1`` on a device
    that has no other batch column among ``columns`` (then it is part of the name, as in
    ``essential_ph_1``).  Without a batch suffix the batch is 1.

    >>> split_device_columns(["titan_rtx_1", "titan_rtx_32", "essential_ph_1", "gold_6226"])
    {'titan_rtx_1': ('titan_rtx', 1), 'titan_rtx_32': ('titan_rtx', 32),
     'essential_ph_1': ('essential_ph_1', 1), 'gold_6226': ('gold_6226', 1)}
    """
    columns = list(dict.fromkeys(columns))
    suffixed = {}
    for col in columns:
        m = _BATCH_SUFFIX.match(col)
        if m and int(m["batch"]) in BATCH_SIZES:
            suffixed[col] = (m["device"], int(m["batch"]))
    batches: dict[str, set[int]] = {}
    for device, batch in suffixed.values():
        batches.setdefault(device, set()).add(batch)
    out = {}
    for col in columns:
        device, batch = suffixed.get(col, (col, 1))
        if col in suffixed and batch == 1 and len(batches[device]) < 2:
            device = col
        device = device.lower()
        out[col] = (DEVICE_NAMES.get(device, device), batch)
    return out


def space_of(header: Sequence[str], name: str) -> str | None:
    """Which search space a file holds, from its architecture columns (None: not a HELP file)."""
    found = [space for space, cols in SPACES.items() if all(c in header for c in cols)]
    if len(found) > 1:
        raise TableError(f"'{name}' has the architecture columns of several spaces ({', '.join(found)})",
                         "keep one search space per file")
    return found[0] if found else None


def _architectures(space: str, raw: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(model reference, input shape, valid)`` per row."""
    n = len(raw)
    if space == "nb201":
        arch = raw["arch_str"]
        ok = arch.str.fullmatch(_NB201.pattern).to_numpy(dtype=bool)
        return ("nb201:" + arch).to_numpy(dtype=object), np.full(n, "3x32x32", dtype=object), ok
    if space == "fbnet":
        blocks = raw["blocks"].str.split().str.join(" ")
        ok = blocks.str.fullmatch(_FBNET.pattern).fillna(False).to_numpy(dtype=bool)
        return ("fbnet:" + blocks).to_numpy(dtype=object), np.full(n, "3x32x32", dtype=object), ok
    lists = {}
    ok = np.ones(n, dtype=bool)
    for col, count in (("ks", OFA_SLOTS), ("e", OFA_SLOTS), ("d", OFA_STAGES)):
        lists[col] = raw[col].str.split().str.join(",")
        ok &= lists[col].str.fullmatch(rf"[1-9]\d*(?:,[1-9]\d*){{{count - 1}}}").fillna(False).to_numpy(dtype=bool)
    r, r_ok = positive_ints(raw["r"])
    ok &= r_ok
    r_text = pd.Series(r.astype(str), index=raw.index)
    refs = "ofa:ks=" + lists["ks"] + ";e=" + lists["e"] + ";d=" + lists["d"] + ";r=" + r_text
    return refs.to_numpy(dtype=object), ("3x" + r_text + "x" + r_text).to_numpy(dtype=object), ok


def read_file(path: Path, space: str, devices: dict[str, tuple[str, int]],
              report: ImportReport) -> pd.DataFrame:
    """The table rows of one HELP file; counts kept and dropped rows in ``report``."""
    raw = read_source_csv(path)
    columns = [c for c in raw.columns if c not in ARCHITECTURE_COLUMNS]
    if not columns:
        raise TableError(f"'{path.name}' has no device column", "keep HELP's latency columns, one per device")
    refs, shapes, arch_ok = _architectures(space, raw)
    frames = []
    for col in columns:
        device, batch = devices[col]
        latency, latency_reasons = screen_latency(raw[col])
        reasons = first_reason(len(raw), (~arch_ok, BAD_ARCHITECTURE), (latency_reasons != "", latency_reasons))
        report.count(device, reasons)
        keep = reasons == ""
        frames.append(pd.DataFrame({
            "model": refs[keep], "input_shape": shapes[keep], "batch_size": batch, "phase": "infer",
            "device": device, "latency_ms": latency[keep], "source": path.name,
        }))
    return pd.concat(frames, ignore_index=True)


def import_help_nas(directory: str | Path) -> tuple[pd.DataFrame, ImportReport]:
    """Read every HELP latency file (``*.csv`` with architecture columns) in ``directory``.

    Returns:
        ``(table, report)``: the validated measurement table, and the rows kept per device and
        dropped per reason.

    Raises:
        TableError: no such folder, no HELP file in it, a file that cannot be read.
    """
    report = ImportReport(SOURCE, str(directory))
    found = []
    for path in list_folder(directory, "HELP latency (*.csv)"):
        space = space_of(read_header(path), path.name) if path.suffix.lower() == ".csv" else None
        if space is None:
            report.ignored.append(path.name)
        else:
            found.append((path, space))
    if not found:
        raise TableError(f"no HELP latency file in '{directory}' (a CSV with arch_str, blocks or ks/e/d/r columns)",
                         "give the folder of HELP's latency CSV files (nasbench201_latency.csv, ...)")
    # Batch suffixes are read over the whole folder, so that a device's '_1' column is recognised
    # as batch 1 even when its other batches sit in another file.
    device_columns = [c for path, _ in found for c in read_header(path) if c not in ARCHITECTURE_COLUMNS]
    devices = split_device_columns(device_columns)
    frames = []
    for path, space in found:
        frames.append(read_file(path, space, devices, report))
        report.files.append(path.name)
    return validate(pd.concat(frames, ignore_index=True)), report

