import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # These networks are tiny: intra-op threads only add contention on a shared machine
    # (the suite ran 3x slower with 2 threads on 2 busy cores).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
