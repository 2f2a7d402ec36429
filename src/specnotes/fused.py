"""Rejection sampling straight from logits: the whole acceptance step of a batch without materializing p or q.

``speculative_sample`` takes probabilities, so a caller first writes softmax(logits) for all B·(2k+1) rows
and the sampler reads them back. ``sample_from_logits`` takes the logits and reads each row it needs once:

position by position, for the sequences that accepted every draft so far, a few rows at a time (small
enough that every temporary stays in cache: a fresh full-size temporary costs a write to memory, and on a
CPU a page fault per 4 KB): softmax the rows of p and q (one kernel: a maximum, then the exponentials and
their sum), test each drafted token with min(1, p(x)/q(x)), and, for the sequences that stop there and only
for them, draw the last token from max(0, p − q) (from p after k acceptances) while the rows are in cache.
Rows past a sequence's first rejection are never read. Two short cuts where a Python step per position
costs more than the arithmetic: one sequence walks its positions like the reference loop, and inputs
smaller than one chunk are done in one step over every position.

Randomness as ``speculative_sample``: u [B, k] for the accept tests, v [B] for the final token. The result
follows the same distribution; sample for sample it agrees except where rounding moves a comparison.
At temperature 0 only the target's argmax is needed: the draft logits are not read at all.
"""

from __future__ import annotations

import torch

from specnotes import validate
from specnotes.sampling import draw_uniforms, sample_weights

CHUNK_BYTES = 1 << 21  # rows per chunk: about 2 MB of each of p and q, so the temporaries stay in cache


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
    from the logits in one read of each row it needs (module docstring). Same shapes and output layout:
    -> tokens [B, k+1] (accepted drafts, one corrected or bonus token, -1 after), num_accepted [B]."""
    temperature = check_logits(draft_tokens, draft_logits, target_logits, temperature, uniforms)
    B, k = draft_tokens.shape
    V = target_logits.shape[-1]
    device = target_logits.device
    rows = torch.arange(B, device=device)
    u, v = draw_uniforms(B, k, generator, device) if uniforms is None else uniforms
    if temperature == 0:
        best = target_logits.argmax(-1)  # [B, k+1]: greedy p is one-hot, and so is the residual after a miss
        num_accepted = (draft_tokens == best[:, :k]).long().cumprod(-1).sum(-1)
        return layout(draft_tokens, num_accepted, best[rows, num_accepted])
    dtype = torch.float64 if target_logits.dtype == torch.float64 else torch.float32
    if B == 1:
        return one_sequence(draft_tokens, draft_logits, target_logits, temperature, u, v, dtype)
    if fits_one_chunk(B, k, V):
        return all_at_once(draft_tokens, draft_logits, target_logits, temperature, u, v, dtype)

    n = torch.zeros(B, dtype=torch.int64, device=device)
    last = torch.zeros(B, dtype=torch.int64, device=device)
    alive = rows
    step = max(1, CHUNK_BYTES // (V * 4))
    for i in range(k + 1):  # position by position, only for the sequences that accepted every draft so far
        survivors = []
        for c in range(0, alive.numel(), step):
            chunk = alive[c: c + step]
            p = softmax_rows(target_logits, chunk, i, temperature, dtype)
            if i == k:  # all k drafts accepted: the bonus token comes from p here
                last[chunk] = sample_weights(p, v[chunk])
                continue
            q = softmax_rows(draft_logits, chunk, i, temperature, dtype)
            x = draft_tokens[chunk, i][:, None]
            accept = u[chunk, i] * q.gather(1, x)[:, 0] < p.gather(1, x)[:, 0]  # u·q(x) < p(x)
            if not accept.all():  # the rejecting rows stop here: their last token from max(0, p - q), theirs only
                stop = (~accept).nonzero()[:, 0]
                weights = residual(p.index_select(0, stop), q.index_select(0, stop))
                last[chunk[stop]] = sample_weights(weights, v[chunk[stop]])
            survivors.append(chunk[accept])
        alive = torch.cat(survivors) if survivors else alive[:0]
        n[alive] += 1
        if alive.numel() == 0:
            break
    return layout(draft_tokens, n, last)


def all_at_once(draft_tokens, draft_logits, target_logits, temperature, u, v, dtype):
    """Small inputs: every row softmaxed in one step, the tests of all positions at once, then the last token
    from the one row where each sequence stopped: max(0, p - q) there, or p after k acceptances."""
    B, k = draft_tokens.shape
    V = target_logits.shape[-1]
    rows = torch.arange(B, device=target_logits.device)
    p = scaled_softmax(target_logits, temperature, dtype)
    if k == 0:
        return layout(draft_tokens, rows * 0, sample_weights(p[:, 0], v))
    q = scaled_softmax(draft_logits, temperature, dtype)
    x = draft_tokens[..., None]
    n = (u * q.gather(2, x)[..., 0] < p[:, :k].gather(2, x)[..., 0]).long().cumprod(1).sum(1)
    p_n = p.view(-1, V).index_select(0, rows * (k + 1) + n)
    q_n = q.view(-1, V).index_select(0, rows * k + n.clamp(max=k - 1))
    return layout(draft_tokens, n, sample_weights(residual(p_n, q_n * (n < k).to(dtype)[:, None]), v))  # p - q, or p


def one_sequence(draft_tokens, draft_logits, target_logits, temperature, u, v, dtype):
    """B = 1: walk the positions as the reference loop does, softmaxing each row only when it is reached."""
    k = draft_tokens.shape[1]
    stopped = lambda n, weights: layout(draft_tokens, torch.tensor([n], device=weights.device),
                                        sample_weights(weights, v))
    for n, x in enumerate(draft_tokens[0].tolist()):
        p = scaled_softmax(target_logits[0, n], temperature, dtype)
        q = scaled_softmax(draft_logits[0, n], temperature, dtype)
        if not u[0, n] * q[x] < p[x]:  # rejected: the last token from max(0, p - q)
            return stopped(n, residual(p[None], q[None]))
    return stopped(k, scaled_softmax(target_logits[0, k], temperature, dtype)[None])


def softmax_rows(logits, rows, position, temperature, dtype):
    """softmax(logits[rows, position] / T) ([R, V], R in one chunk). A contiguous run of rows is read in place;
    others are gathered with ``index_select``."""
    plane = logits[:, position]
    first = int(rows[0])
    contiguous = int(rows[-1]) - first + 1 == rows.numel()
    source = plane[first: first + rows.numel()] if contiguous else plane.index_select(0, rows)
    return scaled_softmax(source, temperature, dtype)


def scaled_softmax(logits, temperature, dtype):
    """softmax(logits / T) over the last axis, in ``dtype``."""
    if temperature != 1.0:
        logits = logits.to(dtype) / temperature
    return torch.softmax(logits, -1, dtype=dtype)


def residual(p, q):
    """max(0, p - q) per row, unnormalized; p itself where p == q up to rounding left no mass."""
    r = torch.sub(p, q).clamp_(min=0)
    empty = r.sum(1) <= 0
    return torch.where(empty[:, None], p, r) if empty.any() else r


def fits_one_chunk(B: int, k: int, V: int) -> bool:
    return B * (2 * k + 1) * V * 4 <= CHUNK_BYTES


def rows_read(num_accepted: torch.Tensor, k: int, V: int) -> torch.Tensor:
    """Logit rows ``sample_from_logits`` reads per sequence, given where each stopped: p and q at every position
    up to the stopping one, 2(n + 1), or all 2k + 1 after k acceptances; all 2k + 1 where the batch fits one
    chunk (it is done in one step)."""
    if num_accepted.numel() > 1 and fits_one_chunk(num_accepted.numel(), k, V):
        return torch.full_like(num_accepted, 2 * k + 1)
    return torch.where(num_accepted < k, 2 * (num_accepted + 1), 2 * k + 1)


def layout(draft_tokens, num_accepted, last):
    B, k = draft_tokens.shape
    steps = torch.arange(k + 1, device=draft_tokens.device)
    padded = torch.cat([draft_tokens, draft_tokens.new_full((B, 1), -1)], 1)
    tokens = torch.where(steps < num_accepted[:, None], padded, -1)
    return torch.where(steps == num_accepted[:, None], last[:, None], tokens), num_accepted
