"""The keys of the prefix cache. A full block is named by a content hash chained over the whole prefix,
``h_j = H(h_{j-1}, tokens of block j)``, because its keys and values depend on every earlier token; a lagging
drafter's block may be keyed by the following token as well (``lookahead_key``, vLLM RFC #50438)."""

from __future__ import annotations

import hashlib
from array import array

from specnotes import validate

ROOT = b"specnotes-kv"  # the parent of a sequence's first block


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
