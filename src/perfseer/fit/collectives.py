"""Fit the collective model's constants (:mod:`perfseer.parallel.collectives`) on Vidur's NCCL
measurements, validate them on held-out sizes, rank counts and node types, and write the fact file
the runtime reads (``perfseer/parallel/data/collectives.json``).

Data: ``vidur/profiling/network/{a100_dgx, a100_pairwise_nvlink, a40_pairwise_nvlink}/
{all_reduce,send_recv}.csv`` (github.com/microsoft/vidur, MIT): the median time (ms) of one
collective by message ``size``, ``num_workers`` and ``devices_per_node``.  ``size`` is in bytes:
Vidur's own predictor divides it by ``2 x hidden`` to get fp16 tokens, and read as fp16 elements
the NVLink send/recv of the A100 pairs would run at 576 GB/s, above NVLink 3's 300 GB/s per
direction.

Each fitting stage minimises the absolute relative error (non-negative least squares weighted by
``1/t``, then reweighted, :func:`_nnls`) of
``t = a0 + a1 (g-1) + x * volume / bandwidth + s sqrt(volume / bandwidth)`` (``x`` = 1/efficiency;
across nodes one fit per number of GPUs per node, ``bandwidth`` the ports of the ``min(g, NICs)``
NICs driven), rings (all-reduce) and send/recv apart:

1. ``nvlink``: the DGX A100 rows inside one node (all-reduce on 2, 4, 8 GPUs; send/recv 2);
2. ``networks``: each network from the cross-node rows of the node types measured on it, the
   intra-node latency of stage 1 subtracted: ``ib-hdr`` (HDR 200 Gb/s per NIC, 8 NICs) from the
   DGX A100 rows across 2 nodes (1, 2, 4, 8 GPUs per node); ``ethernet-25g`` (the PCIe servers'
   unnamed network) from the A100 PCIe and A40 servers' send/recv across 2 nodes, with a burst
   rate up to a fitted buffer size and a sustained rate beyond (NCCL's socket transport);
3. ``pcie``: the A100 PCIe server's all-reduce over 4 GPUs (two NVLink pairs joined by PCIe);
4. per measured node type, its own paths (A100 PCIe pairs, A40 pairs) and cross-node network.

Held out (:func:`validate`): every third size and the largest fifth of each configuration; each
DGX rank count in turn (1x4; 2x2, 2x4, 2x8, fitted on the other three); each PCIe node type
(inside the node from the DGX fit and its spec sheet, across nodes from the other server's fit).

Run ``python -m perfseer.fit.collectives [--data DIR] [--out FILE] [--report FILE]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from perfseer.devices.interconnect import get_network, get_node, gpu_links
from perfseer.parallel import collectives as col

DEFAULT_DATA = Path("/work/shared/datasets/vidur/profiling/network")
#: Vidur folder -> node type of the interconnect registry
NODE_OF = {"a100_dgx": "dgx-a100", "a100_pairwise_nvlink": "pcie-a100-nvlink-pairs",
           "a40_pairwise_nvlink": "pcie-a40-nvlink-pairs"}
SOURCE = ("github.com/microsoft/vidur commit 7d47513, data/profiling/network (MIT); "
          "median of each row's time_stats.<op>.median")


@dataclass(frozen=True)
class Config:
    folder: str
    op: str
    ranks: int
    per_node: int

    @property
    def nodes(self) -> int:
        return self.ranks // self.per_node

    @property
    def node(self) -> str:
        return NODE_OF[self.folder]

    def label(self) -> str:
        return f"{self.folder} {self.op} {self.ranks} GPUs, {self.per_node}/node"


def load(data: Path = DEFAULT_DATA) -> pd.DataFrame:
    """One row per (folder, op, ranks, GPUs per node, size): ``ms``, the median of the medians."""
    frames = []
    for folder in NODE_OF:
        for op in ("all_reduce", "send_recv"):
            f = Path(data) / folder / f"{op}.csv"
            if not f.exists():
                continue
            d = pd.read_csv(f)
            frames.append(pd.DataFrame({"folder": folder, "op": op, "ranks": d["num_workers"].astype(int),
                                        "per_node": d["devices_per_node"].astype(int),
                                        "size": d["size"].astype(float),
                                        "ms": d[f"time_stats.{op}.median"].astype(float)}))
    if not frames:
        raise SystemExit(f"error: no Vidur network CSVs under {data}")
    df = pd.concat(frames, ignore_index=True)
    return df.groupby(["folder", "op", "ranks", "per_node", "size"], as_index=False)["ms"].median()


def split_sizes(df: pd.DataFrame) -> pd.Series:
    """Held-out sizes of each configuration: every third size, and the largest fifth (extrapolation)."""
    held = pd.Series(False, index=df.index)
    for _, g in df.groupby(["folder", "op", "ranks", "per_node"]):
        order = g["size"].rank(method="first").astype(int) - 1
        n = len(g)
        held.loc[g.index] = (order % 3 == 2) | (order >= int(0.8 * n))
    return held


def _volume(op: str, ranks: int, size: float) -> float:
    return col.volume_factor(op, ranks) * size


def _intra_gbs(cfg: Config) -> tuple[str, float]:
    fab = col.fabric(cfg.ranks, node=cfg.node, nodes=cfg.nodes, consts={})
    path = fab.intra_path
    links = gpu_links(fab.gpu)
    return path, (links.nvlink_gbs if path == "nvlink" else links.pcie_gbs)


def _nnls(rows: list[tuple[list[float], float]], iterations: int = 20) -> np.ndarray:
    """Non-negative least absolute relative error: NNLS on ``A x = y`` weighted by ``1/y``, then
    iteratively reweighted by ``1/|relative residual|`` (IRLS), so the fit minimises the mean
    absolute percentage error the held-out tables report and a run of disturbed repeats (the
    cross-node rows alternate between two rates) pulls it less than squares would."""
    A = np.array([r[0] for r in rows], dtype=float)
    y = np.array([r[1] for r in rows], dtype=float)
    w = 1.0 / y
    sol, _ = nnls(A * w[:, None], y * w)
    for _ in range(iterations):
        rel = np.abs(A @ sol - y) / y
        wi = w / np.sqrt(np.maximum(rel, 1e-3))  # squares of sqrt-weights: weight 1/|r|
        sol, _ = nnls(A * wi[:, None], y * wi)
    return sol


def fit_path(df: pd.DataFrame) -> dict:
    """``{family: {"efficiency", "latency_ms": [a0, a1], "sqrt_ms"}}`` of one intra-node path from its
    rows, ``family`` ``ring`` (all-reduce rows) and ``p2p`` (send/recv rows) where measured."""
    out = {}
    for family, g in (("ring", df[df["op"] != "send_recv"]), ("p2p", df[df["op"] == "send_recv"])):
        if not len(g):
            continue
        rows = []
        for r in g.itertuples():
            _, gbs = _intra_gbs(Config(r.folder, r.op, r.ranks, r.per_node))
            v = _volume(r.op, r.ranks, r.size) / (gbs * 1e9) * 1e3  # ms at full link bandwidth
            rows.append(([1.0, r.per_node - 1.0, v, np.sqrt(v)], r.ms))
        a0, a1, x, sq = _nnls(rows)
        out[family] = {"efficiency": float(1.0 / x) if x > 0 else 1e3, "latency_ms": [float(a0), float(a1)],
                       "sqrt_ms": float(sq), "rows": int(len(g))}
    return out


def fit_network(df: pd.DataFrame, consts: dict) -> dict:
    """``{family: {"by_gpus_per_node": {g: {"efficiency", "latency_ms", "sqrt_ms"}}}}`` of the
    network from cross-node rows (the intra-node latency of ``consts`` subtracted), one fit per
    number of GPUs per node (send/recv: one GPU on each side).

    Over a socket transport (TCP through host memory) a message's first bytes go at a burst rate
    into the hosts' buffers and the rest at the sustained rate: the fit adds
    ``beyond_x * max(0, v - v0)`` (``v0``: ``buffer_bytes`` at the rated bandwidth), ``v0`` chosen
    on a grid of the rows' own volumes (least absolute relative error)."""
    out = {}
    for family, rows_f in (("ring", df[df["op"] != "send_recv"]), ("p2p", df[df["op"] == "send_recv"])):
        if not len(rows_f):
            continue
        fits = {}
        for per, g in rows_f.groupby("per_node"):
            rows, sockets, rated_ms = [], False, None
            for r in g.itertuples():
                cfg = Config(r.folder, r.op, r.ranks, r.per_node)
                fab = col.fabric(cfg.ranks, node=cfg.node, nodes=cfg.nodes, consts=consts)
                sockets = get_network(fab.network).transport == "sockets"
                intra = 0.0
                if cfg.per_node > 1 and family == "ring":
                    pc = col._family(col._path_constants(consts, fab.intra_path), family)
                    intra = pc["latency_ms"][0] + pc["latency_ms"][1] * (cfg.per_node - 1)
                drive = min(cfg.per_node if family == "ring" else 1, fab.nics)  # NICs driven at once
                rated_ms = drive * fab.network_gbs * 1e9 / 1e3  # bytes per ms at the rated bandwidth
                v = _volume(r.op, r.ranks, r.size) / rated_ms
                rows.append(([1.0, v, np.sqrt(v)], max(r.ms - intra, 1e-4)))
            a, x, sq = _nnls(rows)
            fit = {"efficiency": float(1.0 / x) if x > 0 else 1e3, "latency_ms": float(a), "sqrt_ms": float(sq),
                   "rows": int(len(g))}
            if sockets:
                fit.update(_buffered(rows, rated_ms) or {})
            fits[str(int(per) if family == "ring" else 1)] = fit
        out[family] = {"by_gpus_per_node": fits}
    return out


def _buffered(rows: list[tuple[list[float], float]], rated_ms: float) -> dict | None:
    """The burst-then-sustained fit of :func:`fit_network` (``None`` when no buffer size does
    better than none)."""
    v = np.array([r[0][1] for r in rows])
    y = np.array([r[1] for r in rows])

    def score(sol, A):
        return float(np.mean(np.abs(A @ sol - y) / y))

    A0 = np.array([r[0] for r in rows])
    base = _nnls(rows)
    best = (score(base, A0), None, None)
    for v0 in np.unique(np.quantile(v, np.linspace(0.05, 0.8, 16))):
        A = np.column_stack([A0, np.maximum(0.0, v - v0)])
        sol = _nnls([(list(a), t) for a, t in zip(A, y)])
        e = score(sol, A)
        if e < best[0] - 1e-4:
            best = (e, float(v0), sol)
    if best[1] is None:
        return None
    a, x, sq, x2 = best[2]
    return {"efficiency": float(1.0 / x) if x > 0 else 1e3, "latency_ms": float(a), "sqrt_ms": float(sq),
            "buffer_bytes": float(best[1] * rated_ms), "beyond_x": float(x2)}


def _sel(df, folder=None, op=None, nodes=None, per_node=None, ranks=None):
    m = pd.Series(True, index=df.index)
    if folder is not None:
        m &= df["folder"] == folder
    if op is not None:
        m &= df["op"] == op
    if nodes is not None:
        m &= (df["ranks"] // df["per_node"] == nodes) if nodes == 1 else (df["ranks"] // df["per_node"] > 1)
    if per_node is not None:
        m &= df["per_node"] == per_node
    if ranks is not None:
        m &= df["ranks"] == ranks
    return df[m]


def fit(df: pd.DataFrame, exclude: pd.Series | None = None, *, node_overrides: bool = True,
        drop: list | None = None, network_folders: tuple[str, ...] | None = None) -> dict:
    """Fit every stage on ``df`` less ``exclude`` (a boolean mask) and less the configurations in
    ``drop`` (``(folder, op, ranks, per_node)`` tuples); ``node_overrides=False``: no per-node paths
    or networks; ``network_folders``: the folders whose cross-node rows fit the networks (default
    all)."""
    use = df if exclude is None else df[~exclude]
    for d in drop or []:
        use = use[~((use["folder"] == d[0]) & (use["op"] == d[1]) & (use["ranks"] == d[2]) & (use["per_node"] == d[3]))]
    consts: dict = {"paths": {}, "nodes": {}}
    dgx = _sel(use, folder="a100_dgx")
    consts["paths"]["nvlink"] = fit_path(_sel(dgx, nodes=1))
    pair4 = _sel(use, folder="a100_pairwise_nvlink", op="all_reduce", ranks=4, per_node=4)
    consts["paths"]["pcie"] = fit_path(pair4)
    # each network from the cross-node rows of every node type measured on it
    cross = _sel(use, nodes=2)
    if network_folders is not None:
        cross = cross[cross["folder"].isin(network_folders)]
    net_of = {folder: get_node(node).network for folder, node in NODE_OF.items()}
    consts["networks"] = {net: fit_network(g, consts)
                          for net, g in cross.groupby(cross["folder"].map(net_of)) if len(g)}
    if node_overrides:
        for folder in ("a100_pairwise_nvlink", "a40_pairwise_nvlink"):
            node = NODE_OF[folder]
            mine = _sel(use, folder=folder)
            entry: dict = {"paths": {}}
            nv = _sel(mine, nodes=1, per_node=2)
            if len(nv):
                entry["paths"]["nvlink"] = fit_path(nv)
            # the PCIe path of the A100 server is the generic pcie fit itself
            cross = _sel(mine, nodes=2)
            if len(cross):
                entry["network"] = fit_network(cross, consts)
            consts["nodes"][node] = entry
    return consts


def predict(df: pd.DataFrame, consts: dict, *, use_nodes: bool = True) -> np.ndarray:
    """The model's time (ms) of each row of ``df`` under ``consts`` (the runtime's own formula)."""
    c = consts if use_nodes else {**consts, "nodes": {}}
    return np.array([col.collective_cost(r.op, r.size, r.ranks, node=NODE_OF[r.folder],
                                         nodes=r.ranks // r.per_node, consts=c).ms for r in df.itertuples()])


def errors(df: pd.DataFrame, pred: np.ndarray) -> pd.DataFrame:
    out = df.copy()
    out["pred"] = pred
    out["rel_err"] = (out["pred"] - out["ms"]) / out["ms"]
    return out


def summarize(err: pd.DataFrame, what: str) -> list[dict]:
    """Per configuration: rows, mean and median absolute relative error, share within 10 %, all
    sizes and sizes >= 1 MiB (where bandwidth, not latency, decides)."""
    out = []
    for key, g in err.groupby(["folder", "op", "ranks", "per_node"]):
        a = g["rel_err"].abs()
        big = g[g["size"] >= 2**20]["rel_err"].abs()
        out.append({"experiment": what, "config": Config(*key).label(), "rows": int(len(g)),
                    "mean_abs_pct": round(100 * float(a.mean()), 1), "median_abs_pct": round(100 * float(a.median()), 1),
                    "within_10pct": round(float((a <= 0.10).mean()), 3),
                    "mean_abs_pct_ge_1MiB": round(100 * float(big.mean()), 1) if len(big) else None})
    return out


def validate(df: pd.DataFrame) -> list[dict]:
    """The held-out experiments: sizes, rank counts (intra: 4 GPUs; inter: 4 GPUs/node), node types."""
    held = split_sizes(df)
    table = []
    # 1. held-out sizes, every configuration, node types fitted on their own training sizes
    c = fit(df, held)
    table += summarize(errors(df[held], predict(df[held], c)), "held-out sizes")
    # 2. held-out rank count inside a node: DGX all-reduce on 4 GPUs, fitted on 2 and 8
    cfg4 = ("a100_dgx", "all_reduce", 4, 4)
    c = fit(df, drop=[cfg4])
    t = df[(df.folder == cfg4[0]) & (df.op == cfg4[1]) & (df.ranks == 4) & (df.per_node == 4)]
    table += summarize(errors(t, predict(t, c)), "held-out rank count")
    # 3. held-out rank count across nodes: 2 nodes x 4 GPUs, fitted on 2x1, 2x2, 2x8
    cfg84 = ("a100_dgx", "all_reduce", 8, 4)
    c = fit(df, drop=[cfg84])
    t = df[(df.folder == cfg84[0]) & (df.op == cfg84[1]) & (df.ranks == 8) & (df.per_node == 4)]
    table += summarize(errors(t, predict(t, c)), "held-out rank count")
    # 4. the other cross-node rank counts held out the same way (2x2, 2x8)
    for per in (2, 8):
        cfg = ("a100_dgx", "all_reduce", 2 * per, per)
        c = fit(df, drop=[cfg])
        t = df[(df.folder == cfg[0]) & (df.op == cfg[1]) & (df.ranks == cfg[2]) & (df.per_node == per)]
        table += summarize(errors(t, predict(t, c)), "held-out rank count")
    # 5. held-out node types: the A100 PCIe pairs and the A40 pairs, inside a node from the DGX fit and
    #    their spec sheets, across nodes from the other PCIe server's fit of the same network
    for folder, other in (("a100_pairwise_nvlink", "a40_pairwise_nvlink"), ("a40_pairwise_nvlink", "a100_pairwise_nvlink")):
        c = fit(df, node_overrides=False, network_folders=("a100_dgx", other))
        t = df[(df.folder == folder) & ~((df.op == "all_reduce") & (df.ranks == 4))]  # the pcie fit's own rows
        table += summarize(errors(t, predict(t, c, use_nodes=False)), "held-out node type")
    return table


def build(data: Path = DEFAULT_DATA) -> tuple[dict, list[dict]]:
    """The shipped constants (fitted on every row) and the held-out table."""
    df = load(data)
    table = validate(df)
    consts = fit(df)
    consts["format"] = "perfseer.collectives"
    consts["format_version"] = col.FORMAT_VERSION
    consts["source"] = SOURCE
    consts["fitted_by"] = "python -m perfseer.fit.collectives (perfseer.fit.collectives)"
    consts["network_rated"] = {net: f"{net}: {get_network(net).gbs} GB/s per NIC ({get_network(net).transport})"
                               for net in consts["networks"]}
    consts["held_out"] = table
    consts["notes"] = ("efficiency: fraction of the registry's link bandwidth (perfseer.devices.interconnect) "
                       "reached by NCCL; ring: all-reduce bus bandwidth (also used for all-gather, "
                       "reduce-scatter, all-to-all), p2p: send/recv; latency_ms: [a0, a1], a0 + a1 (GPUs per "
                       "node - 1); sqrt_ms: coefficient of sqrt(ms at full link rate); networks: per network, "
                       "by GPUs per node, efficiency per NIC driven (min(GPUs per node, NICs) NICs), latency "
                       "added to the intra-node one; an unmeasured GPU count per node uses the fewest measured; "
                       "an unmeasured network a measured one of the same transport; "
                       "nodes: measured node types' own fitted paths and network; fitted by least absolute "
                       "relative error")
    return consts, table


def _rounded(x):
    """Floats to 5 significant digits (a readable fact file; the fit is not that precise)."""
    if isinstance(x, float):
        return float(f"{x:.5g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfseer.fit.collectives", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--out", type=Path, default=col.FACTS)
    args = ap.parse_args(argv)
    consts, table = build(args.data)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_rounded(consts), indent=1) + "\n")
    for r in table:
        print(f"{r['experiment']:<20} {r['config']:<55} n={r['rows']:<4} mean {r['mean_abs_pct']:>6} % "
              f"median {r['median_abs_pct']:>6} % within10 {r['within_10pct']:.2f} >=1MiB {r['mean_abs_pct_ge_1MiB']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
