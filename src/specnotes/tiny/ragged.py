"""A cached forward pass over rows of different lengths, with the matmuls run over the real tokens only.

A speculative step that verifies k_b drafts for row b (Chapter 11's budget, a suffix drafter's variable drafts)
has Σ(k_b + 1) real tokens. ``Transformer.forward`` takes a rectangle [B, n]: every row padded to the longest,
so every matmul runs over B·n rows. Engines pack the tokens flat instead (vLLM's ``query_start_loc``): the
projections, the MLP and the LM head see only the real tokens, and only attention, where each row has its own
cache, is laid out per row. ``packed_forward`` does that here: the same logits as ``model(tokens, cache,
n_valid)`` at every real position, for matmul work in proportion to the real tokens. ``sample_rows`` is the exact
sampler for such rows: each keeps at most its own number of drafts.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from specnotes import validate
from specnotes.sampling.exact import speculative_sample
from specnotes.tiny.generate import keep_proposed
from specnotes.tiny.model import Transformer, apply_rope, check_tokens


def packed_forward(model: Transformer, tokens: torch.Tensor, cache, lengths: torch.Tensor,
                   keep: torch.Tensor | None = None) -> torch.Tensor:
    """Logits [B, n, V] for tokens [B, n] whose row b holds ``lengths[b]`` real tokens (the rest is padding,
    its logits zero). Token i of row b sits at position ``cache.lengths[b] + i``; afterwards the cache keeps
    ``keep[b]`` of them (default: ``lengths``), as ``model(tokens, cache, n_valid=keep)`` would."""
    check_tokens(tokens)
    B, n = tokens.shape
    lengths = torch.as_tensor(lengths, dtype=torch.int64, device=tokens.device)
    keep = lengths if keep is None else torch.as_tensor(keep, dtype=torch.int64, device=tokens.device)
    if lengths.shape != (B,) or (lengths < 0).any() or (lengths > n).any() or (keep > lengths).any():
        raise validate.BadArgument(f"lengths must be {B} counts in 0..{n} and keep at most lengths, got "
                                   f"{lengths.tolist()} and {keep.tolist()}")
    slots, mask = model.positions_and_mask(tokens, cache)
    cache.reserve(slots, keep)
    cos, sin = model.rope_at(slots)
    real = torch.arange(n, device=tokens.device) < lengths[:, None]  # [B, n]
    x = model.tok_emb(tokens[real])  # [T, d]: the real tokens, packed
    for layer, block in enumerate(model.blocks):
        H, D = block.n_heads, block.d_head
        qkv = x.new_zeros(B, n, 3 * H * D)
        qkv[real] = block.wqkv(block.attn_norm(x))
        q, k, v = qkv.view(B, n, 3, H, D).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        cache.write(layer, k, v, slots)
        keys, values = cache.read(layer, mask.shape[-1])
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # [B, H, n, D]: per row
        x = block.mlp(x + block.wo(y.transpose(1, 2)[real].reshape(len(x), H * D)))
    cache.lengths = cache.lengths + keep
    logits = model.lm_head(model.norm(x))
    out = logits.new_zeros(B, n, logits.shape[-1])
    out[real] = logits
    return out


def sample_rows(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor, ks: torch.Tensor,
                generator: torch.Generator | None = None, sampler=None):
    """Exact speculative sampling where row b verifies only its first ``ks[b]`` drafts: ``target_probs``
    [B, k + 1, V] is the target's at positions 0..ks[b] of row b (what a packed verify pass computed) and anything
    past them. The sampler runs on every position, and ``keep_proposed`` keeps at most ks[b] drafts: the token at
    position ks[b] is a sample of the target's distribution there whichever way it came (the draft accepted with
    probability min(1, p/q), or the residual), the bonus a row with ks[b] drafts earns; later ones are dropped."""
    if sampler is None:  # the decoding loops' own softmax outputs: no check that reads them
        sampler = functools.partial(speculative_sample, validate=False)
    tokens, accepted = sampler(draft_tokens, draft_probs, target_probs, generator=generator)
    return keep_proposed(tokens, accepted, ks)
