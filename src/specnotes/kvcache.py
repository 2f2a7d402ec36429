"""A paged KV cache with prefix caching, and the rule that keeps speculative decoding exact on it (Chapter 9).

Storage is a pool of fixed-size blocks (``BlockPool``): keys and values of ``block_size`` consecutive
positions, for every layer. A sequence owns a *block table*, the list of its blocks in position order, so
its cache need not be contiguous and sequences can share blocks. ``PagedKVCache`` gives the model the
interface of ``model.KVCache`` (``lengths``, ``reserve``, ``write``, ``read``, ``rollback``) and reads
and writes through the block tables.

Prefix caching. A full block is named by a content hash chained over the whole prefix,
``h_j = H(h_{j-1}, tokens of block j)``, because its keys and values depend on every earlier token.
*Publishing* a block registers it under its hash; a later request whose prompt starts with the same
blocks *hits* them and skips their prefill. Blocks carry reference counts; a published block that no
sequence holds stays cached until its space is needed, then the least recently used one is evicted. A
write into a block that is published or shared first copies it (copy-on-write).

What speculation adds, and what ``Policy`` chooses:

- *Publication.* A verify pass writes k+1 slots and then rolls back the rejected ones, and the sequence's
  token count runs one ahead of its verified keys (the pending token, whose slot may still hold a
  rejected draft's keys). ``publish="verified"`` publishes a block only when every slot holds keys and
  values of a verified token; ``"written"`` publishes it once all its slots have been written, by any
  pass, and token ids exist for them — which publishes a rejected draft's keys under the committed
  tokens' hash. Without speculation the two rules agree.
- *Drafters whose state lags.* An EAGLE/MTP-style drafter's state at slot i depends on token i+1 (it runs
  one token ahead; ``LookaheadDrafter`` reproduces that alignment with the shipped draft model). Block
  j's hash does not cover token (j+1)·B, so a hit cannot vouch for the drafter's last slot of a block
  by its hash alone. ``on_hit="lookahead"`` keys the drafter's blocks by the following token as well
  (vLLM RFC #50438): the key names everything the state depends on, so every hit is exact.
  ``"drop"`` serves drafter block j only if the request that wrote it also wrote the target block j+1
  the hit reuses (then its token (j+1)·B is the new request's), and so always gives back the last hit
  block, which has no successor in the hit: exact for any sharing pattern. ``"drop-last"`` gives back
  the last hit block only (our model of vLLM's ``drop_eagle_block``): exact while one writer's blocks
  follow each other, not when requests branch at a block boundary (request A writes block j and goes
  on with one token, B shares block j, goes on with another and writes block j+1; a request hitting
  both gets A's drafter state in the last slot of block j). ``"keep"`` reuses the last block anyway.
  On an attention-only model a wrong drafter state changes the drafts, never the output: the target
  verifies every token. On a hybrid model whose dropped block also holds target state (a Mamba/GDN
  layer's recurrent state), skipping the drop changes outputs (vLLM #43559, PR #48375).

``generate_cached`` and ``speculative_generate_cached`` are ``generate.generate`` and
``generate.speculative_generate`` on a ``PrefixCache`` that lives across calls. Every exit, an exception
included, gives back the blocks the call held (published ones stay cached).
"""

from __future__ import annotations

import hashlib
import time
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import torch

from specnotes import validate
from specnotes.drafters import DraftModelDrafter
from specnotes.generate import Generation, GenerationStats, append_emitted, as_prompt_list
from specnotes.measure.timing import sync
from specnotes.model import ModelConfig, Transformer, prefill, shortened
from specnotes.sampling import logits_to_probs, sample_from, speculative_sample

ROOT = b"specnotes-kv"  # the parent of a sequence's first block


ON_HIT = ("drop", "lookahead", "drop-last", "keep")


@dataclass(frozen=True)
class Policy:
    """How a prefix cache publishes blocks and serves hits. The right policy is ``Policy()``.

    publish: ``"verified"`` (every slot holds a verified token's keys) or ``"written"`` (every slot was
        written by some pass: wrong under speculation).
    on_hit: for a drafter whose state runs one token ahead: ``"drop"`` every hit block whose drafter
        state was written by another request than the target block after it (the last one included),
        ``"lookahead"`` (key its blocks by the following token too), ``"drop-last"`` (the last hit block
        only: wrong when requests branch at a block boundary) or ``"keep"`` it (wrong).
    chain: hash each block together with its whole prefix (right) or alone (wrong: a block of equal
        tokens after a different prefix would be reused).
    """

    publish: str = "verified"
    on_hit: str = "drop"
    chain: bool = True

    def __post_init__(self):
        validate.choice("publish", self.publish, ("verified", "written"))
        validate.choice("on_hit", self.on_hit, ON_HIT)
        validate.choice("chain", self.chain, (True, False))

    @property
    def name(self) -> str:
        wrong = [w for w, on in (("publishes written slots", self.publish == "written"),
                                 ("keeps a lagging drafter's last block", self.on_hit == "keep"),
                                 ("drops only a lagging drafter's last block", self.on_hit == "drop-last"),
                                 ("unchained hashes", not self.chain)) if on]
        return "wrong: " + ", ".join(wrong) if wrong else f"right ({self.on_hit})"


RIGHT = Policy()
POLICIES = {
    "verified + drop": RIGHT,
    "verified + lookahead hash": Policy(on_hit="lookahead"),
    "written (eager publication)": Policy(publish="written"),
    "keep the lagging last block": Policy(on_hit="keep"),
    "drop the last block only (old rule)": Policy(on_hit="drop-last"),
    "unchained hashes": Policy(chain=False),
}


def block_hash(parent: bytes, tokens) -> bytes:
    """Content hash of one block: its tokens and its parent's hash (the whole prefix, by induction)."""
    return hashlib.blake2b(parent + array("q", tokens).tobytes(), digest_size=16).digest()


def block_hashes(tokens, block_size: int, n_blocks: int, chain: bool = True) -> list[bytes]:
    """Hashes of the first ``n_blocks`` full blocks of ``tokens``, chained over the prefix."""
    block_size = validate.integer("block_size", block_size, low=1)
    n_blocks = validate.integer("n_blocks", n_blocks, low=0, high=len(tokens) // block_size)
    hashes, parent = [], ROOT
    for j in range(n_blocks):
        h = block_hash(parent if chain else ROOT, tokens[j * block_size:(j + 1) * block_size])
        hashes.append(h)
        parent = h
    return hashes


def lookahead_key(h: bytes, next_token: int) -> bytes:
    """Key of a lagging drafter's block: the block's hash and the token after the block (RFC #50438)."""
    return block_hash(h, [next_token])


class BlockPool:
    """``num_blocks`` blocks of keys and values for every layer, reference counts, and the prefix cache.

    ``k``, ``v``: [n_layers, num_blocks + 1, block_size, n_heads, d_head]; the extra block (``null``)
    pads block tables and absorbs writes of padding rows.
    """

    def __init__(self, config: ModelConfig, num_blocks: int, block_size: int, dtype=torch.float32, device="cpu"):
        self.block_size = validate.integer("block_size", block_size, low=1)
        self.num_blocks = validate.integer("num_blocks", num_blocks, low=1)
        shape = (config.n_layers, num_blocks + 1, block_size, config.n_heads, config.d_head)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.null = num_blocks
        self.refs = [0] * num_blocks
        self.hash_of: list[bytes | None] = [None] * num_blocks
        self.publisher: list[int | None] = [None] * num_blocks  # the request that registered it
        self.by_hash: dict[bytes, int] = {}
        self.free = list(range(num_blocks - 1, -1, -1))  # never published (or evicted); pop() takes block 0 first
        self.evictable: OrderedDict[int, None] = OrderedDict()  # published, held by nobody; least recent first
        self.evictions = self.copies = self.published = 0

    def allocate(self) -> int:
        """A block for one holder: a free one, else the least recently used cached block (evicted)."""
        if self.free:
            b = self.free.pop()
        elif self.evictable:
            b, _ = self.evictable.popitem(last=False)
            del self.by_hash[self.hash_of[b]]
            self.hash_of[b] = self.publisher[b] = None
            self.evictions += 1
        else:
            raise RuntimeError(f"out of KV blocks: all {self.num_blocks} are held by running sequences")
        self.refs[b] = 1
        return b

    def hold(self, b: int):
        if self.refs[b] == 0:
            del self.evictable[b]
        self.refs[b] += 1

    def release(self, b: int):
        self.refs[b] -= 1
        if self.refs[b] == 0:
            if self.hash_of[b] is None:
                self.free.append(b)
            else:
                self.evictable[b] = None  # most recently used: evicted last

    def lookup(self, h: bytes) -> int | None:
        """The cached block with hash ``h``, now held once more by the caller; None on a miss."""
        b = self.by_hash.get(h)
        if b is not None:
            self.hold(b)
        return b

    def publish(self, b: int, h: bytes, publisher: int | None = None):
        """Register block ``b`` under ``h``, written by request ``publisher``. If another block already has
        that hash, keep that one (and its publisher)."""
        if self.hash_of[b] is None and h not in self.by_hash:
            self.hash_of[b] = h
            self.by_hash[h] = b
            self.publisher[b] = publisher
            self.published += 1

    def publisher_of(self, h: bytes) -> int | None:
        return self.publisher[self.by_hash[h]]

    def copy(self, b: int) -> int:
        """Copy-on-write: a private copy of ``b`` for its writer, who gives up ``b``."""
        new = self.allocate()
        self.k[:, new] = self.k[:, b]
        self.v[:, new] = self.v[:, b]
        self.copies += 1
        self.release(b)
        return new

    @property
    def cached_blocks(self) -> int:
        return len(self.by_hash)


class PagedKVCache:
    """The model's view of a batch of sequences on a ``BlockPool``: one block table and one length each.

    ``written[b]`` is the high-water mark of slots any pass has written (verify passes write drafts past
    the length); ``lengths[b]`` counts the slots that hold verified tokens.
    """

    def __init__(self, pool: BlockPool, tables: list[list[int]], lengths: list[int], owners: list | None = None):
        self.pool = pool
        self.tables = tables
        self.owners = list(owners) if owners is not None else [None] * len(tables)  # request ids
        self.lengths = torch.tensor(lengths, dtype=torch.int64, device=pool.k.device)
        self.written = list(lengths)
        self.capacity = pool.num_blocks * pool.block_size
        self.slots = self.table = None

    @property
    def batch(self) -> int:
        return len(self.tables)

    def reserve(self, positions: torch.Tensor, n_valid: torch.Tensor | None = None):
        """Allocate (or copy on write) the blocks this pass writes, and map its rows to slots."""
        bs, device = self.pool.block_size, positions.device
        valid = torch.ones_like(positions, dtype=torch.bool)
        if n_valid is not None:  # padding rows of a ragged pass write nowhere (into the null block)
            valid = torch.arange(positions.shape[1], device=device) < torch.as_tensor(n_valid, device=device)[:, None]
        tops = torch.where(valid, positions + 1, 0).amax(1).tolist()
        firsts = positions[:, 0].tolist()
        for b, (first, top) in enumerate(zip(firsts, tops, strict=True)):
            table = self.tables[b]
            for j in range(first // bs, -(-top // bs)):
                if j == len(table):
                    table.append(self.pool.allocate())
                elif self.pool.refs[table[j]] > 1 or self.pool.hash_of[table[j]] is not None:
                    table[j] = self.pool.copy(table[j])
            self.written[b] = max(self.written[b], top)
        width = max(-(-int(positions.max() + 1) // bs), max(len(t) for t in self.tables))
        self.table = torch.tensor([t + [self.pool.null] * (width - len(t)) for t in self.tables],
                                  dtype=torch.int64, device=positions.device)
        blocks = self.table.gather(1, (positions // bs).clamp(max=width - 1))
        self.slots = torch.where(valid, blocks * bs + positions % bs, self.pool.null * bs + positions % bs)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
        # k, v: [B, H, n, D] land in the slots ``reserve`` mapped for this pass
        H, D = k.shape[1], k.shape[3]
        index = self.slots.flatten()
        self.pool.k[layer].view(-1, H, D)[index] = k.transpose(1, 2).reshape(-1, H, D)
        self.pool.v[layer].view(-1, H, D)[index] = v.transpose(1, 2).reshape(-1, H, D)

    def read(self, layer: int, context: int) -> tuple[torch.Tensor, torch.Tensor]:
        blocks = self.table[:, : -(-context // self.pool.block_size)]
        k = self.pool.k[layer][blocks].flatten(1, 2)[:, :context].transpose(1, 2)
        v = self.pool.v[layer][blocks].flatten(1, 2)[:, :context].transpose(1, 2)
        return k, v

    def rollback(self, new_lengths: torch.Tensor):
        """Forget every position at or past ``new_lengths[b]``; the blocks stay with the sequence."""
        self.lengths = shortened(self.lengths, new_lengths)

    def release(self):
        for table in self.tables:
            for b in table:
                self.pool.release(b)
        self.tables = [[] for _ in self.tables]


class LookaheadDrafter(DraftModelDrafter):
    """The shipped draft model with an EAGLE/MTP-style cache alignment: slot i holds the state computed
    from token i+1 (an EAGLE head's input at i is the target's feature at i *and* token i+1). We get it
    by feeding the draft model the sequence shifted by one token; rotary positions are relative, so the
    drafts are those of the draft model on the sequence without its first token."""

    lag = 1

    def start(self, prompts: list[torch.Tensor], capacity: int, cache=None):
        if any(len(p) < 2 for p in prompts):
            raise ValueError("a LookaheadDrafter needs prompts of at least 2 tokens")
        super().start([p[1:] for p in prompts], capacity, cache)


@dataclass
class ReuseStats:
    """What the prefix cache did for the requests admitted so far."""

    requests: int = 0
    hits: int = 0  # requests that reused at least one block
    hit_tokens: int = 0  # prompt tokens served from the prefix cache
    recomputed_tokens: int = 0  # tokens of hit blocks dropped for a lagging drafter ("drop" or "drop-last")
    prefill_tokens: int = 0  # prompt tokens the target computed
    last_hits: list[int] = field(default_factory=list)  # tokens reused by each request of the last call


class PrefixCache:
    """Block pools for a target (and, for speculative decoding, its drafter) sharing one set of block
    hashes, a ``Policy``, and statistics. It lives across calls: that is what lets a later request hit
    an earlier one's blocks. ``enabled=False`` runs the same paged code with no lookups or publication.
    """

    def __init__(self, target: Transformer, draft: Transformer | None = None, *, block_size: int = 16,
                 num_blocks: int = 1024, policy: Policy = RIGHT, enabled: bool = True):
        if not isinstance(policy, Policy):
            raise validate.BadArgumentType(f"policy must be a specnotes.kvcache.Policy, got {policy!r}")
        w = target.lm_head.weight
        self.target = BlockPool(target.config, num_blocks, block_size, w.dtype, w.device)
        self.draft = None
        if draft is not None:
            d = draft.lm_head.weight
            self.draft = BlockPool(draft.config, num_blocks, block_size, d.dtype, d.device)
        self.block_size, self.policy, self.enabled = block_size, policy, bool(enabled)
        self.models = (target, draft)  # the cache holds their keys and values, and serves them only
        self.stats = ReuseStats()
        self.requests = 0  # ids handed out at admission: who published which block

    def check_models(self, target: Transformer, draft: Transformer | None = None):
        """BadArgument unless ``target`` (and ``draft``) are the models this cache was built for: it holds
        their keys and values, which no other model may read, whatever its shape."""
        for role, model, mine in (("target", target, self.models[0]), ("draft", draft, self.models[1])):
            if model is None or model is mine:
                continue
            if mine is None:
                raise validate.BadArgument("this PrefixCache has no draft pool: pass draft= to speculate on it")
            raise validate.BadArgument(
                f"this PrefixCache was built for another {role} model ({mine.config.n_layers} layers, d_model "
                f"{mine.config.d_model}, {mine.lm_head.weight.dtype}); it was given one with "
                f"{model.config.n_layers} layers, d_model {model.config.d_model}, {model.lm_head.weight.dtype}. "
                f"A prefix cache holds the keys and values of the models it was built with: build one per pair")

    # ------------------------------------------------------------ keys

    def hashes(self, tokens, n_blocks: int) -> list[bytes]:
        return block_hashes(tokens, self.block_size, n_blocks, self.policy.chain)

    def draft_key(self, h: bytes, tokens, j: int, lag: int) -> bytes:
        if lag and self.policy.on_hit == "lookahead":
            return lookahead_key(h, tokens[(j + 1) * self.block_size])
        return h

    # ------------------------------------------------------------ admission

    def hit_blocks(self, tokens: list[int], lag: int | None) -> int:
        """How many leading blocks of ``tokens`` a request reuses (in both pools when it speculates).
        The last prompt token is always computed, and a lagging drafter holds one token fewer."""
        usable = len(tokens) - 1 - (lag or 0)
        if not self.enabled or usable < self.block_size:
            return 0
        n, hashes = 0, self.hashes(tokens, usable // self.block_size)
        for j, h in enumerate(hashes):
            if h not in self.target.by_hash:
                break
            if lag is not None and self.draft_key(h, tokens, j, lag) not in self.draft.by_hash:
                break
            n += 1
        kept = n
        if n and lag and self.policy.on_hit == "drop-last":
            kept = n - 1
        elif n and lag and self.policy.on_hit == "drop":
            kept = self.vouched(hashes, n)
        self.stats.recomputed_tokens += (n - kept) * self.block_size
        return kept

    def vouched(self, hashes: list[bytes], n: int) -> int:
        """The drop rule: how many leading hit blocks a lagging drafter may reuse. Its block j holds state
        computed from the token after the block, which h_j does not name; h_(j+1) does. So block j is served
        only if the request that wrote it also wrote the target block j+1 of the hit: that request's token
        there is the new request's. The last hit block has no successor in the hit and is always given back."""
        for j in range(n - 1):
            if self.draft.publisher_of(hashes[j]) != self.target.publisher_of(hashes[j + 1]):
                return j
        return n - 1

    def admit(self, prompts: list[list[int]], lag: int | None = None):
        """Paged caches for a batch of prompts, holding their prefix-cache hits: (target cache, drafter
        cache or None). ``lag``: None for plain decoding, else the drafter's alignment (0 or 1)."""
        if lag is not None and self.draft is None:
            raise ValueError("this PrefixCache has no draft pool: pass draft= to speculate on it")
        bs, tables, drafts, hits = self.block_size, [], [], []
        owners = list(range(self.requests, self.requests + len(prompts)))
        self.requests += len(prompts)
        for tokens in prompts:
            n = self.hit_blocks(tokens, lag)
            hashes = self.hashes(tokens, n)
            tables.append([self.target.lookup(h) for h in hashes])
            if lag is not None:
                drafts.append([self.draft.lookup(self.draft_key(h, tokens, j, lag)) for j, h in enumerate(hashes)])
            hits.append(n * bs)
        st = self.stats
        st.requests += len(prompts)
        st.hits += sum(h > 0 for h in hits)
        st.hit_tokens += sum(hits)
        st.prefill_tokens += sum(len(t) - 1 - h for t, h in zip(prompts, hits, strict=True))
        st.last_hits = hits
        target = PagedKVCache(self.target, tables, hits, owners)
        return target, (PagedKVCache(self.draft, drafts, hits, owners) if lag is not None else None)

    # ------------------------------------------------------------ publication

    def publishable(self, cache: PagedKVCache, b: int, n_tokens: int, offset: int) -> int:
        """How many leading blocks of sequence b the policy lets us publish. Slot i of this cache holds
        token i + offset; ``n_tokens`` token ids are known (committed, the pending one included)."""
        if self.policy.publish == "verified":
            slots = int(cache.lengths[b])
        else:  # every slot written by some pass, and token ids exist for them (hashable)
            slots = min(cache.written[b], n_tokens - offset)
        return slots // self.block_size

    def publish(self, cache: PagedKVCache, tokens: list[list[int]], done: list[int], offset: int | None,
                active=None):
        """Publish each active sequence's newly publishable blocks; ``done[b]`` counts those already
        published. ``offset``: None for the target, else the drafter's alignment."""
        if not self.enabled:
            return
        pool = self.target if offset is None else self.draft
        for b, seq in enumerate(tokens):
            if active is not None and not active[b]:
                continue
            n = self.publishable(cache, b, len(seq), offset or 0)
            if offset and self.policy.on_hit == "lookahead":
                n = min(n, (len(seq) - 1) // self.block_size)  # the following token must exist
            if n <= done[b]:
                continue
            hashes = self.hashes(seq, n)
            for j in range(done[b], n):
                key = hashes[j] if offset is None else self.draft_key(hashes[j], seq, j, offset)
                pool.publish(cache.tables[b][j], key, cache.owners[b])
            done[b] = n


# ---------------------------------------------------------------- decoders on a prefix cache


def _check_common(prompts, model, max_new_tokens, temperature, cache, extra_positions=0, draft=None):
    validate.integer("max_new_tokens", max_new_tokens, low=0)
    prompts = as_prompt_list(prompts, model, max_new_tokens + extra_positions)
    validate.number("temperature", temperature, low=0)
    if not isinstance(cache, PrefixCache):
        raise validate.BadArgumentType(f"cache must be a specnotes.kvcache.PrefixCache, got {cache!r}")
    cache.check_models(model, draft)
    longest, bs = max(len(p) for p in prompts) + max_new_tokens + extra_positions, cache.block_size
    if longest > cache.target.num_blocks * bs:  # a sequence's blocks must fit the pool, whatever else it holds
        raise validate.BadArgument(
            f"num_blocks must be an integer >= {-(-longest // bs)} for sequences of up to {longest} tokens (the "
            f"longest prompt, max_new_tokens = {max_new_tokens}"
            f"{f' and {extra_positions} positions a speculative step may write' if extra_positions else ''}) in "
            f"blocks of {bs}; this PrefixCache has {cache.target.num_blocks}")
    return prompts


def _release(*caches):
    for kv in caches:
        if kv is not None:
            kv.release()


@torch.inference_mode()
def generate_cached(model: Transformer, prompts, max_new_tokens: int, cache: PrefixCache,
                    temperature: float = 0.0, generator: torch.Generator | None = None) -> Generation:
    """``generate.generate`` on a paged prefix cache: reuse what earlier requests published, publish
    each block as the policy allows, release the blocks at the end (published ones stay cached)."""
    prompts = _check_common(prompts, model, max_new_tokens, temperature, cache)
    device = model.lm_head.weight.device
    sync(device)
    start = time.perf_counter()
    tokens = [p.tolist() for p in prompts]
    kv, _ = cache.admit(tokens)
    try:
        _, last, passes = prefill(model, prompts, kv.capacity, cache=kv)  # only what the prefix cache lacks
        published = [0] * len(prompts)
        out = []
        for _ in range(max_new_tokens):
            logits = model(last[:, None], kv)[:, 0]
            last = sample_from(logits_to_probs(logits, temperature), generator)
            out.append(last)
            for seq, t in zip(tokens, last.tolist(), strict=True):
                seq.append(t)
            cache.publish(kv, tokens, published, None)
    finally:
        kv.release()
    B = len(prompts)
    new = torch.stack(out, 1) if out else torch.zeros(B, 0, dtype=torch.int64, device=device)
    sync(device)
    stats = GenerationStats(k=0, temperature=temperature, batch=B,
                            accepted=torch.zeros(max_new_tokens, B, dtype=torch.int64),
                            target_passes=passes + max_new_tokens, wall_time_s=time.perf_counter() - start,
                            new_tokens=B * max_new_tokens)
    return Generation(new.cpu(), stats)


@torch.inference_mode()
def speculative_generate_cached(target: Transformer, drafter: DraftModelDrafter, prompts, max_new_tokens: int,
                                cache: PrefixCache, k: int = 4, temperature: float = 0.0,
                                generator: torch.Generator | None = None, sampler=speculative_sample,
                                observe=None) -> Generation:
    """``generate.speculative_generate`` on a paged prefix cache shared by the target and the drafter
    (a ``DraftModelDrafter`` or a ``LookaheadDrafter``). After every iteration both caches publish the
    blocks the policy allows; at the end, or on any exception, the sequences release their blocks.

    ``observe``: called as ``observe(stage, iteration, kv, tokens, verified, hits)`` with the target's
    paged cache at three moments, ``"admitted"`` (after the prefill), ``"verify"`` (after a verify pass
    wrote its k + 1 slots, before the verdict: the pending token's slot now holds its keys) and
    ``"committed"`` (after the rollback and publication); ``verified`` counts each sequence's verified
    slots, ``hits`` the tokens its admission reused. A ``Recorder`` keeps what it needs (the cache changes
    after the call returns)."""
    k = validate.integer("k", k, low=1)
    if not isinstance(drafter, DraftModelDrafter):
        raise validate.BadArgumentType(f"drafter must be a DraftModelDrafter, got {type(drafter).__name__}")
    # the last iteration may overshoot max_new_tokens by k, then verify k + 1 more positions
    prompts = _check_common(prompts, target, max_new_tokens, temperature, cache, 2 * (k + 1), drafter.model)
    lag = getattr(drafter, "lag", 0)
    if lag and min(len(p) for p in prompts) < 2:
        raise ValueError("a LookaheadDrafter needs prompts of at least 2 tokens")
    device = target.lm_head.weight.device
    B = len(prompts)
    rows = torch.arange(B, device=device)
    sync(device)
    start = time.perf_counter()
    tokens = [p.tolist() for p in prompts]
    kv, draft_kv = cache.admit(tokens, lag)
    hits = kv.lengths.tolist()
    try:
        _, last, target_passes = prefill(target, prompts, kv.capacity, cache=kv)
        draft_passes_before = drafter.passes
        drafter.start(prompts, kv.capacity, cache=draft_kv)
        if observe:
            observe("admitted", 0, kv, tokens, kv.lengths.tolist(), hits)
        published, draft_published = [0] * B, [0] * B
        out = torch.full((B, max_new_tokens + k + 1), -1, dtype=torch.int64, device=device)
        produced = torch.zeros(B, dtype=torch.int64, device=device)
        accepted_log = []
        while (produced < max_new_tokens).any():
            active = produced < max_new_tokens
            draft_tokens, draft_probs = drafter.propose(k, temperature, generator)
            before = kv.lengths.clone()
            target_probs = logits_to_probs(target(torch.cat([last[:, None], draft_tokens], 1), kv), temperature)
            target_passes += 1
            if observe:  # the pending token's slot now holds its keys: verified, whatever the verdict
                observe("verify", len(accepted_log), kv, tokens, (before + 1).tolist(), hits)
            new, num_accepted = sampler(draft_tokens, draft_probs.float(), target_probs, generator=generator)
            kv.rollback(torch.where(active, before + 1 + num_accepted, before))
            drafter.commit(new, num_accepted, active)
            gained = append_emitted(out, produced, new, num_accepted, active)
            for b in torch.nonzero(active).flatten().tolist():
                tokens[b].extend(new[b, : int(gained[b])].tolist())
            last = torch.where(active, new[rows, num_accepted], last)
            produced += gained
            accepted_log.append(torch.where(active, num_accepted, -1).cpu())
            flags = active.tolist()
            cache.publish(kv, tokens, published, None, flags)
            cache.publish(drafter.cache, tokens, draft_published, lag, flags)
            if observe:
                observe("committed", len(accepted_log) - 1, kv, tokens, kv.lengths.tolist(), hits)
    finally:
        _release(kv, draft_kv)
    sync(device)
    stats = GenerationStats(
        k=k, temperature=temperature, batch=B,
        accepted=torch.stack(accepted_log) if accepted_log else torch.zeros(0, B, dtype=torch.int64),
        target_passes=target_passes, draft_passes=drafter.passes - draft_passes_before,
        wall_time_s=time.perf_counter() - start, new_tokens=B * max_new_tokens,
    )
    return Generation(out[:, :max_new_tokens].cpu(), stats)


@torch.inference_mode()
def first_draft_probs(target: Transformer, drafter: DraftModelDrafter, prompts, cache: PrefixCache,
                      temperature: float = 1.0) -> torch.Tensor:
    """The drafter's distribution for its first draft token of each prompt [B, V], computed on what the
    prefix cache serves (admit, prefill the drafter's rest, propose one token): the drafter's state
    after a hit, laid bare. Nothing is published; the blocks are released."""
    prompts = _check_common(prompts, target, 0, temperature, cache, 1, drafter.model)
    kv, draft_kv = cache.admit([p.tolist() for p in prompts], getattr(drafter, "lag", 0))
    try:
        drafter.start(prompts, kv.capacity, cache=draft_kv)
        return drafter.propose(1, temperature)[1][:, 0]
    finally:
        _release(kv, draft_kv)


def branching_requests(target: Transformer, drafter: DraftModelDrafter, prompt, cache: PrefixCache, block: int,
                       new_tokens: int = 40, k: int = 4) -> list[int]:
    """The sharing pattern that the drop-last-block rule gets wrong, published on ``cache``: request A decodes
    ``prompt`` (publishing its blocks); request B is A's text up to block ``block``, another token in that
    block's first slot, then A's text again, and decodes a few tokens (publishing block ``block``). Returns the
    prompt of a request R that resumes B two tokens past that block: R hits blocks A wrote, then one B wrote."""
    block = validate.integer("block", block, low=1)
    a = as_prompt_list(prompt, target, new_tokens)[0].tolist()
    a += speculative_generate_cached(target, drafter, [a], new_tokens, cache, k=k).tokens[0].tolist()
    bs = cache.block_size
    if len(a) < (block + 1) * bs:
        raise validate.BadArgument(f"the prompt and {new_tokens} new tokens make {len(a)} tokens: too few to branch "
                                   f"at block {block} of {bs} tokens and go one block further")
    b = a[: block * bs] + [(a[block * bs] + 1) % target.config.vocab_size] + a[block * bs + 1: (block + 1) * bs + 4]
    b += speculative_generate_cached(target, drafter, [b], 8, cache, k=k).tokens[0].tolist()
    return b[: (block + 1) * bs + 3]


def time_admission(target: Transformer, drafter: DraftModelDrafter, prompts, cache: PrefixCache, *,
                   warmup: int = 2, repeats: int = 10):
    """``measure.Timing`` of admitting a batch of requests to speculative decoding: the prefix-cache
    lookups, the target's and the drafter's prefill of whatever the cache does not serve (a block the
    drop rule gives back included), then releasing the blocks. The cache and its statistics are left
    as they were."""
    from specnotes.measure import time_fn

    prompts = _check_common(prompts, target, 0, 0.0, cache, draft=drafter.model)
    tokens, lag, saved = [p.tolist() for p in prompts], getattr(drafter, "lag", 0), replace(cache.stats)
    requests = cache.requests

    @torch.inference_mode()
    def admit_once():
        kv, draft_kv = cache.admit(tokens, lag)
        try:
            prefill(target, prompts, kv.capacity, cache=kv)
            drafter.start(prompts, kv.capacity, cache=draft_kv)
        finally:
            _release(kv, draft_kv)

    try:
        timing = time_fn(admit_once, warmup=warmup, repeats=repeats, device=target.lm_head.weight.device)
    finally:
        cache.stats, cache.requests = saved, requests
    return timing


# ---------------------------------------------------------------- what a paged cache holds (Chapter 9's figures)

SLOT_STATES = ("verified", "draft", "rejected", "pending", "pending over a rejected draft", "free")


@dataclass(frozen=True)
class BlockView:
    """One block of a sequence's table at one moment: the state of each slot, and the hash it is published under."""

    block: int  # its id in the pool
    states: tuple[str, ...]  # one of SLOT_STATES per slot
    published: str | None  # the first 8 hex digits of its hash, if it is registered
    hit: bool  # served by the prefix cache when the request was admitted

    @property
    def stale(self) -> bool:
        """Published while holding a slot that is not a verified token's: what the publication rule forbids."""
        return self.published is not None and any(s != "verified" for s in self.states)


@dataclass(frozen=True)
class CacheView:
    """A sequence's paged target cache at one moment of ``speculative_generate_cached`` (``Recorder``)."""

    call: int  # which observed call
    row: int  # the sequence's row in its batch
    stage: str  # "admitted", "verify" (a verify pass has written its k + 1 slots) or "committed"
    iteration: int
    block_size: int
    verified: int  # slots holding verified tokens
    known: int  # token ids known (the pending one included)
    written: int  # high-water mark of written slots
    blocks: tuple[BlockView, ...]


def slot_state(i: int, verified: int, known: int, written: int, judged: bool) -> str:
    """Slot i's state. ``judged``: the verify pass's verdict is in (a slot past the verified ones that a pass wrote
    holds a rejected draft), or not yet (it holds a draft awaiting the verdict)."""
    if i < verified:
        return "verified"
    if i < known:
        return "pending over a rejected draft" if judged and i < written else "pending"
    if i < written:
        return "rejected" if judged else "draft"
    return "free"


def cache_view(kv: PagedKVCache, row: int, stage: str, iteration: int, verified: int, known: int, hit: int = 0,
               call: int = 0) -> CacheView:
    """What sequence ``row`` of ``kv`` holds now, slot by slot (see ``slot_state``)."""
    pool, bs, written = kv.pool, kv.pool.block_size, kv.written[row]
    judged = stage != "verify"
    blocks = []
    for j, block in enumerate(kv.tables[row]):
        states = tuple(slot_state(i, verified, known, written, judged) for i in range(j * bs, (j + 1) * bs))
        h = pool.hash_of[block]
        blocks.append(BlockView(block, states, h.hex()[:8] if h is not None else None, j < hit // bs))
    return CacheView(call, row, stage, iteration, bs, verified, known, written, tuple(blocks))


class Recorder:
    """An ``observe`` callback for ``speculative_generate_cached`` that keeps a ``CacheView`` of every sequence
    at every stage; one Recorder can watch several calls (``views`` grows, ``call`` counts them)."""

    def __init__(self):
        self.views: list[CacheView] = []
        self.call = -1

    def __call__(self, stage, iteration, kv, tokens, verified, hits):
        if stage == "admitted":
            self.call += 1
        for row in range(kv.batch):
            known = len(tokens[row]) if stage != "verify" else verified[row]  # the next token awaits the verdict
            self.views.append(cache_view(kv, row, stage, iteration, verified[row], known, hits[row], self.call))

    def find(self, call: int, row: int, stage: str, iteration: int = 0) -> CacheView:
        return next(v for v in self.views if (v.call, v.row, v.stage, v.iteration) == (call, row, stage, iteration))

    def iteration(self, call: int, row: int, i: int) -> tuple[CacheView, CacheView, CacheView]:
        """Sequence ``row``'s cache before iteration i (after admission for i = 0), right after its verify pass,
        and after its verdict and publication."""
        before = self.find(call, row, "committed", i - 1) if i else self.find(call, row, "admitted")
        return before, self.find(call, row, "verify", i), self.find(call, row, "committed", i)

    def publishing_iteration(self, call: int, row: int) -> int | None:
        """The first iteration after the first (which publishes the prompt's full blocks) that rejects a draft and
        publishes a block: one that shows every slot state at once."""
        for view in self.views:
            if (view.call, view.row, view.stage) != (call, row, "committed") or view.written <= view.verified \
                    or view.iteration == 0:
                continue
            before = self.iteration(call, row, view.iteration)[0]
            if sum(b.published is not None for b in view.blocks) > sum(b.published is not None for b in before.blocks):
                return view.iteration
        return None


@dataclass(frozen=True)
class StaleHit:
    """How a rejected draft reached another request: A's iteration that left a rejected draft's keys in a block
    that got published, and B's admission that was served that block."""

    a_verify: CacheView  # A right after the verify pass of that iteration
    a_published: CacheView  # A after the verdict and publication: the block is published, stale
    b_admitted: CacheView  # B after its admission: the stale block among its hits
    hash: str  # the stale block's hash (8 hex digits)


def stale_hit(first: Recorder, second: Recorder, row: int) -> StaleHit | None:
    """The published stale block that request ``row`` of ``second``'s first call was served, and the iteration
    of ``first`` that published it (None if it was served none)."""
    admitted = second.find(0, row, "admitted")
    served = {b.published for b in admitted.blocks if b.hit}
    for view in first.views:
        if view.stage != "committed":
            continue
        for block in view.blocks:
            if block.stale and block.published in served:
                before = first.find(view.call, view.row, "verify", view.iteration)
                return StaleHit(before, view, admitted, block.published)
    return None



# ---------------------------------------------------------------- where the slots stand


def verify_trace(prompt_length: int, accepted, k: int, block_size: int) -> list[dict]:
    """What each speculative iteration of one sequence leaves in its target cache, from its accepted
    counts (a column of ``GenerationStats.accepted``; -1 once done). Per iteration: the verified length
    before, the slots the verify pass wrote (``written``: verified + k + 1), the verified length after
    (+ 1 + accepted), the token ids known (verified + 1: the pending token has no keys yet), and whether
    the pending token's slot holds a rejected draft's keys (``stale``) at the last slot of a block: the
    block a "written" policy publishes with a rejected draft inside."""
    validate.integer("prompt_length", prompt_length, low=1)
    validate.integer("k", k, low=1)
    validate.integer("block_size", block_size, low=1)
    if isinstance(accepted, torch.Tensor):
        accepted = accepted.flatten().tolist() if not accepted.is_floating_point() else accepted.flatten()
    try:
        accepted = list(accepted)
    except TypeError:
        raise validate.BadArgumentType(f"accepted must be a sequence of accepted counts, got {accepted!r}") from None
    # each iteration accepts 0..k drafts; -1 marks a sequence that is done (a GenerationStats.accepted column)
    accepted = [validate.integer(f"accepted[{i}]", a, low=-1, high=k) for i, a in enumerate(accepted)]
    rows, verified = [], prompt_length - 1
    for i, a in enumerate(accepted):
        if a < 0:
            break
        written, after = verified + k + 1, verified + 1 + a
        rows.append({"iteration": i, "verified before": verified, "accepted": a, "written": written,
                     "verified after": after, "tokens known": after + 1, "stale": a < k,
                     "stale at a block end": a < k and after % block_size == block_size - 1})
        verified = after
    return rows


@dataclass(frozen=True)
class PrefixHit:
    """A hit on a prompt whose every block is cached, counted in tokens (``prefix_hit``)."""

    servable: int  # the prompt minus its last token (always computed) and the drafter's lag
    blocks: int  # whole blocks in the servable tokens: what is hashed, published and found
    reused: int
    recomputed: int  # the block the drop rule gives back


def prefix_hit(prompt_tokens: int, block_size: int, lag: int = 1, drop: bool = True) -> PrefixHit:
    """What a full-prefix hit reuses and recomputes, by ``PrefixCache.hit_blocks``'s rules: the last prompt
    token is always computed, a drafter ``lag`` tokens behind holds that many fewer, only whole blocks hit,
    and with ``drop`` (and a lag) the last hit block is given back and recomputed."""
    prompt_tokens = validate.integer("prompt_tokens", prompt_tokens, low=1)
    block_size = validate.integer("block_size", block_size, low=1)
    lag = validate.integer("lag", lag, low=0)
    servable = max(0, prompt_tokens - 1 - lag)
    blocks = servable // block_size
    dropped = 1 if drop and lag and blocks else 0
    return PrefixHit(servable, blocks, (blocks - dropped) * block_size, dropped * block_size)


# ---------------------------------------------------------------- comparing outputs


def first_divergence(reference: torch.Tensor, other: torch.Tensor) -> tuple[int, int] | None:
    """(row, position) of the first token where ``other`` differs from ``reference`` [B, n]; None if equal."""
    for name, tokens in (("reference", reference), ("other", other)):
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
            shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise validate.BadArgument(f"{name} must be a [B, n] tensor of token ids (a Generation's tokens), got "
                                       f"{shape}; for one sequence pass tokens[None]")
    if reference.shape != other.shape:
        raise ValueError(f"shapes differ: {tuple(reference.shape)} vs {tuple(other.shape)}")
    diff = (reference != other).nonzero()
    if not len(diff):
        return None
    row, pos = diff[(diff[:, 1] * reference.shape[0] + diff[:, 0]).argmin()].tolist()
    return row, pos


def assert_same_tokens(reference: torch.Tensor, other: torch.Tensor, label: str = "with caching"):
    """AssertionError naming the request and position of the first differing token, if any."""
    where = first_divergence(reference, other)
    if where is not None:
        row, pos = where
        raise AssertionError(f"{label}: request {row} diverges at new token {pos}: "
                             f"{int(reference[row, pos])} without caching, {int(other[row, pos])} with")


def describe_alpha_change(alpha_drop: float, alpha_keep: float) -> str:
    """Chapter 9: how acceptance moved when the drafter's last hit block was kept (``alpha_keep``) instead of dropped
    (``alpha_drop``). The words claim what the printed values (three decimals) show: "rose" where keep prints
    higher, "fell" where it prints lower, "was ... under both" where they print the same."""
    alpha_drop = validate.number("alpha_drop", alpha_drop, low=0, high=1)
    alpha_keep = validate.number("alpha_keep", alpha_keep, low=0, high=1)
    drop, keep = f"{alpha_drop:.3f}", f"{alpha_keep:.3f}"
    if drop == keep:
        return f"Acceptance was {drop} under both rules: the wrong drafter states changed no verdict that counts."
    moved = "rose" if alpha_keep > alpha_drop else "fell"
    return (f"Acceptance {moved} from {drop} under the drop rule to {keep} under keep. A drafter state computed from "
            "another continuation changes q, and a changed q can agree with p more often or less.")
