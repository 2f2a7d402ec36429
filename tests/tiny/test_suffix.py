"""Chapter 11's suffix drafter: the tree's counts and Arctic's draft rule by hand, greedy decoding unchanged, the
sampling law by chi-square (rejecting each wrong drafter below), and its host time growing with the batch."""

import pytest
import torch
from chains import SIGNIFICANCE, position_pvalues
from test_generate import CHAIN, N_SEQUENCES, markov_transformer

from specnotes.tiny import suffix
from specnotes.tiny.drafters import NgramDrafter
from specnotes.tiny.generate import generate, replay, speculative_generate
from specnotes.tiny.model import encode, load_target, load_text

pytestmark = pytest.mark.usefixtures("one_thread")


def ids(text):
    return encode(text).tolist()


def test_the_tree_counts_every_substring_up_to_its_depth():
    tree = suffix.SuffixTree(max_depth=3)
    tree.add(ids("abab"))
    count = lambda s: tree.count[tree.find(ids(s))] if tree.find(ids(s)) is not None else 0
    assert [count(s) for s in ("a", "b", "ab", "ba", "aba", "bab", "abab")] == [2, 2, 2, 1, 1, 1, 0]
    active = tree.extend([], ids("ab"))  # a second sequence shares the counts
    assert count("ab") == 3 and len(active) == 2


def test_arctic_rule_by_hand():
    # "the cat sat. the cat ran. the cat" - after "the cat" the tree saw " sat" once and " ran" once
    tree = suffix.SuffixTree(max_depth=24)
    text = ids("the cat sat. the cat ran. the cat")
    tree.add(text)
    tokens, score, m = tree.speculate(text, k=8, factor=1.0, offset=0.0, min_prob=0.1)
    # the longest match, "the cat" (after ". "): 2 earlier occurrences and this one; both went on with " "
    assert m >= len(ids(" the cat")) and bytes(tokens[:1]) == b" "
    assert 0 < score
    # the length rule: at most int(m * factor + offset) tokens for a match of m
    short, _, m1 = tree.speculate(ids("t"), k=8, factor=1.0, offset=0.0, min_prob=0.0)
    assert m1 == 1 and len(short) <= 1
    # a high probability floor stops the walk where the tree's counts split
    cautious, _, _ = tree.speculate(text, k=8, factor=1.0, offset=0.0, min_prob=0.6)
    assert len(cautious) < len(tokens)


def test_the_drafter_proposes_variable_lengths_and_updates_its_tree():
    drafter = suffix.SuffixDrafter()
    drafter.start([encode("abcabcab"), encode("xyz")], 32)
    drafts, probs = drafter.propose(6, 0.0)
    assert drafter.proposed.tolist()[1] == 0 and drafter.proposed.tolist()[0] >= 1
    assert bytes(drafts[0, : int(drafter.proposed[0])].tolist()) == b"cabcab"[: int(drafter.proposed[0])]
    assert torch.equal(probs.argmax(-1), drafts) and torch.all(probs.sum(-1) == 1)
    drafter.commit(torch.tensor([[99, 98, -1, -1, -1, -1, -1], [7, -1, -1, -1, -1, -1, -1]]), torch.tensor([1, 0]),
                   torch.tensor([True, False]))
    assert drafter.history[0][-2:] == [99, 98] and drafter.history[1] == ids("xyz")
    assert drafter.trees[0].find([99, 98]) is not None and drafter.host_seconds > 0


def test_earlier_outputs_can_draft_what_the_prompt_cannot():
    earlier = suffix.SuffixTree()
    earlier.add(ids("Mr. Darcy bowed."))
    alone = replay(suffix.SuffixDrafter(), encode("Then Mr. Darcy"), encode(" bowed."), k=8)
    helped = replay(suffix.SuffixDrafter(earlier=earlier), encode("Then Mr. Darcy"), encode(" bowed."), k=8)
    assert helped.mean_tokens_per_iteration > alone.mean_tokens_per_iteration


@pytest.mark.parametrize("bad", [{"max_depth": 0}, {"min_token_prob": 1.5}, {"max_spec_factor": -1},
                                 {"earlier": "tree"}])
def test_bad_knobs_are_a_clear_value_error(bad):
    with pytest.raises(ValueError):
        suffix.SuffixDrafter(**bad)


# ---------------------------------------------------------------------------------------------- decoding


@pytest.fixture(scope="module")
def target():
    return load_target(dtype=torch.float64)


@pytest.mark.parametrize("k", [3, 8])
def test_greedy_suffix_decoding_equals_plain(target, k):
    text = load_text("eval")
    prompts = [text[:150], text[3000:3100], text[7000:7003]]
    plain = generate(target, prompts, 50)
    spec = speculative_generate(target, suffix.SuffixDrafter(), prompts, 50, k=k)
    assert torch.equal(spec.tokens, plain.tokens)
    st = spec.stats
    assert st.draft_passes == 0 and (st.proposed[st.active] <= k).all()
    assert (st.accepted[st.active] <= st.proposed[st.active]).all()


def test_replay_agrees_with_real_decoding(target):
    prompt = load_text("eval")[200:400]
    plain = generate(target, [prompt], 60)
    real = speculative_generate(target, suffix.SuffixDrafter(), [prompt], 60, k=8).stats
    replayed = replay(suffix.SuffixDrafter(), encode(prompt), plain.tokens[0], k=8)
    # the same proposals and acceptances at every iteration but the last, where the replay's output ends (its last
    # token is the target's own, never a draft's) and real decoding may accept past max_new_tokens
    assert real.iterations == replayed.iterations
    assert torch.equal(real.accepted[:-1], replayed.accepted[:-1]) and torch.equal(real.proposed, replayed.proposed)


def test_on_a_quote_it_drafts_long_and_beats_prompt_lookup_where_the_text_repeats():
    passage = load_text("eval")[:300]
    prompt, output = passage + "\n\n" + passage[:30], passage[30:]
    sx = replay(suffix.SuffixDrafter(), encode(prompt), encode(output), k=16)
    ng = replay(NgramDrafter(max_ngram=3), encode(prompt), encode(output), k=16)
    assert sx.mean_tokens_per_iteration > 8 and ng.mean_tokens_per_iteration > 8


def test_host_time_grows_with_the_batch():
    text = load_text("eval")
    histories = [ids(text[i * 300: i * 300 + 200]) for i in range(32)]
    small = suffix.host_time_per_step(histories[:2], 8, repeats=5)
    large = suffix.host_time_per_step(histories, 8, repeats=5)
    assert large > 4 * small  # 16 times the sequences: far more than 4 times the time, on any machine


# ---------------------------------------------------------------------------------------------- the law, and mutants
# The target is test_generate's Markov chain; every sequence starts from the same prompt, a stretch of the chain's
# most likely path and then its first four tokens again, so the tree drafts the path's next three tokens (a match of
# four allows four) and all three pass often enough to test the bonus token too. The chain's next token depends on
# the last token only, so the prompt's other tokens change nothing of the law.


def chain_and_prompt():
    target = markov_transformer(0)
    with torch.no_grad():
        P = torch.softmax(target(torch.arange(CHAIN.vocab_size)[:, None])[:, 0].double(), -1)
    path = [2]
    for _ in range(7):
        path.append(int(P[path[-1]].argmax()))
    return target, P, path + path[:4]


class FrequenciesAsQ(suffix.SuffixDrafter):
    """WRONG: reports the tree's child frequencies as q, though it drafts the most frequent child every time."""

    def propose(self, k, temperature, generator=None):
        drafts, probs = super().propose(k, temperature, generator)
        soft = torch.full_like(probs, 0.1)
        soft = soft.scatter(-1, drafts[..., None], 0.5)
        return drafts, soft / soft.sum(-1, keepdim=True)


class ProbsOneBehind(suffix.SuffixDrafter):
    """WRONG: q of position i is the one-hot of draft i − 1 (an off-by-one between the drafts and their q). The
    sampler's own input check refuses it (a draft with q = 0 was not drawn from q) before any count is taken."""

    def propose(self, k, temperature, generator=None):
        drafts, probs = super().propose(k, temperature, generator)
        return drafts, torch.cat([probs[:, :1], probs[:, :-1]], 1)


class SmoothedQ(suffix.SuffixDrafter):
    """WRONG: label-smoothed q (5% spread over the vocabulary), though the drafts are deterministic."""

    def propose(self, k, temperature, generator=None):
        drafts, probs = super().propose(k, temperature, generator)
        return drafts, 0.95 * probs + 0.05 / probs.shape[-1]


class AllSlotsProposed(suffix.SuffixDrafter):
    """WRONG: claims all k drafts are real, so keep_proposed keeps the padding tokens it accepted, and reports a
    q that is not one-hot at them (uniform on padding)."""

    def propose(self, k, temperature, generator=None):
        drafts, probs = super().propose(k, temperature, generator)
        pad = torch.arange(k) >= self.proposed[:, None]
        probs = torch.where(pad[..., None], torch.full_like(probs, 1 / probs.shape[-1]), probs)
        self.proposed = torch.full_like(self.proposed, k)
        return drafts, probs


MUTANTS = [FrequenciesAsQ, ProbsOneBehind, SmoothedQ, AllSlotsProposed]


def chain_pvalues(drafter_class, k=3):
    target, P, prompt = chain_and_prompt()
    prompts = torch.tensor(prompt).expand(N_SEQUENCES, -1)
    drafter = drafter_class(vocab_size=CHAIN.vocab_size)
    out = speculative_generate(target, drafter, prompts, k + 1, k=k, temperature=1.0,
                               generator=torch.Generator().manual_seed(k))
    return position_pvalues(out.tokens, out.stats.accepted[0], P, prompt[-1]), out.stats


def test_every_token_of_suffix_drafting_follows_the_target():
    pvalues, stats = chain_pvalues(suffix.SuffixDrafter)
    assert min(pvalues) > SIGNIFICANCE, pvalues
    assert stats.histogram[3] > 0.02 * N_SEQUENCES  # all three drafts pass often enough to test the bonus


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.__name__)
def test_the_check_rejects_a_wrong_suffix_drafter(mutant):
    try:
        pvalues, _ = chain_pvalues(mutant)
    except ValueError as refused:  # the sampler's input check caught it first
        assert mutant is ProbsOneBehind and "zero draft probability" in str(refused)
        return
    assert min(pvalues) < SIGNIFICANCE, (mutant.__doc__, pvalues)
