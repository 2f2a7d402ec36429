"""The prefix cache (:class:`PrefixCache`): block pools for a target and its drafter sharing one set of block
hashes, a ``Policy``, and statistics (:class:`ReuseStats`). *Publishing* a block registers it under its hash; a
later request whose prompt starts with the same blocks *hits* them and skips their prefill."""

from __future__ import annotations

from dataclasses import dataclass, field

from specnotes import validate
from specnotes.serve.kvcache.hashing import block_hashes, lookahead_key
from specnotes.serve.kvcache.paged import BlockPool, PagedKVCache
from specnotes.serve.kvcache.policy import RIGHT, Policy
from specnotes.tiny.model import Transformer


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
            raise validate.BadArgumentType(f"policy must be a specnotes.serve.kvcache.Policy, got {policy!r}")
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
