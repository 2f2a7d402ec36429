"""The n-gram (prompt-lookup) drafter: lookups by hand, shorter drafts kept exactly (a chi-square check that
catches a wrong rule), greedy output == plain greedy, and the replay against a known output."""

import math

import pytest
import torch

from specnotes.sampling.exact import draw_uniforms, speculative_sample
from specnotes.tiny.drafters import NgramDrafter, copy_bits, edit_task, quote_task
from specnotes.tiny.generate import generate, keep_proposed, replay, speculative_generate
from specnotes.tiny.model import encode, load_target, load_text

pytestmark = pytest.mark.usefixtures("one_thread")


def ids(text):
    return encode(text).tolist()


@pytest.mark.parametrize(("history", "k", "max_ngram", "expected"), [
    ("abcdab", 3, 2, "cda"),  # "ab" first seen at 0: what followed it
    ("abcdab", 9, 2, "cdab"),  # the continuation runs up to the end of the text
    ("xbcyb", 3, 2, "cyb"),  # "yb" never seen before: fall back to "b", first at 1
    ("abcabd", 2, 3, ""),  # "abd", "bd" and "d" occur only at the end: nothing to propose
    ("aaaa", 2, 2, "aa"),  # overlapping matches count: "aa" at 0, followed by "aa"
    ("abc", 3, 2, ""),  # nothing repeats
])
def test_lookup_by_hand(history, k, max_ngram, expected):
    assert NgramDrafter(max_ngram=max_ngram).lookup(ids(history), k) == ids(expected)


def test_propose_pads_and_reports_what_it_proposed():
    drafter = NgramDrafter(max_ngram=2)
    drafter.start([encode("abcab"), encode("xyz")], 32)
    drafts, probs = drafter.propose(4, 0.0)
    assert drafter.proposed.tolist() == [3, 0]
    assert drafts[0, :3].tolist() == ids("cab") and probs.shape == (2, 4, 256)
    assert torch.equal(probs.argmax(-1), drafts) and torch.all(probs.sum(-1) == 1)
    drafter.commit(torch.tensor([[99, 98, -1, -1, -1], [7, -1, -1, -1, -1]]), torch.tensor([1, 0]),
                   torch.tensor([True, False]))
    assert drafter.history[0] == ids("abcab") + [99, 98] and drafter.history[1] == ids("xyz")
    with pytest.raises(ValueError):
        NgramDrafter(max_ngram=2, min_ngram=3)


# ------------------------------------------------------------------ shorter drafts keep the target's distribution


def markov_chains(V=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.softmax(0.7 * torch.randn(V, V, generator=g, dtype=torch.float64), -1) for _ in range(2)]


def emit_the_padding(drafts, tokens, num_accepted, proposed):
    """WRONG: a sequence that used up its real drafts emits the next (padding) draft, accepted or not."""
    tokens, kept = keep_proposed(tokens, num_accepted, proposed)
    rows = torch.arange(len(kept))
    short = proposed < drafts.shape[1]
    tokens[rows[short], kept[short]] = drafts[rows[short], kept[short]]
    return tokens, kept


def keep_right(drafts, tokens, num_accepted, proposed):
    return keep_proposed(tokens, num_accepted, proposed)


@pytest.mark.parametrize(("keep", "right"), [(keep_right, True), (emit_the_padding, False)])
def test_shorter_drafts_emit_the_targets_distribution(keep, right):
    """One-hot drafts of random length (0..k) and random tokens, as an n-gram drafter makes: the first
    emitted token must follow P[x0] and the second P[first]."""
    V, k, n = 5, 3, 200_000
    P, Q = markov_chains(V)
    g = torch.Generator().manual_seed(1)
    x0 = 0
    drafts = torch.multinomial(Q[x0], n * k, replacement=True, generator=g).reshape(n, k)
    proposed = torch.randint(0, k + 1, (n,), generator=g)
    q = torch.nn.functional.one_hot(drafts, V).double()
    p = torch.cat([P[x0].expand(n, 1, V), P[drafts]], 1)
    tokens, kept = keep(drafts, *speculative_sample(drafts, q, p, uniforms=draw_uniforms(n, k, g)), proposed)
    first = torch.bincount(tokens[:, 0], minlength=V).double()
    pairs = tokens[:, :2]
    two = pairs[:, 1] >= 0
    second = torch.bincount(pairs[two, 0] * V + pairs[two, 1], minlength=V * V).double()
    expected_second = (first_given := torch.bincount(pairs[two, 0], minlength=V).double())[:, None] * P
    assert first_given.sum() > 10_000

    def pvalue(counts, expected):
        stat = ((counts - expected) ** 2 / expected).sum()
        return float(torch.special.gammaincc(torch.tensor((counts.numel() - 1) / 2, dtype=torch.float64), stat / 2))

    p1 = pvalue(first, P[x0] * n)
    p2 = pvalue(second, expected_second.flatten())
    assert (min(p1, p2) > 1e-4) == right, (p1, p2)
    assert (kept <= proposed).all()


# ------------------------------------------------------------------ decoding


@pytest.fixture(scope="module")
def target():
    return load_target(dtype=torch.float64)


@pytest.mark.parametrize(("k", "max_ngram"), [(3, 2), (5, 4)])
def test_greedy_ngram_decoding_equals_plain(target, k, max_ngram):
    text = load_text("eval")
    prompts = [text[:120], text[3000:3100], text[7000:7003]]
    plain = generate(target, prompts, 50)
    spec = speculative_generate(target, NgramDrafter(max_ngram=max_ngram), prompts, 50, k=k)
    assert torch.equal(spec.tokens, plain.tokens)
    st = spec.stats
    assert st.draft_passes == 0 and st.proposed is not None
    assert (st.proposed[st.active] <= k).all() and (st.accepted[st.active] <= st.proposed[st.active]).all()
    assert 1 <= st.mean_tokens_per_iteration < k + 1 and 0 <= st.alpha <= 1


def test_replay_by_hand():
    # prompt "abcabc", output "abcX": the lookup of "bc" proposes "abc"; the output agrees on "abc"...
    stats = replay(NgramDrafter(max_ngram=2), encode("abcabc"), encode("abcX"), k=3)
    # iteration 1: drafts "abc" (after the first "bc"), all 3 match, then the target's own "X": 4 tokens at once
    assert stats.accepted.flatten().tolist() == [3] and stats.proposed.flatten().tolist() == [3]
    assert stats.mean_tokens_per_iteration == 4
    # nothing to copy: every iteration yields the target's one token
    stats = replay(NgramDrafter(max_ngram=2), encode("ab"), encode("xyz"), k=2)
    assert stats.accepted.flatten().tolist() == [0, 0, 0] and stats.alpha != stats.alpha  # no draft ever checked


def test_replay_agrees_with_real_decoding(target):
    prompt = load_text("eval")[200:300]
    plain = generate(target, [prompt], 60)
    real = speculative_generate(target, NgramDrafter(max_ngram=3), [prompt], 60, k=4).stats
    replayed = replay(NgramDrafter(max_ngram=3), encode(prompt), plain.tokens[0], k=4)
    assert torch.equal(real.accepted, replayed.accepted) and torch.equal(real.proposed, replayed.proposed)


def test_edit_task():
    passage = "It is a truth universally acknowledged, that a single man in possession of a good fortune"
    prompt, output = edit_task(passage, 0.0)
    assert output == passage and prompt.startswith(passage)
    _, edited = edit_task(passage, 0.5, torch.Generator().manual_seed(0))
    words, new = passage.split(" "), edited.split(" ")
    changed = sum(a != b for a, b in zip(words, new, strict=True))
    assert len(new) == len(words) and 0 < changed < len(words)
    assert set(new) <= set(words)  # replacements come from the passage itself
    # more edits, less to copy: the replayed n-gram drafter accepts fewer tokens per iteration
    copy = replay(NgramDrafter(max_ngram=3), encode(prompt), encode(output), k=8).mean_tokens_per_iteration
    less = replay(NgramDrafter(max_ngram=3), encode(prompt), encode(edited), k=8).mean_tokens_per_iteration
    assert copy > less > 1
    with pytest.raises(ValueError):
        edit_task(passage, 1.5)


def test_quote_task():
    passage = "It is a truth universally acknowledged, that a single man in possession of a good fortune"
    prompt = quote_task(passage, 12)
    assert prompt == passage + "\n\nIt is a trut"
    # a writer that quotes: every later byte is found in the prompt, so replayed lookups accept long runs
    quoted = replay(NgramDrafter(max_ngram=3), encode(prompt), encode(passage[12:]), k=8).mean_tokens_per_iteration
    assert quoted > 5
    for lead in (0, len(passage)):
        with pytest.raises(ValueError):
            quote_task(passage, lead)


def test_copy_bits_scores_each_copy_of_the_passage(target):
    passage = load_text("eval")[:80]
    first, second = copy_bits(target, passage)
    ids = encode(passage + "\n\n" + passage)[None]
    with torch.no_grad():
        nats = -torch.log_softmax(target(ids)[0, :-1], -1).gather(1, ids[0, 1:, None])[:, 0]
    assert first == pytest.approx(float(nats[:79].mean()) / math.log(2))
    assert second == pytest.approx(float(nats[82:].mean()) / math.log(2))  # the repeat's bytes after its first
    assert 0.5 < first < 8 and 0.5 < second < 8
