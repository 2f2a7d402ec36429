"""Rejection sampling straight from logits: the whole acceptance step of a batch without materializing p or q.

``speculative_sample`` takes probabilities, so a caller first writes softmax(logits) for all B·(2k+1) rows
and the sampler reads them back. ``sample_from_logits`` takes the logits and reads each row it needs once,
normalizing it while it is in cache; no row of probabilities is written to memory.

fp32 logits on the CPU take ``by_kernel``: the step compiled for this CPU (``kernel``, csrc/accept.c), one
sequence after another as the reference loop walks them, each row's log-normalizer in one pass with a vectorized
exp, a second pass only over the two rows a sequence stops on, and the last token drawn there by the same
two-level inverse CDF. Everything else (other dtypes, other devices, no C compiler, ``SPECNOTES_KERNEL=0``, a NaN
or +inf logit) takes the torch path below, which the kernel must agree with (tests/sampling/test_kernel.py).

The kernel has two routes to the residual, chosen per call by ``route`` from the acceptance the caller expects
(``expected_acceptance``: the chance that a draft is accepted, such as ``acceptance_of`` the previous step's
num_accepted). "kept": the first pass over each row also writes its exponentials to a buffer of the thread's, and
the residual is read from there, with no exp. "recomputed": the rows a sequence stops on are exponentiated again.
The kept route saves nearly a pass over each of the two rows a sequence stops on, and costs a little on every row
it reads (the stores, and with the draft's probabilities the q row fetched ahead of a rejection, wasted on an
acceptance). At acceptance α a sequence reads 1 / (1 - α) positions for each stop, whatever k, so the kept route
wins below some α. The rule: kept where the expected acceptance is below ``KEPT_BELOW`` (0.8 from draft logits, 0.7
with the draft's probabilities, measured on a Zen 4 core: csrc/accept.c's header) or where none is given,
recomputed from there up. With no estimate it is the kept route, whose worst case (every draft accepted) costs less
over the other route than the other's worst case (every draft rejected). The route depends on nothing else, not the
thread count nor the data, and both draw from the same law: their accept tests are the same computation, and a last
token differs only where rounding moves a draw.

The torch path: position by position, for the sequences that accepted every draft so far, a few rows at a time
(so that they stay in cache), it writes softmax(l / T) of the rows of p and q into one reused buffer with torch's
softmax kernel: on the CPU its vectorized exp is faster than ``torch.exp``, and it shifts each row by its maximum, so
no row overflows or underflows whatever its logits. It tests each drafted token with min(1, p(x)/q(x)), p(x)
and q(x) read off the buffer; and, for the sequences that stop there and only for them, computes in place the
weights of their last token, max(0, p − q), and keeps only their sums over blocks of 128 tokens, with the
log-normalizer lse = log Σ exp(l / T) of the two rows they stopped on, read off what is already at hand:
l(x) / T − log p(x) at the drafted token (a logsumexp of the row where p(x) is too small to trust), or, for a
bonus row, max(l / T) − log max(p). After k acceptances the weights are p of the bonus row itself. At the end
one search over the block sums finds, for every sequence, the block its draw falls in; the 128 weights of that
block alone are computed again from the logits as exp(l / T − lse) and searched (``sampling.locate_blocks``,
``search_block``): no row of weights is written to memory. exp's rounding differs from the softmax kernel's
in the last bits (about 1e-6 relative), so the search inside the block is scaled to the block's weights as
computed again, which keeps every draw inside its block and on a token of weight > 0; a block left with no
weight at all by that rounding is redrawn from its sequence's whole row. Rows past a sequence's first
rejection are never read; logit rows that follow each other in memory are read as one slice, not gathered.
``sample_from_target_logits`` is the same step when the drafter hands over its probabilities q (vLLM's
interface): only the target's rows are normalized, and a row of q is read only where it rejects.

One sequence (B = 1) walks its positions with no tables and with exp(l) unshifted, which costs one pass less
than a shift: a row whose sum lies in [1, ∞) lost nothing by that (no term overflowed, and a term that fell
below the smallest normal number has a probability below it too, as in a softmax); the rare row outside that
range is redone shifted by its maximum. Small batches that fit one chunk are softmaxed whole, in one step.

Randomness as ``speculative_sample``: u [B, k] for the accept tests, v [B] for the final token. The result
follows the same distribution; sample for sample it agrees except where rounding moves a comparison.
At temperature 0 only the target's argmax is needed: the draft's rows are not read at all.
"""

from __future__ import annotations

import math
import threading

import torch

from specnotes import validate
from specnotes.sampling import kernel
from specnotes.sampling.exact import BLOCK, FLAT, block_sums, draw_uniforms, locate_blocks, sample_weights, search_block

CHUNK_BYTES = 1 << 22  # a chunk's p and q rows, exponentiated into one reused buffer: 4 MB, 2 MB a side
# the kernel keeps each row's exponentials where the expected acceptance is below this (``route``), by the draft's form
KEPT_BELOW = {"logits": 0.8, "probs": 0.7}
RUN_ELEMENTS = 4096  # a run of consecutive rows shorter than this on average is gathered instead
ROW_BY_ROW = 8  # up to this many stopping rows of a chunk, their residual is taken one row at a time
_buffers = threading.local()


def check_logits(draft_tokens, draft_logits, target_logits, temperature, uniforms, draft_name="draft_logits",
                 tokens_in_range=True):
    """The arguments' shapes, dtypes and temperature -> the temperature; and, unless ``tokens_in_range`` is False
    (the caller checks them later, ``check_tokens``), that every drafted token lies in [0, V)."""
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
    if tokens_in_range:
        check_tokens(draft_tokens, V)
    temperature = validate.number("temperature", temperature, low=0)
    if temperature > 0 and draft_logits is None and k:
        raise validate.BadArgument(f"{draft_name} are needed at temperature > 0")
    if uniforms is not None and (uniforms[0].shape != (B, k) or uniforms[1].shape != (B,)):
        raise validate.BadArgument(f"uniforms must have shapes {(B, k)} and {(B,)}")
    return temperature


def check_tokens(draft_tokens, V):
    if draft_tokens.shape[1] and ((draft_tokens < 0) | (draft_tokens >= V)).any():
        raise validate.BadArgument(f"draft_tokens must lie in [0, {V})")


def sample_from_logits(
    draft_tokens: torch.Tensor,
    draft_logits: torch.Tensor | None,
    target_logits: torch.Tensor,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    uniforms: tuple[torch.Tensor, torch.Tensor] | None = None,
    expected_acceptance: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``speculative_sample`` with p = softmax(target_logits / T) and q = softmax(draft_logits / T), computed
    from the logits in one read of each row it needs (module docstring). Same shapes and output layout:
    -> tokens [B, k+1] (accepted drafts, one corrected or bonus token, -1 after), num_accepted [B].
    ``expected_acceptance``: the chance a draft is accepted, as the caller expects it (``acceptance_of``), which
    picks the kernel's route (``route``); it changes how fast, not what is drawn."""
    temperature = check_logits(draft_tokens, draft_logits, target_logits, temperature, uniforms, tokens_in_range=False)
    kept = route(expected_acceptance) == "kept"
    return sample(draft_tokens, draft_logits, None, target_logits, temperature, generator, uniforms, kept)


def sample_from_target_logits(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_logits: torch.Tensor,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    uniforms: tuple[torch.Tensor, torch.Tensor] | None = None,
    expected_acceptance: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``speculative_sample`` with p = softmax(target_logits / T) and the draft's own probabilities q [B, k, V]
    (the distribution its tokens were drawn from, already at its temperature), as vLLM's rejection sampler takes
    them: only the target's rows are exponentiated, and a row of q is read only where it rejects. Same output;
    ``expected_acceptance`` as in ``sample_from_logits``."""
    temperature = check_logits(draft_tokens, draft_probs, target_logits, temperature, uniforms, "draft_probs", False)
    if draft_probs is not None and not draft_probs.is_floating_point():
        raise validate.BadArgumentType(f"draft_probs must be floating point probabilities, got {draft_probs.dtype}")
    kept = route(expected_acceptance, "probs") == "kept"
    return sample(draft_tokens, None, draft_probs, target_logits, temperature, generator, uniforms, kept)


def route(expected_acceptance: float | None, draft: str = "logits") -> str:
    """The kernel's route for a call (module docstring) whose draft comes as ``draft`` ("logits":
    ``sample_from_logits``; "probs": ``sample_from_target_logits``): "kept" (each row's exponentials kept from its
    first pass for the residual) where the expected acceptance is below ``KEPT_BELOW[draft]`` or None (no estimate),
    "recomputed" (the rows a sequence stops on exponentiated again) from there up."""
    below = KEPT_BELOW[validate.choice("draft", draft, tuple(KEPT_BELOW))]
    if expected_acceptance is None:
        return "kept"
    return "kept" if validate.probability("expected_acceptance", expected_acceptance) < below else "recomputed"


def acceptance_of(num_accepted: torch.Tensor, k: int) -> float | None:
    """The chance a draft is accepted, estimated from a step's ``num_accepted`` [B] of k drafts each: accepted
    drafts over drafts tested (a sequence tests n + 1 drafts when it stops after n, k when it accepts all), the
    estimate of a constant chance per draft. None where no draft was tested (k = 0 or B = 0). A caller passes it,
    or a running mean of it, as the next step's ``expected_acceptance``."""
    k = validate.integer("k", k, low=0)
    n = num_accepted.long()
    tested = int((n + (n < k)).sum())
    return int(n.sum()) / tested if tested else None


def sample(draft_tokens, draft_logits, draft_probs, target_logits, temperature, generator, uniforms, kept=True):
    """The step, once the arguments passed ``check_logits`` (the drafted tokens' range aside: checked here, after
    the kernel, which checks them itself, so that its path pays no torch call for it)."""
    B, k = draft_tokens.shape
    u, v = draw_uniforms(B, k, generator, target_logits.device) if uniforms is None else uniforms
    if temperature > 0 and kernel.usable(target_logits, draft_logits, draft_probs, u, v):
        taken = by_kernel(draft_tokens, draft_logits, draft_probs, target_logits, temperature, u, v, kept)
        if taken is not None:
            return taken
    check_tokens(draft_tokens, target_logits.shape[-1])
    if temperature == 0:
        best = target_logits.argmax(-1)  # [B, k+1]: greedy p is one-hot, and so is the residual after a miss
        num_accepted = (draft_tokens == best[:, :k]).long().cumprod(-1).sum(-1)
        return layout(draft_tokens, num_accepted, best[torch.arange(B, device=best.device), num_accepted])
    dtype = torch.float64 if target_logits.dtype == torch.float64 else torch.float32
    if B == 1:
        return one_sequence(draft_tokens, draft_logits, draft_probs, target_logits, temperature, u, v, dtype)
    if fits_one_chunk(B, k, target_logits.shape[-1]):
        return all_at_once(draft_tokens, draft_logits, draft_probs, target_logits, temperature, u, v, dtype)
    return by_position(draft_tokens, draft_logits, draft_probs, target_logits, temperature, u, v, dtype)


def by_kernel(draft_tokens, draft_logits, draft_probs, target_logits, temperature, u, v, kept=True):
    """fp32 on the CPU: the whole step in compiled code (``kernel``, csrc/accept.c), one sequence after another as
    the reference loop walks them, shared among the threads, by the kept route or the recomputed one (``route``).
    None where some row has no finite normalizer (a NaN or +inf logit): the torch path then does what a softmax
    does with such a row."""
    drafts = draft_tokens if draft_tokens.is_contiguous() else draft_tokens.contiguous()
    accepted, tokens, handed = kernel.accept_step(drafts, draft_logits if draft_probs is None else draft_probs,
                                                  draft_probs is not None, target_logits, u, v, temperature, kept=kept)
    return None if handed else (tokens, accepted)


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
    (module docstring). Per chunk two operations fill a table: softmax(l / T) of its p and q rows into a reused
    buffer, and the probabilities at the drafted token. The tests are read off the table; only a chunk where some
    sequence stops does more while its rows are in cache: the weights of their last token, max(0, p − q) in place,
    and their sums over blocks of ``BLOCK`` tokens (``Draws``). One search at the end draws every last token."""
    B, k = draft_tokens.shape
    V = target_logits.shape[-1]
    device = target_logits.device
    sides = 1 if draft_logits is None else 2  # rows normalized per sequence and position: p, and q from logits
    step = min(B, max(1, CHUNK_BYTES // (2 * V * torch.finfo(dtype).bits // 8)))  # sequences per chunk
    rows = buffer("rows", (3, step, V), dtype, device)  # softmax of a chunk's p rows, of its q rows; a spare
    table = buffer("table", (4, B), dtype, device)  # p(x), q(x), and the logits l_p(x), l_q(x)
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
        if draft_probs is not None:  # q(x) is given: R numbers read
            table[1, :R] = at(draft_probs).gather(1, x[:, None])[:, 0]
        if not draws.flat:  # the logits at the drafted tokens: a stopping row's normalizer is l(x) / T − log p(x)
            flat = ((picked if picked is not None else torch.arange(B, device=device)) * (k + 1) + i) * V + x
            table[2, :R] = torch.take(target_logits, flat)
            if draft_logits is not None:
                table[3, :R] = torch.take(draft_logits, flat - (picked if picked is not None else
                                                                torch.arange(B, device=device)) * V)
        planes = (target_logits[:, i],) if draft_logits is None else (target_logits[:, i], draft_logits[:, i])
        views = zip(table[:sides, :R, None].split(step, 1), x.expand(sides, R)[..., None].split(step, 1),
                    strict=True)
        kept, full = [], rows[:sides]
        for c, (at_x, index) in zip(range(0, R, step), views, strict=True):
            chunk = alive[c: c + step]
            e = full if len(chunk) == step else rows[:sides, : len(chunk)]
            for out, plane in zip(e.unbind(0), planes, strict=True):
                load(out, plane, chunk, temperature, softmax=True)
            torch.gather(e, 2, index, out=at_x)
            gp, gq, lp, lq = table[:, c: c + len(chunk)].tolist()
            stop = []
            for j, b in enumerate(chunk):
                if u_i[c + j] * gq[j] < gp[j]:  # accept with probability min(1, p(x) / q(x))
                    kept.append(b)
                else:
                    stop.append(j)
            if stop:
                if not draws.flat:
                    draws.normalizers(planes, chunk, stop, (gp, gq), (lp, lq))
                draws.residual(e, chunk, stop, i, rows[1:])
        for b in kept:
            draws.accepted[b] += 1
        alive = kept
    for c in range(0, len(alive), step):  # k acceptances: the bonus token's weights are p of row k itself
        chunk = alive[c: c + step]
        load(rows[0, : len(chunk)], target_logits[:, k], chunk, temperature, softmax=True)
        if not draws.flat:
            draws.bonus_normalizers(rows[0, : len(chunk)], target_logits[:, k], chunk)
        draws.keep(rows[0, : len(chunk)], chunk)
    return layout(draft_tokens, torch.tensor(draws.accepted, device=device), draws.tokens(v))


TINY = 2.0 ** -100  # a probability at least this large gives its row's normalizer to float32's precision


class Draws:
    """The last token of every sequence, drawn by inverse CDF with its v as ``sampling.sample_weights`` draws, in
    two steps. While a chunk is in cache, ``residual`` (or ``keep``, for a bonus row) writes the sums of the
    weights over blocks of ``BLOCK`` tokens, a row per sequence, and ``normalizers`` (``bonus_normalizers``) keeps
    the log-normalizers of the rows it stopped on. At the end, ``tokens`` finds for every sequence the block where
    its cumulative weight passes v · total, computes again from the logits the ``BLOCK`` weights of that block
    alone, as exp(l / T − log-normalizer), and searches inside it: the weights themselves are never written to
    memory. Up to ``FLAT`` tokens the rows are kept whole instead."""

    def __init__(self, draft_logits, draft_probs, target_logits, temperature, dtype, k):
        B, V = target_logits.shape[0], target_logits.shape[-1]
        self.draft_logits, self.draft_probs, self.target_logits = draft_logits, draft_probs, target_logits
        self.temperature, self.flat, self.V = temperature, V <= FLAT, V
        self.sums = buffer("sums", (B, V if self.flat else -(-V // BLOCK)), dtype, target_logits.device)
        self.accepted, self.stopped = [0] * B, [False] * B  # stopped: the weights are max(0, p − q); else p
        self.shift = ([0.0] * B, [0.0] * B)  # log Σ exp(l / T) of the row of p and of q each sequence stopped on
        self.k, self.rows = k, torch.arange(B, device=target_logits.device)[:, None]

    def normalizers(self, planes, chunk, stop, at_x, logit_x):
        """The log-normalizers of the stopping rows, lse = l(x) / T − log p(x), read off the table; a row whose
        probability at x is below ``TINY`` (possibly rounded, or 0) takes a logsumexp of its logits instead."""
        T = self.temperature
        for side, plane in enumerate(planes):
            for j in stop:
                b, prob = chunk[j], at_x[side][j]
                self.shift[side][b] = (logit_x[side][j] / T - math.log(prob) if prob >= TINY else
                                       float(torch.logsumexp(plane[b].to(self.sums.dtype) / T, -1)))

    def bonus_normalizers(self, probs, plane, chunk):
        """The log-normalizers of bonus rows from their softmax ``probs``: max(l / T) − log max(p), since the
        softmax shifted by the maximum and its largest probability is 1 / Σ exp(l / T − max)."""
        top = torch.cat([plane[a:b].amax(-1) for a, b in consecutive(chunk)]).to(probs.dtype)
        if self.temperature != 1.0:
            top = top / self.temperature
        for b, value in zip(chunk, top.sub_(probs.amax(-1).log_()).tolist(), strict=True):
            self.shift[0][b] = value

    def residual(self, e, chunk, stop, i, spare):
        """The stopping rows' weights max(0, p − q), then their block sums. From logits, in place of p in ``e[0]``:
        where most of the chunk stops, every row at once (the others' rows are not needed any more), a few row by
        row, many gathered. From probabilities, the stopping rows of q are read here, and only they, into
        ``spare[0]``; their rows of p are gathered into ``spare[1]`` unless the whole chunk stops."""
        p_rows, probs, device = e[0], self.draft_probs, e.device
        who = [chunk[j] for j in stop]
        for b in who:
            self.stopped[b] = True
        if probs is not None:
            q_rows = spare[0, : len(stop)]
            load(q_rows, probs[:, i], who, 1.0, exp=False)
            if len(stop) < len(chunk):
                picked = torch.tensor(stop, dtype=torch.int64, device=device)
                p_rows = torch.index_select(p_rows, 0, picked, out=spare[1, : len(stop)])
            self.keep(p_rows.sub_(q_rows).clamp_(min=0), who)
            return
        if 2 * len(stop) >= len(chunk):
            p_rows.sub_(e[1])
        elif len(stop) <= ROW_BY_ROW:
            ps, qs = p_rows.unbind(0), e[1].unbind(0)
            for j in stop:
                ps[j].sub_(qs[j])
        else:
            picked = torch.tensor(stop, dtype=torch.int64, device=device)
            p_rows.index_copy_(0, picked, p_rows.index_select(0, picked).sub_(e[1].index_select(0, picked)))
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
        """The weights again from the logits, as exp(l / T − lse): of sequence b's whole row, or of every sequence
        at its ``cols`` [B, BLOCK] (gathered by flat index: one read of B·BLOCK numbers)."""
        def at(t, position):
            if cols is None:
                return t[b, position]
            P, V = t.shape[1], t.shape[2]
            start = [(row * P + min(n, P - 1)) * V for row, n in enumerate(position)]
            return torch.take(t, torch.tensor(start, device=cols.device)[:, None] + cols)

        n = self.accepted[b] if cols is None else self.accepted
        p = self.exp(at(self.target_logits, n), self.shift[0] if b is None else self.shift[0][b])
        stopped = self.stopped if b is None else [self.stopped[b]]
        if not any(stopped):
            return p
        q = (at(self.draft_probs, n).to(p.dtype) if self.draft_probs is not None else
             self.exp(at(self.draft_logits, n if cols is not None else min(n, self.k - 1)),
                      self.shift[1] if b is None else self.shift[1][b]))
        weights = torch.sub(p, q).clamp_(min=0)
        if all(stopped):
            return weights
        return torch.where(torch.tensor(stopped, device=p.device)[:, None], weights, p)

    def exp(self, logits, shift):
        """exp(l / T − shift), shift: the row's log-normalizer (a list: one per row)."""
        x = logits.to(self.sums.dtype)
        if self.temperature != 1.0:
            x = x / self.temperature
        if isinstance(shift, list):
            shift = torch.tensor(shift, dtype=x.dtype, device=x.device)[:, None]
        return torch.sub(x, shift).exp_()  # not in place: x may be a view of the caller's logits

    def tokens(self, v):
        """Every sequence's last token. A residual row with no weight left (p = q up to rounding) is redone as p
        itself, the right answer. The search inside a block is scaled to the weights computed again (exp's
        rounding differs from the softmax's in the last bits); a sequence whose block has no weight left in them
        draws from its whole row computed again."""
        for b, total in enumerate(self.sums.sum(-1).tolist()):
            if self.stopped[b] and not total > 0:
                self.stopped[b] = False
                row = self.weights(b=b)
                self.sums[b] = row if self.flat else block_sums(row[None])[0]
        if self.flat:
            return sample_weights(self.sums, v)
        j, rest = locate_blocks(self.sums, v)
        cols = j * BLOCK + torch.arange(BLOCK, device=j.device)
        block = self.weights(cols.clamp(max=self.V - 1)).masked_fill_(cols >= self.V, 0)
        have = block.sum(-1, keepdim=True)
        token = (j * BLOCK + search_block(block, rest * (have / self.sums.gather(1, j))))[:, 0]
        for b in (~(have[:, 0] > 0)).nonzero()[:, 0].tolist():  # rare: rounding left that block empty
            row = self.weights(b=b)
            if not float(row.sum()) > 0:
                self.stopped[b] = False
                row = self.weights(b=b)
            token[b] = sample_weights(row[None], v[b: b + 1])[0]
        return token


def load(out, plane, rows, temperature, exp=True, softmax=False):
    """exp(plane[rows] / T) into ``out`` [R, V] (plane: [B, V], one position of the logits; ``softmax``:
    softmax(plane[rows] / T) instead; ``exp=False``: the rows as they are). Rows that follow each other in memory
    are read as one slice each; where the runs are short, or for a softmax with more than one thread (it shares
    the rows of one call among the threads), the rows are gathered in one step."""
    plain = exp and temperature == 1.0 and plane.dtype == out.dtype
    f = softmax_into if softmax else (lambda a, o: torch.exp(a, out=o))
    runs = consecutive(rows)
    if len(runs) == 1 and plain:
        f(plane[rows[0]: rows[-1] + 1], out)
        return
    threads_share = softmax and len(runs) > 1 and torch.get_num_threads() > 1  # softmax splits rows among threads
    if threads_share or len(runs) * RUN_ELEMENTS > len(rows) * plane.shape[-1]:
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
                f(plane[a:b], out[j: j + b - a])
            else:
                out[j: j + b - a].copy_(plane[a:b])
            j += b - a
    if exp and not plain:
        if temperature != 1.0:
            out.div_(temperature)
        f(out, out)


def softmax_into(rows, out):
    """softmax(rows) over the last axis into ``out``. torch's softmax copies rows that are not contiguous (rows of
    one position of [B, P, V] logits are not) into fresh memory first: with one thread each row is taken alone
    (each is contiguous), with more the rows are copied into ``out`` and normalized there, so that the threads
    share the rows."""
    if rows.is_contiguous() or rows is out:
        torch.softmax(rows, -1, out=out)
    elif torch.get_num_threads() == 1:
        for row, into in zip(rows.unbind(0), out.unbind(0), strict=True):
            torch.softmax(row, -1, out=into)
    else:
        torch.softmax(out.copy_(rows), -1, out=out)


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


def rows_read(num_accepted: torch.Tensor, k: int, V: int, draft: str = "logits", compiled: bool | None = None
              ) -> torch.Tensor:
    """Rows of V numbers a sampler reads per sequence of fp32 logits on the CPU, given where each stopped.
    ``draft="logits"`` (``sample_from_logits``): p and q at every position up to the stopping one, 2(n + 1), or all
    2k + 1 after k acceptances. ``"probs"`` (``sample_from_target_logits``): p up to the stopping position and q only
    there, n + 2, or the k + 1 rows of p. ``"target"``: the rows of p alone, n + 1 (capped at k + 1), which are the
    rows that path exponentiates. ``compiled`` (default: whether the kernel is available): False, the torch path,
    which reads a batch of more than one sequence that fits one chunk whole, in one step."""
    draft = validate.choice("draft", draft, ("logits", "probs", "target"))
    n = num_accepted
    compiled = kernel.available() if compiled is None else compiled
    if not compiled and n.numel() > 1 and fits_one_chunk(n.numel(), k, V):
        return torch.full_like(n, {"logits": 2 * k + 1, "probs": 2 * k + 1, "target": k + 1}[draft])
    stopped = n < k
    return {"logits": torch.where(stopped, 2 * (n + 1), 2 * k + 1), "probs": torch.where(stopped, n + 2, k + 1),
            "target": n.clamp(max=k) + 1}[draft]


def log_normalizers(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log Σ exp(l / T) of each row of ``logits`` [R, V]: what an exact sampler from logits must compute for every
    row it reads. fp32 on the CPU: the kernel's one pass per row (``by_kernel`` takes each normalizer this way).
    Otherwise as the torch one-sequence sampler does it (exp(l) unshifted into a reused buffer, half
    ``CHUNK_BYTES`` of rows at a time, and each row's sum; a sum outside [1, ∞) redone shifted by the row's
    maximum). The benchmark times it on the rows a sampler read, as one of the floor's measured ways to the
    normalizers."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or not logits.is_floating_point():
        raise validate.BadArgument("logits must be a floating-point tensor [R, V]")
    temperature = validate.number("temperature", temperature, low=0, low_open=True)
    R, V = logits.shape
    if kernel.usable(logits):
        out = torch.empty(R, dtype=logits.dtype)
        kernel.log_normalizers(logits, temperature, out)
        if bool(out.isfinite().all()):
            return out
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
