"""Calibrating a bundled predictor to a new CPU, end to end: the i9-10940X card calibrated on this
VM's AMD EPYC (one thread, fp32, batch 1) under PyTorch eager and under ONNX Runtime, from the
calibration set's 20 measurements (``datasets/cpu_timm224``), scored on 97 timm models of 97
families (none of them calibration models).  The runs are in ``benchmarks/configs/calibration.json``
(``suite: cpu-calibration``); the code is the ``calibration`` suite's.
"""

from __future__ import annotations

from benchmarks.runner import Suite
from benchmarks.suites.calibration import render_cpu, steps_for

SUITE = Suite(
    name="cpu-calibration",
    description="calibrating the i9 card to this VM's EPYC (PyTorch and ONNX Runtime) from 20 rows, end to end",
    reads="datasets/cpu_timm224, benchmarks/gpu/heldout-families.txt, the i9-10940X card",
    time_full="~40 min (two calibrations, 117 models each exported)",
    time_quick="~15 min (PyTorch only, 10 held-out models)",
    steps=steps_for("cpu-calibration", False), render=render_cpu)
