"""The sampler benchmark's sentences (Chapter 7, ``python -m specnotes.bench sampler``): what a
``sampler_case_table`` says of the bar, the floor and the kernel's routes, each number printed on its side of the
edge it is compared with."""

from __future__ import annotations

from specnotes import validate
from specnotes.bench.shapes import CASE_SHAPES, FLOOR_TERMS, SAMPLER_BAR, SAMPLER_CASES
from specnotes.measure.checks import apart


def thread_words(n: int) -> str:
    return f"{n} thread{'s' if n > 1 else ''}"


def cases_named(cases) -> str:
    """"the independent case", "the independent and all accepted cases", "all three cases"."""
    cases = [c for c in SAMPLER_CASES if c in cases]
    if len(cases) == len(SAMPLER_CASES):
        return "all three cases"
    return f"the {' and '.join(cases)} case{'s' * (len(cases) > 1)}"


def times_listed(rows: dict[str, dict], column: str, cases=SAMPLER_CASES, against: float | None = None) -> str:
    """"2.08×, 1.67× and 1.20×": ``column`` for ``cases``, in case order; with ``against`` (a bar the sentence
    compares them with), each printed apart from it where it differs (1.500015 as "1.500015×", not "1.50×")."""
    shown = (lambda x: f"{x:.2f}") if against is None else (lambda x: apart(x, against)[0])
    said = [f"{shown(rows[c][column])}×" for c in SAMPLER_CASES if c in cases]
    return said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]


def bar_sentence(rows: dict[str, dict], threads: int, bar: float = SAMPLER_BAR) -> str:
    """Where sampling from logits meets the bar, ``÷ floor`` ≤ ``bar``, at one thread count (``rows``: case -> a
    ``sampler_case_table`` row), led by the ratios and the run's largest spread. "within the bar in all three
    cases" when every ratio is ≤ bar, "above the bar in all three cases" when none is, else "within the bar only in"
    the cases that are."""
    held = [c for c in SAMPLER_CASES if rows[c]["÷ floor"] <= bar]
    spread = max(rows[c]["spread (IQR / median)"] for c in SAMPLER_CASES)
    where = (f"within the {bar}× bar in all three cases" if len(held) == len(SAMPLER_CASES) else
             f"above the {bar}× bar in all three cases" if not held else
             f"within the {bar}× bar only in {cases_named(held)}")
    return (f"With {thread_words(threads)}, sampling from logits took {times_listed(rows, '÷ floor', against=bar)} "
            f"its floor in "
            f"the three cases, with a run spread of at most {spread:.0%}: {where}.")


def near_sentence(at: dict[int, dict[str, dict]], bar: float = SAMPLER_BAR) -> str:
    """The cases whose ratio lies within half their run's spread (IQR / median) of the bar, where a rerun could land
    on either side of it; "" when none does."""
    edge = [f"{at[n][c]['÷ floor']:.2f}× ({c}, {thread_words(n)})" for n in sorted(at) for c in SAMPLER_CASES
            if abs(at[n][c]["÷ floor"] - bar) < bar * at[n][c]["spread (IQR / median)"] / 2]
    if not edge:
        return ""
    listed = edge[0] if len(edge) == 1 else ", ".join(edge[:-1]) + " and " + edge[-1]
    return f"A rerun could land on either side of the bar at {listed}: each lies within half its run's spread of it."


def below_floor_sentence(at: dict[int, dict[str, dict]]) -> str:
    """The cases that took less than their floor (``÷ floor`` < 1), which no exact sampler can: the run timed the
    floor's parts slow there, and the sentence gives the run's spread beside them; "" when none did."""
    below = [(n, c) for n in sorted(at) for c in SAMPLER_CASES if at[n][c]["÷ floor"] < 1]
    if not below:
        return ""
    said = [f"{apart(at[n][c]['÷ floor'], 1.0)[0]}× ({c}, {thread_words(n)})" for n, c in below]  # under 1, printed
    spread = max(at[n][c]["spread (IQR / median)"] for n, c in below)
    listed = said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]
    return (f"At {listed} it took less than its floor, which no exact sampler can: the run timed the floor's parts "
            f"slow there, with a spread of up to {spread:.0%}.")


def why_sentence(at: dict[int, dict[str, dict]], bar: float = SAMPLER_BAR) -> str:
    """Why the cases above the bar are there, from their second pass share: the residual (or the bonus token) needs
    the rows it stopped on normalized, a second pass over them. "Counted per pass over a row" divides the ratio by
    1 + that share; when that is within the bar in every case above it, the second pass is what puts them over.
    "" when every case is within the bar."""
    over = {c: [n for n in sorted(at) if at[n][c]["÷ floor"] > bar] for c in SAMPLER_CASES}
    over = {c: ns for c, ns in over.items() if ns}
    if not over:
        return ""
    any_n = {c: at[ns[0]][c] for c, ns in over.items()}
    said = [f"{100 * row['second pass share']:.0f}%" for row in any_n.values()]
    shares = said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]
    per_pass = [at[n][c]["÷ floor"] / (1 + at[n][c]["second pass share"]) for c, ns in over.items() for n in ns]
    lead = (f"Above the bar, in {cases_named(over)}, it passes a second time over {shares} of the rows it read: the "
            "residual needs p and q normalized at the rows it stopped on.")
    lo, hi = f"{min(per_pass):.2f}×", f"{max(per_pass):.2f}×"
    one = len(per_pass) == 1 or lo == hi
    if max(per_pass) <= bar:
        return (lead + f" Counted per pass over a row, {'that takes ' + hi if one else f'they take {lo} to {hi}'} "
                f"the floor, so the second pass is what puts {'it' if len(per_pass) == 1 else 'them'} over.")
    return (lead + f" Even counted per pass over a row, {'that takes' if one else 'they take up to'} {hi} the floor: "
            "the second pass is not all of it.")


def reference_sentence(at: dict[int, dict[str, dict]]) -> str:
    """Sampling from logits against reading every input once, the reference, at each thread count: "less than that"
    in the cases where it took less than it (it read only part of the rows there), which is why that is no floor."""
    counts = sorted(at)
    took = " and ".join(f"{times_listed(at[n], '÷ read all (reference)')} with {thread_words(n)}" for n in counts)
    said = f"Against reading every input once, a reference and not a floor, it took {took}"
    faster = [(n, c) for n in counts for c in SAMPLER_CASES if at[n][c]["÷ read all (reference)"] < 1]
    if not faster:
        return said + "."
    cases = [c for c in SAMPLER_CASES if any(c == f for _, f in faster)]
    shares = " and ".join(f"{100 * at[faster[0][0]][c]['rows read']:.0f}%" for c in cases)
    where = " and ".join(f"with {thread_words(n)} in {cases_named([c for m, c in faster if m == n])}"
                         for n in dict.fromkeys(n for n, _ in faster))
    return said + f". It took less than that {where}, where it read only {shares} of the rows."


def grouped(rows: dict[str, dict], column: str, names: dict | None = None) -> str:
    """Each value of ``column`` (as ``names`` names it), with the cases that have it, in case order: "the
    log-normalizers of those rows in all three cases", "a softmax ... in the independent case; ...". """
    values = dict.fromkeys(rows[c][column] for c in SAMPLER_CASES)
    return "; ".join(f"{(names or {}).get(v, v)} in {cases_named([c for c in SAMPLER_CASES if rows[c][column] == v])}"
                     for v in values)


def floor_is_sentence(rows: dict[str, dict]) -> str:
    """Which term set the floor in each case, at one thread count: "The floor was set by ... in all three cases."."""
    return f"The floor was set by {grouped(rows, 'floor is', FLOOR_TERMS)}."


def floor_sentence(at: dict[int, dict[str, dict]]) -> str:
    """At each thread count, the normalizers' time over reading the rows once; then the fastest way to the
    normalizers and the term that sets the floor, said once when every thread count agrees on them."""
    counts = sorted(at)
    took = lambda n: f"{times_listed(at[n], 'lse of rows read ÷ read rows')} with {thread_words(n)}"
    said = [f"Against reading those rows once, their normalizers took {' and '.join(took(n) for n in counts)}."]
    ways = {n: (grouped(at[n], "normalizers fastest by", {"torch.softmax": "a softmax"}),
                grouped(at[n], "floor is", FLOOR_TERMS)) for n in counts}
    for n in (counts[:1] if len(set(ways.values())) == 1 else counts):
        way, term = ways[n]
        said.append(("The fastest way to them" if len(set(ways.values())) == 1 else
                     f"With {thread_words(n)}, the fastest way to them")
                    + f" was {way}, so the floor is {term}.")
    return " ".join(said)


def bar_sentences(at: dict[int, dict[str, dict]], bar: float = SAMPLER_BAR) -> str:
    """``bar_sentence`` for each thread count in ``at`` (thread count -> case -> row at the bar's shape), then
    ``near_sentence``, ``below_floor_sentence`` and ``why_sentence``: what a run says of the bar."""
    return " ".join(s for s in [*(bar_sentence(at[n], n, bar) for n in sorted(at)), near_sentence(at, bar),
                                below_floor_sentence(at), why_sentence(at, bar)] if s)


def sampler_sentences(case_rows: list[dict], bar: float = SAMPLER_BAR) -> dict[str, str]:
    """What ``sampler_case_table`` rows say, as sentences chosen by the numbers. At the bar's shape
    (``CASE_SHAPES[0]``), for each thread count recorded: "bar" (``bar_sentence`` for each thread count, then
    ``near_sentence`` and ``why_sentence``), "reference" (``reference_sentence``), "floor" (``floor_sentence``, and
    why a softmax could be the fastest way), "probs" (the draft-probabilities path against its own floor). At one
    sequence (``CASE_SHAPES[1]``, its fewest threads): "b1", whether it beats a softmax followed by the
    per-position loop."""
    counts = sorted({r["threads"] for r in case_rows if (r["B"], r["k"], r["V"]) == CASE_SHAPES[0]})
    if not counts:
        raise validate.BadArgument(f"need rows at B = {CASE_SHAPES[0][0]}, k = {CASE_SHAPES[0][1]}, "
                                   f"V = {CASE_SHAPES[0][2]}")
    at = {n: cases_at(case_rows, CASE_SHAPES[0], n) for n in counts}
    one = cases_at(case_rows, CASE_SHAPES[1], min((r["threads"] for r in case_rows
                                                   if (r["B"], r["k"], r["V"]) == CASE_SHAPES[1]), default=1))
    bar_text = bar_sentences(at, bar)
    by_softmax = any(r["normalizers fastest by"] == "torch.softmax" for n in counts for r in at[n].values())
    floor_text = floor_sentence(at) + (
        " A softmax can beat the log-normalizers alone because torch's softmax kernel computes its exponentials with "
        "a faster vectorized exp than torch.exp." if by_softmax else "")
    probs_text = ("Handed the draft's probabilities, vLLM's interface, it took "
                  + "; ".join(f"{times_listed(at[n], 'probs ÷ floor')} its own floor with {thread_words(n)}"
                              for n in counts) + ".")
    ms = lambda column: ", ".join(f"{one[c][column]:.3f}" for c in SAMPLER_CASES)
    faster = [c for c in SAMPLER_CASES if one[c]["from logits ms"] < one[c]["softmax, then loop ms"]]
    b1 = (f"At B = 1, sampling from logits took {ms('from logits ms')} ms in the three cases, against "
          f"{ms('softmax, then loop ms')} ms for a softmax and then the per-position loop: "
          + ("faster in every case." if len(faster) == 3 else "slower in every case." if not faster else
             f"faster only in {cases_named(faster)}."))
    return {"bar": bar_text, "reference": reference_sentence(at),
            "floor": floor_text, "probs": probs_text, "b1": b1}


# what each route does, as the dispatch sentence says it
ROUTE_WORDS = {"kept": "kept the first pass's exponentials for the residual",
               "recomputed": "exponentiated the rows a sequence stopped on again",
               "torch": "was not used: the torch path ran"}


def printed(x: float, edge: float) -> str:
    """``x`` with two decimals, or as many more as it takes to print it on its side of ``edge`` and not on it (1.504
    against a 1.5 bar is "1.504", not "1.50"), so that a sentence that compares them is true as printed."""
    for digits in range(2, 17):
        said = f"{x:.{digits}f}"
        if (float(said) > edge) == (x > edge) and (float(said) < edge) == (x < edge):
            break
    return said


def listed(values: list[str]) -> str:
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def dispatch_sentence(case_rows: list[dict], kept_below: dict[str, float], bar: float = SAMPLER_BAR,
                      draft: str = "logits") -> str:
    """How the kernel's route was chosen in each case at the bar's shape (``CASE_SHAPES[0]``) for the sampler whose
    draft comes as ``draft`` ("logits": sampling from logits; "probs": handed the draft's probabilities), from the
    record, in sentences of at most 45 words: one per route, naming its cases and the acceptance that picked it
    (measured on the case's first call) against ``kept_below[draft]`` (the record's ``notes["kept_below"]``,
    ``fused.KEPT_BELOW`` when it was made); one with that sampler's ratio to its floor at each thread count; and
    one that says whether every ratio is within ``bar``, or which are not. A number is printed with the digits
    that tell its side of the bar or the threshold (``printed``: 1.5004×, 0.7996). The route must be the same at
    every thread count (``fused.route`` reads only the acceptance)."""
    draft = validate.choice("draft", draft, ("logits", "probs"))
    route_of, ratio, lead, who = (("route", "÷ floor", "From draft logits, the kernel", "sampling from logits")
                                  if draft == "logits" else
                                  ("probs route", "probs ÷ floor", "Handed the draft's probabilities, the kernel",
                                   "that path"))
    threshold = kept_below[draft]
    counts = sorted({r["threads"] for r in case_rows if (r["B"], r["k"], r["V"]) == CASE_SHAPES[0]})
    if not counts:
        raise validate.BadArgument(f"need rows at B = {CASE_SHAPES[0][0]}, k = {CASE_SHAPES[0][1]}, "
                                   f"V = {CASE_SHAPES[0][2]}")
    at = {n: cases_at(case_rows, CASE_SHAPES[0], n) for n in counts}
    first = at[counts[0]]
    if any(first[c].get(route_of) is None for c in SAMPLER_CASES):
        raise validate.BadArgument("the record has no route per case: it was made before the kernel chose one")
    if any(at[n][c][route_of] != first[c][route_of] for n in counts for c in SAMPLER_CASES):
        raise validate.BadArgument("the route differs between thread counts in this record")
    said = []
    for route in dict.fromkeys(first[c][route_of] for c in SAMPLER_CASES):
        cases = [c for c in SAMPLER_CASES if first[c][route_of] == route]
        subject = lead if not said else "It"
        if route == "torch":
            said.append(f"{subject} {ROUTE_WORDS[route]} in {cases_named(cases)}.")
            continue
        values = [first[c]["expected acceptance"] for c in cases]
        side = ("below" if all(a < threshold for a in values) else
                "not below" if all(a >= threshold for a in values) else "against")
        shown = listed([printed(a, threshold) for a in values])
        said.append(f"{subject} {ROUTE_WORDS[route]} in {cases_named(cases)} (acceptance {shown} on the first "
                    f"call, {side} {threshold:g}).")
    floor = "its floor" if draft == "logits" else "its own floor"
    times = lambda n: listed([f"{printed(at[n][c][ratio], bar)}×" for c in SAMPLER_CASES])  # noqa: E731
    ratios = " and ".join(f"{times(n)}{' ' + floor if n == counts[0] else ''} with {thread_words(n)}" for n in counts)
    over = [f"{printed(at[n][c][ratio], bar)}× ({c}, {thread_words(n)})" for n in counts
            for c in SAMPLER_CASES if at[n][c][ratio] > bar]
    verdict = f"within the {bar:g}× bar in every case" if not over else f"above the {bar:g}× bar at {listed(over)}"
    return " ".join(said) + f" By those routes, {who} took {ratios}. {who.capitalize()} was {verdict}."


def cases_at(case_rows: list[dict], shape: tuple[int, int, int], threads: int) -> dict[str, dict]:
    """The ``sampler_case_table`` rows at (B, k, V) = ``shape`` and ``threads``, by case; every case must be there."""
    at = {r["case"]: r for r in case_rows if (r["B"], r["k"], r["V"]) == shape and r["threads"] == threads}
    if sorted(at) != sorted(SAMPLER_CASES):
        raise validate.BadArgument(f"need one row per case {SAMPLER_CASES} at B = {shape[0]}, k = {shape[1]}, "
                                   f"V = {shape[2]}, {threads} thread(s)")
    return at
