"""The documentation: sizes (issue 37), relative links, and the generated reference pages."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _relative_links(text: str) -> list[str]:
    text = _INLINE_CODE.sub("", _FENCE.sub("", text))
    out = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
            continue  # a URL (http:, mailto:...) or an anchor on the same page
        out.append(target.split("#", 1)[0])
    return out


def test_readme_at_most_12_kb():
    assert README.stat().st_size <= 12 * 1024, f"README.md is {README.stat().st_size} bytes"


def test_written_docs_at_most_150_kb():
    # every page of docs/ (the reference is built on demand into build/, not kept here)
    sizes = {p.relative_to(ROOT).as_posix(): p.stat().st_size for p in DOCS.rglob("*.md")}
    assert sum(sizes.values()) <= 150 * 1024, f"docs/ holds {sum(sizes.values())} bytes of written markdown: {sizes}"


def test_history_at_most_10_kb():
    assert (DOCS / "history.md").stat().st_size <= 10 * 1024


def test_history_lines_point_at_commits():
    for line in (DOCS / "history.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("- "):
            assert re.search(r"`[0-9a-f]{7,40}`", line), f"history line without a commit: {line}"


def test_readme_keeps_the_fresh_machine_commands():
    text = README.read_text(encoding="utf-8")
    assert ("python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/perfseer predict "
            "example:resnet50 --predictor rtx3090-amp-nchw-pt240.infer --batch 1,32,256") in text
    assert ("python3 -m venv .venv && .venv/bin/pip install -e '.[dev,zoo,parquet]' && "
            ".venv/bin/python -m pytest") in text


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    broken = [t for t in _relative_links(page.read_text(encoding="utf-8"))
              if t and not (page.parent / t).resolve().exists()]
    assert not broken, f"{page.relative_to(ROOT)}: links to missing files: {broken}"


def test_link_finder():
    text = "[a](x.md) [b](https://e.org) [c](#top) [d](y.md#s) `[e](no.md)`\n```\n[f](no.md)\n```\n"
    assert _relative_links(text) == ["x.md", "y.md"]


def test_reference_pages_are_built_from_the_code(tmp_path):
    """``scripts/gen_reference.py --out DIR``: the CLI and Python pages, built on demand, name every
    subcommand and every public name."""
    src = str(ROOT / "src")
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": path})
    assert proc.returncode == 0, proc.stderr + proc.stdout
    cli, py = (tmp_path / "cli.md").read_text(encoding="utf-8"), (tmp_path / "python.md").read_text(encoding="utf-8")
    for command in ("predict", "compare", "memory", "llm", "calibrate", "serve"):
        assert f"perfseer {command}" in cli, command
    import perfseer
    for name in (n for n in perfseer.__all__ if not n.startswith("__")):  # as the generator lists them
        assert f"perfseer.{name}" in py, name
