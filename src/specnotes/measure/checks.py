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
- ``NOISE``: fastest samples of the same pass on a busy 2-core machine differ by up to ~10%.

Every check returns a :class:`Verdict`; a chapter asserts ``verdict.ok`` and may print the verdict.
The ``describe_*`` functions pick the sentence a chapter glues into its prose from the numbers.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

from specnotes import validate

READ_ONLY_SLACK = 1.5
SHARE = 1 / 8
NOISE = 0.10
THRESHOLD = 2.0  # a predicted rise smaller than this is not tested (see grows)


@dataclass(frozen=True)
class Verdict:
    """``ok``: the measurement agrees with what the model predicts for this device (assert it).
    ``tested``: False when the model predicts nothing this measurement could show (``ok`` is then True).
    ``sentence``: what the prose may say. ``numbers``: what it was decided on."""

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
          share: float = SHARE, threshold: float = THRESHOLD) -> Verdict:
    """A quantity the model predicts to grow with B (verify/decode, 1/S, per-token amortization):
    from the batch where it measured lowest (before the last) to the last batch, the model predicts a
    rise of ``model``×. If that is at least ``threshold``, the measured rise must be at least
    ``model ** share``; a smaller predicted rise is not tested (library paths for small GEMMs move
    such ratios more than that, either way)."""
    batches = _batches(batches, ("measured", measured), ("modelled", modelled))
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    if len(batches) < 2:
        return Verdict(claim, True, False, "One batch size: nothing to compare.", {})
    i = min(range(len(batches) - 1), key=measured.__getitem__)
    model, seen = modelled[-1] / modelled[i], measured[-1] / measured[i]
    numbers = {"from B": batches[i], "to B": batches[-1], "measured rise": seen, "model rise": model}
    if model < threshold:
        return Verdict(claim, True, False, f"The model predicts only {model:.2f}× from B = {batches[i]} to "
                       f"{batches[-1]}: too little to test (measured {seen:.2f}×).", numbers)
    need = model**share
    ok = seen >= need
    return Verdict(claim, ok, True, f"From B = {batches[i]} to {batches[-1]} the model predicts {model:.2f}×, "
                   f"measured {seen:.2f}× (at least {need:.2f}× needed)" + ("." if ok else ": too flat."),
                   {**numbers, "needed": need})


def speedup_falls(batches: Sequence[int], measured: Sequence[float], modelled: Sequence[float], stop: str) -> Verdict:
    """S(B) falls as B grows: :func:`grows` applied to 1/S, once the sweep has run until S fell below 1
    (``stop == "done"``); a sweep cut short by its time budget or batch limit shows no fall to test."""
    stop = validate.choice("stop", stop, ("done", "budget", "limit"))
    claim = "S(B) falls as B grows"
    if stop != "done":
        return Verdict(claim, True, False, f"The sweep stopped at B = {batches[-1]} ({stop}) before S fell below 1.",
                       {"last B": batches[-1]})
    if measured[-1] >= 1:
        raise validate.BadArgument(f"the sweep says S fell below 1, but S = {measured[-1]:.3g} at B = {batches[-1]}")
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    v = grows(claim, batches, [1 / s for s in measured], [1 / s for s in modelled])
    n = v.numbers
    sentence = (f"From B = {n['from B']} to {n['to B']} S fell {n['measured rise']:.2f}×; the model predicts "
                f"{n['model rise']:.2f}×" + ("." if v.ok else ", and the measurement does not follow it."))
    return Verdict(claim, v.ok, v.tested, sentence, v.numbers)


def speedup_bound(batches: Sequence[int], measured: Sequence[float], modelled: Sequence[float],
                  decode_excess: Sequence[float], *, slack: float = READ_ONLY_SLACK) -> Verdict:
    """S(B) < 1 wherever the model puts it clearly below 1. Every measured pass takes at least its
    roofline time / ``slack``, so S_measured ≤ S_model · slack · e, where e = measured/modelled plain
    decode time at that batch (a slow library path for small GEMMs makes decoding, and with it S,
    higher than modelled). Where that bound is below 1, speculation cannot have paid."""
    batches = _batches(batches, ("measured", measured), ("modelled", modelled), ("decode_excess", decode_excess))
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    decode_excess = _positive("decode_excess", decode_excess)
    bounds = [s * slack * max(e, 1.0) for s, e in zip(modelled, decode_excess, strict=True)]
    checked = [(b, s, u) for b, s, u in zip(batches, measured, bounds, strict=True) if u < 1]
    claim = "S(B) < 1 once the sweep is past the model's crossover"
    if not checked:
        return Verdict(claim, True, False, "Nowhere in this sweep does the model put S clearly below 1.",
                       {"smallest bound": min(bounds)})
    wrong = [(b, s, u) for b, s, u in checked if s >= 1]
    numbers = {"checked from B": checked[0][0], "largest measured S there": max(s for _, s, _ in checked)}
    if wrong:
        b, s, u = wrong[0]
        return Verdict(claim, False, True, f"Speculation measured S = {s:.2f} at B = {b}, where the model allows at "
                       f"most {u:.2f}.", numbers)
    return Verdict(claim, True, True, f"From B = {checked[0][0]} on, where the model puts S below 1 even allowing "
                   f"for its biases, it measured below 1.", numbers)


# ---------------------------------------------------------------------------------------------- sentences


def _b_list(batches: Sequence[int]) -> str:
    return f"B = {batches[0]}" if len(batches) == 1 else f"B = {batches[0]} to {batches[-1]}"


@dataclass(frozen=True)
class Crossing:
    """Where speculation paid in a measured sweep (``paid``: the batches with S > 1) and where it
    stopped (``stopped_at``: the last batch, once S fell below 1 there)."""

    batches: list[int]
    speedups: list[float]
    stop: str
    paid: list[int]
    stopped_at: int | None
    model_bstar: int | None
    sentence: str

    @property
    def measured_bstar(self) -> int | None:
        """The first batch measured after the last one that paid (the first batch if none did; None if
        the sweep ended before S fell below 1)."""
        if self.stop != "done":
            return None
        later = [b for b in self.batches if not self.paid or b > self.paid[-1]]
        return later[0]


def describe_crossing(batches: Sequence[int], speedups: Sequence[float], stop: str, model_bstar: int | None, *,
                      ridge: float, critical_batch: float, k: int) -> Crossing:
    """Where speculation paid on this device and where it stopped, or why it never did, in numbers.
    ``model_bstar``: the model's B* on this device's roofs (None: it still pays at the model's limit);
    ``ridge`` (FLOP/byte) and ``critical_batch`` (tokens per weight read) of this device's roofs."""
    batches = _batches(batches, ("speedups", speedups))
    speedups = _positive("speedups", speedups)
    stop = validate.choice("stop", stop, ("done", "budget", "limit"))
    if stop == "done" and speedups[-1] >= 1:
        raise validate.BadArgument(f"the sweep says S fell below 1, but S = {speedups[-1]:.3g} at B = {batches[-1]}")
    paid = [b for b, s in zip(batches, speedups, strict=True) if s > 1]
    s = dict(zip(batches, speedups, strict=True))
    model = "beyond any batch that fits" if model_bstar is None else f"at B = {model_bstar}"
    never = (f"S = {speedups[0]:.2f} already at B = {batches[0]}. This device's ridge is {ridge:.2g} FLOP/byte, a "
             f"critical batch of {critical_batch:.2g} tokens per weight read, so even at B = {batches[0]} the verify "
             f"pass's {batches[0] * (k + 1)} tokens are past it: verification is never free")
    if critical_batch > batches[0] * (k + 1):
        never = (f"S = {speedups[0]:.2f} already at B = {batches[0]}, although the verify pass's "
                 f"{batches[0] * (k + 1)} tokens are under this device's critical batch of {critical_batch:.2g}: the "
                 f"passes' fixed costs, not the roofs, decide at this size")
    if stop != "done":
        why = "the time budget ran out" if stop == "budget" else "the largest batch allowed"
        sentence = (f"speculation never paid up to B = {batches[-1]}, where the sweep stopped ({why}): {never}"
                    if not paid else
                    f"no crossover up to B = {batches[-1]} on this device ({why}; S = {speedups[-1]:.2f} there); the "
                    f"model with this device's roofs puts it {model}")
        return Crossing(batches, speedups, stop, paid, None, model_bstar, sentence)
    if not paid:
        return Crossing(batches, speedups, stop, paid, batches[-1], model_bstar,
                        f"speculation never paid here: {never}")
    best, last = max(paid, key=s.__getitem__), paid[-1]
    where = (f"up to B = {last}" if paid == batches[:len(paid)] else
             f"at B = {', '.join(map(str, paid[:-1]))} and {last}" if len(paid) > 1 else f"at B = {last}")
    values = f"S = {s[best]:.2f} at B = {best}" + (f", {s[last]:.2f} at B = {last}" if last != best else "")
    sentence = (f"speculation paid {where} here ({values}) and stopped paying by B = {batches[-1]} "
                f"(S = {speedups[-1]:.2f}); the model with this device's roofs puts the crossover {model}")
    return Crossing(batches, speedups, stop, paid, batches[-1], model_bstar, sentence)


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
                f"{noise:.0%}: the roofline with this device's roofs prices these passes ({numbers}).")
    direction = "above" if measured_s > modelled_s else "below"
    decode_moved, iteration_moved = math.log(excess["decode"]), -math.log(iteration)
    if abs(decode_moved) >= abs(iteration_moved):
        slow = excess["decode"] > 1
        why = (f"plain decoding ran {excess['decode']:.2f}× its modelled time: "
               + (f"a GEMM of {batch} rows runs below both roofs on this device's library path, which the roofline, "
                  "an upper bound on speed, does not know" if slow else
                  "it beat the roofs the copy and the square GEMM measured, which a small kernel can"))
    else:
        share = {kind: (k if kind == "draft" else 1) * t[kind][1] * (excess[kind] - 1) for kind in ("verify", "draft")}
        kind = max(share, key=lambda x: abs(share[x]))
        slow = excess[kind] > 1
        why = (f"the {'draft steps' if kind == 'draft' else 'verify pass'} ran {excess[kind]:.2f}× the modelled "
               f"time: " + ("below both roofs on this device's library path, which the roofline, an upper bound on "
                            "speed, does not know" if slow else
                            "faster than the roofs the copy and the square GEMM measured, which a small kernel can"))
    return (f"At B = {batch} the measured S ({measured_s:.2f}) is {direction} the model's ({modelled_s:.2f}) "
            f"because {why} ({numbers}).")


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
        return (f"The draft costs more than its parameter count says ({numbers}): a small model runs as many "
                f"kernels per layer as a large one, so {why} a larger share of its time.")
    if measured_c < param_ratio / (1 + noise):
        why = ("its weights fit in the last-level cache and stay there between passes, so it streams them faster "
               "than the target streams its own from memory" if draft_cached else
               "for a reason the roofline does not capture (its weights do not fit in the cache)")
        return f"The draft costs less than its parameter count says ({numbers}): {why}."
    return (f"The draft costs what its parameter count says ({numbers}, within {noise:.0%}): both passes are "
            f"memory-bound and read their weights at the same bandwidth.")


def describe_verify(batches: Sequence[int], measured: Sequence[float], modelled: Sequence[float], *,
                    critical_batch: float, k: int, decode_excess: float, verify_excess: float) -> str:
    """How verify/decode moved across the sweep and why, attributed by the numbers: where the verify
    pass's B(k+1) tokens sit against this device's critical batch, and, where the measurement does not
    move as the model does, what the first batch's passes show (``decode_excess``/``verify_excess``:
    measured/modelled time of each pass there)."""
    batches = _batches(batches, ("measured", measured), ("modelled", modelled))
    measured, modelled = _positive("measured", measured), _positive("modelled", modelled)
    critical_batch = validate.number("critical_batch", critical_batch, low=0, low_open=True)
    b0, b1, t0, t1 = batches[0], batches[-1], batches[0] * (k + 1), batches[-1] * (k + 1)
    m0, m1, p0, p1 = measured[0], measured[-1], modelled[0], modelled[-1]
    moved = (f"verifying k + 1 = {k + 1} tokens for every sequence cost {m0:.2f}× a decode pass at B = {b0} and "
             f"{m1:.2f}× at B = {b1} (the model: {p0:.2f}× and {p1:.2f}×)")
    if t0 < critical_batch <= t1:
        where = (f"at B = {b0} the verify pass's {t0} tokens per weight read are under this device's critical "
                 f"batch of {critical_batch:.3g}, and at B = {b1} its {t1} are past it")
    elif critical_batch > t1:
        where = (f"up to B = {b1} the verify pass's {t1} tokens per weight read stay under this device's critical "
                 f"batch of {critical_batch:.3g}")
    else:
        where = (f"the verify pass's {t0} tokens per weight read are past this device's critical batch of "
                 f"{critical_batch:.2g} already at B = {b0}, so it is compute-bound at every batch measured")
    seen, model = m1 / m0, p1 / p0
    passes = f"at B = {b0} decode took {decode_excess:.2f}× its modelled time and verify {verify_excess:.2f}×"
    small_passes = (f"small passes run below the compute roof, the smallest furthest ({passes}), which pulls the "
                    f"ratio towards 1 at small B")
    unmodelled = f"a cost the model lacks ({passes})"
    if model > 1 + NOISE and seen > 1 + NOISE:
        why = f"the ratio climbs towards k + 1, {seen:.2f}× here against {model:.2f}× in the model"
        if seen > model * (1 + NOISE) and decode_excess > verify_excess * (1 + NOISE):
            why += f"; the extra climb is because {small_passes}"
    elif seen > 1 + NOISE:
        why = (f"the measured ratio climbs {seen:.2f}× although the model's barely moves: "
               + (small_passes if decode_excess > verify_excess * (1 + NOISE) else unmodelled))
    elif model > 1 + NOISE or seen < 1 / (1 + NOISE):
        why = ("the measured ratio does not move as the model's does: "
               + (f"the math library runs the GEMMs of more rows on a slower path here ({passes})"
                  if verify_excess > decode_excess * (1 + NOISE) else unmodelled))
    else:
        why = "neither ratio moves by more than the noise"
    return f"{moved}: {where}; {why}"


def describe_free_batch(critical_batch: float, k: int) -> str:
    """Up to which batch verifying k drafts per sequence is free on this device: while B(k + 1) stays
    under the critical batch (tokens per weight read at the ridge)."""
    critical_batch = validate.number("critical_batch", critical_batch, low=0, low_open=True)
    k = validate.integer("k", k, low=1)
    free = critical_batch / (k + 1)
    if free >= 1:
        return (f"verification is free up to about B = {free:.0f} (B(k+1) = {k + 1}B tokens per weight read "
                f"against a critical batch of {critical_batch:.3g})")
    return (f"verification is never free: the critical batch is {critical_batch:.2g} tokens per weight read, "
            f"and B(k+1) = {k + 1} tokens are past it already at B = 1")


def describe_knee(knee: float | None, batches: Sequence[int]) -> str:
    """The measured knee of a step-time sweep, or that the step time never rose within it."""
    batches = validate.integers("batches", batches, low=1)
    if knee is None:
        return (f"no measured knee up to B = {max(batches)} (the step time never rose 25% above its flat "
                f"level)")
    return f"a measured knee at B ≈ {validate.number('knee', knee, low=0, low_open=True):.2g}"
