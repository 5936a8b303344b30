"""Importers of public benchmarks into measurement tables, chosen by name.

============== ============================================ ==========================================
name           what it reads                                module
============== ============================================ ==========================================
timm-benchmark timm's ``benchmark-*.csv`` result files       :mod:`~perfseer.data.importers.timm_benchmark`
help-nas       HELP's NAS-Bench-201 / FBNet / OFA latencies :mod:`~perfseer.data.importers.help_nas`
============== ============================================ ==========================================

Each importer takes a folder and returns ``(table, report)``: the validated measurement table
(:mod:`perfseer.data.table`) and an :class:`~perfseer.data.importers.base.ImportReport`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from perfseer.data.importers.base import ImportReport
from perfseer.data.importers.help_nas import import_help_nas
from perfseer.data.importers.timm_benchmark import import_timm_benchmark
from perfseer.errors import TableError

IMPORTERS: dict[str, Callable[[str | Path], tuple[pd.DataFrame, ImportReport]]] = {
    "timm-benchmark": import_timm_benchmark,
    "help-nas": import_help_nas,
}


def import_benchmark(source: str, directory: str | Path) -> tuple[pd.DataFrame, ImportReport]:
    """Run the importer named ``source`` on ``directory``; see :data:`IMPORTERS`."""
    try:
        importer = IMPORTERS[source]
    except KeyError:
        raise TableError(f"no importer named '{source}'",
                         f"choose one of {', '.join(sorted(IMPORTERS))}") from None
    return importer(directory)


__all__ = ["IMPORTERS", "ImportReport", "import_benchmark", "import_help_nas", "import_timm_benchmark"]
