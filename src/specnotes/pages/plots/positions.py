"""Chapter 11's plots: acceptance against the draft position (``acceptance_by_position``) and serving policies'
tokens per second against the batch, relative to plain decoding, with each point's spread (``policies_vs_batch``)."""

from __future__ import annotations

from collections.abc import Sequence

from specnotes.pages.plots.style import (
    MARKERS,
    MEASURED,
    PALETTE,
    _axes,
    _curve,
    _legend,
    _plain_log_ticks,
    _title,
    house_style,
)


def acceptance_by_position(ax=None, curves: Sequence = (), *, title: str, ylabel: str, source: str | None = None):
    """A rate against the draft position 1..k. ``curves``: ``(label, positions, rates, "model" | "measured")``,
    for a measured curve optionally a fifth element, each point's standard error (error bars). Returns the Axes."""
    if not curves:
        raise ValueError("acceptance_by_position needs at least one curve")
    with house_style():
        ax = _axes(ax)
        for i, (label, positions, rates, kind, *errors) in enumerate(curves):
            positions, rates = list(positions), [float(r) for r in rates]
            if len(positions) != len(rates):
                raise ValueError(f"{label}: {len(positions)} positions but {len(rates)} rates")
            _curve(ax, i, label, positions, rates, kind, list(errors[0]) if errors else None)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("Draft position i")
        ax.set_ylabel(ylabel)
        _title(ax, title)
        _legend(ax, source, below=True)
    return ax


def policies_vs_batch(ax=None, curves: Sequence = (), *, title: str, ylabel: str, source: str | None = None):
    """Each policy's measured tokens/s over plain decoding's against the batch (log2 x axis), with 1 marked.
    ``curves``: ``(label, batches, values, lows, highs)``: the median over the repeats and its range."""
    if not curves:
        raise ValueError("policies_vs_batch needs at least one curve")
    with house_style():
        ax = _axes(ax)
        for i, (label, batches, values, lows, highs) in enumerate(curves):
            batches, values = list(batches), [float(v) for v in values]
            if not len(batches) == len(values) == len(lows) == len(highs):
                raise ValueError(f"{label}: batches, values, lows and highs must have one entry each")
            errors = [[v - lo for v, lo in zip(values, lows, strict=True)],
                      [hi - v for v, hi in zip(values, highs, strict=True)]]
            ax.errorbar(batches, values, yerr=errors, color=PALETTE[i % len(PALETTE)], marker=MARKERS[i % len(
                MARKERS)], capsize=3, label=f"measured: {label}", **{**MEASURED, "linestyle": ":", "linewidth": 1})
        ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1, label="plain decoding (1×)")
        ax.set_xscale("log", base=2)
        _plain_log_ticks(ax)
        ax.set_xlabel("Batch size B (requests in flight)")
        ax.set_ylabel(ylabel)
        _title(ax, title)
        _legend(ax, source, below=True)
    return ax
