"""What the records say, chosen by the numbers: the clock cross-check, which way speculation went in every pair,
the break-even draft cost, and the verdicts on the engine's overhead, its acceptance against specnotes' own and
the big pair's verify pass."""


def clock_sentence(low: float, high: float, tolerance: float = 0.1) -> str:
    """What the cross-check of the client's median TPOT against the engine's own says (``pair_table``'s
    "client/engine TPOT" range over every level and run)."""
    if 1 - tolerance <= low and high <= 1 + tolerance:
        return (f"The client's median TPOT agreed with the engine's own within {max(1 - low, high - 1):.0%} at every "
                "level, and the client counted exactly the tokens the engine generated.")
    return (f"The client counted exactly the tokens the engine generated, but its median TPOT ranged from {low:.2f} "
            f"to {high:.2f} times the engine's own: at about a millisecond per token a busy machine delayed the "
            "server's streaming thread, and the tokens arrived in bursts. Here the engine's clock is the one to "
            "trust.")


NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}


def listed(values, fmt="{:.2f}") -> str:
    """"0.68, 0.56 and 0.80"."""
    said = [fmt.format(v) for v in values]
    return said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]


def pairs_sentence(rows: list[dict]) -> str:
    """Which way speculation went in every pair at each concurrency (``pair_table`` or ``model_beside`` rows, with
    "S each"; a big record's pairs above the ceiling left out): "lost in every pair" where every pair's S < 1,
    "won in every pair" where every pair's S > 1, and where the pairs lie on both sides of 1 (or on it), that the run
    cannot tell whether speculation pays there."""
    each = {r["concurrency"]: [x for x in r["S each"] if x not in r.get("pairs above the ceiling", [])] for r in rows}
    lost = [b for b, s in each.items() if max(s) < 1]
    won = [b for b, s in each.items() if min(s) > 1]
    mixed = [b for b in each if b not in lost and b not in won]
    counts = {len(s) for s in each.values()}
    every = f"every one of the {counts.pop()} pairs" if len(counts) == 1 else "every pair"
    parts = []
    if lost:
        parts.append(f"lost in {every} at B = {listed(lost, '{}')}, the largest S being "
                     f"{listed(max(each[b]) for b in lost)}")
    if won:
        parts.append(f"won in {every} at B = {listed(won, '{}')}, the smallest S being "
                     f"{listed(min(each[b]) for b in won)}")
    said = "Speculation " + "; it ".join(parts) + "." if parts else ""
    if mixed:
        ranges = listed((f"{min(each[b]):.2f}–{max(each[b]):.2f}" for b in mixed), "{}")
        said += (f" At B = {listed(mixed, '{}')} the pairs gave S = {ranges}, on both sides of 1: this run cannot "
                 "tell whether speculation pays there.")
    return said.strip()


def break_even_c(tokens_per_step: float, k: int) -> float:
    """The draft pass's cost, as a share c of a plain step, at which speculation breaks even on llama-server, taking
    the verify pass at one plain step: a speculative step costs 1 + (k + 1)c plain steps for ``tokens_per_step``
    tokens (k draft passes and the re-evaluation), so S = E[N] / (1 + (k + 1)c) = 1 at c = (E[N] − 1) / (k + 1)."""
    return (tokens_per_step - 1) / (k + 1)


def overhead_verdict(rows: list[dict], costs: list[dict] | None = None):
    """What the shipped pair's record says of the engine's costs, chosen by the numbers. ``rows``: ``model_beside``;
    ``costs``: ``draft_pass_cost`` (optional). Each measured S is placed against the overhead-bound limit L =
    E[N]/(k + 2) and the roofline's R at its concurrency: "below the limit" (S < L), "above the roofline" (S > R),
    else between them, "nearer the limit" or "nearer the roofline" by |log S/L| against |log S/R|. With the costs,
    the draft pass's inferred c against the roofline's (the smallest ratio of the two), and against the break-even c
    (``break_even_c``), both the limit and the break-even from the engine's tokens per step: "loses" where every c
    is above it, "pays" where every c is below it. The ``Verdict`` holds (the engine is overhead-bound) when every S
    is nearer the limit than the roofline."""
    import math

    from specnotes.measure.checks import Verdict

    b = [r["concurrency"] for r in rows]
    s = [r["S measured"] for r in rows]
    k = rows[0]["k"]
    limit, roof = rows[0]["S overhead-bound"], [r["S roofline"] for r in rows]
    en = costs[0]["tokens per step"] if costs else rows[0].get("tokens per step", limit * (k + 2))
    limit = en / (k + 2)  # one E[N] for the limit and the break-even c: the engine's tokens per step
    spread = max(r["S max"] / r["S min"] for r in rows) if all("S min" in r for r in rows) else None
    sentences = [f"At B = {listed(b, '{}')} the engine measured S = {listed(s)}"
                 + (f", with its pairs up to {spread:.2f}× apart." if spread else ".")]
    nearer = [abs(math.log(x / limit)) < abs(math.log(x / r)) for x, r in zip(s, roof, strict=True)]
    below = [bb for bb, x in zip(b, s, strict=True) if x < limit]
    above = [bb for bb, x, r in zip(b, s, roof, strict=True) if x > r]
    between = [(bb, n, r) for bb, x, r, n in zip(b, s, roof, nearer, strict=True) if limit <= x <= r]
    where = []
    if between:
        near = {n for _, n, _ in between}
        which = ("nearer the limit" if near == {True} else "nearer the roofline" if near == {False} else
                 f"nearer the limit at B = {listed([bb for bb, n, _ in between if n], '{}')}")
        where.append(("every value lies" if len(between) == len(b) else
                      f"at B = {listed([bb for bb, _, _ in between], '{}')} S lies")
                     + f" between the overhead-bound limit E[N]/(k + 2) = {en:.2f}/{k + 2} = {limit:.2f} and the "
                       "roofline's "
                       + f"{listed(r for _, _, r in between)}, {which}")
    if below:
        where.append(f"at B = {listed(below, '{}')} S is below the limit {limit:.2f}: a speculative step cost more "
                     "than k + 2 plain steps")
    if above:
        where.append(f"at B = {listed(above, '{}')} S is above the roofline's S")
    sentences.append("; ".join(where)[0].upper() + "; ".join(where)[1:] + ".")
    if costs:
        c = [x["c (inferred)"] for x in costs]
        c_roof = [x["c (roofline)"] for x in costs]
        even = break_even_c(costs[0]["tokens per step"], k)
        sentences.append(f"Taking the verify pass at one plain step, a draft pass cost c = {min(c):.2f}–{max(c):.2f} "
                         f"of a plain step: at least {min(x / y for x, y in zip(c, c_roof, strict=True)):.0f}× what "
                         f"its bytes cost on the roofline, {min(c_roof):.2f}–{max(c_roof):.2f}.")
        verdict = ("so at these costs it loses" if min(c) > even else "so at these costs it pays" if max(c) < even
                   else "and c crosses it between the concurrencies measured")
        sentences.append(f"With {costs[0]['tokens per step']:.2f} tokens per step, speculation pays only below "
                         f"c = {even:.2f}, {verdict}.")
    return Verdict("the engine is overhead-bound on the shipped pair", all(nearer), True, " ".join(sentences),
                   {"S measured": listed(s), "S overhead-bound": limit, "S roofline": listed(roof)})


def acceptance_verdict(engine_acceptance: float, ours: dict, margin: float = 0.05):
    """The engine's accepted / drafted against specnotes' own decoder (``specnotes_acceptance``: every prompt of the
    set the engine's levels sent the first of): at temperature 0 both run the same greedy pair, so they should
    agree within ``margin``."""
    from specnotes.measure.checks import Verdict

    theirs, mine = engine_acceptance, ours["accepted_per_drafted"]
    ok = abs(theirs - mine) <= margin
    prompts = f"all {ours['prompts']} prompts" if ours.get("prompts") else "every prompt"
    sentence = (f"The engine accepted {theirs:.1%} of the tokens it drafted. With the same k on {prompts} of the "
                f"set the engine's requests were drawn from, specnotes' own decoder accepts {mine:.1%}: its α, "
                f"accepted over checked, is {ours['alpha']:.2f}, and E[N] = {ours['mean_tokens_per_iteration']:.2f} "
                "tokens per iteration. "
                + (f"Within {100 * margin:.0f} points of each other: the same pair, the same greedy acceptance." if ok
                   else f"They differ by more than {100 * margin:.0f} points, so the two do not draft alike."))
    return Verdict("the engine accepts what specnotes accepts", ok, True, sentence,
                   {"engine": theirs, "specnotes": mine, "margin": margin})


def verify_verdict(rows: list[dict], bar: float = 1.5):
    """The big pair (α = 1, its own draft): the verify/decode time ratio r = ((k + 1)/S − k)/2 each measured S(B)
    implies (``model_beside``), chosen by the numbers as printed (two decimals). "below ``bar``" where r < bar;
    "under half" where r < (k + 1)/2, half of what a pass that paid per token would cost (r = k + 1; a memory-bound
    pass, which reads the weights once either way, costs r = 1); "rises with B" where r grows at every step. Pairs
    above the α = 1 ceiling by more than the noise allows (``checks.above_ceiling``) are named as noise. The
    ``Verdict`` holds when r is under half at every batch."""
    from specnotes.measure.checks import NOISE, Verdict

    k = rows[0]["k"]
    b = [row["concurrency"] for row in rows]
    r = [round(row["verify/decode measured"], 2) for row in rows]
    half = (k + 1) / 2
    sentences = [f"With every draft accepted, S(B) = {listed(row['S measured'] for row in rows)} at "
                 f"B = {listed(b, '{}')} says one verify pass over k + 1 tokens cost r = {listed(r)} decode passes. "
                 f"The roofline says {listed(row['verify/decode roofline'] for row in rows)}, and a pass that paid per "
                 f"token would cost {k + 1}."]
    below = [bb for bb, rr in zip(b, r, strict=True) if rr < bar]
    closer = [bb for bb, rr in zip(b, r, strict=True) if rr < half]
    rising = len(r) > 1 and all(y > x for x, y in zip(r, r[1:], strict=False))
    claim = ("It stays below {bar} at every batch" if below == b else
             f"It is below {bar} only at B = {listed(below, '{}')}" if below else f"It is {bar} or more at every batch")
    claim = claim.format(bar=bar) + (" and rises with B" if rising else "")
    if closer == b:
        sentences.append(claim + f": under half the {k + 1} one-token passes it would cost if it paid per token. "
                         "Reading the weights once for k + 1 tokens is the bandwidth trade, on a real engine.")
    else:
        far = [bb for bb in b if bb not in closer]
        sentences.append(claim + f". At B = {listed(far, '{}')} it is half of {k + 1} or more: there the verify "
                         "pass's arithmetic, not the weight reads, sets its price.")
    noise = [(row["concurrency"], x) for row in rows for x in row.get("pairs above the ceiling", [])]
    if noise:
        ceiling = rows[0]["S ceiling (α = 1)"]
        one = len(noise) == 1
        who = "One pair" if one else f"{NUMBERS.get(len(noise), len(noise))} pairs".capitalize()
        sentences.append(f"{who} at B = {listed(sorted({bb for bb, _ in noise}), '{}')} gave "
                         f"S = {listed(x for _, x in noise)}, above the ceiling (k + 1)/(k + 2) = {ceiling:.2f} "
                         f"that no step at α = 1 can pass, by more than the {NOISE:.0%} noise allows. Load slowed "
                         + ("its plain run, so it is" if one else "their plain runs, so they are")
                         + " left out of the pairs' range.")
    return Verdict("a verify pass costs under half of k + 1 decode passes", closer == b, True,
                   " ".join(sentences), {"r": listed(r), "bar": bar})
