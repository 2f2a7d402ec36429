"""Calibrations: the cost model's engine knobs, fitted to the published record and judged out of sample
(Chapter 6).

The idealized model (``cost``, per-kernel roofline, no overhead) gets the shape of S(B) roughly right and
its level wrong. A real engine adds fixed costs to every pass and every layer (launches, the small kernels
each layer runs, scheduling, the Python between draft steps), and does not hide a GEMM's math under its
weight reads at the sizes decode runs. A *calibration* is the set of ``cost`` keyword arguments that
describes one engine (name and version) on one GPU. This face re-exports every public name; the jobs:

1. The record: ``shapes`` (the targets and drafters the cost model prices, ``Unpriceable``), ``points``
   (``Case``, a series' points as cases), ``predictions`` (``predict`` and what-ifs) and ``admission``
   (``record()``, its rules, ``skip_summary``; Chapter 10's ``published_curve``).
2. The fit: ``variants`` (``VARIANTS``, ``CHOSEN``), ``features`` (the record as arrays), ``engine_fit``
   (``fit_engines``, the joint fit shrunk toward families and the pool) and ``one_fit`` (``fit``, how a reader
   calibrates their own engine in Chapter 6, Problem 3).
3. ``crossval``: ``cross_validate``, leave one series or one source out.
4. The advisor's bands and the term searches (issues 34 and 42): ``bands`` (``Band``, ``batch_band``,
   ``anchor_band``, their held-out tables), ``terms`` (``term_search``, ``keeps``), ``goals`` (``judge``,
   ``judge_band``), ``moe_goals`` (issue 42: the MoE family's slopes, errors, terms and goals), ``alternatives``
   (the record's choices against theirs), ``stories`` and ``wording`` (the chapters' sentences, and numbers printed
   so that they stay true).
5. ``store``: ``write_calibrations`` writes data/calibrations.json, ``calibration`` and ``lookup`` read it;
   ``report`` and ``cli``: ``python -m specnotes.record.calibrate [--cv] [--write]`` (``main``).
"""

from specnotes.record.calibrate.admission import (
    ASSUME_FORM_FACTOR,
    DEFAULT_CONTEXT,
    FORM_FACTORS,
    UNPRICED_TARGETS,
    Record,
    assumed_gpu,
    published_curve,
    published_moe_series,
    record,
    series_cases,
    skip_summary,
)
from specnotes.record.calibrate.alternatives import alternative_table, other_form_factor, shared_moe
from specnotes.record.calibrate.bands import (
    ADVISOR_REGIME,
    BAND_BUILD,
    BAND_BUILDS,
    BUCKETS,
    DISTANCES,
    FAMILIES,
    NOMINAL,
    Band,
    anchor_band,
    anchor_pairs,
    anchor_table,
    band_table,
    batch_band,
    bias_by_source,
    bucket_label,
    family_mask,
    family_table,
    held_out_band,
    in_bucket,
    min_points,
    verdict_of,
)
from specnotes.record.calibrate.cli import main
from specnotes.record.calibrate.crossval import REGIMES, CrossValidation, cross_validate, held_out_label, regime_mask
from specnotes.record.calibrate.engine_fit import ALLREDUCE_LATENCY, SHRINK, EngineFit, fit_engines, fit_predict
from specnotes.record.calibrate.features import MATMULS, Features, as_first_calibration, gemm_rows
from specnotes.record.calibrate.goals import BAND_GOALS, GOALS, Goals, decisive_text, goals_table, judge, judge_band
from specnotes.record.calibrate.moe_goals import (
    DENSE_BEFORE,
    MOE_GOALS,
    SLOPE_BATCHES,
    family_errors,
    judge_moe,
    moe_chosen,
    moe_keeps,
    moe_term_search,
    moe_term_story,
    moe_text,
    slope_rows,
    slope_text,
    why_moe_not_kept,
)
from specnotes.record.calibrate.one_fit import FIT_KNOBS, Fit, efficiency_scan, fit
from specnotes.record.calibrate.points import (
    LOADS,
    MOE_APART,
    MOE_SUFFIX,
    TREE_COLUMNS,
    Case,
    calibration_name,
    cases,
    engine_id,
    magicdec_alpha,
    point_draft,
)
from specnotes.record.calibrate.predictions import (
    anchors,
    compare,
    curve,
    derated,
    predict,
    predictor_pass_time,
    residuals,
    tree_speedup,
    vary,
)
from specnotes.record.calibrate.report import alternative_text, band_text, cv_table, family_text, skip_text
from specnotes.record.calibrate.shapes import (
    EAGLE3_HEADS,
    EAGLE3_LLAMA31_8B,
    EAGLE3_QWEN3_8B,
    LLAMA_2_7B,
    LLAMA_31_8B,
    QWEN3_8B,
    SHAPE_ALIASES,
    SHAPES,
    SKIP_KINDS,
    TINYLLAMA,
    UNPRICED_DRAFTERS,
    Unpriceable,
    _draft,
    dense_layer_of,
    shape,
)
from specnotes.record.calibrate.store import (
    ALIASES,
    ANCHOR_NOMINAL,
    ENGINE_NAMES,
    KNOBS,
    _versions_of,
    band_record,
    calibration,
    calibrations,
    drafter_kind,
    fitted_to,
    gpu_doubt,
    lookup,
    stored,
    write_calibrations,
)
from specnotes.record.calibrate.stories import (
    alternative_story,
    band_story,
    centre_story,
    closed_loop_text,
    family_story,
)
from specnotes.record.calibrate.terms import (
    BASE,
    CANDIDATES,
    ISSUE_34,
    keeps,
    kept_term,
    residual_rows,
    term_search,
    term_story,
    term_text,
    why_not_kept,
)
from specnotes.record.calibrate.variants import (
    CHOSEN,
    COST_KNOBS,
    FIRST_CALIBRATION,
    KNEES,
    LINEAR,
    VARIANTS,
    Variant,
    priceable,
)
from specnotes.record.calibrate.wording import shown, shown_pair

__all__ = [
    "ADVISOR_REGIME", "ALIASES", "ALLREDUCE_LATENCY", "ANCHOR_NOMINAL", "ASSUME_FORM_FACTOR", "BAND_BUILD",
    "BAND_BUILDS", "BAND_GOALS", "BASE", "BUCKETS", "Band", "CANDIDATES", "CHOSEN", "ISSUE_34", "COST_KNOBS", "Case",
    "CrossValidation", "DEFAULT_CONTEXT", "DENSE_BEFORE", "DISTANCES", "EAGLE3_HEADS", "EAGLE3_LLAMA31_8B",
    "EAGLE3_QWEN3_8B", "ENGINE_NAMES", "EngineFit", "FAMILIES", "FIRST_CALIBRATION", "FIT_KNOBS", "FORM_FACTORS",
    "Features", "Fit", "GOALS", "Goals", "KNEES", "KNOBS", "LINEAR", "LLAMA_2_7B", "LLAMA_31_8B", "LOADS", "MATMULS",
    "MOE_APART", "MOE_GOALS", "MOE_SUFFIX", "NOMINAL", "QWEN3_8B", "REGIMES", "Record", "SHAPES", "SHAPE_ALIASES",
    "SHRINK", "SKIP_KINDS", "SLOPE_BATCHES", "TINYLLAMA", "TREE_COLUMNS", "UNPRICED_DRAFTERS", "UNPRICED_TARGETS",
    "Unpriceable", "VARIANTS", "Variant", "_draft", "_versions_of", "alternative_story", "alternative_table",
    "alternative_text", "anchor_band", "anchor_pairs", "anchor_table", "anchors", "as_first_calibration", "assumed_gpu",
    "band_record", "band_story", "band_table", "band_text", "batch_band", "bias_by_source", "bucket_label",
    "calibration", "calibration_name", "calibrations", "cases", "centre_story", "closed_loop_text", "compare",
    "cross_validate", "curve", "cv_table", "decisive_text", "dense_layer_of", "derated", "drafter_kind",
    "efficiency_scan", "engine_id", "family_errors", "family_mask", "family_story", "family_table", "family_text",
    "fit", "fit_engines", "fit_predict", "fitted_to", "gemm_rows", "goals_table", "gpu_doubt", "held_out_band",
    "held_out_label", "in_bucket", "judge", "judge_band", "judge_moe", "keeps", "kept_term", "lookup", "magicdec_alpha",
    "main", "min_points", "moe_chosen", "moe_keeps", "moe_term_search", "moe_term_story", "moe_text",
    "other_form_factor",
    "point_draft", "predict", "predictor_pass_time", "priceable", "published_curve", "published_moe_series", "record",
    "regime_mask", "residual_rows", "residuals", "series_cases", "shape", "shared_moe", "shown", "shown_pair",
    "skip_summary", "skip_text", "slope_rows", "slope_text", "stored", "term_search", "term_story", "term_text",
    "tree_speedup", "vary", "verdict_of", "why_moe_not_kept", "why_not_kept", "write_calibrations",
]
