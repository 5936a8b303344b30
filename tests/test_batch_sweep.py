"""A few models of the batch sweep (``python -m benchmarks run sweep``): on devices answered by each
basis (measured cards, the spec transfer, the spec model, a CPU card), both phases, batch 1-1024,
the latency a user reads never decreases with the batch."""

import pytest

from benchmarks.lib import batch_sweep

# one device per basis: measured GPU cards (inference and training), the transfer, the spec model, CPUs
# (the spec model's training step takes about a second per batch size here: two devices use it)
DEVICES = ["rtx3090", "rtx4090", "l4", "a100-40gb-sxm", "i9-10940x", "epyc-vm"]


@pytest.mark.parametrize("model, phases", [("example:resnet18", ("infer", "train")),
                                           ("example:mobilenet_v3_small", ("infer",))])
def test_latency_never_decreases_with_the_batch(model, phases):
    r = batch_sweep.sweep_model(model, DEVICES, phases=phases)
    assert not r.get("extract_error")
    assert r["violations"] == []
    assert r["answered"] > 0 and r["calls"] == len(phases) * len(DEVICES)
    assert r["rows"] + r["refused_calls"] * len(batch_sweep.BATCHES) >= r["calls"] * len(batch_sweep.BATCHES)


def test_a_decrease_is_counted_as_a_violation():
    out = {"rows": 0, "answered": 0, "refused": 0, "fell_back": 0, "violations": [], "refusal_reasons": {},
           "fallback_reasons": {}, "bases": {}}
    rows = [{"metric": "latency_ms", "batch_size": b, "value": v, "basis": "x"} for b, v in ((1, 2.0), (2, 1.5), (4, 3.0))]
    rows.append({"metric": "latency_ms", "batch_size": 8, "value": None, "reason": "refused 12 times"})
    batch_sweep._tally(out, rows, "m", "d", "infer")
    assert [v["batch"] for v in out["violations"]] == [[1, 2]]
    assert out["answered"] == 3 and out["refused"] == 1 and out["refusal_reasons"] == {"refused N times": 1}
