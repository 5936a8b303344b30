"""Short footnotes for ``perfseer predict``'s table: one per *kind* of reason (batch outside the
training sizes, global features out of range, embedding distance, unseen operators, ...), each under
about 100 characters, summarising the figures of every row it marks; ``--explain`` prints the long
forms instead (the JSON keeps them all)."""

from __future__ import annotations

import re

MAX = 100
_NUM = r"([-+]?[\d.,]+(?:e[-+]?\d+)?)"
_SOURCES = re.compile(r"^sources? [^:]+: ")
_FIGURES = re.compile(r" \(figures of [^)]+\)$")


def _g(x: float) -> str:
    return f"{x:.2g}" if x < 10 else f"{x:.0f}"


def _cut(text: str, n: int = MAX) -> str:
    return text if len(text) <= n else text[: n - 1].rstrip(" ,;:") + "…"


def kind_of(reason: str) -> tuple[str, object]:
    """``(kind, figures)`` of one long reason: reasons of one kind share a footnote, whose text
    :func:`short_note` makes from the figures of all of them."""
    text = _FIGURES.sub("", _SOURCES.sub("", reason.strip()))
    m = re.match(r"batch \d+ outside the training batch sizes (\d+)-(\d+)", text)
    if m:
        return "batch", f"{m.group(1)}-{m.group(2)}"
    m = re.match(r"batch \d+ is not the training batch size (\d+)", text)
    if m:
        return "batch", m.group(1)
    if text.startswith("global features outside the training range: "):
        names = [p.strip().split(" ")[0] for p in text.split(": ", 1)[1].split(";")]
        m = re.search(r" and (\d+) more$", text)
        return "globals", (tuple(n for n in names if n), int(m.group(1)) if m else 0)
    m = re.match(rf"embedding {_NUM}x the distance threshold", text)
    if m:
        return "embedding", float(m.group(1).replace(",", ""))
    m = re.match(r"operator types never seen in training: (.+)$", text)
    if m:
        return "ops", tuple(o.strip() for o in m.group(1).split(","))
    m = re.match(r"step (smaller|larger) than the training steps at batch (\d+)", text)
    if m:
        return f"step-{m.group(1)}", int(m.group(2))
    m = re.match(r"model family '?([^' ]+)'? never seen in training", text)
    if m:
        return "family", (m.group(1),)
    m = re.match(rf"input of {_NUM} values per sample outside the training range (.+)$", text)
    if m:
        return "input", m.group(2)
    if re.match(r"\d+ input channels; ", text):
        return "channels", text.split("; ", 1)[1]
    if text.startswith("graph precision "):
        return "precision", text.split(";")[0]
    m = re.match(rf"(\S+) {_NUM} is (?:above|below) (?:the calibration rows'|.*every calibration row's)", text)
    if m:
        return "calibration", (m.group(1),)
    m = re.match(r"fell back from ([^:]+): (.*)$", text)
    if m:
        why = ("the model is outside its model space" if "model space" in m.group(2) else
               "outside its step domain" if "step domain" in m.group(2)
               else _cut(m.group(2), 60))
        return f"fell back from {m.group(1)}", why
    # any other reason: its first clause (a flag such as "calibrated:loglinear:k=12": whole), numbers
    # folded so rows of one kind share it
    head = text if " " not in text else (re.split(r"[:;(]", text, maxsplit=1)[0].strip() or text)
    return "other:" + re.sub(_NUM, "#", head), _cut(head)


def _names(groups: list, what: str, n: int = 3, extra: int = 0) -> str:
    seen = list(dict.fromkeys(x for g in groups for x in g))
    more = f" and {len(seen) - n + extra} more" if len(seen) + extra > n else ""
    return _cut(f"{what}: {', '.join(seen[:n])}{more}")


def short_note(kind: str, figures: list) -> str:
    """The footnote of one kind of reason, from the figures of every reason of that kind."""
    if kind == "batch":
        return _cut("batch outside the training sizes " + ", ".join(dict.fromkeys(figures)))
    if kind == "globals":
        return _names([f[0] for f in figures], "global features outside the training range", 2,
                      max(f[1] for f in figures))
    if kind == "embedding":
        lo, hi = min(figures), max(figures)
        return f"embedding {_g(lo)}x the distance threshold" if _g(lo) == _g(hi) else \
            f"embedding {_g(lo)}-{_g(hi)}x the distance threshold"
    if kind == "ops":
        return _names(figures, "operator types unseen in training")
    if kind == "family":
        return _names(figures, "model family unseen in training (interval widened)")
    if kind.startswith("step-"):
        lo, hi = min(figures), max(figures)
        at = f"batch {lo}" if lo == hi else f"batch {lo}-{hi}"
        return f"step {kind[5:]} than the training steps ({at}): extrapolated, interval widened"
    if kind == "input":
        return _cut("input values per sample outside the training range " + ", ".join(dict.fromkeys(figures)))
    if kind == "channels":
        return _cut("input channels unlike the training's (" + "; ".join(dict.fromkeys(figures)) + ")")
    if kind == "precision":
        return _cut(", ".join(dict.fromkeys(figures)) + " unlike the training graphs'")
    if kind == "calibration":
        return _names(figures, "outside the calibration rows' range")
    if kind.startswith("fell back from "):
        return _cut(f"{kind}: {figures[0]}")
    return _cut(figures[0])


def footnotes(row_reasons: list[list[str]]) -> tuple[list[list[int]], list[str]]:
    """Per row the numbers of its footnotes, and the footnotes (one per kind of reason, in order of
    first appearance)."""
    kinds: dict[str, list] = {}
    marks = []
    for reasons in row_reasons:
        mine = []
        for r in reasons:
            k, fig = kind_of(r)
            kinds.setdefault(k, []).append(fig)
            n = list(kinds).index(k) + 1
            if n not in mine:
                mine.append(n)
        marks.append(mine)
    return marks, [short_note(k, figs) for k, figs in kinds.items()]
