"""PCGrad on hand-made gradients with known projections."""

import random

import pytest
import torch

from perfseer.errors import PerfseerError
from perfseer.fit.pcgrad import conflict_stats, pcgrad_backward, project_conflicting


def close(a, b):
    return torch.allclose(a, torch.tensor(b, dtype=a.dtype), atol=1e-7)


def test_conflicting_pair_is_projected_onto_normal_planes():
    g1, g2 = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])  # g1 . g2 = -1 < 0
    p1, p2 = project_conflicting([g1, g2])
    # g1 - (g1.g2 / |g2|^2) g2 = [1, 0] + 0.5 [-1, 1];  g2 - (g2.g1 / |g1|^2) g1 = [-1, 1] + [1, 0]
    assert close(p1, [0.5, 0.5]) and close(p2, [0.0, 1.0])
    assert float(p1 @ g2) == pytest.approx(0.0) and float(p2 @ g1) == pytest.approx(0.0)
    assert close(g1, [1.0, 0.0])  # inputs untouched


def test_non_conflicting_gradients_are_unchanged():
    g1, g2 = torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0])
    p1, p2 = project_conflicting([g1, g2])
    assert torch.equal(p1, g1) and torch.equal(p2, g2)
    orthogonal = project_conflicting([torch.tensor([1.0, 0.0]), torch.tensor([0.0, 3.0])])
    assert close(orthogonal[0], [1.0, 0.0]) and close(orthogonal[1], [0.0, 3.0])


def test_three_tasks_in_any_order():
    g = [torch.tensor([1.0, 0.0, 0.0]), torch.tensor([-1.0, 1.0, 0.0]), torch.tensor([0.0, 0.0, 1.0])]
    for seed in range(4):  # only tasks 1 and 2 conflict, so the order does not matter
        p = project_conflicting(g, random.Random(seed))
        assert close(p[0], [0.5, 0.5, 0.0]) and close(p[1], [0.0, 1.0, 0.0]) and close(p[2], [0.0, 0.0, 1.0])


@pytest.mark.parametrize("declare_shared", [True, False])
def test_backward_projects_shared_and_keeps_task_gradients(declare_shared):
    w = torch.nn.Parameter(torch.tensor([0.3, -0.2]))  # shared
    h1, h2 = torch.nn.Parameter(torch.tensor(2.0)), torch.nn.Parameter(torch.tensor(-1.0))  # heads
    losses = [w @ torch.tensor([1.0, 0.0]) + h1 ** 2, w @ torch.tensor([-1.0, 1.0]) + 3 * h2]
    stats = pcgrad_backward(losses, [w] if declare_shared else None, [w, h1, h2], rng=random.Random(0))
    assert close(w.grad, [0.5, 1.5])  # [0.5, 0.5] + [0, 1]
    assert close(h1.grad, 4.0) and close(h2.grad, 3.0)  # each head: its own task's gradient
    # the shared gradients [1, 0] and [-1, 1] conflict: cosine -1/sqrt(2)
    assert (stats.pairs, stats.conflicting) == (1, 1) and stats.mean_cos == pytest.approx(-2 ** -0.5)


def test_conflict_stats_counts_pairs_with_negative_cosine():
    g = [torch.tensor([1.0, 0.0, 0.0]), torch.tensor([-1.0, 1.0, 0.0]), torch.tensor([0.0, 0.0, 2.0])]
    s = conflict_stats(g)  # cosines: (0,1) -0.707, (0,2) 0, (1,2) 0
    assert (s.pairs, s.conflicting) == (3, 1)
    assert s.min_cos == pytest.approx(-2 ** -0.5) and s.mean_cos == pytest.approx(-2 ** -0.5 / 3)
    assert conflict_stats([torch.zeros(3), torch.tensor([1.0, 0.0, 0.0])]).conflicting == 0  # zero gradient
    assert conflict_stats([torch.ones(2)]).pairs == 0


def test_backward_refuses_non_scalar_losses():
    w = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(PerfseerError, match="scalar"):
        pcgrad_backward([w * 2], [w])
    with pytest.raises(PerfseerError, match="no losses"):
        pcgrad_backward([], [w])
