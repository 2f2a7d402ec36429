"""Drafters: whatever proposes k tokens per sequence for the target to verify.

Every drafter follows the same three-call protocol, driven by ``specnotes.generate``:

- ``start(prompts, capacity)``: take the prompts (a list of 1-D int64 tensors);
- ``propose(k, temperature, generator) -> (draft_tokens [B,k] int64, draft_probs [B,k,V])``;
- ``commit(tokens, num_accepted, active)``: the tokens the target emitted this iteration (the
  ``speculative_sample`` layout); rows where ``active`` is False emitted nothing and must be
  left as they were before ``propose``.

``DraftModelDrafter`` runs a small autoregressive model with its own KV cache: k sequential
passes of one token per sequence (AI = B each; see DESIGN §2). ``EarlyExitDrafter`` is the same
loop over the target's first j layers and its early-exit head (self-speculation, LayerSkip-style).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from specnotes.model import KVCache, Transformer
from specnotes.sampling import logits_to_probs, sample_from


def pad_prompts(prompts: list[torch.Tensor], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad 1-D prompts into [B, max_len]; also return their lengths [B]."""
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.int64)
    padded = torch.full((len(prompts), int(lengths.max())), pad, dtype=torch.int64)
    for b, p in enumerate(prompts):
        padded[b, : len(p)] = p
    return padded, lengths


class DraftModelDrafter:
    """Drafts with a small model. Its cache holds every committed token except the last one or two
    ("pending"): after an iteration where all k drafts were accepted, the k-th draft was never fed
    to the draft model, so it is fed next time together with the bonus token, in the same pass."""

    def __init__(self, model: Transformer, exit_layer: int | None = None):
        self.model = model
        self.exit_layer = exit_layer
        self.passes = 0

    def forward(self, tokens, n_valid=None):
        return self.model(tokens, self.cache, n_valid=n_valid, exit_layer=self.exit_layer)

    @property
    def device(self):
        return self.model.lm_head.weight.device

    def start(self, prompts: list[torch.Tensor], capacity: int, cache=None):
        """``cache``: an empty cache of your own (default: a new ``KVCache``), or one that already
        holds ``cache.lengths[b]`` leading tokens of prompt b (a prefix-cache hit, Chapter 9)."""
        B = len(prompts)
        if cache is None:
            config = self.model.config
            layers = self.model.check_exit_layer(self.exit_layer)  # an early exit caches only its layers
            config = replace(config, n_layers=layers, exit_layer=None)
            cache = KVCache(config, B, capacity, self.model.lm_head.weight.dtype, self.device)
        self.cache = cache
        done = cache.lengths.tolist()
        rest, lengths = pad_prompts([p[n:] for p, n in zip(prompts, done, strict=True)])
        padded, lengths = rest.to(self.device), lengths.to(self.device)
        if padded.shape[1] > 1:  # prefill every prompt but its last token (ragged: padding masked)
            self.forward(padded[:, :-1], n_valid=lengths - 1)
            self.passes += 1
        rows = torch.arange(B, device=self.device)
        self.pending = torch.stack([padded[rows, lengths - 1], torch.zeros_like(lengths)], 1)
        self.pending_len = torch.ones(B, dtype=torch.int64, device=self.device)

    def propose(self, k: int, temperature: float, generator: torch.Generator | None = None):
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        B = self.pending.shape[0]
        rows = torch.arange(B, device=self.device)
        self.saved = (self.cache.lengths.clone(), self.pending.clone(), self.pending_len.clone())
        self.committed = self.cache.lengths + self.pending_len  # tokens committed so far
        width = int(self.pending_len.max())
        logits = self.forward(self.pending[:, :width], n_valid=self.pending_len)
        logits = logits[rows, self.pending_len - 1]
        tokens, probs = [], []
        for i in range(k):
            if i:
                logits = self.forward(tokens[-1][:, None])[:, 0]
            self.passes += 1
            q = logits_to_probs(logits, temperature)
            tokens.append(sample_from(q, generator))
            probs.append(q)
        return torch.stack(tokens, 1), torch.stack(probs, 1)

    def commit(self, tokens: torch.Tensor, num_accepted: torch.Tensor, active: torch.Tensor | None = None):
        k = tokens.shape[1] - 1
        # the cache now holds the committed tokens and drafts 1..k-1; keep what was accepted
        kept = num_accepted.clamp(max=k - 1)
        new_lengths = self.committed + kept
        index = kept[:, None] + torch.arange(2, device=self.device)
        pending = tokens.gather(1, index.clamp(max=k)).clamp(min=0)
        pending_len = num_accepted + 1 - kept
        if active is not None:
            old_lengths, old_pending, old_len = self.saved
            new_lengths = torch.where(active, new_lengths, old_lengths)
            pending = torch.where(active[:, None], pending, old_pending)
            pending_len = torch.where(active, pending_len, old_len)
        self.cache.rollback(new_lengths)
        self.pending, self.pending_len = pending, pending_len


class EarlyExitDrafter(DraftModelDrafter):
    """Self-speculation: draft with the target's first ``exit_layer`` blocks and its early-exit head.

    It keeps its own cache of those layers; their keys and values equal the target's for the
    same tokens, so a serving system would share them (LayerSkip) rather than store them twice.
    """

    def __init__(self, target: Transformer, exit_layer: int | None = None):
        exit_layer = target.config.exit_layer if exit_layer is None else exit_layer
        if exit_layer is None or exit_layer >= target.config.n_layers:
            raise ValueError("EarlyExitDrafter needs a target with an early-exit head (config.exit_layer)")
        super().__init__(target, exit_layer)
