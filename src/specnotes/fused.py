"""Rejection sampling straight from logits: the whole acceptance step of a batch without materializing p or q.

``speculative_sample`` takes probabilities, so a caller first writes softmax(logits) for all B·(2k+1) rows
and the sampler reads them back. ``sample_from_logits`` takes the logits and reads each row it needs once, and
of each row it computes what an exact sampler needs: its normalizer Σ exp(l) and the probabilities it compares,
not a softmax.

Position by position, for the sequences that accepted every draft so far, a few rows at a time (so that their
exponentials stay in cache), it writes exp(l) of the rows of p and q into one reused buffer and sums each row;
tests each drafted token with min(1, p(x)/q(x)), where p(x) = exp(l_p(x)) / Σ exp(l_p); and, for the sequences
that stop there and only for them, computes in place the weights of their last token, max(0, p − q) up to a
factor (exp(l_p) − (Σ_p / Σ_q)·exp(l_q), clamped at 0), and keeps only their sums over blocks of 128 tokens.
After k acceptances the weights are exp(l) of the bonus row itself. At the end one search over the block sums
finds, for every sequence, the block its draw falls in; the 128 weights of that block alone are computed again
from the logits and searched (``sampling.locate_blocks``, ``search_block``): no row of weights is written to
memory. Rows past a sequence's first rejection are never read; logit rows that follow each other in memory are
read as one slice, not gathered. One sequence walks its positions with the same arithmetic and no tables.

exp(l) is not shifted by the row's maximum, which would cost one more pass over every row. A row whose sum lies
in [1, ∞) lost nothing by that: no term overflowed, and a term that fell below the smallest normal number has
a probability below it too, as it would in a softmax. The rare row outside that range is redone shifted by its
maximum. ``sample_from_target_logits`` is the same step when the drafter hands over its probabilities q
(vLLM's interface): only the target's rows are exponentiated, and a row of q is read only where it rejects.

Randomness as ``speculative_sample``: u [B, k] for the accept tests, v [B] for the final token. The result
follows the same distribution; sample for sample it agrees except where rounding moves a comparison.
At temperature 0 only the target's argmax is needed: the draft's rows are not read at all.
"""

from __future__ import annotations

import math
import threading

import torch

from specnotes import validate
from specnotes.sampling import BLOCK, FLAT, block_sums, draw_uniforms, locate_blocks, sample_weights, search_block

CHUNK_BYTES = 1 << 22  # a chunk's p and q rows, exponentiated into one reused buffer: 4 MB, 2 MB a side
RUN_ELEMENTS = 4096  # a run of consecutive rows shorter than this on average is gathered instead
ROW_BY_ROW = 8  # up to this many stopping rows of a chunk, their residual is taken one row at a time
_buffers = threading.local()


def check_logits(draft_tokens, draft_logits, target_logits, temperature, uniforms, draft_name="draft_logits"):
    if draft_tokens.dim() != 2 or target_logits.dim() != 3 or (draft_logits is not None and draft_logits.dim() != 3):
        raise validate.BadArgument(f"expected draft_tokens [B,k], {draft_name} [B,k,V], target_logits [B,k+1,V]")
    B, k = draft_tokens.shape
    V = target_logits.shape[-1]
    if target_logits.shape != (B, k + 1, V) or (draft_logits is not None and draft_logits.shape != (B, k, V)):
        raise validate.BadArgument(
            f"draft_tokens {tuple(draft_tokens.shape)} needs {draft_name} {(B, k, V)} and target_logits "
            f"{(B, k + 1, V)}; got {None if draft_logits is None else tuple(draft_logits.shape)}, "
            f"{tuple(target_logits.shape)}")
    if draft_tokens.dtype != torch.int64:
        raise validate.BadArgumentType(f"draft_tokens must be int64, got {draft_tokens.dtype}")
    if k and ((draft_tokens < 0) | (draft_tokens >= V)).any():
        raise validate.BadArgument(f"draft_tokens must lie in [0, {V})")
    temperature = validate.number("temperature", temperature, low=0)
    if temperature > 0 and draft_logits is None and k:
        raise validate.BadArgument(f"{draft_name} are needed at temperature > 0")
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
    return sample(draft_tokens, draft_logits, None, target_logits, temperature, generator, uniforms)


def sample_from_target_logits(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_logits: torch.Tensor,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    uniforms: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``speculative_sample`` with p = softmax(target_logits / T) and the draft's own probabilities q [B, k, V]
    (the distribution its tokens were drawn from, already at its temperature), as vLLM's rejection sampler takes
    them: only the target's rows are exponentiated, and a row of q is read only where it rejects. Same output."""
    temperature = check_logits(draft_tokens, draft_probs, target_logits, temperature, uniforms, "draft_probs")
    if draft_probs is not None and not draft_probs.is_floating_point():
        raise validate.BadArgumentType(f"draft_probs must be floating point probabilities, got {draft_probs.dtype}")
    return sample(draft_tokens, None, draft_probs, target_logits, temperature, generator, uniforms)


def sample(draft_tokens, draft_logits, draft_probs, target_logits, temperature, generator, uniforms):
    B, k = draft_tokens.shape
    rows = torch.arange(B, device=target_logits.device)
    u, v = draw_uniforms(B, k, generator, target_logits.device) if uniforms is None else uniforms
    if temperature == 0:
        best = target_logits.argmax(-1)  # [B, k+1]: greedy p is one-hot, and so is the residual after a miss
        num_accepted = (draft_tokens == best[:, :k]).long().cumprod(-1).sum(-1)
        return layout(draft_tokens, num_accepted, best[rows, num_accepted])
    dtype = torch.float64 if target_logits.dtype == torch.float64 else torch.float32
    if B == 1:
        return one_sequence(draft_tokens, draft_logits, draft_probs, target_logits, temperature, u, v, dtype)
    if fits_one_chunk(B, k, target_logits.shape[-1]):
        return all_at_once(draft_tokens, draft_logits, draft_probs, target_logits, temperature, u, v, dtype)
    return by_position(draft_tokens, draft_logits, draft_probs, target_logits, temperature, u, v, dtype)


def one_sequence(draft_tokens, draft_logits, draft_probs, target_logits, temperature, u, v, dtype):
    """B = 1: walk the positions as the reference loop does, exponentiating a row only when it is reached, with
    the arithmetic of ``by_position`` (its tables and chunks cost more operations than one sequence needs)."""
    k, V = draft_tokens.shape[1], target_logits.shape[-1]
    rows = buffer("rows", (2, 1, V), dtype, target_logits.device)
    p_row, q_row = rows[0], rows[1]
    u_list, x_list = u[0].tolist(), draft_tokens[0].tolist()
    for n, x in enumerate(x_list):
        load(p_row, target_logits[:, n], [0], temperature)
        if draft_probs is None:
            load(q_row, draft_logits[:, n], [0], temperature)
        sums, at_x = rows[:, 0].sum(-1).tolist(), rows[:, 0, x].tolist()
        if draft_probs is not None:
            sums[1], at_x[1] = 1.0, float(draft_probs[0, n, x])
        for side, total in enumerate(sums):
            if not 1 <= total < math.inf:  # exp(l) unshifted overflowed or may have lost precision: redo it shifted
                rows[side, 0] = shifted_exp((target_logits, draft_logits)[side][0, n], temperature, dtype)[0]
                sums[side], at_x[side] = float(rows[side, 0].sum()), float(rows[side, 0, x])
        if not u_list[n] * (at_x[1] / sums[1]) < at_x[0] / sums[0]:  # rejected: the last token from max(0, p - q)
            if draft_probs is not None:
                q_row.copy_(draft_probs[0, n: n + 1])
            weights = p_row.sub_(q_row, alpha=sums[0] / sums[1]).clamp_(min=0)  # Σ_p·(p − q)
            if not float(weights.sum()) > 0:  # p == q up to rounding: p itself
                p_row[0] = shifted_exp(target_logits[0, n], temperature, dtype)[0]
            return layout(draft_tokens, torch.tensor([n], device=v.device), sample_weights(p_row, v))
    load(p_row, target_logits[:, k], [0], temperature)  # all k accepted: the bonus token from p at position k
    if not 1 <= float(p_row.sum()) < math.inf:
        p_row[0] = shifted_exp(target_logits[0, k], temperature, dtype)[0]
    return layout(draft_tokens, torch.tensor([k], device=v.device), sample_weights(p_row, v))


def by_position(draft_tokens, draft_logits, draft_probs, target_logits, temperature, u, v, dtype):
    """Position by position, only for the sequences that accepted every draft so far, ``step`` of them at a time
    (module docstring). Per chunk four operations fill a table: exp(l) of its p and q rows into a reused buffer,
    each row's sum, and exp(l) at the drafted token. The tests are read off the table; only a chunk where some
    sequence stops does more while its rows are in cache: the weights of their last token, in place, and their
    sums over blocks of ``BLOCK`` tokens (``Draws``). One search at the end draws every last token."""
    B, k = draft_tokens.shape
    V = target_logits.shape[-1]
    device = target_logits.device
    sides = 1 if draft_logits is None else 2  # rows exponentiated per sequence and position: p, and q from logits
    step = min(B, max(1, CHUNK_BYTES // (2 * V * torch.finfo(dtype).bits // 8)))  # sequences per chunk
    rows = buffer("rows", (3, step, V), dtype, device)  # exp(l) of a chunk's p rows, its q rows; a spare
    table = buffer("table", (2, 2, B), dtype, device)  # [exp(l) at the drafted token, Σ exp(l)] x [p, q]
    draws = Draws(draft_logits, draft_probs, target_logits, temperature, dtype, k)
    alive = list(range(B))
    for i in range(k):
        if not alive:
            break
        R = len(alive)
        picked = None if R == B else torch.tensor(alive, dtype=torch.int64, device=device)
        at = (lambda t: t[:, i]) if picked is None else (lambda t: t[picked, i])  # noqa: B023
        x = at(draft_tokens)
        u_i = at(u).tolist()
        if draft_probs is not None:  # q(x) is given: R numbers read, and Σ q = 1
            table[0, 1, :R] = at(draft_probs).gather(1, x[:, None])[:, 0]
            table[1, 1, :R] = 1.0
        planes = (target_logits[:, i],) if draft_logits is None else (target_logits[:, i], draft_logits[:, i])
        views = zip(table[:, :, :R].split(step, 2), table[0, :sides, :R, None].split(step, 1),
                    table[1, :sides, :R].split(step, 1), x.expand(sides, R)[..., None].split(step, 1), strict=True)
        kept, full = [], rows[:sides]
        for c, (got, at_x, total, index) in zip(range(0, R, step), views, strict=True):
            chunk = alive[c: c + step]
            e = full if len(chunk) == step else rows[:sides, : len(chunk)]
            for out, plane in zip(e.unbind(0), planes, strict=True):
                load(out, plane, chunk, temperature)
            torch.sum(e, -1, out=total)
            torch.gather(e, 2, index, out=at_x)
            (gp, gq), (sp, sq) = got.tolist()
            if not all(1 <= t < math.inf for t in sp + (sq if sides == 2 else [])):
                draws.repair(e, (gp, gq), (sp, sq), planes, chunk, x[c: c + len(chunk)].tolist())
            stop = []
            for j, b in enumerate(chunk):
                if u_i[c + j] * (gq[j] / sq[j]) < gp[j] / sp[j]:  # accept with probability min(1, p(x) / q(x))
                    kept.append(b)
                else:
                    stop.append(j)
            if stop:
                draws.residual(e, chunk, stop, i, [a / b for a, b in zip(sp, sq, strict=True)], rows[1:])
        for b in kept:
            draws.accepted[b] += 1
        alive = kept
    for c in range(0, len(alive), step):  # k acceptances: the bonus token's weights are exp(l) of row k itself
        chunk = alive[c: c + step]
        load(rows[0, : len(chunk)], target_logits[:, k], chunk, temperature)
        draws.keep(rows[0, : len(chunk)], chunk)
    return layout(draft_tokens, torch.tensor(draws.accepted, device=device), draws.tokens(v))


class Draws:
    """The last token of every sequence, drawn by inverse CDF with its v as ``sampling.sample_weights`` draws, in
    two steps. While a chunk is in cache, ``residual`` (or ``keep``, for a bonus row) writes the sums of the
    weights over blocks of ``BLOCK`` tokens, a row per sequence. At the end, ``tokens`` finds for every sequence
    the block where its cumulative weight passes v · total, computes again from the logits the ``BLOCK`` weights
    of that block alone, and searches inside it: the weights themselves are never written to memory. Up to
    ``FLAT`` tokens the rows are kept whole instead."""

    def __init__(self, draft_logits, draft_probs, target_logits, temperature, dtype, k):
        B, V = target_logits.shape[0], target_logits.shape[-1]
        self.draft_logits, self.draft_probs, self.target_logits = draft_logits, draft_probs, target_logits
        self.temperature, self.flat, self.V = temperature, V <= FLAT, V
        self.sums = buffer("sums", (B, V if self.flat else -(-V // BLOCK)), dtype, target_logits.device)
        self.accepted, self.scale = [0] * B, [None] * B  # scale: Σ_p/Σ_q of a residual row; None: p itself
        self.shift = ([0.0] * B, [0.0] * B)  # what exp(l) was shifted by in p's and q's row (0 but for repairs)
        self.k, self.rows = k, torch.arange(B, device=target_logits.device)[:, None]

    def repair(self, e, at_x, totals, planes, chunk, x):
        """Rows whose unshifted sum left [1, ∞): redo them shifted by their maximum (rare), in ``e`` and in the
        values read off the table (``at_x``, ``totals``: lists, updated in place)."""
        for side, plane in enumerate(planes):
            for j, total in enumerate(totals[side]):
                if not 1 <= total < math.inf:
                    e[side, j], self.shift[side][chunk[j]] = shifted_exp(plane[chunk[j]], self.temperature, e.dtype)
                    totals[side][j] = float(e[side, j].sum())
                    at_x[side][j] = float(e[side, j, x[j]])

    def residual(self, e, chunk, stop, i, scale, spare):
        """The stopping rows' weights max(0, exp(l_p) − scale·q'), where q' = exp(l_q) and scale = Σ_p/Σ_q from the
        draft's logits, or q' = q and scale = Σ_p from its probabilities: both are Σ_p·(p − q); then their block
        sums. From logits, in place of exp(l_p) in ``e[0]``: where most of the chunk stops, every row at once (the
        others' rows are not needed any more), a few row by row, many gathered. From probabilities, the stopping
        rows of q are read here, and only they, into ``spare[0]``; their rows of p are gathered into ``spare[1]``
        unless the whole chunk stops."""
        p_rows, probs, device = e[0], self.draft_probs, e.device
        who = [chunk[j] for j in stop]
        for b, j in zip(who, stop, strict=True):
            self.scale[b] = scale[j]
        factor = lambda: torch.tensor([scale[j] for j in stop], dtype=e.dtype, device=device)[:, None]
        if probs is not None:
            q_rows = spare[0, : len(stop)]
            load(q_rows, probs[:, i], who, 1.0, exp=False)
            if len(stop) < len(chunk):
                picked = torch.tensor(stop, dtype=torch.int64, device=device)
                p_rows = torch.index_select(p_rows, 0, picked, out=spare[1, : len(stop)])
            self.keep(p_rows.addcmul_(q_rows, factor(), value=-1).clamp_(min=0), who)
            return
        if 2 * len(stop) >= len(chunk):
            p_rows.addcmul_(e[1], torch.tensor(scale, dtype=e.dtype, device=device)[:, None], value=-1)
        elif len(stop) <= ROW_BY_ROW:
            ps, qs = p_rows.unbind(0), e[1].unbind(0)
            for j in stop:
                ps[j].sub_(qs[j], alpha=scale[j])
        else:
            picked = torch.tensor(stop, dtype=torch.int64, device=device)
            p_rows.index_copy_(0, picked, p_rows.index_select(0, picked).addcmul_(e[1].index_select(0, picked),
                                                                                  factor(), value=-1))
        self.keep(p_rows.clamp_(min=0), chunk)

    def keep(self, weights, chunk):
        """The block sums of ``weights`` [R, V] (row j: sequence chunk[j]'s; other rows are overwritten when their
        sequence stops), or the rows themselves up to ``FLAT`` tokens."""
        if chunk[-1] - chunk[0] + 1 == len(chunk):  # consecutive sequences: written in place
            out = self.sums[chunk[0]: chunk[-1] + 1]
            out.copy_(weights) if self.flat else block_sums(weights, out)
        else:
            index = torch.tensor(chunk, dtype=torch.int64, device=weights.device)
            self.sums.index_copy_(0, index, weights if self.flat else block_sums(weights))

    def weights(self, cols=None, b=None):
        """The weights, as the chunks computed them, again from the logits: of sequence b's whole row, or of
        every sequence at its ``cols`` [B, BLOCK] (gathered by flat index: one read of B·BLOCK numbers)."""
        def at(t, position):
            if cols is None:
                return t[b, position]
            P, V = t.shape[1], t.shape[2]
            start = [(row * P + min(n, P - 1)) * V for row, n in enumerate(position)]
            return torch.take(t, torch.tensor(start, device=cols.device)[:, None] + cols)

        n = self.accepted[b] if cols is None else self.accepted
        p = self.exp(at(self.target_logits, n), self.shift[0] if b is None else self.shift[0][b])
        scale = self.scale if b is None else [self.scale[b]]
        if all(c is None for c in scale):
            return p
        q = (at(self.draft_probs, n).to(p.dtype) if self.draft_probs is not None else
             self.exp(at(self.draft_logits, n if cols is not None else min(n, self.k - 1)),
                      self.shift[1] if b is None else self.shift[1][b]))
        factor = torch.tensor([0.0 if c is None else c for c in scale], dtype=p.dtype, device=p.device)
        weights = torch.addcmul(p, q, factor[:, None] if b is None else factor, value=-1).clamp_(min=0)
        if b is not None or all(c is not None for c in scale):
            return weights
        return torch.where(torch.tensor([c is not None for c in scale], device=p.device)[:, None], weights, p)

    def exp(self, logits, shift):
        """exp(l / T − shift), with the operations the chunks used (no division at T = 1, no shift when it is 0)."""
        x = logits.to(self.sums.dtype)
        if self.temperature != 1.0:
            x = x / self.temperature
        if isinstance(shift, list) and any(shift):
            x = x - torch.tensor(shift, dtype=x.dtype, device=x.device)[:, None]
        elif not isinstance(shift, list) and shift:
            x = x - shift
        return x.exp()

    def tokens(self, v):
        """Every sequence's last token. A residual row with no weight left (p = q up to rounding: p itself is the
        right answer), or a bonus row whose unshifted sum left [1, ∞), is redone as p, shifted by its maximum."""
        for b, total in enumerate(self.sums.sum(-1).tolist()):
            if self.scale[b] is None and not 1 <= total < math.inf:
                self.shift[0][b] = shifted_exp(self.target_logits[b, self.accepted[b]], self.temperature,
                                               self.sums.dtype)[1]
            elif self.scale[b] is not None and not total > 0:
                self.scale[b] = None
            else:
                continue
            row = self.weights(b=b)
            self.sums[b] = row if self.flat else block_sums(row[None])[0]
        if self.flat:
            return sample_weights(self.sums, v)
        j, rest = locate_blocks(self.sums, v)
        cols = j * BLOCK + torch.arange(BLOCK, device=j.device)
        block = self.weights(cols.clamp(max=self.V - 1)).masked_fill_(cols >= self.V, 0)
        return (j * BLOCK + search_block(block, rest))[:, 0]


def load(out, plane, rows, temperature, exp=True):
    """exp(plane[rows] / T) into ``out`` [R, V] (plane: [B, V], one position of the logits; ``exp=False``: the rows
    as they are). Rows that follow each other in memory are read as one slice each; where the runs are short,
    the rows are gathered in one step."""
    plain = exp and temperature == 1.0 and plane.dtype == out.dtype
    runs = consecutive(rows)
    if len(runs) == 1 and plain:
        torch.exp(plane[rows[0]: rows[-1] + 1], out=out)
        return
    if len(runs) * RUN_ELEMENTS > len(rows) * plane.shape[-1]:
        picked = torch.tensor(rows, dtype=torch.int64, device=plane.device)
        if plane.dtype == out.dtype:
            torch.index_select(plane, 0, picked, out=out)
        else:
            out.copy_(plane.index_select(0, picked))
        plain = False
    else:
        j = 0
        for a, b in runs:
            if plain:
                torch.exp(plane[a:b], out=out[j: j + b - a])
            else:
                out[j: j + b - a].copy_(plane[a:b])
            j += b - a
    if exp and not plain:
        if temperature != 1.0:
            out.div_(temperature)
        out.exp_()


def consecutive(rows: list[int]) -> list[tuple[int, int]]:
    """[(start, stop)] of the runs of consecutive ids in ``rows`` (ascending)."""
    runs, start = [], rows[0]
    for prev, row in zip(rows, rows[1:], strict=False):
        if row != prev + 1:
            runs.append((start, prev + 1))
            start = row
    runs.append((start, rows[-1] + 1))
    return runs


def shifted_exp(row, temperature, dtype):
    """exp(l / T − max(l / T)) of one row, and that maximum."""
    scaled = row.to(dtype) / temperature
    top = float(scaled.max())
    return torch.exp(scaled - top), top


def buffer(name, shape, dtype, device):
    """The first ``shape`` of a buffer kept between calls (per thread): no fresh memory, and so no page faults,
    per call."""
    key = (name, dtype, str(device))
    size = math.prod(shape)
    held = getattr(_buffers, "held", None)
    if held is None:
        held = _buffers.held = {}
    if key not in held or held[key].numel() < size:
        held[key] = torch.empty(size, dtype=dtype, device=device)
    return held[key][:size].view(shape)


def all_at_once(draft_tokens, draft_logits, draft_probs, target_logits, temperature, u, v, dtype):
    """Small inputs: every row softmaxed in one step, the tests of all positions at once, then the last token
    from the one row where each sequence stopped: max(0, p - q) there, or p after k acceptances."""
    B, k = draft_tokens.shape
    V = target_logits.shape[-1]
    rows = torch.arange(B, device=target_logits.device)
    p = scaled_softmax(target_logits, temperature, dtype)
    if k == 0:
        return layout(draft_tokens, rows * 0, sample_weights(p[:, 0], v))
    q = scaled_softmax(draft_logits, temperature, dtype) if draft_probs is None else draft_probs.to(dtype)
    x = draft_tokens[..., None]
    n = (u * q.gather(2, x)[..., 0] < p[:, :k].gather(2, x)[..., 0]).long().cumprod(1).sum(1)
    p_n = p.reshape(-1, V).index_select(0, rows * (k + 1) + n)
    q_n = q.reshape(-1, V).index_select(0, rows * k + n.clamp(max=k - 1))
    return layout(draft_tokens, n, sample_weights(residual(p_n, q_n * (n < k).to(dtype)[:, None]), v))  # p - q, or p


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


def rows_read(num_accepted: torch.Tensor, k: int, V: int, draft: str = "logits") -> torch.Tensor:
    """Rows of V numbers a sampler reads per sequence, given where each stopped. ``draft="logits"``
    (``sample_from_logits``): p and q at every position up to the stopping one, 2(n + 1), or all 2k + 1 after k
    acceptances. ``"probs"`` (``sample_from_target_logits``): p up to the stopping position and q only there,
    n + 2, or the k + 1 rows of p. ``"target"``: the rows of p alone, n + 1 (capped at k + 1), which are the rows
    that path exponentiates. A batch of more than one sequence that fits one chunk is read whole, in one step."""
    draft = validate.choice("draft", draft, ("logits", "probs", "target"))
    n = num_accepted
    if n.numel() > 1 and fits_one_chunk(n.numel(), k, V):
        return torch.full_like(n, {"logits": 2 * k + 1, "probs": 2 * k + 1, "target": k + 1}[draft])
    stopped = n < k
    return {"logits": torch.where(stopped, 2 * (n + 1), 2 * k + 1), "probs": torch.where(stopped, n + 2, k + 1),
            "target": n.clamp(max=k) + 1}[draft]


def log_normalizers(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log Σ exp(l / T) of each row of ``logits`` [R, V]: what an exact sampler from logits must compute for every
    row it reads, done as the samplers here do it (exp(l) unshifted into a reused buffer, half ``CHUNK_BYTES`` of rows
    at a time, and each row's sum; a sum outside [1, ∞) redone shifted by the row's maximum). The benchmark times
    it on the rows a sampler read: the floor of its arithmetic. Its chunks are one side of a sampler's chunk."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or not logits.is_floating_point():
        raise validate.BadArgument("logits must be a floating-point tensor [R, V]")
    temperature = validate.number("temperature", temperature, low=0, low_open=True)
    R, V = logits.shape
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    step = max(1, CHUNK_BYTES // 2 // (V * torch.finfo(dtype).bits // 8))
    rows = buffer("rows", (min(step, R), V), dtype, logits.device)
    out, shifted = torch.empty(R, dtype=dtype, device=logits.device), {}
    for c in range(0, R, step):
        e = rows[: min(step, R - c)]
        load(e, logits, range(c, c + len(e)), temperature)
        total = torch.sum(e, -1, out=out[c: c + len(e)])
        lo, hi = torch.aminmax(total)
        if not (lo >= 1 and hi < math.inf):
            for j in (~((total >= 1) & (total < math.inf))).nonzero()[:, 0].tolist():
                row, top = shifted_exp(logits[c + j], temperature, dtype)
                shifted[c + j] = float(row.sum().log()) + top
    out.log_()
    for j, value in shifted.items():
        out[j] = value
    return out


def layout(draft_tokens, num_accepted, last):
    B, k = draft_tokens.shape
    steps = torch.arange(k + 1, device=draft_tokens.device)
    padded = torch.cat([draft_tokens, draft_tokens.new_full((B, 1), -1)], 1)
    tokens = torch.where(steps < num_accepted[:, None], padded, -1)
    return torch.where(steps == num_accepted[:, None], last[:, None], tokens), num_accepted
