"""Why S changes between two iterations (two batches, two contexts, two engines' costs), term by term, from the
time split (``cost.breakdown``), and the sentence that says it (``describe_why``).

S = E[N]·T_decode/T_iter = E[N]/(1 + X), with X = (T_iter − T_decode)/T_decode what an iteration costs beyond the
decode step it replaces, in decode steps. X is a sum over the split's terms (``cost.TERMS``):

    x_t = (iter_t − decode_t)/T_decode,

each term's excess over plain decoding (``excess``): 0 for the target's KV reads and the verify pass's weight reads
while both passes are memory-bound (both read them once), the draft's whole cost for the draft's terms, the verify
pass's extra FLOPs once they are compute-bound. Between two iterations ln(1 + X) moves by ΔX/Λ exactly, Λ the
logarithmic mean of 1 + X, so term t's part of the fall of ln S is Δx_t/Λ, and with −Δln E[N] for the tokens an
iteration yields ("acceptance") the parts sum to ln(S₀/S₁) (``parts``). A positive part took S down, a negative one
lifted it. A change of scale (every pass twice as fast) moves no part. A term that costs plain and speculative
decoding alike (the target's KV reads) has no part of its own: it lifts S by making the decode step longer, so that
every other term's excess is fewer decode steps. The sentence names that too: how much the decode step grew and
which term grew it most.

``driver`` names the term with the largest part in the direction S moved, its share of the parts in that
direction, the passes it comes from and the regime there: the bound of the kernels it is priced in (a compute term
whose kernels are memory-bound adds its time only when the engine does not overlap them, ``overlap="none"``), the
link, or a fixed cost. ``describe_why`` says it in two short sentences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specnotes import validate
from specnotes.analytic import cost

CLOSE = 0.05  # S within 5% of where it started "barely moves": no term is named for it
MOSTLY = 0.5  # "mostly because of" a term whose part is more than half of the parts in S's direction
STEP = 0.10  # a decode step that grew or shrank more than 10% is said to have, with the term that moved it

WORDS = {"dense weights": "weight reads", "expert weights": "expert weight reads", "target KV": "KV reads",
         "draft KV": "KV reads", "matmul FLOPs": "matmul FLOPs", "attention FLOPs": "attention FLOPs",
         "all-reduce": "all-reduces", "all-to-all": "all-to-alls", "fixed": "fixed costs",
         "host": "host lookups", "acceptance": "tokens an iteration yields"}
KERNELS = {"dense weights": ("matmul", "lm head", "heads"), "expert weights": ("experts",), "target KV": ("attention",),
           "draft KV": ("attention",), "matmul FLOPs": ("matmul", "lm head", "heads", "experts"),
           "attention FLOPs": ("attention",)}


def _lmean(a: float, b: float) -> float:
    return a if math.isclose(a, b, rel_tol=1e-15) else (b - a) / math.log(b / a)


def _tokens(tokens) -> tuple[float, float]:
    pair = tokens if isinstance(tokens, tuple | list) else (tokens, tokens)
    if len(pair) != 2:
        raise validate.BadArgument(f"tokens must be E[N], or (E[N] before, E[N] after); got {tokens!r}")
    return tuple(validate.number("tokens (E[N])", t, low=0, low_open=True) for t in pair)


def excess(b: cost.Breakdown) -> dict:
    """{term: what the iteration spends on it beyond the decode step, in decode steps}: (iter − decode)/T_decode.
    They sum to T_iter/T_decode − 1."""
    it, dec = b.totals("iteration"), b.totals("decode")
    return {t: (it[t] - dec[t]) / b.decode.total for t in cost.TERMS}


def parts(before: cost.Breakdown, after: cost.Breakdown, tokens=1.0) -> dict:
    """{term: its part of ln(S_before/S_after)} over ``cost.TERMS`` (Δexcess/Λ), and "acceptance" (−Δln E[N];
    ``tokens``: E[N], or (E[N] before, E[N] after)). They sum to ln(S_before/S_after) to float rounding."""
    n0, n1 = _tokens(tokens)
    x0, x1 = excess(before), excess(after)
    r = _lmean(1 + sum(x0.values()), 1 + sum(x1.values()))
    out = {t: (x1[t] - x0[t]) / r for t in cost.TERMS}
    out["acceptance"] = -math.log(n1 / n0)
    return out


@dataclass(frozen=True)
class Driver:
    """The term that moved S most in the direction it moved (``falls``: S fell), its ``share`` of the parts in that
    direction, the part of the iteration it comes from (``where``: "draft", "verify" for what the verify pass spends
    beyond the decode step, or "iteration" for E[N]) and its regime
    there (``regime``: "memory-bound", "compute-bound", "memory-bound, not hidden", "hidden under compute", "link",
    "fixed", "host" (a drafter's host work per sequence) or "acceptance")."""

    term: str
    share: float
    falls: bool
    where: str
    regime: str


def _where(before: cost.Breakdown, after: cost.Breakdown, term: str, falls: bool) -> str:
    """The part of the iteration whose excess of ``term`` moved most the way S went: the drafts' (all of theirs is
    excess) or the verify pass's (what it spends beyond the decode step), in decode steps."""
    step = lambda b, part: b.totals(part)[term] / b.decode.total
    moved = {"draft": step(after, "draft") - step(before, "draft"),
             "verify": (step(after, "verify") - step(after, "decode")) - (step(before, "verify") - step(before,
                                                                                                         "decode"))}
    return max(moved, key=lambda w: moved[w] if falls else -moved[w])


def _regime(after: cost.Breakdown, term: str, where: str) -> str:
    if term == "acceptance":
        return "acceptance"
    roof = cost.ROOFS[term]
    if roof in ("link", "fixed", "host"):
        return roof
    passes = {"verify": (after.verify,), "decode": (after.decode,), "draft": after.drafts}[where]
    kernels = [k for p in passes for k in p.kernels if k.name in KERNELS[term]]
    if not kernels:
        return f"{roof}-bound"
    k = max(kernels, key=lambda k: k.memory if roof == "memory" else k.compute)  # the kernel that carries it most
    if roof == "memory":
        return "memory-bound" if k.bound == "memory" else "hidden under compute"
    return "compute-bound" if k.bound == "compute" else "memory-bound, not hidden"


def driver(before: cost.Breakdown, after: cost.Breakdown, tokens=1.0) -> Driver | None:
    """The term whose part (``parts``) is largest in the direction S moved, or None where S did not move."""
    p = parts(before, after, tokens)
    total = sum(p.values())
    if total == 0:
        return None
    falls = total > 0
    same = {t: v for t, v in p.items() if (v > 0) == falls and v != 0}
    term = max(same, key=lambda t: abs(same[t]))
    where = _where(before, after, term, falls) if term != "acceptance" else "iteration"
    return Driver(term, abs(same[term]) / sum(abs(v) for v in same.values()), falls, where,
                  _regime(after, term, where))


def _phrase(d: Driver) -> str:
    owner = "the draft's" if d.term == "draft KV" else {"verify": "the verify pass's", "draft": "the draft passes'"}[
        d.where]
    return f"{owner} {WORDS[d.term]}"


def _regime_words(d: Driver, label: str) -> str:
    return {"memory-bound": f"memory-bound {label}", "compute-bound": f"compute-bound {label}",
            "memory-bound, not hidden": f"memory-bound {label}, but their time adds to the bytes' (overlap "
                                        '"none")',
            "hidden under compute": f"hidden under compute {label}", "link": "on the link between devices",
            "fixed": "paid once per pass whatever it reads",
            "host": "on the host, per sequence, while the device waits"}[d.regime]


def _decode_grew(before: cost.Breakdown, after: cost.Breakdown) -> tuple[float, str, float]:
    """(T_decode after / before, the term whose decode seconds moved most that way, its share of that move)."""
    moved = {t: after.decode.seconds[t] - before.decode.seconds[t] for t in cost.TERMS}
    grew = after.decode.total > before.decode.total
    same = {t: v for t, v in moved.items() if (v > 0) == grew and v != 0}
    term = max(same, key=lambda t: abs(same[t]))
    return after.decode.total / before.decode.total, term, abs(same[term]) / sum(abs(v) for v in same.values())


def describe_why(before: cost.Breakdown, after: cost.Breakdown, tokens=1.0, *, labels: tuple[str, str] | None = None,
                 close: float = CLOSE, step: float = STEP) -> str:
    """Why S moved from ``before`` to ``after`` (``cost.breakdown`` of each; ``tokens``: E[N], or E[N] of each), in
    two or three short sentences: which way S went (and whether it crossed 1) and the term whose excess over plain
    decoding moved it most (``driver``), its regime and its share of what moved S that way; then, where the decode
    step itself changed by more than ``step``, by how much and from which term. "barely moves" (no term named)
    within ``close``. ``labels``: where each is, as the sentence says it (default "at B = b")."""
    close = validate.number("close", close, low=0, high=1)
    step = validate.number("step", step, low=0)
    n0, n1 = _tokens(tokens)
    s0, s1 = before.speedup(n0), after.speedup(n1)
    at0, at1 = labels or (f"at B = {before.batch}", f"at B = {after.batch}")
    a, b = _apart(s0, s1)
    if abs(math.log(s1 / s0)) <= math.log1p(close):
        return f"S barely moves, from {a} {at0} to {b} {at1}, within {close:.0%}."
    d = driver(before, after, (n0, n1))
    crossing = ", crossing 1," if (s0 - 1) * (s1 - 1) < 0 else ""
    how = "mostly" if d.share > MOSTLY + 1e-6 else "in largest part"  # more than half, as printed (_percent)
    head = f"S {'falls' if d.falls else 'rises'} from {a} {at0} to {b} {at1}{crossing} {how} because"
    share = f"{_percent(d.share, MOSTLY)} of what {'took S down' if d.falls else 'lifted S'}"
    if d.term == "acceptance":
        said = f"{head} of the tokens an iteration yields: E[N] goes from {n0:.2f} to {n1:.2f}, {share}."
    else:
        said = (f"{head} {_phrase(d)} take {'more' if d.falls else 'fewer'} decode steps beyond plain decoding. "
                f"They are {_regime_words(d, at1)}, and they make {share}.")
    if abs(math.log(after.decode.total / before.decode.total)) <= math.log1p(step):
        return said
    ratio, term, part = _decode_grew(before, after)
    owner = {"draft KV": "the draft's", "target KV": "the target's"}.get(term, "its")
    return (f"{said} The decode step itself takes {_times(ratio)} as long {at1}, "
            f"{'mostly' if part > MOSTLY else 'in largest part'} from {owner} {WORDS[term]}.")


def _times(x: float) -> str:
    """A ratio of times, printed apart from 1 ("1.3×", "0.98×")."""
    for d in range(1, 4):
        text = f"{x:.{d}f}"
        if float(text) != 1:
            return f"{text}×"
    return f"{x:.3f}×"


def _apart(x: float, y: float) -> tuple[str, str]:
    """Two speedups printed with two decimals, or as many more (up to 4) as it takes to print them apart, and each
    apart from 1 (so that "crossing 1" never prints 1.00)."""
    for d in range(2, 5):
        a, b = f"{x:.{d}f}", f"{y:.{d}f}"
        if a != b and all(t != f"{1:.{d}f}" or v == 1 for t, v in ((a, x), (b, y))):
            break
    return a, b


def _percent(x: float, bound: float) -> str:
    """A share as a whole percentage, with a decimal where a whole one would print it on the wrong side of ``bound``
    ("50%" for 50.4% beside "mostly")."""
    for d in range(5):
        text, edge = f"{x:.{d}%}", f"{bound:.{d}%}"
        if text != edge or x == bound:
            return text
    return text
