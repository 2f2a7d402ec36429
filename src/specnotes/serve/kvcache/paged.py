"""Paged storage. A pool of fixed-size blocks (``BlockPool``): keys and values of ``block_size`` consecutive
positions, for every layer, with reference counts, the blocks published under their hashes, and least-recently-used
eviction of those no sequence holds. A sequence owns a *block table*, the list of its blocks in position order, so
its cache need not be contiguous and sequences can share blocks. ``PagedKVCache`` gives the model the interface
of ``model.KVCache`` (``lengths``, ``reserve``, ``write``, ``read``, ``rollback``) and reads and writes through
the block tables; a write into a block that is published or shared first copies it (copy-on-write)."""

from __future__ import annotations

from collections import OrderedDict

import torch

from specnotes import validate
from specnotes.tiny.model import ModelConfig, shortened


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
