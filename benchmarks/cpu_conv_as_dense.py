"""A convolution whose kernel covers its whole input (VGG's classifier as timm builds it) against
the same product as ``nn.Linear``, on this machine's CPU: median ms over repetitions.

On the Core i9 rows of the timm data VGG11 takes 108 ms and VGG19 122 ms for 7.6 and 19.6 GFLOPs;
the predictors, which have seen no such layer, put VGG at a third of that.  This times the layer
that makes the difference (single thread by default)::

    python benchmarks/cpu_conv_as_dense.py [--threads 1] [--reps 7]
"""

from __future__ import annotations

import argparse
import statistics
import timeit

CASES = [  # (in channels, out channels, kernel, input size)
    (512, 4096, 7, 7), (512, 1024, 7, 7), (512, 512, 3, 3), (2048, 2048, 1, 1), (512, 512, 3, 14),
]


def median_ms(fn, reps: int) -> float:
    import torch

    with torch.inference_mode():
        fn()  # warm-up: weight reorders, allocator
        return 1e3 * statistics.median(timeit.repeat(fn, number=1, repeat=reps))


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s)")
    print(f"{'conv (in -> out, kernel, input)':34s} {'weights MB':>10s} {'conv ms':>9s} {'linear ms':>9s} {'ratio':>6s}")
    for cin, cout, k, hw in CASES:
        conv = torch.nn.Conv2d(cin, cout, k).eval()
        x = torch.randn(1, cin, hw, hw)
        out = hw - k + 1
        lin = torch.nn.Linear(cin * k * k, cout).eval()
        cols = torch.randn(out * out, cin * k * k)  # the same GEMM: one row per output position
        c, m = median_ms(lambda: conv(x), args.reps), median_ms(lambda: lin(cols), args.reps)
        print(f"{f'{cin} -> {cout}, {k}x{k}, {hw}x{hw}':34s} {4 * cin * cout * k * k / 1e6:10.1f} {c:9.2f} {m:9.2f} "
              f"{c / m:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
