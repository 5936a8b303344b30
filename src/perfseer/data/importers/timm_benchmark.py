"""Importer of timm's benchmark results (the ``results/`` folder of pytorch-image-models).

Each file is one device and setting, named
``benchmark-{infer|train}-{precision}-{layout}-pt{torch}-{cu<cuda>|cpu}-{device}[-dynamo].csv``;
each row is one model at one resolution, measured at one batch size.  One table row per CSV row:

===========  ================================================================================
column       value
===========  ================================================================================
model        ``timm:`` + the ``model`` column, + ``@reparam`` for inference rows: timm's benchmark
             fuses re-parameterisable models (RepVGG, MobileOne, FastViT...) before inference
             (its parameter counts are those of the fused form, see ``benchmarks/zoo_fidelity.py`` at tag research-2026-11);
             a no-op suffix for other models, and training runs the unfused model
input_shape  ``3xSxS``, S from ``infer_img_size`` / ``train_img_size``
batch_size   ``infer_batch_size`` / ``train_batch_size`` (``1024.0`` is read as 1024)
phase        ``infer`` or ``train``, from the file name
device       ``<device>/<precision>-<layout>-pt<torch>[-dynamo]``, e.g. ``rtx3090/amp-nchw-pt240``;
             the CUDA version is left out; GPU names are made one per GPU (``4090`` ->
             ``rtx4090``, ``5090`` -> ``rtx5090``, ``pro6000maxq`` -> ``rtxpro6000maxq``)
latency_ms   ``infer_step_time`` / ``train_step_time``: ms per step at that batch
precision    from the file name: ``amp``, ``amp_bf16``, ``bf16``, ``fp32``
source       the file name
===========  ================================================================================

Columns are found by name (their order differs between files); other columns (throughput,
GMACs, parameter count) are not copied.  Files not named ``benchmark-*.csv`` are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perfseer.data.importers.base import (BAD_BATCH, BAD_INPUT_SIZE, MISSING_MODEL, ImportReport, first_reason,
                                          list_folder, positive_ints, read_source_csv, screen_latency)
from perfseer.data.table import validate
from perfseer.errors import TableError
from perfseer.sources.zoo import REPARAM_SUFFIX

__all__ = ["BenchmarkFile", "GPU_NAMES", "device_name", "import_timm_benchmark", "parse_file_name"]

SOURCE = "timm-benchmark"
REPARAM = REPARAM_SUFFIX  # a timm name fused to its inference form (perfseer.sources.zoo)

# One name per GPU across timm's result files (newer files drop the "rtx").
GPU_NAMES = {"3090": "rtx3090", "4090": "rtx4090", "5090": "rtx5090", "pro6000maxq": "rtxpro6000maxq"}

_FILE = re.compile(
    r"^benchmark-(?P<phase>infer|train)-(?P<precision>[a-z0-9_]+)-(?P<layout>[a-z0-9_]+)"
    r"-pt(?P<torch>\d+)-(?P<runtime>cu\d+|cpu|rocm\d*)-(?P<device>[a-z0-9_]+)(?P<dynamo>-dynamo)?\.csv$"
)
_PATTERN = "benchmark-{infer|train}-{precision}-{layout}-pt{version}-{cuXXX|cpu}-{device}[-dynamo].csv"


@dataclass(frozen=True)
class BenchmarkFile:
    """What a timm result file's name says about its rows."""

    phase: str       # "infer" or "train"
    precision: str   # "amp", "amp_bf16", "bf16", "fp32", ...
    layout: str      # "nchw" or "nhwc"
    torch: str       # PyTorch version digits, "240" for 2.4.0
    runtime: str     # "cu124", "cpu"
    device: str      # one name per device: "rtx4090", "i9_10940x"
    dynamo: bool     # torch.compile

    @property
    def device_string(self) -> str:
        """``<device>/<precision>-<layout>-pt<torch>[-dynamo]``, the table's ``device``."""
        return f"{self.device}/{self.precision}-{self.layout}-pt{self.torch}{'-dynamo' if self.dynamo else ''}"


def device_name(name: str) -> str:
    """One name per GPU: ``4090`` and ``rtx4090`` -> ``rtx4090``; CPUs are kept as they are."""
    name = name.lower()
    return GPU_NAMES.get(name, name)


def parse_file_name(name: str) -> BenchmarkFile:
    """Read a result file's name, e.g. ``benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv``."""
    m = _FILE.match(name.lower())
    if m is None:
        raise TableError(f"cannot read the setting from the file name '{name}'",
                         f"keep timm's file names: {_PATTERN}")
    return BenchmarkFile(m["phase"], m["precision"], m["layout"], m["torch"], m["runtime"],
                         device_name(m["device"]), m["dynamo"] is not None)


def read_file(path: Path, report: ImportReport) -> pd.DataFrame:
    """The table rows of one result file; counts kept and dropped rows in ``report``."""
    meta = parse_file_name(path.name)
    raw = read_source_csv(path)
    step, batch_col, size_col = (f"{meta.phase}_{k}" for k in ("step_time", "batch_size", "img_size"))
    missing = [c for c in ("model", step, batch_col, size_col) if c not in raw.columns]
    if missing:
        raise TableError(f"'{path.name}' has no column {', '.join(missing)}",
                         f"a timm {meta.phase} result file needs the columns model, {step}, {batch_col} "
                         f"and {size_col}; check that its name says the right phase")
    n = len(raw)
    latency, latency_reasons = screen_latency(raw[step])
    batch, batch_ok = positive_ints(raw[batch_col])
    size, size_ok = positive_ints(raw[size_col])
    reasons = first_reason(n, ((raw["model"] == "").to_numpy(), MISSING_MODEL),
                           (latency_reasons != "", latency_reasons),
                           (~batch_ok, BAD_BATCH), (~size_ok, BAD_INPUT_SIZE))
    device = meta.device_string
    report.count(device, reasons)
    keep = reasons == ""
    size_text = size[keep].astype(str).astype(object)
    return pd.DataFrame({
        "model": "timm:" + raw["model"].to_numpy(dtype=object)[keep] + (REPARAM if meta.phase == "infer" else ""),
        "input_shape": "3x" + size_text + "x" + size_text,
        "batch_size": batch[keep],
        "phase": meta.phase,
        "device": device,
        "latency_ms": latency[keep],
        "precision": meta.precision,
        "source": path.name,
    })


def import_timm_benchmark(directory: str | Path) -> tuple[pd.DataFrame, ImportReport]:
    """Read every ``benchmark-*.csv`` file in ``directory`` into one measurement table.

    Returns:
        ``(table, report)``: the validated table, and the rows kept per device and dropped per
        reason.

    Raises:
        TableError: no such folder, no result file in it, a result file whose name or columns
            cannot be read.
    """
    report = ImportReport(SOURCE, str(directory))
    frames = []
    for path in list_folder(directory, "timm benchmark-*.csv"):
        if not (path.name.lower().startswith("benchmark-") and path.suffix.lower() == ".csv"):
            report.ignored.append(path.name)
            continue
        frames.append(read_file(path, report))
        report.files.append(path.name)
    if not frames:
        raise TableError(f"no timm result files (benchmark-*.csv) in '{directory}'",
                         "give the results/ folder of pytorch-image-models, or a copy of its "
                         "benchmark-*.csv files")
    return validate(pd.concat(frames, ignore_index=True)), report

