"""The spec model on NeuSight's end-to-end workloads through the user-facing path: perfseer's own
ONNX graph of each model (``hf:`` + NeuSight's config file), next to the per-operator-trace path
that ``benchmarks/lib/spec_neusight.py`` / ``spec_neusight_amd.py`` score.

For every labelled end-to-end run of NeuSight's training GPUs (NVIDIA A100-40GB PCIe, T4, P100,
P4, V100; AMD MI100, MI210), inference and training, the model is built from NeuSight's own
configuration (``models/<stem>.json``) as ``hf:/path/config.json@eager`` at the label's sequence
length and batch size, and the bundled spec card predicts it at FP32
(:meth:`perfseer.runtime.spec.SpecModel.graph_latency`, the composition ``perfseer predict
--basis spec`` uses).  The same card predicts the same run from NeuSight's trace
(``spec_neusight.predict_workload``).  Roofline is summed over the graph's kernels.

Which model NeuSight measured is read from its traces, and matched:

* the head: the trace's last modules.  BERT inference ends in ``bert.pooler`` + ``classifier``
  with a ``(batch, 2)`` output: ``BertForSequenceClassification`` (2 labels), not the
  ``BertLMHeadModel`` its config names; BERT training ends in ``cls.predictions.decoder`` +
  ``cls.seq_relationship``: ``BertForPreTraining``.  GPT-2 / GPT-3 / OPT end in ``lm_head``: the
  config's own ``GPT2LMHeadModel`` / ``OPTForCausalLM``.  The script writes a copy of the config
  with that ``architectures[0]`` (the class ``hf:`` builds) and checks every trace against it.
* the attention: every trace has explicit ``matmul``/``softmax`` nodes and no
  ``scaled_dot_product_attention``: HF's eager attention, so ``@eager``.  ``--attention sdpa``
  adds the default form (``@sdpa``) as a second graph column.
* the step: NeuSight's ``e2e_latency`` is forward + backward (``fw_latency + bwall_latency``), no
  optimizer: the graph's training step is predicted without the optimizer pass (``params=0``);
  its predicted optimizer time is reported beside it (``opt_ms``, what ``perfseer predict --phase
  train`` adds).
* dropout: NeuSight's training runs are in ``model.train()`` and launch every dropout (forward and
  backward); the exported graph is eval-mode, without them.  The export records the training-mode
  dropouts (``PerfGraph.dropout_elements``) and the training step costs them (``graph_dropout_ms``,
  beside the trace path's ``trace_dropout_ms``).

The bundled card's kernel model was trained on all five NVIDIA GPUs' kernels: on them this is
in-distribution (the leave-one-GPU-out figures are ``spec_neusight.py``'s); MI100 / MI210 are
unseen.  Nothing is fitted here.  Switch-XL (``switchxl4``) does not export (docs/transformers.md)
and has no trace; ``-fusion`` (torch.compile) and 4-GPU labels are not single-GPU eager runs:
they are listed as skipped.

Exported skeletons (no weights) are cached as ONNX under ``--cache`` (resumable).

    python -m benchmarks.lib.spec_neusight_graph --data ../shared/datasets/neusight \\
        --json benchmarks/data/spec/spec_neusight_graph.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.lib import spec_neusight as sn  # noqa: E402

# the class NeuSight measured, by (config stem, phase), read from its traces' last modules (checked)
HEAD_CLASS = {("bert_large", "infer"): "BertForSequenceClassification",
              ("bert_large", "train"): "BertForPreTraining"}
# trace module names that identify each head
HEAD_NODES = {"BertForSequenceClassification": ("bert_pooler_dense", "classifier"),
              "BertForPreTraining": ("cls_predictions_decoder", "cls_seq_relationship"),
              "GPT2LMHeadModel": ("lm_head",), "OPTForCausalLM": ("lm_head",)}
LABEL_RE = re.compile(r"(.+)-(inf|train)-(\d+)-(\d+)(?:-(.+))?\.json")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets" / "neusight"))
    ap.add_argument("--card", default=None, help="spec card (default: the bundled one)")
    ap.add_argument("--attention", default="eager", help="graph attention forms, comma-separated: eager[,sdpa]")
    ap.add_argument("--cache", default=".cache/spec_neusight_graph", help="exported skeletons (ONNX, no weights)")
    ap.add_argument("--gpus", default=None, help="registry names, comma-separated (default: all seven)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch

    from perfseer.devices import get_device
    from perfseer.specmodel import kernels as kt
    from perfseer.specmodel import neusight as ns
    from perfseer.specmodel.compose import DROPOUT_NODE
    from perfseer.runtime.spec import load_spec_model

    torch.set_num_threads(1)
    root = Path(args.data)
    sm = load_spec_model(args.card)
    trained_on = set((sm.card.get("training") or {}).get("devices") or [])
    dirs = {**ns.LABEL_DIRS, **ns.AMD_LABEL_DIRS}
    if args.gpus:
        dirs = {k: v for k, v in dirs.items() if v in args.gpus.split(",")}
    attentions = args.attention.split(",")
    workloads = {(w.device, w.name): w for w in ns.load_workloads(root, label_dirs=dirs)}
    graphs = _Graphs(root, Path(args.cache))
    rows, skipped = [], []
    for folder, dev in dirs.items():
        spec = get_device(dev)
        for f in sorted((root / "labels" / folder).glob("*.json")):
            m = LABEL_RE.fullmatch(f.name)
            if not m:
                continue
            stem, phase = m.group(1), "infer" if m.group(2) == "inf" else "train"
            seq, batch, option = int(m.group(3)), int(m.group(4)), m.group(5)
            name = f"{stem}-{m.group(2)}-{seq}-{batch}"
            if option or stem == "switchxl4":
                skipped.append({"gpu": dev, "label": f.name, "why": f"-{option}: not a single-GPU eager run" if option
                                else "Switch-XL does not export (docs/transformers.md) and has no trace"})
                continue
            meta = json.loads(f.read_text())
            row = {"gpu": dev, "vendor": "AMD" if folder.startswith("AMD") else "NVIDIA",
                   "in_training_data": dev in trained_on, "workload": name, "model": stem, "phase": phase,
                   "seq_len": seq, "batch": batch, "measured_ms": float(meta["e2e_latency"])}
            w = workloads.get((dev, name))
            cls = graphs.head_class(stem, phase)
            if w is not None:
                _check_trace(w, cls)
                t = sn.predict_workload(sm.kernels, w, spec)
                row.update(trace_ms=t["spec_ms"], trace_roofline_ms=t["roofline_ms"],
                           trace_kernels=float(w.trace["scale"].sum()),
                           trace_by_family={k: v["spec_ms"] for k, v in t["by_family"].items()},
                           trace_dropout_ms=_dropout_ms(sm.kernels, w, spec))
            for att in attentions:
                g = graphs.get(stem, phase, att, seq, batch)
                r = sm.graph_latency(g.x, g.op_types, spec, phase=phase, precision="fp32", params=0.0,
                                     edge_index=g.edge_index, dropout=g.dropout_elements)
                tab = r["kernel_table"]
                drop = (tab["node"] == DROPOUT_NODE).to_numpy()
                tf, tm = kt.roofline_us(tab, kt.device_frame([spec] * len(tab), ["fp32"] * len(tab), tab["family"]))
                sfx = "" if att == attentions[0] else f"_{att}"
                row.update({f"graph_ms{sfx}": r["latency_ms"], f"graph_roofline_ms{sfx}": float(np.maximum(tf, tm).sum()) / 1000,
                            f"graph_kernels{sfx}": r["kernels"], f"graph_by_family{sfx}": r["by_family"],
                            f"graph_class{sfx}": cls, f"graph_macs{sfx}": float(g.summary()["macs"]),
                            f"graph_dropout_sites{sfx}": len(g.dropout_elements),
                            f"graph_dropout_ms{sfx}": float(r["kernel_us"][drop].sum()) / 1000})
                if phase == "train" and att == attentions[0]:
                    o = sm.graph_latency(g.x, g.op_types, spec, phase=phase, precision="fp32", params=float(g.params),
                                         edge_index=g.edge_index, dropout=g.dropout_elements)
                    row["opt_ms"] = o["by_pass"].get("opt", 0.0)
            rows.append(row)
            print(f"{dev} {name}: measured {row['measured_ms']:.1f}, graph {row['graph_ms']:.1f}, "
                  f"trace {row.get('trace_ms', float('nan')):.1f}", file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    for c in ("graph_ms", "trace_ms", "graph_roofline_ms") + tuple(f"graph_ms_{a}" for a in attentions[1:]):
        df[c.replace("_ms", "_err_pct")] = (df[c] / df["measured_ms"] - 1).abs() * 100
    df["graph_over_trace"] = df["graph_ms"] / df["trace_ms"]
    print(workload_table(df, attentions))
    print()
    print(gpu_table(df))
    print()
    print(family_table(df))
    if skipped:
        print(f"\nskipped {len(skipped)} labels: " + "; ".join(sorted({s['why'] for s in skipped})))
    if args.json:
        cmd = "python -m benchmarks.lib.spec_neusight_graph " + " ".join(argv if argv is not None else sys.argv[1:])
        sn._atomic_json(args.json, {"command": cmd, "card": sm.name, "card_training_devices": sorted(trained_on),
                                    "attention": attentions, "head_class": {f"{k[0]}-{k[1]}": v for k, v in HEAD_CLASS.items()},
                                    "workloads": df.to_dict("records"), "skipped": skipped})
    return 0


class _Graphs:
    """perfseer's PerfGraph of a NeuSight model through ``hf:CONFIG.json@ATTENTION``; the exported
    skeleton cached as ONNX by (config, class, attention, sequence length)."""

    def __init__(self, root: Path, cache: Path):
        self.root, self.cache = root, cache
        self.skeletons: dict = {}

    def head_class(self, stem: str, phase: str) -> str:
        cfg = json.loads((self.root / "models" / f"{stem}.json").read_text())
        return HEAD_CLASS.get((stem, phase), cfg["architectures"][0])

    def config_path(self, stem: str, phase: str) -> Path:
        """NeuSight's config with ``architectures[0]`` set to the class NeuSight measured."""
        cfg = json.loads((self.root / "models" / f"{stem}.json").read_text())
        cls = self.head_class(stem, phase)
        path = self.cache / "configs" / f"{stem}-{cls}" / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({**cfg, "architectures": [cls]}, indent=1)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
        return path

    def get(self, stem: str, phase: str, attention: str, seq: int, batch: int):
        from perfseer.features.perfgraph import build_perfgraph
        from perfseer.graph.extract import extract_graph
        from perfseer.sources.hf import export_hf_model
        from perfseer.graph.onnx_io import read_skeleton
        from perfseer.graph.torch_export import META_DROPOUT

        cls = self.head_class(stem, phase)
        key = (stem, cls, attention, seq)
        if key not in self.skeletons:
            onnx_path = self.cache / f"{stem}-{cls}-{attention}-{seq}.onnx"
            if onnx_path.is_file() and not any(p.key == META_DROPOUT for p in read_skeleton(onnx_path).model.metadata_props):
                onnx_path.unlink()  # cached before the export recorded the training-mode dropouts
            if not onnx_path.is_file():
                t0 = time.time()
                skel = export_hf_model(f"{self.config_path(stem, phase)}@{attention}", seq_len=seq)
                onnx_path.write_bytes(skel.model.SerializeToString())
                print(f"  exported {onnx_path.name} in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
            self.skeletons[key] = read_skeleton(onnx_path)
        return build_perfgraph(extract_graph(self.skeletons[key], batch=batch))


def _dropout_ms(model, w, spec) -> float:
    """The trace path's predicted time of the dropout kernels (forward and backward; training
    only: at inference a dropout launches nothing), which an eval-mode graph does not have."""
    from perfseer.specmodel import kernels as kt

    k = w.trace[w.trace["node"].str.contains("dropout")]
    if not len(k):
        return 0.0
    d = kt.device_frame([spec] * len(k), ["fp32"] * len(k), k["family"])
    return float((model.predict(k.drop(columns=["scale", "pass", "node"]), d) * k["scale"].to_numpy()).sum()) / 1000


def _check_trace(w, cls: str) -> None:
    """The trace is of class ``cls`` (its head modules are there) with eager attention."""
    names = set(w.node_ms["node"])
    missing = [n for n in HEAD_NODES[cls] if n not in names]
    if missing:
        raise AssertionError(f"{w.device} {w.name}: trace lacks {missing}: not a {cls}")
    if not any(n.startswith("softmax") for n in names) or any("scaled_dot_product" in n for n in names):
        raise AssertionError(f"{w.device} {w.name}: not HF's eager attention")


# -- tables --------------------------------------------------------------------------------------
def workload_table(df: pd.DataFrame, attentions) -> str:
    extra = [f"graph @{a} ms" for a in attentions[1:]]
    lines = ["| GPU | workload | measured ms | graph ms | trace ms | graph roofline ms | graph / trace | "
             "graph err % | trace err % | " + "".join(f"{e} | " for e in extra) + "kernels graph / trace | "
             "graph dropout ms | trace dropout ms |", "| --- " * (12 + len(extra)) + "|"]
    for r in df.itertuples():
        ex = "".join(f"{getattr(r, f'graph_ms_{a}'):.1f} | " for a in attentions[1:])
        lines.append(f"| {r.gpu} | {r.workload} | {r.measured_ms:.1f} | {r.graph_ms:.1f} | {r.trace_ms:.1f} | "
                     f"{r.graph_roofline_ms:.1f} | {r.graph_over_trace:.3f} | {r.graph_err_pct:.1f} | "
                     f"{r.trace_err_pct:.1f} | {ex}{r.graph_kernels} / {r.trace_kernels:.0f} | {r.graph_dropout_ms:.1f} | "
                     f"{r.trace_dropout_ms:.1f} |")
    return "\n".join(lines)


def gpu_table(df: pd.DataFrame) -> str:
    lines = ["| GPU | card trained on its kernels | phase | runs | graph path MAPE % | trace path MAPE % | "
             "graph roofline MAPE % | graph / trace (min-max) | runs with graph/trace off by > 10 % | "
             "graph's dropout / trace's dropout |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (g, ph), s in df.groupby(["gpu", "phase"], sort=False):
        lines.append(_gpu_line(g, "yes" if s["in_training_data"].iloc[0] else "no (unseen)", ph, s))
    for ph, s in df.groupby("phase"):
        lines.append(_gpu_line("all", "", ph, s))
    return "\n".join(lines)


def _gpu_line(g, seen, ph, s) -> str:
    ratio = s["graph_over_trace"]
    return (f"| {g} | {seen} | {ph} | {len(s)} | {s.graph_err_pct.mean():.1f} | {s.trace_err_pct.mean():.1f} | "
            f"{s.graph_roofline_err_pct.mean():.1f} | {ratio.mean():.3f} ({ratio.min():.3f}-{ratio.max():.3f}) | "
            f"{int(((ratio - 1).abs() > 0.10).sum())} | "
            f"{s.graph_dropout_ms.sum() / s.trace_dropout_ms.sum() if s.trace_dropout_ms.sum() > 0 else float('nan'):.3f} |")


def family_table(df: pd.DataFrame) -> str:
    """Per model and phase, summed over the GPUs: predicted ms per kernel family, graph vs trace."""
    lines = ["| model | phase | family | graph ms | trace ms | graph / trace |", "| --- | --- | --- | --- | --- | --- |"]
    for (m, ph), s in df.groupby(["model", "phase"], sort=False):
        agg: dict = {}
        for r in s.itertuples():
            for f, v in r.graph_by_family.items():
                agg.setdefault(f, [0.0, 0.0])[0] += v
            for f, v in r.trace_by_family.items():
                agg.setdefault(f, [0.0, 0.0])[1] += v
        for f, (gm, tm) in sorted(agg.items()):
            lines.append(f"| {m} | {ph} | {f} | {gm:.0f} | {tm:.0f} | {gm / tm if tm else float('nan'):.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
