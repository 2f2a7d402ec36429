"""Chapters 7 to 9 on what this device's measured prices say: what sets each drafter's pass price, sampling
straight from the logits against softmax first, the shipped pair's prices against the bytes (Chapter 7), adaptive
k against the other policies (Chapter 8, a :class:`Verdict`), and a prefix-cache hit's recompute (Chapter 9)."""

from __future__ import annotations

import math

from specnotes import validate
from specnotes.measure.checks.tolerances import NOISE
from specnotes.measure.checks.verdicts import Verdict


def describe_pass_prices(prices: dict, *, overhead: float = 2.0, noise: float = NOISE) -> str:
    """What sets the price of each drafter's pass on this device (Chapter 7): ``prices`` maps a drafter to
    (its measured c, the c its share of the bytes gives). "Per-pass overhead sets the prices" claims that the
    bytes explain at most half of every price (``overhead`` = 2 times the bytes' share or more); "the prices
    follow the bytes" that every price is within ``noise`` of its share; anything else is "partly"."""
    if not prices:
        raise validate.BadArgument("prices must name at least one drafter")
    ratio = {name: validate.number(f"{name} measured c", m, low=0, low_open=True)
             / validate.number(f"{name} c by bytes", b, low=0, low_open=True) for name, (m, b) in prices.items()}
    listed = " and ".join(f"the {name} {r:.2f}× its share of the bytes" for name, r in ratio.items())
    if all(r >= overhead for r in ratio.values()):
        return f"At these model sizes per-pass overhead sets the prices here: {listed}."
    if all(abs(math.log(r)) <= math.log1p(noise) for r in ratio.values()):
        return f"The prices here follow the bytes, within the {noise:.0%} noise: {listed}."
    return f"The prices here are partly the bytes and partly per-pass overhead: {listed}."


def describe_fused(fused_s: float, unfused_s: float, *, noise: float = NOISE) -> str:
    """Sampling straight from the logits (reading only the rows it needs) against softmax-then-sample, which
    writes p and q first, on the same inputs (Chapter 7): faster, about as fast, or slower, by the numbers."""
    r = validate.number("fused_s", fused_s, low=0, low_open=True) / validate.number("unfused_s", unfused_s, low=0,
                                                                                     low_open=True)
    if r < 1 / (1 + noise):
        return (f"Reading only the rows it needs, sampling from the logits ran {1 / r:.1f}× faster than writing p and "
                "q first on the independent logits.")
    if r <= 1 + noise:
        return (f"On the independent logits, sampling from them took {r:.2f}× the time of writing p and q first: the "
                f"same within the {noise:.0%} noise.")
    return (f"On the independent logits, sampling from them took {r:.2f}× the time of writing p and q first: here its "
            "work per row read costs more than the softmax of the rows it skips.")


def describe_price_measured(pass_s: float, weight_bytes: float, bandwidth: float, draft_c: float,
                            draft_c_bytes: float, chain: tuple[int, float], tree: tuple[int, float], *,
                            noise: float = NOISE) -> str:
    """Chapter 7's takeaway, on this device: the model prices a drafter by what it reads; the sentence says where
    the shipped pair's measured prices disagree and why, by the numbers. ``pass_s``: a one-token target pass;
    ``weight_bytes`` read at ``bandwidth`` (bytes/s) is what the roofline would charge for it; ``draft_c`` against
    ``draft_c_bytes``: a draft pass over a target pass, measured and by bytes; ``chain``, ``tree``: (tokens per
    sequence, measured verify time over a one-token pass), which the model prices at about one pass each while
    the weights dominate the bytes. The opening says which of the two follows that price, each within ``noise``
    (the draft's c of its bytes share; both verify passes of one pass)."""
    pass_s = validate.number("pass_s", pass_s, low=0, low_open=True)
    read_s = validate.number("weight_bytes", weight_bytes, low=0, low_open=True) / validate.number(
        "bandwidth", bandwidth, low=0, low_open=True)
    draft_c = validate.number("draft_c", draft_c, low=0, low_open=True)
    draft_c_bytes = validate.number("draft_c_bytes", draft_c_bytes, low=0, low_open=True)
    (n_chain, chain_x), (n_tree, tree_x) = ((validate.integer("tokens", n, low=1), validate.number(
        "verify time", x, low=0, low_open=True)) for n, x in (chain, tree))
    near = lambda x: abs(math.log(x)) <= math.log1p(noise)  # within the noise of what the bytes say
    draft_follows, verify_follows = near(draft_c / draft_c_bytes), near(chain_x) and near(tree_x)
    if draft_follows:
        draft = f"A draft pass costs c = {draft_c:.3f} of a target pass, its {draft_c_bytes:.3f} by bytes."
    else:
        draft = (f"A draft pass costs c = {draft_c:.3f} of a target pass, against {draft_c_bytes:.3f} by bytes. A "
                 f"one-token target pass takes {1e3 * pass_s:.2f} ms, where reading its {weight_bytes / 1e6:.1f} MB "
                 f"of weights at the copy bandwidth measured above takes {1e3 * read_s:.2f} ms. The rest is per-pass "
                 "overhead, which a small model pays in full.")
    verify = (f"Verifying the {n_chain}-token chain measured {chain_x:.2f} one-token passes and the {n_tree}-token "
              f"tree {tree_x:.2f}, where the bytes, read once either way, say about 1.")
    if tree_x < chain_x / (1 + noise):
        verify += (" The tree measured cheaper than the chain: more work ran faster, which no count of bytes or "
                   "FLOPs allows. At a few milliseconds a pass, single timings on a shared CPU move by more than that.")
    opening = ("follows that price" if draft_follows and verify_follows else
               "follows that price in its draft but not in its verify passes" if draft_follows else
               "follows that price in its verify passes but not in its draft" if verify_follows else
               "does not follow that price")
    return f"Measured on this device, the shipped pair {opening}. {draft} {verify}"


def describe_recompute(per_hit_s: float, alone_s: float, *, low: float = 0.8, high: float = 1.25) -> tuple[str, str]:
    """Chapter 9: what one prefix-cache hit's recompute under the drop rule cost inside a batched admission
    (``per_hit_s``: the drop rule's admission time less the keep rule's, per request; may be at or below 0 in
    noise) against prefilling the same tokens for one sequence on their own (``alone_s``). Returns the
    comparison ("less than", "about as much as", "more than"; ``low`` and ``high`` bound "about") and the
    closing sentence, chosen by the same ratio."""
    per_hit_s = validate.number("per_hit_s", per_hit_s)
    ratio = per_hit_s / validate.number("alone_s", alone_s, low=0, low_open=True)
    compare = "less than" if ratio < low else "about as much as" if ratio < high else "more than"
    if per_hit_s <= 0:
        return compare, ("Within this run's noise the recompute cost nothing measurable: a recompute is a prefill, "
                         "no more.")
    if ratio < high:
        return compare, "A recompute is a prefill, no more."
    return compare, (f"Here a recompute cost {ratio:.1f}× a prefill of its tokens on their own: inside the batched "
                     "admission it paid more than the work it adds.")


def adaptive_holds(ratios: dict, sampled: dict, *, clear: float = 1.15, behind: float = 0.85) -> Verdict:
    """Chapter 8's adaptive k against each other policy (``ratios``: that policy's measured time over adaptive
    k's; ``sampled``: the same ratio predicted by step times sampled during the run): where the prediction is a
    clear win (more than ``clear``: "more than 15%"), adaptive k should measure faster, and it should never be far
    behind: "more than 15% behind" is a ratio under ``behind``, and "never more than 15% behind" every ratio at or
    above it. A finding, chosen by the numbers."""
    if set(ratios) != set(sampled) or not ratios:
        raise validate.BadArgument("ratios and sampled must name the same policies")
    claim = "adaptive k wins where the run's own step times predict it clearly, and is never far behind"
    shown = lambda x: round(x, 2)  # each ratio as the sentence prints it: its words are true of that number
    lost = [n for n, r in ratios.items() if shown(sampled[n]) > clear and not shown(r) > 1.0]
    far = [n for n, r in ratios.items() if shown(r) < behind]
    wins = [n for n in ratios if shown(sampled[n]) > clear]
    numbers = {"lowest ratio": min(ratios.values()), "clear wins predicted": len(wins)}
    low = min(ratios, key=ratios.get)
    if not lost and not far:
        listed = lambda items: " and ".join(items)
        said = ("The step times sampled during the run predicted a clear win for adaptive k over the "
                + listed(f"{n} ({sampled[n]:.2f}×)" for n in wins) + ", and it measured "
                + listed(f"{ratios[n]:.2f}×" for n in wins)
                if wins else "The step times sampled during the run predicted no clear win (more than "
                f"{clear - 1:.0%}) for adaptive k over any policy")
        return Verdict(claim, True, True, f"{said}. Adaptive k was never more than {1 - behind:.0%} behind: at worst "
                       f"it ran at {ratios[low]:.2f}× the speed of the {low}.", numbers)
    parts = [f"the step times sampled during the run predicted a clear win over the {n} ({sampled[n]:.2f}×) and it "
             f"measured {ratios[n]:.2f}×" for n in lost]
    parts += [f"adaptive k ran at {ratios[n]:.2f}× the speed of the {n}, more than {1 - behind:.0%} behind"
              for n in far]
    return Verdict(claim, False, True, "Not as predicted: " + "; ".join(parts) + ". The split of each policy's error "
                   "below says how much of it was the machine's drift, the contexts and the rest.", numbers)
