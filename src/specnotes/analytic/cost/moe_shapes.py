"""Chapter 10's sparse targets: mixture-of-experts shapes (``MoEShape``; ``expected_experts``, the distinct experts
a pass touches), latent attention (MLA: its FLOPs per (query, key) pair, ``mla_attention_intensity``) and the
published MoE presets (``MOE_PRESETS``, also added to ``shapes.PRESETS``). The multi-token-prediction module
drafts: ``drafters.mtp_head``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from specnotes import validate
from specnotes.analytic.cost.shapes import PRESETS, ModelShape


def expected_experts(n_experts: int, per_token: int, tokens: float) -> float:
    """E[distinct experts] that ``tokens`` tokens touch in one layer, each picking ``per_token`` (m) of
    ``n_experts`` (N) experts, uniformly and independently of the other tokens:

        E[D](T) = N·(1 − (1 − m/N)^T).

    One token misses a given expert with probability C(N−1, m)/C(N, m) = 1 − m/N; T independent tokens all
    miss it with probability (1 − m/N)^T; summing over the N experts (linearity of expectation) gives the
    rest. E[D](1) = m, and E[D] → N once T ≫ N/m. For fixed per-expert rates, routing that is unbalanced
    (Jensen: 1 − (1 − π)^T is concave in π) or positively correlated between tokens touches fewer.
    ``tokens`` may be fractional (an effective count, ``specnotes.analytic.moe.effective_tokens``)."""
    n = validate.integer("n_experts", n_experts, low=1)
    m = validate.integer("per_token (experts per token)", per_token, low=1, high=n)
    t = validate.number("tokens", tokens, low=0)
    return n * (1 - (1 - m / n) ** t)


@dataclass(frozen=True, kw_only=True)
class MoEShape(ModelShape):
    """A decoder whose MLPs are mixtures of experts, optionally with multi-head latent attention (MLA).

    Every MoE layer has ``n_experts`` (N) routed experts of width ``expert_d_ff``, of which each token uses
    ``experts_per_token`` (m, not k: k is the draft length), ``shared_experts`` that every token uses (width
    ``shared_d_ff``, default ``expert_d_ff``) and a router (d_model × N). The first ``dense_layers`` layers
    have a dense MLP of width ``d_ff`` instead (DeepSeek's ``first_k_dense_replace``). A pass over T tokens
    runs the FLOPs of the m active experts per token and reads the bytes of the E[D](T) distinct experts
    its tokens touch (``expected_experts``): ``active_params``, ``touched_params``.

    MLA (``kv_lora_rank`` = d_c > 0): the cache holds one latent of d_c + d_rope (``qk_rope_head_dim``)
    values per token and layer, which every head reads. Run absorbed (W_UK folded into the query, W_UV into
    the output, as decode kernels do), attention costs 2·(d_c + d_rope) FLOPs for QKᵀ and 2·d_c for AV per
    head and (query, key) pair, and the projections keep 2 FLOPs per weight per token. ``n_kv_heads`` is
    then unused by the cost model."""

    n_experts: int = 0
    experts_per_token: int = 0
    expert_d_ff: int = 0
    shared_experts: int = 0
    shared_d_ff: int | None = None
    dense_layers: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    q_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0

    def __post_init__(self):
        super().__post_init__()
        n = validate.integer("n_experts", self.n_experts, low=1)  # "0 experts": a ModelShape, not a MoEShape
        m = validate.integer("experts_per_token", self.experts_per_token, low=1)
        if m > n:
            raise validate.BadArgument(f"experts_per_token (m) must be at most n_experts (N = {n}): a token picks m "
                                       f"distinct experts of the N; got m = {m}")
        validate.integer("expert_d_ff", self.expert_d_ff, low=1)
        validate.integer("shared_experts", self.shared_experts, low=0)
        if self.shared_d_ff is not None:
            validate.integer("shared_d_ff", self.shared_d_ff, low=1)
        validate.integer("dense_layers", self.dense_layers, low=0, high=self.n_layers - 1)
        validate.integer("kv_lora_rank", self.kv_lora_rank, low=0)
        mla = ("qk_rope_head_dim", "q_lora_rank", "qk_nope_head_dim", "v_head_dim")
        for name in mla:
            validate.integer(name, getattr(self, name), low=0)
        if self.kv_lora_rank:
            for name in ("qk_nope_head_dim", "v_head_dim"):
                validate.integer(name, getattr(self, name), low=1)
        elif any(getattr(self, name) for name in mla):
            raise validate.BadArgument(f"{', '.join(mla)} describe latent attention (MLA): they go with "
                                       "kv_lora_rank > 0 (its latent width d_c)")

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.n_layers - self.dense_layers

    @cached_property
    def attention_params(self) -> int:
        """One layer's attention projections: GQA's Q, K, V, O, or MLA's (Q through its low-rank q_lora_rank
        bottleneck when there is one; the joint KV down-projection to d_c + d_rope; its up-projection to
        per-head keys and values; O)."""
        d, h = self.d_model, self.n_heads
        if not self.mla:
            return 2 * d * h * self.d_head + 2 * d * self.n_kv_heads * self.d_head
        q_out = h * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        q = d * self.q_lora_rank + self.q_lora_rank * q_out if self.q_lora_rank else d * q_out
        kv = d * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * h * (self.qk_nope_head_dim +
                                                                                        self.v_head_dim)
        return q + kv + h * self.v_head_dim * d

    @property
    def expert_params(self) -> int:
        """One routed expert: gated MLP, 3·d_model·expert_d_ff."""
        return 3 * self.d_model * self.expert_d_ff

    @property
    def router_and_shared_params(self) -> int:
        """What one MoE layer runs for every token besides attention: the router (d_model × N) and the shared
        experts."""
        shared = self.shared_experts * 3 * self.d_model * (self.shared_d_ff or self.expert_d_ff)
        return self.d_model * self.n_experts + shared

    @cached_property
    def layer_params(self) -> int:
        """One MoE layer: attention, router, shared experts and all N routed experts."""
        return self.attention_params + self.router_and_shared_params + self.n_experts * self.expert_params

    @cached_property
    def always_params(self) -> int:
        """Matmul parameters every pass reads whatever the routing: attention, dense MLPs, routers, shared
        experts, LM head."""
        return (self.n_layers * self.attention_params + self.dense_layers * 3 * self.d_model * self.d_ff
                + self.moe_layers * self.router_and_shared_params + self.d_model * self.vocab)

    @cached_property
    def params(self) -> int:
        """All matmul parameters (every expert; what the weights occupy, with an untied embedding)."""
        return self.always_params + self.moe_layers * self.n_experts * self.expert_params

    @cached_property
    def active_params(self) -> int:
        """Matmul parameters one token runs: ``always_params`` and m experts per MoE layer."""
        return self.always_params + self.moe_layers * self.experts_per_token * self.expert_params

    def touched_params(self, tokens: float) -> float:
        """Expected matmul parameters a pass over ``tokens`` tokens reads: ``always_params`` and the E[D](T)
        distinct experts of each MoE layer (independent routing, ``expected_experts``)."""
        distinct = expected_experts(self.n_experts, self.experts_per_token, tokens)
        return self.always_params + self.moe_layers * distinct * self.expert_params

    @cached_property
    def kv_bytes_per_token(self) -> float:
        """K and V of one token in every layer; with MLA, the latent: d_c + d_rope values per layer."""
        if self.mla:
            return self.n_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_bytes
        return super().kv_bytes_per_token


def _pair_flops(shape: ModelShape) -> float:
    """Attention FLOPs per head, (query, key) pair and layer: 4·d_head (QKᵀ and AV); absorbed MLA scores
    d_c + d_rope dimensions and sums d_c: 2·(2·d_c + d_rope)."""
    if isinstance(shape, MoEShape) and shape.mla:
        return 2 * (2 * shape.kv_lora_rank + shape.qk_rope_head_dim)
    return 4 * shape.d_head


def mla_attention_intensity(shape: MoEShape, new_tokens: int = 1) -> float:
    """FLOPs per byte of absorbed MLA attention at long context, for ``new_tokens`` queries per sequence:
    every head reads the same latent, so n·H·2(2d_c + d_rope) / ((d_c + d_rope)·kv_bytes). It grows with
    the queries (a verify pass's k + 1) and the heads, not with the batch."""
    if not isinstance(shape, MoEShape) or not shape.mla:
        raise validate.BadArgumentType("mla_attention_intensity needs a MoEShape with kv_lora_rank > 0 (MLA)")
    n = validate.integer("new_tokens", new_tokens, low=1)
    return n * shape.n_heads * _pair_flops(shape) / ((shape.kv_lora_rank + shape.qk_rope_head_dim) * shape.kv_bytes)


# Published shapes, from each model's config.json on the Hugging Face hub (tests/analytic/test_moe.py holds the fields,
# copied from where they were read, with their sources): num_hidden_layers, hidden_size, num_attention_heads,
# num_key_value_heads, intermediate_size (the dense MLP's width; Mixtral's and gpt-oss's is the experts'),
# vocab_size, head_dim, num_experts / n_routed_experts / num_local_experts, num_experts_per_tok,
# moe_intermediate_size, shared experts, first_k_dense_replace, kv_lora_rank, qk_rope_head_dim, ...
MIXTRAL_8X7B = MoEShape(32, 4096, 32, 8, 14336, 32000, name="Mixtral-8x7B", n_experts=8, experts_per_token=2,
                        expert_d_ff=14336)
QWEN3_30B_A3B = MoEShape(48, 2048, 32, 4, 6144, 151936, name="Qwen3-30B-A3B", head_dim=128, n_experts=128,
                         experts_per_token=8, expert_d_ff=768)
QWEN3_235B_A22B = MoEShape(94, 4096, 64, 4, 12288, 151936, name="Qwen3-235B-A22B", head_dim=128, n_experts=128,
                           experts_per_token=8, expert_d_ff=1536)
GPT_OSS_20B = MoEShape(24, 2880, 64, 8, 2880, 201088, name="gpt-oss-20b", head_dim=64, n_experts=32,
                       experts_per_token=4, expert_d_ff=2880)
GPT_OSS_120B = MoEShape(36, 2880, 64, 8, 2880, 201088, name="gpt-oss-120b", head_dim=64, n_experts=128,
                        experts_per_token=4, expert_d_ff=2880)
DEEPSEEK_V3 = MoEShape(61, 7168, 128, 128, 18432, 129280, name="DeepSeek-V3", n_experts=256, experts_per_token=8,
                       expert_d_ff=2048, shared_experts=1, dense_layers=3, kv_lora_rank=512, qk_rope_head_dim=64,
                       q_lora_rank=1536, qk_nope_head_dim=128, v_head_dim=128)
# Llama 4's MoE layers also run one shared expert of the experts' width (transformers' Llama4TextMoe).
LLAMA_4_SCOUT = MoEShape(48, 5120, 40, 8, 16384, 202048, name="Llama-4-Scout", n_experts=16,
                         experts_per_token=1, expert_d_ff=8192, shared_experts=1)
QWEN2_57B_A14B = MoEShape(28, 3584, 28, 4, 18944, 151936, name="Qwen2-57B-A14B", n_experts=64, experts_per_token=8,
                          expert_d_ff=2560, shared_experts=1, shared_d_ff=20480)
# Kimi-K2.5 (moonshotai/Kimi-K2.5, the text model under text_config): DeepSeek-V3's MLA and MoE layout with 64 heads,
# 384 routed experts, one dense first layer and a 163,840-token vocabulary.
KIMI_K2_5 = MoEShape(61, 7168, 64, 64, 18432, 163840, name="Kimi-K2.5", n_experts=384, experts_per_token=8,
                     expert_d_ff=2048, shared_experts=1, dense_layers=1, kv_lora_rank=512, qk_rope_head_dim=64,
                     q_lora_rank=1536, qk_nope_head_dim=128, v_head_dim=128)
# MiniMax-M2 (MiniMaxAI/MiniMax-M2): 62 MoE layers of 256 experts (8 a token, no shared expert), grouped-query
# attention of 48 heads and 8 KV heads of 128; its config's intermediate_size is the experts' width.
MINIMAX_M2 = MoEShape(62, 3072, 48, 8, 1536, 200064, name="MiniMax-M2", head_dim=128, n_experts=256,
                      experts_per_token=8, expert_d_ff=1536)
MOE_PRESETS = {s.name: s for s in (MIXTRAL_8X7B, QWEN3_30B_A3B, QWEN3_235B_A22B, GPT_OSS_20B, GPT_OSS_120B,
                                   DEEPSEEK_V3, LLAMA_4_SCOUT, QWEN2_57B_A14B, KIMI_K2_5, MINIMAX_M2)}
PRESETS.update(MOE_PRESETS)
