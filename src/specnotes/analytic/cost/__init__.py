"""The analytic cost model of speculative decoding (DESIGN.md §2).

One forward pass over ``batch`` sequences, each adding ``new_tokens`` tokens after ``context``
cached ones, runs two kinds of kernel (per layer; every layer is the same, so we add them up):

- the matmuls (projections and LM head): 2·P·B·n FLOPs, the weights w·P read once per pass;
- attention over the KV cache: 4·d_head·n_heads FLOPs per (query, key) pair and layer (QKᵀ and AV),
  each sequence's cache read once, B·KV(L), and the new entries written, B·n·KV(1).

Dropped, because they are small next to these at the shapes the book uses: activations
(B·n·d_model per layer and matmul), the embedding gather, norms, rotary embeddings, and the
logits/softmax (``logits_cost`` prices those separately; Chapter 5 says when they matter).

Time of a pass (``roofline_time``), with ``overlap``:

- ``"kernel"`` (default): the sum over kernels of max(bytes/BW, FLOPs/peak). Each kernel overlaps
  its own memory traffic and math, but kernels run one after another, so attention's KV reads cannot
  hide the matmuls' FLOPs. This is the idealized bound the chapters teach. Because every matmul of a dense
  model has the same intensity (2·B·n/w), summing per matmul equals one max over all of them: the matmuls and
  the attention are the two kernels that matter. A MoE's experts are a third ("experts"): their grouped GEMM
  runs at the rows each touched expert gets, T·m/E[D], far below the rest's T.
- ``"pass"``: one max over the whole pass (perfect overlap across kernels; the book's first model).
- ``"none"``: memory time plus compute time, no overlap at all.

plus the engine's fixed costs: ``overhead`` per target pass, ``draft_overhead`` per draft pass and
``layer_overhead`` per decoder layer of every pass (launches, the small kernels a layer runs, attention
outside a piecewise CUDA graph). The idealized model has none; a calibration (``calibrate.calibration``, fitted
and cross-validated in Chapter 6, ``specnotes.record.calibrate``) supplies them. With tensor parallelism ``tp``, each
device holds 1/tp of the weights, the query heads and the KV heads (KV heads are replicated when
there are fewer than tp), and every layer ends its attention and its MLP with an all-reduce of the
activations, which never overlaps with compute. Passes that run one after another add. An
all-reduce costs its bytes at the datasheet link bandwidth plus ``allreduce_latency`` per call. That
latency is 0 unless you pass one: it belongs to the collective library and its algorithm (NCCL rings
and trees, vLLM's custom all-reduce) more than to the GPU, and no datasheet gives it, so the idealized
model leaves it out and a calibration supplies a measured value (Chapter 6; ``interconnect.json``).

A draft is one of these kinds (``draft_time``, ``draft_passes``): a draft *model* (a ``ModelShape``: k
sequential passes of one token), ``EarlyExit(layers)`` (the target's first layers and its head, k passes),
``SinglePass(shape)`` (one pass of one set of weights over k positions: block/parallel drafters, intensity B·k;
``Block(shape, block, k_max)``: one with a block length, Chapter 11), ``Heads(shape)`` (k heads with their own
weights, one position each: Medusa, intensity B per head), ``EagleHead`` (an EAGLE head: fc, decoder layer, its
own LM head; its first pass runs every verified token) and ``NGRAM`` (no weights: prompt lookup; ``HostLookup``:
host time that grows with the batch, a suffix tree, Chapter 11). A tree drafts ``widths[i]`` tokens per sequence
at level i and verifies its tree tokens in one target pass (``tree_speedup``).

One module per job, each importing only those above it:

- ``shapes``      ``ModelShape`` and the dense presets (``PRESETS``);
- ``moe_shapes``  ``MoEShape``, ``expected_experts``, latent attention (MLA) and the MoE presets;
- ``kernels``     a pass's FLOPs and bytes: ``Kernel``, ``PassCost``, ``forward_cost``, ``gemm_cost``, ``logits_cost``;
- ``roofline``    a pass's seconds: ``roofline_time``, ``pass_time``, ``decode_summary``, ``Pass`` and the knobs;
- ``acceptance``  E[N], ``implied_alpha``, ``tokens_pmf``, Leviathan's ``speedup`` and ``optimal_k``;
- ``drafters``    the drafter kinds and heads (EAGLE, EAGLE-3, MTP) and the passes each runs (``draft_passes``);
- ``memory``      ``weights_per_device`` and ``max_batch``;
- ``iteration``   ``draft_time``, ``iteration_time`` and S(B): ``batch_speedup``, ``tree_speedup``;
- ``paying``      where it pays: ``paying_batches``, ``batch_ranges``, ``crossover_batch``, ``best_k``;
- ``positions``   Chapter 11: S(B) with per-position acceptance (``position_speedup``), a block drafter's best k
                  (``best_position_k``), where it stops paying (``stops_paying``), the slot budget (``budget_slots``);
- ``split``       the time of every pass split by term (``breakdown``, ``pass_breakdown``, ``change``, ``TERMS``).

The names below are this package's face (``cost.batch_speedup``); the submodules import one another, never the
face. Pure Python: no torch.
"""

from specnotes.analytic.cost.acceptance import (
    conditional_rates,
    expected_tokens,
    expected_tokens_by_position,
    iid_error,
    implied_alpha,
    optimal_k,
    pooled_alpha,
    speedup,
    survival,
    tokens_pmf,
)
from specnotes.analytic.cost.drafters import (
    EAGLE3_LLAMA_3_1_8B,
    EAGLE3_LLAMA_3_1_70B,
    EAGLE3_QWEN3_8B,
    EAGLE3_QWEN3_32B,
    HEAD_PRESETS,
    MTP_DEEPSEEK_V3,
    NGRAM,
    PUBLISHED_EAGLE3_LAYERS,
    Block,
    Draft,
    EagleHead,
    EarlyExit,
    Heads,
    HostLookup,
    NoWeights,
    SinglePass,
    dense_layer,
    draft_passes,
    eagle3_head,
    eagle_head,
    early_exit_shape,
    levels,
    mtp_head,
    target_pass,
)
from specnotes.analytic.cost.iteration import (
    batch_speedup,
    draft_time,
    iteration_time,
    speedup_from_times,
    tree_speedup,
)
from specnotes.analytic.cost.kernels import (
    ACT_BYTES,
    Kernel,
    PassCost,
    _matmul,
    allreduce_cost,
    attended_pairs,
    attention_cost,
    decode_cost,
    forward_cost,
    gemm_cost,
    logits_cost,
    matmul_cost,
    mixed_verify_cost,
    verify_cost,
)
from specnotes.analytic.cost.memory import _draft_memory, max_batch, weights_per_device
from specnotes.analytic.cost.moe_shapes import (
    DEEPSEEK_V3,
    GPT_OSS_20B,
    GPT_OSS_120B,
    KIMI_K2_5,
    LLAMA_4_SCOUT,
    MINIMAX_M2,
    MIXTRAL_8X7B,
    MOE_PRESETS,
    QWEN2_57B_A14B,
    QWEN3_30B_A3B,
    QWEN3_235B_A22B,
    MoEShape,
    expected_experts,
    mla_attention_intensity,
)
from specnotes.analytic.cost.paying import batch_ranges, best_k, crossover_batch, paying_batches
from specnotes.analytic.cost.positions import (
    best_position_k,
    budget_slots,
    describe_stops,
    position_speedup,
    ridge_ratio,
    stops_paying,
    survival_rows,
)
from specnotes.analytic.cost.roofline import (
    OVERLAPS,
    Pass,
    _Engine,
    _math_dtype,
    _seconds,
    decode_summary,
    pass_time,
    roofline_time,
)
from specnotes.analytic.cost.shapes import (
    LLAMA_3_1_8B,
    LLAMA_3_1_70B,
    LLAMA_3_2_1B,
    LLAMA_3_8B,
    LLAMA_3_70B,
    PRESETS,
    QWEN3_0_6B,
    QWEN3_1_7B,
    QWEN3_8B,
    QWEN3_32B,
    ModelShape,
)
from specnotes.analytic.cost.split import (
    ROOFS,
    TERMS,
    Breakdown,
    KernelSplit,
    PassSplit,
    breakdown,
    change,
    pass_breakdown,
)
from specnotes.analytic.hardware import accelerator

__all__ = [
    "ACT_BYTES", "Breakdown", "DEEPSEEK_V3", "Draft", "EAGLE3_LLAMA_3_1_70B", "EAGLE3_LLAMA_3_1_8B", "EAGLE3_QWEN3_32B",
    "EAGLE3_QWEN3_8B", "EagleHead", "EarlyExit", "GPT_OSS_120B", "GPT_OSS_20B", "HEAD_PRESETS", "Heads", "KIMI_K2_5",
    "Kernel", "KernelSplit", "LLAMA_3_1_70B", "LLAMA_3_1_8B", "LLAMA_3_2_1B", "LLAMA_3_70B", "LLAMA_3_8B",
    "LLAMA_4_SCOUT", "MINIMAX_M2", "MIXTRAL_8X7B", "MOE_PRESETS", "MTP_DEEPSEEK_V3", "MoEShape", "ModelShape", "NGRAM",
    "NoWeights", "OVERLAPS", "PRESETS", "PUBLISHED_EAGLE3_LAYERS", "Pass", "PassCost", "PassSplit", "QWEN2_57B_A14B",
    "QWEN3_0_6B", "QWEN3_1_7B", "QWEN3_235B_A22B", "QWEN3_30B_A3B", "QWEN3_32B", "QWEN3_8B", "ROOFS", "SinglePass",
    "TERMS", "accelerator", "allreduce_cost", "attended_pairs", "attention_cost", "batch_ranges", "batch_speedup",
    "best_k", "breakdown", "change", "crossover_batch", "decode_cost", "decode_summary", "dense_layer", "draft_passes",
    "draft_time", "eagle3_head", "eagle_head", "early_exit_shape", "expected_experts", "expected_tokens",
    "forward_cost", "gemm_cost", "implied_alpha", "iteration_time", "levels", "logits_cost", "matmul_cost", "max_batch",
    "mixed_verify_cost", "mla_attention_intensity", "mtp_head", "optimal_k", "pass_breakdown", "pass_time",
    "paying_batches", "roofline_time", "speedup", "speedup_from_times", "target_pass", "tokens_pmf", "tree_speedup",
    "verify_cost", "weights_per_device",
    # Chapter 11: per-position acceptance, block and host drafters, the slot budget
    "Block", "HostLookup", "best_position_k", "budget_slots", "conditional_rates", "describe_stops",
    "expected_tokens_by_position", "iid_error", "pooled_alpha", "position_speedup", "ridge_ratio", "stops_paying",
    "survival", "survival_rows",
    # private, but the chapters print them (inspect.getsource(cost._seconds)) and calibrate calls _math_dtype
    "_Engine", "_draft_memory", "_math_dtype", "_matmul", "_seconds",
]
