"""A fixed sample of the seeded fuzz corpus (``benchmarks/lib/fuzz_corpus.py``) through extraction and
prediction, in a worker limited to 2 GB of address space and 30 s per file: no uncaught exception,
abort, hang, memory over the limit, or non-finite / absurd prediction returned as a success.
The whole corpus (1,200 files) runs in the benchmark."""

from __future__ import annotations

import sys
from pathlib import Path


from benchmarks.lib import fuzz_corpus  # noqa: E402

SAMPLE = 300  # every 4th of the benchmark's 1,200 mutants of seed 0: about a minute on 2 cores


def test_corpus_is_seeded_and_large_enough():
    a, b = fuzz_corpus.generate(1200, seed=0), fuzz_corpus.generate(1200, seed=0)
    assert len(a) == 1200 and a == b
    kinds = {name.split("-")[1].split("+")[0] for name, _ in a}
    assert {"byte_flip", "truncate", "cycle", "dangling", "range_blowup", "constant_blowup", "sequence_edit",
                     "opset"} <= kinds


def test_fuzz_sample_fails_cleanly():
    sample = fuzz_corpus.generate(1200, seed=0)[::1200 // SAMPLE]
    results = fuzz_corpus.run_corpus(sample)
    summary = fuzz_corpus.summarise(results)
    bad = [(r["outcome"], r["name"], r.get("detail", "")) for r in results if r["outcome"] in fuzz_corpus.FAILURES]
    assert not bad, bad[:10]
    assert summary["files"] == SAMPLE and summary["ok"] + summary["error"] == SAMPLE
    assert summary["specific_share"] >= 0.9, summary
