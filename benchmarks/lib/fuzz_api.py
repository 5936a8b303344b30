"""The fuzz corpus through what users call: ``perfseer.predict``, ``perfseer.memory`` and the
service's endpoints.

    python -m benchmarks.lib.fuzz_api [--count 1600] [--seed 0] [--service] [--json out.json]

Seeds: every seed of :mod:`benchmarks.lib.fuzz_corpus` plus the kinds of issue 38 built here with
``onnx.helper`` (small, deterministic): model-local ONNX functions (valid, recursive, wrong arity,
a chain deeper than 100, a fan-out of 2^24), ``If``/``Loop``/``Scan`` graphs, quantized graphs
(QDQ, ``QLinearConv``, ``DynamicQuantizeLinear`` + ``MatMulInteger``), an initializer stored as
external data (the file must never be opened: see ``read`` below), opsets 7 and 23, and an fp16
model.  They are mutated by the corpus's mutators.

Each mutant goes, in a worker process limited to ``MEMORY_LIMIT`` of address space (RLIMIT_AS)
with ``TIME_LIMIT`` seconds per call, through every entry point of :data:`ENTRY_POINTS` and, with
the service's, :data:`SERVICE_ENTRY_POINTS`: the worker runs ``perfseer serve``'s application
in-process (FastAPI's ``TestClient``, the mutants' folder as ``--models-dir``) and sends each mutant
to ``POST /v1/models`` (an upload), ``POST /v1/predict``, ``POST /v1/memory``, ``POST /v1/compare``
and ``POST /v1/predict`` on 4 GPUs with ZeRO-2 (by its name in the served folder; :data:`SERVICE_BODIES`).  The service extracts, re-binds and simulates in its sandbox, whose limits are the
worker's (``MEMORY_LIMIT``, ``TIME_LIMIT`` per job); its own process is the worker, under the same
address-space limit.  Outcomes per entry point:

``refusal``    a :class:`~perfseer.errors.PerfseerError` (``specific`` when its message names a
               cause, i.e. is not the generic "cannot be determined"), or every row refused with
               a reason;
``answer``     a value that passes the sanity check (finite, > 0, >= 1 us, not flagged above the
               sanity ceiling, <= ``LATENCY_CEILING_MS``; memory finite, > 0, <= ``MEMORY_CEILING``);
``absurd``     an answer failing that check;
``traceback``  any other exception;
``memory``     over the memory limit (a ``MemoryError``, even one caught inside perfseer);
``hang``       over the time limit (the worker is killed and replaced);
``crash``      the worker died (a signal, a C++ abort);
``read``       the external-data file (present beside each mutant) was opened: an audit hook sees
               Python's opens, an inotify watch those of C++ code (onnx reads external data in C++);
``leak``       (service) an answer shows a path of the host (the served folder, the upload folder,
               the install), or a refused upload stays in the upload folder.

For the service a refusal is a 4xx JSON error ``{"error": {"type", "message", "fix"}}``; a 5xx or an
exception out of the application is a ``traceback``, and the sandbox's own stops count as failures
too (``SandboxMemory``: ``memory``, ``SandboxTimeout``: ``hang``, ``SandboxCrash``: ``crash``), so
that the service is held to what ``perfseer.predict`` does with the same file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

if __package__ in (None, ""):  # run as a script (the worker)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.lib import fuzz_corpus

MEMORY_LIMIT = 3 << 30  # bytes of address space per worker (torch alone maps about 1.1 GB)
TIME_LIMIT = 30.0  # seconds per call, wall clock (2 shared cores)
LATENCY_CEILING_MS = 1e6  # 16 minutes per step: no real model; above it the answer is absurd
MEMORY_CEILING = 1 << 50  # 1 PiB: no device of the registry comes near it
DEVICE = "a100-40gb"
SERVICE_START_S = 120.0  # the first service call also builds the app and starts the sandbox's fork server
ENTRY_POINTS = ("predict", "predict_spec", "memory")
SERVICE_ENTRY_POINTS = ("serve_upload", "serve_predict", "serve_memory", "serve_compare", "serve_predict_gpus")
#: what each service entry point sends with the mutant (by its name in the served folder)
SERVICE_BODIES = {"serve_predict": {"devices": [DEVICE], "batch": [1, 8]},
                  "serve_memory": {"batch": [2], "phase": "infer"},
                  "serve_compare": {"batch": 8, "devices": [DEVICE]},
                  "serve_predict_gpus": {"devices": [DEVICE], "batch": [8], "gpus": 4, "parallel": "zero2"}}
SERVICE_PATHS = {"serve_predict": "/v1/predict", "serve_memory": "/v1/memory", "serve_compare": "/v1/compare",
                 "serve_predict_gpus": "/v1/predict"}
FAILURES = ("absurd", "traceback", "memory", "hang", "crash", "read", "leak")
OUTCOMES = ("refusal", "answer", *FAILURES)
EXTERNAL_SENTINEL = "perfseer-fuzz-external-MUST-NOT-BE-READ.bin"
#: seed kinds whose failures are known and not fixed here: {kind prefix: reason} (none today)
XFAIL: dict[str, str] = {}


# -- seeds --------------------------------------------------------------------------------------

def _vi(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(nodes, inputs, outputs, inits=(), opset=17, functions=(), extra_opsets=(), ir=None, out_elem=TensorProto.FLOAT):
    g = helper.make_graph(nodes, "seed", inputs, [_vi(o, out_elem) for o in outputs], initializer=list(inits))
    ops = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in extra_opsets)]
    m = helper.make_model(g, opset_imports=ops, functions=list(functions))
    m.ir_version = ir if ir is not None else min(m.ir_version, 10)
    return m


def _function(name, inputs, outputs, nodes, domain="local"):
    return helper.make_function(domain, name, inputs, outputs, nodes, [helper.make_opsetid("", 17)])


def _conv_head(x="x", c=8, k=3):
    return ([helper.make_node("Conv", [x, "w", "b"], ["c"], name="conv", kernel_shape=[k, k], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu")],
            [_init("w", np.full((c, 3, k, k), 0.01, np.float32)), _init("b", np.zeros(c, np.float32))])


def function_seeds() -> dict[str, onnx.ModelProto]:
    x = _vi("x", shape=["N", 3, 16, 16])
    head, inits = _conv_head()
    act = _function("Act", ["a"], ["o"], [helper.make_node("Sigmoid", ["a"], ["s"]),
                                           helper.make_node("Mul", ["a", "s"], ["o"])])
    seeds = {"func_valid": _model(head + [helper.make_node("Act", ["r"], ["y"], domain="local", name="act")],
                                  [x], ["y"], inits, functions=[act], extra_opsets=[("local", 1)])}
    rec = _function("Rec", ["a"], ["o"], [helper.make_node("Relu", ["a"], ["t"]),
                                           helper.make_node("Rec", ["t"], ["o"], domain="local")])
    seeds["func_recursive"] = _model(head + [helper.make_node("Rec", ["r"], ["y"], domain="local", name="rec")],
                                     [x], ["y"], inits, functions=[rec], extra_opsets=[("local", 1)])
    seeds["func_wrong_arity"] = _model(
        head + [helper.make_node("Act", ["r", "r", "r"], ["y", "z"], domain="local", name="act")],
        [x], ["y"], inits, functions=[act], extra_opsets=[("local", 1)])
    chain = [_function(f"F{i}", ["a"], ["o"], [helper.make_node(f"F{i + 1}", ["a"], ["o"], domain="local")])
             for i in range(120)] + [_function("F120", ["a"], ["o"], [helper.make_node("Relu", ["a"], ["o"])])]
    seeds["func_deep_chain"] = _model(head + [helper.make_node("F0", ["r"], ["y"], domain="local", name="f0")],
                                      [x], ["y"], inits, functions=chain, extra_opsets=[("local", 1)])
    fan = [_function(f"G{i}", ["a"], ["o"], [helper.make_node(f"G{i + 1}", ["a"], ["t"], domain="local"),
                                             helper.make_node(f"G{i + 1}", ["t"], ["o"], domain="local")])
           for i in range(24)] + [_function("G24", ["a"], ["o"], [helper.make_node("Relu", ["a"], ["o"])])]
    seeds["func_fanout"] = _model(head + [helper.make_node("G0", ["r"], ["y"], domain="local", name="g0")],
                                  [x], ["y"], inits, functions=fan, extra_opsets=[("local", 1)])
    return seeds


def control_flow_seeds() -> dict[str, onnx.ModelProto]:
    x = _vi("x", shape=[2, 3, 16, 16])
    head, inits = _conv_head()
    then_g = helper.make_graph([helper.make_node("Relu", ["r"], ["t_out"])], "then", [], [_vi("t_out", shape=None)])
    else_g = helper.make_graph([helper.make_node("Sigmoid", ["r"], ["e_out"])], "else", [], [_vi("e_out", shape=None)])
    seeds = {"cf_if": _model(
        head + [helper.make_node("ReduceMean", ["r"], ["m"], keepdims=0, name="mean"),
                helper.make_node("Greater", ["m", "zero"], ["cond"], name="gt"),
                helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
        [x], ["y"], inits + [_init("zero", np.float32(0))])}
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Relu", ["acc_in"], ["acc_r"]),
         helper.make_node("Add", ["acc_r", "acc_in"], ["acc_out"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("acc_in", shape=None)],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", shape=None)])
    seeds["cf_loop"] = _model(head + [helper.make_node("Loop", ["trip", "keep", "r"], ["y"], name="loop", body=body)],
                              [x], ["y"], inits + [_init("trip", np.int64(4)), _init("keep", np.bool_(True))])
    sbody = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Relu", ["s_out"], ["y_t"])],
        "scan_body", [_vi("s_in", shape=[8]), _vi("x_t", shape=[8])], [_vi("s_out", shape=[8]), _vi("y_t", shape=[8])])
    seeds["cf_scan"] = _model(
        [helper.make_node("Scan", ["s0", "seq"], ["s_last", "y"], name="scan", body=sbody, num_scan_inputs=1)],
        [_vi("seq", shape=[16, 8])], ["y"], [_init("s0", np.zeros(8, np.float32))])
    return seeds


def quantized_seeds() -> dict[str, onnx.ModelProto]:
    x = _vi("x", shape=[1, 3, 16, 16])
    s, z = _init("s", np.float32(0.05)), _init("zp", np.uint8(128))
    wq = _init("wq", np.full((8, 3, 3, 3), 3, np.int8))
    ws, wz = _init("ws", np.float32(0.01)), _init("wz", np.int8(0))
    seeds = {"q_qdq": _model(
        [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="q"),
         helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"], name="dq"),
         helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="dqw"),
         helper.make_node("Conv", ["xd", "wd"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        [x], ["y"], [s, z, wq, ws, wz])}
    ys, yz = _init("ys", np.float32(0.1)), _init("yz", np.uint8(128))
    seeds["q_qlinearconv"] = _model(
        [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="q"),
         helper.make_node("QLinearConv", ["xq", "s", "zp", "wq", "ws", "wz", "ys", "yz"], ["cq"], name="qconv",
                          kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"], name="dq")],
        [x], ["y"], [s, z, wq, ws, wz, ys, yz])
    seeds["q_dynamic"] = _model(
        [helper.make_node("DynamicQuantizeLinear", ["a"], ["aq", "as", "az"], name="dyn"),
         helper.make_node("MatMulInteger", ["aq", "bq", "az", "bz"], ["mi"], name="mmi"),
         helper.make_node("Cast", ["mi"], ["mf"], name="cast", to=TensorProto.FLOAT),
         helper.make_node("Mul", ["mf", "as"], ["y"], name="scale")],
        [_vi("a", shape=["N", 64])], ["y"],
        [_init("bq", np.full((64, 32), 2, np.uint8)), _init("bz", np.uint8(0))])
    return seeds


def misc_seeds() -> dict[str, onnx.ModelProto]:
    x = _vi("x", shape=["N", 3, 16, 16])
    head, inits = _conv_head()
    ext = _model(head + [helper.make_node("Flatten", ["r"], ["f"], name="flat"),
                         helper.make_node("MatMul", ["f", "fw"], ["y"], name="fc")], [x], ["y"], inits)
    fw = onnx.TensorProto(name="fw", data_type=TensorProto.FLOAT, dims=[2048, 10])
    fw.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", EXTERNAL_SENTINEL), ("offset", "0"), ("length", str(2048 * 10 * 4))):
        fw.external_data.add(key=k, value=v)
    ext.graph.initializer.append(fw)
    seeds = {"external_data": ext}
    seeds["opset7"] = _model(head + [helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")],
                             [_vi("x", shape=[1, 3, 16, 16])], ["y"], inits, opset=7, ir=3)
    # IR 3 files list their weights among the graph inputs
    seeds["opset7"].graph.input.extend(_vi(t.name, t.data_type, list(t.dims)) for t in inits)
    seeds["opset23"] = _model(
        head + [helper.make_node("RMSNormalization", ["r", "g"], ["n"], name="rms", axis=1),
                helper.make_node("GlobalAveragePool", ["n"], ["y"], name="gap")],
        [x], ["y"], inits + [_init("g", np.ones((8, 16, 16), np.float32))], opset=23, ir=11)
    h16 = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
           helper.make_node("Relu", ["c"], ["r"], name="relu"),
           helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    seeds["fp16"] = _model(h16, [_vi("x", TensorProto.FLOAT16, ["N", 3, 16, 16])], ["y"],
                           [_init("w", np.full((8, 3, 3, 3), 0.01, np.float16)), _init("b", np.zeros(8, np.float16))],
                           out_elem=TensorProto.FLOAT16)
    return seeds


def new_seeds() -> dict[str, onnx.ModelProto]:
    """The seed kinds of issue 38, by name (``kind_variant``)."""
    return {**function_seeds(), **control_flow_seeds(), **quantized_seeds(), **misc_seeds()}


def seed_files() -> dict[str, bytes]:
    """The corpus's seeds and the new ones (``api/<name>``), as serialised bytes."""
    out = fuzz_corpus.seed_files()
    for name, m in new_seeds().items():
        out[f"api/{name}"] = m.SerializeToString()
    return out


def generate(count: int = 1600, seed: int = 0) -> list[tuple[str, bytes]]:
    """``count`` mutants, the same for the same ``seed``; the new seeds get a share of about a third,
    and each of them appears once unmutated among the first (``count`` allowing)."""
    seeds = seed_files()
    fresh = [(f"{i:05d}-none-{n.replace('/', '_')}", seeds[n]) for i, n in enumerate(sorted(seeds))
             if n.startswith("api/")]
    fresh = fresh[:count]
    rest = fuzz_corpus.generate(count - len(fresh), seed, seeds=seeds,
                                weight=lambda n: 8 if n.startswith("api/") else 4 if n.startswith("built/") else 1)
    return fresh + [(f"{int(n[:5]) + len(fresh):05d}{n[5:]}", d) for n, d in rest]


def seed_of(name: str) -> str:
    """The seed a mutant came from (``api_func_recursive``...)."""
    return name.split("-", 2)[2]


# -- the worker ---------------------------------------------------------------------------------

def _classify_rows(rows) -> dict:
    vals = [r for r in rows if r.get("metric") == "latency_ms"]
    if not vals:
        return {"outcome": "absurd", "detail": f"no latency row in {len(rows)} rows"}
    answered = [r for r in vals if r.get("value") is not None]
    if not answered:
        reasons = [str(r.get("reason") or "") for r in vals]
        return {"outcome": "refusal", "specific": all(reasons) and not any(g in x for x in reasons
                                                                            for g in fuzz_corpus.GENERIC),
                "type": "refused rows", "detail": reasons[0][:300]}
    bad = []
    for r in answered:
        v = r["value"]
        flagged = [f for f in r.get("flags") or [] if "above the sanity ceiling" in str(f)]
        if (not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 or v < 1e-3
                or v > LATENCY_CEILING_MS or flagged):
            bad.append(f"batch {r.get('batch_size')}: {v!r} {flagged[:1]}")
    if bad:
        return {"outcome": "absurd", "detail": "; ".join(bad)[:300]}
    return {"outcome": "answer", "value": answered[0]["value"]}


def _call(entry: str, path: str) -> dict:
    import perfseer

    if entry in SERVICE_ENTRY_POINTS:
        return _call_service(entry, path)
    if entry == "predict":
        return _classify_rows(perfseer.predict(path, device=DEVICE, batch=[1, 8]))
    if entry == "predict_spec":
        return _classify_rows(perfseer.predict(path, device=DEVICE, batch=[1, 8], basis="spec"))
    est = perfseer.memory(path, batch=2, phase="infer")
    v = est.total
    if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 or v > MEMORY_CEILING:
        return {"outcome": "absurd", "detail": f"total {v!r} bytes"}
    return {"outcome": "answer", "value": v}


_SERVICE: dict = {}
_SANDBOX_STOPS = {"SandboxMemory": "memory", "SandboxTimeout": "hang", "SandboxCrash": "crash"}


def _service(models_dir: Path) -> dict:
    """The service of this worker (created on first use): its test client, upload folder and the
    host paths no answer may show."""
    if _SERVICE.get("models_dir") != models_dir:
        from fastapi.testclient import TestClient

        import perfseer
        from perfseer.serve.app import ServeConfig, create_app

        if "client" in _SERVICE:
            _SERVICE["client"].__exit__(None, None, None)
        uploads = models_dir / ".uploads"  # removed with the mutants' folder
        app = create_app(ServeConfig(jobs=1, job_time_s=TIME_LIMIT, job_memory_mb=MEMORY_LIMIT >> 20,
                                     queue_wait_s=TIME_LIMIT, cache_size=16, row_cache_size=256,
                                     models_dir=str(models_dir), upload_dir=str(uploads)))
        client = TestClient(app, raise_server_exceptions=True)
        client.__enter__()
        # the service's first answers load its predictors and start the sandbox's fork server: done
        # here, inside the first service call's longer limit (SERVICE_START_S), not in a case's
        client.post("/v1/predict", json={"model": WARM_UP, "devices": [DEVICE], "batch": [1, 8]})
        client.post("/v1/memory", json={"model": WARM_UP, "batch": [2], "phase": "infer"})
        hidden = {str(models_dir), str(models_dir.resolve()), str(uploads), str(uploads.resolve()),
                  str(Path(perfseer.__file__).resolve().parents[1])}
        _SERVICE.update(client=client, uploads=uploads, models_dir=models_dir, hidden=sorted(hidden, key=len))
    return _SERVICE


def _call_service(entry: str, path: str) -> dict:
    """One mutant through one endpoint of the service (see the module docstring)."""
    path = Path(path)
    svc = _service(path.parent)
    client = svc["client"]
    before = {p.name for p in svc["uploads"].iterdir()}
    if entry == "serve_upload":
        r = client.post("/v1/models", files={"file": (path.name, path.read_bytes(), "application/octet-stream")})
    else:
        r = client.post(SERVICE_PATHS[entry], json={"model": path.name, **SERVICE_BODIES[entry]})
    text = r.text
    shown = [h for h in svc["hidden"] if h in text]
    if shown:
        return {"outcome": "leak", "detail": f"the answer ({r.status_code}) shows a host path: {text[:200]}"}
    if r.status_code >= 500 or not 200 <= r.status_code < 500:
        return {"outcome": "traceback", "type": f"HTTP {r.status_code}", "detail": text[:300]}
    body = r.json()
    if r.status_code != 200:
        err = body.get("error") if isinstance(body, dict) else None
        if not isinstance(err, dict) or not {"type", "message", "fix"} <= set(err):
            return {"outcome": "traceback", "type": f"HTTP {r.status_code}", "detail": f"not a JSON error: {text[:200]}"}
        kind, msg = str(err["type"]), str(err["message"])
        if kind in _SANDBOX_STOPS:
            return {"outcome": _SANDBOX_STOPS[kind], "type": kind, "detail": msg[:300]}
        if entry == "serve_upload":
            left = {p.name for p in svc["uploads"].iterdir()} - before
            if left:
                return {"outcome": "leak", "detail": f"the refused upload left {sorted(left)[:2]} in the upload folder"}
        return {"outcome": "refusal", "specific": bool(msg.strip()) and not any(g in msg for g in fuzz_corpus.GENERIC),
                "type": kind, "detail": f"{r.status_code} {msg[:300]}"}
    if entry in ("serve_predict", "serve_predict_gpus"):
        return _classify_rows(body.get("predictions") or [])
    if entry == "serve_compare":  # the ranked rows: one step time per GPU
        return _classify_rows([{"metric": "latency_ms", **r} for r in body.get("rows") or []])
    if entry == "serve_memory":
        ests = body.get("estimates") or []
        v = ests[0].get("total") if ests else None
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 or v > MEMORY_CEILING:
            return {"outcome": "absurd", "detail": f"total {v!r} bytes"}
        return {"outcome": "answer", "value": v}
    summary = body.get("summary") or {}
    if not str(body.get("model", "")).startswith("upload:") or not summary:
        return {"outcome": "absurd", "detail": f"an upload answer without its reference or summary: {text[:200]}"}
    return {"outcome": "answer", "value": summary.get("num_nodes")}


class ExternalWatch:
    """An inotify watch (Linux) on the external-data sentinel files: ``opened()`` says whether any
    was opened or read since the last call, by Python or by C++ code (onnx reads external data in
    C++).  Elsewhere it sees nothing (the audit hook still sees Python's opens)."""

    IN_ACCESS, IN_OPEN, IN_NONBLOCK = 0x1, 0x20, 0o4000

    def __init__(self):
        import ctypes
        import ctypes.util

        self.fd, self.paths = -1, set()
        try:
            self.libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            self.fd = self.libc.inotify_init1(self.IN_NONBLOCK)
        except (OSError, AttributeError):
            self.fd = -1

    def watch(self, path: Path) -> None:
        if self.fd >= 0 and path not in self.paths and path.exists():
            self.libc.inotify_add_watch(self.fd, str(path).encode(), self.IN_OPEN | self.IN_ACCESS)
            self.paths.add(path)

    def opened(self) -> bool:
        if self.fd < 0:
            return False
        seen = False
        while True:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                return seen
            seen = seen or bool(data)


WARM_UP = "example:resnet18"  # a bundled model every entry point answers


def _warm_up() -> None:
    """Load what a first answer loads (the cards, their networks, torch_geometric: ~15 s on an
    idle core, more under load) before the first case, so that no case's time limit pays for it."""
    import perfseer
    from perfseer.errors import PerfseerError

    for call in (lambda: perfseer.predict(WARM_UP, device=DEVICE, batch=[1, 8]),
                 lambda: perfseer.predict(WARM_UP, device=DEVICE, batch=[1, 8], basis="spec"),
                 lambda: perfseer.memory(WARM_UP, batch=2, phase="infer")):
        try:
            call()
        except PerfseerError:
            pass


def _worker() -> None:  # pragma: no cover - runs in the child
    """Read ``entry<TAB>path`` lines on stdin, write one JSON outcome per line on stdout."""
    import resource
    import traceback
    import warnings

    limit = int(os.environ.get("PERFSEER_FUZZ_MEMORY", MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import torch

    torch.set_num_threads(1)
    import perfseer  # noqa: F401
    from perfseer.errors import PerfseerError

    warnings.simplefilter("ignore")
    _warm_up()
    reads: list[str] = []

    def audit(event, args):
        if event == "open" and args and EXTERNAL_SENTINEL in str(args[0]):
            reads.append(str(args[0]))

    sys.addaudithook(audit)  # Python's own opens; the inotify watch sees those of C++ code too
    watch = ExternalWatch()
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write to the result channel
    memory_errors: list[str] = []

    def local(frame, event, arg):
        if event == "exception" and issubclass(arg[0], MemoryError):
            memory_errors.append(frame.f_code.co_name)
        return local

    def tracer(frame, event, arg):
        frame.f_trace_lines = False
        return local

    import threading

    threading.settrace(tracer)  # the service answers in threads of its own
    print(json.dumps({"ready": True}), file=out, flush=True)
    for line in sys.stdin:
        entry, path = line.rstrip("\n").split("\t", 1)
        memory_errors.clear()
        reads.clear()
        sys.settrace(tracer)
        t0 = time.perf_counter()
        watch.watch(Path(path).parent / EXTERNAL_SENTINEL)
        watch.opened()  # forget earlier events
        try:
            res = _call(entry, path)
        except PerfseerError as e:
            msg = str(e)
            res = {"outcome": "refusal", "specific": bool(msg.strip()) and not any(g in msg for g in fuzz_corpus.GENERIC),
                   "type": type(e).__name__, "detail": msg[:300]}
        except MemoryError:
            res = {"outcome": "memory", "detail": "MemoryError"}
        except Exception as e:  # noqa: BLE001 - that is what is being counted
            tb = traceback.extract_tb(e.__traceback__)[-1]
            res = {"outcome": "traceback", "type": type(e).__name__,
                   "detail": f"{str(e)[:240]} ({Path(tb.filename).name}:{tb.lineno})"}
        sys.settrace(None)
        res["seconds"] = round(time.perf_counter() - t0, 3)
        if memory_errors and res["outcome"] != "memory":
            res = {**res, "outcome": "memory", "detail": f"MemoryError caught inside {memory_errors[0]}() after "
                                                          f"{res['outcome']}: {res.get('detail', '')[:200]}"}
        if watch.opened():
            reads.append(f"{EXTERNAL_SENTINEL} (inotify)")
        if reads:
            res = {**res, "outcome": "read", "detail": f"external data opened: {reads[0]}"}
        print(json.dumps(res), file=out, flush=True)


class Harness(fuzz_corpus.Harness):
    """A worker (this module) answering ``(entry point, file)`` requests, replaced when it dies or hangs."""

    def __init__(self, memory: int = MEMORY_LIMIT, time_limit: float = TIME_LIMIT):
        super().__init__(memory=memory, time_limit=time_limit)
        self.served = False  # whether the worker's service (and its fork server) has started

    def _start(self) -> None:
        import subprocess

        import perfseer

        env = dict(os.environ, PERFSEER_FUZZ_MEMORY=str(self.memory),
                   PYTHONPATH=os.pathsep.join([str(Path(perfseer.__file__).parents[1]), str(fuzz_corpus.ROOT),
                                               os.environ.get("PYTHONPATH", "")]),
                   OMP_NUM_THREADS="1", MALLOC_ARENA_MAX="2")
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        line = self._readline(180.0)
        if not line or not json.loads(line).get("ready"):
            raise RuntimeError("the fuzz worker did not start")

    def call(self, entry: str, path) -> dict:
        # a service request may run two sandbox jobs (extraction, re-binding), each under TIME_LIMIT;
        # the first one also starts the service and its fork server
        limit = self.time_limit
        if entry in SERVICE_ENTRY_POINTS:
            self.time_limit = limit * 2 + (SERVICE_START_S if not self.served else 0.0)
            self.served = True
        try:
            res = self.run(f"{entry}\t{path}")
        finally:
            self.time_limit = limit
        if res["outcome"] in ("hang", "abort"):
            self.served = False  # the worker is replaced: its service starts again
        if res["outcome"] == "abort":
            res["outcome"] = "crash"
        return res


def run_cases(mutants: list[tuple[str, bytes]], entries=ENTRY_POINTS, log=None, **harness_kw) -> list[dict]:
    """One outcome per (mutant, entry point): ``name``, ``seed``, ``entry`` added.  ``entries`` may
    be a function of the mutant's index giving its entry points (one harness for every case)."""
    results = []
    with tempfile.TemporaryDirectory(prefix="perfseer-fuzz-api-") as d, Harness(**harness_kw) as h:
        # the file an external-data initializer names, present (so a read would succeed) and watched
        (Path(d) / EXTERNAL_SENTINEL).write_bytes(bytes(2048 * 10 * 4))
        for k, (name, data) in enumerate(mutants):
            path = Path(d) / f"{name[:150]}.onnx"
            path.write_bytes(data)
            for entry in (entries(k) if callable(entries) else entries):
                res = h.call(entry, path)
                results.append({**res, "name": name, "seed": seed_of(name), "entry": entry})
            path.unlink()
            if log and (k + 1) % 50 == 0:
                log(f"  {k + 1}/{len(mutants)} files")
    return results


def summarise(results: list[dict]) -> dict:
    """Counts per entry point (and ``all``): cases and each outcome, refusals naming a cause."""
    out = {}
    for entry in (*sorted({r["entry"] for r in results}), "all"):
        rs = [r for r in results if entry == "all" or r["entry"] == entry]
        c = Counter(r["outcome"] for r in rs)
        secs = sorted(r["seconds"] for r in rs)
        out[entry] = {"cases": len(rs), **{k: c.get(k, 0) for k in OUTCOMES},
                      "refusals_specific": sum(bool(r.get("specific")) for r in rs if r["outcome"] == "refusal"),
                      "median_s": secs[len(secs) // 2] if secs else None, "max_s": secs[-1] if secs else None}
    return out


def failures(results: list[dict], xfail: dict[str, str] = XFAIL) -> tuple[list[dict], list[dict]]:
    """``(failures, expected failures)``: outcomes in :data:`FAILURES`, split by :data:`XFAIL` seed kinds."""
    bad = [r for r in results if r["outcome"] in FAILURES]
    expected = [r for r in bad if any(r["seed"].startswith(k) for k in xfail)]
    return [r for r in bad if r not in expected], expected


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first mutant to run (chunks)")
    ap.add_argument("--stop", type=int, default=None, help="one past the last mutant to run")
    ap.add_argument("--service", action="store_true", help="also through the service's endpoints")
    ap.add_argument("--json", help="write every outcome here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker()
        return 0
    mutants = generate(args.count, args.seed)[args.start:args.stop]
    entries = ENTRY_POINTS + (SERVICE_ENTRY_POINTS if args.service else ())
    results = run_cases(mutants, entries=entries, log=lambda m: print(m, file=sys.stderr))
    s = summarise(results)
    for entry, c in s.items():
        print(entry, json.dumps(c))
    bad, _ = failures(results)
    for r in bad[:20]:
        print(f"  {r['outcome']} [{r['entry']}] {r['name']}: {r.get('detail', '')}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": s, "results": results}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
