"""Speculative decoding end to end: greedy speculative == greedy plain (ragged batches), cache
rollback, statistics, temperature > 0, and at temperature 1 every emitted token (the bonus included)
distributed as the target's, a check that rejects each wrong sampler of ``chains.WRONG_SAMPLERS``."""

import pytest
import torch
from chains import SIGNIFICANCE, WRONG_SAMPLERS, position_pvalues
from conftest import noisy_pair

from specnotes.sampling.exact import speculative_sample, speculative_sample_loop
from specnotes.tiny.drafters import DraftModelDrafter, EarlyExitDrafter
from specnotes.tiny.generate import generate, speculative_generate
from specnotes.tiny.model import ModelConfig, Transformer, load_draft, load_target, load_text

pytestmark = pytest.mark.usefixtures("one_thread")


TINY = ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, exit_layer=1, max_seq_len=256)


@pytest.fixture(scope="module")
def tiny_pair():
    """A random target and a draft that is the target plus noise: they agree often, not always."""
    return noisy_pair(TINY, noise=0.01)


@pytest.fixture(scope="module")
def shipped_pair():
    # float64 so that verifying k+1 positions at once and decoding one at a time give the same argmax
    return load_target(dtype=torch.float64), load_draft(dtype=torch.float64)


def ragged_prompts(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=g) for n in (1, 5, 9, 3)]


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_speculative_equals_greedy_plain_tiny(tiny_pair, k):
    target, draft = tiny_pair
    prompts = ragged_prompts()
    plain = generate(target, prompts, 30)
    spec = speculative_generate(target, draft, prompts, 30, k=k)
    assert torch.equal(spec.tokens, plain.tokens)
    # the batch really was ragged: some sequences rejected early while others accepted everything
    assert spec.stats.histogram[0] > 0 and spec.stats.histogram[k] > 0
    assert ((spec.stats.accepted == 0).any(1) & (spec.stats.accepted == k).any(1)).any()


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_speculative_equals_greedy_plain_shipped(shipped_pair, k):
    target, draft = shipped_pair
    text = load_text("eval")
    prompts = [text[:40], text[1000:1003], text[5000:5100]]
    plain = generate(target, prompts, 40)
    spec = speculative_generate(target, draft, prompts, 40, k=k)
    assert torch.equal(spec.tokens, plain.tokens)
    assert 0.2 < spec.stats.alpha < 1.0
    assert len(spec.stats.accepted.unique()) > 2


@pytest.mark.parametrize("k", [2, 4])
def test_greedy_self_speculation_with_early_exit_equals_plain(shipped_pair, k):
    target, _ = shipped_pair
    prompts = [load_text("eval")[:50], load_text("eval")[200:210]]
    plain = generate(target, prompts, 30)
    spec = speculative_generate(target, EarlyExitDrafter(target), prompts, 30, k=k)
    assert torch.equal(spec.tokens, plain.tokens)
    assert 0.1 < spec.stats.alpha < 1.0


@torch.no_grad()
def test_logits_after_rollback_and_recompute_equal_a_fresh_forward(tiny_pair):
    target, _ = tiny_pair
    g = torch.Generator().manual_seed(5)
    a, b, c = (torch.randint(0, 256, (3, n), generator=g) for n in (6, 4, 3))
    cache = target.new_cache(3, 32)
    target(a, cache)
    target(b, cache)
    kept = torch.tensor([0, 2, 4])  # per sequence: how many of b's tokens survive
    cache.rollback(6 + kept)
    after = target(c, cache)
    for s in range(3):
        fresh = target(torch.cat([a[s], b[s, : kept[s]], c[s]])[None])[0, -3:]
        assert torch.allclose(after[s], fresh, atol=1e-10)


def test_statistics_are_consistent(tiny_pair):
    target, draft = tiny_pair
    k, n_new = 3, 25
    spec = speculative_generate(target, draft, ragged_prompts(1), n_new, k=k)
    st = spec.stats
    assert st.target_passes == st.iterations + 1  # prefill + one verify pass per iteration
    assert st.draft_passes == 1 + k * st.iterations
    assert (st.tokens_per_iteration.sum(0) >= n_new).all()
    assert (st.tokens_per_iteration.sum(0) < n_new + k + 1).all()
    assert int(st.histogram.sum()) == int(st.active.sum())
    assert 1 <= st.mean_tokens_per_iteration <= k + 1 and 0 <= st.alpha <= 1
    assert st.wall_time_s > 0 and st.summary()["histogram"] == st.histogram.tolist()
    plain = generate(target, ragged_prompts(1), n_new)
    assert plain.stats.target_passes == n_new + 1 and plain.stats.mean_tokens_per_iteration == 1


def test_temperature_sampling_is_reproducible_and_loop_sampler_agrees(tiny_pair):
    target, draft = tiny_pair
    prompts = ragged_prompts(2)

    def run(**kw):
        return speculative_generate(
            target, draft, prompts, 20, k=3, temperature=0.8, generator=torch.Generator().manual_seed(9), **kw
        )

    first, again, loop = run(), run(), run(sampler=speculative_sample_loop)
    assert first.tokens.shape == (4, 20) and ((first.tokens >= 0) & (first.tokens < 256)).all()
    assert torch.equal(first.tokens, again.tokens)
    assert torch.equal(first.tokens, loop.tokens)
    assert len(first.texts) == 4


def test_a_draft_identical_to_the_target_is_always_accepted(tiny_pair):
    target, _ = tiny_pair
    spec = speculative_generate(
        target,
        DraftModelDrafter(target),
        ragged_prompts(3),
        24,
        k=4,
        temperature=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    assert spec.stats.alpha > 0.97


# ------------------------------------------------------------------ the distribution, end to end
# A transformer whose blocks add nothing (their output projections are zero) predicts the next token
# from the last one only: it is a Markov chain, P[a] = softmax(model([a])), so the exact distribution
# of everything speculative_generate emits is known. The draft is the same chain with its LM head
# perturbed: it agrees often enough that all k drafts pass in a good share of iterations.

CHAIN = ModelConfig(n_layers=1, d_model=8, n_heads=1, d_ff=8, vocab_size=6, max_seq_len=64)
N_SEQUENCES = 20_000


def markov_transformer(seed, like=None, noise=0.0):
    torch.manual_seed(seed)
    model = Transformer(CHAIN).eval()
    if like is not None:
        model.load_state_dict(like.state_dict())
    else:
        model.tok_emb.weight.data.normal_(0, 1)
        model.lm_head.weight.data.normal_(0, 0.4)
    model.lm_head.weight.data.add_(noise * torch.randn_like(model.lm_head.weight))
    for block in model.blocks:
        block.wo.weight.data.zero_()
        block.w_down.weight.data.zero_()
    return model


@pytest.fixture(scope="module")
def chain_pair():
    target = markov_transformer(0)
    draft = markov_transformer(1, like=target, noise=0.3)
    with torch.no_grad():
        P = torch.softmax(target(torch.arange(CHAIN.vocab_size)[:, None])[:, 0].double(), -1)
    return target, draft, P


def generated_pvalues(chain_pair, sampler, k, x0=2):
    target, draft, P = chain_pair
    prompts = torch.full((N_SEQUENCES, 1), x0)
    out = speculative_generate(target, draft, prompts, k + 1, k=k, temperature=1.0,
                               generator=torch.Generator().manual_seed(k), sampler=sampler)
    return position_pvalues(out.tokens, out.stats.accepted[0], P, x0), out.stats


@pytest.mark.parametrize("k", [1, 3])
def test_every_generated_token_follows_the_target(chain_pair, k):
    pvalues, stats = generated_pvalues(chain_pair, speculative_sample, k)
    assert min(pvalues) > SIGNIFICANCE, pvalues
    assert stats.histogram[k] > 0.1 * N_SEQUENCES  # the bonus token is emitted often


@pytest.mark.parametrize("name", list(WRONG_SAMPLERS))
def test_the_generated_distribution_check_rejects_a_wrong_sampler(chain_pair, name):
    pvalues, _ = generated_pvalues(chain_pair, WRONG_SAMPLERS[name], 3)
    assert min(pvalues) < SIGNIFICANCE, pvalues


def test_alpha_by_position_by_hand():
    from specnotes.tiny.generate import GenerationStats

    # k = 2; per (iteration, sequence): accepted drafts, -1 = sequence already done
    accepted = torch.tensor([[0, 2], [1, 2], [2, -1], [0, -1]])
    st = GenerationStats(k=2, temperature=0.0, batch=2, accepted=accepted)
    # position 1: 6 checked, 4 accepted (1, 2, 2, 2); position 2: 4 checked, 3 accepted
    assert st.alpha_by_position == pytest.approx([4 / 6, 3 / 4])
    # the pooled alpha weighs positions by how often they were checked: (4 + 3) / (6 + 4)
    assert st.alpha == pytest.approx(7 / 10)
    assert st.drafts_checked == 10  # 6 at position 1 and 4 at position 2, as counted above
    never = GenerationStats(k=2, temperature=0.0, batch=1, accepted=torch.tensor([[0], [0]]))
    assert never.alpha_by_position[0] == 0.0 and never.alpha_by_position[1] != never.alpha_by_position[1]


def test_forward_timing_repeats_the_same_cached_pass(tiny_pair):
    from specnotes.tiny.generate import forward_timing

    target, _ = tiny_pair
    ids = torch.arange(20) % 50
    t = forward_timing(target, ids, context=10, new_tokens=3, warmup=1, repeats=4)
    assert len(t.samples) == 4 and t.median > 0
