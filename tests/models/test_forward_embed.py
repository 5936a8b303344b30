"""``forward_embed``: a prediction and the embedding its head read, from one pass through the trunk."""

import pytest
import torch
from torch_geometric.data import Batch
from test_models_conformance import graphs

from perfseer.models import build_model


@pytest.mark.parametrize("name, kw", [
    ("seernet", {}),
    ("seernet", {"readout": "sum"}),
    ("seernet", {"head_globals": True}),
    ("seernet-multi", {}),
    ("blend", {"members": "seernet[readout=sum]+pmgns+seernet-multi"}),
])
def test_forward_embed_is_forward_and_embed(name, kw):
    torch.manual_seed(0)
    model = build_model(name, hidden_dim=16, head_hidden_dim=16, num_targets=2, **kw).eval()
    batch = Batch.from_data_list(graphs())
    with torch.no_grad():
        out, emb = model.forward_embed(batch)
        torch.testing.assert_close(out, model(batch), rtol=0, atol=0)
        torch.testing.assert_close(emb, model.embed(batch), rtol=0, atol=0)
    assert out.shape == (3, 2) and emb.shape[0] == 3


def test_a_blend_without_an_embedding_member_has_no_forward_embed():
    assert not hasattr(build_model("blend", members="gcn+pmgns", hidden_dim=8, head_hidden_dim=8), "forward_embed")
    assert hasattr(build_model("blend", members="gcn+seernet", hidden_dim=8, head_hidden_dim=8), "forward_embed")


def test_a_blend_with_a_shift_and_a_member_of_weight_0_gives_the_same_prediction_both_ways():
    """The prediction path (``forward_embed``, which the domain check uses) adds the blend's
    shift as ``forward`` does, and leaves out a member of weight 0 while keeping its embedding."""
    torch.manual_seed(0)
    blend = build_model("blend", members="seernet[readout=sum]+seernet+pmgns+pmgns", hidden_dim=16,
                        head_hidden_dim=16, num_targets=2).eval()
    blend.set_weights([0.0, 0.4, 0.0, 0.6])
    blend.set_shift([0.3, -0.2])
    batch = Batch.from_data_list(graphs())
    calls = []
    blend.members[2].register_forward_hook(lambda *a: calls.append("pmgns of weight 0"))
    with torch.no_grad():
        want = 0.4 * blend.members[1](batch) + 0.6 * blend.members[3](batch) + torch.tensor([0.3, -0.2])
        out, emb = blend.forward_embed(batch)
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(blend(batch), want)
        # both SeerNets' embeddings, the unused SeerNet-Sum's included: the card's domain reads them
        torch.testing.assert_close(emb, blend.embed(batch), rtol=0, atol=0)
        assert emb.shape[1] == blend.members[0].embed(batch).shape[1] + blend.members[1].embed(batch).shape[1]
    assert calls == []
