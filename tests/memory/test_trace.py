"""The storage recorder: allocations and frees of real tensors, sizes worked out by hand."""

import torch

from perfseer.memory.trace import StorageTracer


def test_peak_and_free_order():
    tracer = StorageTracer()
    with tracer:
        a = torch.ones(256)          # 1024 B
        b = a * 2                    # 1024 B: peak 2048
        del a                        # freed
        c = b + 1                    # 1024 B: live 2048 again
        del b, c
    t = tracer.close()
    assert t.peak()[0] == 2048
    assert [s for s, _ in t.events] == [1, 1, -1, 1, -1, -1]


def test_views_and_inplace_ops_allocate_nothing():
    tracer = StorageTracer()
    with tracer:
        a = torch.zeros(16, 16)
        v = a.view(256)
        v.add_(1)
        a.t_()
    assert len(tracer.close().allocations) == 1


def test_tensors_saved_for_backward_stay_alive_until_backward():
    x = torch.ones(64, requires_grad=True)
    tracer = StorageTracer()
    with tracer:
        y = x.exp()          # saved for backward (exp's grad is its output)
        z = y.sum()
        del y                # still referenced by the graph
        live_before = sum(tracer.trace.allocations[i].nbytes for s, i in tracer.trace.events if s > 0) - \
            sum(tracer.trace.allocations[i].nbytes for s, i in tracer.trace.events if s < 0)
        z.backward()
        del z
    assert live_before == 256 + 4
    t = tracer.close()
    ops = [a.op for a in t.allocations]
    assert ops[0].startswith("exp")
    freed = {i for s, i in t.events if s < 0}
    assert 0 in freed  # exp's output went when backward released the graph
