"""Serving a stream of requests with continuous batching, as vLLM 0.4-0.6 schedules it.

:func:`simulate` replays requests (``rate`` per second, Poisson, or ``concurrency`` clients each
sending its next request when the last one finishes) through the scheduler of vLLM's v1 block
manager:

- a step is either a *prefill step* (waiting requests admitted in arrival order while the running
  batch stays under ``max_num_seqs``, the step under ``max_num_batched_tokens`` tokens and the KV
  cache keeps a 1 % watermark of free blocks) or a *decode step* of every running sequence;
  prefills go first (vLLM's default);
- with ``chunked_prefill``, every step decodes the running sequences and fills the rest of its
  token budget (default 512) with prefill chunks (vLLM's ``--enable-chunked-prefill``);
- the KV cache is ``kv_blocks`` blocks of 16 tokens (vLLM's sizing, :meth:`Engine.memory`); a
  decode step that needs a block when none is free preempts the latest-admitted sequence, whose
  blocks are freed and whose prompt and output so far are prefilled again later (recompute);
- each step takes the time of its operators (:class:`~perfseer.llm.predict.Engine`) plus vLLM's
  per-step overhead.

Outputs (:class:`ServingResult`): throughput, TTFT / TPOT / end-to-end percentiles, GPU busy
share, mean running batch and KV-cache use, preemptions.  1,000 requests take well under a second.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from perfseer.llm import cost
from perfseer.llm.lengths import parse_lengths
from perfseer.llm.predict import Engine, LLMInputError, engine_overhead_us
from perfseer.llm.timing import op_time_us

MAX_REQUESTS = 100_000


@dataclass
class _Req:
    i: int
    arrival: float
    prompt: int
    out: int
    generated: int = 0
    prefilled: int = 0  # tokens of (prompt + generated) whose KV is in the cache
    blocks: int = 0
    first: float = -1.0
    finish: float = -1.0
    admitted: int = 0
    first_step: int = -1
    last_step: int = -1


@dataclass
class ServingResult:
    """What :func:`simulate` answers; ``to_dict`` gives the JSON.  Times in ms, throughput per s."""

    requests: int
    duration_s: float
    output_tokens_per_s: float
    requests_per_s: float
    ttft_ms: dict
    tpot_ms: dict
    e2e_ms: dict
    gpu_busy: float
    mean_running_batch: float
    mean_kv_use: float
    preemptions: int
    steps: int
    inputs: dict
    notes: list = field(default_factory=list)
    trace: dict | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d.pop("trace", None)
        return d


def _pct(x: np.ndarray) -> dict:
    if not len(x):
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    return {"mean": float(x.mean()), "p50": float(np.percentile(x, 50)), "p90": float(np.percentile(x, 90)),
            "p99": float(np.percentile(x, 99))}


class _StepTimer:
    """Step kernel time with the non-attention operators cached by what they depend on."""

    def __init__(self, eng: Engine):
        self.eng = eng
        self.cache: dict = {}

    def __call__(self, s: cost.StepShape) -> float:
        e = self.eng
        key = (s.tokens, s.seqs, s.dc_seqs, int(s.pf_ctx) if e.cfg.mla else 0)
        base = self.cache.get(key)
        if base is None:
            base = self.cache[key] = sum(op_time_us(o, e.dev, e.consts, e.collective) * o.count
                                         for o in cost.step_ops(e.cfg, e.q, s, e.tp) if not o.kind.startswith("attn"))
        return base + sum(op_time_us(o, e.dev, e.consts) * o.count for o in cost.attention_ops(e.cfg, e.q, s, e.tp))


def simulate(model, device: str, prompt_len="512", output_len="128", rate: float | None = None,
             concurrency: int | None = None, requests: int = 1000, gpus: int = 1, precision: str = "bf16",
             weights_only: bool | None = None, group_size: int | None = None, kv_precision: str | None = None,
             max_num_seqs: int = 256, max_num_batched_tokens: int | None = None, chunked_prefill: bool = False,
             max_model_len: int | None = None, engine: str = "vllm", seed: int = 0, keep_trace: bool = False,
             node: str | None = None, eng: Engine | None = None) -> ServingResult:
    """Simulate serving ``requests`` requests (see the module doc).

    Args:
        prompt_len, output_len: a number, ``MEAN:SD`` or a histogram file (:mod:`perfseer.llm.lengths`).
        rate: requests per second (Poisson arrivals); or ``concurrency``: clients in a closed loop
            (``concurrency >= requests``: all requests arrive at once).  One of the two.
        max_num_seqs, max_num_batched_tokens, chunked_prefill, max_model_len: vLLM's scheduler
            settings (defaults as vLLM's: 256; ``max(max_model_len, 2048)``, 512 with chunked prefill).
        seed: the random draws of lengths and arrivals.
        keep_trace: keep each step's sequences, tokens and kernel time (for fitting).

    Raises:
        LLMInputError: neither or both of rate and concurrency, a request longer than the model's
            context or than the KV cache, bad numbers.
    """
    if (rate is None) == (concurrency is None):
        raise LLMInputError("give either a request rate or a concurrency", "pass --rate R (requests/s) or "
                            "--concurrency C (clients)")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate)
                             or not 0 < rate <= 1e6):
        raise LLMInputError(f"rate must be a positive number of requests per second, got {rate!r}", "e.g. --rate 4")
    for name, v, hi in (("concurrency", concurrency, MAX_REQUESTS), ("requests", requests, MAX_REQUESTS),
                        ("max_num_seqs", max_num_seqs, 1 << 16)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi):
            raise LLMInputError(f"{name} must be a whole number from 1 to {hi:,}, got {v!r}", f"fix {name}")
    pl, ol = parse_lengths(prompt_len, "prompt length"), parse_lengths(output_len, "output length")
    eng = eng or Engine(model, device, gpus, precision, weights_only, group_size, kv_precision, engine, node)
    cfg = eng.cfg
    mml = int(max_model_len or cfg.max_context)
    if mml > cfg.max_context:
        raise LLMInputError(f"max model length {mml:,} is beyond {cfg.name}'s {cfg.max_context:,}",
                            f"use at most {cfg.max_context:,}")
    if pl.max + ol.max > mml:
        raise LLMInputError(f"the longest request ({pl.max:,} + {ol.max:,} tokens) is longer than the maximum model "
                            f"length {mml:,}", "shorten the lengths or raise max_model_len (up to the model's maximum)")
    mem = eng.memory(mml)
    total_blocks = mem["kv_blocks"]
    if total_blocks <= 0:
        raise LLMInputError(f"{cfg.name} leaves no KV cache on {eng.tp} x {eng.spec.name}",
                            "use more GPUs, a smaller precision or a smaller max model length")
    bs = mem["block_size"]
    budget = max_num_batched_tokens or (512 if chunked_prefill else max(mml, 2048))
    if not chunked_prefill and budget < mml:
        raise LLMInputError(f"max_num_batched_tokens {budget:,} is below the max model length {mml:,}",
                            "raise it or enable chunked prefill (as vLLM requires)")
    if math.ceil((pl.max + ol.max) / bs) > total_blocks:
        raise LLMInputError(f"one request of {pl.max + ol.max:,} tokens needs more than the {total_blocks:,} KV blocks "
                            f"on each GPU", "shorten the lengths, use more GPUs or --kv-precision fp8")
    rng = np.random.default_rng(seed)
    n = requests
    prompts, outs = pl.sample(n, rng), ol.sample(n, rng)
    if rate is not None:
        arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    else:
        arrivals = np.zeros(n)
    reqs = [_Req(i, float(arrivals[i]), int(prompts[i]), int(outs[i])) for i in range(n)]
    closed = concurrency is not None and concurrency < n
    pending = deque(reqs[:concurrency] if closed else reqs)
    later = deque(reqs[concurrency:]) if closed else deque()
    waiting: deque = deque()
    running: list = []
    free = total_blocks
    watermark = max(int(0.01 * total_blocks), 1)
    timer = _StepTimer(eng)
    now, step_i, busy, preempt, admitted = 0.0, 0, 0.0, 0, 0
    batch_acc, kv_acc, done = 0.0, 0.0, 0
    resort = False
    tr_seqs, tr_tokens, tr_kern = [], [], []

    def retire(finished: list, at: float) -> None:
        """Finished requests leave the running batch and free their KV blocks; with a fixed
        concurrency, each one's client sends its next request at ``at``."""
        nonlocal free, done
        if finished:
            gone = {id(r) for r in finished}
            running[:] = [r for r in running if id(r) not in gone]
        for r in finished:
            free += r.blocks
            r.blocks = 0
            done += 1
            if closed and later:
                nxt = later.popleft()
                nxt.arrival = at
                pending.append(nxt)

    while done < n:
        while pending and pending[0].arrival <= now:
            waiting.append(pending.popleft())
        if not running and not waiting:
            now = pending[0].arrival
            continue
        parts, new_tokens_for, prefill_reqs = [], [], []
        step_tokens = 0

        def grow_for_decode(parts=parts, new_tokens_for=new_tokens_for):
            """Give every decoding sequence the block its next token needs, preempting the latest
            admitted ones (recompute) while the cache is short."""
            nonlocal free, preempt, resort
            if resort:
                running.sort(key=lambda r: r.admitted)
                resort = False
            dec = [r for r in running if r.generated > 0]
            short = sum(1 for r in dec if math.ceil((r.prefilled + 1) / bs) > r.blocks)
            while short > free and running:
                victim = running.pop()
                if victim.generated > 0 and math.ceil((victim.prefilled + 1) / bs) > victim.blocks:
                    short -= 1
                free += victim.blocks
                victim.blocks, victim.prefilled = 0, 0
                waiting.appendleft(victim)
                preempt += 1
            for r in running:
                if r.generated > 0:
                    if math.ceil((r.prefilled + 1) / bs) > r.blocks:
                        r.blocks += 1
                        free -= 1
                    parts.append((1, r.prefilled))
                    new_tokens_for.append((r, 1))

        def admit(chunk: bool, parts=parts, new_tokens_for=new_tokens_for, prefill_reqs=prefill_reqs):
            """Prefill (chunks of) waiting requests while the batch, the budget and the cache allow."""
            nonlocal free, step_tokens, admitted, resort
            queue = [r for r in running if r.generated == 0 and r.prefilled < r.prompt] if chunk else []
            while True:
                from_wait = not queue
                if from_wait and (not waiting or len(running) + len(prefill_reqs) >= max_num_seqs):
                    break
                r = queue[0] if queue else waiting[0]
                need = r.prompt + r.generated - r.prefilled
                take = min(need, budget - step_tokens) if chunk else need
                if take <= 0 or (not chunk and step_tokens + need > budget and prefill_reqs):
                    break
                blocks_after = math.ceil((r.prefilled + take) / bs)
                grow = blocks_after - r.blocks
                if free - grow < watermark:
                    break
                (waiting.popleft() if from_wait else queue.pop(0))
                free -= grow
                r.blocks = blocks_after
                if r.admitted == 0:
                    admitted += 1
                    r.admitted = admitted
                parts.append((take, r.prefilled))
                new_tokens_for.append((r, take))
                if from_wait:
                    prefill_reqs.append(r)
                    if r.admitted < admitted:
                        resort = True  # a preempted request comes back: keep admission order
                step_tokens += take
                if take < need:
                    break

        if chunked_prefill:
            grow_for_decode()
            step_tokens = len(parts)
            admit(True)
        else:
            if waiting:
                admit(False)
            if not prefill_reqs:
                grow_for_decode()
        if not parts:
            r = waiting[0]
            raise LLMInputError(f"a request of {r.prompt + r.generated:,} tokens cannot be admitted with "
                                f"{total_blocks:,} KV blocks", "shorten the lengths or use more GPUs")
        if running and not prefill_reqs and len(new_tokens_for) == len(running) \
                and all(k == 1 and r.generated > 0 for r, k in new_tokens_for):
            # a pure decode step: nothing can change the batch before the next finish, arrival or
            # block shortage, so run the k decode steps up to it at once (the context grows by one
            # a step; step time is interpolated between the first and the k-th)
            dec = [r for r, _ in new_tokens_for]
            ctx0 = np.fromiter((r.prefilled for r in dec), float, len(dec))
            blocks = np.fromiter((r.blocks for r in dec), float, len(dec))
            remaining = np.fromiter((r.out - r.generated for r in dec), float, len(dec))
            kmax = int(remaining.min())

            def extra(k, ctx0=ctx0, blocks=blocks):
                return float(np.maximum(np.ceil((ctx0 + k) / bs) - blocks, 0).sum())

            lo, hi = 1, max(kmax, 1)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if extra(mid) <= free:
                    lo = mid
                else:
                    hi = mid - 1
            k = lo
            sh1 = cost.StepShape.of(parts, cfg.sliding_window)
            t1 = timer(sh1) + engine_overhead_us(eng.engine, sh1.seqs, sh1.tokens, eng.tp)
            if k > 1:
                shk = cost.StepShape.of([(1, p + k - 1) for _, p in parts], cfg.sliding_window)
                tk = timer(shk) + engine_overhead_us(eng.engine, shk.seqs, shk.tokens, eng.tp)
                dts = np.linspace(t1, tk, k) / 1e6
            else:
                dts = np.array([t1 / 1e6])
            cum = now + np.cumsum(dts)
            if pending and rate is not None:
                k = min(k, int(np.searchsorted(cum, pending[0].arrival)) + 1)
                dts, cum = dts[:k], cum[:k]
            if keep_trace:
                over = engine_overhead_us(eng.engine, sh1.seqs, sh1.tokens, eng.tp)
                tr_seqs.extend([sh1.seqs] * k)
                tr_tokens.extend([sh1.tokens] * k)
                tr_kern.extend(list(dts * 1e6 - over))
            free -= int(extra(k))
            span_k = float(dts.sum())
            batch_acc += len(running) * span_k
            kv_acc += (total_blocks - free) / total_blocks * span_k
            busy += span_k
            finished = []
            for r, c0, b0 in zip(dec, ctx0, blocks):
                r.prefilled += k
                r.generated += k
                r.blocks = int(max(b0, math.ceil((c0 + k) / bs)))
                if r.generated >= r.out:
                    r.finish, r.last_step = float(cum[k - 1]), step_i + k - 1
                    finished.append(r)
            now = float(cum[k - 1])
            step_i += k
            retire(finished, now)
            continue
        shape = cost.StepShape.of(parts, cfg.sliding_window)
        kern = timer(shape)
        dt = (kern + engine_overhead_us(eng.engine, shape.seqs, shape.tokens, eng.tp)) / 1e6
        if keep_trace:
            tr_seqs.append(shape.seqs)
            tr_tokens.append(shape.tokens)
            tr_kern.append(kern)
        batch_acc += len(running) * dt
        kv_acc += (total_blocks - free) / total_blocks * dt
        now += dt
        busy += dt
        running.extend(prefill_reqs)
        finished = []
        for r, k in new_tokens_for:
            r.prefilled += k
            if r.prefilled >= r.prompt + r.generated:  # its whole context is in: it samples a token
                r.generated += 1
                if r.first < 0:
                    r.first, r.first_step = now, step_i
                if r.generated >= r.out:
                    r.finish, r.last_step = now, step_i
                    finished.append(r)
        retire(finished, now)
        step_i += 1
        if step_i > 50_000_000:
            raise LLMInputError("the simulation did not finish", "report this as a bug")
    ttft = np.array([(r.first - r.arrival) * 1000 for r in reqs])
    tpot = np.array([(r.finish - r.first) * 1000 / (r.generated - 1) for r in reqs if r.generated > 1])
    e2e = np.array([(r.finish - r.arrival) * 1000 for r in reqs])
    start = float(min(r.arrival for r in reqs))
    span = max(now - start, 1e-9)
    out_tok = float(sum(r.out for r in reqs))
    notes = []
    if preempt:
        notes.append(f"{preempt} preemptions (recomputed): the KV cache was full")
    inputs = {"model": cfg.name, "device": eng.spec.name, "gpus": eng.tp, "precision": eng.q.precision,
              "kv_precision": eng.q.kv, "prompt_len": pl.text or str(pl.mean), "output_len": ol.text or str(ol.mean),
              "mean_prompt_len": float(prompts.mean()), "mean_output_len": float(outs.mean()),
              "rate": rate, "concurrency": concurrency, "requests": n, "max_num_seqs": max_num_seqs,
              "max_num_batched_tokens": budget, "chunked_prefill": chunked_prefill, "engine": eng.engine,
              "kv_blocks": total_blocks, "block_size": bs, "max_model_len": mml, "seed": seed}
    trace = None
    if keep_trace:
        trace = {"seqs": np.asarray(tr_seqs), "tokens": np.asarray(tr_tokens), "kernel_us": np.asarray(tr_kern),
                 "first_step": np.array([r.first_step for r in reqs]), "last_step": np.array([r.last_step for r in reqs]),
                 "generated": np.array([r.generated for r in reqs])}
    return ServingResult(
        requests=n, duration_s=span, output_tokens_per_s=out_tok / span, requests_per_s=n / span,
        ttft_ms=_pct(ttft), tpot_ms=_pct(tpot), e2e_ms=_pct(e2e), gpu_busy=busy / span,
        mean_running_batch=batch_acc / max(busy, 1e-12), mean_kv_use=kv_acc / max(busy, 1e-12), preemptions=preempt,
        steps=step_i, inputs=inputs, notes=notes, trace=trace)
