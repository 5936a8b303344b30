"""perfseer predict's table: one short footnote per kind of reason; --explain for the long forms."""

from perfseer.cli.footnotes import footnotes
from perfseer.cli.predict import _print_rows

GLOBALS = ("global features outside the training range: edge_bytes_mean 909,064 < 1.08e+08; memory_access_max "
           "9.94e+06 < 1.02e+09; memory_access_mean 2.43e+06 < 2.3e+08 and 6 more")
FELL = ("the model is outside the model space of measured-device predictor nb201-gpus.infer: its embedding is "
        "3.27e+12x the distance threshold from the nearest training graph (a graph of another model space)")


def _rows():
    rows = []
    for i, b in enumerate((1, 2, 4, 2048)):
        for dev, src in (("rtx3090", ""), ("a100", "sources rtx3090, rtx4090: ")):
            reasons = [f"{src}batch {b} outside the training batch sizes 6-1024"] if b < 6 or b > 1024 else []
            reasons += [src + GLOBALS, f"{src}embedding {1.7 + i * 1.4:.3g}x the distance threshold from the "
                        "nearest training graph" + (" (figures of rtx3090)" if src else "")]
            rows.append({"batch_size": b, "device": dev, "phase": "infer", "metric": "latency_ms", "unit": "ms",
                         "precision": "amp-fp16", "value": 1.0 + b, "interval": None, "in_domain": False,
                         "domain_reasons": reasons, "flags": [], "basis": "x", "throughput_per_s": 1.0,
                         **({"fallback_from": {"basis": "nb201-gpus.infer", "reason": FELL}} if src else {})})
    return rows


def test_one_short_note_per_kind_of_reason(capsys):
    _print_rows(_rows(), "m")
    out = capsys.readouterr().out
    notes = [line.strip() for line in out.splitlines() if line.strip().startswith("[")]
    assert len(notes) == 4, notes
    assert all(len(n) <= 100 for n in notes), notes
    text = "\n".join(notes)
    assert "batch outside the training sizes 6-1024" in text
    assert "embedding 1.7-5.9x the distance threshold" in text
    assert "global features outside the training range: edge_bytes_mean, memory_access_max and 7 more" in text
    assert "fell back from nb201-gpus.infer: the model is outside its model space" in text
    assert "--explain" in out


def test_explain_prints_the_long_forms(capsys):
    _print_rows(_rows(), "m", explain=True)
    out = capsys.readouterr().out
    assert GLOBALS in out and "batch 2048 outside the training batch sizes 6-1024" in out


def test_unknown_reasons_fold_their_numbers_and_stay_short():
    marks, notes = footnotes([["42 % of the predicted step is in operators no kernel family was trained on, " * 3],
                              ["57 % of the predicted step is in operators no kernel family was trained on, " * 3]])
    assert marks == [[1], [1]] and len(notes) == 1 and len(notes[0]) <= 100


def test_a_flag_is_kept_whole():
    _, notes = footnotes([["calibrated:loglinear:k=117", "outside-calibration-domain"]])
    assert notes == ["calibrated:loglinear:k=117", "outside-calibration-domain"]
