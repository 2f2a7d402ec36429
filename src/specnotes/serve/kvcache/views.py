"""What a paged cache holds, slot by slot (Chapter 9's figures): a sequence's blocks at one moment
(:class:`CacheView` of :class:`BlockView`), a ``Recorder`` that keeps one at every stage of
``speculative_generate_cached``, and how a rejected draft reached another request (:func:`stale_hit`)."""

from __future__ import annotations

from dataclasses import dataclass

from specnotes.serve.kvcache.paged import PagedKVCache

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
