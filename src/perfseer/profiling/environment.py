"""What a measurement ran on: the facts that change its numbers, recorded with every result.

A latency means little without the machine, the library versions, the thread count and the
memory allocator (jemalloc or tcmalloc change both step time and peak RSS), so the collection
store keeps one :func:`capture` per worker and links every result to it.  The device name used in
measurement tables (``device`` column) is derived from it by :func:`device_slug`.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import sys
from importlib import metadata

_LIBRARIES = ("torch", "onnxruntime", "numpy", "onnx", "perfseer", "nvidia-ml-py", "ray")


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model Name", "cpu model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def allocator() -> str:
    """The malloc in use: ``jemalloc`` / ``tcmalloc`` / ``mimalloc`` when preloaded or mapped,
    else ``glibc`` (Linux) or ``system``.  ``MALLOC_CONF`` is jemalloc's configuration variable."""
    preload = os.environ.get("LD_PRELOAD", "")
    mapped = ""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            mapped = f.read()
    except OSError:
        pass
    for name in ("jemalloc", "tcmalloc", "mimalloc"):
        if name in preload or f"lib{name}" in mapped:
            return name
    if os.environ.get("MALLOC_CONF") or os.environ.get("_RJEM_MALLOC_CONF"):
        return "jemalloc"
    return "glibc" if sys.platform.startswith("linux") else "system"


def library_versions() -> dict[str, str]:
    out = {}
    for name in _LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def capture(threads: int | None = None, extra: dict | None = None) -> dict:
    """The environment of this process, as a JSON-able dict.

    Args:
        threads: the intra-op threads the backend runs with.
        extra: backend facts (GPU name, driver, CUDA version, ...), merged in.
    """
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count()
    env = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "machine": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "libraries": library_versions(),
        "threads": threads,
        "allocator": allocator(),
        "malloc_conf": os.environ.get("MALLOC_CONF"),
        "ld_preload": os.environ.get("LD_PRELOAD"),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "hostname": platform.node(),
    }
    env.update(extra or {})
    return env


def fingerprint(env: dict) -> str:
    """A short hash of the facts that change measurements (the host name is left out, so that
    identical machines of a cluster share one environment)."""
    facts = {k: v for k, v in env.items() if k != "hostname"}
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]


_NOISE = re.compile(r"\((?:r|tm|c)\)|\b(?:intel|amd|nvidia|corporation|cpu|processor|geforce|tesla|"
                    r"\d+-core|with radeon graphics)\b|@.*$", re.IGNORECASE)


def device_slug(name: str) -> str:
    """A device name for the ``device`` column: ``Intel(R) Xeon(R) Platinum 8370C CPU @ 2.80GHz``
    -> ``xeon_platinum_8370c``; ``NVIDIA GeForce RTX 3090`` -> ``rtx3090``; ``NVIDIA H100 80GB
    HBM3`` -> ``h100_80gb_hbm3``."""
    text = _NOISE.sub(" ", name).lower()
    text = re.sub(r"\brtx\s+(\d)", r"rtx\1", text)
    text = re.sub(r"\bgtx\s+(\d)", r"gtx\1", text)
    words = re.findall(r"[a-z0-9]+", text)
    return "_".join(words) or "unknown"
