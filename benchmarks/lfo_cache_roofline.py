"""Leave-families-out with a cache-aware roofline: does a node whose bytes fit in the last-level
cache move them faster than one that spills to DRAM?  (docs/generalisation.md, "Round 11".)

The hypothesis came from the i9 blend's errors on EfficientNet: under-predicted more the larger
the network (ratio 0.85 at B0, 0.55-0.6 at B8 / L2, whose activations at 600-800 px are tens of
MB, above the i9-10940X's 19.25 MiB cache).  The test: every node's memory traffic ``B`` is
replaced by its DRAM-equivalent bytes

    B' = min(B, C) / kappa + max(B - C, 0)

(``C`` the cache, ``kappa`` how much faster the cache serves bytes than DRAM) before any roofline
method sees it, and the leave-families-out benchmark runs as usual:

    python benchmarks/lfo_cache_roofline.py --kappa 4 --cache-mib 19.25 --settings timm-i9 \\
        --methods 'roofline[device=i9-10940x;precision=fp32;fit=groups]' --data-root DIR --json OUT

Every other argument is :mod:`leave_families_out`'s; ``--kappa 1`` is the plain benchmark.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def cache_bytes(B, cache_bytes: float, kappa: float):
    """DRAM-equivalent bytes of node traffic ``B`` (array): the part within ``cache_bytes`` counts
    ``1 / kappa``."""
    import numpy as np

    B = np.asarray(B, dtype=np.float64)
    return np.minimum(B, cache_bytes) / kappa + np.maximum(B - cache_bytes, 0.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--kappa", type=float, default=1.0, help="cache speed-up over DRAM (default 1: no change)")
    ap.add_argument("--cache-mib", type=float, default=19.25, help="cache size, MiB (default: the i9-10940X's L3)")
    ours, rest = ap.parse_known_args(argv)
    if not ours.kappa > 0 or not ours.cache_mib > 0:
        ap.error("--kappa and --cache-mib must be > 0")
    import perfseer.models.roofline as roofline

    plain = roofline.node_costs
    C = ours.cache_mib * 2**20

    def node_costs(graph):
        F, B = plain(graph)
        return F, cache_bytes(B, C, ours.kappa)

    import leave_families_out

    if ours.kappa == 1.0:
        return leave_families_out.main(rest)
    roofline.node_costs = node_costs
    try:
        return leave_families_out.main(rest)
    finally:
        roofline.node_costs = plain


if __name__ == "__main__":
    import _training_bench as tb

    tb.run_main(main)
