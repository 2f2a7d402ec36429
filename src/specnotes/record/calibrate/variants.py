"""The model variants (``VARIANTS``: idealized; the first, 2-knob calibration as it was stored; candidate terms),
the one the stored calibrations use (``CHOSEN``), and which of them ``cost``'s time functions can price
(``priceable``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

# The calibration the book stored before the cross-validation (issue 24): two knobs fitted to the four points
# of SpecDecode-Bench Fig. 1(c), with EAGLE heads priced as one-layer models; ``VARIANTS`` keeps it as it was.
FIRST_CALIBRATION = {"overlap": "none", "overhead": 0.00321, "draft_overhead": 0.0005259}


@dataclass(frozen=True)
class Variant:
    """A version of the model: how a pass combines its kernels' memory and compute times (``overlap``:
    "kernel", "none", or "knee": (m^p + c^p)^(1/p) per kernel with p fitted), which engine knobs are fitted
    (``free``, seconds), and the drafter's structure (``heads``: "eagle" prices an EAGLE head as
    ``cost.EagleHead``; "one-layer" as the one-layer model the first calibration used). ``stored``: the
    first calibration's knobs as they were, not refitted; ``fitted_on``: the record's source they were fitted
    to, so that its rows say "not held out"."""

    name: str
    what: str
    overlap: str = "none"
    free: tuple[str, ...] = ()
    heads: str = "eagle"
    stored: dict | None = None
    fitted_on: str | None = None  # the record's source a stored variant was fitted to: it is never held out
    tiles: tuple[int, ...] = ()  # GEMM row tiles to try (``Features.base``); () prices every row exactly
    held: str | None = None  # a variant whose knobs are fitted first and held: only the rest are fitted after


VARIANTS = {v.name: v for v in (
    Variant("idealized", "per-kernel roofline, no overhead", "kernel"),
    Variant("first calibration", "2 knobs fitted to the 4 points of SpecDecode-Bench Fig. 1(c), as stored before",
            "none", heads="one-layer", stored=FIRST_CALIBRATION, fitted_on="specdecode_bench"),
    Variant("2 knobs per engine", "no overlap, a fixed time per target and per draft pass, per engine", "none",
            ("overhead", "draft_overhead")),
    Variant("soft knee", "2 knobs per engine and a GEMM knee (m^p + c^p)^(1/p), p fitted", "knee",
            ("overhead", "draft_overhead")),
    Variant("per-token cost", "2 knobs per engine and a time per token each target pass scores", "none",
            ("overhead", "draft_overhead", "token_overhead")),
    Variant("per-layer cost", "no overlap, a time per decoder layer of every pass and per draft pass, per engine",
            "none", ("draft_overhead", "layer_overhead")),
    Variant("per-layer cost, overlapped", "the same with each kernel's memory and compute overlapped", "kernel",
            ("draft_overhead", "layer_overhead")),
    Variant("+ GEMM tiles", "per-layer cost, and each GEMM's math priced in row tiles of 16 to 128 (tile fitted)",
            "none", ("draft_overhead", "layer_overhead"), tiles=(16, 32, 64, 128)),
    Variant("+ per-verified-token cost", "per-layer cost, and a time per drafted token the verify pass scores",
            "none", ("draft_overhead", "layer_overhead", "spec_token_overhead")),
    Variant("+ per-sequence cost", "per-layer cost, and a time per sequence in every pass (scheduling)", "none",
            ("draft_overhead", "layer_overhead", "seq_overhead")),
    Variant("+ per-MoE-layer cost", "per-layer cost, and a time per MoE layer of every pass (router, top-k, "
            "token alignment, grouped-GEMM launches)", "none", ("draft_overhead", "layer_overhead",
                                                                 "moe_layer_overhead")),
    Variant("+ per-expert cost", "per-layer cost, and a time per distinct expert a MoE layer touches (each "
            "touched expert's GEMM runs a few rows padded to its tile)", "none",
            ("draft_overhead", "layer_overhead", "expert_overhead")),
    # issue 42's candidates, each from a term of the time split
    Variant("+ per-token cost", "per-layer cost, and a time per token every target pass scores (the part of a "
            "step that grows with its tokens: sampling, routing, activations)", "none",
            ("draft_overhead", "layer_overhead", "token_overhead")),
    Variant("+ per-pass cost", "per-layer cost, and a fixed time per target pass (a multi-GPU step's launch, "
            "scheduling and synchronisation)", "none", ("draft_overhead", "layer_overhead", "overhead")),
    Variant("+ per-token MoE cost", "per-layer cost, and a time per token each MoE layer routes (top-k, sorting the "
            "tokens by expert, dispatching and combining their activations)", "none",
            ("draft_overhead", "layer_overhead", "moe_token_overhead")),
    # the MoE-only terms again, fitted to the MoE points with the per-layer knobs held: no dense prediction moves
    Variant("+ per-token MoE cost, held", "the per-token MoE cost fitted with the per-layer knobs held", "none",
            ("draft_overhead", "layer_overhead", "moe_token_overhead"), held="per-layer cost"),
    Variant("+ grouped-GEMM efficiency, held", "the experts' GEMM below peak, fitted with the per-layer knobs held",
            "none", ("draft_overhead", "layer_overhead", "expert_slowdown"), held="per-layer cost"),
    Variant("+ per-MoE-layer cost, held", "the per-MoE-layer cost fitted with the per-layer knobs held", "none",
            ("draft_overhead", "layer_overhead", "moe_layer_overhead"), held="per-layer cost"),
    Variant("+ compute below peak", "per-layer cost, every kernel's math at a fitted fraction of the datasheet peak",
            "none", ("draft_overhead", "layer_overhead", "compute_slowdown")),
    Variant("+ grouped-GEMM efficiency", "per-layer cost, the experts' grouped GEMM at a fitted fraction of the peak "
            "(few rows per expert, tiles padded, a fixed cost per expert's tile)", "none",
            ("draft_overhead", "layer_overhead", "expert_slowdown")),
    Variant("+ attention compute", "per-layer cost, attention's math at a fitted fraction of the peak (MLA's absorbed "
            "attention nears the ridge at one query, so k + 1 queries cost compute)", "none",
            ("draft_overhead", "layer_overhead", "attention_slowdown")),
    Variant("+ all-reduce bytes", "per-layer cost, the all-reduces' bytes at a fitted fraction of the datasheet link "
            "bandwidth (their bytes grow with the tokens, B(k + 1) in a verify pass)", "none",
            ("draft_overhead", "layer_overhead", "link_slowdown")),
)}
# The variant the stored calibrations use (--cv): the per-layer cost, with the MoE term issue 42's rule keeps
# (``moe_keeps``: the MoE family's held-out median falls, neither dense median grows) that lowers that median most.
CHOSEN = "+ grouped-GEMM efficiency, held"


KNEES = (1.0, 2.0, 4.0, math.inf)  # the p the soft knee may take (1: memory plus compute; inf: the larger)
LINEAR = ("overhead", "draft_overhead", "layer_overhead", "token_overhead", "allreduce_latency", "seq_overhead",
          "spec_token_overhead", "moe_layer_overhead", "expert_overhead",
          # dimensionless: extra time as a multiple of a roof's seconds (1/efficiency - 1)
          "compute_slowdown", "expert_slowdown", "attention_slowdown", "link_slowdown",
          "moe_token_overhead")


COST_KNOBS = ("overhead", "draft_overhead", "layer_overhead", "allreduce_latency", "expert_slowdown")  # cost's knobs


def priceable(variant: str) -> bool:
    """Whether ``cost``'s time functions can price a variant: its free knobs are ``cost``'s, it combines a
    kernel's times as ``cost`` does (no soft knee) and prices GEMM rows exactly (no tiles)."""
    v = VARIANTS[variant]
    return set(v.free) <= set(COST_KNOBS) and v.overlap != "knee" and not v.tiles


def _knee_of(v: Variant) -> list[float]:
    return list(KNEES) if v.overlap == "knee" else [1.0 if v.overlap == "none" else math.inf]


def _knobs_of(v: Variant, knee: float, x: dict) -> dict:
    """``cost`` keyword arguments of a variant's fitted linear knobs (the soft knee has no ``cost`` form)."""
    overlap = {1.0: "none", math.inf: "kernel"}.get(knee, f"knee p={knee:g}")
    out = {"overlap": overlap}
    for name in LINEAR:
        if name in COST_KNOBS or name in v.free:  # a term cost has no knob for stays in the CV
            out[name] = float(x.get(name, 0.0))
    return out
