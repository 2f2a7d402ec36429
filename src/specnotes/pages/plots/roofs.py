"""The roofline (Chapter 1): attainable FLOP/s against arithmetic intensity, datasheet and measured roofs with their
ridges, and measured points (``roofline``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from specnotes.pages.plots.style import (
    MARKERS,
    MEASURED,
    MEASURED_ROOF,
    MIN_FONT,
    MODEL,
    PALETTE,
    _axes,
    _flops_unit,
    _legend,
    _plain_log_ticks,
    _point_colors,
    _title,
    house_style,
)


def _is_accelerator(obj) -> bool:
    return hasattr(obj, "peak_flops") and hasattr(obj, "mem_bandwidth")


def _pair(obj) -> tuple[float, float] | None:
    """A measured roof as (bandwidth, flops): a MeasuredRoof or a plain 2-sequence of numbers."""
    if hasattr(obj, "bandwidth") and hasattr(obj, "flops"):
        return float(obj.bandwidth), float(obj.flops)
    if isinstance(obj, Sequence) and not isinstance(obj, str) and len(obj) == 2:
        bw, flops = obj
        return float(bw), float(flops)
    return None


def _roof(spec, dtype: str) -> tuple[str, float, float, bool]:
    """Normalize one roof to (label, peak FLOP/s, bandwidth bytes/s, measured?)."""
    if isinstance(spec, str):  # a row name of the accelerator table, e.g. "H100-SXM"
        from specnotes.analytic.hardware import accelerator

        spec = accelerator(spec)
    if _is_accelerator(spec):
        return f"{spec.name} ({dtype}, datasheet)", spec.peak(dtype), spec.mem_bandwidth, False
    pair = _pair(spec) if not (isinstance(spec, tuple) and spec and isinstance(spec[0], str)) else None
    if pair is not None:
        return "this device (copy + GEMM)", pair[1], pair[0], True
    if isinstance(spec, Sequence) and not isinstance(spec, str) and spec and isinstance(spec[0], str):
        label, *rest = spec
        if len(rest) == 1 and _is_accelerator(rest[0]):
            return label, rest[0].peak(dtype), rest[0].mem_bandwidth, False
        if len(rest) == 1 and _pair(rest[0]) is not None:
            bw, flops = _pair(rest[0])
            return label, flops, bw, True
        if len(rest) in (2, 3):  # (label, flops_per_s, bytes_per_s[, "measured" | "model"])
            kind = rest[2] if len(rest) == 3 else "model"
            if kind not in ("measured", "model"):
                raise ValueError(f"roof kind must be 'measured' or 'model', got {kind!r}")
            return label, float(rest[0]), float(rest[1]), kind == "measured"
    raise ValueError(
        "a roof is an Accelerator, a measured (bandwidth, flops) pair / MeasuredRoof, (label, Accelerator), "
        f"(label, (bandwidth, flops)) or (label, flops_per_s, bytes_per_s[, 'measured'|'model']); got {spec!r}"
    )


def _point(spec) -> tuple[str, float, float]:
    """Normalize one measured point to (label, intensity FLOP/byte, FLOP/s)."""
    extra = getattr(spec, "extra", None)
    if isinstance(extra, dict) and "intensity" in extra and "flops_per_s" in extra:
        params = getattr(spec, "params", {}) or {}
        label = f"B={params['batch']}" if "batch" in params else spec.name
        return label, float(extra["intensity"]), float(extra["flops_per_s"])
    if isinstance(spec, Sequence) and len(spec) == 3:
        label, ai, flops = spec
        return str(label), float(ai), float(flops)
    raise ValueError(f"a point is (label, intensity, flops_per_s) or a measure.Record; got {spec!r}")


def roofline(ax=None, *, roofs=(), points=(), dtype: str = "bf16", title: str | None = None,
             xlim: tuple[float, float] | None = None, annotate_points: bool | str = "auto",
             source: str | None = None):
    """Log-log roofline: x = arithmetic intensity (FLOP/byte), y = attainable FLOP/s (auto-scaled unit).

    roofs: each draws ``min(peak, AI * bandwidth)`` with its ridge marked. Accepted forms:
        an ``Accelerator`` or its name in ``hardware.ACCELERATORS`` (datasheet: solid line, ``model:`` in
        the legend; peak for ``dtype``); a measured ``(bandwidth, flops)`` pair or ``MeasuredRoof`` (dashed,
        ``measured roof:``); labelled ``(label, Accelerator)``, ``(label, (bandwidth, flops))`` or
        ``(label, flops_per_s, bytes_per_s[, "measured" | "model"])``.
    points: measured points, markers: ``(label, intensity, flops_per_s)`` or ``measure.Record``\\ s from
        :func:`specnotes.measure.matmul_sweep` (labelled ``B=...``).
    annotate_points: write each point's label beside it (``"auto"``: when there are at most 6; more are a sweep,
        one legend entry, its first and last point named).
    source: where the measurements came from (device, dtype), shown as the legend's title.
    Returns the Axes.
    """
    roofs = [_roof(r, dtype) for r in roofs]
    points = [_point(p) for p in points]
    if not roofs and not points:
        raise ValueError("roofline needs at least one roof or one point")
    with house_style():
        ax = _axes(ax)
        ridges = [peak / bw for _, peak, bw, _ in roofs]
        ais = [ai for _, ai, _ in points]
        if xlim is None:
            lo = min(ridges + ais) / 20
            hi = max(ridges + ais) * 10
            xlim = (10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi)))
        ymax = max([peak for _, peak, _, _ in roofs] + [f for _, _, f in points])
        scale, unit = _flops_unit(ymax)
        x = np.logspace(math.log10(xlim[0]), math.log10(xlim[1]), 400)
        ylo = []
        for i, (label, peak, bw, measured) in enumerate(roofs):
            color = PALETTE[i % len(PALETTE)]
            style = MEASURED_ROOF if measured else MODEL
            kind = "measured roof" if measured else "model"
            y = np.minimum(peak, x * bw) / scale
            ylo.append(y[0])
            ax.plot(x, y, color=color, label=f"{kind}: {label}", **style)
            ridge = peak / bw
            ax.plot([ridge], [peak / scale], marker="D", markersize=6, color=color, markerfacecolor="white",
                    linestyle="none")
            ax.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, peak / scale), xytext=(-6, 6), ha="right",
                        textcoords="offset points", fontsize=MIN_FONT, color=color)
        colors = _point_colors(len(points), len(roofs))
        sweep = len(points) > 6  # one legend entry for the sweep, its ends named on the plot
        if annotate_points == "auto":
            annotate_points = len(points) <= 6
        for j, (label, ai, flops) in enumerate(points):
            entry = f"measured: {points[0][0]} to {points[-1][0]} (dark to light)" if sweep else f"measured: {label}"
            ax.plot([ai], [flops / scale], marker="o" if sweep else MARKERS[j % len(MARKERS)], color=colors[j],
                    label=entry if j == 0 or not sweep else "_nolegend_", **MEASURED)
            ylo.append(flops / scale)
            if annotate_points or (sweep and j in (0, len(points) - 1)):
                ax.annotate(label, (ai, flops / scale), xytext=(5, -10), textcoords="offset points",
                            fontsize=MIN_FONT)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _plain_log_ticks(ax)
        ax.set_xlim(*xlim)
        ax.set_ylim(min(ylo) / 3, ymax / scale * 3)
        ax.set_xlabel("Arithmetic intensity (FLOP/byte)")
        ax.set_ylabel(f"Attainable performance ({unit})")
        _title(ax, title or f"Roofline ({dtype}): min(peak, intensity × bandwidth)")
        _legend(ax, source, loc="best")
    return ax
