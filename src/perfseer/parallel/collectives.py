"""Time of an NCCL collective from its message size, number of ranks and topology.

The model is NCCL's own accounting (nccl-tests' "bus bandwidth"): a ring collective over ``n``
ranks moves a volume per rank of

=================  ==========================
operation          bytes each rank sends
=================  ==========================
``all_reduce``     ``2 (n-1)/n * S``
``all_gather``     ``(n-1)/n * S`` (S: the gathered output)
``reduce_scatter`` ``(n-1)/n * S`` (S: the input)
``all_to_all``     ``(n-1)/n * S``
``send_recv``      ``S``
=================  ==========================

and takes ``latency + volume / bandwidth + s sqrt(volume / link bandwidth)`` (the last term: NCCL
reaches its bandwidth gradually with the message size), where

* inside one node the bandwidth is the GPU's NVLink (every rank on an NVSwitch, or the two GPUs
  of an NVLink bridge) or PCIe (anything else), times a fitted efficiency;
* across ``k`` nodes of ``g`` ranks each, the ring crosses each node's network once per channel
  and NCCL gives each GPU its nearest NIC: the bandwidth is
  ``min(intra, efficiency x min(g, NICs per node) x port bandwidth)``.  Efficiency (per NIC
  driven), latency and square-root term are fitted per network and per measured number of GPUs
  per node; any other number of GPUs per node drives its NICs as a lone GPU drives its one (the
  fit with the fewest GPUs per node), the intra-node ring's latency added;
* each network has its own constants (InfiniBand HDR from the DGX A100 rows; the PCIe servers'
  unnamed network, taken as 25 GbE, from theirs); a network without measurements borrows those of
  a measured one with the same NCCL transport (RDMA: InfiniBand, RoCE; sockets: TCP Ethernet);
  over sockets a message's first ``buffer_bytes`` go at a burst rate into the hosts' buffers and
  the rest at the sustained rate (``beyond_x`` more time per byte at the rated bandwidth);
* the latency is ``a0 + a1 (g-1)`` (a ring's steps) per path; rings (all-reduce and the
  others) and send/recv have their own constants.

The constants are fitted on Vidur's NCCL measurements (A100 DGX all-reduce and send/recv inside
and across nodes, A100 PCIe servers with NVLink-bridged pairs, A40 pairs) by
:mod:`perfseer.fit.collectives` (least absolute relative error) and shipped in
``perfseer/parallel/data/collectives.json`` with their provenance and held-out errors; this module
only reads that file.  All-gather, reduce-scatter and all-to-all were not measured: they use the
all-reduce's ring efficiency (nccl-tests reports the same bus bandwidth for the three on one
fabric).

Example::

    >>> from perfseer.parallel.collectives import collective_time_ms
    >>> collective_time_ms("all_reduce", 64 * 2**20, 8, node="dgx-a100")  # doctest: +SKIP
    0.66
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from perfseer.devices.interconnect import (GpuLinks, NodeType, UnknownInterconnectError, default_node, get_network,
                                           get_node, gpu_links, list_networks, pcie_gbs)
from perfseer.errors import PerfseerError

FACTS = Path(__file__).resolve().parent / "data" / "collectives.json"
#: the fact file's layout this module reads (2: one entry per network, efficiencies per NIC driven)
FORMAT_VERSION = 2
OPS = ("all_reduce", "all_gather", "reduce_scatter", "send_recv", "all_to_all")
#: ``--interconnect`` choices: the intra-node path (nvlink, pcie) or the inter-node network
INTERCONNECTS = ("nvlink", "pcie", "ib-ndr", "ib-hdr", "roce")


def volume_factor(op: str, ranks: int) -> float:
    """Bytes each rank sends per byte of the message (the table above)."""
    n = ranks
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "send_recv":
        return 1.0
    raise PerfseerError(f"unknown collective {op!r}", f"use one of {', '.join(OPS)}")


@dataclass(frozen=True)
class Fabric:
    """The links a collective runs over: the intra-node path (``nvlink``, ``pcie`` or a measured
    node's own), its bandwidth per direction, the network and NICs across nodes."""

    node: NodeType
    gpu: str | None
    intra_path: str
    intra_gbs: float
    network: str
    network_gbs: float
    nics: int


@dataclass(frozen=True)
class CollectiveCost:
    """One collective's time split into its latency and bandwidth terms (ms), the path and the
    bus bandwidth it ran at (GB/s)."""

    op: str
    nbytes: float
    ranks: int
    nodes: int
    latency_ms: float
    bandwidth_ms: float
    path: str
    bus_gbs: float

    @property
    def ms(self) -> float:
        return self.latency_ms + self.bandwidth_ms


@lru_cache(maxsize=1)
def constants() -> dict:
    """The fitted constants (``perfseer/parallel/data/collectives.json``), with their provenance."""
    if not FACTS.exists():
        raise PerfseerError(f"the fitted collective constants {FACTS} are missing",
                            "reinstall perfseer, or refit them: python -m perfseer.fit.collectives")
    c = json.loads(FACTS.read_text())
    if c.get("format_version") != FORMAT_VERSION:
        raise PerfseerError(f"the fitted collective constants {FACTS} are format {c.get('format_version')!r}, this "
                            f"perfseer reads format {FORMAT_VERSION}",
                            "refit them: python -m perfseer.fit.collectives")
    return c


def fabric(ranks: int, *, gpu: str | None = None, node: str | None = None, nodes: int = 1,
           interconnect: str | None = None, consts: dict | None = None) -> Fabric:
    """Resolve the links ``ranks`` ranks on ``nodes`` nodes use.

    ``node`` names a node type (``perfseer.devices.interconnect.list_nodes()``); without it the GPU's
    usual node (:func:`~perfseer.devices.interconnect.default_node`); with neither, an 8-GPU PCIe
    server.  ``interconnect`` forces the intra-node path (``nvlink``, ``pcie``) or the network.

    Raises:
        PerfseerError: ranks not divisible by nodes, more ranks per node than the node holds,
            NVLink asked on a GPU without it, an unknown name.
    """
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise PerfseerError(f"ranks must be an integer >= 1, got {ranks!r}", "pass e.g. ranks=8")
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise PerfseerError(f"nodes must be an integer >= 1, got {nodes!r}", "pass e.g. nodes=2")
    if ranks % nodes:
        raise PerfseerError(f"{ranks} ranks do not split evenly over {nodes} nodes",
                            "use a number of GPUs that is a multiple of the number of nodes")
    if interconnect is not None and interconnect not in INTERCONNECTS:
        raise PerfseerError(f"unknown interconnect {interconnect!r}", f"use one of {', '.join(INTERCONNECTS)}")
    if node is not None:
        nt = get_node(node)
    elif gpu is not None:
        nt = default_node(gpu)
    else:
        nt = get_node("pcie-8")
    g = ranks // nodes
    if g > nt.gpus:
        raise PerfseerError(f"{g} GPUs per node, but a {nt.name} node holds {nt.gpus}",
                            f"pass --nodes {math.ceil(ranks / nt.gpus)} (nodes={math.ceil(ranks / nt.gpus)}) or "
                            "fewer GPUs, or another --node type")
    gname = gpu or nt.gpu
    links: GpuLinks | None = gpu_links(gname) if gname else None
    pcie = links.pcie_gbs if links else pcie_gbs(4)  # a PCIe Gen4 server when no GPU is named
    intra = nt.intra
    if interconnect == "nvlink":
        if links is None or not links.has_nvlink:
            raise PerfseerError(f"{gname or 'this node'} has no NVLink", "pass --interconnect pcie, or a GPU with NVLink")
        if intra == "pcie":
            intra = "nvswitch" if links.topology == "nvswitch" else "nvlink-pairs"
    elif interconnect == "pcie":
        intra = "pcie"
    if intra == "nvswitch" and links is not None and links.has_nvlink:
        path, gbs = "nvlink", links.nvlink_gbs
    elif intra == "nvlink-pairs" and links is not None and links.has_nvlink and g <= 2:
        path, gbs = "nvlink", links.nvlink_gbs
    else:
        path, gbs = "pcie", pcie
    measured = (consts if consts is not None else constants()).get("nodes", {}).get(nt.name, {})
    if interconnect is None and path in measured.get("paths", {}):
        path = f"{nt.name}:{path}"  # a measured node type answers with its own fitted link
    network = interconnect if interconnect in list_networks() else nt.network
    net = get_network(network)
    return Fabric(node=nt, gpu=gname, intra_path=path, intra_gbs=float(gbs), network=network, network_gbs=net.gbs,
                  nics=nt.nics)


def _path_constants(c: dict, path: str) -> dict:
    if ":" in path:
        node, p = path.split(":", 1)
        return c["nodes"][node]["paths"][p]
    return c["paths"][path]


def collective_cost(op: str, nbytes: float, ranks: int, *, gpu: str | None = None, node: str | None = None,
                    nodes: int = 1, interconnect: str | None = None, consts: dict | None = None) -> CollectiveCost:
    """:func:`collective_time_ms` split into latency and bandwidth terms (``consts``: other fitted
    constants than the shipped ones, for fitting)."""
    if op not in OPS:
        raise PerfseerError(f"unknown collective {op!r}", f"use one of {', '.join(OPS)}")
    if not (isinstance(nbytes, (int, float)) and math.isfinite(nbytes) and nbytes >= 0):
        raise PerfseerError(f"message size must be a finite number of bytes >= 0, got {nbytes!r}",
                            "pass the message size in bytes")
    if op == "send_recv" and ranks != 2:
        raise PerfseerError(f"send_recv is between 2 ranks, got {ranks}", "pass ranks=2")
    c = consts if consts is not None else constants()
    fab = fabric(ranks, gpu=gpu, node=node, nodes=nodes, interconnect=interconnect, consts=c)
    if ranks == 1 or nbytes == 0:
        return CollectiveCost(op, float(nbytes), ranks, nodes, 0.0, 0.0, "none", math.inf)
    g = ranks // nodes
    family = "p2p" if op == "send_recv" else "ring"
    pc = _family(_path_constants(c, fab.intra_path), family)
    intra_bw = pc["efficiency"] * fab.intra_gbs * 1e9
    vol = volume_factor(op, ranks) * float(nbytes)
    if nodes == 1:
        if g == 1:  # one rank: nothing moves
            return CollectiveCost(op, float(nbytes), ranks, nodes, 0.0, 0.0, "none", math.inf)
        latency = pc["latency_ms"][0] + pc["latency_ms"][1] * (g - 1)
        t_bw = 1e3 * vol / intra_bw + pc["sqrt_ms"] * math.sqrt(1e3 * vol / (fab.intra_gbs * 1e9))
        return CollectiveCost(op, float(nbytes), ranks, nodes, float(latency), t_bw, fab.intra_path,
                              vol / (t_bw / 1e3) / 1e9 if t_bw > 0 else math.inf)
    nc = _family(network_entry(c, fab), family)
    per_gpu = 1 if op == "send_recv" else g
    nk = network_constants(nc, per_gpu)
    rated = min(per_gpu, fab.nics) * fab.network_gbs * 1e9  # the NICs the node's ranks drive at once
    net_bw = nk["efficiency"] * rated
    if op == "all_to_all":  # each node sends (k-1)/k of its g ranks' data over the network
        net_bw = net_bw / g
    latency = nk["latency_ms"]
    if g > 1:
        latency += pc["latency_ms"][0] + pc["latency_ms"][1] * (g - 1)
    bw = min(intra_bw, net_bw) if g > 1 else net_bw
    t_bw = 1e3 * vol / bw + nk["sqrt_ms"] * math.sqrt(1e3 * vol / rated)
    if nk.get("buffer_bytes") is not None:  # a socket transport: beyond the hosts' buffers, the sustained rate
        t_bw += nk["beyond_x"] * 1e3 * max(0.0, vol - nk["buffer_bytes"]) / rated
    path = fab.network if bw == net_bw else fab.intra_path
    return CollectiveCost(op, float(nbytes), ranks, nodes, float(latency), t_bw, path, vol / (t_bw / 1e3) / 1e9)


def _family(entry: dict, family: str) -> dict:
    """The ``ring`` or ``p2p`` constants of a path (the other family's where one was not measured)."""
    return entry.get(family) or entry["ring" if family == "p2p" else "p2p"]


def network_entry(c: dict, fab: Fabric) -> dict:
    """The fitted constants of the network ``fab`` crosses nodes on: the node type's own where that
    node type was measured on its usual network; else the network's (fitted on every node type
    measured on it); else those of a measured network with the same NCCL transport
    (:attr:`perfseer.devices.interconnect.Network.transport`: RDMA or sockets)."""
    own = c.get("nodes", {}).get(fab.node.name, {}).get("network")
    if own is not None and fab.network == fab.node.network:
        return own
    nets = c.get("networks", {})
    if fab.network in nets:
        return nets[fab.network]
    transport = get_network(fab.network).transport
    for name in sorted(nets):
        if get_network(name).transport == transport:
            return nets[name]
    if nets:
        return nets[sorted(nets)[0]]
    raise PerfseerError("the fitted collective constants hold no network",
                        "refit them: python -m perfseer.fit.collectives")


def network_constants(nc: dict, per_node: int) -> dict:
    """The network constants with ``per_node`` ranks on each node.

    A measured number of GPUs per node answers with its own fit.  Any other answers with the fit
    of the fewest GPUs per node measured (a GPU alone on its NIC: its efficiency, latency and
    square-root term): the caller multiplies the efficiency, per NIC driven, by the
    ``min(per_node, NICs per node)`` NICs NCCL drives at once (each GPU its nearest NIC) and the
    port bandwidth, and adds the intra-node ring's latency.
    """
    table = sorted((int(k), v) for k, v in nc["by_gpus_per_node"].items())
    for k, v in table:
        if k == per_node:
            return dict(v)
    return dict(table[0][1])


def collective_time_ms(op: str, nbytes: float, ranks: int, *, gpu: str | None = None, node: str | None = None,
                       nodes: int = 1, interconnect: str | None = None) -> float:
    """Time (ms) of one NCCL collective.

    Args:
        op: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``send_recv`` or ``all_to_all``.
        nbytes: message size in bytes (all-reduce: the buffer reduced; all-gather: the gathered
            output; reduce-scatter: the input; all-to-all: each rank's buffer; send/recv: the
            message).
        ranks: GPUs taking part (2 for ``send_recv``: one on each side).
        gpu: the GPU model (``perfseer devices``); default: the node type's.
        node: a node type (``dgx-a100``, ``hgx-h100``, ``pcie-8``...,
            :func:`perfseer.devices.interconnect.list_nodes`); default: the GPU's usual node.
        nodes: nodes the ranks are spread over evenly (``send_recv`` with ``nodes=2``: across nodes).
        interconnect: force the path: ``nvlink`` or ``pcie`` inside a node, or the network
            (``ib-ndr``, ``ib-hdr``, ``roce``) across nodes.

    Returns:
        Milliseconds, latency plus volume over bandwidth.

    Raises:
        PerfseerError: an unknown operation, node type, GPU or network; ranks that do not fit the
            nodes.

    Example::

        >>> collective_time_ms("all_reduce", 2 * 124_000_000, 8, gpu="a100-80gb-sxm")  # doctest: +SKIP
    """
    return collective_cost(op, nbytes, ranks, gpu=gpu, node=node, nodes=nodes, interconnect=interconnect).ms


__all__ = ["OPS", "INTERCONNECTS", "collective_time_ms", "collective_cost", "CollectiveCost", "fabric", "Fabric",
           "volume_factor", "constants", "network_entry", "network_constants", "UnknownInterconnectError"]
