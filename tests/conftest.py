import pytest


def pytest_addoption(parser):
    parser.addoption("--built", action="store_true", help="check the built website in _build/html")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--built", default=False):
        return
    skip = pytest.mark.skip(reason="needs the built book: run `make bookcheck` (part of `make test`)")
    for item in items:
        if "built" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def one_thread():
    """On a shared 2-core machine intra-op threads wait on each other: one thread is several times faster."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
