"""The advisor's constants and the two records a report is computed from: ``Deployment`` (everything the
report depends on, checked) and ``Anchor`` (the reader's own measurement the model is anchored on)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specnotes.analytic import cost, hardware
from specnotes.analytic.cost import ModelShape

SCHEMA = "specnotes.advise/3"


DRAFTERS = ("model", "early-exit", "ngram", "eagle", "eagle3", "mtp", "block")


K_MAX = 16  # "best" searches k = 1..K_MAX (cost.best_k's default)


K_DEFAULT = 4  # a chain's k when --k is not given (the report says so)


NO_MEMORY_LIMIT = 1 << 16


OVERLAPS = cost.OVERLAPS


ENGINES = ("vllm", "sglang", "magicdec")  # engines of the published record (any other name gets pooled knobs)


@dataclass(frozen=True)
class Deployment:
    """Everything the report depends on, checked. ``model``: keyword arguments of the time functions
    (seconds); ``band``: the model's cross-validated error as a function of B (``calibrate.Band``), or None."""

    target: ModelShape
    draft: cost.Draft
    drafter: str
    draft_name: str
    accel: hardware.Accelerator
    dtype: str
    math_dtype: str
    batch: tuple[int, int]
    context: int
    alpha: float | None
    alpha_from: str
    k: int | None  # None: the best k at each batch (a tree: the tree tokens verified)
    weight_bits: float | None = None  # bits per weight, scales included (MXFP4: 4.25)
    tp: int = 1
    draft_context: int | None = None
    calibration: str | None = None
    calibration_about: str | None = None
    model: dict = field(default_factory=dict)
    calibration_note: str = ""  # which model the report uses, and why
    warnings: tuple[str, ...] = ()
    k_from: str = "given"
    tree: tuple[int, ...] | None = None
    tokens: float | None = None  # a tree's mean tokens per iteration
    engine: str | None = None
    engine_version: str | None = None
    band: object | None = None  # calibrate.Band: the held-out errors the band at each B comes from
    extrapolations: tuple[str, ...] = ()
    fitted_batch: int | None = None  # the largest batch the calibration in use was fitted on
    band_about: dict | None = None  # how the band was built and how often it covered held-out points
    provenance: str = ""  # a note on where the calibration's data come from
    anchor: Anchor | None = None  # the reader's measurement the model's level is anchored on
    alpha_span: tuple[float, float] | None = None  # --alpha LO-HI: S is at the middle, the band spans both ends
    survivals: tuple[float, ...] | None = None  # --accept-by-position: P(N ≥ i + 1) per draft position (Chapter 11)


@dataclass(frozen=True)
class Anchor:
    """The reader's own measurement the model is anchored on: the (B, S) points used (``measured``), where
    they came from (``source``: "--measured" or a record's path), the ``level`` (measured over modelled S,
    the geometric mean over the points), the anchored band (``calibrate.Band`` over log2(B / measured B)) and
    how it did held out, points of a record held back for comparison, and a record's per-batch quartiles."""

    measured: tuple[tuple[int, float], ...]
    source: str
    level: float
    band: object | None = None
    about: dict | None = None
    held_back: tuple[tuple[int, float], ...] = ()
    quartiles: dict = field(default_factory=dict)
    model_at: tuple[float, ...] = ()  # the model's S at each measured batch, before the level
