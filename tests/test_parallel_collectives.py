"""The collective model: volumes by hand, the fitted constants' provenance, topology and bad input."""

import math

import pytest

from perfseer.devices.interconnect import default_node, get_network, get_node, gpu_links, list_nodes
from perfseer.errors import PerfseerError
from perfseer.parallel.collectives import (OPS, collective_cost, collective_time_ms, constants, fabric,
                                           volume_factor)


def test_ring_volumes_by_hand():
    assert volume_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert volume_factor("all_gather", 4) == pytest.approx(3 / 4)
    assert volume_factor("reduce_scatter", 2) == pytest.approx(1 / 2)
    assert volume_factor("send_recv", 2) == 1.0


def test_registry_facts_resolve_through_device_names():
    assert gpu_links("H100 SXM").nvlink_gbs == 450.0  # 900 GB/s both directions, halved
    assert gpu_links("a100-80gb-sxm").topology == "nvswitch"
    assert gpu_links("rtx4090").has_nvlink is False
    assert get_network("ib-ndr").gbs == 50.0
    assert get_node("hgx-h100").gpus == 8 and get_node("hgx-h100").network == "ib-ndr"
    assert default_node("h100-sxm").name == "dgx-h100"
    for n in list_nodes():
        assert get_node(n).source


def test_constants_have_provenance_and_held_out_table():
    c = constants()
    assert "vidur" in c["source"] and c["held_out"]
    assert 0.3 < c["paths"]["nvlink"]["ring"]["efficiency"] < 1.5


def test_time_grows_with_size_and_zero_for_one_rank():
    small = collective_time_ms("all_reduce", 2**20, 8, node="dgx-a100")
    big = collective_time_ms("all_reduce", 2**28, 8, node="dgx-a100")
    assert 0 < small < big
    assert collective_time_ms("all_reduce", 2**28, 1, node="dgx-a100") == 0.0
    # the big all-reduce runs at a bus bandwidth below the NVLink rate
    c = collective_cost("all_reduce", 2**28, 8, node="dgx-a100")
    assert c.bus_gbs < gpu_links("a100-80gb-sxm").nvlink_gbs


def test_paths_nvlink_pcie_network():
    assert fabric(8, node="dgx-a100").intra_path == "nvlink"
    assert fabric(4, gpu="rtx4090").intra_path == "pcie"
    nv = collective_time_ms("all_reduce", 2**27, 8, node="dgx-a100")
    pc = collective_time_ms("all_reduce", 2**27, 8, node="dgx-a100", interconnect="pcie")
    net = collective_time_ms("all_reduce", 2**27, 16, node="dgx-a100", nodes=2)
    assert nv < pc and nv < net
    ndr = collective_time_ms("all_reduce", 2**27, 16, node="dgx-a100", nodes=2, interconnect="ib-ndr")
    assert ndr < net  # twice the port rate of HDR


def test_every_op_answers():
    for op in OPS:
        ranks = 2 if op == "send_recv" else 8
        assert math.isfinite(collective_time_ms(op, 2**24, ranks, node="dgx-h100"))


@pytest.mark.parametrize("kw, words", [
    (dict(op="broadcast", nbytes=1, ranks=2), "unknown collective"),
    (dict(op="all_reduce", nbytes=1, ranks=16, node="dgx-a100"), "--nodes 2"),
    (dict(op="all_reduce", nbytes=1, ranks=6, node="dgx-a100", nodes=4), "split evenly"),
    (dict(op="all_reduce", nbytes=-1, ranks=2), "bytes"),
    (dict(op="send_recv", nbytes=1, ranks=4), "ranks=2"),
    (dict(op="all_reduce", nbytes=1, ranks=2, gpu="rtx4090", interconnect="nvlink"), "no NVLink"),
    (dict(op="all_reduce", nbytes=1, ranks=2, node="dgx-z"), "unknown node type"),
])
def test_bad_input_is_a_perfseer_error(kw, words):
    op, nbytes, ranks = kw.pop("op"), kw.pop("nbytes"), kw.pop("ranks")
    with pytest.raises(PerfseerError, match=words):
        collective_time_ms(op, nbytes, ranks, **kw)
