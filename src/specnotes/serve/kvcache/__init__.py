"""A paged KV cache with prefix caching, and the rule that keeps speculative decoding exact on it (Chapter 9).

Storage is a pool of fixed-size blocks; a sequence owns a block table. A full block is named by a content hash
chained over the whole prefix; publishing registers it under that hash, and a later request whose prompt starts
with the same blocks hits them and skips their prefill. What speculation adds (rejected drafts' keys, drafters
whose state runs one token ahead) is what ``Policy`` chooses how to handle. One module per job:

- ``hashing``   the block hashes, chained over the prefix, and the lookahead key of a lagging drafter's block;
- ``policy``    ``Policy``: how blocks are published and hits served; the right one (``RIGHT``) and ``POLICIES``;
- ``paged``     ``BlockPool`` (blocks, reference counts, eviction, copy-on-write) and ``PagedKVCache`` on it;
- ``prefix``    ``PrefixCache``: the target's and drafter's pools, admission with hits, publication, statistics;
- ``decoders``  ``generate_cached``, ``speculative_generate_cached`` and ``LookaheadDrafter``, and their helpers;
- ``views``     what a paged cache holds slot by slot (``CacheView``, ``Recorder``, ``stale_hit``): the figures;
- ``slots``     where the slots stand, counted without a cache (``verify_trace``, ``prefix_hit``);
- ``outputs``   comparing outputs with caching and without.

The names below are this package's face (``kvcache.PrefixCache``, ``from specnotes.serve.kvcache import Policy``).
"""

from specnotes.serve.kvcache.decoders import (
    LookaheadDrafter,
    branching_requests,
    first_draft_probs,
    generate_cached,
    speculative_generate_cached,
    time_admission,
)
from specnotes.serve.kvcache.hashing import ROOT, block_hash, block_hashes, lookahead_key
from specnotes.serve.kvcache.outputs import assert_same_tokens, describe_alpha_change, first_divergence
from specnotes.serve.kvcache.paged import BlockPool, PagedKVCache
from specnotes.serve.kvcache.policy import ON_HIT, POLICIES, RIGHT, Policy
from specnotes.serve.kvcache.prefix import PrefixCache, ReuseStats
from specnotes.serve.kvcache.slots import PrefixHit, prefix_hit, verify_trace
from specnotes.serve.kvcache.views import (
    SLOT_STATES,
    BlockView,
    CacheView,
    Recorder,
    StaleHit,
    cache_view,
    slot_state,
    stale_hit,
)

__all__ = [
    "ON_HIT", "POLICIES", "RIGHT", "ROOT", "SLOT_STATES", "BlockPool", "BlockView", "CacheView", "LookaheadDrafter",
    "PagedKVCache", "Policy", "PrefixCache", "PrefixHit", "Recorder", "ReuseStats", "StaleHit", "assert_same_tokens",
    "block_hash", "block_hashes", "branching_requests", "cache_view", "describe_alpha_change", "first_divergence",
    "first_draft_probs", "generate_cached", "lookahead_key", "prefix_hit", "slot_state", "speculative_generate_cached",
    "stale_hit", "time_admission", "verify_trace",
]
