"""Drafters: whatever proposes k tokens per sequence for the target to verify.

Every drafter follows the same three-call protocol, driven by ``specnotes.tiny.generate``:

- ``start(prompts, capacity)``: take the prompts (a list of 1-D int64 tensors);
- ``propose(k, temperature, generator) -> (draft_tokens [B,k] int64, draft_probs [B,k,V])``;
- ``commit(tokens, num_accepted, active)``: the tokens the target emitted this iteration (the
  ``speculative_sample`` layout); rows where ``active`` is False emitted nothing and must be
  left as they were before ``propose``.

``DraftModelDrafter`` runs a small autoregressive model with its own KV cache: k sequential
passes of one token per sequence (AI = B each; see DESIGN §2). ``EarlyExitDrafter`` is the same
loop over the target's first j layers and its early-exit head (self-speculation, LayerSkip-style).
``NgramDrafter`` reads no weights: it copies what followed the last n tokens earlier in the text.

A drafter that may propose fewer than k tokens for a sequence sets ``proposed`` ([B] int64) in
``propose``; its padding drafts are one-hot, and ``speculative_generate`` keeps at most ``proposed[b]``
of them (see ``generate.keep_proposed``).
"""

from __future__ import annotations

import torch

from specnotes import validate
from specnotes.sampling.exact import logits_to_probs, sample_from
from specnotes.tiny.model import VOCAB_SIZE, Transformer, prefill
from specnotes.validate import BadArgument, BadArgumentType


class DraftModelDrafter:
    """Drafts with a small model. Its cache holds every committed token except the last one or two
    ("pending"): after an iteration where all k drafts were accepted, the k-th draft was never fed
    to the draft model, so it is fed next time together with the bonus token, in the same pass."""

    def __init__(self, model: Transformer, exit_layer: int | None = None):
        if not isinstance(model, Transformer):
            raise BadArgumentType(f"model must be a specnotes.tiny.model.Transformer, got {type(model).__name__}")
        model.check_exit_layer(exit_layer)
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
        self.cache, last, passes = prefill(self.model, prompts, capacity, self.exit_layer, cache)
        self.passes += passes
        self.pending = torch.stack([last, torch.zeros_like(last)], 1)
        self.pending_len = torch.ones(len(prompts), dtype=torch.int64, device=self.device)

    def propose(self, k: int, temperature: float, generator: torch.Generator | None = None):
        """k >= 1 drafts per sequence (``speculative_generate`` has checked k and the temperature)."""
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
            tokens.append(sample_from(q, generator, validate=False))
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
        if not isinstance(target, Transformer):
            raise BadArgumentType(f"target must be a specnotes.tiny.model.Transformer, got {type(target).__name__}")
        exit_layer = target.config.exit_layer if exit_layer is None else exit_layer
        if exit_layer is None or exit_layer == target.config.n_layers:
            raise BadArgument("EarlyExitDrafter needs a target with an early-exit head (config.exit_layer) and an "
                              f"exit_layer below its {target.config.n_layers} layers, got exit_layer={exit_layer}")
        super().__init__(target, exit_layer)


class NgramDrafter:
    """Prompt lookup (n-gram drafting): no weights, no passes. For each sequence, take its last n tokens
    (n = ``max_ngram`` down to ``min_ngram``, the longest that matches), find their first earlier occurrence
    in the prompt and the text generated so far, and propose the (up to k) tokens that followed it.

    This is the rule of Hugging Face's prompt-lookup decoding (``PromptLookupCandidateGenerator``):
    the leftmost match whose continuation is not empty; the continuation may be shorter than k and is
    then proposed as it is (``proposed`` < k); no match proposes nothing. Drafts are deterministic: q is
    one-hot, which the exact sampler handles at any temperature.
    """

    def __init__(self, max_ngram: int = 2, min_ngram: int = 1, vocab_size: int = VOCAB_SIZE, device="cpu"):
        self.max_ngram = validate.integer("max_ngram", max_ngram, low=1)
        self.min_ngram = validate.integer("min_ngram", min_ngram, low=1, high=self.max_ngram)
        self.vocab_size = validate.integer("vocab_size", vocab_size, low=1)
        self.device = torch.device(device)
        self.passes = 0  # no model passes, ever
        self.lookups = 0

    def start(self, prompts: list[torch.Tensor], capacity: int):
        self.history = [p.tolist() for p in prompts]

    def lookup(self, history: list[int], k: int) -> list[int]:
        """The continuation after the first earlier occurrence of the longest matching suffix."""
        self.lookups += 1
        text = torch.tensor(history)
        for n in range(min(self.max_ngram, len(history) - 1), self.min_ngram - 1, -1):
            windows = text.unfold(0, n, 1)  # every n-gram of the text, the suffix itself included
            for start in (windows == text[-n:]).all(1).nonzero().flatten().tolist():
                follow = history[start + n: start + n + k]
                if follow:
                    return follow
        return []

    def propose(self, k: int, temperature: float, generator: torch.Generator | None = None):
        k = validate.integer("k", k, low=1)
        drafts = torch.zeros(len(self.history), k, dtype=torch.int64)
        proposed = torch.zeros(len(self.history), dtype=torch.int64)
        for b, history in enumerate(self.history):
            follow = self.lookup(history, k)
            drafts[b, : len(follow)] = torch.tensor(follow, dtype=torch.int64)
            proposed[b] = len(follow)
        self.proposed = proposed.to(self.device)
        probs = torch.nn.functional.one_hot(drafts, self.vocab_size).to(torch.float32)
        return drafts.to(self.device), probs.to(self.device)

    def commit(self, tokens: torch.Tensor, num_accepted: torch.Tensor, active: torch.Tensor | None = None):
        for b, history in enumerate(self.history):
            if active is None or bool(active[b]):
                history.extend(tokens[b, : int(num_accepted[b]) + 1].tolist())


def edit_task(passage: str, edit_rate: float, generator: torch.Generator | None = None) -> tuple[str, str]:
    """A prompt and the output a model would write for "repeat this passage with some words changed":
    (passage + an instruction, the passage with each word replaced, with probability ``edit_rate``, by another
    word of the passage). Its output copies its input, the case prompt lookup was made for."""
    edit_rate = validate.probability("edit_rate", edit_rate)
    words = passage.split(" ")
    draws = torch.rand(len(words), generator=generator).tolist()
    picks = torch.randint(len(words), (len(words),), generator=generator).tolist()
    edited = [words[p] if u < edit_rate and words[p] != w else w for w, u, p in zip(words, draws, picks, strict=True)]
    return passage + "\n\nThe same passage, revised:\n", " ".join(edited)


def quote_task(passage: str, lead: int = 30) -> str:
    """A "passage, then start quoting it" prompt: ``passage``, a blank line, and its first ``lead`` characters
    again. A model that copies from its context goes on with the rest of the passage, every byte of which
    prompt lookup finds in the prompt; a model that does not copy writes text of its own."""
    lead = validate.integer("lead", lead, low=1)
    if len(passage) <= lead:
        raise BadArgument(f"the passage ({len(passage)} characters) must be longer than lead={lead}")
    return passage + "\n\n" + passage[:lead]


@torch.inference_mode()
def copy_bits(model: Transformer, passage: str) -> tuple[float, float]:
    """Bits per byte ``model`` needs for ``passage`` (every byte after its first) the first time, and again when
    the passage is written a second time after a blank line. A model that copies from its context needs far
    fewer bits the second time; one that does not, about as many."""
    from specnotes.tiny.model import encode

    once = encode(passage)
    n = len(once)
    ids = torch.cat([once, encode("\n\n"), once])[None].to(model.lm_head.weight.device)
    bits = -torch.log_softmax(model(ids)[0, :-1].double(), -1).gather(1, ids[0, 1:, None])[:, 0] / torch.log(
        torch.tensor(2.0, dtype=torch.float64))
    second = ids.shape[1] - n  # where the repeat starts
    return float(bits[: n - 1].mean()), float(bits[second:].mean())
