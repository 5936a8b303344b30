"""Blend: members built from specs, weights fitted on validation, one card like any network."""

import json

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch

from perfseer.errors import PerfseerError
from perfseer.models import build_from_dict, build_model
from perfseer.models.blend import (BlendConfig, fit_log_shift, fit_tied_weights, fit_weights, member_groups,
                                   parse_weights, split_members)


def test_members_split_outside_brackets():
    assert split_members("seernet[readout=sum;dropout=0.1]+pmgns") == ["seernet[readout=sum;dropout=0.1]", "pmgns"]
    assert split_members(" gcn + gin ") == ["gcn", "gin"]


def test_member_configs_take_the_shared_widths_and_their_overrides():
    cfg = BlendConfig(members="seernet[readout=sum]+pmgns", hidden_dim=16, head_hidden_dim=16, num_targets=2)
    (a, ca), (b, cb) = cfg.member_list()
    assert (a, b) == ("seernet", "pmgns")
    assert ca["readout"] == "sum" and ca["hidden_dim"] == ca["head_hidden_dim"] == 16 and ca["num_targets"] == 2
    assert cb["hidden_dim"] == 16 and cb["loss"] == "huber"  # PMGNS keeps its own loss
    # head_hidden_dim 0: each member's own default, as `perfseer train --hidden` leaves the head
    (_, ca), _ = BlendConfig(members="seernet+pmgns", hidden_dim=16).member_list()
    assert ca["hidden_dim"] == 16 and ca["head_hidden_dim"] == 256


@pytest.mark.parametrize("bad, match", [
    (dict(members="seernet"), "name 2 to 4"),
    (dict(members="seernet+gbm"), "not a neural network"),
    (dict(members="seernet+pmgns", weights="0.7,0.7"), "sum to 1"),
    (dict(members="seernet+pmgns", weights="a,b"), "comma-separated"),
    (dict(members="seernet[hidden=3]+pmgns"), "no config field"),
    (dict(members="seernet+pmgns", shift="0.1,0.2"), "need 1 finite"),
    (dict(members="seernet+pmgns", shift="x"), "need 1 finite"),
    (dict(members="pmgns+pmgns", seeds="0"), "need 2 integers"),
    (dict(members="gcn+gin+pmgns+seernet+mlp-node", tie_seeds=True), "of at most 4 kinds"),
    (dict(members="+".join(["gcn", "gin", "pmgns"] * 4 + ["gcn"]), tie_seeds=True), "2 to 12 networks"),
    (dict(members="gcn+gcn+gcn+gcn+gin"), "name 2 to 4"),
])
def test_bad_configs_are_refused(bad, match):
    with pytest.raises(PerfseerError, match=match):
        build_model("blend", **bad)


def test_tied_seeds_allow_three_seeds_of_four_kinds():
    members = "+".join(k for k in ("gcn", "gin", "pmgns", "seernet") for _ in range(3))
    cfg = BlendConfig(members=members, seeds=",".join(["0", "1", "2"] * 4), tie_seeds=True)
    cfg.validate()  # 12 networks, 4 kinds: the i9's round 10 recipe has this shape
    assert len(cfg.member_list()) == 12


def test_default_members_are_the_validation_winner():
    assert [n for n, _ in BlendConfig().member_list()] == ["seernet", "seernet", "pmgns"]
    assert BlendConfig().member_list()[0][1]["readout"] == "sum" and BlendConfig().member_list()[1][1]["readout"] == "graph"


def test_weights_parse_and_renormalise():
    assert parse_weights("0.5,0.5", 2) == [0.5, 0.5]
    assert np.isclose(sum(parse_weights("0.3333,0.3333,0.3334", 3)), 1.0)


def test_fit_weights_finds_the_grid_point_of_the_best_blend():
    rng = np.random.default_rng(0)
    y = np.exp(rng.normal(size=200))
    # member 0 is 20 % high on every row, member 1 20 % low: their geometric mean near 0.5/0.5 is exact
    L = np.log(np.stack([y * 1.2, y / 1.2]))
    assert np.allclose(fit_weights(L, y), [0.5, 0.5])
    # a useless third member gets no weight
    L3 = np.concatenate([L, np.log(y * np.exp(rng.normal(size=200)))[None]])
    assert fit_weights(L3, y)[2] == 0
    with pytest.raises(PerfseerError, match="no finite"):
        fit_weights(L, np.full(200, np.nan))


def test_forward_is_the_weighted_sum_of_the_members():
    from test_models_conformance import graphs

    torch.manual_seed(0)
    blend = build_model("blend", members="seernet[readout=sum]+pmgns", hidden_dim=16, head_hidden_dim=16,
                        num_targets=2).eval()
    blend.set_weights([0.25, 0.75])
    batch = Batch.from_data_list(graphs())
    want = 0.25 * blend.members[0](batch) + 0.75 * blend.members[1](batch)
    torch.testing.assert_close(blend(batch), want)
    assert blend.config.weights == "0.25,0.75"
    twin = build_from_dict("blend", json.loads(json.dumps(blend.config.to_dict())))
    twin.load_state_dict(blend.state_dict())
    torch.testing.assert_close(twin.eval()(batch), blend(batch), rtol=0, atol=0)
    assert blend.embed(batch).shape[0] == 3
    with pytest.raises(PerfseerError, match="one finite weight"):
        blend.set_weights([1.0])


def test_a_blend_without_an_embedding_member_has_no_embed():
    assert not hasattr(build_model("blend", members="gcn+pmgns", hidden_dim=8, head_hidden_dim=8), "embed")
    assert hasattr(build_model("blend", members="gcn+seernet", hidden_dim=8, head_hidden_dim=8), "embed")


def test_fit_log_shift_finds_the_mape_optimal_constant():
    rng = np.random.default_rng(0)
    y = np.exp(rng.normal(size=400))
    # every prediction 10 % high: the best constant is log(1 / 1.1), to the grid step
    assert np.isclose(fit_log_shift(np.log(y * 1.1), y)[0], -np.log(1.1), atol=0.005)
    # unbiased log errors of spread 0.3: MAPE's best constant lies below the median
    b = fit_log_shift(np.log(y) + rng.normal(scale=0.3, size=400), y)[0]
    assert -0.2 < b < 0
    # two targets, one shift each; exact predictions need none
    assert np.allclose(fit_log_shift(np.log(np.stack([y, y * 1.1], 1)), np.stack([y, y], 1)), [0, -0.095], atol=0.006)
    with pytest.raises(PerfseerError, match="no finite"):
        fit_log_shift(np.log(y), np.full(400, np.nan))


def test_the_shift_is_added_to_the_output_and_kept_by_the_config():
    from test_models_conformance import graphs

    torch.manual_seed(0)
    blend = build_model("blend", members="gcn+pmgns", hidden_dim=8, head_hidden_dim=8, num_targets=2).eval()
    batch = Batch.from_data_list(graphs())
    before = blend(batch)
    blend.set_shift([0.5, -0.25])
    torch.testing.assert_close(blend(batch), before + torch.tensor([0.5, -0.25]))
    twin = build_from_dict("blend", json.loads(json.dumps(blend.config.to_dict())))
    twin.load_state_dict(blend.state_dict())
    torch.testing.assert_close(twin.eval()(batch), blend(batch), rtol=0, atol=0)


def test_tied_weights_fit_the_seeds_average_not_the_luckiest_seed():
    rng = np.random.default_rng(1)
    y = np.exp(rng.normal(size=300))
    # seeds 20 % high and 20 % low (their mean is exact) and a useless other member
    L = np.log(np.stack([y * 1.2, y / 1.2, y * np.exp(rng.normal(size=300))]))
    assert member_groups(["pmgns", "pmgns", "gcn"]) == [0, 0, 1]
    assert np.allclose(fit_tied_weights(L, y, [0, 0, 1]), [0.5, 0.5, 0])
    cfg = BlendConfig(members="seernet[readout=sum]+seernet+pmgns+pmgns+pmgns", seeds="0,0,0,1,2", tie_seeds=True)
    assert len(cfg.member_list()) == 5
