"""Suffix decoding (Chapter 11): drafts read from a suffix tree over the prompt and earlier outputs, as Arctic
Inference builds them (Oliaro et al. 2024; vLLM and SGLang ship it as ``suffix``).

``SuffixTree`` holds every substring of its sequences up to ``max_depth`` tokens, each node counting how often its
path occurred; appending a token touches one node per depth (the suffixes that end there). To draft, the drafter
matches the last m tokens of the text for every m, walks from that node down the most frequent child while the
product of the counts' ratios stays at or above ``min_token_prob``, and stops after
``min(k, int(m·max_spec_factor + max_spec_offset))`` tokens: Arctic's rule (``suffix_tree.cc``). Each draft scores
the sum of those running probabilities; the best-scoring match wins, and the request's own tree wins a tie with
the tree of earlier outputs. So a long match, where text repeats, drafts long; a short one drafts little or
nothing. The draft length varies per request and per step.

Drafts are deterministic: q is one-hot, which the exact sampler keeps exact at any temperature, and a draft
shorter than k is padded and trimmed by ``generate.keep_proposed``. The work is host work, a Python loop over the
batch: ``SuffixDrafter.host_seconds`` times it, and ``cost.HostLookup`` prices it per sequence.
"""

from __future__ import annotations

import time

import torch

from specnotes import validate
from specnotes.tiny.model import VOCAB_SIZE


class SuffixTree:
    """Counted suffix trie of bounded depth over one or more token sequences (see the module docstring)."""

    def __init__(self, max_depth: int = 24):
        self.max_depth = validate.integer("max_depth", max_depth, low=1)
        self.count = [0]  # node -> occurrences of its path
        self.children: list[dict[int, int]] = [{}]
        self.depth = [0]

    def _child(self, node: int, token: int) -> int:
        child = self.children[node].get(token)
        if child is None:
            child = len(self.count)
            self.children[node][token] = child
            self.count.append(0)
            self.children.append({})
            self.depth.append(self.depth[node] + 1)
        return child

    def extend(self, active: list[int], tokens) -> list[int]:
        """Append ``tokens`` to a sequence whose suffixes end at the nodes ``active``; return the new ones."""
        for t in tokens:
            t = int(t)
            new = []
            for node in (0, *active):
                child = self._child(node, t)
                self.count[child] += 1
                if self.depth[child] < self.max_depth:
                    new.append(child)
            active = new
        return active

    def add(self, tokens) -> None:
        """Add a whole sequence (an earlier output)."""
        self.extend([], tokens)

    def find(self, tokens) -> int | None:
        """The node of the path ``tokens`` (None: it never occurred)."""
        node = 0
        for t in tokens:
            node = self.children[node].get(int(t))
            if node is None:
                return None
        return node

    def walk(self, node: int, limit: int, min_prob: float) -> tuple[list[int], float]:
        """From ``node``, follow the most frequent child while the running probability stays ≥ ``min_prob``, at most
        ``limit`` tokens: (tokens, score = the sum of the running probabilities)."""
        out, prob, score = [], 1.0, 0.0
        while len(out) < limit and self.children[node]:
            token, child = max(self.children[node].items(), key=lambda kv: (self.count[kv[1]], -kv[0]))
            prob *= self.count[child] / self.count[node]
            if prob < min_prob:
                break
            out.append(token)
            score += prob
            node = child
        return out, score

    def speculate(self, context: list[int], k: int, factor: float, offset: float, min_prob: float
                  ) -> tuple[list[int], float, int]:
        """Arctic's draft: the best-scoring walk over every match length m of ``context``'s suffix, each at most
        min(k, int(m·factor + offset)) tokens: (tokens, score, the match length it came from)."""
        best: tuple[list[int], float, int] = ([], 0.0, 0)
        for m in range(1, min(len(context), self.max_depth) + 1):
            node = self.find(context[-m:])
            if node is None:
                break  # a longer suffix cannot occur if this one does not
            limit = min(k, int(m * factor + offset + 1e-6))
            tokens, score = self.walk(node, limit, min_prob)
            if score > best[1]:
                best = (tokens, score, m)
        return best


class SuffixDrafter:
    """Drafts from a per-request suffix tree over its prompt and what it has generated, and from ``earlier``, a
    tree of earlier outputs shared by every request (None: none). Arctic's knobs and defaults: ``max_depth`` 64
    in Arctic (24 here, SGLang's default), ``max_spec_factor`` 1.0, ``max_spec_offset`` 0.0, ``min_token_prob``
    0.1. ``host_seconds`` adds up the time spent drafting and updating the trees."""

    def __init__(self, earlier: SuffixTree | None = None, max_depth: int = 24, max_spec_factor: float = 1.0,
                 max_spec_offset: float = 0.0, min_token_prob: float = 0.1, vocab_size: int = VOCAB_SIZE,
                 device="cpu"):
        self.max_depth = validate.integer("max_depth", max_depth, low=1)
        self.factor = validate.number("max_spec_factor", max_spec_factor, low=0)
        self.offset = validate.number("max_spec_offset", max_spec_offset)
        self.min_prob = validate.number("min_token_prob", min_token_prob, low=0, high=1)
        self.vocab_size = validate.integer("vocab_size", vocab_size, low=1)
        if earlier is not None and not isinstance(earlier, SuffixTree):
            raise validate.BadArgumentType(f"earlier must be a SuffixTree or None, got {type(earlier).__name__}")
        self.earlier = earlier
        self.device = torch.device(device)
        self.passes = 0  # no model passes, ever
        self.host_seconds = 0.0

    def start(self, prompts: list[torch.Tensor], capacity: int):
        t0 = time.perf_counter()
        self.history = [p.tolist() for p in prompts]
        self.trees = [SuffixTree(self.max_depth) for _ in prompts]
        self.active = [tree.extend([], h) for tree, h in zip(self.trees, self.history, strict=True)]
        self.host_seconds += time.perf_counter() - t0

    def draft(self, b: int, k: int) -> list[int]:
        """Row b's draft of at most k tokens: its own tree's, or the earlier outputs' where that scores higher."""
        context = self.history[b][-self.max_depth:]
        own = self.trees[b].speculate(context, k, self.factor, self.offset, self.min_prob)
        if self.earlier is not None:
            other = self.earlier.speculate(context, k, self.factor, self.offset, self.min_prob)
            if other[1] > own[1]:
                return other[0]
        return own[0]

    def propose(self, k: int, temperature: float, generator: torch.Generator | None = None):
        k = validate.integer("k", k, low=1)
        t0 = time.perf_counter()
        drafts = torch.zeros(len(self.history), k, dtype=torch.int64)
        proposed = torch.zeros(len(self.history), dtype=torch.int64)
        for b in range(len(self.history)):
            follow = self.draft(b, k)
            drafts[b, : len(follow)] = torch.tensor(follow, dtype=torch.int64)
            proposed[b] = len(follow)
        self.host_seconds += time.perf_counter() - t0
        self.proposed = proposed.to(self.device)
        probs = torch.nn.functional.one_hot(drafts, self.vocab_size).to(torch.float32)
        return drafts.to(self.device), probs.to(self.device)

    def commit(self, tokens: torch.Tensor, num_accepted: torch.Tensor, active: torch.Tensor | None = None):
        t0 = time.perf_counter()
        for b, history in enumerate(self.history):
            if active is None or bool(active[b]):
                new = tokens[b, : int(num_accepted[b]) + 1].tolist()
                history.extend(new)
                self.active[b] = self.trees[b].extend(self.active[b], new)
        self.host_seconds += time.perf_counter() - t0

    def remember(self, output) -> None:
        """Add a finished output to the tree of earlier outputs (one is made if there is none)."""
        if self.earlier is None:
            self.earlier = SuffixTree(self.max_depth)
        self.earlier.add(output.tolist() if isinstance(output, torch.Tensor) else list(output))


def host_time_per_step(histories: list[list[int]], k: int, repeats: int = 3, clock=time.perf_counter,
                       **knobs) -> float:
    """Seconds one ``propose`` takes for a batch whose texts are ``histories`` (each a token list): the fastest of
    ``repeats`` calls by ``clock``, trees built beforehand. The host cost a step pays for its B sequences."""
    drafter = SuffixDrafter(**knobs)
    drafter.start([torch.tensor(h, dtype=torch.int64) for h in histories], 0)
    best = float("inf")
    for _ in range(validate.integer("repeats", repeats, low=1)):
        t0 = clock()
        drafter.propose(k, 0.0)
        best = min(best, clock() - t0)
    return best


def host_line(batches, seconds) -> tuple[float, float]:
    """(seconds a step, seconds per sequence) of a straight line through host times measured at several batch sizes,
    by least squares, both at least 0: what ``cost.HostLookup(per_sequence=...)`` prices."""
    batches = validate.integers("batches", batches, low=1)
    seconds = [validate.number(f"seconds[{i}]", s, low=0) for i, s in enumerate(seconds)]
    if len(batches) != len(seconds) or len(set(batches)) < 2:
        raise validate.BadArgument("host_line needs one time per batch and at least two different batch sizes")
    n = len(batches)
    mb, ms = sum(batches) / n, sum(seconds) / n
    slope = sum((b - mb) * (s - ms) for b, s in zip(batches, seconds, strict=True)) / sum((b - mb) ** 2
                                                                                          for b in batches)
    slope = max(slope, 0.0)
    return max(ms - slope * mb, 0.0), slope
