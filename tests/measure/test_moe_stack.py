"""Chapter 10's measured workloads: the random-weight MoE stack (its grouped expert matmuls against a plain loop,
both paths, the distinct experts it counts, its pass record) and the byte-level MoE target (route recording,
exact speculative decoding with the shipped draft, the shipped weights and their card)."""

import pytest
import torch
import torch.nn.functional as F

from specnotes.analytic import cost, moe
from specnotes.measure import moe_stack
from specnotes.tiny import generate, model, moe_model
from specnotes.validate import BadArgument


def naive_experts(x, layer, m):
    """Each token through each of its experts, one at a time: what the grouped matmuls must equal."""
    chosen, weights = moe_stack.route(x, layer["router"], m)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(m):
            e = chosen[t, j]
            gate, up = (layer["w_gate_up"][e] @ x[t]).chunk(2)
            out[t] += weights[t, j] * (layer["w_down"][e] @ (F.silu(gate) * up))
    return out


@pytest.fixture
def small():
    shape = moe_stack.moe_stack_shape(2, 64, 4, 2, 8, 2, 32, name="small")
    return moe_stack.build_moe_stack(shape, "cpu", torch.float32, seed=1)


@pytest.mark.parametrize("tokens", [1, 5, 40])
def test_grouped_experts_equal_a_loop_over_tokens(small, tokens):
    x = torch.randn(tokens, 64, generator=torch.Generator().manual_seed(tokens))
    y, chosen = moe_stack.experts(x, small.layers[0], 2)
    assert torch.allclose(y, naive_experts(x, small.layers[0], 2), atol=1e-5)
    assert chosen.shape == (tokens, 2) and all(len(set(r)) == 2 for r in chosen.tolist())


def test_the_grouped_mm_path_agrees_where_it_runs(small, monkeypatch):
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no _grouped_mm")
    x = torch.randn(12, 64, generator=torch.Generator().manual_seed(0))
    layer = {k: v.float() for k, v in small.layers[0].items()}
    counts = torch.bincount(moe_stack.route(x, layer["router"], 2)[0].flatten(), minlength=8)
    offsets = counts.cumsum(0).to(torch.int32)
    rows = torch.randn(int(counts.sum()), 64)
    grouped = torch._grouped_mm(rows, layer["w_gate_up"].transpose(1, 2), offs=offsets)
    monkeypatch.setattr(moe_stack, "_grouped_mm_works", lambda device, dtype: False)
    assert torch.allclose(moe_stack._grouped(rows, layer["w_gate_up"], counts, offsets), grouped, atol=1e-5)


def test_a_pass_counts_its_distinct_experts(small):
    rec = moe_stack.moe_pass_time(small, 1, 1, 8, warmup=0, repeats=2)
    assert rec.extra["distinct_per_layer"] == [2, 2]  # one token: its m experts in each layer
    assert rec.extra["expected_experts"] == 2
    assert rec.extra["bytes_at_measured_distinct"] == pytest.approx(rec.extra["bytes"] if "bytes" in rec.extra
                                                                    else cost.forward_cost(small.shape, 1, 1, 8).bytes)
    wide = moe_stack.moe_pass_time(small, 16, 4, 8, warmup=0, repeats=2)
    assert all(d <= 8 for d in wide.extra["distinct_per_layer"]) and wide.extra["tokens"] == 64
    assert wide.extra["path"] in ("grouped_mm", "gather + bmm")


def test_random_weights_route_about_independently():
    shape = moe_stack.moe_stack_shape(1, 128, 4, 2, 32, 2, 16)
    st = moe_stack.build_moe_stack(shape, "cpu", torch.float32, seed=3)
    counts = []
    for seed in range(20):
        x = torch.randn(16, 128, generator=torch.Generator().manual_seed(seed))
        counts.append(len(torch.unique(moe_stack.experts(x, st.layers[0], 2)[1])))
    assert sum(counts) / len(counts) == pytest.approx(cost.expected_experts(32, 2, 16), rel=0.1)


def test_bad_stacks_are_refused():
    with pytest.raises(BadArgument, match="grouped-query"):
        moe_stack.build_moe_stack(cost.DEEPSEEK_V3, "cpu", torch.float32)


def test_the_stacks_model_charges_the_distinct_experts(small):
    sizes = moe_stack.moe_sizes("cpu")
    assert isinstance(sizes.target, cost.MoEShape) and sizes.limit >= 1
    m = sizes.target
    expert_share = m.moe_layers * m.n_experts * m.expert_params / m.params
    assert expert_share > 0.9  # the experts set the bytes of the CPU stack


# ---------------------------------------------------------------------------------------------- the MoE target


@pytest.fixture(scope="module")
def tiny_moe():
    torch.manual_seed(0)
    config = moe_model.MoEConfig(n_layers=2, d_model=64, n_heads=2, d_ff=64, n_experts=8, experts_per_token=2,
                                 expert_d_ff=32)
    return moe_model.MoETransformer(config).eval()


def test_routes_are_recorded_per_block_and_pass(tiny_moe):
    with tiny_moe.record_routes() as routes:
        tiny_moe(torch.randint(0, 256, (3, 5)))
    assert len(routes) == 2 and all(r.shape == (3, 5, 2) for r in routes)
    assert all(b.routes is None for b in tiny_moe.blocks)  # recording stops with the block
    tiny_moe(torch.randint(0, 256, (1, 4)))
    assert len(routes) == 2


def test_speculative_decoding_with_the_moe_target_is_exact(tiny_moe):
    draft = model.load_draft()
    prompts = ["It is a truth", "Mr. Darcy"]
    plain = generate.generate(tiny_moe, prompts, 24)
    spec = generate.speculative_generate(tiny_moe, draft, prompts, 24, k=3)
    assert torch.equal(plain.tokens, spec.tokens)  # greedy: identical output, whatever the draft proposes


def test_balance_loss_is_one_when_routing_is_uniform():
    logits = torch.zeros(8, 4)
    chosen = torch.tensor([[0], [1], [2], [3], [0], [1], [2], [3]])
    assert moe_model.balance_loss(logits, chosen).item() == pytest.approx(1.0)
    skewed = torch.zeros(8, 1, dtype=torch.long)
    assert moe_model.balance_loss(torch.tensor([[5.0, 0, 0, 0]] * 8), skewed).item() > 3


def test_bad_moe_configs_are_refused():
    with pytest.raises(BadArgument, match="experts_per_token"):
        moe_model.MoEConfig(n_experts=4, experts_per_token=5)
    with pytest.raises(BadArgument, match="MoEConfig"):
        moe_model.MoETransformer(model.ModelConfig())


def test_the_shipped_moe_target_loads_as_its_card_says():
    card = moe_model.moe_card()["moe_target"]
    target = moe_model.load_moe_target()
    assert target.num_params == card["params"]
    assert target.config == moe_model.MOE_TARGET_CONFIG
    assert card["eval_loss_nats_per_byte"] < model.model_card()["unigram_baseline"]["eval_loss_nats_per_byte"]
    text = model.load_text("eval")[:257]
    assert model.eval_loss(target, text, block=256) < 2.5  # it learned the text (unigram: 3.1 nats)
    shape = moe.shape_from_config({"num_hidden_layers": 4, "hidden_size": 192, "num_attention_heads": 4,
                                   "intermediate_size": 192, "vocab_size": 256, "num_experts": 16,
                                   "num_experts_per_tok": 2, "moe_intermediate_size": 96})
    assert shape.n_experts == target.config.n_experts
