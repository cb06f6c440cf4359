import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """EMBER tests use tiny matrices: on a busy 2-core machine, multi-threaded BLAS/LAPACK on them is
    ~100x slower (thread hand-off), so run them single-threaded (runs after the root conftest's setting)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
