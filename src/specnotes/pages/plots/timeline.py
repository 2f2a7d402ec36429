"""One speculative iteration on a timeline, to scale, against the decode steps it replaces (``iteration_rows``,
``iteration_timeline``, Chapter 2)."""

from __future__ import annotations

from collections.abc import Sequence

from specnotes.pages.plots.style import MIN_FONT, PALETTE, _axes, _kind, _legend, _time_unit, _title, house_style

PASS_COLORS = {"draft": PALETTE[1], "verify": PALETTE[0], "decode": PALETTE[2]}
PASS_NAMES = {"draft": "draft step: one draft pass, 1 token per sequence",
              "verify": "verify pass: the target over k + 1 tokens per sequence",
              "decode": "decode step: the target over 1 token per sequence"}


def iteration_rows(kind: str, k: int, tokens: float, t_decode: float, t_draft: float, t_verify: float) -> list:
    """The two rows of :func:`iteration_timeline` for one source of times (``kind``: "model" | "measured"):
    plain decoding, ``tokens`` decode steps (E[N]; a fractional last step is drawn as a fraction), and one
    speculative iteration, ``k`` draft steps then the verify pass, which yields ``tokens`` on average."""
    _kind(kind)
    if k < 1 or tokens <= 0 or min(t_decode, t_draft, t_verify) <= 0:
        raise ValueError(f"need k >= 1, tokens > 0 and positive times; got k={k}, tokens={tokens}, "
                         f"times {t_decode}, {t_draft}, {t_verify}")
    whole, part = int(tokens), tokens - int(tokens)
    plain = [("decode", t_decode)] * whole + ([("decode", part * t_decode)] if part > 1e-9 else [])
    spec = [("draft", t_draft)] * k + [("verify", t_verify)]
    return [(f"{kind}: plain decoding,\nE[N] = {tokens:.2f} steps", plain, kind),
            (f"{kind}: speculative,\n{k} drafts + verify", spec, kind)]


def iteration_timeline(ax=None, rows: Sequence = (), *, legend: bool = True, title: str | None = None,
                       source: str | None = None):
    """Gantt chart of passes to scale: each row ``(label, [(pass, seconds), ...], "model" | "measured")`` is a
    bar of back-to-back passes ("draft", "verify" or "decode"); measured rows filled, model rows hatched.
    A row made of draft and verify passes is labelled with its speedup over the plain-decoding row of the
    same kind above it (plain time / speculative time). Top row first. The legend sits under the axes
    (``legend=False`` leaves it out, e.g. on the first of two panels). Returns the Axes."""
    from matplotlib.patches import Patch

    if not rows:
        raise ValueError("iteration_timeline needs at least one row")
    for label, segments, kind in rows:
        _kind(kind)
        if not segments:
            raise ValueError(f"{label}: a row needs at least one pass")
        for name, seconds in segments:
            if name not in PASS_COLORS:
                raise ValueError(f"{label}: a pass is one of {sorted(PASS_COLORS)}, got {name!r}")
            if not seconds > 0:
                raise ValueError(f"{label}: a {name} pass of {seconds} s")
    scale, unit = _time_unit(max(sum(s for _, s in segments) for _, segments, _ in rows))
    plain: dict[str, float] = {}
    with house_style():
        ax = _axes(ax)
        for i, (_, segments, kind) in enumerate(rows):
            y, start = len(rows) - 1 - i, 0.0
            for name, seconds in segments:
                color = PASS_COLORS[name]
                style = ({"facecolor": color, "edgecolor": "white"} if kind == "measured"
                         else {"facecolor": "white", "edgecolor": color, "hatch": "///"})
                ax.broken_barh([(start / scale, seconds / scale)], (y - 0.32, 0.64), linewidth=1.2, **style)
                start += seconds
            names = {name for name, _ in segments}
            if names == {"decode"}:
                plain[kind] = start
            elif kind in plain and "verify" in names:
                ax.annotate(f"S = {plain[kind] / start:.2f}×", (start / scale, y), xytext=(6, 0),
                            textcoords="offset points", va="center", fontsize=MIN_FONT, fontweight="bold")
        ax.set_yticks(range(len(rows)), [label for label, _, _ in reversed(rows)])
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.grid(False, axis="y")
        ax.set_xlim(0, max(sum(s for _, s in segments) for _, segments, _ in rows) / scale * 1.18)
        ax.set_xlabel(f"Time ({unit}), to scale")
        _title(ax, title or "One speculative iteration against the decode steps it replaces")
        handles = [Patch(facecolor=PASS_COLORS[n], edgecolor="white", label=PASS_NAMES[n]) for n in PASS_COLORS]
        kinds = {kind for _, _, kind in rows}
        if "model" in kinds:
            handles.append(Patch(facecolor="white", edgecolor="0.3", hatch="///", label="model: hatched"))
        if "measured" in kinds:
            handles.append(Patch(facecolor="0.3", edgecolor="white", label="measured: filled"))
        if legend:
            _legend(ax, source, handles=handles, below=True)
    return ax
