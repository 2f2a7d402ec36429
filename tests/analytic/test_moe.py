"""Chapter 10's model of sparse targets: the expected number of distinct experts against enumeration and Monte
Carlo (with the wrong formulas it must reject), MoE bytes and FLOPs, MLA's cache and attention, MTP as a
drafter, config.json parsing on the real configs' fields, bad shapes, and the sentences' boundaries."""

import itertools
import math
import random
from dataclasses import replace

import pytest

from specnotes.analytic import cost, moe
from specnotes.analytic.cost import DEEPSEEK_V3, MOE_PRESETS, QWEN3_30B_A3B, ModelShape, MoEShape
from specnotes.validate import BadArgument

H100 = "H100-SXM"


# ---------------------------------------------------------------------------------------------- E[distinct]


def enumerate_distinct(n: int, m: int, t: int) -> float:
    """The exact mean of |S_1 ∪ ... ∪ S_T| over every way T tokens can each pick m of N experts."""
    choices = list(itertools.combinations(range(n), m))
    total = sum(len(set().union(*picks)) for picks in itertools.product(choices, repeat=t))
    return total / len(choices) ** t


WRONG = {  # formulas a reader might write; the enumeration must reject each
    "with replacement": lambda n, m, t: n * (1 - (1 - 1 / n) ** (m * t)),
    "no collisions": lambda n, m, t: min(n, m * t),
    "one token fewer": lambda n, m, t: n * (1 - (1 - m / n) ** (t - 1)),
    "m/N per token, not per expert": lambda n, m, t: n * (1 - (1 - 1 / n) ** t) * m,
}


@pytest.mark.parametrize("n,m,t", [(4, 1, 3), (5, 2, 1), (5, 2, 2), (5, 2, 3), (6, 3, 3), (4, 4, 2), (7, 2, 3)])
def test_expected_experts_is_the_enumerated_mean(n, m, t):
    assert cost.expected_experts(n, m, t) == pytest.approx(enumerate_distinct(n, m, t), rel=1e-12)


def test_the_enumeration_rejects_every_wrong_formula():
    cases = [(5, 2, 2), (5, 2, 3), (7, 2, 3), (4, 1, 3)]
    for label, wrong in WRONG.items():
        assert any(abs(wrong(*c) - enumerate_distinct(*c)) > 1e-6 for c in cases), label


def sample_distinct(n, m, t, rng, trials, pick):
    return sum(len(set().union(*pick(rng, n, m, t))) for _ in range(trials)) / trials


def independent(rng, n, m, t):
    return [rng.sample(range(n), m) for _ in range(t)]


def sticky(rng, n, m, t, keep=0.6):
    """Each token repeats the previous token's experts with probability ``keep`` (positively correlated)."""
    picks = [rng.sample(range(n), m)]
    for _ in range(t - 1):
        picks.append(picks[-1] if rng.random() < keep else rng.sample(range(n), m))
    return picks


def popular(rng, n, m, t):
    """Unbalanced: half the experts are four times as likely to be picked (no two picks the same)."""
    weights = [4 if e < n // 2 else 1 for e in range(n)]
    out = []
    for _ in range(t):
        chosen = set()
        while len(chosen) < m:
            chosen.add(rng.choices(range(n), weights)[0])
        out.append(chosen)
    return out


def test_monte_carlo_agrees_and_correlation_or_imbalance_touch_fewer():
    rng = random.Random(7)
    n, m, t, trials = 16, 2, 10, 20000
    formula = cost.expected_experts(n, m, t)
    sd = 1.5  # the distinct count's standard deviation here is ~1.2 experts
    iid = sample_distinct(n, m, t, rng, trials, independent)
    assert abs(iid - formula) < 4 * sd / math.sqrt(trials)
    for label, wrong in WRONG.items():  # the sampled mean rejects the wrong formulas too
        assert abs(iid - wrong(n, m, t)) > 4 * sd / math.sqrt(trials), label
    assert sample_distinct(n, m, t, rng, trials, sticky) < formula - 1.0
    assert sample_distinct(n, m, t, rng, trials, popular) < formula - 0.3


def test_expected_experts_limits_and_inverse():
    assert cost.expected_experts(128, 8, 0) == 0
    assert cost.expected_experts(128, 8, 1) == pytest.approx(8)
    assert cost.expected_experts(128, 8, 10_000) == pytest.approx(128)
    assert cost.expected_experts(8, 8, 3) == 8  # every token uses every expert: dense
    for t in (1, 3.5, 40):
        assert moe.effective_tokens(64, 4, cost.expected_experts(64, 4, t)) == pytest.approx(t)
    assert moe.effective_tokens(64, 4, 64) == math.inf
    with pytest.raises(BadArgument, match="per_token"):
        cost.expected_experts(8, 9, 3)
    with pytest.raises(BadArgument, match="tokens"):
        cost.expected_experts(8, 2, -1)


# ---------------------------------------------------------------------------------------------- MoE costs


SMALL = MoEShape(2, 64, 4, 2, 100, 50, name="small", n_experts=8, experts_per_token=2, expert_d_ff=32)


def test_moe_params_by_hand():
    d, f = 64, 32
    attention = 2 * d * d + 2 * d * 2 * 16
    expert = 3 * d * f
    always = 2 * attention + 2 * d * 8 + d * 50  # attention, routers, LM head
    assert SMALL.expert_params == expert
    assert SMALL.always_params == always
    assert SMALL.params == always + 2 * 8 * expert
    assert SMALL.active_params == always + 2 * 2 * expert
    assert SMALL.layer_params == attention + d * 8 + 8 * expert


@pytest.mark.parametrize("batch,new", [(1, 1), (1, 4), (3, 5), (64, 1), (64, 4)])
def test_a_pass_reads_the_distinct_experts_and_runs_the_active_ones(batch, new):
    t = batch * new
    c = cost.forward_cost(SMALL, batch, new)
    kernels = {k.name: k for k in c.kernels}
    dense, experts = kernels["matmul"], kernels["experts"]
    distinct = 8 * (1 - (1 - 2 / 8) ** t)
    assert dense.bytes == pytest.approx(2 * SMALL.always_params)
    assert dense.flops == pytest.approx(2 * t * SMALL.always_params)
    assert experts.bytes == pytest.approx(2 * 2 * distinct * SMALL.expert_params)  # 2 MoE layers
    assert dense.flops + experts.flops == pytest.approx(2 * t * SMALL.active_params)
    # the grouped GEMM's intensity is the rows each touched expert gets: T·m/E[D], over w = 2 bytes
    assert experts.flops / experts.bytes == pytest.approx(t * 2 / distinct)


def test_decode_reads_m_experts_and_verify_more_at_batch_one():
    dec = cost.decode_cost(QWEN3_30B_A3B, 1)
    ver = cost.verify_cost(QWEN3_30B_A3B, 1, 3)
    s = QWEN3_30B_A3B
    matmuls = lambda c: sum(k.bytes for k in c.kernels if k.name in ("matmul", "experts"))
    assert matmuls(dec) == pytest.approx(2 * s.active_params)  # E[D](1) = m
    touched = cost.expected_experts(128, 8, 4)
    assert matmuls(ver) == pytest.approx(2 * (s.always_params + 48 * touched * s.expert_params))
    assert ver.kernels[1].bytes / dec.kernels[1].bytes == pytest.approx(touched / 8)  # the experts: 3.6x; dense: 1


def test_a_moe_with_m_equal_n_costs_what_the_dense_model_does():
    d = MoEShape(2, 64, 4, 2, 64, 50, n_experts=2, experts_per_token=2, expert_d_ff=32)
    dense = ModelShape(2, 64, 4, 2, 64, 50)
    for b, n in ((1, 1), (8, 5)):
        m, x = cost.forward_cost(d, b, n, 16), cost.forward_cost(dense, b, n, 16)
        router = 2 * 64 * 2  # the only difference: two routers of d_model × N
        assert m.bytes == pytest.approx(x.bytes + 2 * router)
        assert m.flops == pytest.approx(x.flops + 2 * router * b * n)


def test_dense_shapes_are_unchanged():
    # the dense path: 2·P·T FLOPs and w·P bytes, as before MoE existed (test_cost derives P by hand)
    c = cost.forward_cost(cost.LLAMA_3_8B, 4, 5)
    assert c.kernels[0].flops == 2 * cost.LLAMA_3_8B.params * 20
    assert c.kernels[0].bytes == 2 * cost.LLAMA_3_8B.params


def test_a_tree_and_a_moe_draft_follow_the_tokens_of_their_pass():
    draft = replace(SMALL, name="moe draft")
    passes = cost.draft_passes(draft, batch=4, k=2, context=0, widths=(1, 3))
    matmuls = lambda p: p.kernels[0].bytes + p.kernels[1].bytes  # the dense matmuls and the experts
    assert [matmuls(p) for p in passes] == pytest.approx([2 * SMALL.touched_params(4), 2 * SMALL.touched_params(12)])
    tree = cost.target_pass(SMALL, 4, 1 + 6, 0)  # six tree tokens and the bonus position per sequence
    assert matmuls(tree) == pytest.approx(2 * SMALL.touched_params(28))


def test_the_moe_speedup_rises_before_it_falls_and_the_dense_twin_falls():
    curves = moe.speedup_curves(QWEN3_30B_A3B, cost.QWEN3_0_6B, H100, 3, 0.7, 1024)
    assert curves.peak > 1 and max(curves.moe) > 1.5 * curves.moe[0]
    assert all(b <= a for a, b in zip(curves.dense, curves.dense[1:], strict=False))
    assert curves.moe_ranges and curves.moe_ranges[0][0] > 1  # at B = 1 the verify pass's experts cost too much


def test_dense_twin_has_the_same_active_parameters():
    for shape in (QWEN3_30B_A3B, cost.MIXTRAL_8X7B, cost.QWEN2_57B_A14B):
        twin = moe.dense_twin(shape)
        routers = shape.moe_layers * shape.d_model * shape.n_experts
        assert twin.params == shape.active_params - routers
        assert not isinstance(twin, MoEShape)


# Published totals and active parameters (each model's card or paper; the active counts exclude the input
# embedding, as cost counts the matmuls a token runs): the presets' fields must reproduce them.
PUBLISHED = {  # name: (total params incl. an untied embedding, active params, relative tolerance)
    "Mixtral-8x7B": (46.7e9, 12.9e9, 0.02),  # Mistral AI, "Mixtral of experts" (2023-12-11): 46.7B, 12.9B
    "Qwen3-30B-A3B": (30.5e9, 3.3e9, 0.10),  # Qwen3 model card: 30.5B total, 3.3B activated (embeddings in)
    "Qwen3-235B-A22B": (235e9, 22e9, 0.03),  # Qwen3 model card: 235B, 22B
    "gpt-oss-20b": (20.91e9, 3.61e9, 0.01),  # gpt-oss model card (arXiv 2508.10925) Table 1
    "gpt-oss-120b": (116.83e9, 5.13e9, 0.01),  # same table
    "DeepSeek-V3": (671e9, 36.6e9, 0.01),  # tenstorrent/tt-metal README_WEIGHTS.md (DeepSeek's): 671B, 36.6B w/ head
    "Llama-4-Scout": (109e9, 17e9, 0.06),  # Meta's model card: 109B total (with the vision encoder), 17B active
    "Qwen2-57B-A14B": (57e9, 14e9, 0.03),  # Qwen2 report: 57B total, 14B activated
    # Kimi K2 (arXiv 2507.20534), as glennklockwood.com/garden/Kimi-K2.5 quotes it: 1.04T total; the Kimi-K2.5
    # model card (as miles.radixark.com/docs/models/kimi/kimi-k2.5 copies it): 32B activated
    "Kimi-K2.5": (1.04e12, 32e9, 0.03),
    # vllm-project/recipes models/MiniMaxAI/MiniMax-M2.yaml @07444b3 (the M2 series): 230B total, 10B active
    "MiniMax-M2": (230e9, 10e9, 0.05),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_presets_reproduce_published_parameter_counts(name):
    s = MOE_PRESETS[name]
    total, active, rel = PUBLISHED[name]
    assert s.memory_bytes / s.weight_bytes == pytest.approx(total, rel=rel)
    assert s.active_params == pytest.approx(active, rel=rel)
    assert cost.PRESETS[name] is s


# ---------------------------------------------------------------------------------------------- MLA, MTP


def test_mla_caches_the_latent_and_replicates_it_over_tp():
    s = DEEPSEEK_V3
    assert s.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272  # DeepSeek-V3 report: 70 KB per token
    ctx = 4096
    att = next(k for k in cost.decode_cost(s, 8, ctx).kernels if k.name == "attention")
    assert att.bytes == pytest.approx(8 * (ctx + 1) * 70_272)
    assert att.flops == pytest.approx(8 * 61 * 128 * 2 * (2 * 512 + 64) * cost.attended_pairs(1, ctx))
    on_8 = next(k for k in cost.decode_cost(s, 8, ctx, tp=8).kernels if k.name == "attention")
    assert on_8.bytes == att.bytes  # every device holds the whole latent
    assert on_8.flops == pytest.approx(att.flops / 8)  # and runs its 16 of 128 heads
    # the absorbed attention's intensity: per query, H·2(2d_c + d_rope)/((d_c + d_rope)·2) FLOP per byte
    assert cost.mla_attention_intensity(s) == pytest.approx(128 * 2 * 1088 / (576 * 2))
    assert cost.mla_attention_intensity(s, 4) == pytest.approx(4 * cost.mla_attention_intensity(s))
    with pytest.raises(BadArgument, match="MLA"):
        cost.mla_attention_intensity(QWEN3_30B_A3B)


def test_mtp_is_one_layer_of_the_target_and_one_pass_at_k_one():
    head = cost.MTP_DEEPSEEK_V3
    assert head.layer.n_layers == 1 and head.layer.dense_layers == 0 and head.layer.mla
    # DeepSeek's README: 11.5B unique MTP parameters besides the shared embedding and head
    assert head.params - DEEPSEEK_V3.d_model * DEEPSEEK_V3.vocab == pytest.approx(11.5e9, rel=0.01)
    one = cost.draft_passes(head, batch=16, k=1, context=1000)
    assert len(one) == 1
    body, experts = one[0].kernels[:2]  # its layer's matmuls and fc; its experts' grouped GEMM
    assert (body.name, experts.name) == ("matmul", "experts")
    fc = 2 * 7168**2
    layer = head.layer
    lm = layer.d_model * layer.vocab
    tokens = 16 * 2  # its first pass runs the verified tokens of every sequence: k + 1 = 2
    assert body.flops + experts.flops == pytest.approx(2 * tokens * (fc + layer.active_params - lm))
    assert body.bytes + experts.bytes == pytest.approx(2 * (fc + layer.touched_params(tokens) - lm))
    assert len(cost.draft_passes(head, batch=16, k=3, context=1000)) == 3  # k > 1: the module again, EAGLE-style
    assert cost.batch_speedup(DEEPSEEK_V3, head, "H200", 1, 1, 0.8, 1000) > 1


# ---------------------------------------------------------------------------------------------- bad shapes


@pytest.mark.parametrize("fields,match", [
    ({"n_experts": 0}, "n_experts"),
    ({"experts_per_token": 9}, "at most n_experts"),
    ({"experts_per_token": 0}, "experts_per_token"),
    ({"expert_d_ff": 0}, "expert_d_ff"),
    ({"dense_layers": 2}, "dense_layers"),
    ({"shared_experts": -1}, "shared_experts"),
    ({"shared_d_ff": 0}, "shared_d_ff"),
    ({"qk_rope_head_dim": 64}, "kv_lora_rank"),
    ({"kv_lora_rank": 512}, "qk_nope_head_dim"),
])
def test_bad_moe_shapes_get_clear_errors(fields, match):
    base = {"n_experts": 8, "experts_per_token": 2, "expert_d_ff": 32}
    with pytest.raises(ValueError, match=match):
        MoEShape(2, 64, 4, 2, 100, 50, **{**base, **fields})


def test_a_moe_shape_needs_its_fields_by_name():
    with pytest.raises(TypeError):
        MoEShape(2, 64, 4, 2, 100, 50, 2, 2, "x", "bf16", False, None, 8)  # the MoE fields are keyword-only


# ---------------------------------------------------------------------------------------------- config.json

# The fields of each model's config.json, copied from where they were read (the hub's config.json, copied into
# a public repository at the commit named). Only the fields the parser reads, plus model_type.
CONFIGS = {
    # NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_mixtral.py
    # @1aa6e3d4645f61bb7c93caa65caaec519ccd51ee (MIXTRAL_8X7B_CONFIG: mistralai/Mixtral-8x7B-v0.1's config.json)
    "Mixtral-8x7B": {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                     "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
                     "num_key_value_heads": 8, "num_local_experts": 8, "tie_word_embeddings": False,
                     "vocab_size": 32000},
    # citsjtu2020/LLM-Prof sglang/Model_Config.md @8434c8d19c396b2f95d92a67845a7c0a0e0dd512 (Qwen/Qwen3-30B-A3B)
    "Qwen3-30B-A3B": {"model_type": "qwen3_moe", "decoder_sparse_step": 1, "head_dim": 128, "hidden_size": 2048,
                      "intermediate_size": 6144, "mlp_only_layers": [], "moe_intermediate_size": 768,
                      "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
                      "num_hidden_layers": 48, "num_key_value_heads": 4, "tie_word_embeddings": False,
                      "vocab_size": 151936},
    # Qwen/Qwen3-235B-A22B: 94 layers, 64 query and 4 KV heads, 128 experts, 8 activated (the model card, as
    # b-lab.team/en/content/b76fff15-f533-46f7-828f-0254e65ffc36 copies it); hidden 4096, expert width 1536,
    # head_dim (kv-channels) 128, vocab 151936, untied: zyzshishui/slime scripts/models/qwen3-235B-A22B.sh
    # @a29386384f6fa74b4e926a675b40038a91289659 (the hub config as Megatron arguments)
    "Qwen3-235B-A22B": {"model_type": "qwen3_moe", "decoder_sparse_step": 1, "head_dim": 128, "hidden_size": 4096,
                        "intermediate_size": 12288, "mlp_only_layers": [], "moe_intermediate_size": 1536,
                        "num_attention_heads": 64, "num_experts": 128, "num_experts_per_tok": 8,
                        "num_hidden_layers": 94, "num_key_value_heads": 4, "tie_word_embeddings": False,
                        "vocab_size": 151936},
    # EchoCog/gpt-oss-20b config.json @52971a17bf2f66dd519c8d26217b1405e425a246 (openai/gpt-oss-20b's)
    "gpt-oss-20b": {"model_type": "gpt_oss", "experts_per_token": 4, "head_dim": 64, "hidden_size": 2880,
                    "intermediate_size": 2880, "num_attention_heads": 64, "num_experts_per_tok": 4,
                    "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
                    "tie_word_embeddings": False, "vocab_size": 201088},
    # huggingface/transformers src/transformers/models/gpt_oss/configuration_gpt_oss.py
    # @02b8f42b4240dddea1b27c45d2dc95fb2682f841: GptOssConfig's defaults, openai/gpt-oss-120b's values
    "gpt-oss-120b": {"model_type": "gpt_oss", "head_dim": 64, "hidden_size": 2880, "intermediate_size": 2880,
                     "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 36,
                     "num_key_value_heads": 8, "num_local_experts": 128, "tie_word_embeddings": False,
                     "vocab_size": 201088},
    # tenstorrent/tt-metal models/demos/deepseek_v3/reference/config.json @621eaf12c31eb411ef7daee162b9cb407addb530
    # (deepseek-ai/DeepSeek-V3's)
    "DeepSeek-V3": {"model_type": "deepseek_v3", "first_k_dense_replace": 3, "hidden_size": 7168,
                    "intermediate_size": 18432, "kv_lora_rank": 512, "moe_intermediate_size": 2048,
                    "moe_layer_freq": 1, "n_routed_experts": 256, "n_shared_experts": 1,
                    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
                    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
                    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "tie_word_embeddings": False,
                    "v_head_dim": 128, "vocab_size": 129280},
    # huggingface/transformers src/transformers/models/llama4/configuration_llama4.py
    # @008e574391258935f3ecc3035c882e73bbcac419: Llama4TextConfig's defaults (checkpoint
    # meta-llama/Llama-4-Scout-17B-16E), under text_config as the hub's config.json nests them
    "Llama-4-Scout": {"model_type": "llama4", "tie_word_embeddings": False, "text_config": {
        "model_type": "llama4_text", "head_dim": 128, "hidden_size": 5120, "interleave_moe_layer_step": 1,
        "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_attention_heads": 40,
        "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
        "vocab_size": 202048}},
    # moonshotai/Kimi-K2.5's config.json, text_config: copied in a public Swift test of KimiK25Configuration
    # (the search index's file 55329353243, kKimiK25ConfigJSON); the counts agree with SemiAnalysisAI/InferenceX-app
    # packages/app/src/lib/model-architectures.ts @77ca49a679198bbf593bd1a57fe26a27c9967bb3 (its source: the hub's
    # config.json): 61 layers, 7168 wide, 64 heads, vocab 163840, experts 2048 wide, 384 + 1 shared, 8 active,
    # 1 dense layer of 18432
    "Kimi-K2.5": {"model_type": "kimi_k25", "text_config": {
        "model_type": "kimi_k2", "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64, "kv_lora_rank": 512,
        "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_layer_freq": 1,
        "first_k_dense_replace": 1, "tie_word_embeddings": False, "vocab_size": 163840}},
    # MiniMaxAI/MiniMax-M2's config.json fields as SemiAnalysisAI/InferenceX-app model-architectures.ts
    # @77ca49a679198bbf593bd1a57fe26a27c9967bb3 lists them (62 layers, 3072 wide, 48 heads, 8 KV heads of 128,
    # vocab 200064, 256 experts of 1536, 8 active, no shared expert); named as MiniMax's config names them
    "MiniMax-M2": {"model_type": "minimax_m2", "head_dim": 128, "hidden_size": 3072, "intermediate_size": 1536,
                   "num_attention_heads": 48, "num_experts_per_tok": 8, "num_hidden_layers": 62,
                   "num_key_value_heads": 8, "num_local_experts": 256, "tie_word_embeddings": False,
                   "vocab_size": 200064},
    # NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_qwen_moe.py
    # @cb4c622cf5bb97009451f7f44609498a48a2b11d (QWEN2_57B_A14B_CONFIG: Qwen/Qwen2-57B-A14B's config.json)
    "Qwen2-57B-A14B": {"model_type": "qwen2_moe", "decoder_sparse_step": 1, "hidden_size": 3584,
                       "intermediate_size": 18944, "moe_intermediate_size": 2560, "num_attention_heads": 28,
                       "num_experts": 64, "num_experts_per_tok": 8, "num_hidden_layers": 28,
                       "num_key_value_heads": 4, "shared_expert_intermediate_size": 20480,
                       "tie_word_embeddings": False, "vocab_size": 151936},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_configs_parse_to_the_presets(name):
    parsed = moe.shape_from_config(CONFIGS[name], name=name)
    assert parsed == MOE_PRESETS[name]


def test_a_dense_config_parses_as_before():
    qwen3_32b = {"hidden_size": 5120, "head_dim": 128, "intermediate_size": 25600, "num_attention_heads": 64,
                 "num_hidden_layers": 64, "num_key_value_heads": 8, "tie_word_embeddings": False,
                 "vocab_size": 151936, "_name_or_path": "Qwen/Qwen3-32B"}
    assert moe.shape_from_config(qwen3_32b) == cost.QWEN3_32B
    assert type(moe.shape_from_config(qwen3_32b)) is ModelShape


def test_layer_conventions_count_the_moe_layers():
    assert moe.moe_layer_count({"mlp_only_layers": [0, 3], "decoder_sparse_step": 2}, 8) == 3  # 1, 5, 7
    assert moe.moe_layer_count({"first_k_dense_replace": 1, "moe_layer_freq": 2}, 6) == 2  # layers 2 and 4
    assert moe.moe_layer_count({"interleave_moe_layer_step": 2}, 48) == 24  # Llama 4 Maverick's pattern
    assert moe.moe_layer_count({"moe_layers": [1, 3, 3]}, 8) == 2
    with pytest.raises(BadArgument, match=r"moe_layers\[3\] must be an integer in \[0, 7\], got 99"):
        moe.moe_layer_count({"moe_layers": [1, 3, 3, 99]}, 8)  # a layer the model does not have
    maverick_like = {**CONFIGS["Llama-4-Scout"]["text_config"], "interleave_moe_layer_step": 2}
    shape = moe.shape_from_config(maverick_like)
    assert shape.dense_layers == 24 and shape.d_ff == 16384


@pytest.mark.parametrize("change,match", [
    ({"num_experts_per_tok": None}, "experts does a token use"),
    ({"num_experts_per_tok": 200}, "at most n_experts"),
    ({"num_experts": 0}, "num_experts"),
    ({"num_experts": 2.5}, "must be an integer"),
    ({"hidden_size": None}, "lacks hidden_size"),
    ({"mlp_only_layers": list(range(48))}, "no layer is MoE"),
])
def test_bad_configs_get_clear_errors(change, match):
    config = {**CONFIGS["Qwen3-30B-A3B"], **change}
    with pytest.raises(ValueError, match=match):
        moe.shape_from_config(config)


# ---------------------------------------------------------------------------------------------- routing stats


def test_routing_statistics():
    assert moe.mean_distinct([[[0, 1], [1, 2]], [[3, 4], [3, 4]]]) == 2.5
    assert moe.consecutive_overlap([[[0, 1], [1, 2], [1, 2]]]) == pytest.approx((0.5 + 1) / 2)
    assert moe.independent_overlap(16, 2) == 1 / 8
    rng = random.Random(3)  # independent picks share m/N on average
    seqs = [independent(rng, 16, 2, 200) for _ in range(50)]
    assert moe.consecutive_overlap(seqs) == pytest.approx(1 / 8, abs=0.01)
    with pytest.raises(BadArgument):
        moe.consecutive_overlap([[[0, 1]]])


# ---------------------------------------------------------------------------------------------- sentences


@pytest.mark.parametrize("ratio,word", [(1.049, "as independent"), (0.951, "as independent"),
                                        (0.949, "fewer than"), (1.051, "more than")])
def test_describe_distinct_boundaries(ratio, word):
    assert word in moe.describe_distinct(10 * ratio, 10, 40)


@pytest.mark.parametrize("ratio,word", [(1.049, "as independent"), (0.951, "as independent"),
                                        (0.949, "less than"), (1.051, "tend to pick the same")])
def test_describe_overlap_boundaries(ratio, word):
    assert word in moe.describe_overlap(ratio / 8, 16, 2)


@pytest.mark.parametrize("peak,rises", [(1.051, True), (1.049, False)])
def test_describe_curve_boundaries(peak, rises):
    curves = moe.Curves([1, 2, 4], [1.0, peak, 0.9], [1.2, 1.1, 1.0], [], [])
    sentence = moe.describe_curve(curves)
    assert ("rises from" in sentence) == rises and "falls from 1.20" in sentence
    up = moe.describe_curve(moe.Curves([1, 2, 4], [1.0, 1.2, 0.9], [1.0, 1.1, 1.0], [], []))
    assert "does not fall monotonically" in up


@pytest.mark.parametrize("last,fell", [(0.899, True), (0.901, False)])
def test_describe_ratio_trend_boundaries(last, fell):
    sentence = moe.describe_ratio_trend([1, 8, 64], [1.0, 0.95, last], [3.0, 2.0, 1.1])
    assert sentence.startswith("As the model predicts") == fell
    flat = moe.describe_ratio_trend([1, 8], [1.0, 0.5], [1.0, 1.2])
    assert "no fall to compare" in flat
    slow = moe.describe_ratio_trend([1, 8], [1.0, 1.0], [3.0, 1.1], verify_excess=4.25)
    assert "4.2× their modelled time" in slow and "did not fall" in slow


@pytest.mark.parametrize("peak,story", [(1.049, "fell from"), (1.051, "then fell")])
def test_describe_rise_boundaries(peak, story):
    assert story in moe.describe_rise([1, 2, 4], [1.0, peak, 0.9])
    assert "the last batch measured" in moe.describe_rise([1, 2], [1.0, 1.2])


def test_describe_alpha_boundaries():
    # 1000 drafts each: pooled 0.5, standard error sqrt(0.25 · 2/1000) = 0.02236; 2 of them = 0.0447
    assert "no difference" in moe.describe_alpha(522, 1000, 478, 1000)  # 0.044 apart
    assert "higher" in moe.describe_alpha(523, 1000, 477, 1000)  # 0.046 apart
    assert "lower" in moe.describe_alpha(477, 1000, 523, 1000)
    with pytest.raises(BadArgument):
        moe.describe_alpha(5, 4, 1, 2)


def test_imbalanced_distinct_is_the_formula_at_uniform_rates_and_fewer_when_unbalanced():
    uniform = [2 / 16] * 16
    assert moe.imbalanced_distinct(uniform, 32) == pytest.approx(cost.expected_experts(16, 2, 32))
    skewed = [0.27, 0.02] * 4 + [0.125] * 8  # layer 0 of the trained MoE spans 0.02-0.27 around 0.125
    assert moe.imbalanced_distinct(skewed, 32) < moe.imbalanced_distinct(uniform, 32)
    assert moe.imbalanced_distinct([uniform, skewed], 32) == pytest.approx(
        (moe.imbalanced_distinct(uniform, 32) + moe.imbalanced_distinct(skewed, 32)) / 2)  # averaged over layers
    with pytest.raises(BadArgument, match="a routing rate must be a number in \\[0, 1\\]"):
        moe.imbalanced_distinct([1.5, 0.5], 4)
    with pytest.raises(BadArgument, match="rates must hold at least one layer"):
        moe.imbalanced_distinct([], 4)


def test_expert_rates_are_each_experts_share_of_the_tokens():
    rates = moe.expert_rates([[[0, 1], [0, 2]], [[0, 3]]], 4)
    assert rates == [1.0, 1 / 3, 1 / 3, 1 / 3] and sum(rates) == pytest.approx(2)  # they sum to m
    with pytest.raises(BadArgument, match="an expert index must be an integer in \\[0, 3\\]"):
        moe.expert_rates([[[0, 4]]], 4)


def test_describe_distinct_names_imbalance_and_correlation_apart():
    """Issue 44, P1 2: Chapter 10 measured 14.43 distinct experts against 15.78 for uniform independent routing, and
    14.45 at each expert's own rate. The old sentence blamed correlation; the gap is the imbalance."""
    text = moe.describe_distinct(14.43, 15.78, 32, imbalanced=14.45)
    assert "unbalanced routing reads fewer" in text and "no more than chance would" in text
    assert "share experts more than chance" not in text
    both = moe.describe_distinct(12.0, 15.78, 32, imbalanced=14.45)
    assert "unbalanced routing reads fewer" in both and "the tokens share experts more than chance would" in both
    alone = moe.describe_distinct(14.43, 15.78, 32)  # the old call: names neither cause alone
    assert "Unbalanced routing or tokens that share experts, or both" in alone
    with pytest.raises(BadArgument, match="imbalanced must be a number > 0"):
        moe.describe_distinct(14.43, 15.78, 32, imbalanced=0)


@pytest.mark.parametrize("speedups, said, unsaid", [
    ([1.00, 1.03, 1.04], "S never rose more than 5% above its 1.00", "fell"),  # issue 44, item 11
    ([1.0, 1.04, 0.9], "never more than 5% above 1.00", "never rising"),
    ([1.0, 1.2, 1.2], "the last batch measured", "then fell")])
def test_describe_rise_on_the_reviews_probes(speedups, said, unsaid):
    text = moe.describe_rise([1, 2, 4], speedups)
    assert said in text and unsaid not in text, text


def test_describe_ratio_trend_compares_nothing_with_a_flat_model():
    """Issue 44, item 12: a model ratio of 2.00 and 2.00 predicts no fall, so neither "as" nor "unlike" the model."""
    for measured in ([2.0, 1.0], [2.0, 2.0]):
        text = moe.describe_ratio_trend([1, 8], measured, [2.0, 1.999])
        assert "no fall to compare" in text and "the model predicts" not in text and "Unlike" not in text


def test_describe_overlap_prints_m_over_n_as_it_is():
    """Issue 44, item 13: 0.1187 against m/N = 1/8 printed "12%, less than ... (12%)"."""
    assert moe.describe_overlap(0.1187, 8, 1).startswith("Consecutive tokens shared 11.9% of their experts, less "
                                                         "than independent routing would (12.5% = m/N)")


def test_describe_curve_with_its_peak_last_does_not_say_it_falls():
    """Issue 44, item 14."""
    text = moe.describe_curve(moe.Curves([1, 2, 4], [1.0, 1.1, 1.2], [1.0, 0.9, 0.8], [], []))
    assert "before it falls" not in text and "the last batch shown, without falling" in text

# ---------------------------------------------------------------------------------------------- heads for MoE targets


@pytest.mark.parametrize("name", sorted(MOE_PRESETS))
def test_every_moe_preset_answers_with_an_eagle3_an_eagle_and_an_mtp_head(name):
    target = MOE_PRESETS[name]
    tp = 8 if target.n_heads % 8 == 0 and (target.n_kv_heads % 8 == 0 or 8 % target.n_kv_heads == 0) else 1
    for head in (cost.eagle3_head(target), cost.eagle_head(target), cost.mtp_head(target)):
        s = cost.batch_speedup(target, head, "H200", 8, 3, 0.7, 1024, tp=tp)
        assert 0 < s < cost.expected_tokens(0.7, 3)
    e3 = cost.eagle3_head(target)
    # the EAGLE heads published for MoE targets are dense Llama layers of the target's width, never MoE layers
    assert not isinstance(e3.layer, MoEShape) and e3.layer.n_layers == 1 and e3.layer.d_model == target.d_model
    assert e3.layer.vocab == 32000 and e3.fc_inputs == 3 and e3.wide_qkv
    mtp = cost.mtp_head(target).layer  # MTP: one layer of the target's own kind, its MoE and its attention
    assert isinstance(mtp, MoEShape) and mtp.n_layers == 1 and mtp.dense_layers == 0 and mtp.mla == target.mla


def test_eagle3_heads_take_the_published_widths():
    kimi = cost.eagle3_head(cost.KIMI_K2_5).layer  # SpecForge configs/kimi-k25-eagle3.json @3f9b5fc
    assert (kimi.d_model, kimi.n_heads, kimi.n_kv_heads, kimi.d_head, kimi.d_ff) == (7168, 64, 64, 128, 18432)
    ds = cost.eagle3_head(DEEPSEEK_V3).layer  # SpecForge configs/deepseek-v3-671b-eagle3.json @c02a09a
    assert (ds.d_model, ds.n_heads, ds.n_kv_heads, ds.d_head, ds.d_ff) == (7168, 56, 8, 128, 40960)
    qwen = cost.eagle3_head(QWEN3_30B_A3B).layer  # SpecForge configs/qwen3-30B-eagle3.json @d1be954
    assert (qwen.d_model, qwen.n_heads, qwen.n_kv_heads, qwen.d_head, qwen.d_ff) == (2048, 32, 4, 128, 6144)
    fp8 = cost.eagle3_head(DEEPSEEK_V3.in_dtype("fp8")).layer
    assert fp8.weight_bytes == 1 and fp8.compute == "fp8"  # in the target's dtype
    name = cost.EAGLE3_LLAMA_3_1_8B.name
    dense = replace(cost.LLAMA_3_1_8B, n_layers=1, vocab=32000, tied_embeddings=True, name=name)
    assert cost.eagle3_head(cost.LLAMA_3_1_8B).layer == dense


def test_configs_with_dense_layers_answer_with_an_eagle3_head():
    # synthetic configs in the shapes of GLM-4.5 (DeepSeek-style dense first layers, GQA) and Llama 4 Maverick
    # (MoE every other layer): the parser's dense layers must not reach the head
    glm_like = {"model_type": "glm4_moe", "hidden_size": 1024, "intermediate_size": 4096, "moe_intermediate_size": 256,
                "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 128,
                "n_routed_experts": 32, "n_shared_experts": 1, "num_experts_per_tok": 4, "first_k_dense_replace": 3,
                "vocab_size": 5000}
    maverick_like = {"model_type": "llama4", "text_config": {
        "model_type": "llama4_text", "hidden_size": 1024, "intermediate_size": 512, "intermediate_size_mlp": 2048,
        "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64,
        "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 5000}}
    for config in (glm_like, maverick_like):
        target = moe.shape_from_config(config, name="synthetic")
        assert target.dense_layers > 0
        head = cost.eagle3_head(target)
        assert not isinstance(head.layer, MoEShape) and head.layer.d_ff == target.d_ff
        assert cost.batch_speedup(target, head, "H100-SXM", 4, 3, 0.7, 512) > 0


def test_an_early_exit_from_a_moe_keeps_a_moe_block():
    assert cost.early_exit_shape(DEEPSEEK_V3, 4).dense_layers == 3
    with pytest.raises(BadArgument, match="layers"):
        cost.early_exit_shape(DEEPSEEK_V3, 3)  # three dense blocks and no MoE one: not a MoEShape
