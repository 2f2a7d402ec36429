r"""Every sentence chooser: found by walking the package, registered with the claims its words make, and run
under hypothesis at and around each of its thresholds.

A *chooser* is a function that returns a sentence chosen from numbers. ``choosers()`` finds them, by this rule: a
public function or method of ``src/specnotes`` (its name not starting with ``_``) that

- returns text: its return annotation is ``str``, contains ``str`` as a value (``str | None``, ``tuple[str, str]``,
  ``dict[str, str]``, ``list[str]``) or names a *sentence class* (a class of the package with a ``sentence`` or
  ``sentences`` field, whose fields are all ``str``, or that derives from one: ``Verdict``, ``Crossing``,
  ``Goals``, ``Findings``, ``PlaceStory``, ``Ceiling``); without an annotation, it returns an f-string, a string
  or a sentence class's instance; and
- builds it from values: it holds an f-string that interpolates something (outside a ``raise`` and an error or
  warning call), or it returns strings from two or more places (a choice of words).

Each function the rule finds is either in ``registry.REGISTRY``, with its claims, or in ``registry.NOT_CHOOSERS``,
with the reason it is not one (a table, a name, an error message). ``test_every_chooser_is_registered`` fails on
any other, and on an entry for a function that no longer exists; ``test_the_walk_finds_a_chooser_planted_in_a_new
module`` shows it catching one.

**A new chooser joins in one entry** of ``tests/registry.py``, in its layer's section::

    "specnotes.analytic.moe.describe_rise": Chooser(
        args=with_batches(near(1.0, 1.05, lo=0.5, hi=2), "speedups", min_size=1),
        claims={r"S fell from": lambda a, t: a.speedups[-1] < a.speedups[0],
                r"never more than (\S+)% above": lambda a, t: max(a.speedups) <= a.speedups[0] * 1.05}),

``args`` is a hypothesis strategy of the keyword arguments (``claims.near`` puts inputs at each threshold, a hair
either side and either side of where the printed value rounds); ``claims`` maps each phrase the chooser can say (a
regular expression) to a predicate over the arguments ``a`` and the sentence ``t`` that must hold wherever it is
said, of the inputs and, for a comparison, of the numbers as printed (``claims.printed``). Every phrase must be said
on some generated input, so a claim that is never exercised fails too. ``text=`` takes the sentence out of what the
chooser returns (a Verdict's ``.sentence``), ``call=`` calls it when ``f(**args)`` does not (a method).

``test_every_claim_a_chooser_makes_holds`` runs each entry with ``HYPOTHESIS_PROFILE`` (default ``ci``: 150
examples, derandomized, so a run is repeatable; ``explore``: 3000 random ones, to hunt) and prints hypothesis'
falsifying example when a claim fails.

The example-based tests below it probe the measured chapters' choosers at chosen boundaries, and the last run every
chooser the recorded chapters use on the real records in ``data/reference``. Several choosers also have example
tests beside their module (``tests/analytic/test_moe.py``, ``test_why.py``, ``tests/serve/test_engine.py``,
``tests/advise/test_advise.py``).
"""

import ast
import functools
import importlib
import math
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, example, given, settings
from registry import BROKEN, NOT_CHOOSERS, PENDING, REGISTRY

import specnotes
from specnotes import measure
from specnotes.analytic import context
from specnotes.measure import checks, findings
from specnotes.measure.checks import Estimate
from specnotes.pages import thesis
from specnotes.serve import kvcache

E = 1e-6  # "just": a relative step inside or outside a boundary

# ---------------------------------------------------------------------------------------------- the walk


SRC = Path(specnotes.__file__).parent
ERRORS = re.compile(r"(Error|Argument|Exception|Broken|warn)$")  # calls whose f-strings are messages, not sentences


def _is_text(ann, classes) -> bool:
    """Whether a return annotation is text: str, a container with str values, or a sentence class."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return _is_text(ast.parse(ann.value, mode="eval").body, classes)
    if isinstance(ann, ast.Name | ast.Attribute):
        name = ann.id if isinstance(ann, ast.Name) else ann.attr
        return name == "str" or name in classes
    if isinstance(ann, ast.BinOp):  # X | None
        return _is_text(ann.left, classes) or _is_text(ann.right, classes)
    if isinstance(ann, ast.Subscript):
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        if ast.unparse(ann.value) in ("dict", "Mapping"):
            elts = elts[-1:]  # a dict's values, not its keys
        return any(_is_text(e, classes) for e in elts)
    return False


def _sentence_classes(trees) -> set[str]:
    """Classes of the package that carry a chosen sentence: a ``sentence``/``sentences`` field, only str fields, or
    a base that is such a class (``Ceiling(Verdict)``)."""
    out, bases = set(), {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                fields = {f.target.id: ast.unparse(f.annotation) for f in node.body
                          if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)}
                if {"sentence", "sentences"} & set(fields) or (fields and set(fields.values()) == {"str"}):
                    out.add(node.name)
                bases[node.name] = {ast.unparse(b).split(".")[-1] for b in node.bases}
    while grown := {name for name, of in bases.items() if of & out and name not in out}:
        out |= grown
    return out


def _string(v) -> bool:
    return isinstance(v, ast.JoinedStr) or (isinstance(v, ast.Constant) and isinstance(v.value, str)) or (
        isinstance(v, ast.IfExp) and (_string(v.body) or _string(v.orelse)))


def _returns_text(fn, classes) -> bool:
    if fn.returns is not None:
        return _is_text(fn.returns, classes)
    return any(isinstance(n, ast.Return) and n.value is not None and (_string(n.value) or (
        isinstance(n.value, ast.Call) and ast.unparse(n.value.func).split(".")[-1] in classes)) for n in ast.walk(fn))


def _builds_from_values(fn) -> bool:
    messages = {id(x) for n in ast.walk(fn) if isinstance(n, ast.Raise) or (
        isinstance(n, ast.Call) and ERRORS.search(ast.unparse(n.func))) for x in ast.walk(n)}
    interpolates = any(isinstance(n, ast.JoinedStr) and id(n) not in messages and any(
        isinstance(v, ast.FormattedValue) for v in n.values) for n in ast.walk(fn))
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None and _string(n.value)]
    return interpolates or len(returns) >= 2 or any(isinstance(r.value, ast.IfExp) for r in returns)


@functools.cache
def choosers(root: Path = SRC, package: str = "specnotes") -> frozenset[str]:
    """Every function under ``root`` that the rule in this file's docstring calls a chooser, by dotted name."""
    files = sorted(root.rglob("*.py"))
    trees = {path: ast.parse(path.read_text(), str(path)) for path in files}
    classes = _sentence_classes(trees.values())
    found = set()
    for path, tree in trees.items():
        module = ".".join((package, *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        for node in tree.body:
            members = [(node, "")] if isinstance(node, ast.FunctionDef) else [
                (f, f"{node.name}.") for f in node.body if isinstance(f, ast.FunctionDef)
            ] if isinstance(node, ast.ClassDef) else []
            for fn, owner in members:
                if not fn.name.startswith("_") and _returns_text(fn, classes) and _builds_from_values(fn):
                    found.add(f"{module}.{owner}{fn.name}")
    return frozenset(found)


def unregistered(root: Path = SRC, package: str = "specnotes") -> list[str]:
    return sorted(choosers(root, package) - set(REGISTRY) - set(NOT_CHOOSERS) - PENDING)


def test_every_chooser_is_registered():
    assert not unregistered(), ("choosers with no entry in tests/registry.py (REGISTRY with their claims, or "
                                f"NOT_CHOOSERS with why not): {unregistered()}")
    found = choosers()
    stale = sorted((set(REGISTRY) | set(NOT_CHOOSERS) | PENDING) - found)
    assert not stale, f"tests/registry.py names functions the walk does not find (renamed or gone?): {stale}"
    assert not set(REGISTRY) & (set(NOT_CHOOSERS) | PENDING), set(REGISTRY) & (set(NOT_CHOOSERS) | PENDING)


PLANTED = '''
from specnotes.measure.checks.verdicts import Verdict


class Bound(Verdict):
    limit: float = 0.0


def bound(s: float, limit: float) -> Bound:
    return Bound("S stays under its limit", s <= limit, True, "under" if s <= limit else f"{s:.2f} is above", {})


def describe_growth(first: float, last: float) -> str:
    return f"S rose {last / first:.2f}×" if last > first else "S fell"


def growth_word(first, last):
    if last > first:
        return "rose"
    return "fell"


def fastest(times: list[float]) -> float:
    return min(times)
'''


def test_the_walk_finds_a_chooser_planted_in_a_new_module(tmp_path):
    """A new module with an annotated chooser, an unannotated one, one that returns a subclass of Verdict, and a
    function that returns a number: the walk finds the three choosers, none is registered, so
    test_every_chooser_is_registered would fail on them."""
    tree = tmp_path / "specnotes"
    shutil.copytree(SRC, tree, ignore=shutil.ignore_patterns("data", "csrc", "__pycache__"))
    (tree / "analytic" / "planted.py").write_text(PLANTED)
    assert unregistered(tree) == ["specnotes.analytic.planted.bound", "specnotes.analytic.planted.describe_growth",
                                  "specnotes.analytic.planted.growth_word"]


def test_the_walk_finds_every_chooser_the_chapters_glue():
    """The rule catches the kinds the package has: a str, a Verdict, a Crossing, a Goals, a tuple of str, a method."""
    found = choosers()
    for name in ("specnotes.analytic.moe.describe_rise", "specnotes.measure.checks.agreement.grows",
                 "specnotes.measure.checks.sweeps.describe_crossing", "specnotes.record.calibrate.goals.judge",
                 "specnotes.measure.checks.prices.describe_recompute", "specnotes.analytic.context.fall_verdict",
                 "specnotes.measure.checks.acceptance.describe_places", "specnotes.measure.dtypes.DtypeChoice.reason"):
        assert name in found, name


# ---------------------------------------------------------------------------------------------- the claims


settings.register_profile("ci", max_examples=150, derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("explore", max_examples=3000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")


def resolve(name: str):
    """The object a dotted name names: a module's function, or a class's method or property."""
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=BROKEN[n]))
                                  if n in BROKEN else n for n in sorted(REGISTRY)])
def test_every_claim_a_chooser_makes_holds(name):
    entry, fn = REGISTRY[name], resolve(name)
    said = set()
    examples = settings.get_profile(PROFILE).max_examples
    if entry.max_examples:
        examples = min(examples, entry.max_examples) if PROFILE == "ci" else max(examples // 10, entry.max_examples)

    @settings(settings.get_profile(PROFILE), max_examples=examples)
    @given(entry.args)
    def check(args):
        text = entry.text(entry.call(fn, args) if entry.call else fn(**args))
        a = SimpleNamespace(**args)
        for phrase, holds in entry.claims.items():
            if re.search(phrase, text):
                said.add(phrase)
                assert holds(a, text), f"{name} says {phrase!r} of {args}, and that is false: {text!r}"

    for probe in entry.probes:
        check = example(probe)(check)
    check()
    never = set(entry.claims) - said
    assert not never, f"{name}: no generated input made it say {sorted(never)}: widen its args"



def below(x):
    return x * (1 - E)


def above(x):
    return x * (1 + E)


def floats(text):
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", text)]


# ---------------------------------------------------------------------------------------------- the roofs


@pytest.mark.parametrize("ratio, ok", [(above(1 / 1.5), True), (below(1 / 1.5), False)])
def test_within_roofs_says_what_its_lowest_ratio_is(ratio, ok):
    v = checks.within_roofs([ratio, 2.0], [1.0, 1.0], ["a", "b"])
    assert v.ok is ok
    if ok:
        assert re.search(r"at least (\S+)× its roofline time", v.sentence)
        assert float(re.search(r"at least (\S+)×", v.sentence).group(1)) == pytest.approx(ratio, abs=0.005)
    else:
        assert float(re.search(r"ran (\S+)× faster", v.sentence).group(1)) >= 1.5


# ---------------------------------------------------------------------------------------------- grows and falls


def grow(seen, model):
    """A two-point sweep whose measured rise is ``seen`` and modelled rise ``model``."""
    return checks.grows("x", [1, 2], [1.0, seen], [1.0, model])


@pytest.mark.parametrize("model", [below(checks.THRESHOLD), above(checks.THRESHOLD)])
def test_grows_tests_only_from_its_threshold_and_says_so(model):
    v = grow(1.0, model)
    assert v.tested is (model >= checks.THRESHOLD)
    if not v.tested:
        printed = float(re.search(r"predicts only (\S+)×", v.sentence).group(1))
        assert printed < checks.THRESHOLD, v.sentence  # "only" a rise under the threshold, as printed


@pytest.mark.parametrize("side", ["inside", "outside"])
def test_grows_prints_the_measured_and_needed_rise_in_the_order_its_verdict_says(side):
    model = 4.0
    need = model ** checks.SHARE
    seen = above(need) if side == "inside" else below(need)
    v = grow(seen, model)
    assert v.ok is (side == "inside")
    got, needed = map(float, re.search(r"measured (\S+)× \(at least (\S+)× needed\)", v.sentence).groups())
    assert (got >= needed) if v.ok else (got < needed), v.sentence
    assert v.sentence.endswith(": too flat.") is (not v.ok)


def falls(s_first, s_last, m_first=2.0, m_last=0.5):
    return checks.speedup_falls([1, 2], [s_first, s_last], [m_first, m_last])


@pytest.mark.parametrize("side", ["inside", "outside"])
def test_speedup_falls_says_which_way_s_went_and_prints_the_fall_it_needed(side):
    need = (4.0) ** checks.SHARE  # the model falls 4x
    s_last = 1.0 / above(need) if side == "inside" else 1.0 / below(need)
    v = falls(1.0, s_last)
    assert v.ok is (side == "inside")
    assert "S fell" in v.sentence
    fell, needed = (float(x) for x in re.search(r"S fell (\S+)×.*at least (\S+)×", v.sentence).groups())
    assert (fell >= needed) if v.ok else (fell < needed), v.sentence


def test_speedup_falls_does_not_say_s_fell_when_it_rose():
    v = falls(1.07, 1.29)
    assert "S rose 1.21×" in v.sentence and "S fell" not in v.sentence and "too flat" in v.sentence


@pytest.mark.parametrize("first, last, outcome", [
    (2.0, 1.5, "halved"),  # excess 1 -> 0.5: exactly halfway
    (2.0, above(1.5), "fell"),  # just short of halfway, but below 2/1.1
    (2.0, below(2.0 / 1.1), "fell"),
    (2.0, above(2.0 / 1.1), "flat"),
    (2.0, below(2.0 * 1.1), "flat"),
    (2.0, above(2.0 * 1.1), "rose"),
])
def test_ratio_falls_says_how_the_ratio_moved(first, last, outcome):
    v = checks.ratio_falls([1, 2], [first, last], [3.0, 1.2])
    assert v.numbers["outcome"] == outcome
    said = {"halved": "at least halfway to 1", "fell": "it fell, by more than", "flat": "flat, within",
            "rose": "it rose, by more than"}[outcome]
    assert said in v.sentence, v.sentence
    assert v.ok is (outcome in ("halved", "fell"))
    clause = checks.describe_context_measured(v, "cpu")
    said = {"halved": "bore it out", "fell": "fell, but only", "flat": "still cost", "rose": "rose to"}[outcome]
    assert said in clause


# ---------------------------------------------------------------------------------------------- Chapter 5


@pytest.mark.parametrize("first, last, said", [
    (2.0, 1.5, "fell at least halfway to 1"),  # excess 1 -> 0.5: exactly halfway, as excess_halved tests (<=)
    (2.0, below(1.5), "fell at least halfway to 1"),
    (2.0, above(1.5), "fell by more than the 10% noise, but not halfway to 1 before the sweep's time budget ran out"),
    (2.0, below(2.0 / 1.1), "fell by more than the 10% noise, but not halfway"),
    (2.0, above(2.0 / 1.1), "stayed flat within the 10% noise, from 1.82 to 2.00 on the way, before"),
    (2.0, below(2.0 * 1.1), "stayed flat within the 10% noise"),
    (2.0, above(2.0 * 1.1), "rose by more than the 10% noise before the sweep's time budget ran out"),
])
def test_describe_fall_says_halfway_only_of_a_ratio_that_fell_at_least_halfway(first, last, said):
    text = context.describe_fall([first, last], "budget", 0.10)
    assert text.startswith(said), text
    assert ("at least halfway" in text) is (last - 1 <= (first - 1) / 2)  # the words' claim, on the numbers
    assert ("not halfway" in text) is (last - 1 > (first - 1) / 2 and last < first / 1.1)


def test_describe_fall_says_why_the_sweep_stopped():
    assert context.describe_fall([2.0, 2.0], "memory").endswith("before the caches reached the sweep's memory cap")
    assert context.describe_fall([2.0, 2.0], "seen").endswith("over the contexts swept")
    with pytest.raises(ValueError, match="stopped must be one of seen, budget, memory"):
        context.describe_fall([2.0, 1.0], "done")




@pytest.mark.parametrize("measured", [below(5.0), above(5.0)])
def test_shared_cache_prints_the_ratio_on_the_side_of_k_plus_1_it_is_on(measured):
    v = checks.shared_cache(measured, 1.2, 4)
    assert v.ok is (measured < 5)
    printed = float(re.search(r"cost (\S+)× decode attention", v.sentence).group(1))
    assert (printed < 5) if v.ok else (printed >= 5), v.sentence
    clause = checks.describe_shared_cache(v)
    assert ("shared one read" in clause) is v.ok


def test_shared_cache_tests_nothing_where_the_model_has_attention_compute_bound():
    v = checks.shared_cache(6.0, above(2.5), 4)
    assert not v.tested and v.ok and "nothing to test" in v.sentence
    assert "not tested" in checks.describe_shared_cache(v)


# ---------------------------------------------------------------------------------------------- Chapter 4


@pytest.mark.parametrize("side", ["inside", "outside"])
def test_speedup_bound_prints_s_above_the_cap_when_it_says_so(side):
    cap = 0.95
    s = below(cap) if side == "inside" else above(cap)
    v = checks.speedup_bound([1, 2], [1.2, s], [1.5, cap])
    assert v.ok is (side == "inside")
    if not v.ok:
        got, allowed = map(float, re.search(r"S = (\S+) at B = 2, above the (\S+) ", v.sentence).groups())
        assert got > allowed, v.sentence


@pytest.mark.parametrize("cap", [below(1.0), above(1.0)])
def test_speedup_bound_says_the_roofs_allow_less_than_1_only_below_1(cap):
    v = checks.speedup_bound([1, 2], [1.2, 0.9 * cap], [1.5, cap])
    if cap < 1:
        printed = float(re.search(r"at most (\S+)\)", v.sentence).group(1))
        assert "allow less than 1" in v.sentence and printed < 1, v.sentence
        assert float(re.search(r"S ≤ (\S+)\)", v.sentence).group(1)) < 1
    else:
        assert "never fell below 1" in v.sentence
        assert float(re.search(r"lowest: (\S+) at", v.sentence).group(1)) >= 1, v.sentence


@pytest.mark.parametrize("s, paid, even", [
    (above(1.1), True, False), (below(1.1), False, True), (above(0.9), False, True), (below(0.9), False, False)])
def test_describe_crossing_says_paid_only_past_the_noise(s, paid, even):
    c = checks.describe_crossing([1, 2], [s, 0.5], "done", 4, ridge=10.0, critical_batch=10.0, k=4)
    assert (c.paid == [1]) is paid and (c.even == [1]) is even
    assert c.sentence.startswith("Speculation paid" if paid else "Speculation never paid")
    if even:
        assert "within the 10% noise" in c.sentence


@pytest.mark.parametrize("ratio, word", [(below(1.1), "within"), (above(1.1), "above"), (above(0.9), "within"),
                                         (below(0.9), "below")])
def test_describe_model_gap_says_within_only_inside_the_noise(ratio, word):
    passes = {"decode": (2e-3, 1e-3), "verify": (1e-3, 1e-3), "draft": (1e-4, 1e-4)}
    text = checks.describe_model_gap(4, 4, ratio, 1.0, passes)
    if word == "within":
        assert "is the model's" in text and "within 10%" in text
    else:
        assert f"is {word} the model's" in text


@pytest.mark.parametrize("c, word", [(above(0.11), "more than"), (below(0.11), "what its parameter count says"),
                                     (above(0.1 / 1.1), "what its parameter count says"),
                                     (below(0.1 / 1.1), "less than")])
def test_describe_draft_cost_compares_c_with_the_parameter_ratio(c, word):
    text = checks.describe_draft_cost(c, 0.1, 0.1, draft_cached=False)
    assert word in text, text


@pytest.mark.parametrize("critical", [25.0, below(25.0)])
def test_describe_free_batch_names_the_largest_free_batch(critical):
    text = checks.describe_free_batch(critical, 4)
    free = int(re.search(r"free up to B = (\d+)", text).group(1))
    assert free * 5 <= critical < (free + 1) * 5


def test_describe_verify_says_rose_only_of_a_ratio_that_rose():
    text = checks.describe_verify([1, 2, 4], [1.3, 1.2, 1.1], [1.0, 1.0, 2.0], critical_batch=100.0, k=4,
                                  decode_excess=1.0, verify_excess=1.5)
    assert "rose 0." not in text  # a ratio that ended lower fell
    assert re.search(r"measured ratio fell \d\.\d+× and the model's rose 2\.00×", text), text


# ---------------------------------------------------------------------------------------------- Chapter 1


def test_describe_gemm_efficiency_says_within_2x_only_when_every_point_is():
    rows, gbs = [1, 2, 4], [5.0, 5.0, 5.0]
    inside = checks.describe_gemm_efficiency(rows, [above(0.5), 1.0, below(2.0)], [1.0, 1.0, 1.0], gbs, 10.0)
    assert "within 2× of the roofs at every M" in inside
    fast = checks.describe_gemm_efficiency(rows, [0.4, 1.0, 1.5], [1.0, 1.0, 1.0], gbs, 10.0)
    assert "within 2× of the roofs" not in fast and "At M = 1 it ran faster than half its roofline time" in fast
    slow = checks.describe_gemm_efficiency(rows, [1.0, 1.0, above(2.0)], [1.0, 1.0, 1.0], gbs, 10.0)
    assert "within 2×" not in slow and "GEMM of 4 rows ran 2.0× its roofline time" in slow


@pytest.mark.parametrize("without, with_, word", [
    (0.5, below(0.5 / 1.1), "explain"), (0.5, above(0.5 / 1.1), "less than the 10% noise"),
    (0.5, below(0.55), "less than the 10% noise"), (0.5, above(0.55), "worse with it"),
    (below(0.1), 0.05, "already within the 10% noise"),
])
def test_describe_efficiency_gain_at_its_boundaries(without, with_, word):
    assert word in checks.describe_efficiency_gain("S(B)", without, with_)


def test_describe_amortization_says_fell_of_a_fall():
    v = checks.grows("x", [1, 8], [1.0, 4.0], [1.0, 8.0])
    text = checks.describe_amortization(v, 1, 8, 3.0)
    assert "fell 3.0× from B = 1" in text
    assert "saved nothing" in checks.describe_amortization(v, 1, 1, 1.0)


# ---------------------------------------------------------------------------------------------- Chapters 3 and 7


@pytest.mark.parametrize("times, overhead_sets", [(above(2.0), True), (below(2.0), False), (1.6, False)])
def test_describe_overhead_c_says_overhead_sets_c_only_where_the_bytes_explain_at_most_half(times, overhead_sets):
    text = checks.describe_overhead_c(0.1 * times, 0.1)
    bytes_share = 1 / times
    assert ("not the bytes, sets c" in text) is overhead_sets is (bytes_share <= 0.5), text
    if not overhead_sets:
        assert "the bytes set most of c" in text


@pytest.mark.parametrize("times, word", [(above(1.1), "the bytes set most of c"), (below(1.1), "equal within"),
                                         (above(1 / 1.1), "equal within"), (below(1 / 1.1), "faster than its share")])
def test_describe_overhead_c_near_the_bytes(times, word):
    assert word in checks.describe_overhead_c(0.1 * times, 0.1)


@pytest.mark.parametrize("times, word", [(above(2.0), "overhead sets the prices"), (1.6, "partly"),
                                         (below(1.1), "follow the bytes"), (above(1.1), "partly")])
def test_describe_pass_prices_at_its_boundaries(times, word):
    text = checks.describe_pass_prices({"draft": (0.1 * times, 0.1), "early exit": (0.2 * times, 0.2)})
    assert word in text, text


@pytest.mark.parametrize("r, word", [(below(1 / 1.1), "faster than writing"), (above(1 / 1.1), "same within"),
                                     (below(1.1), "same within"), (above(1.1), "costs more than")])
def test_describe_fused_at_its_boundaries(r, word):
    assert word in checks.describe_fused(r, 1.0)


@pytest.mark.parametrize("gap", [below(0.15), 0.15, above(0.15)])
def test_describe_formula_gap_says_close_only_under_its_bound_and_prints_which_side(gap):
    text = checks.describe_formula_gap({0.0: gap, 1.0: 0.01})
    printed = float(re.search(r"by (\S+)% at temperature 0", text).group(1))
    if gap < 0.15:
        assert "is close" in text and printed < 15, text
    else:
        assert "15% or more" in text and printed >= 15, text


@pytest.mark.parametrize("gap", [below(0.15), above(0.15)])
def test_describe_tree_formula_says_within_only_under_its_bound(gap):
    text = checks.describe_tree_formula({"chain": 2.0, "tree": 3.0 * (1 + gap)}, {"chain": 2.0, "tree": 3.0},
                                        chain="chain")
    printed = float(re.search(r"(?:within|up to) (\S+)%", text).group(1))
    assert ("predicts every tree" in text) is (gap < 0.15)
    assert (printed < 15) is (gap < 0.15), text
    assert "every wider tree yielded more" in text


@pytest.mark.parametrize("p, ok, word", [(below(2.2), True, None), (above(2.2), False, "above"),
                                         (above(1.0 / 1.1), True, None), (below(1.0 / 1.1), False, "below")])
def test_wall_clock_agrees_inside_the_widened_range(p, ok, word):
    v = checks.wall_clock_agrees("the pass times", [1, 2], [1.5, 1.5], [1.0, 1.0], [2.0, 2.0], [1.5, p])
    assert v.ok is ok
    if word:
        assert f"{word} the 1.00–2.00×" in v.sentence


@pytest.mark.parametrize("mean, word", [(0.9 + 3 * 0.01 + E, "above"), (0.9 + 3 * 0.01 - E, "in the range"),
                                        (0.5 - 3 * 0.01 - E, "below"), (0.5 - 3 * 0.01 + E, "in the range")])
def test_describe_against_range_at_three_standard_errors(mean, word):
    assert word in checks.describe_against_range(Estimate(mean, 0.01), 0.5, 0.9)


@pytest.mark.parametrize("gap, sign", [(3 * math.hypot(0.01, 0.01) + E, 1), (3 * math.hypot(0.01, 0.01) - E, 0)])
def test_order_and_the_alpha_sentences_at_three_standard_errors(gap, sign):
    a, b = Estimate(0.5 + gap, 0.01), Estimate(0.5, 0.01)
    assert checks.order(a, b) == sign
    text = checks.describe_alpha_sources([0.0], [a], [b])
    assert ("easier to agree on than held-out" in text) is (sign == 1)
    assert ("agree within sampling noise" in text) is (sign == 0)


@pytest.mark.parametrize("ratio, compare", [(below(0.8), "less than"), (above(0.8), "about as much as"),
                                            (below(1.25), "about as much as"), (above(1.25), "more than")])
def test_describe_recompute_at_its_boundaries(ratio, compare):
    said, verdict = checks.describe_recompute(ratio * 2e-3, 2e-3)
    assert said == compare
    assert ("paid more than the work it adds" in verdict) is (ratio >= 1.25)


def test_describe_recompute_says_nothing_measurable_at_or_below_zero():
    said, verdict = checks.describe_recompute(-1e-5, 2e-3)
    assert said == "less than" and "cost nothing measurable" in verdict


@pytest.mark.parametrize("weight, word", [(above(2**30), "larger than"), (2**30, "fits in")])
def test_describe_cache_fits_at_equal_size(weight, word):
    assert word in checks.describe_cache("the weight", weight, 2**30)


# ---------------------------------------------------------------------------------------------- Chapter 8


@pytest.mark.parametrize("measured, behind", [(0.85, False), (0.849, False), (0.844, True), (below(0.845), True)])
def test_adaptive_holds_says_more_than_15_percent_behind_only_of_a_printed_ratio_under_0_85(measured, behind):
    v = checks.adaptive_holds({"plain decoding": 1.1, "V0 rule": measured}, {"plain decoding": 1.0, "V0 rule": 1.0})
    printed = float(re.search(r"(\d\.\d\d)× the speed of the V0 rule", v.sentence).group(1))
    assert ("more than 15% behind" in v.sentence and "never more" not in v.sentence) is behind, v.sentence
    assert (printed < 0.85) is behind, v.sentence  # the words' claim, as printed
    assert v.ok is not behind


@pytest.mark.parametrize("predicted, clear", [(1.15, False), (above(1.15), False), (1.154, False), (1.16, True)])
def test_adaptive_holds_says_a_clear_win_only_of_a_printed_prediction_over_1_15(predicted, clear):
    v = checks.adaptive_holds({"plain decoding": 1.1, "V0 rule": 1.0}, {"plain decoding": predicted, "V0 rule": 1.0})
    assert ("predicted a clear win for adaptive k over the plain decoding" in v.sentence) is clear, v.sentence
    assert ("predicted no clear win (more than 15%)" in v.sentence) is not clear, v.sentence
    if clear:
        assert float(re.search(r"plain decoding \((\S+)×\)", v.sentence).group(1)) > 1.15


# ---------------------------------------------------------------------------------------------- the other modules


@pytest.mark.parametrize("ranges, fits, said", [([(1, 100)], 100, "pays at every batch that fits (1–100)"),
                                                 ([(1, 99)], 100, "pays at B = 1–99"), ([], 100, "never pays"),
                                                 ([(1, 5)], 0, "does not fit")])
def test_context_verdict_says_every_batch_only_of_every_batch(ranges, fits, said):
    assert context.verdict(ranges, fits) == said


def curve(accel, crossover=None, end=1.04):
    return thesis.Curve(accel, "idealized", (1, 128, 644), (2.0, 1.4, end), crossover, 644)


@pytest.mark.parametrize("end", [above(1.0), 1.004, 1.02])
def test_thesis_summary_says_still_only_of_a_speedup_it_prints_above_1(end):
    text = thesis.summary(thesis.Thesis("setup", (curve("H100-SXM", end=end),), (), "published"))
    printed = float(re.search(r"still (\S+) on the H100-SXM when memory is full", text).group(1))
    assert printed > 1, text


@pytest.mark.parametrize("drop, keep, word", [(0.5, 0.5004, "under both"), (0.5, 0.5006, "rose"),
                                              (0.5, 0.4994, "fell"), (0.5, 0.4996, "under both")])
def test_describe_alpha_change_says_what_the_printed_values_show(drop, keep, word):
    text = kvcache.describe_alpha_change(drop, keep)
    assert word in text
    printed = floats(text)
    if word == "rose":
        assert printed[1] > printed[0]
    elif word == "fell":
        assert printed[1] < printed[0]


# ---------------------------------------------------------------------------------------------- the real records


REFERENCE = Path(findings.__file__).parents[1] / "data" / "reference"
PATHS = sorted(REFERENCE.glob("*.json"))

COMPARISONS = [  # (pattern, what must hold of its two printed numbers)
    (r"measured (\d+\.\d+)× \(at least (\d+\.\d+)× needed\)\.", lambda a, b: a >= b),
    (r"measured (\d+\.\d+)× \(at least (\d+\.\d+)× needed\): too flat", lambda a, b: a < b),
    (r"S fell (\d+\.\d+)×.*so it must fall at least (\d+\.\d+)×: too flat", lambda a, b: a < b),
    (r"S fell (\d+\.\d+)×.*so it must fall at least (\d+\.\d+)×\.", lambda a, b: a >= b),
    (r"S = (\d+\.\d+) at B = \d+, above the (\d+\.\d+)", lambda a, b: a > b),
]
SINGLES = [  # (pattern, what must hold of its printed number)
    (r"(?:rose|fell|climbs[^(]*rose) (\d+\.\d+)×", lambda a: a >= 1),
    (r"at most (\d+\.\d+)\)", lambda a: a < 1),
    (r"predicts only (\d+\.\d+)×", lambda a: a < checks.THRESHOLD),
]


def record_sentences():
    for path in PATHS:
        rec = findings.recorded(measure.load_results(path))
        for n, chapter in rec.chapters.items():
            for name, text in chapter().sentences.items():
                yield f"{path.stem}: chapter {n}, {name}", text


@pytest.mark.parametrize("where, text", list(record_sentences()))
def test_every_printed_comparison_on_the_real_records_holds(where, text):
    for pattern, holds in COMPARISONS:
        for a, b in re.findall(pattern, text):
            assert holds(float(a), float(b)), f"{where}: {text}"
    for pattern, holds in SINGLES:
        for a in re.findall(pattern, text):
            assert holds(float(a)), f"{where}: {text}"
    if "within 2× of the roofs at every M" in text:
        ratios = [float(x) for x in re.search(r"took (\S+)× at M = \d+ to (\S+)×", text).groups()]
        assert 0.5 < min(ratios) and max(ratios) < 2, f"{where}: {text}"


@pytest.mark.parametrize("where, text", list(record_sentences()))
def test_every_sentence_chosen_on_the_real_records_is_short(where, text):
    """Issue 39: a glued verdict sentence has at most 45 words and no nested parentheses, counted as the built
    pages are (tests/readability.py), on every record the chapters replay."""
    from readability import MAX_GLUED_WORDS, nested_parentheses, sentences, words

    long = [s for s in sentences(text) if words(s) > MAX_GLUED_WORDS or nested_parentheses(s)]
    assert not long, f"{where}: {long}"
