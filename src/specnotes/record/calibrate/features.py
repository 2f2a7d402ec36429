"""The record's passes as arrays (``Features``), so that every variant's S over the record is a few numpy
operations."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from specnotes.analytic import cost
from specnotes.record.calibrate.points import Case
from specnotes.record.calibrate.predictions import anchors

MATMULS = ("matmul", "lm head", "heads", "experts")  # the kernels whose rows a GEMM tile rounds up (per expert)


def as_first_calibration(c: Case) -> Case:
    """The case with an EAGLE head priced as the first calibration priced it: one layer of the target's shape
    with the head's vocabulary, k one-token passes (no fc, no wide QKV, no first pass over k + 1 tokens)."""
    if isinstance(c.draft, cost.EagleHead):
        return replace(c, draft=replace(c.draft.layer, tied_embeddings=False))
    return c


class Features:
    """The record's passes as arrays, so that every variant's S is a few numpy operations.

    Every pass of every case (the plain decode pass, and the verify and draft passes of an iteration) is
    ``cost.target_pass`` / ``cost.draft_passes``, the passes ``cost`` itself prices; per kernel, its
    memory and compute seconds at the datasheet roofs; per pass, its link seconds and the pass's share of
    each linear knob (``LINEAR``: 1 for a target or a draft pass, its layers, its tokens, its all-reduces, ...,
    and for the terms that scale a roof's time, that time: all its kernels' compute seconds at the datasheet
    peak, its experts', its attention's, its link seconds).
    ``times`` adds them up as ``cost`` does (a test compares the two)."""

    def __init__(self, cases_, heads: str = "eagle"):
        self.cases = [(as_first_calibration(c) if heads == "one-layer" else c) for c in cases_]
        mem, comp, kpass, link, lin, pcase, pplain, rows = [], [], [], [], [], [], [], []
        for i, c in enumerate(self.cases):
            accel = cost.accelerator(c.accel)
            widths = c.widths or (1,) * c.k
            dctx = c.context if c.draft_context is None else c.draft_context
            passes = ([cost.target_pass(c.target, c.batch, 1, c.context, c.tp)],
                      [cost.target_pass(c.target, c.batch, c.k + 1, c.context, c.tp)]
                      + cost.draft_passes(c.draft, c.batch, c.k, dctx, c.tp, c.target, widths))
            moe = ([_moe_counts(c.target, c.batch)],
                   [_moe_counts(c.target, c.batch * (c.k + 1))] + _draft_moe_counts(c.draft, c.batch, widths))
            for plain, (group, moe_group) in enumerate(zip(passes[::-1], moe[::-1], strict=True)):
                for p, (moe_layers, experts, moe_tokens) in zip(group, moe_group, strict=True):
                    w = _weight_bytes(c, p)
                    n = len(pcase)
                    peak = accel.peak(cost._math_dtype(accel, p.dtype, p.compute)) if p.kernels else 1.0
                    parts = [k for k in p.kernels if k.flops or k.bytes]
                    mem += [k.bytes / accel.mem_bandwidth for k in parts]
                    comp += [k.flops / peak for k in parts]
                    rows += [k.flops * w / (2 * k.bytes) if k.name in MATMULS and k.bytes else 0.0 for k in parts]
                    kpass += [n] * len(parts)
                    links = sum(k.link_bytes for k in p.kernels)
                    link.append(links / (accel.link_bandwidth / 2) if links else 0.0)
                    tokens = c.batch * (1 if plain else c.k + 1)
                    comp_of = {}
                    for k in parts:
                        comp_of[k.name] = comp_of.get(k.name, 0.0) + k.flops / peak
                    seconds = lambda names, got=comp_of: sum(got.get(n, 0.0) for n in names)
                    lin.append([0.0 if p.draft else 1.0, 1.0 if p.draft else 0.0, float(p.layers),
                                0.0 if p.draft else float(tokens), float(sum(k.calls for k in p.kernels)),
                                float(c.batch), 0.0 if (p.draft or plain) else float(c.batch * c.k),
                                float(moe_layers), float(experts),
                                seconds(("matmul", "lm head", "heads", "experts", "attention")), seconds(("experts",)),
                                seconds(("attention",)), link[-1], float(moe_tokens)])
                    pcase.append(i)
                    pplain.append(bool(plain))
        self.mem, self.comp, self.kpass = np.array(mem), np.array(comp), np.array(kpass)
        self.rows = np.array(rows)
        self.link, self.lin = np.array(link), np.array(lin)
        self.pcase, self.pplain = np.array(pcase), np.array(pplain)
        self.n = len(self.cases)
        self.measured = np.array([c.measured for c in self.cases])
        self.tokens = np.array([np.nan if c.anchored else c.expected() for c in self.cases])
        self.anchor = np.array(anchors(self.cases))
        self.anchored = np.array([c.anchored for c in self.cases])
        # per case: the linear features of its plain pass and of its iteration
        self.lin_plain = self._per_case(self.lin, True)
        self.lin_iter = self._per_case(self.lin, False)
        self._base = {}

    def _per_case(self, values, plain: bool) -> np.ndarray:
        sel = self.pplain == plain
        out = np.zeros((self.n,) + values.shape[1:])
        np.add.at(out, self.pcase[sel], values[sel])
        return out

    def base(self, knee: float, tile: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(T_plain, T_iter) with every linear knob at 0: kernels combined with exponent ``knee`` (1: memory
        plus compute, "none"; inf: the larger, "kernel"), plus the link time. ``tile``: a GEMM computes its
        rows in tiles of this many, so its math costs ceil(M / tile)·tile rows (``gemm_rows``)."""
        if (knee, tile) not in self._base:
            rows = np.where(self.rows > 0, self.rows, 1)
            comp = self.comp * np.where(self.rows > 0, gemm_rows(rows, tile) / rows, 1.0) if tile else self.comp
            big, small = np.maximum(self.mem, comp), np.minimum(self.mem, comp)
            if knee == math.inf:
                per_kernel = big
            else:
                with np.errstate(divide="ignore", invalid="ignore"):
                    per_kernel = np.where(big > 0, big * (1 + (small / np.where(big > 0, big, 1)) ** knee)
                                          ** (1 / knee), 0.0)
            per_pass = np.bincount(self.kpass, per_kernel, minlength=len(self.pcase)) + self.link
            self._base[(knee, tile)] = (self._per_case(per_pass, True), self._per_case(per_pass, False))
        return self._base[(knee, tile)]

    def times(self, knee: float, x: np.ndarray, tile: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(T_plain, T_iter) per case; ``x`` [cases, LINEAR]: each case's linear knobs in seconds."""
        plain0, iter0 = self.base(knee, tile)
        return plain0 + (self.lin_plain * x).sum(1), iter0 + (self.lin_iter * x).sum(1)

    def ratio(self, knee: float, x: np.ndarray, tile: int | None = None) -> np.ndarray:
        """T_plain / T_iter per case: S per token of E[N]."""
        plain, it = self.times(knee, x, tile)
        return plain / it

    def predict(self, knee: float, x: np.ndarray, tile: int | None = None) -> np.ndarray:
        """S per case: E[N]·T_plain/T_iter, an anchored case scaled from its anchor's measured S."""
        plain, it = self.times(knee, x, tile)
        ratio = plain / it
        return np.where(self.anchored, self.measured[self.anchor] * ratio / ratio[self.anchor], self.tokens * ratio)

    def gradient(self, knee: float, x: np.ndarray, tile: int | None = None) -> np.ndarray:
        """d log S / d x_j per case [cases, LINEAR] (an anchored case: its own minus its anchor's)."""
        plain, it = self.times(knee, x, tile)
        g = self.lin_plain / plain[:, None] - self.lin_iter / it[:, None]
        return np.where(self.anchored[:, None], g - g[self.anchor], g)


def _moe_counts(shape, tokens: int) -> tuple[float, float, float]:
    """(MoE layers, distinct experts touched summed over them, tokens routed summed over them) of a pass of
    ``shape`` over ``tokens`` tokens: zeros for a dense shape; E[D](T) per layer under independent routing
    (``cost.expected_experts``)."""
    if not isinstance(shape, cost.MoEShape):
        return 0.0, 0.0, 0.0
    layers = float(shape.moe_layers)
    return layers, layers * cost.expected_experts(shape.n_experts, shape.experts_per_token, tokens), layers * tokens


def _draft_moe_counts(draft, batch: int, widths) -> list[tuple[float, float, float]]:
    """``_moe_counts`` of each draft pass (``cost.draft_passes``' order): an EAGLE or MTP head's first pass runs
    every verified token, its later ones a level's width; a draft model a level's width; others are dense."""
    if isinstance(draft, cost.NoWeights):
        return [(0.0, 0.0, 0.0)]
    if isinstance(draft, cost.EagleHead):
        return [_moe_counts(draft.layer, batch * ((len(widths) + 1) if i == 0 else w)) for i, w in enumerate(widths)]
    if isinstance(draft, cost.ModelShape):
        return [_moe_counts(draft, batch * w) for w in widths]
    return [(0.0, 0.0, 0.0)] * (1 if isinstance(draft, cost.SinglePass | cost.Heads) else len(widths))


def gemm_rows(rows, tile: int | None):
    """The rows a GEMM of ``rows`` rows computes when its kernel tiles M by ``tile`` (None: exactly ``rows``)."""
    rows = np.asarray(rows, float)
    return rows if not tile else np.ceil(rows / tile) * tile


def _weight_bytes(c: Case, p) -> float:
    """Bytes per weight of the model a pass of case ``c`` runs (the target's, or the draft's)."""
    if not p.draft:
        return c.target.weight_bytes
    d = c.draft
    shape = d.layer if isinstance(d, cost.EagleHead) else getattr(d, "shape", d)
    return getattr(shape, "weight_bytes", c.target.weight_bytes)
