"""Usage overhead of a predictor: one model from its ONNX file to every prediction, and batched
throughput on dataset graphs.

    taskset -c 0 python -m benchmarks.lib.predict_speed --json benchmarks/results/predict_speed.json
    taskset -c 0 python -m benchmarks.lib.predict_speed --predictor PATH/TO/CARD.json --repeats 50
    taskset -c 0 python -m benchmarks.lib.predict_speed --train-archs 100 --train-epochs 1 --repeats 5   # smoke

Measured in one process, after the predictor is loaded once (:func:`perfseer.load_predictor`):

* **one model**: ``predictor.predict(path, batch=1)`` on a bundled ONNX file
  (``perfseer/examples/resnet50.onnx`` by default; ``--models`` adds the others): reading the file,
  shape inference, features, the PyG graph and the predictions of every target, the median of
  ``--repeats`` runs after one warm-up; then its parts alone (extraction; graph + prediction) and
  four batch sizes in one call (one extraction, three re-bindings);
* **throughput**: ``predictor.predict_graphs`` on ``--graphs`` FBNet graphs of the dataset (already
  in memory; feature scaling, batching and the network), graphs per second, the median of
  ``--throughput-repeats`` runs; in the predictor's default chunks (1,024 graphs per forward pass)
  and in the ``--chunks`` sizes (smaller chunks stay in cache: on one core, 64 were ~2x faster
  than 1,024 in our smoke run).

Targets (PerfSeer reports 248 ms of representation and 2 ms of prediction on an i7-11700): one
model <= 60 ms, throughput >= 500 graphs/s.

The predictor is a bundled one (``perfseer.list_predictors()``; the first, or ``--predictor``).  If
none is bundled, a SeerNet at its paper size (``--hidden`` to change it) is trained in-process for
``--train-epochs`` epochs on ``--train-archs`` FBNet architectures (1080 Ti latencies), saved to a
temporary folder and loaded back: its accuracy is meaningless, its cost is that of a real one.  The
output says which was used.  Torch runs on ``--threads`` threads (default 1); pin the process with
``taskset``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path


from benchmarks.lib import _training_bench as tb  # noqa: E402

TARGET_ONE_MS = 60.0
TARGET_GRAPHS_S = 500.0


def timed(fn, repeats: int) -> tuple[float, list[float]]:
    """Median seconds of ``repeats`` calls of ``fn`` after one warm-up call, and all the times."""
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts


def get_predictor(args, console):
    """``(predictor, how, load_seconds)``: a bundled predictor, or a SeerNet trained here."""
    from perfseer.runtime.predictor import list_predictors, load_predictor

    if args.predictor:
        t0 = time.perf_counter()
        p = load_predictor(args.predictor)
        return p, f"given predictor {args.predictor}", time.perf_counter() - t0
    bundled = list_predictors()
    if bundled:
        name = bundled[0]["name"]
        t0 = time.perf_counter()
        p = load_predictor(name)
        return p, f"bundled predictor {name} ({p.card['model']['name']})", time.perf_counter() - t0

    from perfseer.fit.recipe import train_predictor

    setting = tb.SETTINGS["fbnet-gpus"]
    view, info = tb.setting_view(setting, args.data_root, args.train_archs, None, devices=["1080ti"])
    cfg = tb.train_config(argparse.Namespace(epochs=args.train_epochs, time_limit=None, patience=20, seed=0,
                                             threads=args.threads))
    tb.log(console, f"no bundled predictor: training SeerNet on {info['architectures']} FBNet architectures "
                    f"(1080ti, {args.train_epochs} epoch(s))")
    t0 = time.perf_counter()
    pred, _ = train_predictor(view, "seernet", devices="1080ti", phase="infer",
                              model_config=tb.model_config("seernet", args.hidden), train_config=cfg,
                              name="bench-seernet-fbnet-1080ti")
    trained_s = time.perf_counter() - t0
    folder = Path(tempfile.mkdtemp(prefix="perfseer-bench-"))
    card = pred.save(folder)
    t0 = time.perf_counter()
    p = load_predictor(card)
    load_s = time.perf_counter() - t0
    params = p.card["model"].get("parameters")
    how = (f"no bundled predictor: SeerNet ({tb.human(params)} parameters) trained here for {args.train_epochs} "
           f"epoch(s) on {info['architectures']} FBNet architectures in {trained_s:.0f} s, saved and re-loaded")
    return p, how, load_s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--predictor", default=None, metavar="NAME|CARD", help="a predictor to time (default: bundled)")
    ap.add_argument("--models", type=tb.parse_list, default=["resnet50"],
                    help="bundled example models to time, comma-separated (default resnet50; also resnet18, "
                         "mobilenet_v3_small, vit_b_16)")
    ap.add_argument("--repeats", type=tb.positive(int), default=20, help="timed runs per measurement (default 20)")
    ap.add_argument("--graphs", type=tb.positive(int), default=2000, help="FBNet graphs for throughput (default 2000)")
    ap.add_argument("--throughput-repeats", type=tb.positive(int), default=3, help="default 3")
    ap.add_argument("--chunks", type=lambda t: [tb.positive(int)(x) for x in tb.parse_list(t)], default=[64],
                    metavar="N,N", help="graphs per forward pass to try besides the predictor's default "
                                        "(default 64; the default chunk is NeuralPredictor.batch_size)")
    ap.add_argument("--threads", type=tb.positive(int), default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--hidden", type=tb.positive(int), default=None, help="width of a SeerNet trained here")
    ap.add_argument("--train-archs", type=tb.positive(int), default=300,
                    help="FBNet architectures for a SeerNet trained here (default 300)")
    ap.add_argument("--train-epochs", type=tb.positive(int), default=2, help="its epochs (default 2)")
    ap.add_argument("--data-root", default=None, metavar="DIR", help="folder holding fbnet/ (default: by name, "
                                                                     "else .cache/datasets/fbnet)")
    ap.add_argument("--json", default=None, metavar="OUT", help="write the results as JSON to OUT")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    import perfseer
    from perfseer.sources.load import example_path
    from perfseer.runtime.predictor import UnseenOperatorWarning

    tb.set_threads(args.threads)
    console, err = Console(width=180), Console(stderr=True, width=180)
    try:
        paths = {m: example_path(m) for m in args.models}
    except perfseer.errors.PerfseerError as e:
        ap.error(str(e))
    predictor, how, load_s = get_predictor(args, err)
    targets = [t.key for t in predictor.targets]
    tb.log(err, how)
    rows, results = [], {"predictor": {"how": how, "name": predictor.name, "model": predictor.card["model"]["name"],
                                       "parameters": predictor.card["model"].get("parameters"), "targets": targets,
                                       "load_s": load_s}, "models": {}}
    rows.append(("load the predictor (card + weights)", f"{load_s * 1e3:.1f} ms", "", "", how))

    warnings.simplefilter("ignore", UnseenOperatorWarning)
    for name, path in paths.items():
        size = path.stat().st_size / 2**10
        t_all, ts = timed(lambda: predictor.predict(str(path), batch=1), args.repeats)
        out = predictor.predict(str(path), batch=1)
        pg = perfseer.extract(str(path), batch=1)
        t_ext, _ = timed(lambda: perfseer.extract(str(path), batch=1), args.repeats)
        t_pred, _ = timed(lambda: predictor.predict_graphs([pg.to_pyg()]), args.repeats)
        t_pyg, _ = timed(pg.to_pyg, args.repeats)
        t_live, _ = timed(lambda: pg.to_pyg(live=True), args.repeats)  # what a calibrated card adds once per model
        batches = [1, 8, 32, 64]
        t_multi, _ = timed(lambda: predictor.predict(str(path), batch=batches), args.repeats)
        ok = t_all * 1e3 <= TARGET_ONE_MS
        label = f"{name}.onnx ({size:.0f} KiB, {len(pg.op_types)} nodes)"
        rows.append((f"{label} -> {len(targets)} prediction(s), batch 1", f"{t_all * 1e3:.1f} ms",
                     f"<= {TARGET_ONE_MS:g} ms", "[green]yes[/green]" if ok else "[red]no[/red]",
                     f"min {min(ts) * 1e3:.1f}, max {max(ts) * 1e3:.1f} ms; predicted "
                     + ", ".join(f"{o['value']:.3g} {o['unit']}" for o in out[:3])
                     + (f" (unseen ops: {len(out[0]['unseen_ops'])})" if out and out[0]["unseen_ops"] else "")))
        rows.append(("   of which: ONNX file -> PerfGraph", f"{t_ext * 1e3:.1f} ms", "", "", ""))
        rows.append(("   of which: PyG graph + network", f"{t_pred * 1e3:.2f} ms", "", "", ""))
        rows.append(("   PyG graph alone / with liveness (calibrated cards only)",
                     f"{t_pyg * 1e3:.2f} / {t_live * 1e3:.2f} ms", "", "", ""))
        rows.append((f"{name}.onnx at batch sizes {batches} (one call)", f"{t_multi * 1e3:.1f} ms", "", "",
                     f"{len(batches) * len(targets)} predictions"))
        results["models"][name] = {"path": str(path), "file_kib": size, "nodes": len(pg.op_types),
                                   "end_to_end_ms": t_all * 1e3, "end_to_end_all_ms": [t * 1e3 for t in ts],
                                   "extract_ms": t_ext * 1e3, "graph_and_network_ms": t_pred * 1e3,
                                   "pyg_ms": t_pyg * 1e3, "pyg_with_liveness_ms": t_live * 1e3,
                                   "four_batches_ms": t_multi * 1e3, "meets_target": ok}

    setting = tb.SETTINGS["fbnet-gpus"]
    view, _ = tb.setting_view(setting, args.data_root, None, None, devices=["1080ti"])
    idx = sorted({int(g) for g in view.labels["graph"]})[: args.graphs]
    graphs = [view.graphs[i] for i in idx]
    nodes = sum(g.num_nodes for g in graphs) / len(graphs)
    default_chunk = getattr(predictor.net, "batch_size", None)
    chunks = [default_chunk] + [c for c in args.chunks if c != default_chunk] if default_chunk else [None]
    results["throughput"] = []
    for chunk in chunks:
        if chunk is not None:
            predictor.net.batch_size = chunk
        t_thr, tts = timed(lambda: predictor.predict_graphs(graphs), args.throughput_repeats)
        gps = len(graphs) / t_thr
        ok = gps >= TARGET_GRAPHS_S
        what = "default" if chunk == default_chunk else "set here"
        rows.append((f"batched prediction, {len(graphs)} FBNet graphs"
                     + (f", chunks of {chunk} ({what})" if chunk else ""), f"{gps:,.0f} graphs/s",
                     f">= {TARGET_GRAPHS_S:g} graphs/s", "[green]yes[/green]" if ok else "[red]no[/red]",
                     f"{t_thr:.2f} s per pass ({t_thr / len(graphs) * 1e3:.2f} ms/graph), {nodes:.0f} nodes per graph, "
                     f"{len(targets)} target(s)"))
        results["throughput"].append({"graphs": len(graphs), "mean_nodes": nodes, "chunk": chunk,
                                      "chunk_is_default": chunk == default_chunk, "seconds": t_thr,
                                      "all_seconds": tts, "graphs_per_s": gps, "meets_target": ok})
    if default_chunk:
        predictor.net.batch_size = default_chunk

    t = Table(title=f"perfseer prediction overhead ({tb.environment()['processor']}, {args.threads} torch thread(s))")
    for c, just in (("measurement", "left"), ("median", "right"), ("target", "right"), ("met", "center"),
                    ("detail", "left")):
        t.add_column(c, justify=just)
    for r in rows:
        t.add_row(*r)
    t.caption = f"predictor: {how}; medians of {args.repeats} runs (throughput: {args.throughput_repeats})"
    console.print(t)
    if args.json:
        tb.write_json(args.json, {"benchmark": "predict_speed", "environment": tb.environment(),
                                  "args": vars(args), **results})
        tb.log(err, f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    tb.run_main(main)
