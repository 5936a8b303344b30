"""A fully connected layer written as a convolution, on this machine's CPU (docs/generalisation.md,
"Round 10"): timm's VGG ``pre_logits`` is a 7x7 convolution of 512 -> 4096 channels on a 7x7 input,
the same product as ``Linear(25088, 4096)``.  Prints the minimum of ``--repeats`` timed calls of
each (after one warm-up), eager PyTorch, batch 1, ``--threads`` threads.

    python benchmarks/conv_as_linear.py [--threads 1] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time


def best_ms(fn, x, repeats: int) -> float:
    import torch

    with torch.no_grad():
        fn(x)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - t)
    return min(times) * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    cases = [
        ("Conv2d(512, 4096, 7) on 1x512x7x7 (VGG pre_logits)", torch.nn.Conv2d(512, 4096, 7), (1, 512, 7, 7)),
        ("Linear(25088, 4096) on 1x25088 (the same product)", torch.nn.Linear(25088, 4096), (1, 25088)),
        ("Conv2d(4096, 4096, 1) on 1x4096x1x1", torch.nn.Conv2d(4096, 4096, 1), (1, 4096, 1, 1)),
        ("Linear(4096, 4096) on 1x4096", torch.nn.Linear(4096, 4096), (1, 4096)),
    ]
    print(f"torch {torch.__version__}, {args.threads} thread(s), minimum of {args.repeats} calls")
    print(f"{'layer':55s} {'weights MB':>10s} {'ms':>9s}")
    for name, module, shape in cases:
        module.eval()
        mb = sum(p.numel() for p in module.parameters()) * 4 / 1e6
        print(f"{name:55s} {mb:10.1f} {best_ms(module, torch.randn(*shape), args.repeats):9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
