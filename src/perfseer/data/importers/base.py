"""What every importer shares: the import report, reading a source CSV, screening its values.

An importer turns a folder of a public benchmark's files into a measurement table
(:mod:`perfseer.data.table`) and an :class:`ImportReport`.  Values that cannot be measurements are
dropped, not guessed: a missing or non-numeric latency, a latency of at most
:data:`MIN_LATENCY_MS` (the near-zero values some edge devices report for degenerate
architectures), an unusable batch size or input size, an unreadable architecture.  Each drop is
counted under its reason.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from perfseer.errors import TableError

MIN_LATENCY_MS = 0.05

MISSING_LATENCY = "missing latency"
NON_NUMERIC_LATENCY = "non-numeric latency"
SMALL_LATENCY = f"latency <= {MIN_LATENCY_MS} ms"
MISSING_MODEL = "missing model name"
BAD_BATCH = "bad batch size"
BAD_INPUT_SIZE = "bad input size"
BAD_ARCHITECTURE = "bad architecture"


@dataclass
class ImportReport:
    """What an import read, kept and dropped.

    Attributes:
        source: the importer's name, e.g. ``"timm-benchmark"``.
        directory: the folder that was read.
        files: the files the rows came from, in the order read.
        ignored: files in the folder that are not this benchmark's (not read).
        rows: rows kept per device string.
        dropped: rows dropped per ``(device, reason)``.
    """

    source: str
    directory: str
    files: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    rows: Counter = field(default_factory=Counter)
    dropped: Counter = field(default_factory=Counter)

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    @property
    def total_dropped(self) -> int:
        return sum(self.dropped.values())

    def dropped_by_reason(self) -> Counter:
        out = Counter()
        for (_, reason), count in self.dropped.items():
            out[reason] += count
        return out

    def dropped_by_device(self) -> Counter:
        out = Counter()
        for (device, _), count in self.dropped.items():
            out[device] += count
        return out

    def count(self, device: str, reasons: np.ndarray) -> None:
        """Record one block of rows for ``device``: ``reasons[i]`` is ``""`` for a kept row."""
        kept = reasons == ""
        self.rows[device] += int(kept.sum())
        for reason, n in Counter(reasons[~kept].tolist()).items():
            self.dropped[(device, reason)] += n


def list_folder(directory: str | Path, what: str) -> list[Path]:
    """The files directly in ``directory``, sorted by name."""
    folder = Path(directory)
    if not folder.is_dir():
        raise TableError(f"no folder '{folder}'", f"give the folder that holds the {what} files")
    return sorted(p for p in folder.iterdir() if p.is_file())


def read_header(path: Path) -> list[str]:
    """The stripped column names of a CSV file; a repeated name is an error."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            header = [h.strip() for h in next(csv.reader(f), [])]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise TableError(f"cannot read '{path.name}': {e}", "check that it is a readable CSV file") from e
    for name in header:
        if header.count(name) > 1:
            raise TableError(f"'{path.name}': column '{name}' appears more than once in the header",
                             "keep one column of each name")
    return header


def read_source_csv(path: Path) -> pd.DataFrame:
    """A benchmark's CSV file with every cell as stripped text (``""`` where empty)."""
    read_header(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except (OSError, ValueError) as e:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TableError(f"cannot read '{path.name}': {detail}", "check that it is a well-formed CSV file") from e
    df.columns = [str(c).strip() for c in df.columns]
    return df.apply(lambda s: s.str.strip())


def _numbers(text: pd.Series) -> np.ndarray:
    return pd.to_numeric(text, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def screen_latency(text: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Latencies in ms from a text column, and the reason to drop each (``""``: keep)."""
    values = _numbers(text)
    reasons = np.full(len(text), "", dtype=object)
    empty = (text == "").to_numpy(dtype=bool)
    with np.errstate(invalid="ignore"):
        small = np.isfinite(values) & (values <= MIN_LATENCY_MS)
    reasons[small] = SMALL_LATENCY
    reasons[~np.isfinite(values)] = NON_NUMERIC_LATENCY
    reasons[empty] = MISSING_LATENCY
    return values, reasons


def positive_ints(text: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Whole numbers >= 1 from a text column (``"1024.0"`` counts as 1024), and which are valid."""
    values = _numbers(text)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(values) & (values >= 1) & (values < 2**31) & (np.floor(values) == values)
    return np.where(ok, values, 1).astype(np.int64), ok


def first_reason(n: int, *checks: tuple[np.ndarray, str | np.ndarray]) -> np.ndarray:
    """Per row, the reason of the first check whose mask is true there (``""``: no problem).

    A check is ``(mask, reason)``; ``reason`` is a string or an array of per-row reasons.
    """
    reasons = np.full(n, "", dtype=object)
    for mask, reason in checks:
        hit = (reasons == "") & np.asarray(mask, dtype=bool)
        reasons[hit] = reason[hit] if isinstance(reason, np.ndarray) else reason
    return reasons
