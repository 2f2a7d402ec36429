"""Chapter 11's parallel drafter and the packed pass it and the budget verify with: the packed pass equals the
rectangular one, the training batch's mask layout by hand, greedy decoding unchanged, and at temperature 1 every
emitted token distributed as the target's, by the chi-square harness, which rejects each wrong drafter below."""

import pytest
import torch
from chains import SIGNIFICANCE, pair_pvalue, position_pvalues
from test_generate import CHAIN, N_SEQUENCES, markov_transformer

from specnotes.sampling.exact import logits_to_probs, sample_weights
from specnotes.tiny import parallel_drafter as pdm
from specnotes.tiny.generate import generate, speculative_generate
from specnotes.tiny.model import ModelConfig, Transformer, load_draft, load_target, load_text
from specnotes.tiny.ragged import packed_forward

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------------------------------------- the packed pass


def random_model(vocab=40, seed=0):
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=48, vocab_size=vocab, max_seq_len=64))
    return model.double().eval()


@torch.no_grad()
def test_the_packed_pass_gives_the_rectangles_logits_at_every_real_position():
    model = random_model()
    g = torch.Generator().manual_seed(1)
    prefix, tokens = torch.randint(0, 40, (3, 5), generator=g), torch.randint(0, 40, (3, 6), generator=g)
    lengths, keep = torch.tensor([6, 2, 4]), torch.tensor([3, 2, 1])
    caches = []
    for _ in range(2):
        cache = model.new_cache(3, 32)
        model(prefix, cache, n_valid=torch.tensor([5, 3, 4]))
        caches.append(cache)
    packed = packed_forward(model, tokens, caches[0], lengths, keep)
    rect = model(tokens, caches[1], n_valid=keep)
    real = torch.arange(6) < lengths[:, None]
    assert torch.allclose(packed[real], rect[real], atol=1e-12)
    assert (packed[~real] == 0).all()
    assert torch.equal(caches[0].lengths, caches[1].lengths)  # both kept ``keep`` tokens
    # and the next pass sees the same cache through either
    nxt = torch.randint(0, 40, (3, 1), generator=g)
    assert torch.allclose(model(nxt, caches[0]), model(nxt, caches[1]), atol=1e-12)


def test_the_packed_pass_refuses_lengths_it_cannot_run():
    model = random_model()
    cache = model.new_cache(2, 16)
    for lengths, keep in (([3, 9], None), ([3, 1], [3, 2]), ([-1, 1], None)):
        with pytest.raises(ValueError, match="lengths"):
            packed_forward(model, torch.zeros(2, 4, dtype=torch.int64), cache, torch.tensor(lengths),
                           None if keep is None else torch.tensor(keep))


# ---------------------------------------------------------------------------------------------- training layout


def test_the_training_batch_by_hand():
    ids = torch.arange(100)  # token i is i: every target can be read off
    g = torch.Generator().manual_seed(0)
    tokens, positions, visible, targets = pdm.training_batch(ids, batch=2, block=8, k=3, anchors=2, generator=g)
    assert tokens.shape == (2, 8 + 2 * 2) and visible.shape == (2, 12, 12)
    for b in range(2):
        start = int(tokens[b, 0])
        assert tokens[b, :8].tolist() == list(range(start, start + 8)) and (tokens[b, 8:] == pdm.MASK).all()
        assert targets[b, :8].tolist() == list(range(start + 1, start + 9))  # next token
        for m in range(4):  # mask m: depth j = m % 2 + 1 after anchor a, at position a + j, predicting a + 1 + j
            a, j = int(positions[b, 8 + m]) - (m % 2 + 1), m % 2 + 1
            assert int(targets[b, 8 + m]) == start + a + 1 + j
            sees = visible[b, 8 + m].nonzero().flatten().tolist()
            group = 8 + (m // 2) * 2
            assert sees == list(range(a + 1)) + list(range(group, group + j))  # its prefix, its group's masks 1..j
    assert visible[:, :8, :8].equal(torch.ones(8, 8, dtype=torch.bool).tril().expand(2, 8, 8))


def test_from_draft_keeps_the_drafts_next_token_predictions():
    draft = load_draft(torch.float64)
    par = pdm.from_draft(draft).double().eval()
    x = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(par(x)[..., :256], draft(x), atol=1e-9)
    assert par.config.vocab_size == 257


# ---------------------------------------------------------------------------------------------- decoding


@pytest.fixture(scope="module")
def shipped():
    return load_target(torch.float64), pdm.load_parallel(torch.float64)


@pytest.mark.parametrize("k", [1, 4, 8])
def test_greedy_parallel_drafting_equals_plain(shipped, k):
    target, par = shipped
    text = load_text("eval")
    prompts = [text[:40], text[1000:1003], text[5000:5100]]
    plain = generate(target, prompts, 40)
    drafter = pdm.ParallelDrafter(par)
    spec = speculative_generate(target, drafter, prompts, 40, k=k)
    assert torch.equal(spec.tokens, plain.tokens)
    assert spec.stats.draft_passes == spec.stats.iterations + 1  # one pass an iteration, and the prefill
    assert 0.1 < spec.stats.alpha < 1.0


def test_the_shipped_drafter_is_small_and_its_card_says_what_it_is():
    from specnotes.tiny.model import data_file, model_card

    card = model_card()["parallel"]
    assert card["config"]["vocab_size"] == 257 and card["mask_token"] == pdm.MASK
    assert len(card["eval_greedy_accuracy_by_depth"]) == pdm.BLOCK
    assert data_file("parallel_draft.pt").stat().st_size < 3e6
    shipped_bytes = sum(data_file(f).stat().st_size for f in ("target.pt", "draft.pt", "moe_target.pt",
                                                              "parallel_draft.pt"))
    assert shipped_bytes < 16e6


# ---------------------------------------------------------------------------------------------- the law, and mutants
# The target is test_generate's Markov chain (6 tokens). The parallel drafter is the same chain with its LM head
# perturbed and a mask token (id 6): at the last real position its q is the chain's next-token row plus noise; at a
# mask, whatever the context, uniform over the 6 tokens (the mask's embedding lies in the null space of their LM-head
# rows), with 15% of the softmax on the mask itself. So q differs from the target's at every depth, the mask logit
# matters, every token is drafted often at depths 2 and 3, and all three drafts pass often enough to test the bonus.


def parallel_chain_model(seed=3):
    target = markov_transformer(0)
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(n_layers=1, d_model=8, n_heads=1, d_ff=8, vocab_size=CHAIN.vocab_size + 1,
                                    max_seq_len=64)).eval()
    state = target.state_dict()
    head = state["lm_head.weight"] + 0.3 * torch.randn(6, 8)
    mask = torch.linalg.svd(head).Vh[-1]  # head @ mask = 0
    mask = mask / mask.pow(2).mean().sqrt()  # as RMSNorm leaves it
    mask_row = torch.log(torch.tensor(0.15 * 6 / 0.85)) * mask / mask.pow(2).sum()
    state["tok_emb.weight"] = torch.cat([state["tok_emb.weight"], mask[None]])
    state["lm_head.weight"] = torch.cat([head, mask_row[None]])
    model.load_state_dict(state)
    return model


class QOfTheNextPosition(pdm.ParallelDrafter):
    """WRONG: reports each draft's q from the position after it (an off-by-one in the gather)."""

    def propose(self, k, temperature, generator=None, ks=None):
        drafts, probs = super().propose(k, temperature, generator, ks)
        return drafts, torch.cat([probs[:, 1:], probs[:, -1:]], 1)


class GreedyDrafts(pdm.ParallelDrafter):
    """WRONG: drafts the argmax of each position but reports the softmax it did not sample from."""

    def propose(self, k, temperature, generator=None, ks=None):
        _, probs = super().propose(k, temperature, generator, ks)
        return probs.argmax(-1), probs


class MaskLeftInTheSoftmax(pdm.ParallelDrafter):
    """WRONG: softmax over every logit, the mask's included, then the mask column dropped: q no longer sums to 1,
    and the drafts (drawn by inverse CDF, which renormalizes) do not come from it. The sampler's input check
    refuses it (its rows sum to 0.85)."""

    def draft_probs(self, logits, temperature):
        return torch.softmax(logits.float() / temperature, -1)[..., : self.mask]


class OneUniformPerRow(pdm.ParallelDrafter):
    """WRONG: draws every position's draft with the same uniform (one random number a row): each draft has the
    right marginal q, but the drafts are no longer drawn independently of the earlier ones' acceptance."""

    def propose(self, k, temperature, generator=None, ks=None):
        _, probs = super().propose(k, temperature, generator, ks)
        v = torch.rand(len(probs), 1, generator=generator).expand(-1, k)
        return sample_weights(probs, v.contiguous()), probs


MUTANTS = [QOfTheNextPosition, GreedyDrafts, MaskLeftInTheSoftmax, OneUniformPerRow]


def emitted_pvalues(tokens, P, x0):
    """position_pvalues without its bonus check: one p-value per emitted position, (t_{j-1}, t_j) against the chain.
    A wrong drafter can leave too few sequences with every draft accepted for the bonus check to run at all."""
    prev, reach, out = torch.full((len(tokens),), x0), torch.nn.functional.one_hot(torch.tensor(x0), 6).double(), []
    for j in range(tokens.shape[1]):
        out.append(pair_pvalue(prev, tokens[:, j], len(tokens) * reach[:, None] * P))
        prev, reach = tokens[:, j], reach @ P
    return out


def chain_pvalues(drafter_class, k=3, x0=2, bonus=True):
    target = markov_transformer(0)
    with torch.no_grad():
        P = torch.softmax(target(torch.arange(CHAIN.vocab_size)[:, None])[:, 0].double(), -1)
    drafter = drafter_class(parallel_chain_model(), mask=CHAIN.vocab_size)
    prompts = torch.full((N_SEQUENCES, 1), x0)
    out = speculative_generate(target, drafter, prompts, k + 1, k=k, temperature=1.0,
                               generator=torch.Generator().manual_seed(k))
    if not bonus:
        return emitted_pvalues(out.tokens, P, x0), out.stats
    return position_pvalues(out.tokens, out.stats.accepted[0], P, x0), out.stats


def test_every_token_of_parallel_drafting_follows_the_target():
    pvalues, stats = chain_pvalues(pdm.ParallelDrafter)
    assert min(pvalues) > SIGNIFICANCE, pvalues
    assert stats.histogram[3] > 0.05 * N_SEQUENCES  # all three drafts pass often enough to test the bonus


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.__name__)
def test_the_check_rejects_a_wrong_parallel_drafter(mutant):
    try:
        pvalues, _ = chain_pvalues(mutant, bonus=False)
    except ValueError as refused:  # the sampler's input check caught it before any count was taken
        assert mutant is MaskLeftInTheSoftmax and "probability distributions" in str(refused)
        return
    assert min(pvalues) < SIGNIFICANCE, (mutant.__doc__, pvalues)


def test_logits_to_probs_is_what_the_drafter_samples_from():
    """The drafter's q at temperature 0 is one-hot at the argmax (greedy drafting), at T > 0 a softmax."""
    model = parallel_chain_model()
    d = pdm.ParallelDrafter(model, mask=CHAIN.vocab_size)
    d.start([torch.tensor([1, 2, 3])], 16)
    drafts, probs = d.propose(3, 0.0)
    assert torch.equal(probs.argmax(-1), drafts) and torch.all(probs.sum(-1) == 1)
    assert logits_to_probs(torch.zeros(3), 1.0).sum() == pytest.approx(1.0)
