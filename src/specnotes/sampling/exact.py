"""Exact speculative sampling (Leviathan et al. 2023, Chen et al. 2023).

p is the target distribution, q the draft's. For each drafted token x (drawn from q), accept it
with probability min(1, p(x)/q(x)); at the first rejection emit a token drawn from
norm(max(0, p - q)) and stop; if all k drafts are accepted, emit a bonus token drawn from the
target's distribution after the last draft. The emitted tokens are distributed exactly as if
they had been sampled from p alone.

Two implementations that agree sample for sample:

- ``speculative_sample_loop``: the reference, one sequence and one position at a time;
- ``speculative_sample``: the same arithmetic vectorized over batch x k x vocabulary.

Both draw their randomness in one place (``draw_uniforms``): u [B, k] for the accept tests and
v [B] for the single token each sequence draws at the end (by inverting its CDF, ``sample_weights``).
Pass the same ``uniforms`` to both and they return the same tokens.
"""

from __future__ import annotations

import torch

from specnotes.validate import BadArgument, BadArgumentType, number


def check_weights(name: str, values, normalized: bool = False):
    """A floating-point tensor [..., V] of finite, non-negative weights whose every row has a positive
    total; ``normalized``: every row sums to 1 (within 1e-3), a probability distribution. Reads the
    values (on a GPU this waits for them): check once, where the tensor enters, not in a loop."""
    if not isinstance(values, torch.Tensor) or not values.is_floating_point() or values.dim() == 0:
        kind = f"a {values.dtype} tensor" if isinstance(values, torch.Tensor) else type(values).__name__
        raise BadArgumentType(f"{name} must be a floating-point tensor [..., V] of weights, got {kind}")
    if values.numel() == 0:
        return values
    if not torch.isfinite(values).all() or (values < 0).any():
        raise BadArgument(f"{name} must hold finite weights >= 0, got values from {values.min()} to {values.max()}")
    totals = values.sum(-1)
    if normalized and not torch.allclose(totals, torch.ones_like(totals), atol=1e-3):
        raise BadArgument(f"{name} must be probability distributions (each row sums to 1), got row sums from "
                          f"{float(totals.min()):.4g} to {float(totals.max()):.4g}")
    if (totals <= 0).any():
        raise BadArgument(f"{name}: every row needs a positive total; a row of zeros gives nothing to sample")
    return values


def logits_to_probs(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Softmax of logits / temperature over the last dim; temperature 0 is greedy (one-hot argmax)."""
    temperature = number("temperature", temperature, low=0)
    if temperature == 0:
        probs = torch.zeros_like(logits, dtype=torch.float32)
        return probs.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    return torch.softmax(logits.float() / temperature, dim=-1)


BLOCK = 128  # tokens per block of the two-level inverse CDF
FLAT = 2048  # up to this many tokens, one cumulative sum over the whole row


def sample_from(probs: torch.Tensor, generator: torch.Generator | None = None, validate: bool = True
                ) -> torch.Tensor:
    """One token per row of probs [..., V] (int64 [...]), via the same inverse CDF as below.
    ``validate=False`` skips reading probs for a check: for the decoding loops' own softmax outputs."""
    if validate:
        check_weights("probs", probs)
    v = torch.rand(probs.shape[:-1], generator=generator, device=probs.device)
    return sample_weights(probs, v)


def block_sums(weights: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """[R, V] -> [R, ceil(V / BLOCK)]: the weight of each block of ``BLOCK`` consecutive tokens (into ``out`` if
    given: a caller that keeps the rows in cache sums them there)."""
    if weights.stride(-1) != 1:
        weights = weights.contiguous()
    R, V = weights.shape
    full = V // BLOCK
    out = weights.new_empty(R, -(-V // BLOCK)) if out is None else out
    torch.sum(weights.as_strided((R, full, BLOCK), (weights.stride(0), BLOCK, 1)), -1, out=out[:, :full])
    if full * BLOCK < V:
        torch.sum(weights[:, full * BLOCK:], -1, out=out[:, full])
    return out


def sample_weights(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The first index whose cumulative weight exceeds v · total, per row of weights [..., V] (unnormalized,
    >= 0; a zero-weight token is never returned), unchecked. Up to ``FLAT`` tokens, one cumulative sum over
    the row; past that, two levels (``sample_blocks``)."""
    V = weights.shape[-1]
    if V <= FLAT:
        return sample_cdf(weights.cumsum(-1), v)
    rows = weights.reshape(-1, V)
    return sample_blocks(rows, block_sums(rows), v.reshape(-1)).view(v.shape)


def sample_blocks(rows: torch.Tensor, sums: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``sample_weights`` on rows [R, V] whose block sums [R, ceil(V / BLOCK)] are given: the block that holds
    v · total by the cumulative sum of the blocks (``locate_blocks``), then the cumulative sum inside that one
    block (``search_block``), a scan over V/BLOCK + BLOCK numbers instead of V."""
    V = rows.shape[1]
    j, rest = locate_blocks(sums, v)
    cols = j * BLOCK + torch.arange(BLOCK, device=j.device)
    block = torch.where(cols < V, rows.gather(1, cols.clamp(max=V - 1)), 0)
    return (j * BLOCK + search_block(block, rest))[:, 0]


def locate_blocks(sums: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of block sums [R, n]: the block j [R, 1] where the cumulative weight passes v · total, never one
    with no weight whatever the rounding, and the weight still to pass inside it [R, 1]."""
    cdf = sums.cumsum(-1)
    goal = v.reshape(-1, 1).to(cdf.dtype) * cdf[:, -1:]
    j = torch.searchsorted(cdf, goal, right=True)
    j = torch.minimum(j, (cdf < cdf[:, -1:]).sum(-1, keepdim=True))  # rounding: never a block with no weight
    return j, goal - (cdf.gather(1, j) - sums.gather(1, j))


def search_block(block: torch.Tensor, rest: torch.Tensor) -> torch.Tensor:
    """The first index [R, 1] in each row of ``block`` [R, BLOCK] whose cumulative weight passes ``rest``, never
    one with no weight whatever the rounding."""
    inside = block.cumsum(-1)
    i = torch.searchsorted(inside, rest, right=True)
    return torch.minimum(i, (inside < inside[:, -1:]).sum(-1, keepdim=True))


def inverse_cdf(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The token whose CDF interval holds v * total: the first index with cdf > v * total.

    ``weights`` need not be normalized; zero-weight tokens are never returned (for v in [0, 1)).
    """
    check_weights("weights", weights)
    if not isinstance(v, torch.Tensor) or v.shape != weights.shape[:-1]:
        raise BadArgument(f"v must be a tensor of shape {tuple(weights.shape[:-1])}, one uniform per row of "
                          f"weights; got {tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__}")
    return sample_weights(weights, v)


def sample_cdf(cdf: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The first index whose cumulative weight exceeds v * total (cdf: cumulative sums [..., V])."""
    target = (v * cdf[..., -1]).unsqueeze(-1)
    index = torch.searchsorted(cdf.contiguous(), target.contiguous(), right=True).squeeze(-1)
    return index.clamp_(max=cdf.shape[-1] - 1)


def draw_uniforms(batch: int, k: int, generator=None, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The random numbers one call consumes: u [B, k] (accept tests), v [B] (the final token)."""
    u = torch.rand(batch, k, generator=generator, device=device)
    v = torch.rand(batch, generator=generator, device=device)
    return u, v


def check_inputs(draft_tokens, draft_probs, target_probs, uniforms, validate: bool):
    for name, value in (("draft_tokens", draft_tokens), ("draft_probs", draft_probs), ("target_probs", target_probs)):
        if not isinstance(value, torch.Tensor):
            raise BadArgumentType(f"{name} must be a tensor, got {type(value).__name__}")
    if draft_tokens.dim() != 2 or draft_probs.dim() != 3 or target_probs.dim() != 3:
        raise BadArgument(
            "expected draft_tokens [B,k], draft_probs [B,k,V], target_probs [B,k+1,V]; got "
            f"{tuple(draft_tokens.shape)}, {tuple(draft_probs.shape)}, {tuple(target_probs.shape)}"
        )
    B, k = draft_tokens.shape
    V = target_probs.shape[-1]
    if draft_probs.shape != (B, k, V) or target_probs.shape != (B, k + 1, V):
        raise BadArgument(
            f"shape mismatch: draft_tokens {tuple(draft_tokens.shape)} needs draft_probs {(B, k, V)} and "
            f"target_probs {(B, k + 1, V)}; got {tuple(draft_probs.shape)}, {tuple(target_probs.shape)}"
        )
    if draft_tokens.dtype != torch.int64:
        raise BadArgumentType(f"draft_tokens must be int64 token ids, got {draft_tokens.dtype}")
    if not draft_probs.is_floating_point() or not target_probs.is_floating_point():
        raise BadArgumentType("draft_probs and target_probs must be floating point probabilities")
    if uniforms is not None:
        u, v = uniforms
        if u.shape != (B, k) or v.shape != (B,):
            raise BadArgument(f"uniforms must have shapes {(B, k)} and {(B,)}")
    if not validate:
        return
    if k and ((draft_tokens < 0) | (draft_tokens >= V)).any():
        raise BadArgument(f"draft_tokens must be token ids in [0, {V}), got ids from {int(draft_tokens.min())} "
                          f"to {int(draft_tokens.max())}")
    check_weights("draft_probs", draft_probs, normalized=True)
    check_weights("target_probs", target_probs, normalized=True)
    if k and (draft_probs.gather(-1, draft_tokens[..., None]) <= 0).any():
        raise BadArgument("a drafted token has zero draft probability: it cannot have been drawn from q")


def speculative_sample(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    uniforms: tuple[torch.Tensor, torch.Tensor] | None = None,
    validate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify k drafted tokens per sequence against the target, vectorized (no loop over B or k).

    draft_tokens [B,k] int64, draft_probs q [B,k,V], target_probs p [B,k+1,V]
    -> tokens [B,k+1] int64 (accepted drafts, then one corrected or bonus token, then -1),
       num_accepted [B] int64 in 0..k.
    """
    check_inputs(draft_tokens, draft_probs, target_probs, uniforms, validate)
    B, k = draft_tokens.shape
    if B == 1:  # one sequence: walking its positions takes fewer operations than the vectorized form
        return speculative_sample_loop(draft_tokens, draft_probs, target_probs, generator, uniforms, validate=False)
    u, v = draw_uniforms(B, k, generator, target_probs.device) if uniforms is None else uniforms

    # accept draft i with probability min(1, p(x_i) / q(x_i)); written without a division
    x = draft_tokens[..., None]
    accepted = u * draft_probs.gather(-1, x)[..., 0] < target_probs[:, :k].gather(-1, x)[..., 0]
    num_accepted = accepted.long().cumprod(-1).sum(-1)  # drafts before the first rejection

    # the last token: from norm(max(0, p - q)) at the first rejection, from p[k] if none; only these rows
    # of p and q are read whole
    V = target_probs.shape[-1]
    rows = torch.arange(B, device=target_probs.device)
    weights = target_probs.reshape(-1, V).index_select(0, rows * (k + 1) + num_accepted)
    if k:
        q_n = draft_probs.reshape(-1, V).index_select(0, rows * k + num_accepted.clamp(max=k - 1))
        rejected = (num_accepted < k).to(q_n.dtype)[:, None]
        residual = torch.addcmul(weights, q_n, rejected, value=-1).clamp_(min=0)  # p - q, or p if none rejected
        # p == q up to rounding leaves no residual mass; then p itself is the right answer
        empty = residual.sum(-1) <= 0
        weights = torch.where(empty[:, None], weights, residual) if empty.any() else residual
    last = sample_weights(weights, v)

    steps = torch.arange(k + 1, device=target_probs.device)
    padded = torch.cat([draft_tokens, draft_tokens.new_full((B, 1), -1)], dim=1)
    tokens = torch.where(steps < num_accepted[:, None], padded, -1)
    tokens = torch.where(steps == num_accepted[:, None], last[:, None], tokens)
    return tokens, num_accepted


def speculative_sample_loop(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    uniforms: tuple[torch.Tensor, torch.Tensor] | None = None,
    validate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: the same contract as ``speculative_sample``, one sequence and position at a time."""
    check_inputs(draft_tokens, draft_probs, target_probs, uniforms, validate)
    B, k = draft_tokens.shape
    u, v = draw_uniforms(B, k, generator, target_probs.device) if uniforms is None else uniforms
    tokens = torch.full((B, k + 1), -1, dtype=torch.int64, device=draft_tokens.device)
    num_accepted = torch.zeros(B, dtype=torch.int64, device=draft_tokens.device)
    for b in range(B):
        n = 0
        while n < k:
            x = draft_tokens[b, n]
            p, q = target_probs[b, n], draft_probs[b, n]
            if u[b, n] * q[x] < p[x]:  # accept with probability min(1, p(x) / q(x))
                tokens[b, n] = x
                n += 1
                continue
            residual = (p - q).clamp(min=0)
            weights = residual if residual.sum() > 0 else p
            tokens[b, n] = sample_weights(weights, v[b])
            break
        else:  # all k drafts accepted: a bonus token from the target after the last draft
            tokens[b, k] = sample_weights(target_probs[b, k], v[b])
        num_accepted[b] = n
    return tokens, num_accepted


def check_pair(names: tuple[str, str], p, q):
    """Two tensors of probability distributions of the same shape."""
    check_weights(names[0], p, normalized=True)
    check_weights(names[1], q, normalized=True)
    if p.shape != q.shape:
        raise BadArgument(f"{names[0]} and {names[1]} must have the same shape, got {tuple(p.shape)} and "
                          f"{tuple(q.shape)}")


def acceptance_rate(draft_probs: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """alpha = sum_x min(p(x), q(x)) per position: the chance a draft drawn from q is accepted."""
    check_pair(("draft_probs", "target_probs"), draft_probs, target_probs)
    return torch.minimum(draft_probs, target_probs).sum(-1)


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    """½·Σ|p − q| over the last axis (summed over any leading ones): 0 for equal distributions, 1 for disjoint."""
    check_pair(("p", "q"), p, q)
    return 0.5 * float((p.double() - q.double()).abs().sum())
