"""Token trees: the shape, the tree mask, the KV compaction, multi-step speculative sampling (every emitted
position follows the target; wrong schemes are caught), greedy tree decoding == greedy plain decoding, and
the expected-length formula."""

import pytest
import torch
from conftest import noisy_pair

from specnotes.sampling.exact import draw_uniforms, inverse_cdf, logits_to_probs, sample_from, speculative_sample
from specnotes.tiny.drafters import EarlyExitDrafter
from specnotes.tiny.generate import generate, speculative_generate
from specnotes.tiny.model import ModelConfig, Transformer, load_draft, load_target, load_text
from specnotes.tiny.trees import (
    Tree,
    TreeDrafter,
    best_tree,
    expected_tokens,
    greedy_tree_accept,
    keep_path,
    rank_acceptance,
    tree_attention,
    tree_crossover,
    tree_generate,
    tree_sample,
    tree_speedup,
)

pytestmark = pytest.mark.usefixtures("one_thread")

V = 4
SIGNIFICANCE = 1e-4  # chi-square false-alarm rate per check (the seeds are fixed: the suite is deterministic)


# ---------------------------------------------------------------------------------------------- the shape


def test_tree_shape_by_hand():
    tree = Tree.from_branching((2, 3))
    assert tree.size == 2 + 6 and tree.depth == 2
    assert tree.parents == (0, 0, 1, 1, 1, 2, 2, 2)
    assert tree.ranks == (0, 0, 1, 0, 1, 2, 0, 1, 2)
    assert tree.levels == ((0,), (1, 2), (3, 4, 5, 6, 7, 8))
    assert tree.children[0].tolist() == [1, 2, -1] and tree.children[2].tolist() == [6, 7, 8]
    assert tree.children[5].tolist() == [-1, -1, -1]
    # node 7's path: root, 2, 7
    assert tree.ancestors[7].nonzero().flatten().tolist() == [0, 2, 7]
    assert Tree.chain(3).parents == (0, 1, 2) and Tree.chain(3).depth == 3


@pytest.mark.parametrize("parents", [(1,), (0, 2), (0, 1, 0), (), (0, -1)])
def test_bad_trees_raise(parents):
    with pytest.raises(ValueError):
        Tree(parents)


def test_tree_attention_by_hand():
    tree = Tree((0, 0, 1))  # root -> 1, 2; 1 -> 3
    base = torch.tensor([2, 0])  # sequence 0 has two cached tokens before the root, sequence 1 none
    positions, visible = tree_attention(tree, base, range(4), context=6)
    assert positions.tolist() == [[2, 3, 3, 4], [0, 1, 1, 2]]
    # sequence 0: slots 0, 1 prefix; 2 root; 3, 4, 5 nodes 1, 2, 3
    assert visible[0].int().tolist() == [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 1, 0], [1, 1, 1, 1, 0, 1]]
    assert visible[1].int().tolist() == [[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0], [1, 1, 0, 1, 0, 0]]


# ---------------------------------------------------------------------------------------------- one tree pass


TINY = ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, exit_layer=1, max_seq_len=256)


@pytest.fixture(scope="module")
def tiny_pair():
    return noisy_pair(TINY, noise=0.02)


@torch.no_grad()
def test_a_tree_pass_scores_every_node_as_its_own_sequence_would(tiny_pair):
    target, _ = tiny_pair
    tree = Tree.from_branching((2, 2))
    g = torch.Generator().manual_seed(1)
    prefix = [torch.randint(0, 256, (n,), generator=g) for n in (5, 2)]
    nodes = torch.randint(0, 256, (2, tree.size + 1), generator=g)  # column 0: the root
    cache = target.new_cache(2, 32)
    target(torch.stack([torch.cat([prefix[0], torch.zeros(0, dtype=torch.int64)]), torch.cat([prefix[1],
           torch.zeros(3, dtype=torch.int64)])]), cache, n_valid=torch.tensor([5, 2]))
    base = cache.lengths.clone()
    positions, visible = tree_attention(tree, base, range(tree.size + 1), int(base.max()) + tree.size + 1)
    logits = target(nodes, cache, positions=positions, visible=visible)
    for b in range(2):
        for j in range(tree.size + 1):
            path = tree.ancestors[j].nonzero().flatten()
            alone = target(torch.cat([prefix[b], nodes[b, path]])[None])[0, -1]
            assert torch.allclose(logits[b, j], alone, atol=1e-10)
    # keep the path root -> 2 -> 5 in sequence 0 and root -> 1 in sequence 1, then decode one more token
    keep_path(cache, base, torch.tensor([[2, 5], [1, -1]]), torch.tensor([2, 1]))
    assert cache.lengths.tolist() == [5 + 3, 2 + 2]
    nxt = torch.tensor([[7], [9]])
    after = target(nxt, cache)
    kept = [nodes[0, [0, 2, 5]], nodes[1, [0, 1]]]
    for b in range(2):
        fresh = target(torch.cat([prefix[b], kept[b], nxt[b]])[None])[0, -1]
        assert torch.allclose(after[b, 0], fresh, atol=1e-10)


def test_tree_inputs_are_checked(tiny_pair):
    target, _ = tiny_pair
    cache = target.new_cache(1, 16)
    tokens = torch.zeros(1, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match="together"):
        target(tokens, cache, positions=torch.zeros(1, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="visible"):
        target(tokens, cache, positions=torch.zeros(1, 3, dtype=torch.int64), visible=torch.ones(1, 3, 2))


# ---------------------------------------------------------------------------------------------- sampling exactness
# Target and draft are first-order Markov chains over V tokens (P[a], Q[a]: next-token distribution after a).
# Speculative decoding from x0 must emit t1 ~ P[x0], t2 ~ P[t1], t3 ~ P[t2]: with a tree of depth 2 the third
# token of the first iteration is the bonus, so the joint of (t1, t2, t3) checks every position one
# iteration can emit, the bonus included.


def markov_chains(seed=0):
    g = torch.Generator().manual_seed(seed)
    dists = lambda: torch.softmax(0.7 * torch.randn(V, V, generator=g, dtype=torch.float64), -1)
    return dists(), dists()


def draft_tree(tree, scheme, roots, Q, g):
    """Node tokens [N, T], proposals [N, T, V] for trees hanging below ``roots``; children per ``scheme``."""
    N = len(roots)
    tokens = torch.zeros(N, tree.size + 1, dtype=torch.int64)
    tokens[:, 0] = roots
    proposals, drawn = [], {}
    for j, parent in enumerate(tree.parents, start=1):
        q = Q[tokens[:, parent]]
        if scheme == "top":  # the draft's rank-r token, a fixed choice: one-hot proposal
            x = q.argsort(-1, descending=True)[:, tree.ranks[j]]
            proposal = torch.nn.functional.one_hot(x, V).double()
        elif scheme == "sample":  # i.i.d. from q (SpecInfer)
            x, proposal = torch.multinomial(q, 1, generator=g).squeeze(1), q
        else:  # WRONG: siblings drawn without replacement, still verified against q
            left = q.clone()
            for sibling in drawn.get(parent, []):
                left[torch.arange(N), sibling] = 0
            x, proposal = torch.multinomial(left, 1, generator=g).squeeze(1), q
        drawn.setdefault(parent, []).append(x)
        tokens[:, j] = x
        proposals.append(proposal)
    return tokens[:, 1:], torch.stack(proposals, 1), tokens


def emit(sampler, tree, scheme, n, seed, length=3, x0=0):
    """The first ``length`` tokens emitted by tree speculative decoding from x0, n independent runs."""
    P, Q = markov_chains()
    g = torch.Generator().manual_seed(seed)
    out = torch.full((n, length), -1, dtype=torch.int64)
    have = torch.zeros(n, dtype=torch.int64)
    last = torch.full((n,), x0, dtype=torch.int64)
    rows = torch.arange(n)
    while (have < length).any():
        nodes, proposals, all_tokens = draft_tree(tree, scheme, last, Q, g)
        tokens, accepted, _ = sampler(tree, nodes, proposals, P[all_tokens], generator=g)
        for i in range(tree.depth + 1):
            put = (i <= accepted) & (have < length)
            out[rows[put], have[put]] = tokens[put, i]
            have += put.long()
        last = tokens[rows, accepted]
    return out, P


def joint_pvalue(sampler, tree, scheme, n=200_000, seed=1):
    out, P = emit(sampler, tree, scheme, n, seed)
    counts = torch.bincount(out[:, 0] * V * V + out[:, 1] * V + out[:, 2], minlength=V**3).double()
    expected = (P[0][:, None, None] * P[:, :, None] * P[None]).flatten() * n
    assert expected.min() >= 5, "too few expected counts for the chi-square approximation"
    stat = ((counts - expected) ** 2 / expected).sum()
    dof = torch.tensor(V**3 - 1.0, dtype=torch.float64)
    return float(torch.special.gammaincc(dof / 2, stat / 2))


def mss(tree, node_tokens, proposals, target_probs, generator=None, *, siblings_see_residual=True,
        fallback="residual", bonus_from_root=False, accept_with_p_only=False):
    """An independent, deliberately simple vectorized re-implementation of multi-step speculative sampling,
    with switches that break it in the ways a tree sampler can go wrong."""
    B, T = node_tokens.shape
    u, v = draw_uniforms(B, T, generator)
    rows = torch.arange(B)
    node = torch.zeros(B, dtype=torch.int64)
    p = target_probs[:, 0].clone()
    original = p.clone()
    alive = torch.ones(B, dtype=torch.bool)
    path = torch.full((B, tree.depth), -1, dtype=torch.int64)
    for d in range(tree.depth):
        moved = torch.zeros(B, dtype=torch.bool)
        for s in range(tree.children.shape[1]):
            child = tree.children[node, s]
            trying = alive & ~moved & (child >= 0)
            j = child.clamp(min=1)
            x, q = node_tokens[rows, j - 1], proposals[rows, j - 1]
            ratio = p[rows, x] if accept_with_p_only else p[rows, x] / q[rows, x]
            accept = trying & (u[rows, j - 1] < ratio)
            reject = trying & ~accept
            residual = (p - q).clamp(min=0)
            residual = residual / residual.sum(1, keepdim=True).clamp(min=1e-300)
            if siblings_see_residual:
                p = torch.where(reject[:, None], residual, p)
            else:  # WRONG: every sibling faces the original p; the fallback uses the last sibling's residual
                p = torch.where(reject[:, None], original, p)
                last_residual = torch.where(reject[:, None], residual, p)
            path[:, d] = torch.where(accept, child, path[:, d])
            node = torch.where(accept, child, node)
            p = torch.where(accept[:, None], target_probs[rows, j], p)
            original = torch.where(accept[:, None], target_probs[rows, j], original)
            moved |= accept
        stopped = alive & ~moved
        if not siblings_see_residual:
            p = torch.where(stopped[:, None] & (tree.children[node, 0] >= 0)[:, None], last_residual, p)
        if fallback == "target":  # WRONG: after every child is rejected, sample from the original p
            p = torch.where(stopped[:, None], original, p)
        alive &= moved
    at_bottom = (path >= 0).sum(1) == tree.depth
    if bonus_from_root:  # WRONG: the bonus comes from the root's distribution
        p = torch.where(at_bottom[:, None], target_probs[:, 0], p)
    last = inverse_cdf(p, v)
    n = (path >= 0).sum(1)
    tokens = torch.full((B, tree.depth + 1), -1, dtype=torch.int64)
    for i in range(tree.depth):
        tokens[:, i] = torch.where(i < n, node_tokens[rows, path[:, i].clamp(min=1) - 1], -1)
    tokens[rows, n] = last
    return tokens, n, path


TREE = Tree.from_branching((2, 2))


@pytest.mark.parametrize(("tree", "scheme"), [(TREE, "sample"), (TREE, "top"), (Tree((0, 0, 0, 1, 2)), "sample"),
                                              (Tree.from_branching((3, 1)), "top")])
def test_every_emitted_position_follows_the_target(tree, scheme):
    assert joint_pvalue(tree_sample, tree, scheme) > SIGNIFICANCE


def test_the_independent_reimplementation_is_right_too():
    assert joint_pvalue(mss, TREE, "sample") > SIGNIFICANCE


WRONG = {
    "siblings all face the original p": (lambda *a, **k: mss(*a, **k, siblings_see_residual=False), "sample"),
    "after every child is rejected, sample p": (lambda *a, **k: mss(*a, **k, fallback="target"), "sample"),
    "the bonus comes from the root": (lambda *a, **k: mss(*a, **k, bonus_from_root=True), "sample"),
    "accept with p(x), ignoring q": (lambda *a, **k: mss(*a, **k, accept_with_p_only=True), "sample"),
    "siblings drawn without replacement": (tree_sample, "without replacement"),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_the_distribution_check_catches_a_wrong_tree_scheme(name):
    sampler, scheme = WRONG[name]
    assert joint_pvalue(sampler, TREE, scheme) < SIGNIFICANCE


@pytest.mark.parametrize(("B", "k", "vocab"), [(300, 1, 6), (300, 4, 6), (100, 5, 50)])
def test_a_chain_tree_is_the_chain_sampler_sample_for_sample(B, k, vocab):
    g = torch.Generator().manual_seed(k + vocab)
    q = torch.softmax(1.5 * torch.randn(B, k, vocab, generator=g, dtype=torch.float64), -1)
    p = torch.softmax(1.5 * torch.randn(B, k + 1, vocab, generator=g, dtype=torch.float64), -1)
    drafts = torch.multinomial(q.reshape(-1, vocab), 1, generator=g).reshape(B, k)
    uniforms = draw_uniforms(B, k, g)
    chain = speculative_sample(drafts, q, p, uniforms=uniforms)
    tree = tree_sample(Tree.chain(k), drafts, q, p, uniforms=uniforms)
    assert torch.equal(chain[0], tree[0]) and torch.equal(chain[1], tree[1])
    assert len(chain[1].unique()) > 1


def test_at_temperature_zero_sampling_is_greedy_acceptance_of_the_longest_matching_path():
    g = torch.Generator().manual_seed(4)
    tree, B = Tree.from_branching((3, 2, 1)), 500
    target_logits = torch.randn(B, tree.size + 1, 3, generator=g)  # 3 tokens: candidates often match
    nodes = torch.randint(0, 3, (B, tree.size), generator=g)
    onehot = torch.nn.functional.one_hot(nodes, 3).double()
    greedy = greedy_tree_accept(tree, nodes, target_logits)
    sampled = tree_sample(tree, nodes, onehot, torch.nn.functional.one_hot(target_logits.argmax(-1), 3).double(),
                          generator=g)
    for a, b in zip(greedy, sampled, strict=True):
        assert torch.equal(a, b)
    # by hand for sequence 0: walk the tree
    best = target_logits[0].argmax(-1)
    node, n = 0, 0
    while True:
        kids = [j for j in range(1, tree.size + 1) if tree.parents[j - 1] == node and nodes[0, j - 1] == best[node]]
        if not kids:
            break
        node, n = kids[0], n + 1
    assert int(greedy[1][0]) == n and int(greedy[0][0, n]) == int(best[node])
    assert set(greedy[1].tolist()) == {0, 1, 2, 3}


def test_tree_sample_checks_shapes():
    tree = Tree.from_branching((2,))
    with pytest.raises(ValueError, match="tree of 2 nodes"):
        tree_sample(tree, torch.zeros(1, 3, dtype=torch.int64), torch.ones(1, 3, 4) / 4, torch.ones(1, 4, 4) / 4)


# ---------------------------------------------------------------------------------------------- decoding


@pytest.fixture(scope="module")
def shipped_pair():
    return load_target(dtype=torch.float64), load_draft(dtype=torch.float64)


def ragged_prompts(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=g) for n in (1, 5, 9, 3)]


@pytest.mark.parametrize(("branching", "candidates"), [((1, 1, 1), "top"), ((3, 2, 1), "top"), ((2, 2, 2, 2), "top"),
                                                       ((3, 1), "sample")])
def test_greedy_tree_decoding_equals_greedy_plain_decoding_tiny(tiny_pair, branching, candidates):
    target, draft = tiny_pair
    prompts = ragged_prompts()
    plain = generate(target, prompts, 30)
    tree = tree_generate(target, TreeDrafter(draft, Tree.from_branching(branching), candidates), prompts, 30)
    assert torch.equal(tree.tokens, plain.tokens)
    assert tree.stats.histogram[0] > 0 and tree.stats.histogram[-1] > 0  # ragged: some rejected, some all accepted


@pytest.mark.parametrize("branching", [(3, 2, 1), (2, 2, 2, 2)])
def test_greedy_tree_decoding_equals_greedy_plain_decoding_shipped(shipped_pair, branching):
    target, draft = shipped_pair
    text = load_text("eval")
    prompts = [text[:40], text[1000:1003], text[5000:5100]]
    plain = generate(target, prompts, 40)
    tree = tree_generate(target, TreeDrafter(draft, Tree.from_branching(branching)), prompts, 40)
    assert torch.equal(tree.tokens, plain.tokens)
    chain = speculative_generate(target, draft, prompts, 40, k=len(branching))
    # a wider tree accepts at least as much as the chain of the same depth (top-1 path = the chain)
    assert tree.stats.mean_tokens_per_iteration > chain.stats.mean_tokens_per_iteration
    assert tree.stats.draft_passes == 1 + len(branching) * tree.stats.iterations


def test_a_chain_tree_decodes_like_the_chain(shipped_pair):
    target, draft = shipped_pair
    prompts = [load_text("eval")[:60], load_text("eval")[700:720]]
    chain = speculative_generate(target, draft, prompts, 40, k=4)
    tree = tree_generate(target, TreeDrafter(draft, Tree.chain(4)), prompts, 40)
    assert torch.equal(tree.tokens, chain.tokens)
    assert torch.equal(tree.stats.accepted, chain.stats.accepted)


def test_early_exit_trees_and_temperature(shipped_pair):
    target, _ = shipped_pair
    prompts = [load_text("eval")[:50], load_text("eval")[300:310]]
    tree = Tree.from_branching((2, 1, 1))
    plain = generate(target, prompts, 30)
    ee = tree_generate(target, TreeDrafter(target, tree, exit_layer=2), prompts, 30)
    assert torch.equal(ee.tokens, plain.tokens)
    assert ee.stats.mean_tokens_per_iteration > speculative_generate(
        target, EarlyExitDrafter(target), prompts, 30, k=3).stats.mean_tokens_per_iteration - 1e-9

    def run():
        return tree_generate(target, TreeDrafter(target, tree, "sample", exit_layer=2), prompts, 30, temperature=0.8,
                             generator=torch.Generator().manual_seed(3))

    a, b = run(), run()
    assert torch.equal(a.tokens, b.tokens) and ((a.tokens >= 0) & (a.tokens < 256)).all()
    with pytest.raises(ValueError, match="candidates"):
        TreeDrafter(target, tree, "best")
    with pytest.raises(ValueError, match="temperature"):
        tree_generate(target, TreeDrafter(target, tree, exit_layer=2), prompts, 5, temperature=-1)


# ---------------------------------------------------------------------------------------------- expected length


def test_expected_tokens_by_hand():
    # a chain reduces to Leviathan's E[N] = 1 + a + a^2 + a^3
    assert expected_tokens(Tree.chain(3), [0.6]) == pytest.approx(1 + 0.6 + 0.36 + 0.216)
    # (2, 1) with a = (0.5, 0.3): depth 1 reached with 0.5 and 0.3, depth 2 with 0.5·0.5 and 0.3·0.5
    assert expected_tokens(Tree.from_branching((2, 1)), [0.5, 0.3]) == pytest.approx(1 + 0.5 + 0.3 + 0.25 + 0.15)
    with pytest.raises(ValueError, match="at most 1"):
        expected_tokens(Tree.chain(2), [0.7, 0.5])
    with pytest.raises(ValueError, match="rank acceptances"):
        expected_tokens(Tree.from_branching((3,)), [0.5, 0.2])


def test_expected_tokens_matches_a_simulation_of_positional_acceptance():
    tree, a = Tree.from_branching((3, 2, 1)), [0.55, 0.2, 0.1]
    g = torch.Generator().manual_seed(0)
    n, total = 100_000, 0
    node = torch.zeros(n, dtype=torch.int64)
    alive = torch.ones(n, dtype=torch.bool)
    total = torch.ones(n)
    for _ in range(tree.depth):  # at each accepted node, child r is the accepted one with probability a_r
        r = torch.multinomial(torch.tensor(a + [1 - sum(a)]), n, replacement=True, generator=g)
        kids = tree.children[node]
        child = torch.where(r < kids.shape[1], kids.gather(1, r.clamp(max=kids.shape[1] - 1)[:, None])[:, 0], -1)
        alive &= child >= 0
        total += alive.float()
        node = torch.where(alive, child, node)
    assert float(total.mean()) == pytest.approx(expected_tokens(tree, a), abs=0.02)


def all_trees(size, max_rank):
    """Every level-ordered tree of ``size`` nodes with at most ``max_rank`` children per node (brute force)."""
    def grow(parents):
        if len(parents) == size:
            yield tuple(parents)
            return
        depths = Tree(tuple(parents)).depths if parents else (0,)
        for p in range(len(parents) + 1):
            if sum(1 for q in parents if q == p) < max_rank and (not parents or depths[p] + 1 >= depths[-1]):
                try:
                    yield from grow(parents + [p])
                except ValueError:
                    continue
    seen = set()
    for parents in grow([]):
        try:
            tree = Tree(parents)
        except ValueError:
            continue
        if parents not in seen:
            seen.add(parents)
            yield tree


@pytest.mark.parametrize("a", [[0.7, 0.2], [0.5, 0.3, 0.1], [0.9, 0.05]])
@pytest.mark.parametrize("size", [1, 3, 5])
def test_best_tree_is_optimal_by_brute_force(a, size):
    best = max(expected_tokens(t, a) for t in all_trees(size, len(a)))
    assert expected_tokens(best_tree(a, size), a) == pytest.approx(best)
    shallow = best_tree(a, size, max_depth=2)
    assert shallow.depth <= 2
    assert expected_tokens(shallow, a) == pytest.approx(max(expected_tokens(t, a) for t in all_trees(size, len(a))
                                                            if t.depth <= 2))


def test_tree_speedup_of_a_chain_is_the_chain_model():
    from specnotes.analytic import cost

    for b in (1, 16, 256):
        for draft in (cost.LLAMA_3_2_1B, cost.EarlyExit(8)):
            chain = cost.batch_speedup(cost.LLAMA_3_8B, draft, "H100-SXM", b, 3, 0.7, context=512)
            tree = tree_speedup(cost.LLAMA_3_8B, draft, "H100-SXM", b, Tree.chain(3), cost.expected_tokens(0.7, 3),
                                context=512)
            assert tree == pytest.approx(chain, rel=1e-12)
    # a wide tree verifies more tokens per sequence, so it stops paying at a smaller batch than the chain
    a = [0.74, 0.14, 0.05, 0.025]
    wide = best_tree(a, 21, max_depth=3)
    target, draft = cost.LLAMA_3_8B, cost.LLAMA_3_2_1B
    wide_b = tree_crossover(target, draft, "H100-SXM", wide, expected_tokens(wide, a))
    chain_b = tree_crossover(target, draft, "H100-SXM", Tree.chain(3), expected_tokens(Tree.chain(3), a))
    assert wide_b < chain_b
    scan = next(b for b in range(1, 4096) if tree_speedup(target, draft, "H100-SXM", b, wide,
                                                          expected_tokens(wide, a)) <= 1)
    assert wide_b == scan


def test_rank_acceptance_by_hand():
    target = torch.tensor([[[0.0, 5.0, 1.0], [3.0, 0.0, 0.0], [0.0, 0.0, 9.0], [1.0, 0.0, 0.0]]])  # argmax 1, 0, 2, 0
    draft = torch.tensor([[[0.0, 2.0, 1.0], [0.0, 2.0, 1.0], [0.0, 2.0, 1.0], [0.0, 2.0, 1.0]]])  # order 1, 2, 0
    # the target's choices rank 0, 2, 1, 2 under the draft
    assert rank_acceptance(target, draft, 3) == [0.25, 0.25, 0.5]
    with pytest.raises(ValueError, match="same shape"):
        rank_acceptance(target, draft[..., :2], 2)


# ---------------------------------------------------------------------------------------------- end to end at T > 0
# tree_generate with a TreeDrafter on tiny transformers over V = 8 tokens: the first three tokens it emits must
# follow the target's own distribution, computed exactly by enumerating all 8^3 continuations. With a tree of
# depth 2 the first iteration can emit both drafted levels and the bonus, so the three tokens cover siblings at
# both depths, the residual fallbacks, the bonus, and the next iteration's KV compaction and pending tokens.
# Chi-square over the 512 cells (cells under 5 expected draws pooled) at significance 1e-4: a right drafter fails
# a check by chance with probability about 1e-4 (3e-4 over the three right configurations); the seeds are
# fixed, so the suite is deterministic. Each wrong drafter below must be rejected at the same level.

V8 = ModelConfig(n_layers=2, d_model=16, n_heads=2, d_ff=32, vocab_size=8, max_seq_len=64)
PROMPT8 = [1, 5, 2, 7]
DRAWS = 6000


@pytest.fixture(scope="module")
def pair8():
    """Target weights N(0, 0.5) (peaked distributions); the draft is the target plus noise 0.1: about a third of
    the first iterations accept both levels, half accept none."""
    torch.manual_seed(0)
    target = Transformer(V8).eval()
    for p in target.parameters():
        if p.dim() >= 2:
            p.data.normal_(0, 0.5)
    draft = Transformer(V8).eval()
    draft.load_state_dict(target.state_dict())
    for p in draft.parameters():
        if p.dim() >= 2:
            p.data.add_(0.1 * torch.randn_like(p))
    return target, draft


@torch.no_grad()
def exact_first_three(target, prompt, temperature) -> torch.Tensor:
    """P(x1, x2, x3 | prompt) for all 512 continuations: one causal pass over the prompt and every (x1, x2)."""
    V = target.config.vocab_size
    pairs = torch.cartesian_prod(torch.arange(V), torch.arange(V))  # (x1, x2), x1-major
    p = logits_to_probs(target(torch.cat([torch.tensor(prompt).expand(len(pairs), -1), pairs], 1)).double(),
                        temperature)[:, len(prompt) - 1:]  # [V^2, 3, V]: after the prompt, after x1, after x2
    return joint_of(p, V)


def joint_of(p: torch.Tensor, V: int) -> torch.Tensor:
    """P(x1) P(x2 | x1) P(x3 | x1, x2) from the distributions [V^2, 3, V] after the prompt, x1 and x2."""
    first = p[0, 0]  # after the prompt (the same in every row)
    second = p[::V, 1]  # [x1, x2]: rows (x1, 0) hold P(x2 | x1)
    third = p[:, 2].reshape(V, V, V)  # [x1, x2, x3]
    return (first[:, None, None] * second[:, :, None] * third).flatten()


def tree_draws(target, drafter, temperature, seed=1, chunk=3000) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.cat([tree_generate(target, drafter, [PROMPT8] * chunk, 3, temperature=temperature, generator=g).tokens
                      for _ in range(DRAWS // chunk)])


def chi_square_pvalue(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    V = V8.vocab_size
    counts = torch.bincount(tokens[:, 0] * V * V + tokens[:, 1] * V + tokens[:, 2], minlength=V**3).double()
    expected = probs * counts.sum()
    small = expected < 5
    counts = torch.cat([counts[~small], counts[small].sum()[None]])
    expected = torch.cat([expected[~small], expected[small].sum()[None]])
    if expected[-1] == 0:
        counts, expected = counts[:-1], expected[:-1]
    stat = ((counts - expected) ** 2 / expected).sum()
    return float(torch.special.gammaincc(torch.tensor((len(counts) - 1) / 2, dtype=torch.float64), stat / 2))


class WithoutReplacement(TreeDrafter):
    """WRONG: siblings sampled without replacement, each still reported as drawn from q."""

    def children_of(self, logits, m, temperature, generator):
        q = logits_to_probs(logits, temperature)
        return torch.multinomial(q, m, replacement=False, generator=generator), q[:, None].expand(-1, m, -1)


class TopWithProposalQ(TreeDrafter):
    """WRONG: the draft's top-m tokens (fixed choices) reported with the draft's q instead of one-hot."""

    def children_of(self, logits, m, temperature, generator):
        q = logits_to_probs(logits, temperature)
        return logits.topk(m, dim=-1).indices, q[:, None].expand(-1, m, -1)


class OneSampleForAll(TreeDrafter):
    """WRONG: one draw of q copied to every sibling (not independent), each reported with q."""

    def children_of(self, logits, m, temperature, generator):
        q = logits_to_probs(logits, temperature)
        return sample_from(q, generator)[:, None].expand(-1, m), q[:, None].expand(-1, m, -1)


class ReportsTemperatureOne(TreeDrafter):
    """WRONG: samples at the run's temperature, reports q at temperature 1."""

    def children_of(self, logits, m, temperature, generator):
        tokens, _ = super().children_of(logits, m, temperature, generator)
        return tokens, logits_to_probs(logits, 1.0)[:, None].expand(-1, m, -1)


@pytest.mark.parametrize(("branching", "candidates", "temperature"),
                         [((2, 2), "sample", 1.0), ((2, 2), "top", 1.0), ((3, 1), "sample", 0.7)])
def test_tree_decoding_at_temperature_follows_the_target_end_to_end(pair8, branching, candidates, temperature):
    target, draft = pair8
    drafter = TreeDrafter(draft, Tree.from_branching(branching), candidates)
    draws = tree_draws(target, drafter, temperature)
    assert chi_square_pvalue(draws, exact_first_three(target, PROMPT8, temperature)) > SIGNIFICANCE


WRONG_DRAFTERS = [(WithoutReplacement, "sample", 1.0), (TopWithProposalQ, "top", 1.0), (OneSampleForAll, "sample", 1.0),
                  (ReportsTemperatureOne, "sample", 0.7)]


@pytest.mark.parametrize(("drafter_cls", "candidates", "temperature"), WRONG_DRAFTERS,
                         ids=[cls.__name__ for cls, *_ in WRONG_DRAFTERS])
def test_the_end_to_end_check_rejects_wrong_tree_drafters(pair8, drafter_cls, candidates, temperature):
    target, draft = pair8
    drafter = drafter_cls(draft, Tree.from_branching((2, 2)), candidates)
    draws = tree_draws(target, drafter, temperature)
    assert chi_square_pvalue(draws, exact_first_three(target, PROMPT8, temperature)) < SIGNIFICANCE
