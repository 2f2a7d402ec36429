"""``plot``: the report's S(B) as its table has it (``specnotes.pages.plots``): S and the band the verdicts use, the
batches where it pays or loses shaded, the reader's measured points, and a legend made of the report's own terms."""

from __future__ import annotations

from specnotes.advise.markdown import _model_column, s_note
from specnotes.advise.words import _k_short

NBSP = "\u00a0"


def title_lines(report: dict) -> str:
    """The deployment on short lines: the target and drafter; the GPU, tp, dtype and context. Each "name = value"
    is kept on one line."""
    dep = report["deployment"]
    drafter = dep["draft"]["name"] if dep["draft"]["kind"] == "model" else dep["draft"]["kind"]
    keep = lambda text: text.replace(" = ", f"{NBSP}={NBSP}").replace(" × ", f"{NBSP}×{NBSP}")
    return "\n".join([f"{dep['target']['name']} + {drafter}",
                      keep(f"{dep['gpu']['name']} × {dep['tp']}, {dep['math_dtype']}, L = {dep['context_tokens']}")])


def legend_terms(report: dict) -> list[str]:
    """The legend's entries, each in the report's own words: S with its k and the model's S alone as the table's
    note names them, the band as the note defines it, the verdicts shaded as the recommendation says them, the
    table's "(no memory)", its measured marks, S = 1 and the batch asked for."""
    dep, v = report["deployment"], report["verdict_batches"]
    terms = [f"S ({_k_short(report)})" if dep["band"] is not None else f"S, model ({_k_short(report)})"]
    if _model_column(report):
        terms.append("model: the model's S alone")
    if dep["band"] is not None and report["curve"]:
        terms.append(_band_term(report))
    asked = _asked(report)
    if v is not None:
        terms += [f"{name}: where the whole band is {side} 1" for name, side in (("pays", "above"), ("loses", "below"))
                  if _inside(v[name], *asked)]
    elif _inside(report["paying_batches"], *asked):
        terms.append("the model alone: S > 1")
    if report["max_batch"] is not None and report["max_batch"] < _shown(report)[1]:
        terms.append("(no memory): the batch does not fit in memory")
    anchor = dep["anchor"]
    if anchor and anchor["measured"]:
        terms.append("measured: (a) anchored on")
    if anchor and anchor["held_back"]:
        terms.append("measured: (h) held back for comparison")
    terms.append("S = 1: as fast as plain decoding")
    lo, hi = dep["batch"]
    if lo == hi:
        terms.append(f"B = {lo}")
    return terms


def _band_term(report: dict) -> str:
    """The key table's note on the band ("band: where the measured S lay for 90% of ..."), its own words."""
    note = s_note(report)
    return note[note.index("band: "):].split(";")[0].split(",")[0]


def _asked(report: dict) -> tuple[int, int]:
    """The batches asked for that the verdicts speak of (a single batch: none shaded, a line marks it)."""
    lo, hi = report["deployment"]["batch"]
    return (lo, min(hi, report["limit"])) if lo < hi else (1, 0)


def _shown(report: dict) -> tuple[int, int]:
    """The batches the figure spans: those asked for, or around a single batch the curve's."""
    lo, hi = report["deployment"]["batch"]
    batches = [c[0] for c in report["curve"]] or [lo]
    return (lo, hi) if lo < hi else (batches[0], max(batches[-1], hi))


def _inside(ranges, lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(a, lo), min(b, hi)) for a, b in ranges if b >= lo and a <= hi]


SPLIT_BARS = 8  # batches the time split shows at most


def time_splits(report: dict) -> list[tuple[int, dict]]:
    """(B, {term: its seconds in an iteration / T_decode}) at up to ``SPLIT_BARS`` of the report's batches that fit
    (powers of two, spread over them): the model's iteration split by term (``cost.breakdown`` with the
    deployment's knobs, its k at each batch), where the speedup goes. A row's own "split" where the report holds
    one; else rebuilt from the report's command line. Empty without one."""
    import math

    rows = [r for r in report["rows"] if r["fits"] and r["batch"] & (r["batch"] - 1) == 0]
    if len(rows) > SPLIT_BARS:
        step = (len(rows) - 1) / (SPLIT_BARS - 1)
        rows = [rows[round(i * step)] for i in range(SPLIT_BARS)]
    if rows and all("split" in r for r in rows):
        return [(r["batch"], dict(r["split"]["relative"])) for r in rows]  # the row's cost.Split.to_json()
    if not rows or not report["argv"]:
        return []
    import shlex

    from specnotes.advise.flags import from_args, parser
    from specnotes.advise.model import _model
    from specnotes.analytic import cost

    dep = from_args(parser().parse_args(shlex.split(report["argv"])))
    out = []
    for r in rows:
        split = cost.breakdown(dep.target, dep.draft, dep.accel, r["batch"], r["k"], dep.context,
                               widths=dep.tree, **_model(dep))
        out.append((r["batch"], {t: v for t, v in split.relative().items() if math.isfinite(v)}))
    return out


def plot(report: dict, ax=None, title: str | None = None, split: bool = True):
    """S(B) up to the memory limit, as the report's table has it: S (the band's centre) as a line, the model's own S
    dashed where the table shows it, the band the verdicts use (``report["curve_band"]``: an α range's ends
    included), "pays" and "loses" shaded where the whole band is above or below 1, batches that do not fit
    greyed, and the reader's measured points (anchored on, held back) as markers. The axes fit the band; the
    legend, under the axes, is ``legend_terms``. Without ``ax`` (and with ``split``), a second panel under it:
    the model's iteration split by term at the report's batches (``time_splits``), where its speedup goes.
    Returns the S(B) Axes (the split's is ``ax.figure.axes[1]``)."""
    from specnotes.pages import plots

    splits = time_splits(report) if ax is None and split else []
    if ax is None and splits:
        _, (ax, below) = plots.figure(2, height=8.0)
        dep = report["deployment"]
        tokens = dep["expected_tokens"] if dep["k"] != "best" else None
        plots.time_split(below, [f"{b:,}" for b, _ in splits], [s for _, s in splits],
                         title="Where it goes: the model's iteration, by term", xlabel="batch size B (sequences)",
                         ylabel="time / plain decode step", seconds=False,
                         reference=None if tokens is None else (tokens, f"E[N] = {tokens:.2f}: above it S < 1"))
    elif ax is None:
        _, ax = plots.figure()
    dep, curve = report["deployment"], report["curve"]
    terms = iter(legend_terms(report))
    batches = [c[0] for c in curve] or [dep["batch"][0]]
    centre = [c[1] * c[3] for c in curve] or [float("nan")]
    shown = _shown(report)
    tops = [max(centre, default=1.0)]
    with plots.house_style():
        ax.plot(batches, centre, color=plots.PALETTE[0], label=next(terms), **plots.MODEL)
        if _model_column(report):
            ax.plot(batches, [c[1] for c in curve], color=plots.PALETTE[0], label=next(terms),
                    **{**plots.MODEL, "linestyle": "--", "linewidth": 1.5})
        if dep["band"] is not None and curve:
            band = report["curve_band"]
            ax.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band], color=plots.PALETTE[0],
                            alpha=0.18, linewidth=0, label=next(terms))
            tops.append(max(b[2] for b in band))
        v = report["verdict_batches"]
        shades = ([(v["pays"], plots.PALETTE[2]), (v["loses"], plots.PALETTE[1])] if v is not None
                  else [(report["paying_batches"], plots.PALETTE[2])])
        for ranges, color in shades:
            inside = _inside(ranges, *_asked(report))
            for i, (a, b) in enumerate(inside):  # a strip along the foot of the axes, clear of the band
                ax.axvspan(a, max(b, a), ymax=0.045, color=color, alpha=0.75, linewidth=0,
                           label=next(terms) if i == 0 else None)
        fits = report["max_batch"]
        if fits is not None and fits < shown[1]:
            ax.axvspan(max(fits, 1), shown[1], color="0.5", alpha=0.3, linewidth=0, label=next(terms))
        anchor = dep["anchor"]
        for points, marker, color in ((anchor["measured"] if anchor else [], "o", plots.PALETTE[6]),
                                      (anchor["held_back"] if anchor else [], "D", plots.PALETTE[3])):
            if points:
                ax.plot([b for b, _ in points], [s for _, s in points], marker=marker, color=color,
                        label=next(terms), **{**plots.MEASURED, "markersize": 8})
                tops.append(max(s for _, s in points))
        ax.axhline(1.0, color="0.35", linestyle=":", linewidth=1.2, label=next(terms))
        if dep["batch"][0] == dep["batch"][1]:
            ax.axvline(dep["batch"][0], color="0.2", linewidth=1, label=next(terms))
        ax.set_xscale("log", base=2)
        plots.plain_log_ticks(ax)
        ax.set_xlim(shown[0] / 1.12, max(shown[1], shown[0] * 2) * 1.12)  # a margin: edge points drawn whole
        ax.set_ylim(0, max(1.2, *tops) * 1.08)
        ax.set_xlabel("Batch size B (sequences)")
        ax.set_ylabel("Speedup S(B) (× plain decoding)")
        plots.set_title(ax, title or title_lines(report))
        plots.legend(ax, None, below=True)
    return ax
