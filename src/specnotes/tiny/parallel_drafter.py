"""A PARD-style parallel drafter (Chapter 11): k draft tokens in one forward pass.

PARD (An et al. 2025) turns an autoregressive draft model into a parallel one: after the last real token it
appends k - 1 *mask* tokens, and the model, trained for it, predicts token t + 1 at the last real position and
token t + 1 + j at the j-th mask, all in the same pass. The draft cost stops growing with k: one pass over the
pending tokens and the masks, where a draft model runs k passes of one token.

The shipped one (``load_parallel``) starts from the shipped draft (``draft.pt``), as PARD starts from a draft
model, with one more embedding row for the mask (``MASK`` = 256), and is trained by ``python -m
specnotes.tiny.train --which parallel`` on the shipped text: ``training_batch`` appends groups of k - 1 masks
after random anchors of each training window, each group seeing its anchor's prefix and the masks before it
(``visible``), so one causal pass trains next-token prediction and every depth together.

``ParallelDrafter`` follows the drafter protocol of ``specnotes.tiny.drafters``. Its cache holds every committed
token but the ``pending`` ones (the tokens accepted since its last pass); masks are written past a row's length
and never kept. Its q for draft i is the model's distribution at that mask, which does not depend on drafts
1..i-1: drafts are drawn independently per position, which the exact sampler accepts like any other q.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from specnotes import validate
from specnotes.sampling.exact import logits_to_probs, sample_from
from specnotes.tiny.model import (
    DRAFT_CONFIG,
    VOCAB_SIZE,
    ModelConfig,
    Transformer,
    data_file,
    model_card,
    prefill,
)
from specnotes.tiny.ragged import packed_forward
from specnotes.validate import BadArgumentType

MASK = VOCAB_SIZE  # the mask token's id: one past the bytes
PARALLEL_CONFIG = replace(DRAFT_CONFIG, vocab_size=VOCAB_SIZE + 1)
BLOCK = 8  # the longest block the shipped drafter was trained for (k up to 8: one real position, 7 masks)


def from_draft(draft: Transformer) -> Transformer:
    """A parallel model initialized from an autoregressive draft (PARD's starting point): the same weights, one
    more embedding row for the mask (the mean of the others) and one more LM-head row (never a target)."""
    config = replace(draft.config, vocab_size=draft.config.vocab_size + 1)
    model = Transformer(config)
    state = {k: v.float() for k, v in draft.state_dict().items()}
    for name in ("tok_emb.weight", "lm_head.weight"):
        w = state[name]
        state[name] = torch.cat([w, w.mean(0, keepdim=True) if name == "tok_emb.weight" else torch.zeros_like(w[:1])])
    model.load_state_dict(state)
    return model


def training_batch(ids: torch.Tensor, batch: int, block: int, k: int, anchors: int, generator: torch.Generator):
    """Windows of ``block`` real tokens, each followed by ``anchors`` groups of k - 1 masks.

    Returns (tokens, positions, visible, targets), each [batch, n] with n = block + anchors·(k - 1) (``visible``
    [batch, n, n]). Real token t sees tokens 0..t and is trained to predict t + 1; the j-th mask of the group at
    anchor a sits at position a + j, sees real tokens 0..a and its group's masks 1..j, and is trained to predict
    real token a + 1 + j: exactly what it sees and predicts in ``ParallelDrafter.propose``."""
    m = k - 1
    starts = torch.randint(0, len(ids) - block - k, (batch,), generator=generator)
    window = ids[starts[:, None] + torch.arange(block + k)]  # k more: the masks' targets past the window
    real, beyond = window[:, :block], window[:, 1:]
    # anchors a in 0..block-1, without repeats, per window
    anchor = torch.stack([torch.randperm(block, generator=generator)[:anchors].sort().values for _ in range(batch)])
    n = block + anchors * m
    j = torch.arange(1, m + 1).repeat(anchors)  # depth of each mask
    a = anchor.repeat_interleave(m, dim=1)  # [batch, anchors·m]: its anchor
    tokens = torch.cat([real, torch.full((batch, anchors * m), MASK)], 1)
    positions = torch.cat([torch.arange(block).expand(batch, -1), a + j], 1)
    targets = torch.cat([beyond[:, :block], beyond.gather(1, a + j)], 1)
    visible = torch.zeros(batch, n, n, dtype=torch.bool)
    visible[:, :block, :block] = torch.ones(block, block, dtype=torch.bool).tril()
    visible[:, block:, :block] = torch.arange(block)[None, None] <= a[:, :, None]
    group = torch.arange(anchors).repeat_interleave(m)
    same = (group[:, None] == group[None]) & (j[None] <= j[:, None])
    visible[:, block:, block:] = same
    return tokens, positions, visible, targets


class _FreshCache:
    """What ``Transformer.forward`` needs of a cache for one pass from empty, keeping each layer's keys and values
    as computed (no in-place writes), so that training can differentiate through the tree-attention path."""

    def __init__(self, batch: int, capacity: int):
        self.batch, self.capacity = batch, capacity
        self.lengths = torch.zeros(batch, dtype=torch.int64)
        self.layers = {}

    def reserve(self, positions, n_valid=None):
        pass

    def write(self, layer, k, v, positions):
        self.layers[layer] = (k, v)

    def read(self, layer, context):
        return self.layers[layer]


def loss(model: Transformer, tokens, positions, visible, targets, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(next-token loss of the real positions, loss of the masks), mean cross entropy in nats."""
    cache = _FreshCache(tokens.shape[0], tokens.shape[1])
    logits = model(tokens, cache, positions=positions, visible=visible)[..., :VOCAB_SIZE]
    flat = lambda x: x.flatten(0, 1)
    real = F.cross_entropy(flat(logits[:, :block]), flat(targets[:, :block]))
    masks = F.cross_entropy(flat(logits[:, block:]), flat(targets[:, block:]))
    return real, masks


def load_parallel(dtype=torch.float32, device="cpu") -> Transformer:
    """The shipped parallel drafter (``parallel_draft.pt``, its card in ``models.json`` under "parallel")."""
    card = model_card().get("parallel")
    if card is None:
        raise FileNotFoundError("no parallel drafter in models.json: python -m specnotes.tiny.train --which parallel")
    model = Transformer(ModelConfig(**card["config"]))
    with data_file("parallel_draft.pt").open("rb") as f:
        model.load_state_dict(torch.load(f, map_location="cpu", weights_only=True))
    return model.to(device=device, dtype=dtype).eval()


class ParallelDrafter:
    """k drafts per sequence in one pass of a parallel model (see the module docstring). ``passes`` counts its
    forward passes: one per iteration, whatever k."""

    takes_row_lengths = True  # propose(..., ks=): a decode worker on a budget drafts only what each row verifies

    def __init__(self, model: Transformer | None = None, mask: int = MASK):
        model = load_parallel() if model is None else model
        if not isinstance(model, Transformer):
            raise BadArgumentType(f"model must be a specnotes.tiny.model.Transformer, got {type(model).__name__}")
        self.mask = validate.integer("mask", mask, low=0, high=model.config.vocab_size - 1)
        self.model = model
        self.passes = 0

    @property
    def device(self):
        return self.model.lm_head.weight.device

    def start(self, prompts: list[torch.Tensor], capacity: int, cache=None):
        self.cache, last, passes = prefill(self.model, prompts, capacity + BLOCK, None, cache)
        self.passes += passes
        self.pending = last[:, None]
        self.pending_len = torch.ones(len(prompts), dtype=torch.int64, device=self.device)

    def propose(self, k: int, temperature: float, generator: torch.Generator | None = None, ks=None):
        """k drafts per sequence from one pass; ``ks`` [B]: row b needs only ks[b] of them (its pass then carries
        ks[b] - 1 masks, packed: a budget that verifies few slots drafts few too). Rows past ks[b] hold drafts
        of the model's own, never verified."""
        B = self.pending.shape[0]
        ks = torch.full((B,), k, dtype=torch.int64, device=self.device) if ks is None else ks.to(self.device)
        self.saved = (self.cache.lengths.clone(), self.pending.clone(), self.pending_len.clone())
        steps = torch.arange(int(self.pending_len.max()) + k - 1, device=self.device)
        masks = (ks - 1).clamp(min=0)
        # row b: its pending tokens, then its masks, then padding
        tokens = torch.where(steps < self.pending_len[:, None], self.pending.gather(
            1, steps.clamp(max=self.pending.shape[1] - 1).expand(B, -1)), self.mask)
        lengths = self.pending_len + masks
        logits = packed_forward(self.model, tokens, self.cache, lengths, keep=self.pending_len)
        self.passes += 1
        at = (self.pending_len - 1)[:, None] + torch.arange(k, device=self.device)
        probs = self.draft_probs(logits.gather(1, at[..., None].expand(-1, -1, logits.shape[-1])), temperature)
        return sample_from(probs, generator, validate=False), probs

    def draft_probs(self, logits: torch.Tensor, temperature: float) -> torch.Tensor:
        """q over the target's vocabulary: the mask's logit dropped *before* the softmax (it is never a draft)."""
        return logits_to_probs(logits[..., : self.mask], temperature)

    def commit(self, tokens: torch.Tensor, num_accepted: torch.Tensor, active: torch.Tensor | None = None):
        # the cache holds every token committed before this iteration; the new ones wait for the next pass
        width = int(num_accepted.max()) + 1
        pending, pending_len = tokens[:, :width].clamp(min=0), num_accepted + 1
        if active is not None:
            old_lengths, old_pending, old_len = self.saved
            self.cache.rollback(torch.where(active, self.cache.lengths, old_lengths))
            width = max(width, old_pending.shape[1])
            pad = lambda t: F.pad(t, (0, width - t.shape[1]))
            pending = torch.where(active[:, None], pad(pending), pad(old_pending))
            pending_len = torch.where(active, pending_len, old_len)
        self.pending, self.pending_len = pending, pending_len


def draft_accuracy(model: Transformer, text: str, k: int = BLOCK, stride: int = 16, context: int = 128) -> list[float]:
    """Greedy top-1 accuracy of each of the k drafts of one pass, over anchors every ``stride`` bytes of ``text``
    after ``context`` bytes of context: the card's held-out measure of each depth (no target involved)."""
    from specnotes.tiny.model import encode

    ids = encode(text)
    anchors = list(range(context, len(ids) - k - 1, stride))
    hits = torch.zeros(k)
    with torch.inference_mode():
        for i in range(0, len(anchors), 64):
            chunk = anchors[i: i + 64]
            prompts = [ids[a - context + 1: a + 1] for a in chunk]
            drafter = ParallelDrafter(model)
            drafter.start(prompts, context + 2 * k)
            drafts, _ = drafter.propose(k, 0.0)
            truth = torch.stack([ids[a + 1: a + 1 + k] for a in chunk])
            hits += (drafts.cpu() == truth).double().sum(0)
    return (hits / len(anchors)).tolist()
