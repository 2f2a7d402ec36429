"""A tiny byte-level decoder-only transformer with a batched, rollback-able KV cache.

Llama-ish: RMSNorm, rotary position embeddings, SwiGLU MLP, no biases. Bytes are tokens
(vocabulary 256), so no tokenizer ships with the weights.

The KV cache holds one length per sequence. A forward pass appends ``n`` new tokens to every
sequence of the batch, each at its own positions, and a mask hides everything past each
sequence's length. Rolling back is just lowering the lengths: stale entries past a length are
masked out and overwritten by the next write. Speculative decoding relies on exactly that.

Shipped weights (trained by ``python -m specnotes.tiny.train``): ``load_target()`` and
``load_draft()``. The target also has an early-exit head: ``model(x, exit_layer=j)`` runs only
the first ``j`` blocks and reads logits through a small trained norm and the shared LM head.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from importlib import resources

import torch
import torch.nn.functional as F
from torch import nn

from specnotes import validate

VOCAB_SIZE = 256


@dataclass(frozen=True)
class ModelConfig:
    n_layers: int = 4
    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 640
    vocab_size: int = VOCAB_SIZE
    max_seq_len: int = 4096  # size of the rotary table; the cache capacity is chosen per call
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    exit_layer: int | None = None  # the block after which the early-exit head reads (None: no head)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def __post_init__(self):
        for name in ("n_layers", "d_model", "n_heads", "d_ff", "vocab_size", "max_seq_len"):
            validate.integer(name, getattr(self, name), low=1)
        validate.number("rope_base", self.rope_base, low=0, low_open=True)
        validate.number("norm_eps", self.norm_eps, low=0, low_open=True)
        if self.d_model % self.n_heads or self.d_head % 2:
            raise validate.BadArgument(f"d_model must split into n_heads heads of even size, got d_model="
                                       f"{self.d_model}, n_heads={self.n_heads}")
        if self.exit_layer is not None:
            validate.integer("exit_layer", self.exit_layer, 1, self.n_layers - 1)


TARGET_CONFIG = ModelConfig(n_layers=4, d_model=192, n_heads=4, d_ff=576, exit_layer=2)
DRAFT_CONFIG = ModelConfig(n_layers=2, d_model=64, n_heads=2, d_ff=192)


class KVCache:
    """Keys and values of every layer for a batch of sequences, with one length per sequence.

    ``k`` and ``v`` are [n_layers, B, n_heads, capacity, d_head]; ``lengths`` is [B] int64.
    """

    def __init__(self, config: ModelConfig, batch: int, capacity: int, dtype=torch.float32, device="cpu"):
        shape = (config.n_layers, batch, config.n_heads, capacity, config.d_head)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.lengths = torch.zeros(batch, dtype=torch.int64, device=device)

    @property
    def batch(self) -> int:
        return self.k.shape[1]

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
        # k, v: [B, H, n, D] land at positions [B, n] of each sequence
        index = positions[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
        self.k[layer].scatter_(2, index, k)
        self.v[layer].scatter_(2, index, v)

    def rows(self, n: int) -> KVCache:
        """The first ``n`` sequences as a cache that shares this one's keys and values (continuous
        batching runs a pass over the occupied rows only). Its ``lengths`` are a copy: a pass or a
        rollback through the view rebinds them, so copy them back with ``self.lengths[:n] = view.lengths``."""
        if not 0 < n <= self.batch:
            raise ValueError(f"n must be in 1..{self.batch}, got {n}")
        view = object.__new__(KVCache)
        view.k, view.v, view.lengths = self.k[:, :n], self.v[:, :n], self.lengths[:n].clone()
        return view

    def reserve(self, positions: torch.Tensor, n_valid: torch.Tensor | None = None):
        """Room for a pass that writes ``positions`` [B, n] (rows past ``n_valid[b]`` are padding).
        A contiguous cache has it already; a paged one (``specnotes.serve.kvcache``) allocates blocks here."""

    def read(self, layer: int, context: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, H, context, D] of positions 0..context-1 of every sequence."""
        return self.k[layer, :, :, :context], self.v[layer, :, :, :context]

    def rollback(self, new_lengths: torch.Tensor):
        """Forget every position at or past ``new_lengths[b]`` in sequence b."""
        self.lengths = shortened(self.lengths, new_lengths)


def shortened(lengths: torch.Tensor, new_lengths) -> torch.Tensor:
    """``new_lengths`` as a copy, checked: one per sequence, each in 0..its current length (a rollback)."""
    new_lengths = torch.as_tensor(new_lengths, dtype=torch.int64, device=lengths.device)
    if new_lengths.shape != lengths.shape:
        raise ValueError(f"new_lengths must have shape {tuple(lengths.shape)}")
    if (new_lengths < 0).any() or (new_lengths > lengths).any():
        raise ValueError("rollback can only shorten sequences (0 <= new_lengths <= lengths)")
    return new_lengths.clone()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_table(config: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    half = config.d_head // 2
    freqs = config.rope_base ** (-torch.arange(half, dtype=torch.float64) / half)
    angles = torch.outer(torch.arange(config.max_seq_len, dtype=torch.float64), freqs)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [B, H, n, D]; cos, sin [B or 1, n, D/2], already gathered at each token's position
    x1, x2 = x.float().chunk(2, dim=-1)
    cos, sin = cos[:, None], sin[:, None]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).type_as(x)


class Block(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads, self.d_head = config.n_heads, config.d_head
        self.attn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.wqkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.wo = nn.Linear(config.d_model, config.d_model, bias=False)
        self.mlp_norm = RMSNorm(config.d_model, config.norm_eps)
        self.w_gate_up = nn.Linear(config.d_model, 2 * config.d_ff, bias=False)
        self.w_down = nn.Linear(config.d_ff, config.d_model, bias=False)

    def forward(self, x, cos, sin, layer: int, cache: KVCache | None, positions, mask):
        return self.mlp(self.attention(x, cos, sin, layer, cache, positions, mask))

    def attention(self, x, cos, sin, layer, cache, positions, mask):
        B, n, _ = x.shape
        q, k, v = self.wqkv(self.attn_norm(x)).view(B, n, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            cache.write(layer, k, v, positions)
            keys, values = cache.read(layer, mask.shape[-1])
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return x + self.wo(y.transpose(1, 2).reshape(B, n, -1))

    def mlp(self, x):
        gate, up = self.w_gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.w_down(F.silu(gate) * up)


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.exit_norm = RMSNorm(config.d_model, config.norm_eps) if config.exit_layer else None
        cos, sin = rope_table(config)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(init_weights)

    def forward(
        self,
        tokens: torch.Tensor,
        cache: KVCache | None = None,
        n_valid: torch.Tensor | None = None,
        exit_layer: int | None = None,
        positions: torch.Tensor | None = None,
        visible: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits [B, n, V] for tokens [B, n].

        With a cache, token i of sequence b sits at position ``cache.lengths[b] + i`` and sees
        the cached prefix; afterwards ``cache.lengths`` grows by ``n_valid`` (default: n). Rows
        past ``n_valid[b]`` are padding (ragged prompts): they are written but not kept, and
        their logits mean nothing.
        With ``exit_layer=j`` only blocks 0..j-1 run (and only their cache is written); the
        logits come from the early-exit head.
        Token trees (``specnotes.tiny.trees``): ``positions`` [B, n] (rotary positions) and ``visible``
        [B, n, context] (the cache slots each new token attends to, context = max(lengths) + n)
        replace the causal defaults; the new tokens are still written at slots lengths + i.
        """
        n_blocks = self.check_exit_layer(exit_layer)
        check_tokens(tokens)
        slots, mask = self.positions_and_mask(tokens, cache)
        if positions is not None or visible is not None:
            mask = self.tree_mask(slots, mask, positions, visible)
        if cache is not None:
            cache.reserve(slots, n_valid)
        cos, sin = self.rope_at(slots if positions is None else positions)
        try:
            x = self.tok_emb(tokens)
        except IndexError:  # raised on a CPU; a GPU reports it asynchronously, so check ids before (generate)
            raise validate.BadArgument(f"tokens must be ids in [0, {self.config.vocab_size}), got ids from "
                                       f"{int(tokens.min())} to {int(tokens.max())}") from None
        for layer, block in enumerate(self.blocks[:n_blocks]):
            x = block(x, cos, sin, layer, cache, slots, mask)
        if cache is not None:
            cache.lengths = cache.lengths + (tokens.shape[1] if n_valid is None else n_valid)
        norm = self.norm if n_blocks == self.config.n_layers else self.exit_norm
        return self.lm_head(norm(x))

    def forward_with_exit(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(final logits, early-exit logits) of one causal pass without a cache: for training."""
        positions, _ = self.positions_and_mask(tokens, None)
        cos, sin = self.rope_at(positions)
        x, exit_x = self.tok_emb(tokens), None
        for layer, block in enumerate(self.blocks):
            x = block(x, cos, sin, layer, None, positions, None)
            if layer + 1 == self.config.exit_layer:
                exit_x = x
        return self.lm_head(self.norm(x)), self.lm_head(self.exit_norm(exit_x))

    def rope_at(self, positions: torch.Tensor):
        if positions.stride(0) == 0:  # no cache: every sequence at 0..n-1, broadcast one row
            positions = positions[:1]
        return self.rope_cos[positions], self.rope_sin[positions]

    def check_exit_layer(self, exit_layer: int | None) -> int:
        if exit_layer is None:
            return self.config.n_layers
        exit_layer = validate.integer("exit_layer", exit_layer, 1, self.config.n_layers)
        if exit_layer < self.config.n_layers and self.exit_norm is None:
            raise validate.BadArgument("this model has no early-exit head (config.exit_layer is None)")
        return exit_layer

    def positions_and_mask(self, tokens: torch.Tensor, cache: KVCache | None):
        B, n = tokens.shape
        steps = torch.arange(n, device=tokens.device)
        if cache is None:
            return steps.expand(B, n), None
        if cache.batch != B:
            raise ValueError(f"cache holds {cache.batch} sequences, tokens have {B}")
        positions = cache.lengths[:, None] + steps  # [B, n]
        context = int(positions.max()) + 1
        if context > min(cache.capacity, self.config.max_seq_len):
            raise ValueError(f"sequence would reach {context} tokens, past the cache capacity {cache.capacity}")
        # query i of sequence b sees keys 0..positions[b, i]: its prefix, then causally the new tokens
        mask = torch.arange(context, device=tokens.device) <= positions[:, :, None]
        return positions, mask[:, None]  # [B, 1, n, context]

    def tree_mask(self, slots, mask, positions, visible):
        if mask is None or positions is None or visible is None:
            raise validate.BadArgument("a token tree needs a cache, positions and visible together")
        want = (mask.shape[0],) + mask.shape[2:]
        if positions.shape != slots.shape or visible.shape != want:
            raise validate.BadArgument(f"positions must be {tuple(slots.shape)} and visible {want}, "
                                       f"got {tuple(positions.shape)} and {tuple(visible.shape)}")
        if int(positions.max()) >= self.config.max_seq_len:
            raise validate.BadArgument(f"a tree position reaches {int(positions.max())}, past max_seq_len")
        return visible.to(torch.bool)[:, None]

    def new_cache(self, batch: int, capacity: int, exit_layer: int | None = None) -> KVCache:
        """An empty cache for ``batch`` sequences of up to ``capacity`` tokens (an early exit at
        ``exit_layer`` caches only its layers)."""
        config = replace(self.config, n_layers=self.check_exit_layer(exit_layer), exit_layer=None)
        w = self.lm_head.weight
        return KVCache(config, validate.integer("batch", batch, low=1), validate.integer("capacity", capacity, low=1),
                       dtype=w.dtype, device=w.device)

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def check_tokens(tokens):
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        raise validate.BadArgumentType(f"tokens must be a [B, n] tensor of token ids, got "
                                       f"{tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens)}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise validate.BadArgumentType(f"tokens must be integer token ids, got {tokens.dtype}")


def pad_prompts(prompts: list[torch.Tensor], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad 1-D prompts into [B, max_len]; also return their lengths [B]."""
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.int64)
    return torch.nn.utils.rnn.pad_sequence(prompts, batch_first=True, padding_value=pad), lengths


def prefill(model: Transformer, prompts: list[torch.Tensor], capacity: int, exit_layer: int | None = None,
            cache: KVCache | None = None):
    """A cache holding every prompt but its last token (one ragged pass, padding masked); also each
    prompt's last token [B] and the number of passes run (0 when there was nothing to prefill).

    ``cache``: a new one by default, or one that already holds the first ``cache.lengths[b]`` tokens of
    prompt b (a prefix-cache hit, Chapter 9): only the rest is prefilled."""
    device = model.lm_head.weight.device
    cache = model.new_cache(len(prompts), capacity, exit_layer) if cache is None else cache
    done = cache.lengths.tolist()
    padded, lengths = pad_prompts([p[n:] for p, n in zip(prompts, done, strict=True)])
    padded, lengths = padded.to(device), lengths.to(device)
    passes = 0
    if padded.shape[1] > 1:
        model(padded[:, :-1], cache, n_valid=lengths - 1, exit_layer=exit_layer)
        passes = 1
    return cache, padded[torch.arange(len(prompts), device=device), lengths - 1], passes


def init_weights(module: nn.Module):
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)


# ---------------------------------------------------------------- bytes <-> tokens, data


def encode(text: str) -> torch.Tensor:
    """UTF-8 bytes of ``text`` as an int64 tensor [n]."""
    if not isinstance(text, str):
        raise validate.BadArgumentType(f"text must be a str, got {type(text).__name__}")
    data = bytearray(text.encode("utf-8"))
    if not data:
        return torch.zeros(0, dtype=torch.int64)
    return torch.frombuffer(data, dtype=torch.uint8).to(torch.int64)


def decode(ids) -> str:
    """Text of a sequence of byte ids; negative ids (padding, -1) are skipped."""
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    return bytes(int(i) for i in ids if i >= 0).decode("utf-8", errors="replace")


def data_file(name: str):
    return resources.files("specnotes") / "data" / name


def load_text(split: str = "train") -> str:
    """The shipped corpus (see data/README.md): ``"train"`` or ``"eval"`` (held out)."""
    validate.choice("split", split, ("train", "eval"))
    return data_file(f"austen_{split}.txt").read_text(encoding="utf-8")


def model_card() -> dict:
    """Configs, training settings and held-out losses of the shipped models (data/models.json)."""
    return json.loads(data_file("models.json").read_text())


def load_model(which: str, dtype=torch.float32, device="cpu") -> Transformer:
    card = model_card()[validate.choice("which", which, ("target", "draft"))]
    model = Transformer(ModelConfig(**card["config"]))
    with data_file(f"{which}.pt").open("rb") as f:
        state = torch.load(f, map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    return model.to(device=device, dtype=dtype).eval()


def load_target(dtype=torch.float32, device="cpu") -> Transformer:
    return load_model("target", dtype, device)


def load_draft(dtype=torch.float32, device="cpu") -> Transformer:
    return load_model("draft", dtype, device)


@torch.no_grad()
def eval_loss(model: Transformer, text: str | None = None, block: int = 256, exit_layer=None) -> float:
    """Mean next-byte cross entropy (nats per byte) over ``text`` (default: held-out split)."""
    block = validate.integer("block", block, 1, model.config.max_seq_len)
    ids = encode(load_text("eval") if text is None else text)
    n_blocks = (len(ids) - 1) // block
    if n_blocks == 0:
        raise validate.BadArgument(f"text must hold at least block + 1 = {block + 1} bytes, got {len(ids)}")
    x = ids[: n_blocks * block].view(n_blocks, block).to(model.lm_head.weight.device)
    y = ids[1 : n_blocks * block + 1].view(n_blocks, block).to(x.device)
    total = 0.0
    for i in range(0, n_blocks, 16):
        logits = model(x[i : i + 16], exit_layer=exit_layer)
        total += F.cross_entropy(logits.flatten(0, 1).float(), y[i : i + 16].flatten(), reduction="sum").item()
    return total / y.numel()


def bits(nats: float) -> float:
    return nats / math.log(2)


def config_dict(config: ModelConfig) -> dict:
    return asdict(config)
