"""Comparing outputs with caching and without: the first diverging token, an assertion that names it, and how
acceptance moved between the drop and keep rules."""

from __future__ import annotations

import torch

from specnotes import validate


def first_divergence(reference: torch.Tensor, other: torch.Tensor) -> tuple[int, int] | None:
    """(row, position) of the first token where ``other`` differs from ``reference`` [B, n]; None if equal."""
    for name, tokens in (("reference", reference), ("other", other)):
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
            shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise validate.BadArgument(f"{name} must be a [B, n] tensor of token ids (a Generation's tokens), got "
                                       f"{shape}; for one sequence pass tokens[None]")
    if reference.shape != other.shape:
        raise ValueError(f"shapes differ: {tuple(reference.shape)} vs {tuple(other.shape)}")
    diff = (reference != other).nonzero()
    if not len(diff):
        return None
    row, pos = diff[(diff[:, 1] * reference.shape[0] + diff[:, 0]).argmin()].tolist()
    return row, pos


def assert_same_tokens(reference: torch.Tensor, other: torch.Tensor, label: str = "with caching"):
    """AssertionError naming the request and position of the first differing token, if any."""
    where = first_divergence(reference, other)
    if where is not None:
        row, pos = where
        raise AssertionError(f"{label}: request {row} diverges at new token {pos}: "
                             f"{int(reference[row, pos])} without caching, {int(other[row, pos])} with")


def describe_alpha_change(alpha_drop: float, alpha_keep: float) -> str:
    """Chapter 9: how acceptance moved when the drafter's last hit block was kept (``alpha_keep``) instead of dropped
    (``alpha_drop``). The words claim what the printed values (three decimals) show: "rose" where keep prints
    higher, "fell" where it prints lower, "was ... under both" where they print the same."""
    alpha_drop = validate.number("alpha_drop", alpha_drop, low=0, high=1)
    alpha_keep = validate.number("alpha_keep", alpha_keep, low=0, high=1)
    drop, keep = f"{alpha_drop:.3f}", f"{alpha_keep:.3f}"
    if drop == keep:
        return f"Acceptance was {drop} under both rules: the wrong drafter states changed no verdict that counts."
    moved = "rose" if alpha_keep > alpha_drop else "fell"
    return (f"Acceptance {moved} from {drop} under the drop rule to {keep} under keep. A drafter state computed from "
            "another continuation changes q, and a changed q can agree with p more often or less.")
