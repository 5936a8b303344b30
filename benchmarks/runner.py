"""The benchmark runner's machinery: suites, resumable steps, the results page.

A suite is a module of :mod:`benchmarks.suites` with a ``SUITE`` object (:class:`Suite`): a name,
a one-line description, the data it reads, its expected run time in full and ``--quick``, a
function listing its steps and one rendering its section of ``docs/results.md`` from the steps'
results.  Each step's result is a JSON file under the work directory
(``<work>/<suite>[-quick]/<step>.json``), written atomically (a temporary file renamed over it),
so an interrupted run resumes where it stopped and a finished step is never run again (delete the
file, or the directory, to run it again).
"""

from __future__ import annotations

import json
import os
import platform
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS_MD = ROOT / "docs" / "results.md"
CONFIGS = Path(__file__).resolve().parent / "configs"
DATA = Path(__file__).resolve().parent / "data"
DEFAULT_WORK = ROOT / ".bench-work"


class BenchError(SystemExit):
    """A clear error for the user (bad input, missing data): printed without a traceback."""

    def __init__(self, message: str):
        super().__init__(f"error: {message}")


@dataclass
class Step:
    """One resumable unit of a suite: ``run()`` returns a JSON-able dict."""

    name: str
    run: Callable[[], dict]


@dataclass
class Context:
    quick: bool
    work: Path
    log: Callable[[str], None] = print
    options: dict = field(default_factory=dict)


@dataclass
class Suite:
    name: str
    description: str
    reads: str
    time_full: str
    time_quick: str
    steps: Callable[[Context], list[Step]]
    render: Callable[[Context, dict[str, dict]], str]
    kind: str = "accuracy"  # accuracy (exact) | timing (within a stated tolerance)


def load_config(name: str) -> dict:
    """An adopted configuration, ``benchmarks/configs/<name>.json``."""
    path = CONFIGS / f"{name}.json"
    if not path.exists():
        raise BenchError(f"no configuration {path}")
    return json.loads(path.read_text())


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def run_steps(suite: Suite, ctx: Context) -> dict[str, dict]:
    """Run the suite's unfinished steps (each result written atomically), return every result."""
    out: dict[str, dict] = {}
    ctx.work.mkdir(parents=True, exist_ok=True)
    steps = suite.steps(ctx)
    for i, step in enumerate(steps, 1):
        path = ctx.work / f"{_slug(step.name)}.json"
        if path.exists():
            try:
                out[step.name] = json.loads(path.read_text())
                ctx.log(f"[{i}/{len(steps)}] {step.name}: done before ({path})")
                continue
            except json.JSONDecodeError:
                ctx.log(f"[{i}/{len(steps)}] {step.name}: unreadable result, running it again")
        ctx.log(f"[{i}/{len(steps)}] {step.name} ...")
        t0 = time.perf_counter()
        res = step.run()
        res = {**res, "_meta": {"seconds": round(time.perf_counter() - t0, 2), "loadavg": loadavg(),
                                "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                                "host": platform.node(), "cpus": os.cpu_count()}}
        atomic_write(path, json.dumps(res, indent=1, default=_jsonable))
        out[step.name] = json.loads(path.read_text())
        ctx.log(f"[{i}/{len(steps)}] {step.name}: {res['_meta']['seconds']} s")
    return out


def finished_steps(suite: Suite, ctx: Context) -> tuple[dict[str, dict], list[str]]:
    """The results of the steps a run already finished (read, nothing run) and the names of the rest."""
    done, pending = {}, []
    for step in suite.steps(ctx):
        path = ctx.work / f"{_slug(step.name)}.json"
        try:
            done[step.name] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            pending.append(step.name)
    return done, pending


def _jsonable(v: Any):
    try:
        import numpy as np

        if isinstance(v, np.generic):
            return v.item()
        if isinstance(v, np.ndarray):
            return v.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(v, Path):
        return str(v)
    raise TypeError(f"not JSON-able: {type(v).__name__}")


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return []


def marker(name: str) -> tuple[str, str]:
    return f"<!-- suite:{name} -->", f"<!-- /suite:{name} -->"


def write_section(name: str, body: str, page: Path = RESULTS_MD) -> None:
    """Replace the text between the suite's markers in the results page (appended if absent)."""
    start, end = marker(name)
    text = page.read_text() if page.exists() else "# Results\n"
    block = f"{start}\n{body.strip()}\n{end}"
    pat = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if pat.search(text):
        text = pat.sub(lambda _m: block, text, count=1)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    atomic_write(page, text)


# ---- small formatting helpers shared by the suites ----

def md_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join("-" if v is None else str(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def f(v: Any, nd: int = 1) -> str:
    if v is None:
        return "-"
    try:
        return f"{float(v):.{nd}f}"
    except (TypeError, ValueError):
        return str(v)


def timing_note(results: dict[str, dict]) -> str:
    """The machine and load average of the steps, beside any timing."""
    metas = [r["_meta"] for r in results.values() if "_meta" in r]
    if not metas:
        return ""
    loads = [m["loadavg"][0] for m in metas if m.get("loadavg")]
    when = max(m["finished"] for m in metas)
    rng = f"{min(loads):.2f}-{max(loads):.2f}" if loads else "?"
    return f"Measured {when} on {metas[0].get('cpus')} CPUs, 1-minute load average {rng} during the steps."


def run_main(main: Callable, argv: list[str], out: Path) -> dict:
    """Run a benchmark module's ``main(argv)`` that writes ``--json out``, its printout kept
    beside it (``out`` with ``.txt``), and return the JSON."""
    import contextlib
    import io

    out.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv + ["--json", str(out)])
    atomic_write(out.with_suffix(".txt"), buf.getvalue())
    if rc not in (None, 0) or not out.exists():
        raise BenchError(f"{main.__module__} {' '.join(argv)} failed (rc {rc}); its output: {out.with_suffix('.txt')}")
    return json.loads(out.read_text())
