"""Rejection sampling straight from logits: the whole acceptance step of a batch without materializing p or q.

``speculative_sample`` takes probabilities, so a caller first writes softmax(logits) for all B·(2k+1) rows
and the sampler reads them back. ``sample_from_logits`` takes the logits and reads each row it needs once:

1. position by position, for the sequences that accepted every draft so far, one log-normalizer per row,
   lse = log Σ exp(l/T), over chunks of rows gathered into cache (a fresh full-size temporary costs a
   write to memory, and on a CPU a page fault per 4 KB). Rows past a sequence's first rejection are
   never read: acceptance stops there;
2. the ratio test only at the drafted tokens: p(x) = exp(l_p(x)/T − lse_p), q(x) likewise;
3. at each sequence's stopping position one row of p, and after a rejection one row of q, to form
   max(0, p − q); the final token by inverse CDF in two levels (sums of blocks of 128 tokens, then the
   cumulative sum inside the one block that holds the target mass) instead of a scan over all V.

Randomness as ``speculative_sample``: u [B, k] for the accept tests, v [B] for the final token. The result
follows the same distribution; sample for sample it agrees except where rounding moves a comparison.
At temperature 0 only the target's argmax is needed: the draft logits are not read at all.
"""

from __future__ import annotations

import torch

from specnotes import validate
from specnotes.sampling import draw_uniforms

CHUNK_BYTES = 1 << 21  # logits gathered per chunk: about 2 MB, so the temporaries stay in L2
BLOCK = 128  # tokens per block of the two-level inverse CDF
SAFE = 1e30  # Σ exp(l/T) outside [1/SAFE, SAFE]: redo the row with the maximum subtracted first


def row_logsumexp(logits: torch.Tensor, temperature: float = 1.0, rows: torch.Tensor | None = None,
                  position: int | None = None) -> torch.Tensor:
    """log Σ_v exp(logits[..., v] / T) per row, in float32 (float64 input stays float64).

    ``logits`` [..., V], or with ``rows`` [R] and ``position``: only the rows
    logits[rows, position] of a [B, n, V] tensor. Chunks of rows go through a cache-sized buffer as
    Σ exp(l/T) directly (two passes over the chunk: exp, sum); a row whose sum leaves [1/SAFE, SAFE]
    (a logit above ~69·T, or all below ~-69·T) is redone as m + log Σ exp(l/T - m), m its maximum."""
    V = logits.shape[-1]
    whole = rows is None
    plane = logits.reshape(-1, V) if whole else logits[:, position]
    if not whole and rows.numel() == plane.shape[0] and torch.equal(rows, torch.arange(len(rows), device=rows.device)):
        rows = None  # every sequence, in order: read the rows in place, no gather
    count = plane.shape[0] if rows is None else rows.numel()
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    out = torch.empty(count, dtype=dtype, device=logits.device)
    step = max(1, CHUNK_BYTES // (V * 4))
    buf = torch.empty(min(step, count), V, dtype=dtype, device=logits.device)
    source = lambda i, n: plane[i: i + n] if rows is None else plane.index_select(0, rows[i: i + n])
    for i in range(0, count, step):
        n = min(step, count - i)
        chunk = buf[:n]
        if temperature != 1.0:
            torch.mul(source(i, n), 1.0 / temperature, out=chunk)
            chunk.exp_()
        elif rows is None and logits.dtype == dtype:
            torch.exp(source(i, n), out=chunk)
        else:
            chunk.copy_(source(i, n)).exp_()
        total = chunk.sum(1)
        lse = total.log()
        bad = (total > SAFE) | (total < 1 / SAFE) | total.isnan()
        if bad.any():
            again = source(i, n)[bad].to(dtype) / temperature
            top = again.amax(1, keepdim=True)
            lse[bad] = (again - top).exp_().sum(1).log_() + top.squeeze(1)
        out[i: i + n] = lse
    return out.view(logits.shape[:-1]) if whole else out


def check_logits(draft_tokens, draft_logits, target_logits, temperature, uniforms):
    if draft_tokens.dim() != 2 or target_logits.dim() != 3 or (draft_logits is not None and draft_logits.dim() != 3):
        raise validate.BadArgument("expected draft_tokens [B,k], draft_logits [B,k,V], target_logits [B,k+1,V]")
    B, k = draft_tokens.shape
    V = target_logits.shape[-1]
    if target_logits.shape != (B, k + 1, V) or (draft_logits is not None and draft_logits.shape != (B, k, V)):
        raise validate.BadArgument(
            f"draft_tokens {tuple(draft_tokens.shape)} needs draft_logits {(B, k, V)} and target_logits "
            f"{(B, k + 1, V)}; got {None if draft_logits is None else tuple(draft_logits.shape)}, "
            f"{tuple(target_logits.shape)}")
    if draft_tokens.dtype != torch.int64:
        raise validate.BadArgumentType(f"draft_tokens must be int64, got {draft_tokens.dtype}")
    if k and ((draft_tokens < 0) | (draft_tokens >= V)).any():
        raise validate.BadArgument(f"draft_tokens must lie in [0, {V})")
    temperature = validate.number("temperature", temperature, low=0)
    if temperature > 0 and draft_logits is None and k:
        raise validate.BadArgument("draft_logits are needed at temperature > 0")
    if uniforms is not None and (uniforms[0].shape != (B, k) or uniforms[1].shape != (B,)):
        raise validate.BadArgument(f"uniforms must have shapes {(B, k)} and {(B,)}")
    return temperature


def sample_from_logits(
    draft_tokens: torch.Tensor,
    draft_logits: torch.Tensor | None,
    target_logits: torch.Tensor,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    uniforms: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``speculative_sample`` with p = softmax(target_logits / T) and q = softmax(draft_logits / T), computed
    from the logits in one read of each row (module docstring). Same shapes and output layout:
    -> tokens [B, k+1] (accepted drafts, one corrected or bonus token, -1 after), num_accepted [B]."""
    temperature = check_logits(draft_tokens, draft_logits, target_logits, temperature, uniforms)
    B, k = draft_tokens.shape
    device = target_logits.device
    rows = torch.arange(B, device=device)
    u, v = draw_uniforms(B, k, generator, device) if uniforms is None else uniforms
    if temperature == 0:
        best = target_logits.argmax(-1)  # [B, k+1]: greedy p is one-hot, and so is the residual after a miss
        num_accepted = (draft_tokens == best[:, :k]).long().cumprod(-1).sum(-1)
        return layout(draft_tokens, num_accepted, best[rows, num_accepted])

    lse_p = torch.zeros(B, k + 1, dtype=torch.float64 if target_logits.dtype == torch.float64 else torch.float32,
                        device=device)
    lse_q = torch.zeros(B, k, dtype=lse_p.dtype, device=device)
    num_accepted = torch.zeros(B, dtype=torch.int64, device=device)
    alive = rows
    for i in range(k + 1):  # position by position, only for the sequences that accepted everything so far
        lse_p[alive, i] = row_logsumexp(target_logits, temperature, alive, i)
        if i == k or alive.numel() == 0:
            break
        lse_q[alive, i] = row_logsumexp(draft_logits, temperature, alive, i)
        x = draft_tokens[alive, i]
        p_x = (target_logits[alive, i, x].to(lse_p.dtype) / temperature - lse_p[alive, i]).exp()
        q_x = (draft_logits[alive, i, x].to(lse_p.dtype) / temperature - lse_q[alive, i]).exp()
        accepted = u[alive, i] * q_x < p_x  # accept with min(1, p/q)
        num_accepted[alive[accepted]] += 1
        alive = alive[accepted]
    rejected = num_accepted < k
    last = final_token(target_logits, draft_logits, lse_p, lse_q, num_accepted, rejected, temperature, v)
    return layout(draft_tokens, num_accepted, last)


def final_token(target_logits, draft_logits, lse_p, lse_q, n, rejected, temperature, v):
    """The token drawn at each sequence's stopping position n: from norm(max(0, p - q)) after a rejection,
    from p after k acceptances. Pass 1, a few sequences at a time: the mass of every block of ``BLOCK``
    tokens. Then the block that holds v · total, and inside it, recomputed from the logits, the token."""
    B, V = target_logits.shape[0], target_logits.shape[-1]
    rows = torch.arange(B, device=target_logits.device)
    weights = lambda r, cols=None, sub=rejected: residual(target_logits, draft_logits, lse_p, lse_q, r, n[r], sub[r],
                                                          temperature, cols)
    step = max(1, CHUNK_BYTES // (V * target_logits.element_size()))
    sums = torch.cat([block_sums(weights(rows[i: i + step])) for i in range(0, B, step)])
    empty = sums.sum(1) <= 0  # p == q up to rounding leaves no residual: then p itself is the right answer
    if empty.any():
        rejected = rejected & ~empty
        sums[empty] = block_sums(weights(rows[empty]))
    cdf = sums.cumsum(1)
    goal = (v.to(cdf.dtype) * cdf[:, -1])[:, None]
    j = torch.searchsorted(cdf, goal, right=True).clamp_(max=cdf.shape[1] - 1)
    before = torch.where(j > 0, cdf.gather(1, (j - 1).clamp(min=0)), 0)
    cols = j * BLOCK + torch.arange(BLOCK, device=j.device)
    inside = torch.where(cols < V, weights(rows, cols.clamp(max=V - 1)), 0).cumsum(1)
    i = torch.searchsorted(inside, goal - before, right=True).clamp_(max=BLOCK - 1)
    return (j * BLOCK + i).squeeze(1).clamp_(max=V - 1)


def residual(target_logits, draft_logits, lse_p, lse_q, rows, n, subtract, temperature, cols=None):
    """p, or max(0, p - q) where ``subtract``, at position n of each listed sequence: over all V tokens,
    or only at ``cols`` [len(rows), m]."""
    p = probs_at(target_logits, lse_p, rows, n, temperature, cols)
    if not subtract.any():
        return p
    q = probs_at(draft_logits, lse_q, rows, n.clamp(max=draft_logits.shape[1] - 1), temperature, cols)
    return torch.where(subtract[:, None], (p - q).clamp_(min=0), p)


def probs_at(logits, lse, rows, position, temperature, cols=None):
    """softmax(logits[b, position] / T), for each listed sequence b: [len(rows), V], or at ``cols``."""
    if cols is None:
        x = logits.reshape(-1, logits.shape[-1]).index_select(0, rows * logits.shape[1] + position)
    else:
        x = logits[rows[:, None], position[:, None], cols]
    return x.to(lse.dtype).div_(temperature).sub_(lse[rows, position][:, None]).exp_()


def block_sums(weights: torch.Tensor) -> torch.Tensor:
    """[B, V] -> [B, ceil(V / BLOCK)]: the weight of each block of ``BLOCK`` consecutive tokens."""
    full = weights.shape[1] // BLOCK * BLOCK
    sums = weights[:, :full].reshape(weights.shape[0], -1, BLOCK).sum(-1)
    return torch.cat([sums, weights[:, full:].sum(1, keepdim=True)], 1) if full < weights.shape[1] else sums


def layout(draft_tokens, num_accepted, last):
    B, k = draft_tokens.shape
    steps = torch.arange(k + 1, device=draft_tokens.device)
    padded = torch.cat([draft_tokens, draft_tokens.new_full((B, 1), -1)], 1)
    tokens = torch.where(steps < num_accepted[:, None], padded, -1)
    return torch.where(steps == num_accepted[:, None], last[:, None], tokens), num_accepted
