"""Where one training epoch's time goes: forward/backward, validation, batch collation, scaling.

Trains the bundled RTX 3090 inference recipe (SeerNet, hidden 64, 32 graphs per step, 1 thread) for
``--epochs`` epochs on the timm train split under ``cProfile`` and prints the seconds per epoch and
the cumulative time of the trainer's parts (docs/trust.md, "Cost of an epoch").

    OMP_NUM_THREADS=1 python benchmarks/epoch_profile.py [--epochs 2]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time


def main(argv=None) -> None:
    import torch

    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.models.registry import build_model
    from perfseer.fit.data import select
    from perfseer.fit.trainer import TrainConfig, train

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sel = select(load_dataset(resolve_dataset("timm")), ["latency_ms"], ["rtx3090/amp-nchw-pt240"], "infer", "split")
    nodes = [g.num_nodes for g in sel.train]
    print(f"{len(sel.train)} training graphs, {sum(nodes) / len(nodes):.0f} nodes on average; {len(sel.val)} validation")
    torch.manual_seed(0)
    model = build_model("seernet", num_targets=1, hidden_dim=64)
    cfg = TrainConfig(max_epochs=args.epochs, progress=False, num_threads=1, batch_size=32, early_stopping_patience=None)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    result = train(model, sel.train, sel.val, cfg, targets=sel.targets)
    prof.disable()
    print(f"{time.perf_counter() - t0:.1f} s in all; per epoch {[h['seconds'] for h in result.history]} s")
    stats = pstats.Stats(prof)
    parts = {"backward": "run_backward", "model forward": "seernet.py.*forward", "validation loss": "evaluate_loss",
             "final predictions": "predict_scaled", "collation": "from_data_list", "feature scaling": r"scaling.py:\d+\(transform\)"}
    for name, pattern in parts.items():
        print(f"--- {name}")
        stats.sort_stats("cumulative").print_stats(pattern, 1)


if __name__ == "__main__":
    main()
