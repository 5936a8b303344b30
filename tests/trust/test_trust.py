"""Domain of validity, conformal intervals and physical sanity bounds, on tiny synthetic graphs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from perfseer.errors import PerfseerError
from perfseer.features import schema
from perfseer.trust import bounds as bnd
from perfseer.trust import domain as dom
from perfseer.trust import intervals as itv

U = {n: i for i, n in enumerate(schema.GLOBAL_FEATURES)}


def graph(flops: float = 1e9, batch: int = 1, nodes: int = 10, weights: float = 1e6, elem_bytes: int = 4,
          mem: float = 0.0) -> Data:
    """A graph whose features hold what the checks read: globals, and edge bytes / elements."""
    u = np.zeros(len(schema.GLOBAL_FEATURES), np.float32)
    u[U["flops_total"]], u[U["batch_size"]], u[U["num_nodes"]], u[U["weight_total"]] = flops, batch, nodes, weights
    u[U["memory_access_total"]] = mem
    u[U["num_edges"]] = nodes - 1
    ea = np.zeros((nodes - 1, len(schema.EDGE_FEATURES)), np.float32)
    ea[:, schema.EDGE_FEATURES.index("elements")] = 1000
    ea[:, schema.EDGE_FEATURES.index("bytes")] = 1000 * elem_bytes
    return Data(x=torch.zeros(nodes, len(schema.NODE_FEATURES)), edge_index=torch.zeros(2, nodes - 1, dtype=torch.long),
                edge_attr=torch.from_numpy(ea), u=torch.from_numpy(u)[None], num_nodes=nodes)


@pytest.fixture(scope="module")
def domain():
    train = [graph(flops=f, batch=b) for f in np.geomspace(1e8, 1e10, 20) for b in (1, 8)]
    d, stored = dom.build_domain(train, ["Conv", "Relu"], [1, 8] * 20, ["3x224x224", "3x160x160"] * 20,
                                 np.random.default_rng(0).normal(size=(40, 4)),
                                 np.random.default_rng(1).normal(size=(30, 4)), source="test")
    return d, stored


def test_training_like_graph_is_in_domain(domain):
    d, stored = domain
    (ok, reasons), = dom.verdicts(d, [graph(flops=1e9)], [["Conv"]], ["3x192x192"], stored[:1], stored)
    assert ok and reasons == []
    assert d["batch_sizes"] == [1, 8] and d["inputs"] == {"channels": [3], "values_per_sample": [76800, 150528]}
    assert d["precision"] == [4] and d["embedding"]["stored"] == 40 and d["embedding"]["threshold"] > 0


def test_each_reason_is_named(domain):
    d, stored = domain
    (ok, reasons), = dom.verdicts(d, [graph(flops=1e9, batch=4, elem_bytes=2)], [["Conv", "LSTM"]], ["1x600x600"])
    text = "\n".join(reasons)
    assert not ok and len(reasons) == 4
    for part in ("operator types never seen in training: LSTM", "1 input channels; training inputs had 3",
                 "input of 360,000 values per sample outside the training range 76,800-150,528", "16-bit"):
        assert part in text, part


def test_only_the_calibrated_checks_decide_the_verdict(domain):
    """Batch, global-feature ranges, embedding distance and family decide no verdict: on held-out
    families they did not single out the rows that err (benchmarks/suites/domain.py)."""
    d, stored = domain
    far = stored[:1] + 100.0
    d = {**d, "families": ["resnet"]}
    (ok, reasons), = dom.verdicts(d, [graph(flops=1e13, batch=64, nodes=500)], [["Conv"]], ["3x224x224"], far, stored,
                                  families=["hrnet"])
    assert ok and reasons == []


def test_a_step_outside_the_training_steps_widens_the_interval(domain):
    d, _ = domain
    d = {**d, "targets": {"lat": [2.0, 500.0]}}
    g = [graph(flops=1e9, batch=1)] * 4
    flags = dom.interval_flags(d, g, factor=2.41, values=[1.0, 3.0, 600.0, float("nan")], target="lat", unit="ms")
    assert flags[1] == [] and flags[3] == []
    assert flags[0] == ["step smaller than the training steps at batch 1; interval widened x2.41 (predicted 1 ms < "
                        "2 ms, the smallest training value: small steps were not measured)"]
    assert flags[2] == ["step larger than the training steps at batch 1; interval widened x2.41 (predicted 600 ms > "
                        "500 ms, the largest training value)"]
    # without values: a step below the training graphs in both FLOPs and memory access
    train = [graph(flops=f, mem=10 * f) for f in np.geomspace(1e8, 1e10, 20)]
    d2, _ = dom.build_domain(train, ["Conv"], [8] * 20, [None] * 20)
    small = dom.interval_flags(d2, [graph(flops=1e6, mem=1e7), graph(flops=1e6, mem=1e10), graph(flops=1e9, mem=1e10)])
    assert small[1] == small[2] == []  # one of the two inside the training range: not smaller
    assert small[0] == ["step smaller than the training steps at batch 1; interval widened (flops_total 1 MFLOPs < "
                        "81.5 MFLOPs; memory_access_total 10 MB < 815 MB: small steps were not measured)"]


def test_one_training_batch_size_extrapolates_by_the_step():
    d, _ = dom.build_domain([graph(), graph(flops=1e10)], ["Conv"], [1, 1], [None, None])
    (ok, reasons), = dom.verdicts(d, [graph(flops=4e9, batch=16)], [["Conv"]])
    assert ok and reasons == [] and dom.interval_flags(d, [graph(flops=4e9, batch=16)]) == [[]]


def test_an_unseen_family_widens_the_interval_and_stays_in_domain(domain):
    d, stored = domain
    assert "families" not in d  # a domain built without families checks none
    assert dom.interval_flags(d, [graph()], ["hrnet"]) == [[]]
    d2, _ = dom.build_domain([graph(), graph()], ["Conv"], [1, 1], [None, None], families=["resnet", None])
    assert d2["families"] == ["resnet"]
    got = dom.verdicts(d2, [graph(), graph(), graph()], [["Conv"]] * 3, families=["resnet", "hrnet", None])
    assert [v[0] for v in got] == [True, True, True]
    flags = dom.interval_flags(d2, [graph(), graph(), graph()], ["resnet", "hrnet", None], factor=2)
    assert flags[0] == [] and flags[2] == []
    assert flags[1] == ["model family 'hrnet' never seen in training; interval widened x2 (held-out families err "
                        "more than the card's k-fold score)"]


def test_no_domain_is_out_of_domain():
    (ok, reasons), = dom.verdicts(None, [graph()], [["Conv"]])
    assert not ok and "no domain" in reasons[0]


def test_conformal_quantile_rank_and_too_few_rows():
    r = np.arange(1, 20) / 100  # 19 residuals: ceil(20 * 0.9) = 18th smallest
    assert itv.conformal_quantile(r, 0.9) == pytest.approx(0.18)
    with pytest.raises(PerfseerError, match="at least 9"):
        itv.conformal_quantile(r[:5], 0.9)
    assert itv.calibrate([1, 2], [1, 2])["q"] is None


def test_conformal_intervals_cover_exchangeable_data():
    rng = np.random.default_rng(0)
    pred = np.exp(rng.uniform(0, 5, 4000))
    meas = pred * np.exp(rng.normal(0, 0.1, 4000))
    q = itv.calibrate(meas[:2000], pred[:2000])["q"]
    lo, hi = itv.bounds(pred[2000:], q, np.ones(2000, bool))
    assert 88 <= itv.coverage(meas[2000:], lo, hi) <= 92
    lo2, hi2 = itv.bounds(pred[:1], q, [False], ood_factor=2.0)
    assert math.log(hi2[0] / pred[0]) == pytest.approx(2 * q)
    assert np.isnan(itv.bounds([0.0], q, [True])[0][0])


class Spec:
    name, kind, mem_bandwidth_gbs, l2_mib = "gpu-x", "gpu", 1000.0, 0.0
    peak_tflops = {"fp32": 10.0, "fp16": 100.0, "int8": 400.0}


def test_latency_floor_is_the_roofline_maximum():
    costs = {"flops": 2e12, "weight_bytes": 4e9, "ops": 50, "matmul_ops": 20}
    floor, ceiling, how = bnd.latency_bounds_ms(costs, Spec, "infer")
    assert floor == pytest.approx(20.0) and how == "compute"  # 2e12 / 100 TFLOP/s (fp16, not int8) = 20 ms
    train_floor, _, _ = bnd.latency_bounds_ms(costs, Spec, "train")
    assert train_floor == pytest.approx(40.0)
    small = {"flops": 1e3, "weight_bytes": 0.0, "ops": 5, "matmul_ops": 3}
    assert bnd.latency_bounds_ms(small, Spec, "infer")[:1] == pytest.approx((3e-3,))  # 3 kernels x 1 us
    assert ceiling == pytest.approx(1000 * (20 + 4.0) + 50 * 10.0)


def test_check_clips_and_flags():
    v, lo, hi, flags = bnd.check(1e-6, 0.5e-6, 2e-6, 1.0, 100.0, "ms", "spec", "spec, set by compute")
    assert (v, lo, hi) == (1.0, 1.0, 100.0) and "below the physical floor 1 ms (spec, set by compute)" in flags[0]
    v, lo, hi, flags = bnd.check(1e304, 0.5e304, 2e304, 1.0, 100.0, "ms", "spec")
    assert (v, lo, hi) == (100.0, 1.0, 100.0) and "above the sanity ceiling 100 ms (spec)" in flags[0]
    assert bnd.check(50.0, 40.0, 200.0, 1.0, 100.0, "ms", "spec") == (50.0, 40.0, 100.0, [])
    assert bnd.check(5.0, 4.0, 6.0, 1.0, 100.0, "ms", "spec") == (5.0, 4.0, 6.0, [])


def test_spec_free_bounds():
    costs = {"flops": 4e9, "weight_bytes": 0.0, "ops": 5, "matmul_ops": 1}
    assert bnd.spec_free_bounds("util_pct", costs, None, None) == (0.0, 100.0)
    assert bnd.spec_free_bounds("latency_ms", costs, [1.0, 10.0], [1e8, 1e9]) == (0.0, 40000.0)
