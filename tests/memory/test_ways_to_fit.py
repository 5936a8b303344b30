"""What would make a step that does not fit one device fit there (perfseer.memory.ways)."""

from perfseer.cli.main import main
from perfseer.errors import PerfseerError
from perfseer.memory.breakdown import MemoryEstimate
from perfseer.memory.ways import GIB, ways_to_fit


def _est(**kw):
    base = dict(model="m", batch=8, phase="train", optimizer="adamw", precision="fp32", device="rtx3060",
                method="simulation", peak_tensor_bytes=0, peak_allocated=0, peak_reserved=0, context=1 * GIB,
                total=20 * GIB, capacity=12 * GIB, fits=False,
                breakdown={"weights": 2 * GIB, "optimizer_state": 4 * GIB, "activations": 9 * GIB,
                           "allocator_overhead": 1 * GIB, "context": 1 * GIB})
    base.update(kw)
    return MemoryEstimate(**base)


def test_each_way_says_what_it_needs_and_whether_that_fits():
    ways = {w.way: w for w in ways_to_fit(_est(), max_batch=3)}
    assert ways["smaller batch"].fits is True and "batch 3" in ways["smaller batch"].how
    # 8-bit states keep a quarter of the 4 GiB: 20 - 3 = 17 GiB > 12
    assert ways["8-bit optimizer states"].needs == 17 * GIB and ways["8-bit optimizer states"].fits is False
    # checkpointing: at least 20 - 9 (activations) - 1 (allocator rounding) = 10 GiB <= 12: can fit, not certain
    ck = ways["activation checkpointing"]
    assert ck.needs == 10 * GIB and ck.fits is None and "bound" in ck.basis
    larger = [w for w in ways_to_fit(_est()) if w.way == "larger device"]
    assert 1 <= len(larger) <= 3 and all(w.fits for w in larger)
    assert "rtx3060" not in " ".join(w.how for w in larger)


def test_a_step_that_fits_or_has_no_device_needs_no_way():
    assert ways_to_fit(_est(fits=True)) == [] and ways_to_fit(_est(fits=None, capacity=None)) == []
    infer = {w.way for w in ways_to_fit(_est(phase="infer", optimizer=None))}
    assert "8-bit optimizer states" not in infer and "activation checkpointing" not in infer


def test_the_cli_lists_the_ways_when_a_step_does_not_fit(capsys, monkeypatch):
    import perfseer.cli.memory as cm
    from perfseer.memory.fit import MaxBatch

    # the simulated search of the largest batch (seconds) stands in here; its own tests are in test_fit_and_onnx
    searched = []
    found = MaxBatch(batch=96, traces_run=5, affine=False)
    monkeypatch.setattr(cm, "max_batch_for", lambda *a, **k: searched.append(a) or found)
    assert main(["memory", "example:resnet18", "--phase", "infer", "--batch", "4096", "--capacity-gib", "2"]) == 0
    out = capsys.readouterr().out
    assert "does not fit" in out and "what would make it fit there:" in out
    assert "smaller batch: batch 96 (the largest that fits): fits" in out and "larger device: " in out
    assert len(searched) == 1
    # where the search cannot run (an ONNX model asked for training...), the other ways all the same
    monkeypatch.setattr(cm, "max_batch_for", lambda *a, **k: (_ for _ in ()).throw(PerfseerError("no", "x")))
    assert main(["memory", "example:resnet18", "--phase", "infer", "--batch", "4096", "--capacity-gib", "2"]) == 0
    out = capsys.readouterr().out
    assert "larger device: " in out and "smaller batch" not in out
