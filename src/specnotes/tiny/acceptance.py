"""Acceptance that is not one number (Chapter 11): what a generation's statistics say by draft position and by
place in the sequence, and E[N] predicted on prompts the rates were not measured on.

- ``position_counts``: per draft position i, how many drafts were checked there (every earlier draft passed) and how
  many passed: the conditional rate α_i is their ratio (``GenerationStats.alpha_by_position``), with a binomial
  standard error from the counts.
- ``by_place``: the pooled α of the drafts whose iteration started in each band of sequence positions (prompt and
  generated tokens before it): acceptance against the place in the context, as speculators PR #684 reports it for
  an EAGLE-3 head at 2k to 20k tokens.
- ``held_out``: E[N] measured on one set of prompts beside what the rates measured on another predict, per position
  (``cost.expected_tokens_by_position``) and as one i.i.d. α (``cost.pooled_alpha``): the per-position model judged
  out of sample.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specnotes import validate
from specnotes.analytic import cost
from specnotes.tiny.generate import GenerationStats


def position_counts(stats: GenerationStats) -> tuple[list[int], list[int]]:
    """(checked, passed) per draft position 1..k over every (iteration, sequence) of ``stats``."""
    accepted = stats.accepted[stats.active]
    proposed = stats.drafts_proposed[stats.active]
    checked = [int(((accepted >= i) & (proposed > i)).sum()) for i in range(stats.k)]
    passed = [int((accepted >= i + 1).sum()) for i in range(stats.k)]
    return checked, passed


def merged_counts(runs: Sequence[GenerationStats]) -> tuple[list[int], list[int]]:
    """``position_counts`` of several runs with the same k, added."""
    if not runs:
        raise validate.BadArgument("runs must hold at least one generation's statistics")
    counts = [position_counts(r) for r in runs]
    return [sum(c[0][i] for c in counts) for i in range(runs[0].k)], [sum(c[1][i] for c in counts)
                                                                      for i in range(runs[0].k)]


def rates(checked: Sequence[int], passed: Sequence[int]) -> list[float]:
    """Conditional α per position; a position never checked gets the last rate measured (0 if none was)."""
    out, last = [], 0.0
    for n, a in zip(checked, passed, strict=True):
        last = a / n if n else last
        out.append(last)
    return out


def by_place(stats: GenerationStats, prompt_lengths: Sequence[int], edges: Sequence[int]) -> list[tuple[int, int]]:
    """(drafts checked, drafts passed) for the iterations that started at a sequence position in [edges[j],
    edges[j + 1]) (the last band open-ended), pooled over positions in the draft. ``prompt_lengths[b]``: tokens of
    prompt b."""
    if len(prompt_lengths) != stats.batch:
        raise validate.BadArgument(f"prompt_lengths must give one length per sequence: {stats.batch}")
    edges = validate.integers("edges", edges, low=0)
    if edges != sorted(set(edges)):
        raise validate.BadArgument(f"edges must increase, got {edges}")
    gained = stats.tokens_per_iteration  # [iterations, B]
    start = torch.tensor(prompt_lengths)[None] + torch.cumsum(gained, 0) - gained  # position each iteration began
    accepted, proposed, active = stats.accepted, stats.drafts_proposed, stats.active
    checked = torch.where(accepted < proposed, accepted + 1, accepted)
    band = torch.bucketize(start, torch.tensor(edges[1:]), right=True)
    return [(int(checked[active & (band == j)].sum()), int(accepted[active & (band == j)].sum()))
            for j in range(len(edges))]


def held_out(fit: Sequence[GenerationStats], test: Sequence[GenerationStats]) -> dict:
    """E[N] measured on ``test`` against the predictions of the rates measured on ``fit`` (same k): per position,
    and with one i.i.d. α (accepted over checked on ``fit``); each with its relative error."""
    k = fit[0].k
    if any(r.k != k for r in (*fit, *test)):
        raise validate.BadArgument("fit and test must share one k")
    alphas = rates(*merged_counts(fit))
    iterations = sum(int(r.active.sum()) for r in test)
    measured = sum(float(r.tokens_per_iteration[r.active].sum()) for r in test) / iterations
    per_position = cost.expected_tokens_by_position(alphas)
    iid = cost.expected_tokens(cost.pooled_alpha(alphas), k)
    return {"k": k, "measured": measured, "per_position": per_position, "iid": iid,
            "per_position_error": per_position / measured - 1, "iid_error": iid / measured - 1,
            "alphas": alphas, "pooled_alpha": cost.pooled_alpha(alphas), "iterations": iterations}


def per_sequence_tokens(stats: GenerationStats) -> list[float]:
    """Each sequence's own tokens per iteration: how much E[N] varies from prompt to prompt."""
    gained, active = stats.tokens_per_iteration, stats.active
    return [float(gained[active[:, b], b].double().mean()) for b in range(stats.batch) if bool(active[:, b].any())]


def relative_error(stats: GenerationStats) -> float:
    """The standard error of the measured E[N] from prompt to prompt, over E[N]: the sequences' own tokens per
    iteration, their spread over the square root of their number (each sequence weighted alike)."""
    values = per_sequence_tokens(stats)
    if len(values) < 2:
        raise validate.BadArgument("a relative error needs at least 2 sequences")
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return (var / len(values)) ** 0.5 / mean
