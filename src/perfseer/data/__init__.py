"""Measurement tables and importers of public benchmarks.

:mod:`perfseer.data.table` defines the table (the interchange format: CSV or Parquet);
:mod:`perfseer.data.importers` turns public benchmark folders into such tables;
:mod:`perfseer.data.dataset` turns a table into a graph dataset (``perfseer data build``), split by
:mod:`perfseer.data.splits`.
"""

from perfseer.data.table import read_table, validate, write_table

__all__ = ["read_table", "validate", "write_table"]
