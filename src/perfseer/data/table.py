"""The measurement table: perfseer's interchange format for measured performance.

One row per measurement: one model, at one input shape and batch size, run in one phase on one
device (in one setting), with the metrics that were measured.  A table is a CSV or a Parquet file;
the format follows the suffix (``.csv``; ``.parquet`` or ``.pq``, which need the optional
``pyarrow``: ``pip install 'perfseer[parquet]'``).

Columns (units are part of the metric names):

=============  =======  ==========================================================================
column         type     meaning
=============  =======  ==========================================================================
model          text     a model reference: a path to an ``.onnx`` file, ``timm:NAME``,
                        ``torchvision:NAME``, ``example:NAME``, ``nb201:ARCH_STR`` (NAS-Bench-201
                        cell string), ``fbnet:BLOCKS`` (22 space-separated FBNet block choices),
                        ``ofa:ks=..;e=..;d=..;r=..`` (Once-for-All MobileNetV3 sub-network, see
                        :mod:`perfseer.data.importers.help_nas`), ``space:CONFIG`` or ``hf:NAME``
                        (a HuggingFace transformer, :mod:`perfseer.sources.hf`)
input_shape    text     one sample's shape without the batch, dimensions joined by ``x``:
                        ``3x224x224`` (``hf:`` models: the sequence length, ``512``)
batch_size     integer  samples per step, >= 1
phase          text     ``infer`` (forward pass) or ``train`` (forward, backward, optimizer step)
device         text     the device and its setting, ``<device>[/<setting>]``, e.g.
                        ``rtx3090/amp-nchw-pt240``, ``i9_10940x/fp32-nchw-pt240-dynamo``,
                        ``titan_rtx``
latency_ms     float    milliseconds per step (one step processes the whole batch), > 0
memory_mb      float    peak device memory in MiB (2**20 bytes), >= 0
util_pct       float    accelerator utilisation in percent, 0 to 100
energy_j       float    energy per step in joules, >= 0
precision      text     optional: ``fp32``, ``amp``, ``bf16``, ``amp_bf16``, ...
source         text     optional: where the row came from, e.g. the benchmark's file name
=============  =======  ==========================================================================

``model``, ``input_shape``, ``batch_size``, ``phase`` and ``device`` are required; at least one of
the four metric columns must be present, and every row needs at least one metric value (an empty
cell is "not measured").  Any other column is kept as it is.

:func:`validate` returns the cleaned table: surrounding spaces stripped, ``input_shape``
normalised (``3, 224, 224`` -> ``3x224x224``), ``phase`` lower-cased, ``batch_size`` an integer,
metrics floats (NaN where empty); every standard column is present (added empty where absent) in
the order above, then the extra columns in their original order.  A bad value raises
:class:`~perfseer.errors.TableError` naming the row: row N is the N-th data row, counted from 1
(in a CSV without blank lines, line N + 1).

Example::

    from perfseer.data.table import read_table, write_table

    write_table([{"model": "timm:resnet50", "input_shape": "3x224x224", "batch_size": 32,
                  "phase": "infer", "device": "rtx3090/amp-nchw-pt240", "latency_ms": 41.3}],
                "runs.csv")
    df = read_table("runs.csv")
"""

from __future__ import annotations

import csv
import importlib.util
import os
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perfseer.errors import MissingDependencyError, TableError
from perfseer.sources import NAMES

REQUIRED = ("model", "input_shape", "batch_size", "phase", "device")
OPTIONAL = ("precision", "source")
PHASES = ("infer", "train")
MODEL_SCHEMES = NAMES  # the table of perfseer.sources
FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


@dataclass(frozen=True)
class Metric:
    """A metric column: its unit (for messages) and the range of valid values."""

    name: str
    unit: str
    low: float
    low_inclusive: bool
    high: float | None = None

    def bounds(self) -> str:
        if self.high is not None:
            return f"between {self.low:g} and {self.high:g}"
        return f"{'>=' if self.low_inclusive else '>'} {self.low:g}"


METRICS = (
    Metric("latency_ms", "milliseconds per step", 0.0, False),
    Metric("memory_mb", "MiB of peak memory", 0.0, True),
    Metric("util_pct", "percent utilisation", 0.0, True, 100.0),
    Metric("energy_j", "joules per step", 0.0, True),
)
METRIC_COLUMNS = tuple(m.name for m in METRICS)
COLUMNS = REQUIRED + METRIC_COLUMNS + OPTIONAL

# Unit-less names people write for the metric columns: named in the fix when no metric is found.
_METRIC_HINTS = {"latency": "latency_ms", "time_ms": "latency_ms", "step_time": "latency_ms",
                 "memory": "memory_mb", "mem_mb": "memory_mb", "util": "util_pct",
                 "utilization": "util_pct", "energy": "energy_j"}
_MAX_BATCH = 2**31
# SCHEME:NAME; two letters at least, so that a Windows drive (C:\\) reads as a path
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9_]+):(.*)$", re.DOTALL)
_SHAPE = re.compile(r"[1-9]\d*(?:x[1-9]\d*)*")


def table_format(path: str | os.PathLike) -> str:
    """``"csv"`` or ``"parquet"`` from the suffix of ``path``; checks that Parquet can be used."""
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise TableError(f"cannot tell the format of table '{path}' from its suffix",
                         "name it .csv or .parquet")
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise MissingDependencyError("pyarrow", "parquet", f"the Parquet table '{path.name}'")
    return fmt


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read and :func:`validate` a measurement table (CSV or Parquet, from the suffix)."""
    path = Path(path)
    fmt = table_format(path)
    if not path.is_file():
        raise TableError(f"no table at '{path}'", "check the path")
    try:
        df = _read_csv(path) if fmt == "csv" else pd.read_parquet(path, engine="pyarrow")
    except TableError:
        raise
    except (OSError, ValueError) as e:  # ParserError, UnicodeDecodeError, ArrowInvalid are ValueErrors
        raise _unreadable(path, fmt, e) from e
    try:
        return validate(df)
    except TableError as e:
        raise TableError(f"{path}: {e.problem}", e.fix) from None


def iter_table(path: str | os.PathLike, chunk_rows: int = 10_000) -> Iterator[pd.DataFrame]:
    """A measurement table read ``chunk_rows`` rows at a time, each chunk checked by :func:`validate`
    (a bad row named by its place in the whole table): memory holds one chunk whatever the table's size,
    and a reader that has seen enough stops there.  CSV is streamed; Parquet read by record batch."""
    path = Path(path)
    fmt = table_format(path)
    if not path.is_file():
        raise TableError(f"no table at '{path}'", "check the path")
    start, seen = 0, False
    try:
        if fmt == "csv":
            chunks = pd.read_csv(path, chunksize=chunk_rows, **_csv_options(path))
        else:
            import pyarrow.parquet as pq  # deferred: an optional extra

            chunks = (b.to_pandas() for b in pq.ParquetFile(path).iter_batches(batch_size=chunk_rows))
        for df in chunks:
            seen = True
            try:
                yield validate(df, first_row=start + 1)
            except TableError as e:
                raise TableError(f"{path}: {e.problem}", e.fix) from None
            start += len(df)
        if not seen:  # a header and no row: validated all the same (its columns)
            yield validate(_read_csv(path) if fmt == "csv" else pd.read_parquet(path, engine="pyarrow"))
    except TableError:
        raise
    except (OSError, ValueError) as e:
        raise _unreadable(path, fmt, e) from e


def _unreadable(path: Path, fmt: str, e: Exception) -> TableError:
    detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return TableError(f"cannot read '{path}' as {fmt.upper()}: {detail}", f"give a {fmt.upper()} measurement table")


def write_table(rows_or_df: pd.DataFrame | Iterable[Mapping], path: str | os.PathLike) -> pd.DataFrame:
    """Validate a table and write it to ``path`` (CSV or Parquet, from the suffix), atomically.

    Args:
        rows_or_df: a DataFrame, or rows as mappings from column name to value.
        path: the file to write; it is replaced only once the new table is complete.

    Returns:
        The cleaned table that was written.
    """
    path = Path(path)
    fmt = table_format(path)
    df = rows_or_df if isinstance(rows_or_df, pd.DataFrame) else pd.DataFrame(list(rows_or_df))
    df = validate(df)
    # A hidden sibling, so that os.replace() stays on one filesystem; not mkstemp(), whose 0600
    # mode would end up on the table.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        if fmt == "csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False, engine="pyarrow")
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise TableError(f"cannot write '{path}': {e.strerror or e}",
                         "choose a writable path in an existing folder") from e
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
    return df


def _read_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, **_csv_options(path))


def _csv_options(path: Path) -> dict:
    """How :func:`pandas.read_csv` reads a measurement table (the header checked first)."""
    # The header is checked first: pandas would silently rename a repeated column to 'name.1'.
    with open(path, newline="", encoding="utf-8-sig") as f:
        header = next(csv.reader(f), [])
    names = [h.strip() for h in header]
    for name in names:
        if names.count(name) > 1:
            raise TableError(f"'{path}': column '{name}' appears more than once in the header",
                             "keep one column of each name")
    # Standard columns are read as text and parsed by validate(), so that a bad cell is reported
    # with its row; only empty cells count as missing ('NA' is a bad value, not a gap).
    dtype = {h: str for h, n in zip(header, names) if n in COLUMNS}
    return {"dtype": dtype, "keep_default_na": False, "na_values": [""], "encoding": "utf-8-sig"}


def _text(series: pd.Series) -> pd.Series:
    """The column as stripped text, NA where missing or empty."""
    text = series.astype("string").str.strip()
    return text.mask(text == "")


def _numbers(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(values, missing)``: float values of a column (NaN where missing or not a number) and
    where the cell is missing or empty."""
    if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
        values = series.to_numpy(dtype=float, na_value=np.nan)
        return values, np.isnan(values)
    text = _text(series)
    values = pd.to_numeric(pd.Series(text.to_numpy(dtype=object, na_value=None)), errors="coerce")
    return values.to_numpy(dtype=float, na_value=np.nan), text.isna().to_numpy()


def _show(value, limit: int = 60) -> str:
    """A cell's value for a one-line message: whitespace collapsed, long values cut."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _per_value(text: pd.Series, fn, missing) -> np.ndarray:
    """``fn`` of each row's value, computed once per distinct value (``missing`` where NA)."""
    codes, uniques = pd.factorize(text)
    # code -1 (NA) picks the appended last element
    return np.array([*(fn(u) for u in uniques), missing], dtype=object)[codes]


def _model_problem(ref: str) -> str:
    """``""`` for a usable model reference, else what is wrong with it."""
    m = _SCHEME.match(ref)
    if m is None:
        return "" if ref.lower().endswith(".onnx") else "not a reference"
    if m[1] not in MODEL_SCHEMES:
        return "unknown scheme"
    return "" if m[2].strip() else "no name"


def _normalise_shape(text: str) -> str | None:
    """``"3, 224, 224"`` / ``"(3,224,224)"`` / ``"3X224x224"`` -> ``"3x224x224"``; None if not a shape."""
    shape = re.sub(r"\s+", "", text.lower()).replace(",", "x")
    if shape.startswith("(") and shape.endswith(")"):
        shape = shape[1:-1]
    return shape if _SHAPE.fullmatch(shape) else None


class _Problems:
    """Collects per-row checks; reports the first bad row (of any check) and how many rows are bad."""

    def __init__(self, n: int, first_row: int = 1):
        self.first_row = first_row  # the number of the first row in messages
        self.bad = np.zeros(n, dtype=bool)
        self.first: tuple[int, int, str, str] | None = None
        self._order = 0

    def check(self, mask, describe, fix: str) -> None:
        """``mask``: True for bad rows; ``describe(i)``: the problem at row position ``i``."""
        mask = np.asarray(mask, dtype=bool) & ~self.bad  # one problem per row is enough
        self._order += 1
        if mask.any():
            i = int(np.argmax(mask))
            if self.first is None or (i, self._order) < self.first[:2]:
                self.first = (i, self._order, describe(i), fix)
            self.bad |= mask

    def raise_first(self) -> None:
        if self.first is None:
            return
        i, _, problem, fix = self.first
        more = int(self.bad.sum()) - 1
        extra = f" ({more} more row{'s' if more != 1 else ''} with problems)" if more else ""
        raise TableError(f"row {i + self.first_row}: {problem}{extra}", fix)


def validate(df: pd.DataFrame, first_row: int = 1) -> pd.DataFrame:
    """Check a measurement table and return it cleaned (see the module docstring).

    Args:
        df: the table as read, any index; row N of a message is its N-th row, from ``first_row``
            (a part of a larger table: the number of its first row there).

    Returns:
        A new DataFrame with a fresh ``RangeIndex``, the standard columns first.

    Raises:
        TableError: a required column is missing, no metric column is present, a column name is
            repeated, or a row holds a bad value (the message names the first such row).
    """
    if not isinstance(df, pd.DataFrame):
        raise TableError(f"expected a table (pandas DataFrame), got {type(df).__name__}",
                         "pass a DataFrame or use write_table() with a list of rows")
    names = [str(c).strip() for c in df.columns]
    for name in names:
        if names.count(name) > 1:
            raise TableError(f"column '{name}' appears more than once", "keep one column of each name")
    df = df.set_axis(names, axis=1).reset_index(drop=True)
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise TableError(f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
                         f"a measurement table needs the columns {', '.join(REQUIRED)} "
                         f"and at least one of {', '.join(METRIC_COLUMNS)}")
    metrics = [m for m in METRICS if m.name in names]
    if not metrics:
        hints = [f"rename '{n}' to '{_METRIC_HINTS[n.lower()]}'" for n in names if n.lower() in _METRIC_HINTS]
        raise TableError("no metric column",
                         "; ".join(hints) if hints else
                         f"add at least one of {', '.join(METRIC_COLUMNS)} (units as in the names)")

    n = len(df)
    problems = _Problems(n, first_row)
    numeric = ("batch_size", *(m.name for m in metrics))
    text = {c: _text(df[c]) for c in (*REQUIRED, *(c for c in OPTIONAL if c in names)) if c not in numeric}
    absent = {c: t.isna().to_numpy() for c, t in text.items()}
    number = {}
    for c in numeric:
        number[c], absent[c] = _numbers(df[c])

    def raw(column):
        return lambda i: f"{column} '{_show(df[column].iat[i])}'"

    def empty(column):
        return lambda i: f"{column} is empty"

    # model: SCHEME:NAME with a known scheme, or a path to an .onnx file
    model = text["model"]
    scheme_fix = (f"write an .onnx path or SCHEME:NAME with SCHEME one of {', '.join(MODEL_SCHEMES)}, "
                  "e.g. timm:resnet50")
    model_problem = _per_value(model, _model_problem, "")
    problems.check(absent["model"], empty("model"), scheme_fix)
    problems.check(model_problem == "no name", lambda i: f"model '{_show(model.iat[i])}' names no model",
                   "write SCHEME:NAME with the name after the colon, e.g. timm:resnet50")
    problems.check(model_problem == "unknown scheme",
                   lambda i: f"model '{_show(model.iat[i])}' has an unknown reference scheme "
                             f"'{model.iat[i].partition(':')[0]}'", scheme_fix)
    problems.check(model_problem == "not a reference",
                   lambda i: f"model '{_show(model.iat[i])}' is neither a model reference nor an .onnx path",
                   scheme_fix)

    shape = _per_value(text["input_shape"], _normalise_shape, None)
    shape_fix = "write one sample's dimensions without the batch, positive integers joined by 'x', e.g. 3x224x224"
    problems.check(absent["input_shape"], empty("input_shape"), shape_fix)
    problems.check(pd.isna(shape), lambda i: f"{raw('input_shape')(i)} is not a shape like 3x224x224", shape_fix)

    batch = number["batch_size"]
    with np.errstate(invalid="ignore"):
        batch_ok = np.isfinite(batch) & (batch >= 1) & (batch < _MAX_BATCH) & (np.floor(batch) == batch)
    batch_fix = "write the number of samples per step as a whole number >= 1, e.g. 32"
    problems.check(absent["batch_size"], empty("batch_size"), batch_fix)
    problems.check(~batch_ok, lambda i: f"{raw('batch_size')(i)} is not a positive integer", batch_fix)

    phase = _per_value(text["phase"], str.lower, None)
    phase_fix = "write infer (forward pass) or train (forward, backward and optimizer step)"
    problems.check(absent["phase"], empty("phase"), phase_fix)
    problems.check(~pd.Series(phase, dtype=object).isin(PHASES).to_numpy(dtype=bool),
                   lambda i: f"{raw('phase')(i)} is neither infer nor train", phase_fix)

    problems.check(absent["device"], empty("device"),
                   "name the device and its setting, e.g. rtx3090/amp-nchw-pt240")

    values = {}
    for m in metrics:
        v = number[m.name]
        values[m.name] = v
        present = ~absent[m.name]
        fix = f"write {m.unit} as a plain number, or leave the cell empty if it was not measured"
        problems.check(present & ~np.isfinite(v), lambda i, c=m.name: f"{raw(c)(i)} is not a number", fix)
        with np.errstate(invalid="ignore"):
            ok = (v >= m.low) if m.low_inclusive else (v > m.low)
            if m.high is not None:
                ok &= v <= m.high
        problems.check(present & np.isfinite(v) & ~ok,
                       lambda i, m=m: f"{raw(m.name)(i)} is not {m.bounds()}", fix)
    none_measured = np.logical_and.reduce([np.isnan(values[m.name]) for m in metrics])
    problems.check(none_measured,
                   lambda i: f"no metric value ({', '.join(m.name for m in metrics)} all empty)",
                   "give at least one measured value per row, or drop the row")
    problems.raise_first()

    out = {
        "model": model.array,
        "input_shape": pd.array(shape, dtype="string"),
        "batch_size": batch.astype(np.int64),
        "phase": pd.array(phase, dtype="string"),
        "device": text["device"].array,
    }
    for m in METRICS:
        out[m.name] = values.get(m.name, np.full(n, np.nan))
    for c in OPTIONAL:
        out[c] = text[c].array if c in text else pd.array([pd.NA] * n, dtype="string")
    extras = {c: df[c].array for c in names if c not in COLUMNS}
    return pd.DataFrame({**out, **extras}, index=pd.RangeIndex(n))
