"""How GPUs talk to each other: per GPU model its NVLink and PCIe, common node types (DGX/HGX,
PCIe servers) and inter-node networks (InfiniBand HDR/NDR, RoCE), each with its source.

The facts are in ``perfseer/devices/data/interconnect/interconnects.json`` (bandwidths in GB/s in
one direction; NVLink as vendors quote it, both directions summed, is halved there).  GPU entries
are keyed by the device registry's canonical names and looked up through it, so any alias
``perfseer devices`` knows works.

Example::

    from perfseer.devices.interconnect import gpu_links, get_node, get_network

    gpu_links("H100 SXM").nvlink_gbs        # 450.0
    get_node("hgx-h100").network            # 'ib-ndr'
    get_network("ib-hdr").gbs               # 25.0
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from perfseer.devices.registry import normalize, registry
from perfseer.errors import PerfseerError

DATA = Path(__file__).resolve().parent / "data" / "interconnect" / "interconnects.json"
#: how the GPUs of one node reach each other
INTRA = ("nvswitch", "nvlink-pairs", "pcie")


class UnknownInterconnectError(PerfseerError):
    """A node type, network or GPU the interconnect registry does not know."""


@dataclass(frozen=True)
class GpuLinks:
    """A GPU model's links: NVLink (``None`` without), its generation, links and bandwidth per
    direction; ``topology``: ``nvswitch`` (every GPU of the node at full NVLink bandwidth),
    ``bridge-pair`` (NVLink bridges join two GPUs) or ``hybrid-cube-mesh``; the PCIe generation and
    its x16 bandwidth per direction."""

    gpu: str
    nvlink_generation: int | None
    nvlink_links: int | None
    nvlink_gbs: float | None
    topology: str | None
    pcie_gen: int
    pcie_gbs: float
    source: str

    @property
    def has_nvlink(self) -> bool:
        return self.nvlink_gbs is not None


@dataclass(frozen=True)
class Network:
    """An inter-node network: bandwidth per port (GB/s, one direction), nominal latency and NCCL's
    transport over it (``rdma``: InfiniBand/RoCE verbs; ``sockets``: TCP through host memory)."""

    name: str
    gbps: float
    latency_us: float
    source: str
    transport: str = "rdma"

    @property
    def gbs(self) -> float:
        return self.gbps / 8.0


@dataclass(frozen=True)
class NodeType:
    """A server type: its GPU model (``None``: any), GPUs per node, how they are joined
    (:data:`INTRA`), its network and the NICs per node for the compute fabric."""

    name: str
    aliases: tuple[str, ...]
    gpu: str | None
    gpus: int
    intra: str
    network: str
    nics: int
    source: str


@lru_cache(maxsize=1)
def _facts() -> dict:
    return json.loads(DATA.read_text())


def _canonical_gpu(name: str) -> str:
    """The registry's canonical name of ``name``; a GPU the registry does not hold (yet) keeps its
    normalised name, so the interconnect file can name GPUs added to the spec files later."""
    base = str(name).strip().split("/", 1)[0].split(":", 1)[0]
    return registry().resolve(base) or normalize(base)


@lru_cache(maxsize=1)
def _gpu_index() -> dict[str, dict]:
    return {_canonical_gpu(g["gpu"]): g for g in _facts()["gpus"]}


def pcie_gbs(gen: int) -> float:
    """The x16 bandwidth per direction of PCIe generation ``gen`` (GB/s)."""
    try:
        return float(_facts()["pcie"][str(int(gen))]["x16_gbs"])
    except KeyError:
        raise UnknownInterconnectError(f"unknown PCIe generation {gen!r}",
                                       f"use one of {', '.join(_facts()['pcie'])}") from None


def gpu_links(gpu: str) -> GpuLinks:
    """The links of GPU model ``gpu`` (any name ``perfseer devices`` resolves).

    Raises:
        UnknownInterconnectError: a GPU without an interconnect entry.
    """
    key = _canonical_gpu(gpu)
    g = _gpu_index().get(key)
    if g is None:
        raise UnknownInterconnectError(
            f"no interconnect facts for GPU {gpu!r} (resolved to {key!r})",
            f"pass --interconnect nvlink|pcie with --node pcie-8 or another node type, or use one of "
            f"{', '.join(sorted(_gpu_index()))}")
    nv = g.get("nvlink")
    return GpuLinks(gpu=key, nvlink_generation=nv and nv["generation"], nvlink_links=nv and nv["links"],
                    nvlink_gbs=float(nv["gbs"]) if nv else None, topology=nv and nv["topology"],
                    pcie_gen=int(g["pcie_gen"]), pcie_gbs=pcie_gbs(g["pcie_gen"]), source=g["source"])


def list_gpus() -> list[str]:
    """The GPUs with interconnect facts (canonical names)."""
    return sorted(_gpu_index())


def get_network(name: str) -> Network:
    """An inter-node network by name (``ib-hdr``, ``ib-ndr``, ``roce``, ``ethernet-25g``)."""
    nets = _facts()["networks"]
    key = str(name).strip().lower()
    if key not in nets:
        raise UnknownInterconnectError(f"unknown network {name!r}", f"use one of {', '.join(nets)}")
    n = nets[key]
    return Network(name=key, gbps=float(n["gbps"]), latency_us=float(n["latency_us"]), source=n["source"],
                   transport=n.get("transport", "rdma"))


def list_networks() -> list[str]:
    return list(_facts()["networks"])


@lru_cache(maxsize=1)
def _nodes() -> dict[str, NodeType]:
    out = {}
    for n in _facts()["nodes"]:
        node = NodeType(name=n["name"], aliases=tuple(n.get("aliases", ())),
                        gpu=_canonical_gpu(n["gpu"]) if n.get("gpu") else None, gpus=int(n["gpus"]),
                        intra=n["intra"], network=n["network"], nics=int(n["nics"]), source=n["source"])
        for k in (node.name, *node.aliases):
            out[normalize(k)] = node
    return out


def get_node(name: str) -> NodeType:
    """A node type by name or alias (``dgx-a100``, ``hgx-h100``, ``pcie-8``...)."""
    node = _nodes().get(normalize(name))
    if node is None:
        raise UnknownInterconnectError(f"unknown node type {name!r}", f"use one of {', '.join(list_nodes())}")
    return node


def list_nodes() -> list[str]:
    return list(dict.fromkeys(n.name for n in _nodes().values()))


def default_node(gpu: str) -> NodeType:
    """The node type a GPU model usually comes in: the DGX/HGX of an NVSwitch GPU, else a PCIe
    server of 8 (NVLink-bridged pairs where the GPU has a bridge)."""
    links = gpu_links(gpu)
    for node in _nodes().values():
        if node.gpu == links.gpu:
            return node
    if links.topology == "nvswitch":
        return NodeType(name=f"hgx-{links.gpu}", aliases=(), gpu=links.gpu, gpus=8, intra="nvswitch",
                        network="ib-ndr", nics=8, source="an 8-GPU NVSwitch baseboard (HGX) assumed for " + links.gpu)
    intra = "nvlink-pairs" if links.topology == "bridge-pair" else "pcie"
    base = get_node("pcie-8")
    return NodeType(name=f"pcie-8-{links.gpu}", aliases=(), gpu=links.gpu, gpus=8, intra=intra,
                    network=base.network, nics=base.nics, source=base.source)
