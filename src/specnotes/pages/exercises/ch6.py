"""Chapter 6's problems (06_published_record): the model against the published record."""

from __future__ import annotations

from functools import partial

from specnotes.pages.exercises.answers import (
    H100,
    calibrated_speedup_at,
    constant,
    fixed_cost_speedup,
    magicdec_window_speedup,
    published_tokens,
    your_engine_knob,
    your_engine_overlap,
    your_engine_rms_log,
    your_engine_worst_error,
)
from specnotes.pages.exercises.registry import _M, _P, register

for _problem in [
    # Chapter 6: the model against the published record
    _P("ch6.p1a", "06_published_record", "S if the H100 calibration's fixed costs dominated every pass (k = 3)",
       partial(fixed_cost_speedup, "specdecode_bench", "fig1c_eagle3", H100, 3),
       mistakes=(_M(partial(fixed_cost_speedup, "specdecode_bench", "fig1c_eagle3", H100, 3, False),
                    "that charges each draft pass the target's fixed cost, E[N]/(k + 1): a draft pass of a one-layer "
                    "head pays one layer's cost and the draft-pass overhead, not 32 layers'"),
                 _M(partial(published_tokens, "specdecode_bench", "fig1c_eagle3"), "that is E[N] alone: an "
                    "iteration also pays k draft overheads"))),
    _P("ch6.p1b", "06_published_record", "the calibrated S(1) for the same setup",
       partial(calibrated_speedup_at, "specdecode_bench", "fig1c_eagle3", H100, 1),
       mistakes=(_M(partial(calibrated_speedup_at, "specdecode_bench", "fig1c_eagle3", H100, 1, False),
                    "that is the idealized S(1), with no overheads: apply calibrate.calibration(\"H100-SXM\", "
                    "\"specdecode_bench\")"),)),
    _P("ch6.p2a", "06_published_record", "MagicDec, L = 32k, B = 64, k = 3: idealized S with a 512-token draft window",
       partial(magicdec_window_speedup, 512),
       mistakes=(_M(partial(magicdec_window_speedup, 32000), "that is the draft reading the whole 32k cache: "
                    "the window is 512 tokens"),)),
    _P("ch6.p2b", "06_published_record", "the same with a 4,096-token window", partial(magicdec_window_speedup, 4096),
       mistakes=(_M(partial(magicdec_window_speedup, 512), "that is the 512-token window"),)),
    _P("ch6.p2c", "06_published_record", "the same with a 32,000-token window (the whole context)",
       partial(magicdec_window_speedup, 32000),
       mistakes=(_M(partial(magicdec_window_speedup, 512), "that is the 512-token window: with the whole context "
                    "the self-speculating draft reads the full KV cache every step"),)),
    _P("ch6.p3a", "06_published_record", "your engine's fit: which overlap mode wins?", your_engine_overlap,
       choices={"kernel": "per-kernel roofline", "pass": "one max over the pass", "none": "memory + compute"},
       mistakes=(_M(constant("kernel"), "compare the modes' fits (fit.by_overlap): per-kernel maxes leave a larger "
                    "rms error of log S here"),
                 _M(constant("pass"), "compare the modes' fits (fit.by_overlap): one max over the pass fits worst, "
                    "and its overhead runs into the 20 ms bound"))),
    _P("ch6.p3b", "06_published_record", "your engine's fitted draft overhead t0_draft (ms)",
       partial(your_engine_knob, "draft_overhead"), "ms",
       mistakes=(_M(partial(your_engine_knob, "draft_overhead", "kernel"), "that is the per-kernel fit's value: "
                    "the best fit uses another overlap mode"),)),
    _P("ch6.p3c", "06_published_record", "your engine's fit: the largest relative error (a fraction, 0.05 = 5%)",
       your_engine_worst_error,
       mistakes=(_M(your_engine_rms_log, "that is the rms error of log S over the four points: the question asks "
                    "for the largest error at one point (fit.residuals)"),)),
    _P("ch6.p3d", "06_published_record", "your engine's fitted target overhead t0 (ms)",
       partial(your_engine_knob, "overhead"), "ms",
       mistakes=(_M(partial(your_engine_knob, "overhead", "pass"), "that is the one-max-per-pass fit's value, at its "
                    "20 ms bound: the best fit uses another overlap mode"),
                 _M(partial(your_engine_knob, "draft_overhead"), "that is t0_draft, the draft pass's overhead: t0 is "
                    "the target pass's (fit.knobs[\"overhead\"])"))),
]:
    register(_problem)
