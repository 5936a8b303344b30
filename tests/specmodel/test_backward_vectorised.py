"""The column-wise backward pass (``backward_table``, used by ``step_kernels``) gives the same
kernel tables as the per-kernel rules it replaced (kept here as the reference), to 1e-9 relative."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import perfseer
from perfseer.specmodel import kernels as kt
from perfseer.specmodel.backward import PASS_THROUGH, backward_kernels
from perfseer.specmodel.compose import OPTIMIZER_BYTES, PASS_THROUGH_OPS, PRECISION_BYTES, node_kernels, step_kernels


def _reference_backward(fw: pd.DataFrame, fn: str = "") -> pd.DataFrame:
    """The per-row rules as they were before the column-wise rewrite (one kernel table per row)."""
    parts = []
    for _, r in fw.iterrows():
        db, fam = r["dtype_bytes"], r["family"]
        if fam == "gemm":
            B, M, N, K = r["B"], r["M"], r["N"], r["K"]
            shared = r["weights"] > 0
            parts.append(kt.gemm_rows(B, M, K, N, dtype_bytes=db, shared_b=float(shared)))
            if shared:
                parts.append(kt.gemm_rows(1, K, N, B * M, dtype_bytes=db))
            else:
                parts.append(kt.gemm_rows(B, K, N, M, dtype_bytes=db))
            if r["flops"] > 2 * B * M * N * K * 1.0000001:
                parts.append(kt.vec_rows(B * M * N, 1, 1, dtype_bytes=db, read_bytes=B * M * N * db, write_bytes=N * db))
        elif fam == "conv":
            for m, n, k in ((r["M"], r["K"], r["N"]), (r["N"], r["K"], r["M"])):
                g = kt.gemm_rows(r["B"], m, n, k, dtype_bytes=db)
                g["family"], g["kernel"], g["weights"] = "conv", r["kernel"], 0.0
                parts.append(g)
        elif fam == "vec":
            if fn in PASS_THROUGH or r["inputs"] == 0:
                continue
            n = r["elems"]
            ins = max(r["inputs"], 1.0)
            t = kt.vec_rows(n, ins + 1, max(r["flops"] / max(n, 1), 1.0), dtype_bytes=db,
                            read_bytes=(ins + 1) * n * db, write_bytes=ins * n * db)
            t["kernel"], t["M"], t["N"], t["K"] = r["kernel"], r["M"], r["N"], r["K"]  # a depthwise one's shape
            parts.append(t)
        elif fam == "ln":
            t = kt.rowwise_rows("ln", r["rows"], r["cols"], dtype_bytes=db)
            t["bytes"] *= 2.0
            t["flops"] *= 2.0
            parts.append(t)
            parts.append(kt.vec_rows(r["rows"] * r["cols"], 2, 2, dtype_bytes=db,
                                     read_bytes=2 * r["rows"] * r["cols"] * db, write_bytes=2 * r["cols"] * db))
        elif fam == "softmax":
            t = kt.rowwise_rows("softmax", r["rows"], r["cols"], dtype_bytes=db)
            t["bytes"] *= 1.5
            parts.append(t)
    if not parts:
        return kt.empty_table()
    out = pd.concat(parts, ignore_index=True)
    return out[np.isfinite(out["flops"])].reset_index(drop=True)


def _reference_step(x, op_types, precision, optimizer, params, edge_index, dropout) -> pd.DataFrame:
    fw = node_kernels(x, op_types, precision, edge_index)
    fw["pass"] = "fw"
    parts = [fw]
    for (node, op), rows in fw.groupby(["node", "op"], sort=False):
        fn = "add" if op in PASS_THROUGH_OPS else op.lower()
        b = _reference_backward(rows.drop(columns=["node", "op", "pass", "attn"]), fn)
        if len(b):
            b["node"], b["op"], b["pass"], b["attn"] = node, op, "bw", rows["attn"].iloc[0]
            parts.append(b)
    elems = np.asarray(list(dropout), dtype=float)
    elems = elems[elems > 0]
    if len(elems):
        d = kt.dropout_rows(elems, dtype_bytes=PRECISION_BYTES[precision])
        b = _reference_backward(d, "dropout")
        for t, p in ((d, "fw"), (b, "bw")):
            t["node"], t["op"], t["pass"], t["attn"] = -2, "Dropout", p, 0
            parts.append(t)
    if params > 0:
        rd, wr = OPTIMIZER_BYTES[optimizer]
        o = kt.vec_rows(params, rd / 4, 4, dtype_bytes=4.0, read_bytes=params * rd, write_bytes=params * wr)
        o["node"], o["op"], o["pass"], o["attn"] = -1, f"optimizer:{optimizer}", "opt", 0
        parts.append(o)
    return pd.concat(parts, ignore_index=True)


def _assert_same(new: pd.DataFrame, ref: pd.DataFrame):
    assert list(new.columns) == list(ref.columns)
    assert len(new) == len(ref)
    for c in new.columns:
        a, b = new[c].to_numpy(), ref[c].to_numpy()
        if c in ("family", "op", "pass"):
            assert (a == b).all(), c
        else:
            np.testing.assert_allclose(a.astype(float), b.astype(float), rtol=1e-9, atol=0, err_msg=c)
    if "node" in new:
        assert new["node"].dtype == ref["node"].dtype


@pytest.fixture(scope="module")
def graphs():
    # a CNN with biases-free convs and a linear head, a depthwise CNN, a transformer (attention, ln, softmax, biases)
    return {n: perfseer.extract(f"example:{n}", batch=2) for n in ("resnet18", "mobilenet_v3_small", "vit_b_16")}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_training_step_tables_match_the_per_kernel_rules(graphs, precision):
    for name, pg in graphs.items():
        drop = [1000.0, 0.0, 4096.0] if name == "vit_b_16" else pg.dropout_elements
        new = step_kernels(pg.x, pg.op_types, "train", precision, "adamw", float(pg.params), pg.edge_index, drop)
        ref = _reference_step(pg.x, pg.op_types, precision, "adamw", float(pg.params), pg.edge_index, drop)
        assert (new["pass"] == "bw").sum() > 0, name
        _assert_same(new, ref)


def test_backward_kernels_of_single_operations_match():
    tables = [(kt.gemm_rows([2, 1], [8, 64], [16, 3], [4, 5], bias=[1, 0], shared_b=[1, 0]), "matmul"),
              (kt.conv_rows(2, 3, 8, 3, 16, 16, 1, 1), "conv"),
              (kt.vec_rows([1000, 10], [2, 0], [1, 3]), "mul"), (kt.vec_rows(1000, 2, 1), "add"),
              (kt.rowwise_rows("ln", [4, 8], [64, 32]), "layernormalization"),
              (kt.rowwise_rows("softmax", 16, 128, dtype_bytes=2.0), "softmax"),
              (kt.dropout_rows([100.0, 5.0]), "dropout"), (kt.empty_table(), "relu")]
    for t, fn in tables:
        new, ref = backward_kernels(t, fn), _reference_backward(t, fn)
        if len(ref):
            _assert_same(new, ref)
        else:
            assert not len(new), fn


def _reference_bias_adds(x, ops, edge_index):
    from perfseer.specmodel.compose import _I, _one_weight_matrix

    ops = np.asarray(list(ops), dtype=object)
    e = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    wb, kin, outb = (x[:, _I[c]].astype(float) for c in ("weight_bytes", "in_features", "output_bytes"))
    one = _one_weight_matrix(x)
    out_degree = np.bincount(e[0], minlength=len(ops)) if e.size else np.zeros(len(ops), dtype=np.int64)
    found = {}
    for src, dst in e.T:
        if (ops[dst] == "Add" and ops[src] == "MatMul" and one[src] and out_degree[src] == 1 and wb[dst] > 0
                and abs(wb[dst] * kin[src] - wb[src]) <= 0.01 * wb[src] and outb[dst] == outb[src] and dst not in found):
            found[int(dst)] = int(src)
    return found


def test_linear_bias_adds_match_the_edge_loop(graphs):
    from perfseer.specmodel.compose import linear_bias_adds

    for name, pg in graphs.items():
        assert linear_bias_adds(pg.x, pg.op_types, pg.edge_index) == _reference_bias_adds(pg.x, pg.op_types, pg.edge_index)
    assert linear_bias_adds(graphs["vit_b_16"].x, graphs["vit_b_16"].op_types, graphs["vit_b_16"].edge_index)


def test_spec_model_cache_gives_the_uncached_answer(graphs):
    from perfseer.devices import get_device
    from perfseer.runtime.spec import load_spec_model

    sm = load_spec_model()
    pg = graphs["vit_b_16"]
    for dev in ("a100-40gb", "l4"):
        spec = get_device(dev)
        for phase in ("infer", "train"):
            kw = dict(phase=phase, precision="fp16", params=float(pg.params), edge_index=pg.edge_index)
            sm._tables.clear(), sm._us.clear()
            cold = sm.graph_latency(pg.x, pg.op_types, spec, **kw)
            cold["kernel_table"]["flops"] *= 0  # a caller modifying its answer does not touch the cache
            cold["kernel_us"][:] = 0
            warm = sm.graph_latency(pg.x, pg.op_types, spec, **kw)
            ref = _reference_step(pg.x, pg.op_types, "fp16", "adamw", float(pg.params), pg.edge_index, ()) \
                if phase == "train" else None
            if ref is not None:
                _assert_same(warm["kernel_table"], ref)
            assert warm["kernel_us"].sum() > 0 and warm["kernel_table"]["flops"].sum() > 0
            dev_frame = kt.device_frame([spec] * len(warm["kernel_table"]), ["fp16"] * len(warm["kernel_table"]),
                                        warm["kernel_table"]["family"])
            us = sm.kernels.predict(warm["kernel_table"].drop(columns=["node", "op", "pass"]), dev_frame)
            np.testing.assert_allclose(warm["kernel_us"], us, rtol=1e-12)
            by_pass = warm["kernel_table"].assign(us=us).groupby("pass")["us"].sum() / 1000
            assert warm["by_pass"] == pytest.approx(by_pass.to_dict(), rel=1e-12)
            assert list(warm["by_pass"]) == list(by_pass.index)
    # a different graph (another batch) is another entry
    other = sm.graph_latency(pg.with_batch(8).x, pg.op_types, get_device("l4"), edge_index=pg.edge_index)
    assert other["latency_ms"] != sm.graph_latency(pg.x, pg.op_types, get_device("l4"), edge_index=pg.edge_index)["latency_ms"]
