import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread is fastest, and immune to OpenMP spinning on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
