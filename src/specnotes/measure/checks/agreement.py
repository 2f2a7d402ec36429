"""Agreement with the model on this device's measured roofs, each a :class:`Verdict`: no pass beats the roofs
(:func:`within_roofs`, :func:`fastest_roofs`), a predicted rise shows (:func:`grows`), S(B) falls and stays under
its cap (:func:`speedup_falls`, :func:`speedup_bound`), and Chapter 5's verify/decode at growing context
(:func:`ratio_falls`, :func:`shared_cache`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from specnotes import validate
from specnotes.analytic import hardware
from specnotes.analytic.context import excess_halved
from specnotes.measure.checks.inputs import _batches, _positive
from specnotes.measure.checks.tolerances import COMPUTE_SLACK, NOISE, READ_ONLY_SLACK, SHARE, THRESHOLD
from specnotes.measure.checks.verdicts import Verdict
from specnotes.measure.checks.wording import apart, moved_by


def within_roofs(measured: Sequence[float], modelled: Sequence[float], labels: Sequence = (), *,
                 cached: bool = False, slack: float = READ_ONLY_SLACK) -> Verdict:
    """No measured time is shorter than its roofline time on this device's measured roofs (``modelled``:
    bytes/bandwidth and FLOPs/peak only, no measured overhead added) divided by ``slack``: the model
    counts every byte and FLOP a pass must move. ``cached``: the weights fit in the last-level cache,
    so they may stream faster than DRAM (not tested)."""
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    if len(measured) != len(modelled):
        raise validate.BadArgument(f"measured has {len(measured)} values, modelled {len(modelled)}")
    labels = list(labels) or list(range(len(measured)))
    ratios = [m / p for m, p in zip(measured, modelled, strict=True)]
    i = min(range(len(ratios)), key=ratios.__getitem__)
    numbers = {"lowest measured/model": ratios[i], "at": labels[i], "highest measured/model": max(ratios)}
    claim = "no pass beats this device's measured roofs"
    if cached:
        return Verdict(claim, True, False, "The weights fit in the last-level cache, so a pass may stream them "
                       "faster than the DRAM roof.", numbers)
    ok = ratios[i] >= 1 / slack
    sentence = (f"Every measured time is at least {ratios[i]:.2f}× its roofline time (closest: {labels[i]})."
                if ok else f"{labels[i]} ran {1 / ratios[i]:.1f}× faster than this device's measured roofs allow: "
                f"the model miscounts its bytes or FLOPs, or the roofs were measured under load.")
    return Verdict(claim, ok, True, sentence, numbers)


def grows(claim: str, batches: Sequence[int], measured: Sequence[float], modelled: Sequence[float], *,
          share: float = SHARE, threshold: float = THRESHOLD, axis: str = "B") -> Verdict:
    """A quantity the model predicts to grow with B (verify/decode, 1/S, per-token amortization; or with
    the context L, ``axis="L"``): from the point where it measured lowest (before the last) to the last,
    the model predicts a rise of ``model``×. If that is at least ``threshold``, the measured rise must be
    at least ``model ** share``; a smaller predicted rise is not tested (library paths for small GEMMs
    move such ratios more than that, either way)."""
    batches = _batches(batches, ("measured", measured), ("modelled", modelled))
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    if len(batches) < 2:
        return Verdict(claim, True, False, f"One {axis}: nothing to compare.", {})
    i = min(range(len(batches) - 1), key=measured.__getitem__)
    model, seen = modelled[-1] / modelled[i], measured[-1] / measured[i]
    numbers = {f"from {axis}": batches[i], f"to {axis}": batches[-1], "measured rise": seen, "model rise": model}
    if model < threshold:
        model_s, _ = apart(model, threshold)
        return Verdict(claim, True, False, f"The model predicts only {model_s}× from {axis} = {batches[i]} to "
                       f"{batches[-1]}: too little to test (measured {seen:.2f}×).", numbers)
    need = model**share
    ok = round(seen, 6) >= round(need, 6)  # to the 6 decimals apart() prints them with: equal meets the bar
    seen_s, need_s = apart(seen, need)
    return Verdict(claim, ok, True, f"From {axis} = {batches[i]} to {batches[-1]} the model predicts {model:.2f}×, "
                   f"measured {seen_s}× (at least {need_s}× needed)" + ("." if ok else ": too flat."),
                   {**numbers, "needed": need})


def speedup_falls(batches: Sequence[int], measured: Sequence[float], modelled: Sequence[float]) -> Verdict:
    """S(B) falls as B grows: :func:`grows` applied to 1/S, on any sweep, however it stopped. The model
    decides what there is to test: from the batch where S measured highest (before the last) to the
    last batch it predicts S to fall by ``model``×; from 2× on (``THRESHOLD``) the measured S must fall
    by at least ``model ** SHARE``. Why not "once S fell below 1": the stop says where S sits against 1,
    not whether the sweep spans a fall (a sweep cut short at S = 0.93 may span a 2.9× fall, one that
    ended at S = 0.6 on a CPU that never paid spans none: there the model is flat, compute-bound from
    B = 1)."""
    batches = _batches(batches, ("measured", measured), ("modelled", modelled))
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    v = grows("S(B) falls as B grows", batches, [1 / s for s in measured], [1 / s for s in modelled])
    n = v.numbers
    if not n:  # one batch
        return v
    seen_s, need_s = apart(n["measured rise"], n.get("needed", n["measured rise"]))
    model_s, threshold_s = apart(n["model rise"], THRESHOLD)
    level = moved_by(1 / n["measured rise"]) == "stayed level"  # a fall that prints as 1.00× is none
    went = f"fell {seen_s}×" if n["measured rise"] > 1 and not level else moved_by(1 / n["measured rise"])
    span = f"From B = {n['from B']} to {n['to B']} S {went}; the model has it fall {model_s}×"
    sentence = (f"{span}: too little to test (from {threshold_s}× on)." if not v.tested else
                f"{span}, so it must fall at least {need_s}×" + ("." if v.ok else ": too flat."))
    return dataclasses.replace(v, sentence=sentence)


def ratio_falls(contexts: Sequence[int], measured: Sequence[float], modelled: Sequence[float], *,
                noise: float = NOISE) -> Verdict:
    """verify/decode at growing context L falls toward 1 (Chapter 5): where this device's model has the
    ratio's excess over 1 halve over the contexts swept (from more than ``noise`` above 1), the measured
    ratio must end more than ``noise`` below where it started (medians of paired samples). Within ``noise``
    it is flat: the sentence says so, with the range it took on the way. Where the model has nothing fall
    (attention compute-bound under a low ridge, or verify as cheap as decode throughout), or one context
    was measured, nothing is tested. ``numbers["outcome"]``: what the
    measurement did, ``context.fall_verdict`` ("halved", "fell", "flat", "rose"), whatever the model says."""
    from specnotes.analytic.context import fall_verdict

    contexts = _batches(contexts, ("measured", measured), ("modelled", modelled))
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    noise = validate.number("noise", noise, low=0)
    claim = "verify/decode falls as L grows"
    outcome = fall_verdict(measured, noise)
    numbers = {"from L": contexts[0], "to L": contexts[-1], "measured first": measured[0],
               "measured last": measured[-1], "lowest": min(measured), "highest": max(measured),
               "model first": modelled[0], "model last": modelled[-1], "outcome": outcome}
    span = (f"From L = {contexts[0]} to {contexts[-1]} the model has verify/decode go from {modelled[0]:.2f} to "
            f"{modelled[-1]:.2f}, measured {measured[0]:.2f} to {measured[-1]:.2f}")
    way = (f" ({min(measured):.2f} to {max(measured):.2f} on the way)" if len(measured) > 2 else "")
    said = {"halved": ": it fell at least halfway to 1.", "fell": f": it fell, by more than the {noise:.0%} noise.",
            "flat": f"{way}: flat, within the {noise:.0%} noise.",
            "rose": f"{way}: it rose, by more than the {noise:.0%} noise."}[outcome]
    if len(contexts) < 2:
        return Verdict(claim, True, False, "One context: nothing to compare.", numbers)
    if modelled[0] <= 1 + noise:
        return Verdict(claim, True, False, f"{span}{said} The model puts verify within the {noise:.0%} noise of a "
                       "decode pass from the first context on, so there is nothing to fall.", numbers)
    if not excess_halved(modelled[0], modelled[-1]):
        return Verdict(claim, True, False, f"{span}{said} The model's excess over 1 does not halve, so there is "
                       "nothing to test.", numbers)
    return Verdict(claim, outcome in ("halved", "fell"), True, span + said, numbers)


def shared_cache(measured: float, modelled: float, k: int) -> Verdict:
    """Verify attention reads each cache once for its k + 1 queries (Chapter 5): where this device's model
    puts its cost at most (k + 1)/2 decode attentions, the measured ratio must stay under k + 1, the cost of
    reading the cache k + 1 times. Where the model has attention compute-bound, nothing is tested."""
    k = validate.integer("k", k, low=1)
    measured = validate.number("measured", measured, low=0, low_open=True)
    modelled = validate.number("modelled", modelled, low=0, low_open=True)
    claim = f"{k + 1} queries share one read of the cache"
    numbers = {"measured": measured, "model": modelled, "separate reads": k + 1}
    if modelled > (k + 1) / 2:
        return Verdict(claim, True, False, f"The model puts verify attention at {modelled:.2f}× decode attention "
                       "(compute-bound here): nothing to test.", numbers)
    ok = measured < k + 1
    measured_s, _ = apart(measured, k + 1)
    return Verdict(claim, ok, True, f"Verify attention cost {measured_s}× decode attention (model {modelled:.2f}×)"
                   + (f", under the {k + 1}× of separate reads." if ok else
                      f": as much as {k + 1} separate reads of the cache."), numbers)


def fastest_roofs(accel, *, cached: bool = False):
    """``accel`` (a ``hardware.Accelerator`` of this device's measured roofs, or a row's name) as fast as
    a pass may beat it: bandwidth × ``READ_ONLY_SLACK`` (no limit when ``cached``: the weights fit in the last-level
    cache) and every peak × ``COMPUTE_SLACK``. A pass's roofline time on these roofs, kernel by kernel,
    is the least time it can take on this device."""
    accel = hardware.accelerator(accel)
    bandwidth = math.inf if cached else accel.mem_bandwidth * READ_ONLY_SLACK
    return dataclasses.replace(accel, name=f"{accel.name}, fastest", mem_bandwidth=bandwidth,
                               peak_flops={d: f * COMPUTE_SLACK for d, f in accel.peak_flops.items()})


def speedup_bound(batches: Sequence[int], measured: Sequence[float], caps: Sequence[float]) -> Verdict:
    """S(B) never exceeds what this device's roofs allow, so it is below 1 wherever they allow less.
    ``caps[i]``: the largest S the roofs allow at ``batches[i]``, E[N]·T_decode / (k·T_draft + T_verify)
    with the measured decode time and the least time of a draft step and a verify pass (their roofline
    times on :func:`fastest_roofs`, e.g. ``stack.StackModel.speedup_cap``). Every pass takes at least its
    least time, so S ≤ cap on any device, tested at every batch; a library that runs small GEMMs slowly
    raises the cap with the decode time (the cap of a GEMM-bound CPU stays above 1 far past the model's
    B*), a slow verify pass only lowers S. The band is the slacks': a pass must beat the copy's
    bandwidth by more than 1.5× or the GEMM peak by more than 1.25× to fail it."""
    batches = _batches(batches, ("measured", measured), ("caps", caps))
    measured, caps = _positive("measured", measured), _positive("caps", caps)
    claim = "S(B) stays under what this device's roofs allow, below 1 where they allow less"
    rows = list(zip(batches, measured, caps, strict=True))
    i = min(range(len(caps)), key=caps.__getitem__)
    numbers = {"lowest cap": caps[i], "at B": batches[i], "largest S/cap": max(s / c for _, s, c in rows)}
    over = [(b, s, c) for b, s, c in rows if s > c]
    if over:
        b, s, c = over[0]
        s_s, c_s = apart(s, c)
        return Verdict(claim, False, True, f"S = {s_s} at B = {b}, above the {c_s} this device's roofs allow "
                       f"there. A pass beat the roofs by more than the slacks, the model miscounts its bytes or FLOPs, "
                       f"or the roofs were measured under load.", numbers)
    capped = [(b, s, c) for b, s, c in rows if c < 1]
    if capped:
        listed = " and ".join(f"{b} (at most {apart(c, 1.0)[0]})" for b, _, c in capped)
        return Verdict(claim, True, True, f"S stayed under its cap at every batch. The roofs allow less than 1 at "
                       f"B = {listed}, and speculation measured below 1 there (S ≤ "
                       f"{apart(max(s for _, s, _ in capped), 1.0)[0]}).", numbers)
    lowest = apart(caps[i], 1.0)[0]
    return Verdict(claim, True, True, f"S stayed under its cap at every batch, but the cap never fell below 1 (lowest: "
                   f"{lowest} at B = {batches[i]}). Plain decoding ran slowly enough that a verify pass at its roofs "
                   f"would still have paid. So the roofs alone cannot say where speculation stopped paying.", numbers)
