"""A randomized property test of the prefix cache against an oracle that recomputes from scratch (Chapter 9).

Random requests on tiny float64 models (the draft a noisy copy of the target, so drafts are genuinely
rejected): fresh prompts, conversations resumed past block boundaries, and conversations branched at a
block boundary (the token after it changed); block sizes 1 to 16; k from 1 to 6; pools so tight that
blocks are evicted all the time, and calls that run out of blocks altogether. The oracle checks

- every block a request is served at admission, in the target's pool and the drafter's: its keys and
  values equal those a causal pass over the request's own tokens computes from scratch;
- every block registered in either pool, when it is registered, equals a from-scratch pass over the tokens
  its publisher had (it holds only verified state), and after every call it is still what it was then (a
  published block never changes);
- greedy outputs equal plain decoding without a cache (for every policy that keeps the target exact);
- a call that fails gives back every block it held.

The right policies (``drop``, ``lookahead``) must pass on every seed; the wrong ones must be caught on
the seeded workloads below, the old drop-last-block rule included: it serves a lagging drafter the state
of another request in the last slot of a block when requests branch at block boundaries.
"""

import random

import pytest
import torch
from conftest import noisy_pair

from specnotes.serve import kvcache
from specnotes.serve.kvcache import LookaheadDrafter, Policy, PrefixCache, speculative_generate_cached
from specnotes.tiny.drafters import DraftModelDrafter
from specnotes.tiny.generate import generate
from specnotes.tiny.model import ModelConfig

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIG = ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, vocab_size=32, max_seq_len=256)
TOL = 1e-9  # float64: the same keys computed in one pass or over many agree to ~1e-15


@pytest.fixture(scope="module")
def pair():
    return noisy_pair(CONFIG, noise=0.15)


class Oracle(PrefixCache):
    """A PrefixCache that checks what it serves and what it holds against recomputation from scratch."""

    def __init__(self, target, draft, **kwargs):
        super().__init__(target, draft, **kwargs)
        self.snapshots = {}  # (pool name, block id) -> its keys and values when it was registered
        self.violations = []
        self.served = self.held = 0
        self.scratch_kv = {}

    def scratch(self, model, tokens) -> tuple[torch.Tensor, torch.Tensor]:
        """[layers, n, heads, d_head] keys and values of one causal pass over ``tokens``."""
        key = (id(model), tuple(tokens))
        if key not in self.scratch_kv:
            cache = model.new_cache(1, len(tokens))
            with torch.inference_mode():
                model(torch.tensor([tokens]), cache)
            self.scratch_kv[key] = (cache.k[:, 0].transpose(1, 2), cache.v[:, 0].transpose(1, 2))
        return self.scratch_kv[key]

    def differs(self, pool, blocks, first_slot, model, tokens) -> float:
        """Largest difference between the slots [first_slot, len(tokens)) held in ``blocks`` (the blocks that
        cover them, in order) and a from-scratch pass over ``tokens``."""
        k, v = self.scratch(model, tokens)
        bs = pool.block_size
        held_k = pool.k[:, blocks].flatten(1, 2)[:, first_slot % bs: first_slot % bs + len(tokens) - first_slot]
        held_v = pool.v[:, blocks].flatten(1, 2)[:, first_slot % bs: first_slot % bs + len(tokens) - first_slot]
        return max(float((held_k - k[:, first_slot:]).abs().max()), float((held_v - v[:, first_slot:]).abs().max()))

    def admit(self, prompts, lag=None):
        kv, draft_kv = super().admit(prompts, lag)
        for b, tokens in enumerate(prompts):
            hit = int(kv.lengths[b])
            if not hit:
                continue
            self.served += 1
            nb = hit // self.block_size
            if self.differs(self.target, kv.tables[b][:nb], 0, self.models[0], tokens[:hit]) > TOL:
                self.violations.append(("served target state", b, hit))
            if draft_kv is not None:
                drafted = tokens[lag: hit + lag]  # a drafter lag tokens ahead: slot i holds token i + lag
                if self.differs(self.draft, draft_kv.tables[b][:nb], 0, self.models[1], drafted) > TOL:
                    self.violations.append(("served drafter state", b, hit))
        return kv, draft_kv

    def publish(self, cache, tokens, done, offset, active=None):
        """Each block registered now must equal a from-scratch pass over what its publisher had (the target's
        tokens through the block; a lagging drafter's through the token after it)."""
        pool, name, lag = (self.target, "target", 0) if offset is None else (self.draft, "draft", offset)
        model = self.models[0] if offset is None else self.models[1]
        before, unregistered = list(done), [[pool.hash_of[x] is None for x in table] for table in cache.tables]
        super().publish(cache, tokens, done, offset, active)
        for b, seq in enumerate(tokens):
            for j in range(before[b], done[b]):
                block = cache.tables[b][j]
                if not unregistered[b][j] or pool.hash_of[block] is None:
                    continue  # not registered now (a hit, or someone else's block with that key was kept)
                self.held += 1
                written_from = list(seq[lag: (j + 1) * self.block_size + lag])
                if self.differs(pool, [block], j * self.block_size, model, written_from) > TOL:
                    self.violations.append((f"published {name} block", block, j))
                self.snapshots[name, block] = (pool.k[:, block].clone(), pool.v[:, block].clone())

    def check_held(self):
        """Every registered block is still what it was when it was registered: published blocks never change."""
        for name, pool in (("target", self.target), ("draft", self.draft)):
            for block in pool.by_hash.values():
                k, v = self.snapshots[name, block]
                if not (torch.equal(pool.k[:, block], k) and torch.equal(pool.v[:, block], v)):
                    self.violations.append((f"{name} block changed after publication", block))


def child_of(rng, parent, bs, vocab):
    """A request built from an earlier sequence: resumed past a block boundary, branched at one, or one of
    its blocks repeated (equal block contents after another prefix: what an unchained hash confuses)."""
    boundaries = [m * bs for m in range(1, len(parent) // bs + 1) if m * bs + 1 < len(parent)]
    if not boundaries:
        return None
    cut, kind = rng.choice(boundaries), rng.random()
    tail = [rng.randrange(vocab) for _ in range(rng.randint(2, max(20, bs + 2)))]
    if kind < 0.45:  # resume: the same tokens, a little past the boundary
        return parent[: cut + rng.randint(2, bs + 2)]
    if kind < 0.9:  # branch: another token right at the boundary
        return parent[:cut] + [(parent[cut] + rng.randint(1, vocab - 1)) % vocab] + tail
    block = parent[cut - bs: cut]
    return block + block + tail


def run(pair, policy, seed, drafter_cls=LookaheadDrafter, rounds=8):
    """Random rounds of requests on one cache; returns the oracle and how many calls ran out of blocks."""
    target, draft = pair
    rng = random.Random(seed)
    vocab = CONFIG.vocab_size
    bs = BLOCK_SIZES[seed % len(BLOCK_SIZES)]
    drafter = drafter_cls(draft)
    # a request holds at most 60 + 12 + 2 (k + 1) = 86 tokens: the pool holds two to four of them
    num_blocks = -(-rng.choice([180, 240, 300]) // bs) + 2
    cache = Oracle(target, draft, block_size=bs, num_blocks=num_blocks, policy=policy)
    known = [[rng.randrange(vocab) for _ in range(rng.randint(bs + 2, max(40, 3 * bs + 3)))] for _ in range(2)]
    out_of_blocks = 0
    for _ in range(rounds):
        batch = []
        for _ in range(rng.randint(1, 3) if rng.random() < 0.85 else 6):  # now and then, more than the pool holds
            parent = rng.choice(known[-6:])
            request = child_of(rng, parent, bs, vocab) if rng.random() < 0.85 else None
            batch.append(request or [rng.randrange(vocab) for _ in range(rng.randint(2, 40))])
        batch = [r[:60] for r in batch]
        k, new = rng.randint(1, 6), rng.randint(1, min(12, bs + 2))
        try:
            got = speculative_generate_cached(target, drafter, batch, new, cache, k=k)
        except RuntimeError as error:
            assert "out of KV blocks" in str(error)
            out_of_blocks += 1
            assert cache.target.refs == [0] * num_blocks and cache.draft.refs == [0] * num_blocks  # gave back all
            continue
        if policy.publish == "verified" and policy.chain:
            kvcache.assert_same_tokens(generate(target, batch, new).tokens, got.tokens, f"seed {seed}, {policy}")
        assert got.stats.alpha < 1  # genuine rejections
        known += [r + o.tolist() for r, o in zip(batch, got.tokens, strict=True)]
        cache.check_held()
    assert cache.target.refs == [0] * num_blocks
    return cache, out_of_blocks


BLOCK_SIZES = (16, 1, 5, 2, 11, 8, 3)  # seed i runs blocks of BLOCK_SIZES[i]
SEEDS = range(len(BLOCK_SIZES))  # every block size once


@pytest.mark.parametrize("on_hit", ["drop", "lookahead"])
def test_the_right_policies_serve_and_hold_only_exact_state(pair, on_hit):
    served = held = evictions = failed = 0
    for seed in SEEDS:
        cache, out_of_blocks = run(pair, Policy(on_hit=on_hit), seed)
        assert not cache.violations, (seed, cache.violations[:5])
        served, held, evictions = served + cache.served, held + cache.held, evictions + cache.target.evictions
        failed += out_of_blocks
    # the workloads hit, publish and evict, and some calls run out of blocks (each gave back what it held)
    assert served > 30 and held > 300 and evictions > 30 and failed > 0, (served, held, evictions, failed)


def test_an_aligned_drafter_is_exact_under_the_rule_too(pair):
    for seed in SEEDS[:3]:
        cache, _ = run(pair, kvcache.RIGHT, seed, drafter_cls=DraftModelDrafter)
        assert not cache.violations, (seed, cache.violations[:5])


WRONG = {  # policy: the violation the oracle must find on these workloads
    "drop the last block only (old rule)": "served drafter state",
    "keep the lagging last block": "served drafter state",
    "written (eager publication)": "published target block",
    "unchained hashes": "served target state",
}


@pytest.mark.parametrize("name", list(WRONG))
def test_the_oracle_catches_every_wrong_policy(pair, name):
    found = set()
    for seed in SEEDS:  # the first seed that catches it is enough
        cache, _ = run(pair, kvcache.POLICIES[name], seed)
        found |= {kind for kind, *_ in cache.violations}
        if WRONG[name] in found:
            break
    assert WRONG[name] in found, found
