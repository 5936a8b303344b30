"""The spec model on an unseen vendor: NeuSight's AMD MI100 / MI210 end-to-end runs, predicted by
the bundled spec card (trained on the five NVIDIA GPUs' kernels only, no AMD measurement).

Every labelled AMD run with a per-operator trace (inference and training; BERT-large, GPT-2
large, GPT-3 XL / 2.7B, OPT-1.3B) is predicted from its trace exactly as
``benchmarks/lib/spec_neusight.py`` predicts a held-out NVIDIA GPU (its ``predict_workload``:
forward kernels, plus the backward kernels for a training step, the traced layer counted
``num_layer`` times), next to roofline on the same kernels.  Two readings of the AMD spec sheet's
FP32 peak for GEMMs: ``vector`` (the registry's ``fp32``, what the spec model uses by default)
and ``matrix`` (its ``fp32_matrix``: rocBLAS/Tensile runs FP32 GEMMs on the matrix cores, at
twice the vector rate; element-wise kernels keep the vector peak either way).  Nothing is
fitted: the card is used as shipped.  At the matrix peak the GEMMs are beyond the card's training
range, so its out-of-range rule (``ood_weight`` 0.5) applies to them; ``matrix-mlp`` shows the MLPs
alone there (``ood_weight`` 1) as a diagnostic of the rule, not as a candidate to choose on these
labels.

Also, if the committed leave-one-GPU-out JSON of ``spec_neusight.py`` is given (``--nvidia-json``):
NeuSight's A100 ``-fusion`` labels (torch.compile'd inference, no trace) next to the unfused
measurement and the same unfused prediction (A100 held out), as a statement of what fusion
changes.  Nothing is fitted to them.

    python -m benchmarks.lib.spec_neusight_amd --data ../shared/datasets/neusight \\
        --json benchmarks/data/spec/spec_neusight_amd.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.lib import spec_neusight as sn  # noqa: E402

PEAKS = ("vector", "matrix")  # the GEMM peak at FP32: the sheet's fp32 or its fp32_matrix
# variant -> (GEMMs at the FP32 matrix peak, ood_weight override or None for the card's own)
VARIANTS = {"vector": (False, None), "matrix": (True, None), "matrix-mlp": (True, 1.0)}
FUSION_GPU = ("NVIDIA_A100-PCIE-40GB", "a100-40gb-pcie")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets" / "neusight"))
    ap.add_argument("--card", default=None, help="spec card (default: the bundled one)")
    ap.add_argument("--nvidia-json", default=str(Path(__file__).resolve().parents[1] / "data" / "spec" / "spec_neusight.json"),
                    help="spec_neusight.py's leave-one-GPU-out JSON, for the A100 fusion comparison ('' to skip)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import copy
    from dataclasses import replace

    import torch

    from perfseer.devices import get_device
    from perfseer.specmodel import neusight as ns
    from perfseer.runtime.spec import load_spec_model

    torch.set_num_threads(1)
    sm = load_spec_model(args.card)
    trained_on = (sm.card.get("training") or {}).get("devices") or []
    workloads = ns.load_workloads(args.data, label_dirs=ns.AMD_LABEL_DIRS)
    assert not set(w.device for w in workloads) & set(trained_on), "an AMD GPU is among the card's training GPUs"
    dtypes = trace_dtypes(args.data, ns.AMD_LABEL_DIRS)
    rows = []
    for variant, (matrix, ood) in VARIANTS.items():
        model = sm.kernels
        if ood is not None:
            model = copy.copy(model)
            model.config = replace(model.config, ood_weight=ood)
        for w in workloads:
            r = sn.predict_workload(model, w, get_device(w.device), matrix_fp32=matrix)
            rows.append({**r, "config": f"bundled, {variant}", "variant": variant})
    df = pd.DataFrame(rows)
    df["spec_err_pct"] = (df["spec_ms"] / df["measured_ms"] - 1).abs() * 100
    df["roofline_err_pct"] = (df["roofline_ms"] / df["measured_ms"] - 1).abs() * 100
    print(f"spec card: {sm.name}, trained on {', '.join(trained_on)}; traces' dtypes: {dtypes}\n")
    print(gpu_table(df))
    print()
    print(model_table(df))
    for variant in VARIANTS:
        print(f"\n### {variant}\n")
        print(sn._workload_table(df[df["variant"] == variant]))
        print()
        print(sn._family_table(df[df["variant"] == variant], roofline=True))
    eff = gemm_efficiency(workloads)
    print()
    print(gemm_table(eff))
    cover = interval_coverage(df, sm.card)
    print()
    print(coverage_table(cover))
    fusion = fusion_rows(args.data, args.nvidia_json) if args.nvidia_json else []
    if fusion:
        print()
        print(fusion_table(fusion))
    cmd = "python -m benchmarks.lib.spec_neusight_amd " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.json:
        sn._atomic_json(args.json, {"command": cmd, "card": sm.name, "card_training_devices": trained_on,
                                    "trace_dtypes": dtypes, "workloads": df.to_dict("records"),
                                    "gemm_efficiency": eff, "interval_coverage": cover, "fusion": fusion})
    return 0


def trace_dtypes(root, label_dirs) -> dict:
    """Count of the traced nodes' ``dtype`` over every trace of these label folders."""
    counts: dict = {}
    for folder in label_dirs:
        for f in sorted((Path(root) / "labels" / folder).glob("*.csv.gz")):
            for k, v in pd.read_csv(f, usecols=["dtype"])["dtype"].astype(str).value_counts().items():
                counts[k] = counts.get(k, 0) + int(v)
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _cells(s: pd.DataFrame, signed: bool = False) -> list[str]:
    """The spec model's MAPE per variant (and its mean signed error), then roofline's per GEMM peak."""
    cells = []
    for v in VARIANTS:
        q = s[s["variant"] == v]
        cells.append(f"{q.spec_err_pct.mean():.1f}")
        if signed:
            cells.append(f"{((q.spec_ms / q.measured_ms - 1) * 100).mean():+.1f}")
    for p in PEAKS:
        cells.append(f"{s[s['variant'] == p].roofline_err_pct.mean():.1f}")
    return cells


def _head(signed: bool = False) -> tuple[str, str]:
    cols = [c for v in VARIANTS for c in ([f"spec {v} %", "signed %"] if signed else [f"spec {v} %"])]
    cols += [f"roofline {p} %" for p in PEAKS]
    return " | ".join(cols), " | ".join("---" for _ in cols)


def gpu_table(df: pd.DataFrame) -> str:
    """Per GPU and phase: MAPE of the spec model (each variant) and of roofline (each GEMM peak)."""
    h, sep = _head()
    lines = [f"| GPU (never seen) | phase | runs | {h} |", f"| --- | --- | --- | {sep} |"]
    n = len(VARIANTS)
    groups = ([((g, ph), s) for (g, ph), s in df.groupby(["gpu", "phase"])]
              + [((g, "all"), s) for g, s in df.groupby("gpu")]
              + [(("both", ph), s) for ph, s in df.groupby("phase")] + [(("both", "all"), df)])
    for (g, ph), s in groups:
        lines.append(f"| {g} | {ph} | {len(s) // n} | " + " | ".join(_cells(s)) + " |")
    return "\n".join(lines)


def model_table(df: pd.DataFrame) -> str:
    """Per model and phase (both GPUs pooled): MAPE and mean signed error (+ = predicted slower)
    of the spec model per variant, and roofline's MAPE."""
    h, sep = _head(signed=True)
    lines = [f"| model | phase | runs | {h} |", f"| --- | --- | --- | {sep} |"]
    d = df.assign(model=df["workload"].str.split("-").str[0])
    for (m, ph), s in d.groupby(["model", "phase"]):
        lines.append(f"| {m} | {ph} | {len(s) // len(VARIANTS)} | " + " | ".join(_cells(s, signed=True)) + " |")
    return "\n".join(lines)


def gemm_efficiency(workloads) -> dict:
    """Per GPU, over its inference traces: the FP32 throughput its GEMM nodes achieved (their
    FLOPs over their measured time), for the linear layers (a weight operand) and the attention
    matmuls, and that as a share of the sheet's vector and matrix FP32 peaks."""
    from perfseer.devices import get_device

    acc: dict = {}
    for w in workloads:
        if w.phase != "infer":
            continue
        k = w.trace[(w.trace["family"] == "gemm") & (w.trace["pass"] == "fw")]
        ms = w.node_ms.set_index("node")
        for kind, part in (("linear", k[k["weights"] > 0]), ("attention", k[k["weights"] == 0])):
            nodes = part["node"].unique()
            a = acc.setdefault((w.device, kind), [0.0, 0.0])
            a[0] += float((part["flops"] * part["scale"]).sum())
            a[1] += float((ms.loc[nodes, "fw_ms"] * ms.loc[nodes, "scale"]).sum())
    out: dict = {}
    for (g, kind), (flops, t_ms) in sorted(acc.items()):
        if t_ms <= 0:
            continue
        spec = get_device(g)
        tf = flops / (t_ms * 1e-3) / 1e12
        out.setdefault(g, {})[kind] = {"tflops": tf, "of_vector_peak": tf / spec.peak("fp32"),
                                       "of_matrix_peak": tf / float(spec.peak_tflops.get("fp32_matrix") or spec.peak("fp32"))}
    return out


def gemm_table(eff: dict) -> str:
    lines = ["| GPU | GEMM nodes (inference traces) | achieved TFLOP/s | share of FP32 vector peak | "
             "share of FP32 matrix peak |", "| --- | --- | --- | --- | --- |"]
    for g, kinds in eff.items():
        for kind, v in kinds.items():
            lines.append(f"| {g} | {kind} | {v['tflops']:.1f} | {v['of_vector_peak']:.2f} | {v['of_matrix_peak']:.2f} |")
    return "\n".join(lines)


def interval_coverage(df: pd.DataFrame, card: dict) -> dict:
    """Does the card's FP32 interval (its conformal q, widened by its ``ood_factor`` where the
    device is outside its domain, as ``perfseer predict`` reports it) hold the measured time?"""
    from perfseer.devices import get_device
    from perfseer.specmodel.trust import OOD_FACTOR, device_reasons

    q = float(card["intervals"]["fp32"]["q"])
    out = {"q": q, "per_variant": {}}
    for v, s in df.groupby("variant", sort=False):
        res = np.abs(np.log(s["measured_ms"].to_numpy() / s["spec_ms"].to_numpy()))
        per = {}
        for g in sorted(s["gpu"].unique()):
            m = (s["gpu"] == g).to_numpy()
            reasons = device_reasons(get_device(g), card["domain"])
            f = float(card.get("ood_factor", OOD_FACTOR)) if reasons else 1.0
            per[g] = {"runs": int(m.sum()), "factor": f, "domain_reasons": reasons,
                      "coverage_pct": float((res[m] <= q * f).mean() * 100),
                      "coverage_unwidened_pct": float((res[m] <= q).mean() * 100)}
        out["per_variant"][v] = per
    return out


def coverage_table(cov: dict) -> str:
    lines = [f"| variant | GPU | runs | card's 90 % interval (q {cov['q']:.3f}, x factor) holds % | factor | "
             "without widening % |", "| --- | --- | --- | --- | --- | --- |"]
    for v, per in cov["per_variant"].items():
        for g, r in per.items():
            lines.append(f"| {v} | {g} | {r['runs']} | {r['coverage_pct']:.1f} | {r['factor']:g} | "
                         f"{r['coverage_unwidened_pct']:.1f} |")
    return "\n".join(lines)


def fusion_rows(root, nvidia_json) -> list[dict]:
    """A100 fusion labels against the unfused measurement and its leave-one-GPU-out prediction."""
    path = Path(nvidia_json)
    if not path.is_file():
        print(f"(no fusion comparison: {path} not found)", file=sys.stderr)
        return []
    logo = json.loads(path.read_text())
    pred = {r["workload"]: r for r in logo["workloads"] if r["gpu"] == FUSION_GPU[1]}
    out = []
    for f in sorted((Path(root) / "labels" / FUSION_GPU[0]).glob("*-fusion.json")):
        name = f.name[: -len("-fusion.json")]
        plain = f.with_name(name + ".json")
        if not plain.is_file() or name not in pred:
            continue
        fused, unfused = json.loads(f.read_text())["e2e_latency"], json.loads(plain.read_text())["e2e_latency"]
        p = pred[name]["spec_ms"]
        out.append({"workload": name, "unfused_ms": unfused, "fused_ms": fused, "spec_unfused_ms": p,
                    "spec_config": pred[name].get("config"), "source": str(path.name)})
    return out


def fusion_table(rows: list[dict]) -> str:
    lines = ["| A100-40GB workload | measured unfused ms | measured torch.compile ms | compiled / unfused - 1 % | "
             "spec (LOGO, unfused) ms | error vs unfused % | error vs compiled % |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['unfused_ms']:.1f} | {r['fused_ms']:.1f} | "
                     f"{(r['fused_ms'] / r['unfused_ms'] - 1) * 100:+.1f} | {r['spec_unfused_ms']:.1f} | "
                     f"{(r['spec_unfused_ms'] / r['unfused_ms'] - 1) * 100:+.1f} | "
                     f"{(r['spec_unfused_ms'] / r['fused_ms'] - 1) * 100:+.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
