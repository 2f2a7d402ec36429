"""Chapter 5's sentences on verifying at growing context, chosen by :func:`agreement.ratio_falls`'s and
:func:`agreement.shared_cache`'s verdicts."""

from __future__ import annotations

from specnotes.measure.checks.verdicts import Verdict

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
