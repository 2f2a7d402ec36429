import pytest


@pytest.fixture(scope="module")
def one_thread():
    """On a shared 2-core machine intra-op threads wait on each other: one thread is several times faster."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
