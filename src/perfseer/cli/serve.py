"""``perfseer serve``: the REST API and web page (FastAPI + uvicorn, ``pip install 'perfseer[serve]'``)."""

from __future__ import annotations

import argparse

from perfseer.cli.train import positive
from perfseer.errors import MissingDependencyError, PerfseerError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve", help="serve predictions over HTTP (REST API and a web page)",
        description="Run perfseer's REST API (/v1/..., docs at /docs) and its web page (/) with uvicorn.  Model "
                    "files are parsed and models exported in sandboxed child processes with time and memory "
                    "limits; extracted graphs are cached.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--jobs", type=positive(int), default=2, help="extractions at once (default 2)")
    p.add_argument("--job-time-limit", type=positive(float), default=60.0, metavar="S",
                   help="seconds an extraction may take (default 60)")
    p.add_argument("--job-memory-mb", type=positive(int), default=3072, metavar="MB",
                   help="address-space limit of an extraction process (default 3072)")
    p.add_argument("--cache", type=positive(int), default=128, metavar="N", help="graphs kept in memory (default 128)")
    p.add_argument("--cache-nodes", type=positive(int), default=2_000_000, metavar="N",
                   help="graph nodes kept in memory in all, about 1 KB each (default 2,000,000); a larger graph is "
                        "answered but not kept")
    p.add_argument("--row-cache", type=_entries, default=4096, metavar="N",
                   help="prediction rows kept, one entry per graph, batch size, predictor or device, and phase "
                        "(default 4096; 0: off)")
    p.add_argument("--max-upload-mb", type=positive(float), default=200.0, metavar="MB")
    p.add_argument("--header-timeout", type=positive(float), default=10.0, metavar="S",
                   help="a connection whose request headers are not complete after S seconds is closed (default 10)")
    p.add_argument("--body-timeout", type=positive(float), default=60.0, metavar="S",
                   help="a request body that stalls S seconds between two chunks is dropped with 408 (default 60)")
    p.add_argument("--models-dir", default=None, metavar="DIR",
                   help="a folder whose .onnx files clients may name by relative path (default: no paths)")
    p.add_argument("--predictor", action="append", default=None, metavar="NAME",
                   help="serve only these predictors (repeatable; default: all bundled)")
    p.set_defaults(func=run_serve)


def _entries(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def run_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn  # deferred: an optional extra
    except ImportError as e:
        raise MissingDependencyError("uvicorn", "serve", "perfseer serve") from e
    from perfseer.serve.app import ServeConfig, create_app  # deferred: loads fastapi
    from perfseer.serve.http import header_timeout_protocol  # deferred: loads uvicorn, an optional extra

    if not 0 < args.port < 65536:
        raise PerfseerError(f"--port {args.port} is not a TCP port", "use 1-65535, e.g. 8000")
    config = ServeConfig(jobs=args.jobs, job_time_s=args.job_time_limit, job_memory_mb=args.job_memory_mb,
                         cache_size=args.cache, cache_nodes=args.cache_nodes, row_cache_size=args.row_cache, max_upload_mb=args.max_upload_mb, models_dir=args.models_dir,
                         predictors=args.predictor or [], body_timeout_s=args.body_timeout)
    app = create_app(config)
    print(f"perfseer serve: http://{args.host}:{args.port}/ (API docs at /docs)")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                http=header_timeout_protocol(args.header_timeout))
    return 0
