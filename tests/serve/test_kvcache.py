"""The paged prefix cache (Chapter 9): block pool, hashes, reference counts and eviction by hand; the
paged cache against the contiguous one; greedy outputs with caching identical to outputs without it
under the right policy, and caught (with the diverging position) under the wrong ones; the drafter's
state under the drop-last-block rule; sampling distributions by chi-square; the recompute counted."""

import pytest
import torch

from specnotes.serve import kvcache
from specnotes.serve.kvcache import (
    POLICIES,
    BlockPool,
    LookaheadDrafter,
    PagedKVCache,
    Policy,
    PrefixCache,
    block_hash,
    block_hashes,
    generate_cached,
    speculative_generate_cached,
)
from specnotes.tiny.drafters import DraftModelDrafter
from specnotes.tiny.generate import generate, speculative_generate
from specnotes.tiny.model import KVCache, ModelConfig, Transformer, encode, load_draft, load_target, load_text

pytestmark = pytest.mark.usefixtures("one_thread")

BS = 16
TINY = ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=256)


@pytest.fixture(scope="module")
def shipped64():
    # float64: a prefill of a whole prompt and the same keys computed over several verify passes agree to
    # ~1e-15, so greedy argmaxes agree unless the cache serves wrong keys
    return load_target(dtype=torch.float64), load_draft(dtype=torch.float64)


@pytest.fixture(scope="module")
def shipped32():
    return load_target(), load_draft()


def first_turn_prompts(n=6, length=40):
    text = load_text("eval")
    return [text[i * 3000: i * 3000 + length] for i in range(n)]


def second_turn(first_prompts, first_tokens):
    """Requests that share prefixes with the first turn: each conversation resumed just past several
    block boundaries of its answer, and branched right at a boundary (a different next byte)."""
    full = [encode(p).tolist() + o.tolist() for p, o in zip(first_prompts, first_tokens, strict=True)]
    resume = [f[: m * BS + 2] for f in full for m in (3, 4, 5, 6)]
    branch = [f[: m * BS] + [(f[m * BS] + 1) % 256] + f[m * BS + 1: m * BS + 8] for f in full for m in (3, 5)]
    return resume + branch


# equal block contents after different prefixes: what an unchained hash confuses
REPEATED = ("-" * BS) * 3 + "Chapter the first"


# ---------------------------------------------------------------- hashes, pool, paged cache


def test_block_hashes_are_chained_over_the_prefix():
    a = [1, 2, 3, 4, 5, 6, 7, 8]
    b = [9, 2, 3, 4, 5, 6, 7, 8]  # differs only in the first block
    ha, hb = block_hashes(a, 4, 2), block_hashes(b, 4, 2)
    assert ha[0] != hb[0] and ha[1] != hb[1]  # the second block's keys depend on the first block too
    assert ha[1] == block_hash(block_hash(kvcache.ROOT, a[:4]), a[4:])
    ua, ub = block_hashes(a, 4, 2, chain=False), block_hashes(b, 4, 2, chain=False)
    assert ua[1] == ub[1]  # unchained: equal tokens, equal key, whatever came before
    assert block_hashes(a, 4, 1) == ha[:1] and len(block_hashes(a, 4, 0)) == 0


def test_pool_reference_counts_and_lru_eviction():
    pool = BlockPool(TINY, num_blocks=3, block_size=4)
    a, b, c = pool.allocate(), pool.allocate(), pool.allocate()
    assert (a, b, c) == (0, 1, 2) and pool.refs == [1, 1, 1]
    with pytest.raises(RuntimeError, match="out of KV blocks"):
        pool.allocate()
    for blk, h in ((a, b"A"), (b, b"B")):
        pool.publish(blk, h)
    pool.release(a)  # published, unreferenced: cached and evictable
    pool.release(b)
    pool.release(c)  # never published: free again
    assert pool.cached_blocks == 2 and list(pool.evictable) == [a, b]
    assert pool.lookup(b"A") == a and pool.refs[a] == 1 and list(pool.evictable) == [b]  # a hit holds it
    pool.release(a)  # a is now the most recently used
    assert pool.allocate() == c  # a free block before any eviction
    assert pool.allocate() == b and pool.evictions == 1  # then the least recently used cached block
    assert pool.lookup(b"B") is None and pool.lookup(b"A") == a
    pool.publish(c, b"A")  # a second block with an existing hash is not registered
    assert pool.by_hash[b"A"] == a and pool.hash_of[c] is None


def test_copy_on_write_gives_the_writer_a_private_copy():
    pool = BlockPool(TINY, num_blocks=4, block_size=4)
    b = pool.allocate()
    pool.k[:, b] = 7.0
    pool.publish(b, b"X")
    cache = PagedKVCache(pool, [[b]], [2])  # a sequence that would write slot 2 of a published block
    cache.reserve(torch.tensor([[2]]))
    (new,) = cache.tables[0]
    assert new != b and pool.copies == 1 and pool.refs[b] == 0 and pool.refs[new] == 1
    assert torch.equal(pool.k[:, new], pool.k[:, b]) and pool.by_hash[b"X"] == b


@torch.no_grad()
def test_paged_cache_gives_the_logits_of_a_contiguous_cache():
    torch.manual_seed(0)
    model = Transformer(TINY).double().eval()
    g = torch.Generator().manual_seed(1)
    a, b, c = (torch.randint(0, 256, (3, n), generator=g) for n in (7, 5, 3))
    pool = BlockPool(TINY, num_blocks=32, block_size=4, dtype=torch.float64)
    paged, flat = PagedKVCache(pool, [[], [], []], [0, 0, 0]), KVCache(TINY, 3, 32, torch.float64)
    n_valid = torch.tensor([7, 4, 6])  # ragged: padding rows write nowhere in the paged cache
    for cache in (paged, flat):
        model(a, cache, n_valid=n_valid)
        model(b, cache)
        cache.rollback(cache.lengths - torch.tensor([0, 2, 4]))  # a verify pass's rejected tail
    assert torch.allclose(model(c, paged), model(c, flat), atol=1e-12)
    # lengths 7+5-0, 4+5-2, 6+5-4, then 3 more each; sequence 2 once wrote slot 10 and rolled it back
    assert paged.lengths.tolist() == [15, 10, 10] and paged.written == [15, 10, 11]
    assert [len(t) for t in paged.tables] == [4, 3, 3]


# ---------------------------------------------------------------- greedy outputs: caching on == off


def test_plain_decoding_with_prefix_caching_equals_decoding_without(shipped64):
    target, _ = shipped64
    prompts = first_turn_prompts(4)
    first = generate(target, prompts, 48)
    cache = PrefixCache(target, block_size=BS, policy=Policy(publish="written"))  # without speculation, fine
    assert torch.equal(generate_cached(target, prompts, 48, cache).tokens, first.tokens)
    second = second_turn(prompts, first.tokens)
    assert torch.equal(generate_cached(target, second, 24, cache).tokens, generate(target, second, 24).tokens)
    assert cache.stats.hits == len(second) and cache.target.copies == 0


WRONG_FOR_OUTPUTS = {"written (eager publication)", "unchained hashes"}
# an aligned drafter (lag 0) ignores the hit rule: only the publication and hashing policies differ for it
CASES = [(DraftModelDrafter, name) for name in ("verified + drop", "written (eager publication)", "unchained hashes")]
CASES += [(LookaheadDrafter, name) for name in POLICIES]


@pytest.fixture(scope="module")
def two_turns(shipped64):
    """Both turns' prompts and their outputs from plain decoding without any cache."""
    target, _ = shipped64
    prompts = first_turn_prompts() + [REPEATED]
    first = generate(target, prompts, 64).tokens
    second = second_turn(prompts, first) + [encode(REPEATED).tolist()]
    return prompts, first, second, generate(target, second, 24).tokens


@pytest.mark.parametrize("drafter_cls,name", CASES)
def test_greedy_outputs_with_caching_equal_outputs_without(shipped64, two_turns, drafter_cls, name):
    """The check every KV-reuse feature needs; the wrong policies must fail it."""
    target, draft = shipped64
    prompts, first, second, reference = two_turns
    cache = PrefixCache(target, draft, block_size=BS, policy=POLICIES[name])
    drafter = drafter_cls(draft)

    def check():
        kvcache.assert_same_tokens(first, speculative_generate_cached(target, drafter, prompts, 64, cache).tokens)
        kvcache.assert_same_tokens(reference, speculative_generate_cached(target, drafter, second, 24, cache).tokens)

    if name in WRONG_FOR_OUTPUTS:
        with pytest.raises(AssertionError, match=r"request \d+ diverges at new token \d+"):
            check()
    else:
        check()
        assert cache.stats.hits > 0 and cache.target.copies == 0  # a right policy never writes a published block


def test_the_eager_policy_publishes_rejected_drafts(shipped64):
    target, draft = shipped64
    cache = PrefixCache(target, draft, block_size=BS, policy=Policy(publish="written"))
    speculative_generate_cached(target, DraftModelDrafter(draft), first_turn_prompts(), 64, cache)
    # its owner later wrote the pending slot of a block the policy had published: copy-on-write kept the stale one
    assert cache.target.copies > 0


def test_speculative_decoding_on_the_paged_cache_without_caching(shipped64):
    target, draft = shipped64
    prompts = first_turn_prompts(4)
    off = PrefixCache(target, draft, block_size=BS, enabled=False)
    for drafter in (DraftModelDrafter(draft), LookaheadDrafter(draft)):
        got = speculative_generate_cached(target, drafter, prompts, 40, off, k=3)
        ref = speculative_generate(target, drafter, prompts, 40, k=3)
        assert torch.equal(got.tokens, ref.tokens) and torch.equal(got.stats.accepted, ref.stats.accepted)
    assert off.stats.hit_tokens == 0 and off.target.cached_blocks == 0 and off.target.refs == [0] * 1024


def test_eviction_under_memory_pressure_keeps_outputs_exact(shipped64):
    target, draft = shipped64
    prompts = first_turn_prompts(4)
    first = generate(target, prompts, 48)
    cache = PrefixCache(target, draft, block_size=BS, num_blocks=48)
    drafter = LookaheadDrafter(draft)
    speculative_generate_cached(target, drafter, prompts, 48, cache)
    second = second_turn(prompts, first.tokens)[:12]
    got = speculative_generate_cached(target, drafter, second, 16, cache)
    assert torch.equal(got.tokens, generate(target, second, 16).tokens)
    assert cache.target.evictions > 0 and cache.stats.hits > 0


# ---------------------------------------------------------------- the lagging drafter and the drop rule


def reference_first_draft(draft, prompts, temperature=1.0):
    drafter = LookaheadDrafter(draft)
    drafter.start([torch.as_tensor(p) for p in prompts], 256)
    return drafter.propose(1, temperature)[1][:, 0]


@pytest.mark.parametrize("on_hit", ["drop", "lookahead", "keep"])
def test_a_lagging_drafter_sees_valid_state_only_under_the_rule(shipped64, on_hit):
    target, draft = shipped64
    prompts = first_turn_prompts()
    first = generate(target, prompts, 64)
    cache = PrefixCache(target, draft, block_size=BS, policy=Policy(on_hit=on_hit))
    speculative_generate_cached(target, LookaheadDrafter(draft), prompts, 64, cache)
    branch = second_turn(prompts, first.tokens)[24:36]  # each shares a prefix that ends at a block boundary
    q = kvcache.first_draft_probs(target, LookaheadDrafter(draft), branch, cache)
    error = (q - reference_first_draft(draft, branch)).abs().amax(-1)
    if on_hit == "keep":  # the last hit block holds state computed from the publisher's next token
        assert (error > 1e-3).any(), error
    else:
        assert (error < 1e-9).all(), error
    assert all(h > 0 for h in cache.stats.last_hits)


def test_the_drop_rule_recomputes_one_block_per_hit(shipped64):
    target, draft = shipped64
    prompts = first_turn_prompts(4)
    first = generate(target, prompts, 64)
    resend = [encode(p).tolist() + o.tolist() for p, o in zip(prompts, first.tokens, strict=True)]
    counted = {}
    for on_hit in ("drop", "lookahead", "keep"):
        cache = PrefixCache(target, draft, block_size=BS, policy=Policy(on_hit=on_hit))
        speculative_generate_cached(target, LookaheadDrafter(draft), prompts, 64, cache)
        before = cache.stats.hit_tokens
        speculative_generate_cached(target, LookaheadDrafter(draft), resend, 8, cache)
        counted[on_hit] = (cache.stats.hit_tokens - before, cache.stats.recomputed_tokens)
    hits_keep = counted["keep"][0]
    # every resent request hits, and the drop costs exactly one block each; lookahead keys cost nothing here
    assert counted["drop"] == (hits_keep - BS * len(resend), BS * len(resend))
    assert counted["lookahead"] == (hits_keep, 0) and counted["keep"] == (hits_keep, 0)
    # a plain (aligned) drafter does not lag: no drop
    cache = PrefixCache(target, draft, block_size=BS)
    speculative_generate_cached(target, DraftModelDrafter(draft), prompts, 64, cache)
    before = cache.stats.hit_tokens
    speculative_generate_cached(target, DraftModelDrafter(draft), resend, 8, cache)
    assert cache.stats.recomputed_tokens == 0 and cache.stats.hit_tokens - before == hits_keep


def test_prefix_hit_by_hand():
    # 1,000 tokens, blocks of 16, a drafter one behind: 998 servable, 62 blocks, the drop gives one back
    assert vars(kvcache.prefix_hit(1000, 16)) == {"servable": 998, "blocks": 62, "reused": 976, "recomputed": 16}
    assert vars(kvcache.prefix_hit(1000, 16, drop=False)) == {"servable": 998, "blocks": 62, "reused": 992,
                                                               "recomputed": 0}
    assert kvcache.prefix_hit(1000, 16, lag=0).reused == 62 * 16  # an aligned drafter: nothing to drop
    assert vars(kvcache.prefix_hit(1000, 1648)) == {"servable": 998, "blocks": 0, "reused": 0, "recomputed": 0}
    assert kvcache.prefix_hit(2, 16).servable == 0
    with pytest.raises(ValueError, match="block_size"):
        kvcache.prefix_hit(100, 0)


def test_prefix_hit_counts_what_the_cache_serves(shipped64):
    target, draft = shipped64
    prompts = first_turn_prompts(3, length=57)
    cache = PrefixCache(target, draft, block_size=BS)  # the rule: publish verified, drop on a hit
    first = speculative_generate_cached(target, LookaheadDrafter(draft), prompts, 40, cache)
    resend = [encode(p).tolist() + o.tolist() for p, o in zip(prompts, first.tokens, strict=True)]
    # 97 tokens: 95 servable, 5 whole blocks, where 96 (forgetting the drafter's lag) would make 6
    assert {len(r) for r in resend} == {97}
    before = cache.stats.recomputed_tokens
    kv, draft_kv = cache.admit(resend, lag=1)
    kv.release()
    draft_kv.release()
    expected = [kvcache.prefix_hit(len(r), BS) for r in resend]
    assert cache.stats.last_hits == [e.reused for e in expected] and expected[0].reused > 0
    assert cache.stats.recomputed_tokens - before == sum(e.recomputed for e in expected)


def test_admission_timing_runs_and_leaves_the_cache_as_it_was(shipped32):
    target, draft = shipped32
    prompts = first_turn_prompts(2)
    cache = PrefixCache(target, draft, block_size=BS)
    speculative_generate_cached(target, LookaheadDrafter(draft), prompts, 40, cache)
    cached, refs = cache.target.cached_blocks, list(cache.target.refs)
    t = kvcache.time_admission(target, LookaheadDrafter(draft), [p + "x" for p in prompts], cache, warmup=1,
                               repeats=3)
    assert len(t.samples) == 3 and t.median > 0
    assert cache.target.cached_blocks == cached and cache.target.refs == refs


def test_verify_trace_by_hand():
    # prompt of 10 tokens (9 with keys, 1 pending), k = 3, blocks of 4: accept 1, then 3, then 0, then done
    rows = kvcache.verify_trace(10, [1, 3, 0, -1], k=3, block_size=4)
    assert [r["verified after"] for r in rows] == [11, 15, 16]  # 9 + 1 + 1, + 1 + 3, + 1 + 0
    assert [r["written"] for r in rows] == [13, 15, 19]  # verified before + k + 1
    assert [r["tokens known"] for r in rows] == [12, 16, 17]
    assert [r["stale"] for r in rows] == [True, False, True]  # all three accepted: the bonus has no slot yet
    # slot 11 ends block [8, 12): 12 token ids known and all 12 slots written, one holding a rejected draft
    assert [r["stale at a block end"] for r in rows] == [True, False, False]


# ---------------------------------------------------------------- sampling: distributions by chi-square

# A chi-square goodness-of-fit test at significance 1e-4 per prompt (Bonferroni over the prompts): a
# right policy fails it by chance with probability < 1e-4, and the eager policy must fail it.
ALPHA = 1e-4
DRAWS = 150


def chi_square_pvalue(counts: torch.Tensor, expected_probs: torch.Tensor) -> float:
    """Cells with fewer than 5 expected draws are pooled into one cell."""
    expected = expected_probs.double() * counts.sum()
    small = expected < 5
    counts = torch.cat([counts[~small].double(), counts[small].sum().double()[None]])
    expected = torch.cat([expected[~small], expected[small].sum()[None]])
    if expected[-1] == 0:
        counts, expected = counts[:-1], expected[:-1]
    stat = float(((counts - expected) ** 2 / expected).sum())
    return float(torch.special.gammaincc(torch.tensor((len(counts) - 1) / 2), torch.tensor(stat / 2)))


@torch.no_grad()
def exact_first_two(target, prompt: list[int]) -> torch.Tensor:
    """P(x1, x2) of the first two sampled tokens [V, V]: one causal pass over the prompt into a contiguous
    cache, copied once per possible x1, then one pass over every x1. No prefix cache involved."""
    V = target.config.vocab_size
    cache = target.new_cache(1, len(prompt) + 1)
    p1 = torch.softmax(target(torch.tensor([prompt]), cache)[0, -1].double(), -1)
    every = KVCache(target.config, V, len(prompt) + 1, cache.k.dtype)
    every.k, every.v = cache.k.repeat(1, V, 1, 1, 1), cache.v.repeat(1, V, 1, 1, 1)
    every.lengths = cache.lengths.repeat(V)
    p2 = torch.softmax(target(torch.arange(V)[:, None], every)[:, 0].double(), -1)
    return p1[:, None] * p2


def resumed_after_rejections(prompts, first):
    """Requests resuming a conversation two tokens past such a position (the workload under which an
    eager policy serves a rejected draft's keys right before the next token)."""
    full = [encode(p).tolist() + o.tolist() for p, o in zip(prompts, first.tokens, strict=True)]
    traces = [kvcache.verify_trace(len(encode(p)), first.stats.accepted[:, b], first.stats.k, BS)
              for b, p in enumerate(prompts)]
    stale = [[r["verified after"] for r in trace if r["stale at a block end"]] for trace in traces]
    return [f[: p + 2] for f, ps in zip(full, stale, strict=True) for p in ps if p + 2 <= len(f)]


def branched_at_block_ends(prompts, first):
    full = [encode(p).tolist() + o.tolist() for p, o in zip(prompts, first.tokens, strict=True)]
    return [f[: 4 * BS] + [(f[4 * BS] + 1) % 256] + f[4 * BS + 1: 4 * BS + 4] for f in full]


@pytest.mark.parametrize("name,drafter_cls,workload,caught", [
    ("verified + drop", DraftModelDrafter, resumed_after_rejections, False),
    ("written (eager publication)", DraftModelDrafter, resumed_after_rejections, True),
    ("verified + drop", LookaheadDrafter, branched_at_block_ends, False),
    ("keep the lagging last block", LookaheadDrafter, branched_at_block_ends, False),  # drafts wrong, output exact
])
def test_sampled_outputs_follow_the_target_with_caching(shipped32, name, drafter_cls, workload, caught):
    target, draft = shipped32
    prompts = first_turn_prompts(8)
    cache = PrefixCache(target, draft, block_size=BS, num_blocks=2048, policy=POLICIES[name])
    drafter = drafter_cls(draft)
    first = speculative_generate_cached(target, drafter, prompts, 80, cache)  # greedy: publishes blocks
    later = workload(prompts, first)[:6]
    assert len(later) == 6
    g = torch.Generator().manual_seed(0)
    pvalues = []
    for i in range(0, len(later), 3):
        batch = [p for p in later[i: i + 3] for _ in range(DRAWS)]
        out = speculative_generate_cached(target, drafter, batch, 2, cache, k=1, temperature=1.0, generator=g).tokens
        for j, prompt in enumerate(later[i: i + 3]):
            pairs = out[j * DRAWS:(j + 1) * DRAWS]
            counts = torch.bincount(pairs[:, 0] * 256 + pairs[:, 1], minlength=256 * 256)
            pvalues.append(chi_square_pvalue(counts, exact_first_two(target, prompt).flatten()))
    assert cache.stats.hits == len(later) * DRAWS
    if caught:
        assert min(pvalues) < ALPHA / len(later), pvalues
    else:
        assert min(pvalues) > ALPHA / len(later), pvalues


# ---------------------------------------------------------------- arguments


def test_bad_arguments(shipped32):
    target, draft = shipped32
    with pytest.raises(ValueError, match="publish must be one of"):
        Policy(publish="eagerly")
    with pytest.raises(ValueError, match="on_hit must be one of"):
        Policy(on_hit="skip")
    with pytest.raises(ValueError, match="block_size must be an integer >= 1"):
        PrefixCache(target, block_size=0)
    with pytest.raises(TypeError, match="policy must be"):
        PrefixCache(target, policy="right")
    cache = PrefixCache(target, block_size=BS)
    with pytest.raises(ValueError, match="no draft pool"):
        speculative_generate_cached(target, DraftModelDrafter(draft), ["hello"], 4, cache)
    with pytest.raises(TypeError, match="cache must be"):
        generate_cached(target, ["hello"], 4, cache=None)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate_cached(target, ["hello"], -1, cache)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        speculative_generate_cached(target, LookaheadDrafter(draft), ["h"], 4, PrefixCache(target, draft))
    with pytest.raises(ValueError, match="diverges|shapes differ"):
        kvcache.first_divergence(torch.zeros(2, 3), torch.zeros(3, 2))
    assert kvcache.first_divergence(torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([[1, 2, 0], [4, 0, 6]])) \
        == (1, 1)


# ---------------------------------------------------------------- the drop rule when publishers branch


@pytest.mark.parametrize("on_hit", ["drop", "lookahead", "drop-last"])
def test_the_drop_rule_is_exact_when_publishers_branch(shipped64, on_hit):
    target, draft = shipped64
    cache = PrefixCache(target, draft, block_size=BS, policy=Policy(on_hit=on_hit))
    # A publishes blocks 0..4 and goes on; B shares A's first 4 blocks, branches at the first token of block 4 and
    # publishes block 4; R resumes B past block 4: it hits blocks A wrote, then a block B wrote
    r = kvcache.branching_requests(target, LookaheadDrafter(draft), load_text("eval")[:40], cache, block=4)
    q = kvcache.first_draft_probs(target, LookaheadDrafter(draft), [r], cache)
    with torch.no_grad():
        error = float((q - reference_first_draft(draft, [r])).abs().max())
    reused = cache.stats.last_hits[0] // BS
    if on_hit == "drop-last":  # the old rule serves block 3 (A's) before block 4 (B's): A's next token in its last slot
        assert reused == 4 and error > 1e-3, (reused, error)
    else:
        assert error < 1e-9, error
        assert reused == (3 if on_hit == "drop" else 5), reused  # drop gives back A's block 3 and B's block 4


def test_a_failed_call_gives_back_every_block_it_held(shipped64):
    """Fill the pool until a call runs out of blocks; then a call that fits an empty pool must succeed."""
    target, draft = shipped64
    prompts = first_turn_prompts(4)
    cache = PrefixCache(target, draft, block_size=BS, num_blocks=12)  # 192 slots: one or two requests, not four
    with pytest.raises(RuntimeError, match="out of KV blocks"):
        speculative_generate_cached(target, LookaheadDrafter(draft), prompts, 40, cache)
    assert cache.target.refs == [0] * 12 and cache.draft.refs == [0] * 12
    with pytest.raises(RuntimeError, match="out of KV blocks"):
        generate_cached(target, prompts, 40, cache)
    assert cache.target.refs == [0] * 12
    got = speculative_generate_cached(target, LookaheadDrafter(draft), prompts[:1], 40, cache)
    assert torch.equal(got.tokens, generate(target, prompts[:1], 40).tokens)
    with pytest.raises(ValueError, match="rollback can only shorten"):  # any exception, not only the pool's
        speculative_generate_cached(target, LookaheadDrafter(draft), prompts[:2], 8, cache, sampler=grow_rollback)
    assert cache.target.refs == [0] * 12 and cache.draft.refs == [0] * 12


def grow_rollback(draft_tokens, draft_probs, target_probs, generator=None):
    """A sampler that claims more accepted drafts than were drafted: the rollback raises."""
    tokens = torch.zeros(draft_tokens.shape[0], draft_tokens.shape[1] + 1, dtype=torch.int64)
    return tokens, torch.full((draft_tokens.shape[0],), draft_tokens.shape[1] + 5, dtype=torch.int64)


def test_a_cache_serves_only_the_models_it_was_built_for(shipped64, shipped32):
    target, draft = shipped64
    cache = PrefixCache(target, draft, block_size=BS)
    with pytest.raises(ValueError, match="built for another target model"):
        generate_cached(shipped32[0], ["hello there"], 2, cache)
    with pytest.raises(ValueError, match="built for another draft model"):
        speculative_generate_cached(target, LookaheadDrafter(shipped32[1]), ["hello there"], 2, cache)
    twin = load_target(dtype=torch.float64)  # the same shape and weights, another object: not the cache's
    with pytest.raises(ValueError, match="built for another target model"):
        generate_cached(twin, ["hello there"], 2, cache)


# ---------------------------------------------------------------- what the figures read: views of the real cache


def test_slot_states_by_hand():
    # 10 verified, the pending token at slot 10, written up to 13; before and after the verdict
    after = [kvcache.slot_state(i, 10, 11, 13, judged=True) for i in range(8, 15)]
    assert after == ["verified", "verified", "pending over a rejected draft", "rejected", "rejected", "free", "free"]
    during = [kvcache.slot_state(i, 11, 11, 15, judged=False) for i in range(9, 16)]
    assert during == ["verified", "verified", "draft", "draft", "draft", "draft", "free"]
    assert kvcache.slot_state(10, 10, 11, 10, judged=True) == "pending"  # no rejected draft under it


def test_cache_view_reads_tables_hashes_and_hits():
    pool = BlockPool(TINY, num_blocks=4, block_size=4)
    a, b = pool.allocate(), pool.allocate()
    pool.publish(a, bytes.fromhex("ab" * 16))
    cache = PagedKVCache(pool, [[a, b]], [6])
    cache.written = [8]
    view = kvcache.cache_view(cache, 0, "committed", 3, verified=6, known=7, hit=4)
    assert [blk.block for blk in view.blocks] == [a, b] and view.blocks[0].published == "abababab"
    assert view.blocks[0].hit and not view.blocks[1].hit
    assert view.blocks[1].states == ("verified", "verified", "pending over a rejected draft", "rejected")
    assert not view.blocks[0].stale and not view.blocks[1].stale
    pool.publish(b, bytes.fromhex("cd" * 16))  # a block published with unverified slots: stale
    assert kvcache.cache_view(cache, 0, "committed", 3, 6, 7).blocks[1].stale


@pytest.fixture(scope="module")
def recorded(shipped64):
    """The failure of Chapter 9 recorded: a first turn and resumed second turns under the eager policy and the
    rule, with a Recorder watching every call."""
    target, draft = shipped64
    prompts = first_turn_prompts(3)
    full = [encode(p).tolist() + o.tolist() for p, o in zip(prompts, generate(target, prompts, 64).tokens, strict=True)]
    second = [f[: m * BS + 2] for f in full for m in (3, 4, 5)]
    runs = {}
    for name in ("written (eager publication)", "verified + drop"):
        cache = PrefixCache(target, draft, block_size=BS, policy=POLICIES[name])
        first, later = kvcache.Recorder(), kvcache.Recorder()
        speculative_generate_cached(target, DraftModelDrafter(draft), prompts, 64, cache, observe=first)
        out = speculative_generate_cached(target, DraftModelDrafter(draft), second, 24, cache, observe=later).tokens
        runs[name] = first, later, out
    return runs, generate(target, second, 24).tokens


def test_the_recorder_sees_stale_blocks_published_only_under_the_eager_policy(recorded):
    runs, reference = recorded
    eager_first, eager_second, eager_out = runs["written (eager publication)"]
    rule_first, rule_second, rule_out = runs["verified + drop"]
    assert any(b.stale for v in eager_first.views for b in v.blocks)
    assert not any(b.stale for v in rule_first.views + rule_second.views for b in v.blocks)
    row, pos = kvcache.first_divergence(reference, eager_out)
    story = kvcache.stale_hit(eager_first, eager_second, row)
    assert story is not None and story.a_published.stage == "committed" and story.a_verify.stage == "verify"
    stale = next(b for b in story.a_published.blocks if b.published == story.hash)
    assert stale.stale and stale.states[-1] == "pending over a rejected draft"  # the rejected draft in the last slot
    assert any(b.hit and b.published == story.hash for b in story.b_admitted.blocks)
    assert torch.equal(rule_out, reference)
    assert kvcache.stale_hit(rule_first, rule_second, row) is None


def test_a_publishing_iteration_shows_the_verify_pass_and_the_verdict(recorded):
    rule_first = recorded[0]["verified + drop"][0]
    i = rule_first.publishing_iteration(0, 0)
    before, verify, after = rule_first.iteration(0, 0, i)
    assert before.stage == "committed" and verify.stage == "verify" and after.stage == "committed"
    assert verify.verified == before.verified + 1 and verify.written == before.verified + 5  # k = 4 drafts written
    assert after.written > after.verified  # a draft was rejected
    assert sum(b.published is not None for b in after.blocks) > sum(b.published is not None for b in before.blocks)
    states = {s for b in verify.blocks for s in b.states}
    assert {"verified", "draft"} <= states
