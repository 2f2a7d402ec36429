"""The shapes the published record names, as the cost model prices them: targets (``SHAPES``, ``SHAPE_ALIASES``,
``shape``) and drafters (``EAGLE3_HEADS``, ``_draft``; ``UNPRICED_DRAFTERS`` says which it cannot price), and
``Unpriceable``, why a series cannot be priced (its ``kind``: one of the rules of ``SKIP_KINDS``)."""

from __future__ import annotations

from dataclasses import replace

from specnotes import validate
from specnotes.analytic import cost
from specnotes.record import published

# Shapes of the models the published record uses (config.json of each on the Hugging Face hub): every preset of
# the cost model (``cost.PRESETS``, the mixtures of experts included) and two the record adds.
LLAMA_31_8B = cost.LLAMA_3_1_8B  # same architecture as Llama-3-8B
LLAMA_2_7B = cost.ModelShape(32, 4096, 32, 32, 11008, 32000, name="Llama-2-7B-32K")  # multi-head KV
TINYLLAMA = cost.ModelShape(22, 2048, 32, 4, 5632, 32000, name="TinyLlama-1.1B")
QWEN3_8B = cost.QWEN3_8B
# EAGLE-3's draft for Llama-3.1-8B: one Llama decoder layer whose QKV reads [embedding; feature], an fc from
# the three fused target features, and a 32k-token draft LM head (vLLM's llama_eagle3.py; cost.EagleHead).
EAGLE3_LLAMA31_8B = cost.EAGLE3_LLAMA_3_1_8B
EAGLE3_QWEN3_8B = cost.EAGLE3_QWEN3_8B
SHAPES = {**cost.PRESETS, **{s.name: s for s in (LLAMA_2_7B, TINYLLAMA)}}
# Names the record uses for a model whose config has exactly a known shape's fields (layers, widths, heads, KV
# heads, MLP, vocabulary): the same matmuls and the same cache, so the same costs. Each with why.
SHAPE_ALIASES = {
    "Llama-2-7B-chat": ("Llama-2-7B-32K", "meta-llama/Llama-2-7b-chat-hf: 32 layers, 4096 wide, 32 heads and "
                                          "32 KV heads, MLP 11008, 32,000 tokens, as Llama-2-7B-32K"),
    "Vicuna-7B-v1.3": ("Llama-2-7B-32K", "lmsys/vicuna-7b-v1.3, a LLaMA-7B fine-tune: the same fields"),
    "Llama-3.3-70B": ("Llama-3.1-70B", "the Llama 3.1 70B architecture and config"),
    "Kimi-K2.6": ("Kimi-K2.5", "moonshotai/Kimi-K2.6 at revision 7eb5002f6aadc958aed6a9177b7ed26bb94011bb keeps "
                               "Kimi-K2.5's text model: a public adapter that checks the official config (search "
                               "index file 56001785629) expects 61 layers 7168 wide, 384 routed experts and 1 shared, "
                               "8 a token, kv_lora_rank 512, q_lora_rank 1536, head dims 128/64/128"),
    "MiniMax-M2.5": ("MiniMax-M2", "a refresh of the MiniMax-M2 series of the same 230B total and 10B active "
                                   "parameters (vllm-project/recipes models/MiniMaxAI/MiniMax-M2.5.yaml @07444b3); "
                                   "SemiAnalysisAI/InferenceX-app's model-architectures.ts @77ca49a lists M2.5 with "
                                   "M2's config.json. M2.5's own config.json was not read"),
}
EAGLE3_HEADS = {LLAMA_31_8B.name: EAGLE3_LLAMA31_8B, QWEN3_8B.name: EAGLE3_QWEN3_8B,
                cost.LLAMA_3_1_70B.name: cost.EAGLE3_LLAMA_3_1_70B, cost.QWEN3_32B.name: cost.EAGLE3_QWEN3_32B}


def shape(name) -> cost.ModelShape:
    """The cost model's shape for a target or draft the record names: a preset, one of the record's own
    (``SHAPES``), or an alias of one (``SHAPE_ALIASES``: the same config fields, priced the same, named as the
    record names it). Anything else: an ``Unpriceable`` of kind "shape"."""
    if name in SHAPES:
        return SHAPES[name]
    if name in SHAPE_ALIASES:
        return replace(SHAPES[SHAPE_ALIASES[name][0]], name=name)
    raise Unpriceable("shape", f"no shape for {name!r} (not a preset of the cost model, nor one of the record's "
                               "own, calibrate.SHAPES and SHAPE_ALIASES)")


def deployed(target: cost.ModelShape, setup: dict) -> cost.ModelShape:
    """The target as the setup served it: its ``weight_bits`` (or ``weight_format``) and ``kv_bytes`` where the
    source gives them. FP8 weights run FP8 math (``weight_bytes`` 1, ``compute`` "fp8", as DeepSeek's and the
    other FP8 checkpoints' block-scaled GEMMs do); other widths are weight-only quantization (``weight_only``: the
    math in the preset's dtype, bf16), the cost model's convention for 4-bit formats. Unstated: the preset's bf16."""
    fmt = setup.get("weight_format")
    bits = setup.get("weight_bits") or published.WEIGHT_FORMATS.get(fmt)
    out = target
    if bits and bits != round(8 * target.weight_bytes):
        out = replace(out, weight_bytes=1, compute="fp8") if (bits == 8 and fmt in (None, "fp8")) \
            else out.weight_only(int(bits))
    if setup.get("kv_bytes"):
        out = replace(out, kv_bytes=setup["kv_bytes"])
    return out


class Unpriceable(validate.BadArgument):
    """Why the cost model cannot price a published series, with ``kind``: the rule it fails (``SKIP_KINDS``)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = validate.choice("kind", kind, SKIP_KINDS)


# Why a series stays out of the record, as the record summary counts them.
SKIP_KINDS = {
    "no GPU": "the GPU is not published",
    "GPU not in the table": "the GPU is not in hardware.DEVICES (the book's table and the record's devices)",
    "parallel layout": "how the model is split over its GPUs is not published or not modelled",
    "shape": "the target has no shape in the cost model",
    "drafter": "the drafter has no shape in the cost model",
    "n-gram": "an n-gram drafter drafts only where the prompt matches",
    "drafted tokens": "the number of drafted tokens or the tree's shape is not published",
    "acceptance": "no acceptance is published and no other batch of the series can anchor it",
    "context": "the context is only bounded below",
    "not a decode speedup": "the speedup is against an arrival rate, or counts the prompts' tokens",
    "not a speedup": "the series is not a speedup against the batch",
}


def dense_layer_of(target: cost.ModelShape) -> cost.ModelShape:
    """The dense decoder of ``target``'s width, as the EAGLE heads trained for MoE targets are built
    (``cost.dense_layer``: a MoE's attention with one MLP of its config's ``intermediate_size``; an MLA target's
    heads as grouped-query attention of its ``v_head_dim``, as SpecForge's Kimi-K2.5 head). A dense target is
    returned as it is."""
    return cost.dense_layer(target)


# The drafters of the record the cost model cannot price, and why.
UNPRICED_DRAFTERS = {
    "medusa": "Medusa heads: cost.Heads prices k heads with their own weights, but one head (a d×d residual block "
              "and its own d×V LM head) is not a decoder layer, so not a ModelShape",
    "dspark": "the DSpark speculator (a block drafter conditioned on target features): its architecture is not in "
              "the record",
    "eagle2-head": None,  # EAGLE-2 runs EAGLE-1's head in a dynamic tree: priced as eagle-head (below)
}


def _draft(setup: dict, target: cost.ModelShape):
    """The cost model's drafter for a published setup, or an ``Unpriceable`` saying why there is none.

    ``self-speculation``: the target itself; ``draft-model``: the named shape; ``eagle3-head``: the published
    EAGLE-3 head of the target where the record knows it (``EAGLE3_HEADS``), else ``cost.eagle3_head`` (for a MoE:
    over its dense layer, ``cost.dense_layer``, or a published head's own widths); ``eagle-head`` and
    ``eagle2-head`` (EAGLE-1's head, which EAGLE-2 runs in a dynamic tree): ``cost.eagle_head``; ``mtp``:
    ``cost.mtp_head``, one more layer of the target's own kind; ``ngram``: ``cost.NGRAM``. Medusa and DSpark:
    ``UNPRICED_DRAFTERS``."""
    kind = setup.get("drafter")
    if kind == "self-speculation":
        return target
    if kind == "eagle3-head":
        return EAGLE3_HEADS.get(target.name) or cost.eagle3_head(target)
    if kind == "eagle3.1-mla-head":
        if not (isinstance(target, cost.MoEShape) and target.mla):
            raise Unpriceable("drafter", f"an EAGLE 3.1 MLA head needs a target with latent attention, not "
                                         f"{target.name}")
        return cost.eagle3_head(target, latent=True)
    if kind in ("eagle-head", "eagle2-head"):
        return cost.eagle_head(dense_layer_of(target))
    if kind == "mtp":
        return cost.mtp_head(target)
    if kind == "draft-model" and (setup.get("draft") in SHAPES or setup.get("draft") in SHAPE_ALIASES):
        return shape(setup["draft"])
    if kind == "ngram":
        return cost.NGRAM
    if UNPRICED_DRAFTERS.get(kind):
        raise Unpriceable("drafter", f"no draft shape for {UNPRICED_DRAFTERS[kind]}")
    raise Unpriceable("drafter", f"no draft shape for drafter {kind!r} (draft {setup.get('draft')!r}) on "
                                 f"{target.name}")
