"""``POST /v1/llm``: the request body, its bounds and the answer (``perfseer.llm`` over HTTP).

Only bundled model names are accepted (a client never names a file on the server); lengths are
numbers, or ``MEAN:SD`` when serving (no histogram files).  Every field is bounded so that one
request costs at most about a second of CPU.
"""

from __future__ import annotations

import time
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from perfseer.errors import PerfseerError

MAX_TOKENS = 1 << 20  # prompt or output tokens of one request
MAX_SIM_REQUESTS = 2000  # simulated requests per call (~1 s)
Name = Annotated[str, StringConstraints(max_length=120, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:-]*$")]
Short = Annotated[str, StringConstraints(max_length=40)]
LengthText = Annotated[str, StringConstraints(max_length=40, pattern=r"^\d{1,8}(:\d{1,8}(\.\d{1,6})?)?$")]


class LLMRequest(BaseModel):
    model: Name = Field(..., description="a bundled LLM (perfseer llm --list), e.g. llama-3-8b", examples=["llama-3-8b"])
    device: Name = Field(..., description="a GPU of GET /v1/devices", examples=["a100-80gb-sxm"])
    gpus: int = Field(default=1, ge=1, le=64, description="GPUs in tensor parallel")
    prompt_len: LengthText = Field(default="512", description="prompt tokens; serving: also MEAN:SD")
    output_len: LengthText = Field(default="128", description="output tokens; serving: also MEAN:SD")
    batch: int = Field(default=1, ge=1, le=4096, description="sequences decoded together")
    precision: Short = Field(default="bf16", description="fp32, fp16, bf16, fp8, int8, int4")
    weights_only: bool | None = Field(default=None, description="quantize weights only (default for int4)")
    group_size: int | None = Field(default=None, ge=-1, le=1 << 16, description="weights per int4/int8 scale")
    kv_precision: Short | None = Field(default=None, description="KV-cache type (default: the activations')")
    engine: Short = Field(default="vllm", description="vllm (adds its per-step overhead) or none")
    max_model_len: int | None = Field(default=None, ge=1, le=MAX_TOKENS * 2, description="vLLM's --max-model-len")
    rate: float | None = Field(default=None, gt=0, le=1e5, description="serving: requests per second")
    concurrency: int | None = Field(default=None, ge=1, le=MAX_SIM_REQUESTS, description="serving: closed-loop clients")
    requests: int = Field(default=500, ge=1, le=MAX_SIM_REQUESTS, description="serving: requests simulated")
    max_num_seqs: int = Field(default=256, ge=1, le=4096, description="serving: vLLM's running-batch limit")
    chunked_prefill: bool = Field(default=False, description="serving: vLLM's chunked prefill")
    energy: bool = Field(default=False, description="batch: also the energy per output token")


def _whole(text: str, name: str) -> int:
    if ":" in text:
        raise PerfseerError(f"{name} {text!r}: MEAN:SD is for serving", "pass rate or concurrency, or a number")
    v = int(text)
    if not 1 <= v <= MAX_TOKENS:
        raise PerfseerError(f"{name} must be 1 to {MAX_TOKENS:,}, got {v:,}", f"pass a smaller {name}")
    return v


def answer(req: LLMRequest) -> dict:
    """The JSON of ``POST /v1/llm``: a batch answer, or a serving simulation with rate/concurrency."""
    from perfseer.llm.config import bundled_config

    name = bundled_config(req.model)  # bundled names only: a client never names a file here
    common = {"gpus": req.gpus, "precision": req.precision, "weights_only": req.weights_only,
              "group_size": req.group_size, "kv_precision": req.kv_precision, "engine": req.engine,
              "max_model_len": req.max_model_len}
    t0 = time.perf_counter()
    if req.rate is not None or req.concurrency is not None:
        from perfseer.llm.serving import simulate

        for text, what in ((req.prompt_len, "prompt_len"), (req.output_len, "output_len")):
            mean = int(text.split(":")[0])
            if not 1 <= mean <= MAX_TOKENS:
                raise PerfseerError(f"{what} mean must be 1 to {MAX_TOKENS:,}", f"pass a smaller {what}")
        res = simulate(name, req.device, prompt_len=req.prompt_len, output_len=req.output_len, rate=req.rate,
                       concurrency=req.concurrency, requests=req.requests, max_num_seqs=req.max_num_seqs,
                       chunked_prefill=req.chunked_prefill, **common)
        out = {"kind": "serving", **res.to_dict()}
    else:
        from perfseer.llm.predict import llm

        est = llm(name, req.device, prompt_len=_whole(req.prompt_len, "prompt_len"),
                  output_len=_whole(req.output_len, "output_len"), batch=req.batch, energy=req.energy, **common)
        out = {"kind": "batch", **est.to_dict()}
    out["timing_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
    return out
