"""One LLM request batch on a GPU: time to first token, time per output token, KV-cache capacity.

:func:`llm` answers ``batch`` sequences of ``prompt_len`` tokens each generating ``output_len``
tokens together (static batching: one prefill step, then ``output_len - 1`` decode steps at
contexts ``prompt_len + 1 .. prompt_len + output_len - 1``), on ``gpus`` GPUs in tensor parallel.
Every step is the sum of its operators' times (:mod:`perfseer.llm.cost`, :mod:`perfseer.llm.timing`)
plus, with ``engine="vllm"``, the serving engine's per-step overhead fitted on ML.ENERGY's vLLM
runs (``data/engine.json``).

Memory follows vLLM's rule: the KV cache gets ``gpu_memory_utilization x memory - weights -
activation peak of the profiling run`` in blocks of ``block_size`` tokens; the profiling run
is one forward step of ``max_num_batched_tokens = max(max_model_len, 2048)`` tokens over
``max_num_seqs`` (256) sequences (vLLM 0.4-0.6 without chunked prefill).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from perfseer.devices import get_device
from perfseer.errors import PerfseerError
from perfseer.llm import cost
from perfseer.llm.config import ModelConfig, load_config
from perfseer.llm.precision import Quant, make_quant
from perfseer.llm.timing import device_terms, load_constants, ops_time_us

ENGINE = Path(__file__).resolve().parent / "data" / "engine.json"
ENGINES = ("vllm", "none")
MAX_BATCH = 1 << 16
MAX_TOKENS = 1 << 24
GIB = 1024 ** 3


class LLMInputError(PerfseerError):
    """A request that cannot be answered: bad lengths, a context beyond the model's, a batch whose
    KV cache does not fit, tensor parallel the model cannot split over."""


@lru_cache(maxsize=2)
def engine_constants(path: str | None = None) -> dict:
    return json.loads(Path(path or ENGINE).read_text())


def engine_overhead_us(engine: str, seqs: int, tokens: int, gpus: int = 1) -> float:
    """The serving engine's time per step beside the GPU kernels (scheduling, sampling, detokenising,
    Python, sending the step to the other tensor-parallel workers), microseconds:
    ``a + b x sequences + d x (gpus - 1)`` as fitted for ``engine``."""
    if engine == "none":
        return 0.0
    c = engine_constants()["vllm"]
    return c["a_us"] + c["b_us_per_seq"] * seqs + c["d_us_per_extra_gpu"] * (gpus - 1)


def _positive_int(v, name: str, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise LLMInputError(f"{name} must be a whole number, got {v!r}", f"pass {name} as an integer >= 1")
    if v < 1 or v > hi:
        raise LLMInputError(f"{name} must be between 1 and {hi:,}, got {v:,}", f"pass a {name} in that range")
    return v


@dataclass
class Collective:
    """The all-reduce / all-gather time of a tensor-parallel group (from :mod:`perfseer.parallel`)."""

    tp: int
    gpu: str
    node: str | None = None

    def __call__(self, kind: str, nbytes: float) -> float:
        from perfseer.parallel.collectives import collective_time_ms

        op = "all_reduce" if kind == "allreduce" else "all_gather"
        return collective_time_ms(op, nbytes, self.tp, gpu=self.gpu, node=self.node) * 1000.0


class Engine:
    """A model on a device at a precision: step times and memory.  Built once, asked many times
    (the serving simulator calls :meth:`step_us` for every step)."""

    def __init__(self, model, device: str, gpus: int = 1, precision: str = "bf16", weights_only: bool | None = None,
                 group_size: int | None = None, kv_precision: str | None = None, engine: str = "vllm",
                 node: str | None = None):
        self.cfg: ModelConfig = load_config(model)
        self.spec = get_device(device)
        if self.spec.kind != "gpu":
            raise LLMInputError(f"{self.spec.name} is a CPU", "perfseer llm answers for GPUs: pick one of "
                                "'perfseer devices --kind gpu'")
        self.tp = _positive_int(gpus, "gpus", 64)
        if self.cfg.heads % self.tp:
            raise LLMInputError(f"{self.cfg.name} has {self.cfg.heads} attention heads, which {self.tp} GPUs cannot "
                                "split evenly", "use a number of GPUs that divides the head count")
        if not self.spec.memory_gib:
            raise LLMInputError(f"{self.spec.name}'s spec sheet gives no memory size",
                                "add memory_gib to its spec file (perfseer devices --add FILE)")
        if engine not in ENGINES:
            raise LLMInputError(f"unknown engine {engine!r}", f"use one of {', '.join(ENGINES)}")
        self.engine = engine
        self.q: Quant = make_quant(precision, weights_only, group_size, kv_precision, self.spec.peak_tflops)
        self.dev = device_terms(self.spec, self.q.compute)
        self.consts = load_constants()
        self.collective = Collective(self.tp, self.spec.name, node) if self.tp > 1 else None
        if self.collective is not None:
            self.collective("allreduce", 1024.0)  # an unknown GPU/node is refused here, not mid-answer

    # -- time --------------------------------------------------------------------------------
    def step(self, shape: cost.StepShape) -> list[tuple[cost.Op, float]]:
        return ops_time_us(cost.step_ops(self.cfg, self.q, shape, self.tp), self.dev, self.consts, self.collective)

    def step_us(self, shape: cost.StepShape) -> float:
        """One step's time (kernels + engine overhead), microseconds."""
        kern = sum(t * o.count for o, t in self.step(shape))
        return kern + engine_overhead_us(self.engine, shape.seqs, shape.tokens, self.tp)

    def breakdown(self, shape: cost.StepShape) -> list[dict]:
        rows = [{"op": o.name, "kind": o.kind, "count": o.count, "ms": t * o.count / 1000.0,
                 "gflops": o.flops * o.count / 1e9, "mbytes": o.bytes * o.count / 1e6} for o, t in self.step(shape)]
        eng = engine_overhead_us(self.engine, shape.seqs, shape.tokens, self.tp)
        if eng:
            rows.append({"op": "engine_overhead", "kind": "engine", "count": 1, "ms": eng / 1000.0, "gflops": 0.0,
                         "mbytes": 0.0})
        return rows

    # -- memory ------------------------------------------------------------------------------
    def weights_bytes(self) -> float:
        return cost.weight_bytes(self.cfg, self.q, self.tp)

    def kv_bytes_per_token(self) -> float:
        return cost.kv_bytes_per_token(self.cfg, self.q, self.tp)

    def activation_peak_bytes(self, tokens: int, seqs: int) -> float:
        """The activation peak of one forward step of ``tokens`` tokens over ``seqs`` sequences:
        the largest live set of one layer (residual, normed input, QKV, attention output, the MLP's
        intermediate; MoE: the routed copies) plus the logits of ``seqs`` rows in fp32."""
        c, ab, tp = self.cfg, self.q.a_bytes, self.tp
        up = (2 if c.gated_mlp else 1) * (c.dense_ffn or c.ffn) / tp
        if c.is_moe:
            up = max(up, c.experts_per_token * (2 if c.gated_mlp else 1) * c.ffn / tp)
        qkv = (c.heads + 2 * c.kv_heads) * c.head_dim / tp
        per_token = (2 * c.hidden + max(qkv + c.heads * c.head_dim / tp, up * 1.5)) * ab
        return tokens * per_token + seqs * c.vocab / tp * 4.0 * 2

    def memory(self, max_model_len: int | None = None, gpu_memory_utilization: float = 0.9, block_size: int = 16,
               max_num_seqs: int = 256) -> dict:
        """vLLM's KV-cache sizing with every input shown."""
        mml = int(max_model_len or self.cfg.max_context)
        batched = max(mml, 2048)
        total = float(self.spec.memory_gib) * GIB
        w = self.weights_bytes()
        act = self.activation_peak_bytes(batched, min(max_num_seqs, batched))
        per_tok = self.kv_bytes_per_token()
        block = per_tok * block_size
        free = gpu_memory_utilization * total - w - act
        blocks = max(int(free // block), 0)
        return {"gpu_memory_bytes": total, "gpu_memory_utilization": gpu_memory_utilization, "weights_bytes": w,
                "activation_peak_bytes": act, "profiling_tokens": batched, "max_model_len": mml,
                "block_size": block_size, "kv_bytes_per_token": per_tok, "kv_block_bytes": block,
                "kv_cache_bytes": blocks * block, "kv_blocks": blocks, "kv_capacity_tokens": blocks * block_size}


@dataclass
class LLMEstimate:
    """What :func:`llm` answers (``to_dict`` gives the JSON of ``perfseer llm --json``)."""

    model: str
    device: str
    gpus: int
    precision: str
    kv_precision: str
    weights_only: bool
    group_size: int
    prompt_len: int
    output_len: int
    batch: int
    engine: str
    ttft_ms: float
    tpot_ms: float | None
    tpot_last_ms: float | None
    e2e_ms: float
    output_tokens_per_s: float
    output_tokens_per_s_per_request: float
    kv_bytes_per_token: float
    kv_capacity_tokens: int
    max_concurrent_sequences: int
    peak_memory_bytes: float
    memory: dict
    breakdown: dict
    decode_flops: float
    notes: list = field(default_factory=list)
    energy_j_per_token: float | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def llm(model, device: str, prompt_len: int = 512, output_len: int = 128, batch: int = 1, gpus: int = 1,
        precision: str = "bf16", weights_only: bool | None = None, group_size: int | None = None,
        kv_precision: str | None = None, engine: str = "vllm", max_model_len: int | None = None,
        energy: bool = False, node: str | None = None) -> LLMEstimate:
    """Prefill, decode and KV-cache answer for ``batch`` sequences of ``prompt_len`` tokens each
    generating ``output_len`` tokens, on ``gpus`` GPUs ``device`` (tensor parallel).

    Args:
        model: a bundled name (``llama-3-8b``; ``perfseer llm --list``), a Hugging Face id of one,
            or the path of a local ``config.json``.
        device: a GPU of ``perfseer devices``.
        precision: the weights' format, ``fp32``/``fp16``/``bf16``/``fp8``/``int8``/``int4``.
        weights_only: quantize weights only (default for int4); else weights and activations.
        group_size: weights per scale for weight-only int4/int8 (default 128).
        kv_precision: the KV cache's type (default: the activation type).
        engine: ``vllm`` adds vLLM 0.4-0.5's per-step overhead (fitted); ``none``: GPU kernels only.
        max_model_len: vLLM's ``--max-model-len`` (default: the model's maximum), which sets the
            profiling run's activation peak.
        energy: also ``energy_j_per_token`` of the decode steps (:mod:`perfseer.energy`'s power model).
        node: the node type of a tensor-parallel group (``dgx-a100``...; default the GPU's usual one).

    Returns:
        :class:`LLMEstimate`.

    Raises:
        LLMInputError: a context beyond the model's maximum, a batch whose KV cache does not fit
            (the message gives the largest that does), bad lengths.
        PerfseerError: an unknown model, device or precision.

    Example::

        >>> est = llm("llama-3-8b", device="a100-80gb-sxm", prompt_len=512, output_len=128, batch=8)
        >>> est.kv_bytes_per_token
        131072.0
    """
    P = _positive_int(prompt_len, "prompt length", MAX_TOKENS)
    O = _positive_int(output_len, "output length", MAX_TOKENS)
    B = _positive_int(batch, "batch", MAX_BATCH)
    eng = Engine(model, device, gpus, precision, weights_only, group_size, kv_precision, engine, node)
    cfg = eng.cfg
    if P + O > cfg.max_context:
        raise LLMInputError(f"prompt {P:,} + output {O:,} = {P + O:,} tokens is longer than {cfg.name}'s maximum "
                            f"context of {cfg.max_context:,}",
                            f"shorten the prompt or the output to at most {cfg.max_context:,} tokens together")
    if max_model_len is not None:
        max_model_len = _positive_int(max_model_len, "max model length", cfg.max_context)
    mem = eng.memory(max_model_len)
    if mem["kv_blocks"] <= 0:
        raise LLMInputError(
            f"{cfg.name} at {eng.q.precision} does not fit on {eng.tp} x {eng.spec.name}: weights "
            f"{mem['weights_bytes'] / GIB:.1f} GiB + profiling activations {mem['activation_peak_bytes'] / GIB:.1f} GiB "
            f"per GPU exceed 90 % of {eng.spec.memory_gib:g} GiB",
            "use more GPUs (--gpus), a smaller precision (--precision int4), or a smaller --max-model-len")
    blocks_per_seq = math.ceil((P + O) / mem["block_size"])
    max_seqs = mem["kv_blocks"] // blocks_per_seq
    if B > max_seqs:
        raise LLMInputError(
            f"the KV cache of {B:,} sequences of {P + O:,} tokens ({B * blocks_per_seq:,} blocks of "
            f"{mem['block_size']}) does not fit: {mem['kv_blocks']:,} blocks "
            f"({mem['kv_cache_bytes'] / GIB:.2f} GiB) are left on each GPU",
            f"use a batch of at most {max_seqs:,}" if max_seqs else
            "shorten the sequences, use more GPUs, or store the KV cache smaller (--kv-precision fp8)")
    window = cfg.sliding_window
    pre = cost.StepShape.prefill(B, P, window)
    ttft = eng.step_us(pre) / 1000.0
    decode_ctx = list(range(P, P + O - 1))  # the context before each decode step's new token
    if decode_ctx:
        # decode time is piecewise linear in the context: evaluate at up to 33 contexts, interpolate
        import numpy as np

        pts = np.unique(np.linspace(decode_ctx[0], decode_ctx[-1], min(len(decode_ctx), 33)).round().astype(int))
        ts = np.array([eng.step_us(cost.StepShape.decode(B, int(c), window)) for c in pts]) / 1000.0
        all_t = np.interp(np.asarray(decode_ctx, float), pts.astype(float), ts)
        tpot, tpot_last, decode_total = float(all_t.mean()), float(all_t[-1]), float(all_t.sum())
    else:
        tpot = tpot_last = None
        decode_total = 0.0
    e2e = ttft + decode_total
    mid = cost.StepShape.decode(B, P + O // 2, window)
    dec_ops = cost.step_ops(cfg, eng.q, mid, eng.tp)
    kv_used = B * (P + O) * mem["kv_bytes_per_token"]
    peak = mem["weights_bytes"] + eng.activation_peak_bytes(B * P, B) + kv_used
    notes = list(eng.q.notes)
    if cfg.notes:
        notes.append(cfg.notes)
    if cfg.name not in _MEASURED:
        notes.append(f"{cfg.name} is answered from its shape and the operator model: none of its layers were in "
                     "the fitting data")
    notes.append("attention kernels are costed from the roofline (not in the fitting data)")
    energy_j = None
    if energy:
        if tpot is None:
            raise LLMInputError("energy per output token needs decode steps", "use an output length of 2 or more")
        from perfseer.energy.llm import DecodeWork, decode_energy

        work = DecodeWork(flops=cost.step_flops(dec_ops), bytes=float(sum(o.bytes * o.count for o in dec_ops)))
        e = decode_energy(eng.spec, tpot, work, batch=B, gpus=eng.tp, precision=eng.q.compute)
        energy_j = float(e["energy_j_per_token"])
        notes.append(f"energy per output token from perfseer.energy's power model at the mean decode step "
                     f"({e['power_w']:.0f} W per GPU, {e['util_pct']:.0f} % utilisation); prefill energy not included")
        notes.extend(e.get("notes") or [])
    return LLMEstimate(
        model=cfg.name, device=eng.spec.name, gpus=eng.tp, precision=eng.q.precision, kv_precision=eng.q.kv,
        weights_only=eng.q.weights_only, group_size=eng.q.group_size, prompt_len=P, output_len=O, batch=B,
        engine=engine, ttft_ms=ttft, tpot_ms=tpot, tpot_last_ms=tpot_last, e2e_ms=e2e,
        output_tokens_per_s=B * O / e2e * 1000.0, output_tokens_per_s_per_request=O / e2e * 1000.0,
        kv_bytes_per_token=mem["kv_bytes_per_token"], kv_capacity_tokens=mem["kv_capacity_tokens"],
        max_concurrent_sequences=max_seqs, peak_memory_bytes=peak, memory=mem,
        breakdown={"prefill": eng.breakdown(pre), "decode_step": eng.breakdown(mid),
                   "decode_step_context": P + O // 2},
        decode_flops=cost.step_flops(dec_ops), notes=[n for n in notes if n], energy_j_per_token=energy_j)


# models whose layers are in the operator model's fitting data (Vidur)
_MEASURED = {"llama-2-7b", "llama-2-70b", "llama-3-70b", "qwen-72b", "phi-2"}
