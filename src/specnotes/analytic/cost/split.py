"""The time of every pass, split by term (``breakdown``, ``pass_breakdown``): where the seconds of a decode step,
each draft pass and the verify pass go, under the knobs in use, and which roof each term sits under.

A pass's seconds come from its kernels (``kernels``) combined per ``overlap`` (``roofline._seconds``), plus its
links and its fixed costs. The split gives each of those seconds to one term (``TERMS``):

- memory: "dense weights" (the matmuls every token runs: attention projections, routers, shared experts, dense
  layers, the LM head, a draft model's or a head's own weights), "expert weights" (the E[D](T) distinct experts
  a MoE pass touches), "target KV" (the target's cache, read by its attention), "draft KV" (the cache a draft
  pass reads: a draft model's own, a head's, or, for an early exit, the target's first layers);
- compute: "matmul FLOPs" (every matmul kernel, the experts' included) and "attention FLOPs";
- link: "all-reduce" (tensor parallelism: its bytes at half the link bandwidth and its latency per call) and
  "all-to-all" (expert parallelism's dispatch and combine; 0 until a kernel of that name is priced);
- fixed: "fixed" (``overhead`` or ``draft_overhead`` per pass, ``layer_overhead`` per decoder layer);
- host: "host" (a drafter's host work the step waits for, per sequence: a suffix tree's lookups, Chapter 11).

A term's ``seconds`` are what it adds to the pass, so the terms of a pass sum to ``pass_time`` (a draft's passes
to ``draft_time``, the drafts and the verify pass to ``iteration_time``) to float rounding, for every overlap
mode. With ``overlap="kernel"`` each kernel costs the larger of its memory and compute times, so the side that
loses adds 0 and its time is ``hidden`` under the other; with ``"pass"`` the same over the whole pass; with
``"none"`` both sides add. ``alone`` is a term's time at its own roof whether or not it is hidden, and
``PassSplit.bound(kernel)`` says whether a kernel's memory time or its compute time is the larger.

Why S changes between two batches (``change``): S = E[N]·T_decode/T_iter, so S falls exactly when T_iter/T_decode
rises, and that ratio is a sum over the terms of the iteration, each over the decode step's seconds. A term's
share of the change is the change of its own seconds over the decode step's; the shares sum to the change.
Pure Python: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from specnotes import validate
from specnotes.analytic.cost.drafters import Draft, draft_passes, levels, target_pass
from specnotes.analytic.cost.kernels import _check_pass
from specnotes.analytic.cost.roofline import Pass, _Engine, _engine, _math_dtype
from specnotes.analytic.cost.shapes import ModelShape

TERMS = ("dense weights", "expert weights", "target KV", "draft KV", "matmul FLOPs", "attention FLOPs",
         "all-reduce", "all-to-all", "fixed", "host")
ROOFS = {"dense weights": "memory", "expert weights": "memory", "target KV": "memory", "draft KV": "memory",
         "matmul FLOPs": "compute", "attention FLOPs": "compute", "all-reduce": "link", "all-to-all": "link",
         "fixed": "fixed", "host": "host"}
# Each kernel's bytes and FLOPs, and the term they go to (an attention kernel's bytes: the KV of its pass's model).
_BYTES = {"matmul": "dense weights", "lm head": "dense weights", "heads": "dense weights",
          "experts": "expert weights", "attention": "KV"}
_FLOPS = {"matmul": "matmul FLOPs", "lm head": "matmul FLOPs", "heads": "matmul FLOPs", "experts": "matmul FLOPs",
          "attention": "attention FLOPs"}
_LINKS = {"all-reduce": "all-reduce", "all-to-all": "all-to-all"}


@dataclass(frozen=True)
class KernelSplit:
    """One kernel of a pass: its seconds at the memory roof and at the compute roof (``bound``: the larger)."""

    name: str
    memory: float
    compute: float

    @property
    def bound(self) -> str:
        return "compute" if self.compute > self.memory else "memory"


@dataclass(frozen=True)
class PassSplit:
    """One pass split by term. ``seconds[term]``: what the term adds to the pass (every term of ``TERMS``, 0
    included; they sum to ``total``); ``alone[term]``: its time at its own roof, hidden or not; ``kernels``: the
    pass's kernels at both roofs. ``name``: "decode", "draft 1" ... "draft k" or "verify"; ``draft``: whether the
    draft runs it."""

    name: str
    draft: bool
    seconds: dict
    alone: dict
    kernels: tuple[KernelSplit, ...] = ()

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def hidden(self, term: str) -> float:
        """Seconds of ``term`` overlapped under another roof (0 with ``overlap="none"``)."""
        return self.alone[validate.choice("term", term, TERMS)] - self.seconds[term]

    def bound(self, kernel: str) -> str:
        """"memory" or "compute": which roof's time is the larger for the kernel named ``kernel``."""
        found = {k.name: k for k in self.kernels}
        return found[validate.choice("kernel", kernel, sorted(found))].bound

    @property
    def dominant(self) -> str:
        """The term that adds the most seconds."""
        return max(TERMS, key=self.seconds.__getitem__)


@dataclass(frozen=True)
class Breakdown:
    """One speculative iteration at one batch, and the plain decode step it replaces, split by term:
    ``decode`` (the target over 1 token a sequence), ``drafts`` (the draft's passes in order: k for a draft
    model, an early exit or an EAGLE head, one per tree level, one for a single-pass drafter, heads or an
    n-gram lookup, none at k = 0) and ``verify`` (the target over k + 1 tokens, or a tree's tokens + 1).

    ``totals(part)``: {term: seconds} summed over "decode", "draft", "verify" or "iteration" (draft + verify);
    ``ratio``: T_decode / T_iter, so that S = E[N]·ratio (``speedup``); ``relative()``: each term's
    iteration seconds over T_decode (they sum to 1/ratio); ``rows()``: one dict per pass and term, for a table
    or a JSON report."""

    batch: int
    k: int
    context: int
    draft_context: int
    decode: PassSplit
    drafts: tuple[PassSplit, ...]
    verify: PassSplit
    widths: tuple[int, ...] | None = None

    def totals(self, part: str = "iteration") -> dict:
        passes = {"decode": (self.decode,), "draft": self.drafts, "verify": (self.verify,),
                  "iteration": self.drafts + (self.verify,)}[validate.choice("part", part, ("decode", "draft",
                                                                                             "verify", "iteration"))]
        return {t: sum(p.seconds[t] for p in passes) for t in TERMS}

    def seconds(self, part: str = "iteration") -> float:
        return sum(self.totals(part).values())

    @property
    def ratio(self) -> float:
        return self.decode.total / self.seconds("iteration")

    def speedup(self, tokens: float) -> float:
        """S = ``tokens``·T_decode/T_iter, ``tokens`` the mean tokens an iteration yields (E[N] for a chain)."""
        return validate.number("tokens", tokens, low=0) * self.ratio

    def relative(self) -> dict:
        """{term: its seconds in the iteration / T_decode}: what each term costs in plain decode steps."""
        return {t: s / self.decode.total for t, s in self.totals("iteration").items()}

    def rows(self) -> list[dict]:
        """One row per pass and term with seconds: pass, term, roof, seconds, alone (at its own roof), hidden."""
        return [{"pass": p.name, "term": t, "roof": ROOFS[t], "seconds": p.seconds[t], "alone": p.alone[t],
                 "hidden": p.hidden(t)} for p in (self.decode, *self.drafts, self.verify) for t in TERMS
                if p.alone[t] or p.seconds[t]]

    def to_json(self) -> dict:
        """The split in plain types: per part ("decode", "draft", "verify"), seconds per term (zeros left out);
        the kernels' bounds per pass; the ratio; ``relative`` (every term, in plain decode steps)."""
        parts = {part: {t: s for t, s in self.totals(part).items() if s} for part in ("decode", "draft", "verify")}
        bounds = {p.name: {k.name: k.bound for k in p.kernels} for p in (self.decode, *self.drafts, self.verify)}
        return {"batch": self.batch, "k": self.k, "seconds": parts, "bounds": bounds, "ratio": self.ratio,
                "relative": self.relative()}


def _split_pass(p: Pass, eng: _Engine, name: str) -> PassSplit:
    """``p`` split by term exactly as ``_Engine.pass_seconds`` prices it."""
    seconds, alone = dict.fromkeys(TERMS, 0.0), dict.fromkeys(TERMS, 0.0)
    seconds["fixed"] = alone["fixed"] = (eng.draft_overhead if p.draft else eng.overhead) + (
        eng.layer * p.layers if p.kernels else 0.0)
    seconds["host"] = alone["host"] = p.host
    if not p.kernels:  # an n-gram lookup: its overhead only (a suffix tree: and its host time)
        return PassSplit(name, p.draft, seconds, alone)
    peak = eng.accel.peak(_math_dtype(eng.accel, p.dtype, p.compute))
    kv = "draft KV" if p.draft else "target KV"
    parts, splits = [], []
    for k in p.kernels:
        if k.calls or k.link_bytes:
            if k.name not in _LINKS:
                raise validate.BadArgument(f"no term for the link kernel {k.name!r}")
            if not eng.accel.link_bandwidth:
                raise validate.BadArgument(f"{eng.accel.name} has no link bandwidth in the table: tp > 1 needs one")
            t = k.link_bytes / (eng.accel.link_bandwidth / 2) + k.calls * eng.latency
            seconds[_LINKS[k.name]] += t
            alone[_LINKS[k.name]] += t
        if not (k.flops or k.bytes):
            continue
        if k.name not in _BYTES:
            raise validate.BadArgument(f"no term for the kernel {k.name!r}; the split knows {sorted(_BYTES)}")
        by, fl = _BYTES[k.name].replace("KV", kv), _FLOPS[k.name]
        mem = k.bytes / eng.accel.mem_bandwidth
        comp = k.flops / peak * (1 + eng.slowdown if k.name == "experts" else 1)
        alone[by] += mem
        alone[fl] += comp
        parts.append((by, fl, mem, comp))
        splits.append(KernelSplit(k.name, mem, comp))
    memory_wins = sum(m for *_, m, _ in parts) >= sum(c for *_, c in parts)  # for overlap="pass"
    for by, fl, mem, comp in parts:
        if eng.overlap == "none" or (eng.overlap == "kernel" and mem >= comp) or (eng.overlap == "pass"
                                                                                  and memory_wins):
            seconds[by] += mem
        if eng.overlap == "none" or (eng.overlap == "kernel" and comp > mem) or (eng.overlap == "pass"
                                                                                 and not memory_wins):
            seconds[fl] += comp
    return PassSplit(name, p.draft, seconds, alone, tuple(splits))


def pass_breakdown(shape: ModelShape, accel, batch: int, new_tokens: int, context: int = 0, dtype: str | None = None,
                   overhead: float = 0.0, overlap: str = "kernel", tp: int = 1, allreduce_latency: float = 0.0,
                   draft_overhead: float | None = None, layer_overhead: float = 0.0,
                   expert_slowdown: float = 0.0) -> PassSplit:
    """One target pass (B sequences × n new tokens after L cached ones) split by term: its terms sum to
    ``pass_time`` with the same arguments (a calibration, ``**calibrate.calibration(...)``, passes whole)."""
    batch, new_tokens, context, tp = _check_pass(batch, new_tokens, context, tp)
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency, layer_overhead,
                  expert_slowdown)
    name = "decode" if new_tokens == 1 else "verify"
    return _split_pass(target_pass(shape, batch, new_tokens, context, tp, dtype), eng, name)


def breakdown(target: ModelShape, draft: Draft, accel, batch: int, k: int, context: int = 0, dtype: str | None = None,
              overhead: float = 0.0, draft_overhead: float | None = None, overlap: str = "kernel",
              draft_context: int | None = None, tp: int = 1, allreduce_latency: float = 0.0,
              layer_overhead: float = 0.0, widths=None, expert_slowdown: float = 0.0) -> Breakdown:
    """The decode step, the draft passes and the verify pass of one iteration, split by term (``Breakdown``).

    The arguments are ``iteration_time``'s: ``k`` drafted tokens a sequence (a tree: ``widths``, tokens per
    sequence at each draft level, and k the tree tokens verified), ``draft_context`` the draft's own KV length
    (default ``context``), and the knobs (``overhead``, ``draft_overhead``, ``layer_overhead``, ``overlap``,
    ``tp``, ``allreduce_latency``, ``expert_slowdown``: a calibration's experts' GEMM below peak, in "matmul
    FLOPs"), so ``**calibrate.calibration(...)`` passes whole. Then, to float rounding:
    ``.decode.total == pass_time(target, accel, batch, 1, context, ...)``, ``.seconds("draft") ==
    draft_time(...)``, ``.seconds("iteration") == iteration_time(...)`` and ``.ratio·E[N] == batch_speedup(...)``.

    ``b.totals("verify")["expert weights"]``: the seconds a verify pass spends reading the experts it touches;
    ``b.verify.bound("experts")``: whether their grouped GEMM is memory- or compute-bound;
    ``change(b1, b2)``: which term moved S between two batches."""
    batch, _, context, tp = _check_pass(batch, 1, context, tp)
    k = validate.integer("k", k, low=0)
    draft_ctx = context if draft_context is None else validate.integer("draft_context", draft_context, low=0)
    if widths is not None:
        widths = levels(0, widths)
        k = validate.integer("k (the tree tokens verified)", k, low=len(widths))
    eng = _engine(accel, dtype, overhead, draft_overhead, overlap, tp, allreduce_latency, layer_overhead,
                  expert_slowdown)
    decode = _split_pass(target_pass(target, batch, 1, context, tp, dtype), eng, "decode")
    verify = _split_pass(target_pass(target, batch, k + 1, context, tp, dtype), eng, "verify")
    passes = draft_passes(draft, batch, k, draft_ctx, tp, target, widths, dtype)
    drafts = tuple(_split_pass(p, eng, f"draft {i + 1}") for i, p in enumerate(passes))
    return Breakdown(batch, k, context, draft_ctx, decode, drafts, verify, widths)


def change(before: Breakdown, after: Breakdown) -> dict:
    """Each term's share of the change in T_iter/T_decode from ``before`` to ``after`` (two batches, say):
    {term: (its iteration seconds / T_decode) after minus before}. The shares sum to the change of
    1/ratio; S = E[N]·ratio falls by as much as they add up to positive, so the largest positive share is the
    term that took S down, the most negative the one that lifted it."""
    a, b = before.relative(), after.relative()
    return {t: b[t] - a[t] for t in TERMS}
