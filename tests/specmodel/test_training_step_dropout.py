"""A training step costs the dropouts of a PyTorch module (recorded at export from a training-mode
pass), which its eval-mode graph does not contain; inference and the graph's features are untouched."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import perfseer  # noqa: E402
from perfseer.devices import get_device  # noqa: E402
from perfseer.graph import torch_export  # noqa: E402
from perfseer.sources.load import load_skeleton  # noqa: E402
from perfseer.specmodel import kernels as kt  # noqa: E402
from perfseer.specmodel.backward import backward_kernels  # noqa: E402
from perfseer.specmodel.compose import DROPOUT_NODE, step_kernels  # noqa: E402
from perfseer.runtime.spec import load_spec_model  # noqa: E402

TOKENS, WIDTH, HIDDEN, HEADS = 6, 16, 32, 2


class _Net(nn.Module):
    """A linear layer, an active ``nn.Dropout``, attention with dropout inside SDPA (fused), a
    functional dropout with ``p = 0`` (launches nothing)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.drop, self.fc2 = nn.Linear(WIDTH, HIDDEN), nn.Dropout(0.25), nn.Linear(HIDDEN, WIDTH)

    def forward(self, x):
        h = self.drop(torch.relu(self.fc1(x)))  # (batch, TOKENS, HIDDEN)
        q = h.reshape(h.shape[0], TOKENS, HEADS, HIDDEN // HEADS).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.1 if self.training else 0.0)
        a = a.transpose(1, 2).reshape(h.shape)
        return F.dropout(self.fc2(a), p=0.0, training=self.training)


@pytest.fixture(scope="module")
def graphs():
    net = _Net().train()
    skel = load_skeleton(net, input_shape=(TOKENS, WIDTH))
    assert net.training and all(m.training for m in net.modules())  # the user's module is untouched
    with_dropout = perfseer.extract(net, batch=4, input_shape=(TOKENS, WIDTH))
    real = torch_export.training_dropouts
    torch_export.training_dropouts = lambda *a, **k: None  # the export as it was: no training-mode pass
    try:
        plain_skel = load_skeleton(net, input_shape=(TOKENS, WIDTH))
        plain = perfseer.extract(net, batch=4, input_shape=(TOKENS, WIDTH))
    finally:
        torch_export.training_dropouts = real
    return skel, with_dropout, plain_skel, plain


def test_the_export_records_the_active_dropouts_only(graphs):
    skel, pg, _, _ = graphs
    meta = {p.key: p.value for p in skel.model.metadata_props}
    rec = json.loads(meta[torch_export.META_DROPOUT])
    assert rec["fused"] == 1  # SDPA's dropout_p: inside the attention kernel, no site
    assert [p for p, _ in rec["sites"]] == [0.25]  # p = 0 launches nothing
    assert pg.dropout_elements == (4 * TOKENS * HIDDEN,)
    assert pg.with_batch(2).dropout_elements == (2 * TOKENS * HIDDEN,)


def test_the_eval_mode_graph_and_its_features_are_unchanged(graphs):
    skel, pg, plain_skel, plain = graphs
    assert skel.model.graph == plain_skel.model.graph  # the ONNX graph the cards see
    assert "Dropout" not in pg.op_types
    assert pg.op_types == plain.op_types
    for a in ("x", "u", "edge_index", "edge_attr"):
        np.testing.assert_array_equal(getattr(pg, a), getattr(plain, a))
    assert plain.dropout_elements == ()


def test_a_training_step_gets_dropout_kernels_and_inference_none(graphs):
    _, pg, _, plain = graphs
    infer = step_kernels(pg.x, pg.op_types, "infer", dropout=pg.dropout_elements, edge_index=pg.edge_index)
    assert not (infer["node"] == DROPOUT_NODE).any()
    train = step_kernels(pg.x, pg.op_types, "train", dropout=pg.dropout_elements, edge_index=pg.edge_index)
    d = train[train["node"] == DROPOUT_NODE]
    assert list(d["pass"]) == ["fw", "bw"] and set(d["op"]) == {"Dropout"} and set(d["family"]) == {"vec"}
    n = 4 * TOKENS * HIDDEN
    fw, bw = d.iloc[0], d.iloc[1]
    assert fw["elems"] == n and fw["bytes"] == n * 4 + n * (4 + 1)  # reads x; writes y and the 1-byte mask
    assert bw["bytes"] == backward_kernels(kt.dropout_rows([n]), "dropout")["bytes"][0]
    rest = train[train["node"] != DROPOUT_NODE].reset_index(drop=True)
    base = step_kernels(plain.x, plain.op_types, "train", edge_index=plain.edge_index)
    assert rest.drop(columns=["node"]).equals(base.drop(columns=["node"]))  # nothing else changes


def test_the_spec_model_predicts_the_dropout_in_training_only(graphs):
    _, pg, _, plain = graphs
    sm = load_spec_model()
    rows = {ph: sm.predict(pg, batch=4, device="a100-40gb-pcie", phase=ph, use_route=False)[0]["value"] for ph in ("infer", "train")}
    spec = get_device("a100-40gb-pcie")
    without = sm.graph_latency(plain.x, plain.op_types, spec, phase="train", edge_index=plain.edge_index)
    r = sm.graph_latency(pg.x, pg.op_types, spec, phase="train", edge_index=pg.edge_index,
                         dropout=pg.dropout_elements)
    assert r["latency_ms"] > without["latency_ms"]
    assert r["latency_ms"] - without["latency_ms"] == pytest.approx(
        float(r["kernel_us"][(r["kernel_table"]["node"] == DROPOUT_NODE).to_numpy()].sum()) / 1000)
    assert rows["infer"] == pytest.approx(
        sm.graph_latency(plain.x, plain.op_types, spec, phase="infer", edge_index=plain.edge_index)["latency_ms"])


@pytest.mark.parametrize("attention, sites, fused", [("eager", 1 + 3 * 2, 0), ("sdpa", 1 + 2 * 2, 2)])
def test_hf_gpt2_dropouts_as_neusights_traces_show_them(tmp_path, attention, sites, fused):
    """GPT-2 in training mode drops the embeddings, and per layer the attention probabilities
    (eager attention: a kernel of its own; SDPA: inside the fused kernel), the attention output
    and the MLP output: NeuSight's GPT-2 traces have these four dropout modules."""
    pytest.importorskip("transformers")
    import types

    from perfseer.sources import hf

    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2,
           "n_positions": 64, "vocab_size": 100, "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ref = hf.parse_reference(f"{tmp_path / 'config.json'}@{attention}")
    model, config = hf.build_model(ref)
    model.forward = types.MethodType(hf._forward_with(["input_ids"]), model)
    ids = torch.empty((torch_export.BATCH_SENTINEL, 16), dtype=torch.int64, device="meta")
    rec = torch_export.training_dropouts(model, [ids])
    assert not model.training  # left in eval mode, as built
    assert len(rec["sites"]) == sites and rec["fused"] == fused
    shapes = [tuple(s) for _, s in rec["sites"]]
    assert shapes[0] == (torch_export.BATCH_SENTINEL, 16, 32)
    assert ((torch_export.BATCH_SENTINEL, 2, 16, 16) in shapes) == (attention == "eager")
