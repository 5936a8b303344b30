"""PCGrad: projecting conflicting gradients in multi-task training (Yu et al., NeurIPS 2020).

SeerNet-Multi (PerfSeer §3.2) predicts several metrics with one shared body and one head per
metric.  Where two tasks' gradients on the shared parameters point in opposite directions
(``g_i . g_j < 0``), plain summation lets one task undo the other; PCGrad removes from each task's
gradient its component along every gradient it conflicts with:

    for each task i:   g_i' = g_i
        for each other task j, in random order:
            if g_i' . g_j < 0:   g_i' = g_i' - (g_i' . g_j / ||g_j||^2) g_j
    shared gradient = sum_i g_i'

(``g_j`` is the *original* gradient of task j, as in Yu et al.'s Algorithm 1.)  Parameters that
only one task reaches (its head) get that task's gradient unchanged.

Example::

    losses = [mse(pred[:, t], y[:, t]) for t in range(T)]
    optimizer.zero_grad()
    pcgrad_backward(losses, list(model.shared_parameters()), list(model.parameters()), rng=random.Random(0))
    optimizer.step()
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from perfseer.errors import PerfseerError


def project_conflicting(grads: Sequence[torch.Tensor], rng: random.Random | None = None) -> list[torch.Tensor]:
    """Each task's flat gradient with its conflicting components projected out.

    Args:
        grads: ``T`` flat gradients ``[P]`` of the shared parameters, one per task.
        rng: source of the random order of the other tasks (``random.Random(0)`` if not given,
            so a call is reproducible).

    Returns:
        ``T`` projected gradients ``[P]`` (new tensors; the inputs are not modified).  Sum them
        for the shared update.

    Example::

        >>> g = project_conflicting([torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])])
        >>> [t.tolist() for t in g]
        [[0.5, 0.5], [0.0, 1.0]]
    """
    rng = rng or random.Random(0)
    originals = [g.detach() for g in grads]
    norms_sq = [float(g @ g) for g in originals]
    out = []
    for i, g in enumerate(originals):
        g = g.clone()
        others = [j for j in range(len(originals)) if j != i]
        rng.shuffle(others)
        for j in others:
            if norms_sq[j] == 0.0:
                continue
            dot = g @ originals[j]
            if dot < 0:
                g = g - (dot / norms_sq[j]) * originals[j]
        out.append(g)
    return out


@dataclass
class ConflictStats:
    """How the tasks' original shared gradients of one step relate (what PCGrad acts on).

    Attributes:
        pairs: task pairs ``i < j`` compared, ``T (T - 1) / 2``.
        conflicting: pairs with a negative cosine similarity (those PCGrad projects).
        mean_cos: mean cosine similarity over the pairs; ``min_cos`` the lowest.
    """

    pairs: int = 0
    conflicting: int = 0
    mean_cos: float = float("nan")
    min_cos: float = float("nan")


def conflict_stats(grads: Sequence[torch.Tensor]) -> ConflictStats:
    """Pairwise cosine similarities of ``T`` flat gradients [P]; a zero gradient conflicts with none.

    Example::

        >>> conflict_stats([torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])]).conflicting
        1
    """
    t = len(grads)
    if t < 2:
        return ConflictStats()
    g = torch.stack([x.detach().reshape(-1) for x in grads])
    norms = g.norm(dim=1)
    cos = (g @ g.T) / (norms[:, None] * norms[None, :]).clamp_min(torch.finfo(g.dtype).tiny)
    i, j = torch.triu_indices(t, t, offset=1)
    pair = cos[i, j]
    return ConflictStats(pairs=int(pair.numel()), conflicting=int((pair < 0).sum()),
                         mean_cos=float(pair.mean()), min_cos=float(pair.min()))


def pcgrad_backward(losses: Sequence[torch.Tensor], shared: Sequence[torch.nn.Parameter],
                    params: Sequence[torch.nn.Parameter] | None = None,
                    rng: random.Random | None = None) -> ConflictStats:
    """Write PCGrad gradients into ``.grad`` (accumulating, like ``backward``).

    Args:
        losses: one scalar loss per task, from one forward pass.
        shared: the parameters every task's loss depends on (SeerNet-Multi's
            ``shared_parameters()``); their gradients are projected.  ``None`` or empty: detect
            them, as the parameters that two or more losses reach.
        params: every trainable parameter (shared ones included); those not in ``shared`` get
            the sum of the tasks' plain gradients, which for a task's own head is its own
            gradient.  Default: ``shared`` only.
        rng: random order of the projections (see :func:`project_conflicting`).

    Returns:
        the :class:`ConflictStats` of the tasks' original shared gradients (empty when no
        parameter is shared).

    Raises:
        PerfseerError: fewer than one loss, or a loss that is not a scalar.
    """
    if len(losses) < 1:
        raise PerfseerError("pcgrad_backward got no losses", "pass one scalar loss per task")
    for t, loss in enumerate(losses):
        if loss.dim() != 0:
            raise PerfseerError(f"loss {t} has shape {tuple(loss.shape)}, expected a scalar",
                                "reduce each task's loss to a scalar (e.g. .mean())")
    shared = list(shared or [])
    params = list(params) if params is not None else list(shared)
    seen = {id(p) for p in shared}
    everything = shared + [p for p in params if id(p) not in seen and p.requires_grad]
    per_task = [torch.autograd.grad(loss, everything, retain_graph=t < len(losses) - 1, allow_unused=True)
                for t, loss in enumerate(losses)]
    if not shared:  # detect: parameters reached by at least two tasks
        reach = [sum(g[k] is not None for g in per_task) for k in range(len(everything))]
        idx_shared = [k for k, r in enumerate(reach) if r >= 2]
    else:
        idx_shared = list(range(len(shared)))
    shared_set = set(idx_shared)

    stats = ConflictStats()
    if idx_shared:
        flats = []
        for grads in per_task:
            flats.append(torch.cat([(grads[k] if grads[k] is not None else torch.zeros_like(everything[k])).reshape(-1)
                                    for k in idx_shared]))
        stats = conflict_stats(flats)
        total = torch.stack(project_conflicting(flats, rng)).sum(0)
        offset = 0
        for k in idx_shared:
            p = everything[k]
            n = p.numel()
            _accumulate(p, total[offset:offset + n].view_as(p))
            offset += n
    for k, p in enumerate(everything):
        if k in shared_set:
            continue
        grads = [g[k] for g in per_task if g[k] is not None]
        if grads:
            _accumulate(p, torch.stack(grads).sum(0))
    return stats


def _accumulate(p: torch.nn.Parameter, g: torch.Tensor) -> None:
    if p.grad is None:
        p.grad = g.detach().clone()
    else:
        p.grad.add_(g.detach())
