"""A dense decoder's shape (``ModelShape``: layers, widths, heads, vocabulary, bytes per weight and per cached
K/V element, the dtype its math runs in) and the published dense presets (``PRESETS``; ``moe_shapes`` adds the
mixtures of experts to it)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from specnotes import validate
from specnotes.analytic.hardware import DTYPE_BYTES


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer. ``weight_bytes`` and ``kv_bytes`` are bytes per weight and per
    cached K/V element; ``compute`` is the dtype the matmuls run in (its peak is used), so weight-only
    quantization is ``weight_bytes=0.5, compute="bf16"`` (see ``weight_only``)."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab: int
    weight_bytes: float = 2
    kv_bytes: float = 2
    name: str = ""
    compute: str = "bf16"
    tied_embeddings: bool = False
    head_dim: int | None = None  # None: d_model / n_heads (Llama); Qwen3-32B and Qwen3-0.6B set their own

    def __post_init__(self):
        for name in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab"):
            validate.integer(name, getattr(self, name), low=1)
        validate.number("weight_bytes", self.weight_bytes, low=0, low_open=True)
        validate.number("kv_bytes", self.kv_bytes, low=0, low_open=True)
        validate.choice("compute", self.compute, DTYPE_BYTES)
        if self.head_dim is not None:
            validate.integer("head_dim", self.head_dim, low=1)
        if (self.head_dim is None and self.d_model % self.n_heads) or self.n_heads % self.n_kv_heads:
            raise validate.BadArgument("d_model must be a multiple of n_heads (or give head_dim), and n_heads of "
                                       "n_kv_heads")

    @property
    def d_head(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    @cached_property
    def layer_params(self) -> int:
        """Q and O (d_model × n_heads·d_head each), K and V (d_model × n_kv_heads·d_head each), gated MLP."""
        attention = 2 * self.d_model * self.n_heads * self.d_head + 2 * self.d_model * self.n_kv_heads * self.d_head
        mlp = 3 * self.d_model * self.d_ff  # gated (SwiGLU): gate, up, down
        return attention + mlp

    @cached_property
    def params(self) -> int:
        """Matmul parameters: every layer's projections plus the LM head (not the embedding gather)."""
        return self.n_layers * self.layer_params + self.d_model * self.vocab

    @cached_property
    def weight_bytes_total(self) -> float:
        return self.weight_bytes * self.params

    @cached_property
    def memory_bytes(self) -> float:
        """Bytes the weights occupy: the matmul weights plus an untied embedding table."""
        embedding = 0 if self.tied_embeddings else self.d_model * self.vocab
        return self.weight_bytes * (self.params + embedding)

    @cached_property
    def kv_bytes_per_token(self) -> float:
        """K and V of one token in every layer."""
        return 2 * self.n_layers * self.n_kv_heads * self.d_head * self.kv_bytes

    def in_dtype(self, dtype: str) -> ModelShape:
        """The same model with weights, KV cache and math in ``dtype``."""
        validate.choice("dtype", dtype, DTYPE_BYTES)
        return replace(self, weight_bytes=DTYPE_BYTES[dtype], kv_bytes=DTYPE_BYTES[dtype], compute=dtype)

    def weight_only(self, bits: float) -> ModelShape:
        """Weight-only quantization: ``bits`` bits per weight, dequantized on the fly, math and KV unchanged. A
        block format's bits count its scales: MXFP4 is 4.25 (4-bit elements and one 8-bit scale per 32)."""
        bits = validate.number("bits", bits, low=1, high=16)
        return replace(self, weight_bytes=bits / 8, name=f"{self.name} (w{bits:g})" if self.name else "")


# Published shapes (config.json of each model on the Hugging Face hub: num_hidden_layers, hidden_size,
# num_attention_heads, num_key_value_heads, intermediate_size, vocab_size, tie_word_embeddings, head_dim).
LLAMA_3_8B = ModelShape(32, 4096, 32, 8, 14336, 128256, name="Llama-3-8B")
LLAMA_3_70B = ModelShape(80, 8192, 64, 8, 28672, 128256, name="Llama-3-70B")
LLAMA_3_2_1B = ModelShape(16, 2048, 32, 8, 8192, 128256, name="Llama-3.2-1B", tied_embeddings=True)
LLAMA_3_1_8B = replace(LLAMA_3_8B, name="Llama-3.1-8B")  # the Llama 3 architecture; the long-context RoPE
LLAMA_3_1_70B = replace(LLAMA_3_70B, name="Llama-3.1-70B")  # scaling changes no matmul or cache size
QWEN3_8B = ModelShape(36, 4096, 32, 8, 12288, 151936, name="Qwen3-8B")
QWEN3_32B = ModelShape(64, 5120, 64, 8, 25600, 151936, name="Qwen3-32B", head_dim=128)  # 64 × 128 ≠ 5120
QWEN3_0_6B = ModelShape(28, 1024, 16, 8, 3072, 151936, name="Qwen3-0.6B", tied_embeddings=True, head_dim=128)
QWEN3_1_7B = ModelShape(28, 2048, 16, 8, 6144, 151936, name="Qwen3-1.7B", tied_embeddings=True, head_dim=128)
PRESETS = {s.name: s for s in (LLAMA_3_8B, LLAMA_3_70B, LLAMA_3_2_1B, LLAMA_3_1_8B, LLAMA_3_1_70B, QWEN3_8B,
                               QWEN3_32B, QWEN3_0_6B, QWEN3_1_7B)}
