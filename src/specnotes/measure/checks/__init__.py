"""What a measurement may assert on *this* device, and the sentences the prose may say about it.

The measured chapters run on CPUs with and without bf16 units, on GPUs and on MPS, often on shared
machines where another process can add time to any sample. So no check compares a measurement with a
constant one machine happened to show. Each derives what to expect from the cost model on this
device's measured roofs and per-pass floor, allows only for the model's known biases (``tolerances``
lists them), and says so when the model predicts nothing this measurement could show (``tested=False``).

Two kinds of check, kept apart (DESIGN §5, "invariants in cells, the model in sentences"):

- **Invariants** (:func:`timer_agrees`, :func:`more_work_is_slower`) hold on any machine that is not
  broken: a timer that disagrees with itself, a NaN, or more work measured faster than less beyond what
  noise and another process's load can do (``LOAD``). They raise :class:`Broken`, and a chapter's cell
  fails with it.
- **Agreement with the model** is a finding. Every other check returns a :class:`Verdict` whose
  sentence a chapter glues; it never fails the cell. The ``describe_*`` functions pick the sentences
  that explain a disagreement with the numbers measured. Their teeth are in the unit tests, on synthetic
  sweeps and on the real records in ``data/reference`` (``tests/measure/test_checks.py``,
  ``tests/measure/test_reference.py``).

One module per job:

- ``tolerances``  the model's known biases and the constants they set (``NOISE``, ``SHARE``, ...), ``rules``;
- ``verdicts``    ``Verdict`` and ``Broken``, and one sentence for a set of verdicts (``describe_all``);
- ``inputs``, ``wording``  the argument checks every check shares; numbers in words that are true of them;
- ``invariants``  ``timer_agrees`` and ``more_work_is_slower``, which raise ``Broken``;
- ``agreement``   the verdicts on agreement with the model: roofs, rises, S(B)'s fall and cap, Chapter 5's ratios;
- ``sweeps``      Chapters 1, 2 and 4's sentences on the GEMM and S(B) sweeps;
- ``contexts``    Chapter 5's sentences; ``wall_clock`` Chapter 3's; ``prices`` Chapters 7 to 9's;
- ``ceiling``     the most a measured S can be for its k and α, and the rule that flags one above it as noise;
- ``acceptance``  estimates with standard errors, and the sentences on α and E[N] (Chapters 3 and 7);
- ``varying``     Chapter 11's: E[N] per position on held-out prompts, a rate that moves, the budget, host time.

The names below are this package's face (``checks.grows``, ``from specnotes.measure.checks import NOISE``).
"""

from specnotes.measure.checks.acceptance import (
    Estimate,
    PlaceStory,
    Z,
    describe_against_range,
    describe_alpha_sources,
    describe_formula_gap,
    describe_places,
    describe_tree_formula,
    order,
)
from specnotes.measure.checks.agreement import (
    fastest_roofs,
    grows,
    ratio_falls,
    shared_cache,
    speedup_bound,
    speedup_falls,
    within_roofs,
)
from specnotes.measure.checks.ceiling import Ceiling, above_ceiling, ceiling, within_ceiling
from specnotes.measure.checks.contexts import DEVICE_KINDS, describe_context_measured, describe_shared_cache
from specnotes.measure.checks.invariants import more_work_is_slower, timer_agrees
from specnotes.measure.checks.prices import (
    adaptive_holds,
    describe_fused,
    describe_pass_prices,
    describe_price_measured,
    describe_recompute,
)
from specnotes.measure.checks.sweeps import (
    Crossing,
    describe_amortization,
    describe_cache,
    describe_crossing,
    describe_draft_cost,
    describe_efficiency_gain,
    describe_free_batch,
    describe_gemm_efficiency,
    describe_knee,
    describe_model_gap,
    describe_slow_gemms,
    describe_speedup_trend,
    describe_verify,
)
from specnotes.measure.checks.tolerances import (
    COMPUTE_SLACK,
    LOAD,
    NOISE,
    READ_ONLY_SLACK,
    SHARE,
    THRESHOLD,
    WORK_RATIO,
    rules,
)
from specnotes.measure.checks.varying import describe_budget, describe_change, describe_host_cost, describe_position_fit
from specnotes.measure.checks.verdicts import Broken, Verdict, describe_all
from specnotes.measure.checks.wall_clock import describe_overhead_c, describe_wall_clock, wall_clock_agrees
from specnotes.measure.checks.wording import apart, moved_by

__all__ = [
    "COMPUTE_SLACK", "DEVICE_KINDS", "LOAD", "NOISE", "READ_ONLY_SLACK", "SHARE", "THRESHOLD", "WORK_RATIO", "Z",
    "Broken", "Ceiling", "Crossing", "Estimate", "PlaceStory", "Verdict", "above_ceiling", "adaptive_holds", "apart",
    "ceiling", "describe_against_range", "describe_all", "describe_alpha_sources", "describe_amortization",
    "describe_cache", "describe_context_measured", "describe_crossing", "describe_draft_cost",
    "describe_efficiency_gain", "describe_formula_gap", "describe_free_batch", "describe_fused",
    "describe_gemm_efficiency", "describe_knee", "describe_model_gap", "describe_overhead_c", "describe_pass_prices",
    "describe_places", "describe_price_measured", "describe_recompute", "describe_shared_cache",
    "describe_slow_gemms", "describe_speedup_trend", "describe_tree_formula", "describe_verify",
    "describe_wall_clock", "fastest_roofs", "grows", "moved_by", "more_work_is_slower", "order", "ratio_falls",
    "rules", "shared_cache", "speedup_bound", "speedup_falls", "timer_agrees", "wall_clock_agrees", "within_ceiling",
    "within_roofs",
    # Chapter 11
    "describe_budget", "describe_change", "describe_host_cost", "describe_position_fit",
]
