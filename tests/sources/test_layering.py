"""The layering of perfseer.sources (issue 37): sources imports only graph, devices, errors,
deadline and switches of perfseer; graph imports neither sources nor profiling; the memory
fallback (memory.learned) never imports memory.api.  Imports inside functions count."""

import ast
from pathlib import Path

import perfseer

ROOT = Path(perfseer.__file__).parent


def _imports(folder: str):
    """``(file, imported perfseer module)`` of every import under ``folder`` of the package."""
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("perfseer."):
                    yield path.relative_to(ROOT), name


def test_sources_imports_only_the_layers_below():
    allowed = ("sources", "graph", "devices", "errors", "deadline", "switches")
    wrong = {(str(f), n) for f, n in _imports("sources") if n.split(".")[1] not in allowed}
    assert not wrong, wrong


def test_graph_imports_neither_sources_nor_profiling():
    wrong = {(str(f), n) for f, n in _imports("graph") if n.split(".")[1] in ("sources", "profiling")}
    assert not wrong, wrong


def test_the_learned_memory_fallback_does_not_import_the_memory_api():
    imported = {n for f, n in _imports("memory") if f.name == "learned.py"}
    assert not {n for n in imported if n.startswith("perfseer.memory.api")}, imported
    assert not {n for f, n in _imports("memory") if f.name == "mig.py" and n.startswith(("perfseer.memory.api",
                                                                                         "perfseer.memory.learned"))}
