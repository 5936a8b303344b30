"""Liveness: which operators a constant-folding runtime keeps (perfseer.graph.liveness)."""

import numpy as np
import pytest

from perfseer.features.perfgraph import build_perfgraph
from perfseer.graph.extract import extract_graph
from perfseer.graph.liveness import liveness
from perfseer.sources.nas.nb201_onnx import nb201_skeleton

DISCONNECTED = "|none~0|+|none~0|nor_conv_3x3~1|+|none~0|none~1|skip_connect~2|"  # node 3 <- node 2 <- zero
CONNECTED = "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"
PARTIAL = "|none~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|nor_conv_3x3~0|none~1|skip_connect~2|"  # conv on a zero node


def _pg(arch):
    return build_perfgraph(extract_graph(nb201_skeleton(arch), batch=1))


def test_disconnected_network_has_no_live_work():
    pg = _pg(DISCONNECTED)
    lv = liveness(pg.graph, pg._col("flops"))
    assert lv.output_independent and lv.node_fraction == 0 and lv.flops_fraction == 0
    assert lv.primary == pg.graph.outputs[0]


def test_connected_network_is_all_live():
    pg = _pg(CONNECTED)
    lv = liveness(pg.graph, pg._col("flops"))
    assert not lv.output_independent and lv.node_fraction == 1 and lv.flops_fraction == 1


def test_work_on_a_zero_node_is_dead_and_weighted_by_flops():
    pg = _pg(PARTIAL)
    lv = liveness(pg.graph, pg._col("flops"))
    assert not lv.output_independent
    assert 0.5 < lv.flops_fraction < 1 and 0.5 < lv.node_fraction < 1
    flops = pg._col("flops")
    dead = ~np.asarray(lv.live)
    # every dead operator sits downstream of a Mul by zero or feeds only it: no dead Gemm (the classifier)
    assert not any(op == "Gemm" for op, d in zip(pg.op_types, dead) if d)
    assert lv.flops_fraction == pytest.approx(flops[~dead].sum() / flops.sum())


def test_pyg_data_carries_the_shares_and_calibration_reads_them():
    from perfseer.fit.calibrate import global_design, graph_liveness

    graphs = [_pg(a).to_pyg(live=True) for a in (CONNECTED, DISCONNECTED)]
    assert getattr(_pg(CONNECTED).to_pyg(), "live", None) is None  # only on request: models do not read it
    live = graph_liveness(graphs)
    assert live[0].tolist() == [1.0, 1.0, 0.0] and live[1, 2] == 1.0
    g = global_design(graphs, ("live_flops_fraction",))
    assert g.shape == (2, 6) and g[0, 5] == 0 and g[1, 5] == pytest.approx(np.log(1e-3))
    ind = global_design(graphs, ("output_independent",))
    assert ind[:, 5].tolist() == [0.0, 1.0]
    assert global_design(graphs, ()).shape == (2, 5)
    del graphs[0].live  # a stored dataset graph: all live
    assert graph_liveness(graphs[:1]).tolist() == [[1.0, 1.0, 0.0]]


def test_flops_length_must_match():
    pg = _pg(CONNECTED)
    with pytest.raises(ValueError):
        liveness(pg.graph, np.ones(3))
