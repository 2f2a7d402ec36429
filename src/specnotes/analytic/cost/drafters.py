"""The drafter kinds (``Draft``): a draft model (a ``ModelShape``), ``EarlyExit``, ``SinglePass`` (block and
parallel drafters; ``Block``: one with a block length, Chapter 11), ``Heads`` (Medusa), ``EagleHead`` (EAGLE,
EAGLE-3, a multi-token-prediction module) and ``NoWeights`` (n-gram; ``HostLookup``: a suffix tree's host time,
Chapter 11); the heads deployed with the presets; and the passes an iteration runs with each
(``draft_passes``, ``target_pass``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from specnotes import validate
from specnotes.analytic.cost.kernels import Kernel, _allreduce, _attention, _forward, _matmul, _matmuls
from specnotes.analytic.cost.moe_shapes import DEEPSEEK_V3, MoEShape
from specnotes.analytic.cost.roofline import Pass
from specnotes.analytic.cost.shapes import LLAMA_3_1_8B, LLAMA_3_1_70B, QWEN3_8B, QWEN3_32B, ModelShape


@dataclass(frozen=True)
class EarlyExit:
    """Self-speculation: the target's first ``layers`` blocks and its LM head draft, one token per pass.
    No weights or KV of its own: it reads the target's (LayerSkip shares that cache)."""

    layers: int

    def __post_init__(self):
        validate.integer("layers", self.layers, low=1)


@dataclass(frozen=True)
class SinglePass:
    """One set of weights applied to all k positions in one pass (block / parallel drafters): AI ≈ B·k."""

    shape: ModelShape


@dataclass(frozen=True)
class Block(SinglePass):
    """A block (parallel) drafter, Chapter 11: DFlash, P-EAGLE, PARD. One pass of ``shape`` proposes up to
    ``k_max`` tokens per sequence (the engines ship blocks of 8 to 16), so its cost does not grow with k as a
    chain's does. The pass runs ``block`` positions per sequence whatever k is (DFlash evaluates its whole block),
    or, with ``block=None``, k: the last verified token and k - 1 masks (PARD, P-EAGLE), one per draft."""

    block: int | None = None
    k_max: int = 16

    def __post_init__(self):
        if not isinstance(self.shape, ModelShape):
            raise validate.BadArgumentType(f"shape must be a ModelShape; got {type(self.shape).__name__}")
        validate.integer("k_max", self.k_max, low=1)
        if self.block is not None:
            validate.integer("block", self.block, low=1)

    def positions(self, k: int) -> int:
        """Positions per sequence its one pass runs to propose k tokens (k ≤ ``k_max``)."""
        k = validate.integer("k (tokens a block drafter proposes in one pass)", k, low=1, high=self.k_max)
        return k if self.block is None else max(self.block, k)


@dataclass(frozen=True)
class Heads:
    """k heads, each with its own weights ``shape`` and one position per sequence, run in one pass
    (Medusa): k times the bytes, AI ≈ B per head."""

    shape: ModelShape


@dataclass(frozen=True)
class NoWeights:
    """A drafter that reads no weights (n-gram / prompt lookup): only its per-lookup overhead."""

    name: str = "n-gram"


@dataclass(frozen=True)
class EagleHead:
    """An EAGLE draft head (Li et al. 2024; EAGLE-3: 2025): ``layer``, decoder layer(s) of the target's
    width whose LM head covers ``layer.vocab`` tokens (EAGLE-3 drafts over a reduced vocabulary: 32,000
    for Llama-3.1-8B, against the target's 128,256), an fc of ``fc_inputs``·d_model → d_model that brings
    the target's features in (EAGLE-1: feature and token embedding, 2; EAGLE-3: low, middle and high
    features, 3), and for EAGLE-3 a QKV projection that reads [embedding; feature], 2·d_model inputs
    (``wide_qkv``).

    It runs the way vLLM's ``EagleProposer.propose`` (and SGLang's draft-extend) runs it: the first draft
    pass puts every token the verify pass scored (depth + 1 per sequence) through the fc and the layer and
    the LM head over the last one; each later pass runs one token per sequence (a tree level: its width)."""

    layer: ModelShape
    fc_inputs: int = 2
    wide_qkv: bool = False

    def __post_init__(self):
        if not isinstance(self.layer, ModelShape):
            raise validate.BadArgumentType(f"layer must be a ModelShape; got {type(self.layer).__name__}")
        validate.integer("fc_inputs", self.fc_inputs, low=0)

    @property
    def name(self) -> str:
        return self.layer.name

    @cached_property
    def body_params(self) -> int:
        """The decoder layer(s) with the wide QKV's extra inputs (not the fc, not the LM head): a second d_model of
        inputs to Q, K and V, or for a latent layer (MLA) to its down-projections (q_lora_rank, d_c + d_rope)."""
        s = self.layer
        if not self.wide_qkv:
            extra = 0
        elif isinstance(s, MoEShape) and s.mla:
            extra = s.d_model * ((s.q_lora_rank or s.n_heads * (s.qk_nope_head_dim + s.qk_rope_head_dim))
                                 + s.kv_lora_rank + s.qk_rope_head_dim)
        else:
            extra = s.d_model * (s.n_heads + 2 * s.n_kv_heads) * s.d_head
        return s.n_layers * (s.layer_params + extra)

    @cached_property
    def params(self) -> int:
        """Matmul parameters: fc, layer(s) and the draft LM head."""
        return self.fc_inputs * self.layer.d_model**2 + self.body_params + self.layer.d_model * self.layer.vocab


@dataclass(frozen=True)
class HostLookup(NoWeights):
    """A drafter that reads no weights but spends host (CPU) time on every sequence of every step (Chapter 11): a
    suffix tree's match and walk. ``per_sequence``: seconds per sequence per step, measured (``tiny.suffix``); the
    step waits for it (engines that overlap it with the previous step hide only what fits under that step)."""

    name: str = "suffix"
    per_sequence: float = 0.0

    def __post_init__(self):
        validate.number("per_sequence", self.per_sequence, low=0)


NGRAM = NoWeights()
Draft = ModelShape | EarlyExit | SinglePass | Block | Heads | NoWeights | EagleHead


def dense_layer(target: ModelShape, name: str = "") -> ModelShape:
    """The dense (Llama-style) decoder of ``target``'s width that the EAGLE heads trained for a mixture of experts
    use: a dense target as it is; a MoE's hidden size, attention heads and KV heads with one gated MLP of its
    config's ``intermediate_size`` (``d_ff``: the dense layers' width, or, where every layer is MoE, what the
    config gives there). An MLA target's head attends with grouped-query attention of its ``v_head_dim``, as the
    published heads do: SpecForge's configs/kimi-k25-eagle3.json (commit 3f9b5fc) is a LlamaForCausalLMEagle3 of
    hidden 7168, 64 heads, 64 KV heads, head_dim 128, intermediate 18432, Kimi-K2.5's own widths;
    configs/qwen3-30B-eagle3.json (commit d1be954): hidden 2048, 32 heads, 4 KV heads, head_dim 128, intermediate
    6144, Qwen3-30B-A3B's. Heads trained with other widths are ``PUBLISHED_EAGLE3_LAYERS``."""
    if not isinstance(target, MoEShape):
        return target
    head_dim = target.v_head_dim if target.mla else target.head_dim
    return ModelShape(target.n_layers, target.d_model, target.n_heads, target.n_kv_heads, target.d_ff, target.vocab,
                      target.weight_bytes, target.kv_bytes, name or target.name, target.compute,
                      target.tied_embeddings, head_dim)


# EAGLE-3 heads published for a target with widths of their own (one Llama decoder layer each, by the target's
# name): SpecForge's configs/deepseek-v3-671b-eagle3.json (commit c02a09a): hidden 7168, 56 heads, 8 KV heads,
# intermediate 40960, vocab 129280, draft_vocab_size 32000.
PUBLISHED_EAGLE3_LAYERS = {
    DEEPSEEK_V3.name: ModelShape(1, 7168, 56, 8, 40960, 129280, name="EAGLE-3 head (DeepSeek-V3, SpecForge)"),
}


def latent_layer(target: MoEShape, name: str = "") -> MoEShape:
    """A dense decoder layer with ``target``'s latent attention (MLA): its MLA widths and one MLP of its
    ``d_ff``, as EAGLE 3.1's MLA heads are built (lightseekorg/kimi-k2.6-eagle3.1-mla; TorchSpec's Eagle 3.1 MLA
    conversion takes kv_lora_rank, q_lora_rank and the heads from the base model). Written as a MoEShape of one
    expert that every token uses: E[D](T) = 1, so it reads and runs one MLP of ``d_ff`` (its router, d_model
    weights, is the only addition), and its cache is the latent's d_c + d_rope values a token."""
    if not isinstance(target, MoEShape) or not target.mla:
        raise validate.BadArgumentType(f"latent_layer needs a MoEShape with latent attention (MLA); got "
                                       f"{getattr(target, 'name', type(target).__name__)!r}")
    return replace(target, n_layers=1, n_experts=1, experts_per_token=1, expert_d_ff=target.d_ff, shared_experts=0,
                   dense_layers=0, name=name or target.name)


def eagle3_head(target: ModelShape, draft_vocab: int = 32000, name: str = "", latent: bool = False) -> EagleHead:
    """An EAGLE-3 head for ``target``: one decoder layer (its heads, KV heads, d_ff), QKV over [embedding;
    feature], an fc from the three fused features, and a ``draft_vocab``-token LM head (the published heads use
    32,000: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's config, draft_vocab_size). The layer is the target's own for a
    dense target; for a mixture of experts the dense layer its published heads use (``dense_layer``, or the
    published head's where it has widths of its own, ``PUBLISHED_EAGLE3_LAYERS``), never a MoE layer: the heads
    trained for DeepSeek-V3, Kimi-K2, Qwen3's MoEs, gpt-oss and Llama 4 are Llama layers. ``latent``: an EAGLE
    3.1 head whose layer keeps an MLA target's latent attention (``latent_layer``). Its weights and KV are in the
    target's dtype."""
    if not isinstance(latent, bool):
        raise validate.BadArgumentType(f"latent must be True or False; got {latent!r}")
    base = PUBLISHED_EAGLE3_LAYERS.get(target.name)
    if latent:
        base = latent_layer(target)
    elif base:
        base = replace(base, weight_bytes=target.weight_bytes, kv_bytes=target.kv_bytes, compute=target.compute)
    else:
        base = dense_layer(target)
    layer = replace(base, n_layers=1, vocab=validate.integer("draft_vocab", draft_vocab, low=1),
                    tied_embeddings=True, name=name or f"EAGLE-3 head ({target.name})")
    return EagleHead(layer, fc_inputs=3, wide_qkv=True)


def eagle_head(target: ModelShape, name: str = "") -> EagleHead:
    """An EAGLE(-1) head for ``target``: an fc from [feature; embedding] (2·d_model) and one decoder layer of
    its width (a MoE's dense layer, ``dense_layer``), drafting with the target's own LM head (its full
    vocabulary, read at every draft step)."""
    layer = replace(dense_layer(target), n_layers=1, tied_embeddings=True, name=name or f"EAGLE head ({target.name})")
    return EagleHead(layer, fc_inputs=2, wide_qkv=False)


def mtp_head(target: ModelShape, name: str = "") -> EagleHead:
    """A multi-token-prediction module (DeepSeek-V3: ``num_nextn_predict_layers`` = 1) as a drafter: one more
    decoder layer of the target's own kind (its attention, and its MoE for a MoE target), an fc ``eh_proj``
    from [embedding; hidden state] (2·d_model inputs), and the target's LM head. It runs as an EAGLE head
    does: with k = 1 one pass (a single-pass drafter), the first over the verified tokens; engines that
    draft k > 1 with one module run it k times, one token per sequence each later pass."""
    extra = {"dense_layers": 0} if isinstance(target, MoEShape) else {}
    layer = replace(target, n_layers=1, tied_embeddings=True, name=name or f"MTP module ({target.name})", **extra)
    return EagleHead(layer, fc_inputs=2, wide_qkv=False)


# The heads people deploy with the presets: EAGLE-3 heads with a 32k draft vocabulary (yuhuili/EAGLE3-LLaMA3.1-
# Instruct-8B, yuhuili/EAGLE3-LLaMA3.3-Instruct-70B; for Qwen3 the SpecForge-trained heads such as
# Tengyunw/qwen3_8b_eagle3 and AngelSlim/Qwen3-32B_eagle3: fc 3·5120 → 5120, LM head 32000 × 5120 for 32B).
EAGLE3_LLAMA_3_1_8B = eagle3_head(LLAMA_3_1_8B)
EAGLE3_LLAMA_3_1_70B = eagle3_head(LLAMA_3_1_70B)
EAGLE3_QWEN3_8B = eagle3_head(QWEN3_8B)
EAGLE3_QWEN3_32B = eagle3_head(QWEN3_32B)
HEAD_PRESETS = {h.name: h for h in (EAGLE3_LLAMA_3_1_8B, EAGLE3_LLAMA_3_1_70B, EAGLE3_QWEN3_8B, EAGLE3_QWEN3_32B)}


MTP_DEEPSEEK_V3 = mtp_head(DEEPSEEK_V3)  # the one module DeepSeek-V3 ships (num_nextn_predict_layers = 1)


def early_exit_shape(target: ModelShape, layers: int) -> ModelShape:
    """The shape an early exit runs: the target's first ``layers`` blocks plus its LM head. A MoE whose first
    blocks are dense (DeepSeek's ``first_k_dense_replace``) must exit after at least one MoE block: its first
    ``layers`` blocks keep its ``dense_layers`` dense ones, and a MoEShape has a MoE layer."""
    low = target.dense_layers + 1 if isinstance(target, MoEShape) else 1
    layers = validate.integer("layers", layers, low=low, high=target.n_layers - 1)
    return replace(target, n_layers=layers, name=f"{target.name} first {layers} layers")


def _eagle_kernels(head: EagleHead, batch: int, new_tokens: int, context: int, tp: int, first: bool):
    """One pass of an EAGLE head: "matmul" (its fc on the first pass, and its layer's matmuls; a MoE layer's
    experts, an MTP module's, are a kernel of their own, "experts", as ``kernels._matmuls`` splits them), its
    "lm head" over one position per sequence, its attention, and with tp > 1 its all-reduces."""
    s = head.layer
    tokens = batch * new_tokens
    fc = head.fc_inputs * s.d_model**2 if first else 0
    extra = head.body_params - s.n_layers * s.layer_params  # EAGLE-3's wide QKV, if any
    lm = s.d_model * s.vocab
    if isinstance(s, MoEShape):
        experts = _matmuls(s, tokens, tp)[1]
        body = s.always_params - lm + extra + fc
        layer = (Kernel("matmul", 2 * body * tokens / tp, s.weight_bytes * body / tp), experts)
    else:
        body = head.body_params + fc
        layer = (Kernel("matmul", 2 * body * tokens / tp, s.weight_bytes * body / tp),)
    kernels = layer + (Kernel("lm head", 2 * lm * batch / tp, s.weight_bytes * lm / tp),
                       _attention(s, batch, new_tokens, context, tp))
    return kernels + (_allreduce(s, tokens, tp),) if tp > 1 else kernels


def levels(k: int, widths=None) -> tuple[int, ...]:
    """Tokens per sequence at each draft level: a chain of k is (1,)·k; a tree gives its ``widths``."""
    if widths is None:
        return (1,) * validate.integer("k", k, low=0)
    widths = tuple(widths)
    if not widths or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in widths):
        raise validate.BadArgument(f"widths must be a non-empty list of positive integers (tokens per sequence at "
                                   f"each draft level); got {widths!r}")
    return widths


def draft_passes(draft: Draft, batch: int, k: int, context: int, tp: int = 1, target: ModelShape | None = None,
                 widths=None, dtype: str | None = None) -> list[Pass]:
    """The draft passes of one iteration that drafts k tokens per sequence (a chain), or a tree whose level i
    runs ``widths[i]`` tokens per sequence, for B sequences whose draft-side KV holds ``context`` tokens.

    A draft model or an early exit runs one pass per level (the i-th at context L + i); an EAGLE head the
    same, its first pass over depth + 1 tokens (``EagleHead``); a single-pass drafter or Medusa heads one
    pass; an n-gram drafter one pass with no kernels (it costs its overhead once)."""
    if isinstance(draft, EarlyExit):
        if target is None:
            raise validate.BadArgument("an EarlyExit draft needs the target shape (target=...)")
        draft = early_exit_shape(target, draft.layers)
    if not isinstance(draft, Draft):
        raise validate.BadArgumentType(f"draft must be a ModelShape, EarlyExit, SinglePass, Block, Heads, EagleHead or "
                                       f"NoWeights; got {type(draft).__name__}")
    if k == 0 and widths is None:
        return []
    widths = levels(k, widths)
    if isinstance(draft, HostLookup):
        return [Pass((), 0, True, None, host=draft.per_sequence * batch)]
    if isinstance(draft, NoWeights):
        return [Pass((), 0, True, None)]
    if isinstance(draft, Block):
        return [Pass(_forward(draft.shape, batch, draft.positions(k), context, tp), draft.shape.n_layers, True,
                     draft.shape.compute)]
    if isinstance(draft, SinglePass):
        return [Pass(_forward(draft.shape, batch, k, context, tp), draft.shape.n_layers, True, draft.shape.compute)]
    if isinstance(draft, Heads):
        head = _matmul(draft.shape, batch, tp)
        return [Pass((Kernel("heads", k * head.flops, k * head.bytes),), 0, True, draft.shape.compute)]
    if isinstance(draft, EagleHead):
        first = len(widths) + 1
        return [Pass(_eagle_kernels(draft, batch, first if i == 0 else w, context + i, tp, i == 0),
                     draft.layer.n_layers, True, draft.layer.compute) for i, w in enumerate(widths)]
    return [Pass(_forward(draft, batch, w, context + i, tp), draft.n_layers, True, draft.compute, dtype)
            for i, w in enumerate(widths)]


def target_pass(target: ModelShape, batch: int, new_tokens: int, context: int, tp: int = 1,
                dtype: str | None = None) -> Pass:
    """One target pass (decode: n = 1; verify: n = k + 1, or a tree's tokens + 1) as a ``Pass``."""
    return Pass(_forward(target, batch, new_tokens, context, tp), target.n_layers, False, target.compute, dtype)
