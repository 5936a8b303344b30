"""A fixed sample of the seeded fuzz corpus (``benchmarks/lib/fuzz_api.py``) through what users
call, ``perfseer.predict`` (auto and ``basis="spec"``) and ``perfseer.memory``, in a worker limited
to 3 GB of address space and 30 s per call: no traceback, crash, hang, memory over the limit,
absurd answer or read of an external-data file.  The whole corpus (1,600 files) runs in the
benchmark (``python -m benchmarks run fuzz``)."""

from __future__ import annotations

from collections import Counter

from benchmarks.lib import fuzz_api, fuzz_corpus

COUNT = 1600  # the benchmark's corpus (benchmarks/configs/fuzz.json)
SAMPLE = 200  # the 15 unmutated new seeds, then every 8th mutant: well under a minute on 2 busy cores


def _sample() -> list[tuple[str, bytes]]:
    corpus = fuzz_api.generate(COUNT, seed=0)
    fresh = [c for c in corpus if "-none-" in c[0]]
    rest = [c for c in corpus if "-none-" not in c[0]]
    return fresh + rest[::len(rest) // (SAMPLE - len(fresh))][:SAMPLE - len(fresh)]


def test_corpus_is_seeded_and_covers_the_seed_kinds():
    a, b = fuzz_api.generate(COUNT, seed=0), fuzz_api.generate(COUNT, seed=0)
    assert len(a) == COUNT and a == b
    seeds = Counter(fuzz_api.seed_of(n) for n, _ in a)
    for kind in ("func_valid", "func_recursive", "func_wrong_arity", "func_deep_chain", "func_fanout", "cf_if",
                 "cf_loop", "cf_scan", "q_qdq", "q_qlinearconv", "q_dynamic", "external_data", "opset7", "opset23",
                 "fp16"):
        assert seeds[f"api_{kind}"] >= 20, (kind, seeds[f"api_{kind}"])  # each new seed mutated often
    mutations = {n.split("-")[1].split("+")[0] for n, _ in a}
    assert {"byte_flip", "truncate", "cycle", "dangling", "constant_blowup", "none"} <= mutations
    assert fuzz_corpus.generate(100, seed=0) == fuzz_corpus.generate(100, seed=0)


def test_fuzz_sample_through_predict_and_memory():
    sample = _sample()
    assert len(sample) == SAMPLE
    results = fuzz_api.run_cases(sample)
    bad, _expected = fuzz_api.failures(results)
    assert not bad, [(r["outcome"], r["entry"], r["name"], r.get("detail", "")) for r in bad[:10]]
    s = fuzz_api.summarise(results)
    assert set(s) == {*fuzz_api.ENTRY_POINTS, "all"}
    for entry in fuzz_api.ENTRY_POINTS:
        c = s[entry]
        assert c["cases"] == SAMPLE and c["refusal"] + c["answer"] == SAMPLE, (entry, c)
        assert c["answer"] >= 20 and c["refusal"] >= 50, (entry, c)  # both ends exercised
        assert c["refusals_specific"] >= 0.9 * c["refusal"], (entry, c)
    # the unmutated seeds: valid ones answer, the unsupported ones are refused with their cause
    fresh = {(r["seed"], r["entry"]): r for r in results if "-none-" in r["name"]}
    for seed in ("api_func_valid", "api_q_qdq", "api_q_qlinearconv", "api_q_dynamic", "api_fp16", "api_opset23",
                 "api_opset7", "api_external_data"):
        assert all(fresh[seed, e]["outcome"] == "answer" for e in fuzz_api.ENTRY_POINTS), seed
    for seed in ("api_func_recursive", "api_func_wrong_arity", "api_func_deep_chain", "api_func_fanout", "api_cf_if",
                 "api_cf_loop", "api_cf_scan"):
        assert all(fresh[seed, e]["outcome"] == "refusal" and fresh[seed, e]["specific"]
                   for e in fuzz_api.ENTRY_POINTS), seed


def test_the_classification_of_predict_rows():
    def row(v, flags=(), reason=None, b=1):
        return {"metric": "latency_ms", "batch_size": b, "value": v, "flags": list(flags), "reason": reason}

    ok = fuzz_api._classify_rows([row(2.5), row(7.0, b=8)])
    assert ok["outcome"] == "answer" and ok["value"] == 2.5
    for bad in ([row(0.0)], [row(float("nan"))], [row(float("inf"))], [row(-1.0)], [row(5e-4)], [row(2e6)],
                [row(3.0, ["above the sanity ceiling of a100 (9 ms)"])], [row(2.0), row(0.0, b=8)], []):
        assert fuzz_api._classify_rows(bad)["outcome"] == "absurd", bad
    refused = fuzz_api._classify_rows([row(None, reason="the spec model gave a value above the ceiling")])
    assert refused["outcome"] == "refusal" and refused["specific"]
    generic = fuzz_api._classify_rows([row(None, reason="the shape of 'x' cannot be determined")])
    assert generic["outcome"] == "refusal" and not generic["specific"]
    assert fuzz_api._classify_rows([row(1.0), row(None, reason="r", b=8)])["outcome"] == "answer"


def test_the_external_data_watch_sees_a_read_by_onnx(tmp_path):
    """The control: ``onnx.load`` reads external data in C++, which the watch must see (perfseer must not)."""
    import onnx

    (tmp_path / fuzz_api.EXTERNAL_SENTINEL).write_bytes(bytes(2048 * 10 * 4))
    path = tmp_path / "m.onnx"
    path.write_bytes(fuzz_api.new_seeds()["external_data"].SerializeToString())
    watch = fuzz_api.ExternalWatch()
    watch.watch(tmp_path / fuzz_api.EXTERNAL_SENTINEL)
    assert not watch.opened()
    onnx.load(str(path), load_external_data=False)
    assert not watch.opened()
    onnx.load(str(path))
    assert watch.opened()
