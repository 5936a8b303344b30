"""The benchmark runner (``python -m benchmarks``) and each suite's plumbing on tiny synthetic input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import runner
from benchmarks.__main__ import main as bench_main
from benchmarks.suites import NAMES, get_suite

ROOT = Path(__file__).resolve().parents[1]


def test_list_names_every_suite_with_its_data_and_time():
    out = subprocess.run([sys.executable, "-m", "benchmarks", "list"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    for name in NAMES:
        assert f"\n{name}\n" in "\n" + out.stdout
    assert out.stdout.count("reads: ") == len(NAMES) and out.stdout.count("--quick ") == len(NAMES)


def test_unknown_suite_is_a_clear_error(capsys):
    assert bench_main(["run", "nope", "--no-write"]) == 2
    err = capsys.readouterr().err
    assert "unknown suite 'nope'" in err and "families" in err and "Traceback" not in err


def _suite(calls: list[str]) -> runner.Suite:
    def step(name):
        def run():
            calls.append(name)
            return {"value": len(name)}
        return runner.Step(name, run)

    return runner.Suite("toy", "a toy", "nothing", "1 s", "1 s", steps=lambda ctx: [step("a"), step("b/c")],
                        render=lambda ctx, res: "## Toy\n\n" + ", ".join(f"{k}={v['value']}" for k, v in res.items()))


def test_steps_are_written_atomically_and_skipped_when_done(tmp_path):
    calls = []
    ctx = runner.Context(quick=True, work=tmp_path / "toy", log=lambda m: None)
    res = runner.run_steps(_suite(calls), ctx)
    assert calls == ["a", "b/c"] and res["b/c"]["value"] == 3 and "loadavg" in res["a"]["_meta"]
    assert sorted(p.name for p in (tmp_path / "toy").iterdir()) == ["a.json", "b_c.json"]  # no temporary left
    (tmp_path / "toy" / "a.json").write_text("{cut")  # a step cut short is run again, the other is not
    runner.run_steps(_suite(calls), ctx)
    assert calls == ["a", "b/c", "a"]


def test_a_section_is_replaced_between_its_markers(tmp_path):
    page = tmp_path / "results.md"
    page.write_text("# Results\n\nprose\n\n<!-- suite:toy -->\nold\n<!-- /suite:toy -->\n\nmore prose\n")
    runner.write_section("toy", "## Toy\n\nnew", page)
    runner.write_section("other", "## Other", page)
    text = page.read_text()
    assert "old" not in text and "<!-- suite:toy -->\n## Toy\n\nnew\n<!-- /suite:toy -->" in text
    assert text.index("more prose") < text.index("<!-- suite:other -->") and text.startswith("# Results\n\nprose")


def test_every_suite_declares_what_list_prints():
    for name in NAMES:
        s = get_suite(name)
        assert s.name == name and s.description and s.reads and s.time_full and s.time_quick


def test_predictors_rows_of_a_card():
    from benchmarks.suites import predictors

    card = {"name": "c", "targets": [{"metric": "latency_ms", "device": "d", "phase": "infer"}],
            "training": {"fit_splits": ["train", "test"], "rows": {"train": 10}, "kfold": {"k": 3}},
            "scores": {"previous_test": {"latency_ms@d:infer": {"mape": 5.0, "spearman": 0.9}},
                       "kfold": {"latency_ms@d:infer": {"mape": 6.0, "mape_fold_mean": 6.1, "mape_fold_sd": 0.2,
                                                        "spearman": 0.95}}}}
    rows = predictors.rows_of(card)
    assert rows[0]["fit"] == "train+test" and rows[0]["old_test_mape"] == 5.0 and rows[0]["kfold_mape_mean"] == 6.1
    text = predictors.render(None, {"cards": {"rows": rows}})
    assert "| `c` | latency_ms | 10 | train+test | 6.10 ± 0.20 (k=3) | 5.00 | 0.950 |" in text


def _fold(k, rng):
    y, yv = rng.uniform(1, 10, 12), rng.uniform(1, 10, 8)
    runs = {m: {"pred_val": (yv * s).tolist(), "pred_test": (y * s).tolist()}
            for m, s in (("a", 1.2), ("b", 0.8), ("b-s1", 0.9), ("b-s2", 1.1), ("gbm", 1.5))}
    return {"fold": k, "val_y": yv.tolist(), "methods": runs,
            "test_rows": {"y": y.tolist(), "family": [f"f{i % 3}" for i in range(12)],
                          "model": [f"m{i % 6}" for i in range(12)]}}


def test_families_blends_seed_means_and_pools_the_folds(monkeypatch):
    from benchmarks.suites import families

    rng = np.random.default_rng(0)
    pack = {"setting": "toy", "folds": [_fold(0, rng), _fold(1, rng)]}
    conf = {"card": "rtx3090-amp-nchw-pt240.infer", "coverage_of": "stack+shift:a+b-seedmean",
            "rows": [["blend", "stage one", "stack+shift:a+b-seedmean"], ["GBM", "stage one", "gbm"]]}
    pv, pt = families.method_preds(pack["folds"][0], "b-seedmean")
    assert np.allclose(pt, np.asarray(pack["folds"][0]["test_rows"]["y"]) * (0.8 * 0.9 * 1.1) ** (1 / 3))
    out = families.evaluate(pack, conf, min_models=1)
    blend, gbm = out["rows"]
    assert gbm["mape"] == pytest.approx(50.0) and len(gbm["fold_mapes"]) == 2
    assert blend["mape"] < 1.0  # every member proportional to the truth: the shift takes the scale out
    assert out["coverage"]["pct"] == pytest.approx(100.0) and out["test_rows"] == 24
    assert "| toy | GBM | stage one | 50.00 |" in families.render(None, {"toy": out})
    with pytest.raises(runner.BenchError, match="not in the packed"):
        families.method_preds(pack["folds"][0], "nope")
    assert families.fold_of("resnet", 4) == families.fold_of("resnet", 4) and families.fold_of("resnet", 4) in range(4)


def test_families_pack_is_committed_and_readable():
    from benchmarks.suites import families

    cfg = runner.load_config("families")
    for name in cfg["settings"]:
        path = runner.DATA / "families" / f"{name}.json.gz"
        with gzip.open(path, "rt") as fh:
            pack = json.load(fh)
        assert [f["fold"] for f in pack["folds"]] == [0, 1, 2, 3]
        for label, stage, method in cfg["settings"][name]["rows"]:  # every configured method can be computed
            families.method_preds(pack["folds"][0], method)


def _meta(load=0.5):
    return {"_meta": {"seconds": 1.0, "loadavg": [load, load, load], "finished": "2026-01-01 00:00:00 UTC", "cpus": 2}}


def test_timing_suites_render_with_the_load_average():
    from benchmarks.suites import fuzz, serve, speed

    sp = {"extract": {"rows": [{"what": "file", "value": 30.0, "unit": "ms", "target": "<= 50 ms"}], **_meta()},
          "predict": {"predictor": {"name": "p"}, "models": {"resnet50": {"end_to_end_ms": 40.0, "graph_and_network_ms": 2.0}},
                      "throughput": [{"graphs": 10, "graphs_per_s": 900.0}], **_meta()},
          "cli": {"commands": {"python -c pass": {"median_s": 0.02}, "perfseer --help": {"median_s": 0.3}}, **_meta()},
          "memory-cli": {"rows": [{"name": "x", "wall_median_s": 2.0, "cpu_median_s": 1.5, "target_s": 3.0}], **_meta(1.5)}}
    text = speed.render(None, sp)
    assert "15.0x `python -c pass`" in text and "| 1.5 |" in text and "load average 0.50-1.50" in text
    sv = {"load": {"clients": 2, "duration_s": 1.0, "peak_rss_mb": 300, "warmup_s": 1.0,
                   "phases": {"cached": {"requests": 10, "throughput_rps": 10.0, "p50_ms": 5, "p99_ms": 9,
                                         "statuses": {"200": 10}}}, **_meta()},
          "cpu": {"load_average_1min_at_start": 0.4, "settings": {"row cache on": {"requests": 5, "cpu_ms_median": 3.0,
                                                                                  "cpu_ms_mean": 3.1}}, **_meta()}}
    assert "| cached | 10 | 10.0 | 5 | 9 | 200:10 | 0.5 |" in serve.render(None, sv)
    rows = [{"name": "00000-none-api_fp16", "entry": e, "outcome": o, "specific": True, "seconds": 0.1}
            for e, o in (("predict", "answer"), ("predict_spec", "answer"), ("memory", "refusal"))]
    chunk = {"start": 0, "stop": 1, "rows": rows, "failures": [], "failures_total": 0, "xfail": 0,
             "refusal_types": {"OnnxError": 1}, **_meta()}
    text = fuzz.render(None, {"chunk-00000": chunk})
    assert "No failure" in text and "| memory | 1 | 1 | 1 | 0 | 0 | 0 |" in text and "| all | 3 | 1 | 1 | 2 |" in text


def test_quick_plumbing_of_the_predictors_suite(tmp_path):
    """``run predictors --quick`` end to end (it only reads the shipped cards): prints, writes no page."""
    page = tmp_path / "results.md"
    assert bench_main(["run", "predictors", "--quick", "--work", str(tmp_path), "--page", str(page)]) == 0
    assert (tmp_path / "predictors-quick" / "cards.json").exists() and not page.exists()
    assert bench_main(["run", "predictors", "--work", str(tmp_path), "--page", str(page)]) == 0
    assert "<!-- suite:predictors -->" in page.read_text()


def test_finished_steps_reads_what_a_run_left_and_names_the_rest(tmp_path):
    calls = []
    ctx = runner.Context(quick=True, work=tmp_path / "toy", log=lambda m: None)
    runner.run_steps(_suite(calls), ctx)
    (tmp_path / "toy" / "b_c.json").unlink()
    done, pending = runner.finished_steps(_suite(calls), ctx)
    assert list(done) == ["a"] and pending == ["b/c"] and calls == ["a", "b/c"]  # nothing run


def test_partial_render_of_a_suite_that_has_not_started_is_a_clear_error(tmp_path, capsys):
    assert bench_main(["run", "predictors", "--partial", "--no-write", "--work", str(tmp_path)]) == 2
    assert "step 'cards' has not finished" in capsys.readouterr().err
