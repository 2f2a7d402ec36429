"""What a measurement may assert on *this* device, and the sentences the prose may say about it.

The measured chapters run on CPUs with and without bf16 units, on GPUs and on MPS, often on shared
machines where another process can add time to any sample. So no check compares a measurement with a
constant one machine happened to show. Each derives what to expect from the cost model on this
device's measured roofs and per-pass floor, allows only for the model's known biases (below), and says
so when the model predicts nothing this measurement could show (``tested=False``).

The model's known biases, which set every tolerance here:

- ``READ_ONLY_SLACK``: the copy that measures bandwidth counts 2 bytes per byte copied, but with
  write-allocate caches DRAM moves 3; a kernel that only reads (a GEMV) can stream up to 1.5x the
  measured "roof". Nothing else may beat the roofs.
- ``SHARE``: small passes run below the compute roof (the peak comes from a large GEMM) and pay fixed
  costs the fastest-pass floor t0 does not fully capture, so measured ratios between passes are pulled
  towards 1. A rise the model predicts must show at least this share of itself, on a log scale: an
  eighth, because on a CPU in fp32 a predicted 3.15x (a verify pass of 80 tokens over one of 20)
  measured 1.04x on a shared 2-core machine, both passes being GEMMs of tens of rows on the library's
  slow small-GEMM path; a flat measurement still fails wherever the model predicts 2x or more.
- ``THRESHOLD``: CPU libraries run GEMMs of a few rows on separate paths, each with its own
  efficiency: on one 2-core AVX-512 CPU, fp32 GEMMs of 2 to 40 rows over the same weight cost 1.1 to
  3.5x a 1-row GEMV, and not monotonically in the rows. A ratio the model predicts to move by less
  than 2x can move either way; only larger predicted rises are tested.
- ``COMPUTE_SLACK``: the compute roof is the fastest of two GEMMs of side 1024; a pass's larger GEMMs
  may run faster. On a CPU without bf16 units a verify pass of 80 rows over d = 2048 weights ran 1.12x
  faster than the measured peak allowed; with the 10% by which the peak's own fastest sample may miss
  under load (``NOISE``), 1.12 x 1.10 = 1.23, rounded up to 1.25.
- ``NOISE``: fastest samples of the same pass on a busy 2-core machine differ by up to ~10%.

Two kinds of check, kept apart (DESIGN §5, "invariants in cells, the model in sentences"):

- **Invariants** (:func:`timer_agrees`, :func:`more_work_is_slower`) hold on any machine that is not
  broken: a timer that disagrees with itself, a NaN, or more work measured faster than less beyond what
  noise and another process's load can do (``LOAD``). They raise :class:`Broken`, and a chapter's cell
  fails with it.
- **Agreement with the model** is a finding. Every other check returns a :class:`Verdict` whose
  sentence a chapter glues; it never fails the cell. The ``describe_*`` functions pick the sentences
  that explain a disagreement with the numbers measured. Their teeth are in the unit tests, on synthetic
  sweeps and on the real records in ``data/reference`` (``tests/test_checks.py``, ``tests/test_reference.py``).
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

from specnotes import hardware, validate
from specnotes.context import excess_halved

READ_ONLY_SLACK = 1.5
COMPUTE_SLACK = 1.25
SHARE = 1 / 8
NOISE = 0.10
THRESHOLD = 2.0  # a predicted rise smaller than this is not tested (see grows)
WORK_RATIO = 4.0  # a pass the model prices at this many times another's time does more work (more_work_is_slower)
LOAD = 8.0  # how much faster than less work more work must run to be broken, not load (more_work_is_slower)


def rules() -> dict[str, str]:
    """The constants above as the chapters' prose states them, by glue name, so that no chapter types a
    number the checks may change: ``rule_slack`` (READ_ONLY_SLACK, "1.5"), ``rule_compute`` (COMPUTE_SLACK),
    ``rule_load`` (LOAD, "8"), ``rule_work`` (WORK_RATIO, "4"), ``rule_threshold`` (THRESHOLD, "2"),
    ``rule_share`` (SHARE, "1/8") and ``rule_noise`` (NOISE, "10%")."""
    return {"rule_slack": f"{READ_ONLY_SLACK:g}", "rule_compute": f"{COMPUTE_SLACK:g}", "rule_load": f"{LOAD:g}",
            "rule_work": f"{WORK_RATIO:g}", "rule_threshold": f"{THRESHOLD:g}", "rule_share": f"1/{1 / SHARE:g}",
            "rule_noise": f"{NOISE:.0%}"}


@dataclass(frozen=True)
class Verdict:
    """A finding on agreement with the model, never asserted in a chapter (a cell fails only on :class:`Broken`).
    ``ok``: the measurement agrees with what the model predicts for this device; it chooses the sentence, and
    the unit tests assert it on recorded and synthetic data. ``tested``: False when the model predicts nothing
    this measurement could show (``ok`` is then True). ``sentence``: what the prose may say. ``numbers``: what
    it was decided on."""

    claim: str
    ok: bool
    tested: bool
    sentence: str
    numbers: dict = field(default_factory=dict)

    def __str__(self) -> str:
        state = "holds" if self.ok and self.tested else "not tested" if self.ok else "FAILS"
        nums = ", ".join(f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} = {v}" for k, v in self.numbers.items())
        wrap = lambda text: textwrap.fill(text, 100, initial_indent="    ", subsequent_indent="    ")
        return f"{self.claim}: {state}.\n{wrap(self.sentence)}\n{wrap(f'[{nums}]')}"


class Broken(AssertionError):
    """A measurement no working machine produces: the timer disagrees with itself, a time is NaN or not
    positive, or more work ran faster than less beyond the noise. The one thing a measured cell fails on."""


def timer_agrees(label: str, samples: Sequence[float], median: float | None = None, q1: float | None = None,
                 q3: float | None = None) -> None:
    """Raise :class:`Broken` unless every sample is a finite positive time and the summaries the timer
    reported agree with them: the fastest sample at most the first quartile, the quartiles around the
    median, the median within the samples. ``None`` summaries (a record that did not keep them) pass."""
    values = list(samples)
    for i, s in enumerate(values):
        if not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise Broken(f"{label}: sample {i} is {s!r}, not a positive time: the timer is broken")
    given = {"median": median, "q1": q1, "q3": q3}
    for name, value in given.items():
        if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0):
            raise Broken(f"{label}: its {name} is {value!r}, not a positive time: the timer is broken")
    if not values and median is None:
        raise Broken(f"{label}: no samples and no median: nothing was timed")
    tol = 1e-9
    order = [v for v in (min(values) if values else None, q1, median, q3) if v is not None]
    if any(a > b * (1 + tol) for a, b in zip(order, order[1:], strict=False)):
        raise Broken(f"{label}: fastest {min(values) if values else None}, q1 {q1}, median {median}, q3 {q3} are "
                     f"out of order: the timer disagrees with itself")
    if values and median is not None and median > max(values) * (1 + tol):
        raise Broken(f"{label}: median {median} above every sample (slowest {max(values)}): the timer disagrees "
                     f"with itself")


def more_work_is_slower(labels: Sequence, measured: Sequence[float], modelled: Sequence[float],
                        work: Sequence[tuple[float, float]], *, ratio: float = WORK_RATIO,
                        load: float = LOAD, common_bytes: bool = False) -> Verdict:
    """Raise :class:`Broken` if a pass that does ``ratio`` times the work of another, by every measure,
    measured ``load`` times faster than it or more. By every measure: at least ``ratio`` times its FLOPs and
    its bytes (``work``: (FLOPs, bytes) of each pass, counted by the cost model), and at least ``ratio``
    times its modelled time, floors included (``modelled``), so that no roof measured low, no fixed cost
    per pass, no library path for few rows and no cache makes it cheaper on a working machine.

    Why ``load`` and not the 10% noise of two quiet samples: on a shared 2-core machine another process
    can stall one pass for longer than its whole sampling window. Chapter 4 on an Ice Lake share with a
    load average of 6 measured a draft step at 100 ms at B = 2 and 18 ms at B = 1: 5.4× from load alone.
    More work measured ``load`` (8) times faster than less is ``ratio`` × ``load`` = 32 times off what the
    model says, which no load explains. Closer pairs are not compared. Returns the verdict to print.

    ``common_bytes``: every pass reads one common weight (Chapter 1's one-weight GEMM sweep), so their bytes
    differ only by the activations (about 1.08× from 1 to 128 rows of a 2048-wide GEMM) and no pair is ever
    ``ratio`` times apart in them. Such a pass reads at least the other's bytes whatever its rows; the pairs
    are then compared on FLOPs and modelled time alone."""
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    if not len(measured) == len(modelled) == len(work):
        raise validate.BadArgument(f"measured, modelled and work have {len(measured)}, {len(modelled)} and "
                                   f"{len(work)} values")
    flops = [validate.number(f"work[{i}] FLOPs", w[0], low=0) for i, w in enumerate(work)]
    nbytes = [validate.number(f"work[{i}] bytes", w[1], low=0, low_open=True) for i, w in enumerate(work)]
    load = validate.number("load", load, low=1)
    labels = list(labels) or list(range(len(measured)))
    claim = f"no pass ran {load:g}× faster than one doing {ratio:g}× less work"
    need_bytes = 1.0 if common_bytes else ratio  # over one common weight: at least the other's bytes
    pairs = [(i, j) for i in range(len(measured)) for j in range(len(measured))
             if modelled[j] >= ratio * modelled[i] and flops[j] >= ratio * flops[i]
             and nbytes[j] >= need_bytes * nbytes[i]]
    if not pairs:
        measures = ("FLOPs and modelled time of another (the weight read is common to all)" if common_bytes else
                    "FLOPs, bytes and modelled time of another")
        return Verdict(claim, True, False, f"No pass does {ratio:g}× the {measures}: nothing to compare.",
                       {"pairs": 0})
    i, j = min(pairs, key=lambda p: measured[p[1]] / measured[p[0]])
    seen = measured[j] / measured[i]
    numbers = {"pairs": len(pairs), "least measured ratio": seen, "more": labels[j], "less": labels[i],
               "model ratio": modelled[j] / modelled[i]}
    if seen <= 1 / load:
        raise Broken(f"{labels[j]} ran {1 / seen:.2f}× faster than {labels[i]}, which does at least {ratio:g}× less "
                     f"work (modelled time {modelled[j] / modelled[i]:.1f}× less): no load explains that; the timer "
                     f"or the pass is broken ({numbers})")
    return Verdict(claim, True, True, f"Of {len(pairs)} such pairs the closest was {labels[j]}, which took "
                   f"{seen:.2f}× {labels[i]} (the model: {modelled[j] / modelled[i]:.1f}×).", numbers)


def apart(x: float, y: float, digits: int = 2) -> tuple[str, str]:
    """``x`` and ``y`` printed with ``digits`` decimals, or with as many more (up to 6) as it takes for the printed
    values to differ where the numbers do. A sentence that compares two numbers ("measured 1.09×, at least 1.09×
    needed: too flat") must not print them equal when it says one is below the other."""
    for d in range(digits, 7):
        a, b = f"{x:.{d}f}", f"{y:.{d}f}"
        if a != b or x == y:
            return a, b
    return a, b


def moved_by(factor: float, up: str = "rose", down: str = "fell", digits: int = 2) -> str:
    """A change by ``factor`` (new over old) in words that are true of it: "rose 1.21×" above 1, "fell 1.20×" (by
    1/factor) below 1, "stayed level" where it prints as 1 either way."""
    if f"{factor:.{digits}f}" == f"{1:.{digits}f}" and f"{1 / factor:.{digits}f}" == f"{1:.{digits}f}":
        return "stayed level"
    return f"{up} {factor:.{digits}f}×" if factor > 1 else f"{down} {1 / factor:.{digits}f}×"


def _positive(name: str, values: Sequence[float]) -> list[float]:
    values = [validate.number(f"{name}[{i}]", v, low=0, low_open=True) for i, v in enumerate(values)]
    if not values:
        raise validate.BadArgument(f"{name} must hold at least one value")
    return values


def _batches(batches: Sequence[int], *series: tuple[str, Sequence[float]]) -> list[int]:
    batches = validate.integers("batches", batches, low=1)
    if any(b >= c for b, c in zip(batches, batches[1:], strict=False)):
        raise validate.BadArgument(f"batches must increase, got {batches}")
    for name, values in series:
        if len(values) != len(batches):
            raise validate.BadArgument(f"{name} has {len(values)} values for {len(batches)} batches")
    return batches


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
    ok = seen >= need
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
    went = f"fell {seen_s}×" if n["measured rise"] > 1 else moved_by(1 / n["measured rise"])
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
    from specnotes.context import fall_verdict

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


DEVICE_KINDS = {"cpu": "CPU", "cuda": "GPU", "mps": "Apple GPU", "xpu": "GPU"}


def describe_context_measured(falls: Verdict, device_type: str) -> str:
    """Chapter 5's takeaway on this device, chosen by :func:`ratio_falls`'s ``falls`` (its measured ``outcome``,
    whatever the model said) and the kind of device (``torch.device.type``) that recorded it: what the verify
    pass cost at the last context, and whether it fell as the model says verifying does."""
    n = falls.numbers
    outcome, last, ratio = n["outcome"], n["to L"], n["measured last"]
    where = f"On the {DEVICE_KINDS.get(device_type, device_type)} that recorded this chapter"
    at = f"{ratio:.2f} decode passes at L = {last:,}"
    return {"halved": f"{where} the measurement bore it out, the verify pass falling to {at}.",
            "fell": f"{where} the verify pass fell, but only to {at}.",
            "flat": f"{where} the verify pass still cost {at}, flat over the contexts swept.",
            "rose": f"{where} the verify pass rose to {at}."}[outcome]


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


def describe_shared_cache(verdict: Verdict) -> str:
    """The clause Chapter 5 glues after the measured and modelled verify/decode attention ratio, chosen by
    :func:`shared_cache`'s ``verdict``: shared, not shared, or not tested where the model has attention
    compute-bound."""
    n, model = verdict.numbers["separate reads"], verdict.numbers["model"]
    if not verdict.tested:
        return (f"the model has attention over {n} queries compute-bound on this device ({model:.2f}× one query's), "
                "so whether they share one read of the cache is not tested")
    if verdict.ok:
        return f"the {n} queries shared one read of the cache, costing less than the {n}× of separate reads"
    return f"the {n} queries cost as much as {n} separate reads of the cache: here they did not share it"


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


# ---------------------------------------------------------------------------------------------- sentences


def _b_list(batches: Sequence[int]) -> str:
    return f"B = {batches[0]}" if len(batches) == 1 else f"B = {batches[0]} to {batches[-1]}"


@dataclass(frozen=True)
class Crossing:
    """Where speculation paid in a measured sweep, with a margin for noise: ``paid``, the batches with
    S > 1 + noise; ``even``, the batches after the last paid one with S within noise of 1 (about
    break-even: the sweep cannot tell which side of 1 they are on); ``stopped_at``, the last batch, once
    the sweep saw S below 1 - noise there (``stop == "done"``)."""

    batches: list[int]
    speedups: list[float]
    stop: str
    paid: list[int]
    stopped_at: int | None
    model_bstar: int | None
    sentence: str
    even: list[int] = field(default_factory=list)
    noise: float = NOISE

    @property
    def measured_bstar(self) -> int | None:
        """The first batch measured after the last one that paid beyond the noise (the first batch if
        none did; None if the sweep ended before S fell clearly below 1): B* lies between the batch
        before it and it, or is it."""
        if self.stop != "done":
            return None
        later = [b for b in self.batches if not self.paid or b > self.paid[-1]]
        return later[0]

    @property
    def marks(self) -> list[tuple[str, int]]:
        """The measured side of an S(B) plot's vertical marks, as ``(label, batch)`` for
        ``plots.speedup_vs_batch``: the first batch about break-even, and where S was clearly below 1."""
        marks = [(f"measured: S within {self.noise:.0%} of 1 at B", self.even[0])] if self.even else []
        if self.stopped_at is not None:
            marks.append((f"measured: S below {1 - self.noise:.2f} at B", self.stopped_at))
        return marks


def describe_crossing(batches: Sequence[int], speedups: Sequence[float], stop: str, model_bstar: int | None, *,
                      ridge: float, critical_batch: float, k: int, noise: float = NOISE) -> Crossing:
    """Where speculation paid on this device and where it stopped, or why it never did, in numbers, with
    a margin of ``noise`` either side of S = 1: a sweep that ended with ``stop == "done"`` saw S below
    1 - noise at its last batch. ``model_bstar``: the model's B* on this device's roofs (None: it still
    pays at the model's limit); ``ridge`` (FLOP/byte) and ``critical_batch`` (tokens per weight read) of
    this device's roofs."""
    batches = _batches(batches, ("speedups", speedups))
    speedups = _positive("speedups", speedups)
    stop = validate.choice("stop", stop, ("done", "budget", "limit"))
    noise = validate.number("noise", noise, low=0, high=1, high_open=True)
    if stop == "done" and speedups[-1] >= 1 - noise:
        raise validate.BadArgument(f"the sweep says S fell below 1 - {noise:g}, but S = {speedups[-1]:.3g} at "
                                   f"B = {batches[-1]}")
    s = dict(zip(batches, speedups, strict=True))
    paid = [b for b in batches if s[b] > 1 + noise]
    even = [b for b in batches if abs(s[b] - 1) <= noise and (not paid or b > paid[-1])]
    model = "beyond any batch that fits" if model_bstar is None else f"at B = {model_bstar}"
    b0 = batches[0]
    first = f"S = {s[b0]:.2f} already at B = {b0}" + (f", within the {noise:.0%} noise of break-even"
                                                       if abs(s[b0] - 1) <= noise else "")
    never = (f"{first}. This device's ridge is {ridge:.2g} FLOP/byte, a critical batch of {critical_batch:.2g} tokens "
             f"per weight read. So even at B = {b0} the verify pass's {b0 * (k + 1)} tokens are past it: verification "
             f"is never free.")
    if critical_batch > b0 * (k + 1):
        never = (f"{first}, although the verify pass's {b0 * (k + 1)} tokens are under this device's critical batch "
                 f"of {critical_batch:.2g}. The passes' fixed costs, not the roofs, decide at this size.")
    last, why = batches[-1], {"budget": "its time budget ran out",
                                 "limit": "the next batch would not fit in memory"}.get(stop)
    stopped = None if why else last
    bstar = f" The model with this device's roofs puts the crossover {model}."
    if not paid:
        where = "here" if stopped else f"up to B = {last}, where the sweep stopped because {why}"
        return Crossing(batches, speedups, stop, paid, stopped, model_bstar,
                        f"Speculation never paid {where}. {never}{bstar}", even, noise)
    best, top = max(paid, key=s.__getitem__), paid[-1]
    where = (f"up to B = {top}" if paid == batches[:len(paid)] else
             f"at B = {', '.join(map(str, paid[:-1]))} and {top}" if len(paid) > 1 else f"at B = {top}")
    values = f"S = {s[best]:.2f} at B = {best}" + (f" and {s[top]:.2f} at B = {top}" if top != best else "")
    about = ""
    if even:
        items = [f"{b} (S = {s[b]:.2f})" for b in even]
        listed = items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
        about = f" It was about break-even, within the {noise:.0%} noise, at B = {listed}."
    if stopped:
        end = f" It stopped paying by B = {last}, with S = {s[last]:.2f}."
    elif last == top:
        end = f" It still paid at B = {last}, where the sweep stopped because {why}: no crossover measured."
    elif last in even:
        end = f" The sweep stopped there, because {why}, before S fell clearly below 1."
    else:
        end = f" S was {s[last]:.2f} at B = {last}, where the sweep stopped because {why}."
    sentence = f"Speculation paid {where} here: {values}.{about}{end}{bstar}"
    return Crossing(batches, speedups, stop, paid, stopped, model_bstar, sentence, even, noise)


def describe_model_gap(batch: int, k: int, measured_s: float, modelled_s: float,
                       passes: dict[str, tuple[float, float]], *, noise: float = NOISE) -> str:
    """Why measured and modelled S part at ``batch``, attributed by the numbers. ``passes`` maps "decode",
    "verify" and "draft" (one draft step) to (measured, modelled) seconds. S = E[N]·decode / (k·draft +
    verify), so a plain decode slower than modelled raises the measured S, and an iteration slower than
    modelled lowers it: the sentence names whichever moved S more, and within the iteration the pass that
    moved it most."""
    batch = validate.integer("batch", batch, low=1)
    k = validate.integer("k", k, low=1)
    measured_s = validate.number("measured_s", measured_s, low=0, low_open=True)
    modelled_s = validate.number("modelled_s", modelled_s, low=0, low_open=True)
    if set(passes) != {"decode", "verify", "draft"}:
        raise validate.BadArgument(f"passes must hold decode, verify and draft times, got {sorted(passes)}")
    t = {kind: (validate.number(f"{kind} measured", m, low=0, low_open=True),
                validate.number(f"{kind} modelled", p, low=0, low_open=True)) for kind, (m, p) in passes.items()}
    excess = {kind: m / p for kind, (m, p) in t.items()}
    iteration = (k * t["draft"][0] + t["verify"][0]) / (k * t["draft"][1] + t["verify"][1])
    numbers = ", ".join(f"{kind} {1e3 * t[kind][0]:.3g} ms against {1e3 * t[kind][1]:.3g} ms modelled"
                        for kind in ("decode", "verify", "draft"))
    if abs(measured_s / modelled_s - 1) <= noise:
        return (f"At B = {batch} the measured S ({measured_s:.2f}) is the model's ({modelled_s:.2f}) within "
                f"{noise:.0%}: the roofline with this device's roofs prices these passes. Measured against modelled: "
                f"{numbers}.")
    direction = "above" if measured_s > modelled_s else "below"
    decode_moved, iteration_moved = math.log(excess["decode"]), -math.log(iteration)
    if abs(decode_moved) >= abs(iteration_moved):
        slow = excess["decode"] > 1
        why = (f"plain decoding ran {excess['decode']:.2f}× its modelled time. "
               + (f"A GEMM of {batch} rows runs below both roofs on this device's library path, which the roofline, "
                  "an upper bound on speed, does not know" if slow else
                  "It beat the roofs the copy and the square GEMM measured, which a small kernel can"))
    else:
        share = {kind: (k if kind == "draft" else 1) * t[kind][1] * (excess[kind] - 1) for kind in ("verify", "draft")}
        kind = max(share, key=lambda x: abs(share[x]))
        slow = excess[kind] > 1
        they = "They" if kind == "draft" else "It"
        why = (f"the {'draft steps' if kind == 'draft' else 'verify pass'} ran {excess[kind]:.2f}× the modelled "
               f"time. " + (f"{they} ran below both roofs on this device's library path, which the roofline, an upper "
                            "bound on speed, does not know" if slow else
                            f"{they} ran faster than the roofs the copy and the square GEMM measured, which a small "
                            "kernel can"))
    return (f"At B = {batch} the measured S ({measured_s:.2f}) is {direction} the model's ({modelled_s:.2f}) "
            f"because {why}. Measured against modelled: {numbers}.")


def describe_draft_cost(measured_c: float, param_ratio: float, model_c: float, *, draft_cached: bool,
                        noise: float = NOISE) -> str:
    """The sentence about the draft's cost c (draft step / target decode step, at B = 1) next to the
    ratio of parameter counts and the model's c (which adds each stack's per-pass floor).
    ``draft_cached``: the draft's weights fit in the last-level cache (``devices.fits_in_cache``)."""
    measured_c = validate.number("measured_c", measured_c, low=0, low_open=True)
    param_ratio = validate.number("param_ratio", param_ratio, low=0, low_open=True)
    model_c = validate.number("model_c", model_c, low=0, low_open=True)
    numbers = f"measured c = {measured_c:.3f} at B = 1, parameter ratio {param_ratio:.3f}, model {model_c:.3f}"
    if measured_c > param_ratio * (1 + noise):
        why = ("the per-pass floor, which the model includes, is" if model_c > param_ratio * (1 + noise)
               else "fixed costs beyond the floor the model includes are")
        return (f"The draft costs more than its parameter count says: {numbers}. A small model runs as many "
                f"kernels per layer as a large one, so {why} a larger share of its time. That is Chapter 1's "
                f"overhead floor; in production it is why drafts run under CUDA graphs.")
    if measured_c < param_ratio / (1 + noise):
        why = ("Its weights fit in the last-level cache and stay there between passes, so it streams them faster "
               "than the target streams its own from memory" if draft_cached else
               "Its weights do not fit in the cache, so the reason is one the roofline does not capture")
        return f"The draft costs less than its parameter count says: {numbers}. {why}."
    return (f"The draft costs what its parameter count says, within {noise:.0%}: {numbers}. Both passes are "
            f"memory-bound and read their weights at the same bandwidth.")


def _first_above(batches: Sequence[int], measured: Sequence[float], noise: float) -> int | None:
    """Index of the first batch whose measured verify/decode is more than ``noise`` above 1."""
    return next((i for i, m in enumerate(measured) if m > 1 + noise), None)


def describe_verify(batches: Sequence[int], measured: Sequence[float], modelled: Sequence[float], *,
                    critical_batch: float, k: int, decode_excess: float, verify_excess: float,
                    noise: float = NOISE) -> str:
    """How verify/decode moved across the sweep and why, attributed by the numbers: where the verify
    pass's B(k+1) tokens sit against this device's critical batch, where the measured ratio first rose
    past the noise, and, where the measurement does not move as the model does, what the first batch's
    passes show (``decode_excess``/``verify_excess``: measured/modelled time of each pass there). The
    rise compared is the one :func:`grows` tests: from the batch where the measured ratio was lowest
    (before the last) to the last batch, for the measurement and the model alike."""
    batches = _batches(batches, ("measured", measured), ("modelled", modelled))
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    critical_batch = validate.number("critical_batch", critical_batch, low=0, low_open=True)
    k = validate.integer("k", k, low=1)
    b0, b1, t0, t1 = batches[0], batches[-1], batches[0] * (k + 1), batches[-1] * (k + 1)
    m0, m1, p0, p1 = measured[0], measured[-1], modelled[0], modelled[-1]
    moved = (f"Verifying k + 1 = {k + 1} tokens for every sequence cost {m0:.2f}× a decode pass at B = {b0} and "
             f"{m1:.2f}× at B = {b1}, against {p0:.2f}× and {p1:.2f}× in the model.")
    if t0 < critical_batch <= t1:
        where = (f"At B = {b0} the verify pass's {t0} tokens per weight read are under this device's critical "
                 f"batch of {critical_batch:.3g}, and at B = {b1} its {t1} are past it.")
    elif critical_batch > t1:
        where = (f"Up to B = {b1} the verify pass's {t1} tokens per weight read stay under this device's critical "
                 f"batch of {critical_batch:.3g}.")
    else:
        where = (f"The verify pass's {t0} tokens per weight read are past this device's critical batch of "
                 f"{critical_batch:.2g} already at B = {b0}, so it is compute-bound at every batch measured.")
    first = _first_above(batches, measured, noise)
    if first is not None and batches[first] * (k + 1) < critical_batch:
        where += (f" But the measured ratio already rose past {1 + noise:.2f}× at B = {batches[first]}, where the "
                  f"model says {modelled[first]:.2f}×: {batches[first] * (k + 1)} tokens, under the critical batch.")
    lo = min(range(len(batches) - 1), key=measured.__getitem__) if len(batches) > 1 else 0
    seen, model = measured[-1] / measured[lo], modelled[-1] / modelled[lo]
    rise = (f"From B = {batches[lo]}, where it measured lowest, to B = {b1} the measured ratio {moved_by(seen)} and "
            f"the model's {moved_by(model)}.")
    passes = f"At B = {b0} decode took {decode_excess:.2f}× its modelled time and verify {verify_excess:.2f}×."
    small_passes = (f"Small passes run below the compute roof, the smallest furthest, which pulls the ratio towards 1 "
                    f"at small B. {passes}")
    unmodelled = f"A cost the model lacks shows here. {passes}"
    if model > 1 + noise and seen > 1 + noise:
        why = f"The ratio climbs towards k + 1. {rise}"
        if seen > model * (1 + noise) and decode_excess > verify_excess * (1 + noise):
            why += f" The measured ratio climbs further because of how small passes run. {small_passes}"
    elif seen > 1 + noise:
        why = (f"The measured ratio climbs although the model's barely moves. {rise} "
               + (small_passes if decode_excess > verify_excess * (1 + noise) else unmodelled))
    elif model > 1 + noise or seen < 1 / (1 + noise):
        why = (f"The measured ratio does not move as the model's does. {rise} "
               + (f"The math library runs the GEMMs of more rows on a slower path here. {passes}"
                  if verify_excess > decode_excess * (1 + noise) else unmodelled))
    else:
        why = "Neither ratio moves by more than the noise."
    return f"{moved} {where} {why}"


def describe_free_batch(critical_batch: float, k: int, batches: Sequence[int] = (), measured: Sequence[float] = (),
                        modelled: Sequence[float] = (), *, noise: float = NOISE) -> str:
    """Up to which batch the roofline on this device's measured roofs says verifying k drafts per
    sequence is free (the largest B with B(k + 1) tokens per weight read within the critical batch), and
    what the measured verify/decode ratios (``measured``, with the model's ``modelled``, per-pass floor
    included, at ``batches``) say about it: where the measured ratio first rose more than ``noise``
    above 1."""
    critical_batch = validate.number("critical_batch", critical_batch, low=0, low_open=True)
    k = validate.integer("k", k, low=1)
    free = math.floor(critical_batch / (k + 1))
    if free >= 1:
        model = (f"The roofline on this device's measured roofs says verification is free up to B = {free}: there "
                 f"B(k+1) = {k + 1}B tokens per weight read are within a critical batch of {critical_batch:.3g}.")
    else:
        model = (f"The roofline on this device's measured roofs says verification is never free: the critical "
                 f"batch is {critical_batch:.2g} tokens per weight read, and B(k+1) = {k + 1} tokens are past it "
                 f"already at B = 1.")
    if not len(batches):
        return model
    batches = _batches(batches, ("measured", measured), ("modelled", modelled))
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    i = _first_above(batches, measured, noise)
    if i is None:
        return (f"{model} Measured, verify cost within {noise:.0%} of a decode pass up to B = {batches[-1]}, where the "
                f"model, per-pass floor included, says {modelled[-1]:.2f}×.")
    b, m, p = batches[i], measured[i], modelled[i]
    cost_text = f"Measured, verification already cost {m:.2f}× a decode pass at B = {b}, at {b * (k + 1)} tokens"
    if free < 1:
        return f"{model} {cost_text}."
    if b > free:
        return (f"{model} Measured, the ratio first rose more than {noise:.0%} above 1 at B = {b}, to {m:.2f}×: past "
                f"that range.")
    if m > p * (1 + noise):
        return (f"{model} {cost_text}, where the model, per-pass floor included, says {p:.2f}×. Small GEMMs run "
                f"below both roofs, since the roofline is an upper bound on speed. Here a verify pass of "
                f"{b * (k + 1)} rows per weight ran further below them than a decode pass of {b}.")
    return f"{model} {cost_text}, as the model, per-pass floor included, says: {p:.2f}×."


def _runs(flags: Sequence[bool]) -> list[tuple[int, int]]:
    """(first, last) index of each run of consecutive True values."""
    runs, start = [], None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            runs.append((start, i - 1))
            start = None
    return runs


def _span(values: Sequence[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)}–{format(hi, fmt)}"


def describe_slow_gemms(rows: Sequence[int], ratios: Sequence[float], weight_gb_per_s: Sequence[float],
                        copy_gb_per_s: float, *, slow: float = THRESHOLD) -> str:
    """Where a decode-GEMM sweep ran ``slow`` times or more above its roofline time (``ratios``: measured
    over roofline at each row count), in numbers: the rows, how far above, and the bytes of weight it read
    per second against the copy roof, in two sentences. An empty string where no point did."""
    rows = _batches(rows, ("ratios", ratios), ("weight_gb_per_s", weight_gb_per_s))
    ratios, gbs = _positive("ratios", ratios), _positive("weight_gb_per_s", weight_gb_per_s)
    copy_gb_per_s = validate.number("copy_gb_per_s", copy_gb_per_s, low=0, low_open=True)
    runs = _runs([r >= slow for r in ratios])
    if not runs:
        return ""
    a, b = max(runs, key=lambda run: max(ratios[run[0]:run[1] + 1]))
    which = f"{rows[a]} row{'s' * (rows[a] > 1)}" if a == b else f"{rows[a]} to {rows[b]} rows"
    return (f"On this device the GEMM of {which} ran {_span(ratios[a:b + 1], '.1f')}× its roofline time. It read its "
            f"weight at {_span(gbs[a:b + 1], '.1f')} GB/s against the {copy_gb_per_s:.1f} GB/s copy roof: a library "
            f"path for few rows that reaches neither roof.")


def describe_gemm_efficiency(rows: Sequence[int], ratios: Sequence[float], left_out: Sequence[float],
                             weight_gb_per_s: Sequence[float], copy_gb_per_s: float) -> str:
    """Chapter 1's sentence on the per-M efficiency of its decode-GEMM sweep: its range, where it was
    slow (:func:`describe_slow_gemms`), and how well it predicts each point from the others
    (``left_out``: ``GemmEfficiency.leave_one_out``) against the roofline alone. "Within 2× of the roofs at
    every M" claims 1/2 < measured/roofline < 2 at every point; a point at 2× or more is named as slow, one at
    1/2 or less as faster than its roofline time (its weight stayed in a cache)."""
    rows = _batches(rows, ("ratios", ratios), ("left_out", left_out))
    ratios, left_out = _positive("ratios", ratios), _positive("left_out", left_out)
    lo, hi = min(range(len(rows)), key=ratios.__getitem__), max(range(len(rows)), key=ratios.__getitem__)
    text = (f"Measured over its roofline time, the GEMM took {ratios[lo]:.2f}× at M = {rows[lo]} to "
            f"{ratios[hi]:.2f}× at M = {rows[hi]}")
    slow = describe_slow_gemms(rows, ratios, weight_gb_per_s, copy_gb_per_s)
    fast = [m for m, r in zip(rows, ratios, strict=True) if r <= 1 / THRESHOLD]
    beat = (f" At M = {', '.join(map(str, fast))} it ran faster than half its roofline time, which a weight that "
            "stays in the cache allows." if fast else "")
    text += (f". {slow}{beat}" if slow or beat else f": within {THRESHOLD:g}× of the roofs at every M.")
    if len(rows) < 3:
        return text
    loo = math.exp(sum(abs(math.log(p / m)) for p, m in zip(left_out, ratios, strict=True)) / len(rows)) - 1
    roof = math.exp(sum(abs(math.log(m)) for m in ratios) / len(rows)) - 1
    better = ("so the curve, not the roofs, is what predicts a GEMM of another M here" if loo < roof / (1 + NOISE)
              else "no better than the roofs: the efficiency jumps between neighbouring M, so it describes the sweep "
                   "it came from but predicts little between its points")
    return (f"{text} Interpolated from the other points alone, leaving each one out, the efficiency predicts each "
            f"point within {loo:.0%} on average, against {roof:.0%} for the roofline alone: {better}.")


def describe_efficiency_gain(what: str, error_without: float, error_with: float, *, extrapolated: int = 0,
                             noise: float = NOISE) -> str:
    """How much of the model's error on ``what`` the per-M GEMM efficiency explains: ``error_without`` and
    ``error_with`` are the model's typical errors (geometric mean factor minus one, e.g.
    ``probes.geometric_error``) with the roofline alone and with the efficiency. The share explained is
    1 - log(1 + with) / log(1 + without). ``extrapolated``: how many of the passes' row counts lay past the
    GEMM sweep (their efficiency held at its last measured value)."""
    without = validate.number("error_without", error_without, low=0)
    with_ = validate.number("error_with", error_with, low=0)
    numbers = (f"The model's {what} is off by {with_:.0%} on average with the per-M GEMM efficiency, against "
               f"{without:.0%} with the roofline alone.")
    held = (f" {extrapolated} of the passes' row counts lay past the GEMM sweep, where the efficiency is held at its "
            "last measured value." if extrapolated else "")
    if without <= noise:
        return (f"{numbers}{held} The roofline alone was already within the {noise:.0%} noise, so there was no gap "
                "to explain.")
    share = 1 - math.log1p(with_) / math.log1p(without)
    if with_ < without / (1 + noise):
        rest = ("What is left is the passes' other costs: attention, the norms and activations, and the fixed "
                "cost of each kernel beyond the floor." if with_ > noise else "What is left is within the noise.")
        return (f"{numbers}{held} The GEMM library's paths for each number of rows explain {share:.0%} of the gap, "
                f"in log terms. {rest}")
    if with_ <= without * (1 + noise):
        return (f"{numbers}{held} The GEMM efficiency changes it by less than the {noise:.0%} noise, so the gap lies "
                "elsewhere: attention, per-pass costs, or load while the sweep ran.")
    return (f"{numbers}{held} It is worse with it. The decode GEMM measured over one weight does not run like the "
            "stack's own GEMMs here, which have other shapes and some of which fit in the cache, or the load changed "
            "between the two sweeps.")


def describe_speedup_trend(falls: Verdict, batches: Sequence[int], measured_vd: Sequence[float],
                           modelled_vd: Sequence[float], slow_gemms: str = "") -> str:
    """Why S(B) did not fall as the model predicts, where :func:`speedup_falls` found it too flat: verify
    over decode, measured and modelled, at the batches the verdict compared, and the slow GEMM path that
    makes it so where one was measured (``slow_gemms``, :func:`describe_slow_gemms`). An empty string
    where the verdict holds or tested nothing."""
    if falls.ok or not falls.tested:
        return ""
    batches = _batches(batches, ("measured_vd", measured_vd), ("modelled_vd", modelled_vd))
    b0, b1 = falls.numbers["from B"], falls.numbers["to B"]
    i, j = batches.index(b0), batches.index(b1)
    text = (f"S did not fall because the iteration did not grow dearer than plain decoding. Verify cost "
            f"{measured_vd[i]:.2f}× a decode pass at B = {b0} and {measured_vd[j]:.2f}× at B = {b1}, where the model "
            f"has {modelled_vd[i]:.2f}× and {modelled_vd[j]:.2f}×.")
    if slow_gemms:
        return (f"{text} {slow_gemms} A decode pass of B rows pays that path as a verify pass of (k + 1)B rows "
                "does. So verifying k + 1 tokens costs about as many decode passes at every batch, and the "
                "roofline, which knows neither path, cannot predict it.")
    return f"{text} A cost the roofline does not see slows plain decoding as much as verification here."


def describe_amortization(verdict: Verdict, first_batch: int, best_batch: int, fell: float) -> str:
    """Chapter 1's sentences on sharing one weight read, after the model's "a per-token cost that falls like 1/B":
    what the fastest per-token time did from ``first_batch`` to the batch where it was lowest (``best_batch``,
    ``fell`` times lower), judged by :func:`grows`'s ``verdict`` on the same sweep."""
    if best_batch == first_batch:
        return (f"Here the fastest per-token time was lowest at B = {first_batch}: sharing the weight read saved "
                "nothing on this device.")
    at = (f"Here the fastest per-token time {moved_by(1 / fell, digits=1)} from B = {first_batch} to its best batch, "
          f"B = {best_batch}.")
    if not verdict.numbers:
        return at
    n = verdict.numbers
    model = (f"The model on this device's measured roofs predicts {n['model rise']:.1f}× from B = {n['from B']} to "
             f"{n['to B']}, where it measured {n['measured rise']:.1f}×")
    if not verdict.tested:
        return f"{at} {model}: too small a fall to test."
    return f"{at} {model}" + (", enough for the check above." if verdict.ok else ": too flat, as the check above says.")


def describe_all(verdicts: Sequence[Verdict], holds: str) -> str:
    """One sentence for a set of verdicts: ``holds`` where every one held (or tested nothing), else the
    claim and sentence of each that did not."""
    failed = [v for v in verdicts if not v.ok]
    if not failed:
        return holds
    return " ".join(f"Not as the model says: {v.claim}. {v.sentence}" for v in failed)


def describe_knee(knee: float | None, batches: Sequence[int]) -> str:
    """The measured knee of a step-time sweep, or that the step time never rose within it."""
    batches = validate.integers("batches", batches, low=1)
    if knee is None:
        return (f"no measured knee up to B = {max(batches)} (the step time never rose 25% above its flat "
                f"level)")
    return f"a measured knee at B ≈ {validate.number('knee', knee, low=0, low_open=True):.2g}"


def describe_cache(what: str, weight_bytes: float, cache_bytes: float) -> str:
    """Whether ``what`` (a weight of ``weight_bytes``) fits in this device's last-level cache of
    ``cache_bytes`` (``devices.cache_bytes``), and what that means for a measurement over it."""
    weight_bytes = validate.number("weight_bytes", weight_bytes, low=0, low_open=True)
    cache_bytes = validate.number("cache_bytes", cache_bytes, low=0)
    weight, cache = f"{weight_bytes / 2**20:.0f} MiB", f"{cache_bytes / 2**20:.0f} MiB"
    if weight_bytes > cache_bytes:
        return (f"{what} ({weight}) is larger than this device's last-level cache ({cache}), so every pass streams "
                f"it from memory")
    return (f"{what} ({weight}) fits in this device's last-level cache ({cache}, as the system reports it), so "
            f"repeated passes may read it from the cache instead of memory")


# ---------------------------------------------------------------------------------------------- Chapter 3's wall clock


def describe_overhead_c(measured_c: float, param_ratio: float, *, overhead: float = 2.0, noise: float = NOISE) -> str:
    """Chapter 3's sentence on the measured draft cost c (one draft step over one target step, fastest samples)
    beside the ratio of parameter counts, the c that reading weights alone would give. The words claim shares
    of c: "overhead, not the bytes, sets c" that the bytes explain at most half of it (c at least ``overhead``
    = 2 times the ratio); "the bytes set most of c" that they explain more than half, the overhead adding
    over ``noise``; "equal within the noise" that c is within ``noise`` of the ratio either way."""
    measured_c = validate.number("measured_c", measured_c, low=0, low_open=True)
    param_ratio = validate.number("param_ratio", param_ratio, low=0, low_open=True)
    numbers = f"c = {measured_c:.2f}, against the parameter ratio {param_ratio:.3f}"
    if measured_c >= overhead * param_ratio:
        return (f"So {numbers}: per-pass overhead, not the bytes, sets c ({measured_c / param_ratio:.1f}× what "
                "reading the weights would give). With c this large, Leviathan's formula caps the gain well below "
                "E[N],")
    if measured_c > param_ratio * (1 + noise):
        extra = measured_c / param_ratio - 1
        return (f"So {numbers}: the bytes set most of c and per-pass overhead adds {extra:.0%} to it. Even so, "
                "Leviathan's formula caps the gain below E[N],")
    if measured_c >= param_ratio / (1 + noise):
        return (f"So {numbers}, equal within the {noise:.0%} noise: on this device both passes cost what their "
                "weights cost to read. Leviathan's formula still caps the gain below E[N],")
    return (f"So {numbers}: the draft ran faster than its share of the bytes, its weights staying in a cache "
            "between passes. Leviathan's formula still caps the gain below E[N],")


def describe_formula_gap(gaps: dict, *, close: float = 0.15) -> str:
    """How far measured E[N] sits from the i.i.d. formula's at each temperature (``gaps``: temperature ->
    measured / formula - 1). "Close" claims every gap is under ``close``; "misses" that one is ``close`` or more.
    Each gap is printed with the digits it takes to tell it from ``close``."""
    if not gaps:
        raise validate.BadArgument("gaps must hold at least one temperature")
    close = validate.number("close", close, low=0, low_open=True)
    parts = [f"{apart(100 * abs(validate.number(f'gaps[{t}]', g)), 100 * close, 1)[0]}% at temperature {t:g}"
             for t, g in gaps.items()]
    listed = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    if all(abs(g) < close for g in gaps.values()):
        return f"On average the i.i.d. formula is close: measured E[N] differs from it by {listed}."
    return (f"The i.i.d. formula misses the mean here: measured E[N] differs from it by {listed}, {close:.0%} or "
            f"more somewhere, so acceptance on this text is far from independent draws at one α.")


def describe_tree_formula(measured: dict, formula: dict, *, chain: str, close: float = 0.15) -> str:
    """Chapter 7: tokens per iteration that tree decoding measured against the positional-acceptance formula
    (``measured``, ``formula``: tree name -> E[N]), and whether every wider tree beat the ``chain``. Within
    ``close`` of every tree the formula predicts them; past it, it misses. A finding either way."""
    if not measured or set(measured) != set(formula) or chain not in measured:
        raise validate.BadArgument(f"measured and formula must name the same trees, the chain {chain!r} among them")
    close = validate.number("close", close, low=0, low_open=True)
    gaps = {name: validate.number(f"measured[{name!r}]", measured[name], low=0, low_open=True)
            / validate.number(f"formula[{name!r}]", formula[name], low=0, low_open=True) - 1 for name in measured}
    worst = max(gaps, key=lambda name: abs(gaps[name]))
    gap = apart(100 * abs(gaps[worst]), 100 * close, 1)[0]
    if abs(gaps[worst]) < close:
        said = f"The formula predicts every tree's tokens per iteration to within {gap}% of what tree decoding measured"
    else:
        said = (f"The formula misses what tree decoding measured by up to {gap}% (the {worst}: "
                f"{measured[worst]:.2f} tokens per iteration against {formula[worst]:.2f}), {close:.0%} or more: "
                "on this text whether a child is accepted depends on more than its rank")
    lost = [name for name in measured if name != chain and not measured[name] > measured[chain]]
    if not lost:
        return f"{said}, and every wider tree yielded more than the {chain}."
    return f"{said}; the {' and the '.join(lost)} yielded no more than the {chain} ({measured[chain]:.2f})."


def wall_clock_agrees(name: str, ks: Sequence[int], median: Sequence[float], low: Sequence[float],
                      high: Sequence[float], predicted: Sequence[float], *, noise: float = NOISE) -> Verdict:
    """Whether a prediction of the wall-clock speedup (``predicted`` at each k: from the pass times, or
    Leviathan's formula) agrees with the speedup measured over paired runs (``median`` and its ``low``-``high``
    range): it does where the prediction lies in the measured range widened by ``noise`` either side. Chapter 3's
    wall clock adds what no prediction sees (the loop around the passes), so the sentence says which way the
    prediction missed, and by how much, where it did."""
    ks = _batches(ks, ("median", median), ("low", low), ("high", high), ("predicted", predicted))
    median, low, high, predicted = (_positive(n, v) for n, v in
                                    (("median", median), ("low", low), ("high", high), ("predicted", predicted)))
    claim = f"{name} predict the wall-clock speedup"
    off = {k: (p / (h * (1 + noise)) if p > h * (1 + noise) else p * (1 + noise) / lo if p < lo / (1 + noise) else 1.0)
           for k, p, lo, h in zip(ks, predicted, low, high, strict=True)}
    numbers = {"worst k": max(ks, key=lambda k: abs(math.log(off[k]))), "noise": noise}
    if all(v == 1.0 for v in off.values()):
        return Verdict(claim, True, True, f"{name[0].upper()}{name[1:]} predicted the wall-clock speedup at every k, "
                       f"within the measured range and the {noise:.0%} noise.", numbers)
    k = numbers["worst k"]
    i = ks.index(k)
    missed = [kk for kk in ks if off[kk] != 1.0]
    which = "above" if off[k] > 1 else "below"
    return Verdict(claim, False, True, f"{name[0].upper()}{name[1:]} predicted {predicted[i]:.2f}× at k = {k}, "
                   f"{which} the {low[i]:.2f}–{high[i]:.2f}× the wall clock measured (median {median[i]:.2f}×), "
                   f"beyond the {noise:.0%} noise. It missed so at {len(missed)} of the {len(ks)} values of k", numbers)


def describe_wall_clock(verdict: Verdict, ks: Sequence[int], predicted: Sequence[float], median: Sequence[float],
                        unmodelled_ms: Sequence[float], plain_extra_ms: float) -> str:
    """:func:`wall_clock_agrees`'s sentence and, where the prediction missed, the measured cost that explains
    it: the loop around the passes per iteration (``unmodelled_ms`` at each k) when the prediction was too
    high, plain decoding's own loop per token beyond its pass (``plain_extra_ms``) when it was too low."""
    if verdict.ok:
        return verdict.sentence
    k = verdict.numbers["worst k"]
    i = list(ks).index(k)
    if predicted[i] > median[i]:
        return (f"{verdict.sentence}. The loop around the passes took {unmodelled_ms[i]:.2f} ms per iteration at "
                f"k = {k}: sampling, cache rollback and bookkeeping, which no prediction from pass times sees.")
    return (f"{verdict.sentence}. Plain decoding paid {plain_extra_ms:.2f} ms per token for its own loop beyond its "
            "pass. That made the baseline slower than its passes say, and the measured speedup larger.")


# ---------------------------------------------------------------------------------------------- Chapters 7 and 8


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


# ---------------------------------------------------------------------------------------------- acceptance

Z = 3.0  # standard errors apart before two estimates count as different (positions are correlated)


@dataclass(frozen=True)
class Estimate:
    """A measured mean and its standard error."""

    mean: float
    error: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Estimate:
        """The sample mean of ``values`` and its standard error, s / sqrt(n)."""
        values = [validate.number(f"values[{i}]", v) for i, v in enumerate(values)]
        if len(values) < 2:
            raise validate.BadArgument(f"an estimate needs at least 2 values, got {len(values)}")
        mean = math.fsum(values) / len(values)
        var = math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)
        return cls(mean, math.sqrt(var / len(values)))

    @classmethod
    def rate(cls, successes: int, trials: int) -> Estimate:
        """A binomial rate: successes / trials, standard error sqrt(p(1 - p) / trials)."""
        trials = validate.integer("trials", trials, low=1)
        successes = validate.integer("successes", successes, low=0, high=trials)
        p = successes / trials
        return cls(p, math.sqrt(p * (1 - p) / trials))


def order(a: Estimate, b: Estimate, *, z: float = Z) -> int:
    """+1 if ``a`` is above ``b`` by more than ``z`` combined standard errors, -1 if below, 0 if within."""
    z = validate.number("z", z, low=0)
    gap = a.mean - b.mean
    if abs(gap) <= z * math.hypot(a.error, b.error):
        return 0
    return 1 if gap > 0 else -1


def describe_alpha_sources(temperatures: Sequence[float], generated: Sequence[Estimate], scored: Sequence[Estimate],
                           *, z: float = Z) -> str:
    """α from speculative generation (the models' own text) next to α from scoring held-out text, at each
    temperature: which was higher, or that they agree within sampling noise."""
    if not (len(temperatures) == len(generated) == len(scored)) or not temperatures:
        raise validate.BadArgument("temperatures, generated and scored must have the same non-zero length")
    signs = [order(g, s, z=z) for g, s in zip(generated, scored, strict=True)]
    values = " and ".join(f"{s.mean:.2f}" for s in scored)
    text = {1: "generated text, the models' own, was easier to agree on than held-out text",
            -1: "held-out text was easier to agree on than the generated text",
            0: "the two estimates agree within sampling noise"}
    if len(set(signs)) == 1:
        both = " at both temperatures" if len(signs) == 2 else ""
        return f"scoring held-out text: {values}; {text[signs[0]]}{both}"
    parts = "; ".join(f"at temperature {t:g} {text[sign]}" for t, sign in zip(temperatures, signs, strict=True))
    return f"scoring held-out text: {values}; {parts}"


def describe_against_range(alpha: Estimate, low: float, high: float, *, z: float = Z) -> str:
    """Where a measured α sits against a published range of model drafts' α (``low`` to ``high``)."""
    low = validate.number("low", low, low=0, high=1)
    high = validate.number("high", high, low=low, high=1)
    span = f"{low:.2f} to {high:.2f}"
    bytes_ = "bytes are easier to guess than words (most of a word is predictable once it has started)"
    if alpha.mean - z * alpha.error > high:
        return f"lands above the range of the model drafts ({span}): {bytes_}"
    if alpha.mean + z * alpha.error < low:
        return f"lands below the range of the model drafts ({span})"
    return f"lands in the range of the model drafts ({span}): {bytes_}"


@dataclass(frozen=True)
class PlaceStory:
    """Chapter 3's sentences on where in a word the models agree: at temperature 0, at temperature 1, and
    at word boundaries across temperatures (Problem 3)."""

    t0: str
    t1: str
    boundary: str


def describe_places(inside_t0: Estimate, boundary_t0: Estimate, inside_t1: Estimate, boundary_t1: Estimate, *,
                    z: float = Z) -> PlaceStory:
    """α inside a word and after a space or punctuation, at temperatures 0 and 1; each ordering the
    sentences state holds beyond ``z`` standard errors, or they say the two agree within noise."""
    i0, b0, i1, b1 = inside_t0.mean, boundary_t0.mean, inside_t1.mean, boundary_t1.mean
    at0 = order(inside_t0, boundary_t0, z=z)
    t0 = {1: f"At temperature 0 the models agree on the next byte {i0:.2f} of the time inside a word but only "
             f"{b0:.2f} after a space or punctuation, where the next word has to be chosen.",
          -1: f"At temperature 0 the models agree on the next byte more often after a space or punctuation "
              f"({b0:.2f}) than inside a word ({i0:.2f}).",
          0: f"At temperature 0 the models agree on the next byte about as often inside a word ({i0:.2f}) as after "
             f"a space or punctuation ({b0:.2f}), within sampling noise."}[at0]
    like = "there α measures how alike the two distributions are, not how predictable the text is"
    at1 = order(inside_t1, boundary_t1, z=z)
    if at1 < 0:
        turn = "the order flips" if at0 > 0 else "after a space still leads" if at0 < 0 else "after a space leads"
        t1 = (f"At temperature 1 {turn}: {i1:.2f} inside a word against {b1:.2f} after one. There α measures how "
              f"alike the two distributions are, not how predictable the text is. Two models that are both unsure of "
              f"the next word spread their probability over the same few candidates.")
    elif at1 > 0:
        t1 = f"At temperature 1, where {like}, inside a word leads too ({i1:.2f} against {b1:.2f} after one)."
    else:
        t1 = (f"At temperature 1, where {like}, the two places agree within sampling noise ({i1:.2f} inside a word, "
              f"{b1:.2f} after one).")
    both = f"{b0:.2f} at temperature 0, {b1:.2f} at temperature 1"
    boundary = {1: f"On the shipped pair this is what happens at word boundaries: {both}.",
                0: f"On the shipped pair, at word boundaries the two temperatures agree within sampling noise "
                   f"({both}).",
                -1: f"On the shipped pair it does not happen even at word boundaries ({both}): there the argmax "
                    f"matches lost at temperature 1 outweigh the partial credit."}[order(boundary_t1, boundary_t0, z=z)]
    return PlaceStory(t0, t1, boundary)
