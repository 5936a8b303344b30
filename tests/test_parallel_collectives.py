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


def test_every_node_and_gpu_entry_resolves():
    from perfseer.devices.interconnect import list_gpus

    for n in list_nodes():
        node = get_node(n)
        assert node.intra in ("nvswitch", "nvlink-pairs", "pcie") and get_network(node.network).gbs > 0
        if node.gpu:
            assert gpu_links(node.gpu).pcie_gbs > 0
    for g in list_gpus():
        links = gpu_links(g)
        assert links.source and (links.nvlink_gbs is None or links.nvlink_gbs > 0)


def test_cli_choices_match_the_model():
    from perfseer.cli.several import INTERCONNECTS as cli_choices
    from perfseer.parallel.collectives import INTERCONNECTS

    assert cli_choices == INTERCONNECTS


def test_unmeasured_gpus_per_node_drive_one_nic_each():
    """Across nodes, a number of GPUs per node without its own fit drives min(g, NICs) NICs at the
    per-NIC constants of the fewest GPUs per node measured."""
    from perfseer.parallel.collectives import network_constants

    nc = {"by_gpus_per_node": {"1": {"efficiency": 0.25, "latency_ms": 0.05, "sqrt_ms": 0.2},
                               "8": {"efficiency": 0.1, "latency_ms": 0.0, "sqrt_ms": 4.0}}}
    assert network_constants(nc, 8)["efficiency"] == 0.1  # measured: its own
    assert network_constants(nc, 4) == {"efficiency": 0.25, "latency_ms": 0.05, "sqrt_ms": 0.2}
    # four GPUs per node on a DGX A100 drive four HDR NICs: a 4x wider network than one GPU per node
    import copy

    c = copy.deepcopy(constants())
    table = c["networks"]["ib-hdr"]["ring"]["by_gpus_per_node"]
    table.pop("4", None)  # as if 4 GPUs per node had not been measured
    one = table["1"]
    cost = collective_cost("all_reduce", 2**30, 8, node="dgx-a100", nodes=2, consts=c)
    assert cost.path == "ib-hdr"
    assert cost.bus_gbs == pytest.approx(4 * one["efficiency"] * 25.0, rel=0.1)


def test_networks_fitted_apart_and_borrowed_by_transport():
    from perfseer.devices.interconnect import get_network
    from perfseer.parallel.collectives import network_entry

    c = constants()
    assert {"ib-hdr", "ethernet-25g"} <= set(c["networks"])
    assert get_network("roce").transport == get_network("ib-ndr").transport == "rdma"
    assert get_network("ethernet-25g").transport == "sockets"
    # an unmeasured RDMA network (NDR) uses the HDR fit's efficiencies on its own port rate
    assert network_entry(c, fabric(16, node="dgx-h100", nodes=2)) is c["networks"]["ib-hdr"]
    # the PCIe servers' network is not InfiniBand: a 1 GB send across nodes takes seconds, not ms
    slow = collective_time_ms("send_recv", 2**30, 2, node="pcie-a40-nvlink-pairs", nodes=2)
    fast = collective_time_ms("send_recv", 2**30, 2, node="dgx-a100", nodes=2)
    assert slow > 2 * fast


def test_an_old_fact_file_is_refused_with_the_fix(tmp_path, monkeypatch):
    import json

    from perfseer.parallel import collectives as col

    old = tmp_path / "collectives.json"
    old.write_text(json.dumps({"format_version": 1, "paths": {}, "network": {}}))
    monkeypatch.setattr(col, "FACTS", old)
    col.constants.cache_clear()
    try:
        with pytest.raises(PerfseerError, match="python -m perfseer.fit.collectives"):
            col.constants()
    finally:
        monkeypatch.undo()
        col.constants.cache_clear()
    assert col.constants()["format_version"] == col.FORMAT_VERSION


def test_socket_network_bursts_then_sustains():
    """Across the PCIe servers' socket network a small message goes at the buffers' burst rate and a
    big one at the lower sustained rate (fitted: buffer_bytes, beyond_x)."""
    nk = constants()["networks"]["ethernet-25g"]["p2p"]["by_gpus_per_node"]["1"]
    assert nk["buffer_bytes"] > 0 and nk["beyond_x"] > 0
    small = collective_cost("send_recv", nk["buffer_bytes"] / 2, 2, node="pcie-4", nodes=2)
    big = collective_cost("send_recv", 64 * nk["buffer_bytes"], 2, node="pcie-4", nodes=2)
    assert big.bus_gbs < small.bus_gbs
    # InfiniBand (RDMA) has no such term
    assert "buffer_bytes" not in constants()["networks"]["ib-hdr"]["p2p"]["by_gpus_per_node"]["1"]
