import pytest


@pytest.fixture(scope="module")
def one_thread():
    """On a shared 2-core machine intra-op threads wait on each other: one thread is several times faster."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def noisy_pair(config, noise: float):
    """A random float64 target (weights N(0, 0.3): peaked distributions) and a draft that is the target
    plus ``noise``: they agree often, not always. Seeded, so every test file gets the same pair."""
    import torch

    from specnotes.tiny.model import Transformer

    torch.manual_seed(0)
    target = Transformer(config).double().eval()
    for p in target.parameters():
        if p.dim() >= 2:
            p.data.normal_(0, 0.3)
    draft = Transformer(config).double().eval()
    draft.load_state_dict(target.state_dict())
    for p in draft.parameters():
        if p.dim() >= 2:
            p.data.add_(noise * torch.randn_like(p))
    return target, draft
