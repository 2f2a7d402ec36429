"""Rejection sampling from logits as one Triton kernel (``pip install specnotes[triton]``): one program per
sequence, the semantics of ``fused.sample_from_logits`` (and, with the draft's probabilities, of
``fused.sample_from_target_logits``).

Each program walks its sequence's positions: the log-normalizer of a row by an online max and sum over
blocks of the vocabulary, the ratio test at the drafted token with p(x) = exp(l(x) − lse), and at the first
rejection (or after k acceptances) the last token by inverse CDF over max(0, p - q) (or p), two passes over that
one row: its total mass, then the running sum up to v · total (where rounding leaves v · total past the running
sum's end, the last token of weight > 0, never one of weight 0). Rows past the stopping position are never read.
Given the draft's probabilities, q(x) and the row of q are read as they are: no normalizer, and a row of q only
where it rejects. On a GPU exponentials are cheap, so the kernel shifts every row by its running maximum, as the
CPU path's softmax does (its one-sequence path skips the shift when the unshifted sum allows it): the same
distribution, the same draws up to rounding.

It runs on a CUDA device, or anywhere under Triton's interpreter (``TRITON_INTERPRET=1``, numpy on the CPU),
which is how ``tests/sampling/test_triton_sampler.py`` checks it against the PyTorch sampler, draw for draw.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specnotes.sampling.exact import draw_uniforms
from specnotes.sampling.fused import check_logits, sample_from_logits, sample_from_target_logits


@triton.jit
def _lse(row, inv_t, V: tl.constexpr, BLOCK: tl.constexpr):
    """log Σ exp(l/T) of one row, by a running maximum and a rescaled running sum."""
    top = tl.full((), -float("inf"), tl.float32)
    total = tl.full((), 0.0, tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(row + cols, mask=cols < V, other=-float("inf")).to(tl.float32) * inv_t
        new_top = tl.maximum(top, tl.max(x, 0))
        total = total * tl.exp(top - new_top) + tl.sum(tl.exp(x - new_top), 0)
        top = new_top
    return top + tl.log(total)


@triton.jit
def _weights(p_row, q_row, cols, lse_p, lse_q, inv_t, subtract, V: tl.constexpr, PROBS: tl.constexpr):
    """max(0, p - q) (or p when not ``subtract``) at ``cols``; 0 past the vocabulary. ``PROBS``: q is given as
    probabilities."""
    p = tl.exp(tl.load(p_row + cols, mask=cols < V, other=-float("inf")).to(tl.float32) * inv_t - lse_p)
    if PROBS:
        q = tl.load(q_row + cols, mask=cols < V, other=0.0).to(tl.float32)
    else:
        q = tl.exp(tl.load(q_row + cols, mask=cols < V, other=-float("inf")).to(tl.float32) * inv_t - lse_q)
    return tl.where(subtract, tl.maximum(p - q, 0.0), p)


@triton.jit
def _rejection_kernel(target, draft, drafts, u, v, tokens, accepted, inv_t,
                      K: tl.constexpr, V: tl.constexpr, BLOCK: tl.constexpr, PROBS: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.full((), 0, tl.int64)
    going = tl.full((), 1, tl.int1)
    lse_p = tl.full((), 0.0, tl.float32)
    lse_q = tl.full((), 0.0, tl.float32)
    for i in tl.static_range(K + 1):
        if going:
            p_row = target + (b * (K + 1) + i) * V
            lse_p = _lse(p_row, inv_t, V, BLOCK)
            if i < K:
                q_row = draft + (b * K + i) * V
                x = tl.load(drafts + b * K + i)
                p_x = tl.exp(tl.load(p_row + x).to(tl.float32) * inv_t - lse_p)
                if PROBS:  # the draft's own probabilities: no normalizer to compute
                    q_x = tl.load(q_row + x).to(tl.float32)
                else:
                    lse_q = _lse(q_row, inv_t, V, BLOCK)
                    q_x = tl.exp(tl.load(q_row + x).to(tl.float32) * inv_t - lse_q)
                ok = tl.load(u + b * K + i) * q_x < p_x  # accept with probability min(1, p/q)
                if ok:
                    tl.store(tokens + b * (K + 1) + i, x)
                    n += 1
                going = ok
    subtract = n < K  # a rejection: the residual; k acceptances: p at the bonus position
    p_row = target + (b * (K + 1) + n) * V
    q_row = draft + (b * K + tl.minimum(n, K - 1)) * V
    mass = tl.full((), 0.0, tl.float32)
    for start in range(0, V, BLOCK):
        mass += tl.sum(_weights(p_row, q_row, start + tl.arange(0, BLOCK), lse_p, lse_q, inv_t, subtract, V, PROBS),
                       0)
    empty = mass <= 0  # p == q up to rounding leaves no residual: p itself (total 1) is the right answer
    subtract = subtract & ~empty
    mass = tl.where(empty, 1.0, mass)
    goal = tl.load(v + b) * mass
    seen = tl.full((), 0.0, tl.float32)
    last = tl.full((), 0, tl.int64)
    found = tl.full((), 0, tl.int1)
    last_positive = tl.full((), 0, tl.int64)  # the last token of weight > 0: the answer if rounding leaves no hit
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        w = _weights(p_row, q_row, cols, lse_p, lse_q, inv_t, subtract, V, PROBS)
        hit = ((seen + tl.cumsum(w, 0)) > goal) & (w > 0)  # never a token of weight 0
        first = tl.min(tl.where(hit, cols, V), 0).to(tl.int64)
        last = tl.where(found | (first >= V), last, first)
        found = found | (first < V)
        last_positive = tl.maximum(last_positive, tl.max(tl.where(w > 0, cols, 0), 0).to(tl.int64))
        seen += tl.sum(w, 0)
    tl.store(tokens + b * (K + 1) + n, tl.where(found, last, last_positive))
    tl.store(accepted + b, n)


def sample_from_logits_triton(
    draft_tokens: torch.Tensor,
    draft_logits: torch.Tensor | None,
    target_logits: torch.Tensor,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    uniforms: tuple[torch.Tensor, torch.Tensor] | None = None,
    block: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``fused.sample_from_logits`` as one Triton kernel launch (same arguments, same output layout).
    Temperature 0 (greedy) and k = 0 take the PyTorch path: there is nothing to sample."""
    temperature = check_logits(draft_tokens, draft_logits, target_logits, temperature, uniforms)
    if temperature == 0 or draft_tokens.shape[1] == 0:
        return sample_from_logits(draft_tokens, draft_logits, target_logits, temperature, generator, uniforms)
    return launch(draft_tokens, draft_logits, target_logits, temperature, generator, uniforms, block, probs=False)


def sample_from_target_logits_triton(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_logits: torch.Tensor,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    uniforms: tuple[torch.Tensor, torch.Tensor] | None = None,
    block: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``fused.sample_from_target_logits`` (the draft's probabilities, vLLM's interface) as one Triton kernel launch.
    Temperature 0 and k = 0 take the PyTorch path."""
    temperature = check_logits(draft_tokens, draft_probs, target_logits, temperature, uniforms, "draft_probs")
    if temperature == 0 or draft_tokens.shape[1] == 0:
        return sample_from_target_logits(draft_tokens, draft_probs, target_logits, temperature, generator, uniforms)
    return launch(draft_tokens, draft_probs, target_logits, temperature, generator, uniforms, block, probs=True)


def launch(draft_tokens, draft, target_logits, temperature, generator, uniforms, block, probs):
    B, k = draft_tokens.shape
    V = target_logits.shape[-1]
    device = target_logits.device
    u, v = draw_uniforms(B, k, generator, device) if uniforms is None else uniforms
    tokens = torch.full((B, k + 1), -1, dtype=torch.int64, device=device)
    accepted = torch.zeros(B, dtype=torch.int64, device=device)
    block = min(triton.next_power_of_2(V), block)
    _rejection_kernel[(B,)](target_logits.contiguous(), draft.contiguous(), draft_tokens.contiguous(),
                            u.float().contiguous(), v.float().contiguous(), tokens, accepted, 1.0 / temperature,
                            K=k, V=V, BLOCK=block, PROBS=probs)
    return tokens, accepted
