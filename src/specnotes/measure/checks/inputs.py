"""The argument checks every check shares: a series of positive values, and increasing batches (or contexts)
that each series has one value for."""

from __future__ import annotations

from collections.abc import Sequence

from specnotes import validate


def _positive(name: str, values: Sequence[float]) -> list[float]:
    values = [validate.number(f"{name}[{i}]", v, low=0, low_open=True) for i, v in enumerate(values)]
    if not values:
        raise validate.BadArgument(f"{name} must hold at least one value")
    return values


def _batches(batches: Sequence[int], *series: tuple[str, Sequence[float]]) -> list[int]:
    batches = validate.integers("batches", batches, low=1)
    if any(b >= c for b, c in zip(batches, batches[1:], strict=False)):
        raise validate.BadArgument(f"batches must increase, got {batches}")
    for name, values in series:
        if len(values) != len(batches):
            raise validate.BadArgument(f"{name} has {len(values)} values for {len(batches)} batches")
    return batches
