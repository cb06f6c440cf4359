import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """Small matrices on a busy 2-core machine: multi-threaded torch/BLAS is many times slower
    than one thread (thread hand-off), for torch and for scikit-learn's solvers alike."""
    from threadpoolctl import threadpool_limits

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(old)
