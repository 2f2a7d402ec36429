"""Chapter 9's figures: a paged KV cache slot by slot (``paged_cache``), rows of them in one figure (``cache_story``),
and the admission time each prefix-cache hit rule costs (``recompute_vs_hit_rate``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from specnotes.pages.plots.style import (
    MARKERS,
    MAX_COLUMNS,
    MEASURED,
    MIN_FONT,
    MODEL,
    PALETTE,
    WIDTH,
    _axes,
    _legend,
    _title,
    house_style,
)

SLOT_COLORS = {  # Okabe-Ito, as the rest of the book; the pending-over-a-rejected-draft slot is also hatched
    "verified": "#0072B2",
    "draft": "#E69F00",
    "rejected": "#D55E00",
    "pending": "#009E73",
    "pending over a rejected draft": "#009E73",
    "free": "#EEEEEE",
}
SLOT_LABELS = {
    "verified": "verified token's K/V",
    "draft": "draft, awaiting the verdict",
    "rejected": "rejected draft's K/V (stale)",
    "pending": "pending token (K/V not yet computed)",
    "pending over a rejected draft": "pending token's slot, holding a rejected draft's K/V",
    "free": "free (never written)",
}


WRITTEN_EDGE = {"fill": False, "edgecolor": "#CC79A7", "linewidth": 3.0}  # the slots a verify pass just wrote


def _written_slots(view) -> range:
    """The slots the verify pass just wrote, for a view taken right after one (``stage == "verify"``): the pending
    token's, now verified, and the k drafts after it. Empty for any other stage."""
    if getattr(view, "stage", None) != "verify":
        return range(0)
    return range(max(view.verified - 1, 0), view.written)


def paged_cache(ax=None, view=None, *, title: str | None = None, legend: bool = True, source: str | None = None,
                flag: dict | None = None, fontsize: float = MIN_FONT):
    """One sequence's paged KV cache at one moment: a row per block (block 0 on top), a cell per slot, coloured
    by its state. A block registered in the prefix cache is labelled with its hash, in dark orange when it was
    published holding something other than verified tokens; a block served by a prefix-cache hit is outlined.
    Right after a verify pass (``view.stage == "verify"``) the k + 1 slots the pass wrote are outlined too: the
    pending token's slot, whose K/V the pass computed, and the k drafts.

    view: a ``kvcache.CacheView`` (anything with ``block_size``, ``blocks`` of ``states``, ``published``,
        ``hit`` and ``stale``, ``stage``, ``verified``, ``known`` and ``written``), read from a real cache by
        ``kvcache.Recorder``. flag: {hash: note} for blocks to point out (in dark orange), e.g. the stale block a
        request was served. fontsize: of every label (titles one point more). Returns the Axes.
    """
    flag = flag or {}
    if view is None or not view.blocks:
        raise ValueError("paged_cache needs a CacheView with at least one block")
    bs, n = view.block_size, len(view.blocks)
    label_room = 0.55 * bs  # the hash labels sit inside the axes, right of the slots, so no panel overlaps another
    with house_style():
        ax = _axes(ax)
        for j, block in enumerate(view.blocks):
            if len(block.states) != bs:
                raise ValueError(f"block {j} has {len(block.states)} slots, the view says {bs}")
            for i, state in enumerate(block.states):
                if state not in SLOT_COLORS:
                    raise ValueError(f"unknown slot state {state!r}; known: {', '.join(SLOT_COLORS)}")
                ax.add_patch(plt.Rectangle((i, n - 1 - j), 1, 1, facecolor=SLOT_COLORS[state], edgecolor="white",
                                           linewidth=1.0, hatch="xx" if state.startswith("pending over") else None))
            if block.hit:
                ax.add_patch(plt.Rectangle((0, n - 1 - j), bs, 1, fill=False, edgecolor="black", linewidth=2.2))
            if block.published is not None:
                stale = block.stale or block.published in flag
                label = f"#{block.published[:4]}" + ("\nnot all\nverified!" if block.stale else "")
                ax.text(bs + 0.3, n - 0.5 - j, label, va="center", ha="left", fontsize=fontsize, linespacing=0.95,
                        color="#D55E00" if stale else "0.2", fontweight="bold" if stale else "normal")
        for i in _written_slots(view):
            ax.add_patch(plt.Rectangle((i % bs, n - 1 - i // bs), 1, 1, **WRITTEN_EDGE))
        ax.set_xlim(0, bs + label_room)
        ax.set_ylim(0, n)
        ax.set_yticks([n - 0.5 - j for j in range(n)], [f"block {j}" + (" (hit)" if b.hit else "")
                                                        for j, b in enumerate(view.blocks)], fontsize=fontsize)
        step = max(1, bs // 4)
        ax.set_xticks([i + 0.5 for i in range(0, bs, step)], [str(i) for i in range(0, bs, step)], fontsize=fontsize)
        ax.tick_params(length=0)
        ax.grid(False)
        for side in ("left", "bottom"):
            ax.spines[side].set_visible(False)
        notes = [f"#{h[:4]}: {note}" for h, note in flag.items()
                 if any(b.published == h for b in view.blocks)]
        ax.set_xlabel("\n".join([f"slot ({bs} per block); #hash: published", f"verified {view.verified} · known "
                                 f"{view.known} · written {view.written}", *notes]), fontsize=fontsize, loc="left")
        _title(ax, title or f"Paged KV cache, {view.stage}", fontsize=fontsize)
        if legend:
            states = [s for s in SLOT_COLORS if any(s in b.states for b in view.blocks)]
            handles = [plt.Rectangle((0, 0), 1, 1, facecolor=SLOT_COLORS[s], edgecolor="0.6",
                                     hatch="xx" if s.startswith("pending over") else None) for s in states]
            labels = [SLOT_LABELS[s] for s in states]
            if _written_slots(view):
                handles.append(plt.Rectangle((0, 0), 1, 1, **WRITTEN_EDGE))
                labels.append(WRITTEN_LABEL)
            leg = ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(0, -0.3), ncol=1, fontsize=fontsize,
                            frameon=False, title=source)
            if source:
                leg.get_title().set_fontsize(fontsize)
    return ax


WRITTEN_LABEL = "written by this verify pass: the pending token and k drafts"
HIT_LABEL = "block served by a prefix-cache hit"


def cache_story(panels: Sequence, *, title: str, row_titles: Sequence[str] = (), notes: Sequence[str] = (),
                source: str | None = None, columns: int = 1, fontsize: float = MIN_FONT):
    """Rows of ``paged_cache`` panels in one figure at the house width (``WIDTH``): ``panels`` is a list of rows,
    each a list of ``(view, panel title)`` or ``(view, panel title, flag)`` (``paged_cache``'s flag);
    ``row_titles``: what each row is (e.g. the policy); ``notes``: one line under each row (what happened next).
    ``columns``: panels side by side (1: one under another, what a phone reads best; at most ``MAX_COLUMNS``); a
    longer row wraps onto more lines. One legend for every state any panel shows. Many panels (two rows of four,
    say): one figure per row, each its own call, so that every panel stays large. Returns the Figure."""
    rows = [list(r) for r in panels]
    if not rows or not all(rows):
        raise ValueError("cache_story needs at least one row of (view, title) panels")
    if not (isinstance(columns, int) and 1 <= columns <= MAX_COLUMNS):
        raise ValueError(f"columns: 1 to {MAX_COLUMNS} panels side by side, got {columns!r}")
    cols = min(columns, max(len(r) for r in rows))
    lines = [math.ceil(len(r) / cols) for r in rows]
    tallest = max(len(panel[0].blocks) for r in rows for panel in r)
    line_height = 0.3 * tallest + 2.4  # the slots, then the title above and the three-line label below
    heights = [g * line_height + 0.5 * (r < len(row_titles)) + 0.35 * (r < len(notes)) for r, g in enumerate(lines)]
    with house_style():
        fig = plt.figure(figsize=(WIDTH, sum(heights) + 1.9), layout="constrained")
        subfigs = fig.subfigures(len(rows), 1, squeeze=False, height_ratios=heights)[:, 0]
        spare = None  # a one-row story's empty cell, where the legend goes
        for r, (sub, row) in enumerate(zip(subfigs, rows, strict=True)):
            axes = sub.subplots(lines[r], cols, squeeze=False).flatten()
            for c, ax in enumerate(axes):
                if c < len(row):
                    paged_cache(ax, row[c][0], title=row[c][1], legend=False, flag=(row[c][2:] or [None])[0],
                                fontsize=fontsize)
                elif len(rows) == 1 and spare is None:
                    spare = ax
                    ax.axis("off")
                else:
                    ax.set_visible(False)
            if r < len(row_titles):
                sub.suptitle(row_titles[r], fontsize=fontsize + 1, fontweight="bold", x=0.01, ha="left", wrap=True)
            if r < len(notes):
                sub.supxlabel(notes[r], fontsize=fontsize, x=0.01, ha="left", color="0.15")
        views = [panel[0] for r in rows for panel in r]
        seen = [s for s in SLOT_COLORS if any(s in b.states for v in views for b in v.blocks)]
        handles = [plt.Rectangle((0, 0), 1, 1, facecolor=SLOT_COLORS[s], edgecolor="0.6",
                                 hatch="xx" if s.startswith("pending over") else None) for s in seen]
        labels = [SLOT_LABELS[s] for s in seen]
        if any(_written_slots(v) for v in views):
            handles.append(plt.Rectangle((0, 0), 1, 1, **WRITTEN_EDGE))
            labels.append(WRITTEN_LABEL)
        if any(b.hit for v in views for b in v.blocks):
            handles.append(plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="black", linewidth=2.2))
            labels.append(HIT_LABEL)
        if spare is not None:
            import textwrap

            spare.legend(handles, [textwrap.fill(label, 34) for label in labels], loc="center left", fontsize=fontsize,
                         frameon=False, title=textwrap.fill(source, 40) if source else None, title_fontsize=fontsize)
        else:
            fig.legend(handles, labels, loc="outside lower center", ncol=1, fontsize=fontsize, frameon=False,
                       title=source, title_fontsize=fontsize)
        fig.suptitle(title, wrap=True)
    return fig


COINCIDE = 0.03  # two rules' lines closer than this share of the axis coincide: the later one is dashed and named


def recompute_vs_hit_rate(ax=None, rules: Sequence = (), *, no_cache_ms: float, gap: tuple[str, str] | None = None,
                          title: str | None = None, source: str | None = None):
    """Admission time per request against the fraction of requests that hit the prefix cache, for each hit rule.

    rules: ``(label, ms per request when every request hits)``, measured; ``no_cache_ms``: ms per request with
        no prefix caching (every request a miss), measured. Both are drawn as markers at hit rates 1 and 0; the
        lines between them are the model: a fraction h of requests hits, so t(h) = h·t_hit + (1 − h)·t_miss.
        The gap between two rules at h is h times the recompute per hit; ``gap``: two labels, (with the
        recompute, without it), whose gap at h = 1 is marked. A rule whose time lies within ``COINCIDE`` of the
        axis of an earlier one's would hide under it: its line is dashed, its marker larger, and a note names both.
        Returns the Axes.
    """
    rules = [(str(label), float(ms)) for label, ms in rules]
    if not rules:
        raise ValueError("recompute_vs_hit_rate needs at least one rule")
    miss = float(no_cache_ms)
    if not (math.isfinite(miss) and miss > 0) or not all(math.isfinite(ms) and ms > 0 for _, ms in rules):
        raise ValueError("admission times must be finite and positive (ms)")
    h = np.linspace(0, 1, 50)
    top = max(miss, *(ms for _, ms in rules))
    with house_style():
        ax = _axes(ax)
        drawn = []
        for i, (label, ms) in enumerate(rules):
            color = PALETTE[i % len(PALETTE)]
            under = [other for other, o_ms in drawn if abs(o_ms - ms) < COINCIDE * top]
            style = {**MODEL, "linestyle": (0, (4, 3))} if under else MODEL  # dashed over a line it coincides with
            ax.plot(h, h * ms + (1 - h) * miss, color=color, label=f"model: {label}, linear in the hit rate", **style)
            ax.plot([1.0], [ms], color=color, marker=MARKERS[i % len(MARKERS)], label=f"measured: {label}, every "
                    "request hits", **{**MEASURED, "markersize": MEASURED["markersize"] + 3 * len(under)})
            if under:
                times = dict(rules)
                ax.annotate(f"{label} ({ms:.2f} ms) lies on\n{' and '.join(f'{o} ({times[o]:.2f} ms)' for o in under)}",
                            xy=(0.55, 0.55 * ms + 0.45 * miss), xytext=(0.03, 0.28 * top), fontsize=MIN_FONT,
                            color="0.2", arrowprops={"arrowstyle": "->", "color": "0.3"})
            drawn.append((label, ms))
        ax.plot([0.0], [miss], color="0.3", marker="s", label="measured: no prefix caching", **MEASURED)
        if gap is not None:
            times = dict(rules)
            if gap[0] not in times or gap[1] not in times:
                raise ValueError(f"gap must name two of the rules {list(times)}, got {gap}")
            hi, lo = times[gap[0]], times[gap[1]]
            ax.annotate("", xy=(1.0, hi), xytext=(1.0, lo), arrowprops={"arrowstyle": "<->", "color": "0.2"})
            ax.text(0.98, min(hi, lo) * 0.6, f"recompute per hit: {hi - lo:+.2f} ms", ha="right", va="top",
                    fontsize=MIN_FONT, color="0.2")  # under the lines, which all end near h = 1
        ax.set_xlim(-0.03, 1.03)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("Fraction of requests that hit the prefix cache")
        ax.set_ylabel("Admission time per request (ms)")
        _title(ax, title or "What the hit rule costs, per request")
        _legend(ax, source, below=True)
    return ax
