"""The Triton rejection kernel (optional ``specnotes[triton]``) against the PyTorch sampler it mirrors, draw for
draw. Without a CUDA device it runs under Triton's interpreter (numpy on the CPU)."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
pytest.importorskip("triton")

from specnotes.sampling.exact import draw_uniforms  # noqa: E402
from specnotes.sampling.fused import sample_from_logits, sample_from_target_logits  # noqa: E402
from specnotes.sampling.triton_sampler import sample_from_logits_triton, sample_from_target_logits_triton  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def case(B, k, V, T, seed):
    g = torch.Generator().manual_seed(seed)
    lq, lp = 1.5 * torch.randn(B, k, V, generator=g), 1.5 * torch.randn(B, k + 1, V, generator=g)
    drafts = torch.multinomial(torch.softmax(lq / T, -1).reshape(-1, V), 1, generator=g).reshape(B, k)
    return [x.to(DEVICE) for x in (drafts, lq, lp, *draw_uniforms(B, k, g))]


@pytest.mark.parametrize(("B", "k", "V", "T"),
                         [(60, 3, 300, 1.0), (40, 4, 50, 0.7), (30, 2, 1000, 1.3), (20, 1, 7, 1.0)])
def test_the_kernel_draws_what_the_pytorch_sampler_draws(B, k, V, T):
    drafts, lq, lp, u, v = case(B, k, V, T, B + V)
    ours = sample_from_logits_triton(drafts, lq, lp, T, uniforms=(u, v), block=64)
    ref = sample_from_logits(drafts, lq, lp, T, uniforms=(u, v))
    assert torch.equal(ours[1], ref[1])  # the same acceptances
    assert (ours[0] == ref[0]).all(1).float().mean() >= 0.98  # the same last token, up to float32 rounding
    assert len(ref[1].unique()) > 1  # ragged: rejections at several positions, and some bonus tokens


@pytest.mark.parametrize(("B", "k", "V", "T"), [(60, 3, 300, 1.0), (30, 2, 1000, 0.7)])
def test_with_the_drafts_probabilities_the_kernel_draws_what_pytorch_draws(B, k, V, T):
    drafts, lq, lp, u, v = case(B, k, V, T, B + V + 1)
    q = torch.softmax(lq / T, -1)
    ours = sample_from_target_logits_triton(drafts, q, lp, T, uniforms=(u, v), block=64)
    ref = sample_from_target_logits(drafts, q, lp, T, uniforms=(u, v))
    assert torch.equal(ours[1], ref[1]) and len(ref[1].unique()) > 1
    assert (ours[0] == ref[0]).all(1).float().mean() >= 0.98
    # and the probabilities are not taken for logits: the same q passed as logits draws otherwise
    wrong = sample_from_logits_triton(drafts, q, lp, T, uniforms=(u, v), block=64)
    assert not (torch.equal(wrong[1], ref[1]) and torch.equal(wrong[0], ref[0]))


def test_the_comparison_catches_a_wrong_temperature():
    drafts, lq, lp, u, v = case(60, 3, 300, 0.7, 1)
    wrong = sample_from_logits_triton(drafts, lq, lp, 1.0, uniforms=(u, v))
    ref = sample_from_logits(drafts, lq, lp, 0.7, uniforms=(u, v))
    assert not (torch.equal(wrong[1], ref[1]) and torch.equal(wrong[0], ref[0]))


def test_greedy_and_k_zero_take_the_pytorch_path():
    drafts, lq, lp, u, v = case(10, 2, 20, 1.0, 2)
    greedy = sample_from_logits_triton(drafts, None, lp, 0.0, uniforms=(u, v))
    assert torch.equal(greedy[0], sample_from_logits(drafts, None, lp, 0.0, uniforms=(u, v))[0])
    tokens, n = sample_from_logits_triton(drafts[:, :0], lq[:, :0], lp[:, :1], 1.0)
    assert tokens.shape == (10, 1) and (n == 0).all()
    with pytest.raises(ValueError):
        sample_from_logits_triton(drafts, lq, lp[:, :2], 1.0)


def test_the_last_token_never_has_weight_zero():
    """The residual max(0, p - q) is 0 past token 9 (p and q share the tail, p is higher on the first 10 tokens);
    every draft is a tail token, rejected (u just under 1), and v just under 1 asks for the end of the CDF, where
    the block sums and the running sum disagree in the last bit: the kernel must still pick one of the first 10,
    never fall back to a token of weight 0."""
    g = torch.Generator().manual_seed(0)
    B, V = 64, 300
    lp = 2 * torch.randn(B, 2, V, generator=g)
    lq = lp[:, :1].clone()
    lp[:, :, :10] += 1 + 3 * torch.rand(B, 1, 1, generator=g)
    drafts = torch.randint(10, V, (B, 1), generator=g)
    top = float(torch.tensor(1.0).nextafter(torch.tensor(0.0)))
    u, v = torch.full((B, 1), top), torch.full((B,), top)
    tokens, n = sample_from_logits_triton(*(x.to(DEVICE) for x in (drafts, lq, lp)), 1.0,
                                          uniforms=(u.to(DEVICE), v.to(DEVICE)), block=64)
    assert (n == 0).all() and (tokens[:, 0] < 10).all()
