"""A stack of Llama-style transformer layers with random weights and a KV cache.

This is the workload Chapters 2 and 4 time: one forward pass over a batch in which each sequence
adds ``n`` new tokens after ``context`` cached ones. Timing needs realistic shapes, not trained
weights. The batch may be ragged — some sequences verifying k + 1 tokens, the rest decoding one —
so the source note's "B + k" batch can be timed next to the "B(k + 1)" one.

Linear layers run on the flattened [tokens, d_model] matrix (every weight read once per pass,
whatever the mix); attention runs per group of sequences with the same number of new tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specnotes.cost import ModelShape


def stack_shape(n_layers: int, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, name: str = "") -> ModelShape:
    """The cost-model shape of a bare layer stack: no LM head (vocab = 1 adds d_model parameters, ~0)."""
    return ModelShape(n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab=1, name=name)


@dataclass
class LayerStack:
    shape: ModelShape
    layers: list[dict[str, torch.Tensor]]
    device: torch.device
    dtype: torch.dtype


def build_stack(shape: ModelShape, device="cpu", dtype=torch.bfloat16, seed: int = 0) -> LayerStack:
    gen = torch.Generator().manual_seed(seed)
    d, dh, dff = shape.d_model, shape.d_head, shape.d_ff
    qkv_rows = (shape.n_heads + 2 * shape.n_kv_heads) * dh

    def weight(rows, cols):
        w = torch.randn(rows, cols, generator=gen) * cols**-0.5
        return w.to(device=device, dtype=dtype)

    layers = [{
        "attn_norm": torch.ones(d, device=device, dtype=dtype),
        "wqkv": weight(qkv_rows, d),
        "wo": weight(d, d),
        "mlp_norm": torch.ones(d, device=device, dtype=dtype),
        "w_gate_up": weight(2 * dff, d),
        "w_down": weight(d, dff),
    } for _ in range(shape.n_layers)]
    return LayerStack(shape, layers, torch.device(device), dtype)


def kv_cache(stack: LayerStack, batch: int, length: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, K and V of shape [batch, n_kv_heads, length, d_head], filled with noise."""
    gen = torch.Generator().manual_seed(seed)
    s = stack.shape
    size = (batch, s.n_kv_heads, length, s.d_head)
    return [tuple(torch.randn(size, generator=gen).to(stack.device, stack.dtype) for _ in range(2))
            for _ in range(s.n_layers)]


def groups_for(batch: int, new_tokens: int, speculating: int | None = None) -> list[tuple[int, int, int]]:
    """(first sequence, last sequence + 1, new tokens each). With ``speculating`` = s, the first s
    sequences add ``new_tokens`` and the other batch - s add one (a batch where only some speculate)."""
    if speculating is None or speculating == batch:
        return [(0, batch, new_tokens)]
    if not 0 <= speculating <= batch:
        raise ValueError(f"speculating must be in [0, batch={batch}], got {speculating}")
    groups = [(0, speculating, new_tokens)] if speculating else []
    return groups + [(speculating, batch, 1)]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype) * weight


def causal_mask(n: int, context: int, device) -> torch.Tensor | None:
    """New token i sees the context and new tokens 0..i. One new token sees everything: no mask."""
    if n == 1:
        return None
    keys = torch.arange(context + n, device=device)
    return keys[None, :] <= (context + torch.arange(n, device=device))[:, None]


def grouped_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                      mask: torch.Tensor | None) -> torch.Tensor:
    """``scaled_dot_product_attention`` with grouped-query attention folded: q [B, heads, n, d] over
    keys/values [B, kv_heads, L, d]. The g = heads / kv_heads query heads that share a KV head become
    g·n query rows of that head, so each KV head is read once for all of them, as GQA decode kernels do
    (SDPA's ``enable_gqa`` may instead run each query head over its KV head separately)."""
    b, heads, n, d = q.shape
    g = heads // keys.shape[1]
    if g == 1:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    rows = q.reshape(b, keys.shape[1], g * n, d)  # head h = kv·g + j -> rows j·n .. j·n + n - 1 of head kv
    y = F.scaled_dot_product_attention(rows, keys, values, attn_mask=None if mask is None else mask.repeat(g, 1))
    return y.view(b, heads, n, d)


def attention(stack: LayerStack, qkv: torch.Tensor, cache, context: int, groups) -> torch.Tensor:
    s = stack.shape
    k_cache, v_cache = cache
    q_width, kv_width = s.n_heads * s.d_head, s.n_kv_heads * s.d_head
    out, row = [], 0
    for first, last, n in groups:
        b = last - first
        rows = qkv[row:row + b * n].view(b, n, -1)
        row += b * n
        q = rows[..., :q_width].view(b, n, s.n_heads, s.d_head).transpose(1, 2)
        k = rows[..., q_width:q_width + kv_width].view(b, n, s.n_kv_heads, s.d_head).transpose(1, 2)
        v = rows[..., q_width + kv_width:].view(b, n, s.n_kv_heads, s.d_head).transpose(1, 2)
        k_cache[first:last, :, context:context + n] = k
        v_cache[first:last, :, context:context + n] = v
        keys = k_cache[first:last, :, :context + n]
        values = v_cache[first:last, :, :context + n]
        y = grouped_attention(q, keys, values, causal_mask(n, context, qkv.device))
        out.append(y.transpose(1, 2).reshape(b * n, q_width))
    return torch.cat(out) if len(out) > 1 else out[0]


def forward(stack: LayerStack, x: torch.Tensor, caches, context: int, groups) -> torch.Tensor:
    """x: [tokens, d_model], tokens ordered by group. Writes the new K/V into ``caches`` at ``context``."""
    for layer, cache in zip(stack.layers, caches, strict=True):
        qkv = rms_norm(x, layer["attn_norm"]) @ layer["wqkv"].t()
        x = x + attention(stack, qkv, cache, context, groups) @ layer["wo"].t()
        gate, up = (rms_norm(x, layer["mlp_norm"]) @ layer["w_gate_up"].t()).chunk(2, dim=-1)
        x = x + (F.silu(gate) * up) @ layer["w_down"].t()
    return x


def pass_inputs(stack: LayerStack, batch: int, new_tokens: int, context: int, speculating: int | None = None,
                seed: int = 0):
    """Everything one timed pass needs: (x, caches, groups). The cache holds context + new_tokens."""
    groups = groups_for(batch, new_tokens, speculating)
    tokens = sum((last - first) * n for first, last, n in groups)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, stack.shape.d_model, generator=gen).to(stack.device, stack.dtype)
    return x, kv_cache(stack, batch, context + new_tokens, seed), groups
