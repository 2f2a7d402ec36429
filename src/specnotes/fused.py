"""Rejection sampling straight from logits: the whole acceptance step of a batch without materializing p or q.

``speculative_sample`` takes probabilities, so a caller first writes softmax(logits) for all B·(2k+1) rows
and the sampler reads them back. ``sample_from_logits`` takes the logits and reads each row it needs once:

position by position, for the sequences that accepted every draft so far, a few rows at a time (small
enough that every temporary stays in cache: a fresh full-size temporary costs a write to memory, and on a
CPU a page fault per 4 KB): exponentiate the rows of p and q, normalize them, test the drafted token with
min(1, p(x)/q(x)); where a sequence stops, keep only the block sums of max(0, p − q) (or of p, after k
acceptances). Rows past a sequence's first rejection are never read. The final token comes from an inverse
CDF in two levels: the block of 128 tokens that holds the target mass, then, recomputed from the logits,
the token inside it.

Randomness as ``speculative_sample``: u [B, k] for the accept tests, v [B] for the final token. The result
follows the same distribution; sample for sample it agrees except where rounding moves a comparison.
At temperature 0 only the target's argmax is needed: the draft logits are not read at all.
"""

from __future__ import annotations

import torch

from specnotes import validate
from specnotes.sampling import BLOCK, block_sums, draw_uniforms

CHUNK_BYTES = 1 << 21  # rows per chunk: about 2 MB of each of p and q, so the temporaries stay in cache
LOG_SAFE = 69.0  # log Σ exp(l/T) outside ±69 (Σ outside 1e±30): redo the row with its maximum subtracted first


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

    stop = Stop(B, -(-target_logits.shape[-1] // BLOCK), torch.float64 if target_logits.dtype == torch.float64
                else torch.float32, device)
    alive = rows
    step = max(1, CHUNK_BYTES // (target_logits.shape[-1] * 4))
    for i in range(k + 1):  # position by position, only for the sequences that accepted every draft so far
        survivors = []
        for c in range(0, alive.numel(), step):
            chunk = alive[c: c + step]
            e_p, z_p, lse_p = exp_rows(target_logits, chunk, i, temperature, stop.dtype)  # p = e_p / z_p
            if i == k:  # all k drafts accepted: the bonus token comes from p here
                stop.record(chunk, None, block_sums(e_p) / z_p[:, None], lse_p)
                continue
            e_q, z_q, lse_q = exp_rows(draft_logits, chunk, i, temperature, stop.dtype)
            x = draft_tokens[chunk, i][:, None]
            accept = u[chunk, i] * e_q.gather(1, x)[:, 0] * z_p < e_p.gather(1, x)[:, 0] * z_q  # u·q(x) < p(x)
            if not accept.all():  # the rest stop here: block sums of max(0, p - q) = max(0, e_p - e_q z_p/z_q) / z_p
                residual = torch.addcmul(e_p, e_q, (-z_p / z_q)[:, None]).clamp_(min=0)
                stop.record(chunk, ~accept, block_sums(residual) / z_p[:, None], lse_p, lse_q, (e_p, z_p))
            survivors.append(chunk[accept])
        alive = torch.cat(survivors) if survivors else alive[:0]
        stop.n[alive] += 1
        if alive.numel() == 0:
            break
    return layout(draft_tokens, stop.n, stop.sample(target_logits, draft_logits, temperature, v))


def exp_rows(logits, rows, position, temperature, dtype):
    """e = exp(l/T - m), z = Σ e and lse = m + log z for the rows logits[rows, position] ([R, V], R in one
    chunk): m = 0, unless Σ exp(l/T) would leave e^±LOG_SAFE (then m is the row's maximum). A contiguous
    run of rows is read in place; others are gathered with ``index_select``."""
    plane = logits[:, position]
    first = int(rows[0])
    if int(rows[-1]) - first + 1 == rows.numel():
        source = plane[first: first + rows.numel()]
        e = torch.exp(source) if temperature == 1.0 and source.dtype == dtype else \
            source.to(dtype).mul(1.0 / temperature).exp_()
    else:
        source = plane.index_select(0, rows)
        e = source.to(dtype).mul_(1.0 / temperature).exp_()
    z = e.sum(1)
    lse = z.log()
    bad = ~(lse.abs() < LOG_SAFE)  # NaN included
    if bad.any():
        x = source[bad].to(dtype) / temperature
        shift = x.amax(1)
        e[bad] = (x - shift[:, None]).exp_()
        z[bad] = e[bad].sum(1)
        lse[bad] = shift + z[bad].log()
    return e, z, lse


class Stop:
    """Where each sequence stopped and what its last token is drawn from: the block sums of max(0, p - q)
    after a rejection at position n (of p at the bonus position, or where p == q left no residual), and the
    log-normalizers needed to recompute one block of it."""

    def __init__(self, batch: int, blocks: int, dtype, device):
        self.dtype = dtype
        self.n = torch.zeros(batch, dtype=torch.int64, device=device)
        self.sums = torch.zeros(batch, blocks, dtype=dtype, device=device)
        self.lse_p = torch.zeros(batch, dtype=dtype, device=device)
        self.lse_q = torch.zeros(batch, dtype=dtype, device=device)
        self.subtract = torch.zeros(batch, dtype=torch.bool, device=device)

    def record(self, rows, stopping, sums, lse_p, lse_q=None, p=None):
        """The sequences ``rows[stopping]`` (all of ``rows`` if None) stop here, with these block sums: of
        max(0, p - q) when ``lse_q`` is given (then ``p`` = (e_p, z_p) stands in where the residual has no
        mass), of p otherwise."""
        if stopping is not None:
            rows, sums, lse_p = rows[stopping], sums[stopping], lse_p[stopping]
            lse_q = lse_q[stopping]
        if lse_q is not None:
            has_mass = sums.sum(1) > 0  # p == q up to rounding leaves nothing: then p itself is right
            if not has_mass.all():
                fallback = block_sums(p[0]) / p[1][:, None]
                sums = torch.where(has_mass[:, None], sums, fallback if stopping is None else fallback[stopping])
            self.lse_q[rows] = lse_q
            self.subtract[rows] = has_mass
        self.sums[rows] = sums
        self.lse_p[rows] = lse_p

    def sample(self, target_logits, draft_logits, temperature, v):
        """Inverse CDF in two levels: the block that holds v · total, then the token inside it."""
        V = target_logits.shape[-1]
        rows = torch.arange(self.n.numel(), device=self.n.device)
        cdf = self.sums.cumsum(1)
        goal = (v.to(cdf.dtype) * cdf[:, -1])[:, None]
        j = torch.searchsorted(cdf, goal, right=True).clamp_(max=cdf.shape[1] - 1)
        before = torch.where(j > 0, cdf.gather(1, (j - 1).clamp(min=0)), 0)
        cols = (j * BLOCK + torch.arange(BLOCK, device=j.device)).clamp_(max=V - 1)
        at = lambda logits, n, lse: (logits[rows[:, None], n[:, None], cols].to(self.dtype) / temperature
                                     - lse[:, None]).exp_()
        weights = at(target_logits, self.n, self.lse_p)
        if self.subtract.any():
            q = at(draft_logits, self.n.clamp(max=draft_logits.shape[1] - 1), self.lse_q)
            weights = torch.where(self.subtract[:, None], (weights - q).clamp_(min=0), weights)
        inside = torch.where(j * BLOCK + torch.arange(BLOCK, device=j.device) < V, weights, 0).cumsum(1)
        i = torch.searchsorted(inside, goal - before, right=True).clamp_(max=BLOCK - 1)
        return (j * BLOCK + i).squeeze(1).clamp_(max=V - 1)


def layout(draft_tokens, num_accepted, last):
    B, k = draft_tokens.shape
    steps = torch.arange(k + 1, device=draft_tokens.device)
    padded = torch.cat([draft_tokens, draft_tokens.new_full((B, 1), -1)], 1)
    tokens = torch.where(steps < num_accepted[:, None], padded, -1)
    return torch.where(steps == num_accepted[:, None], last[:, None], tokens), num_accepted
