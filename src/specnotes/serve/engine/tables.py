"""What a ``measure_pairs`` record says in numbers, one row per concurrency: S(B) from the engine's own TPOTs
over the pairs (``pair_table``), the cost model beside it (``model_beside``), and the draft pass's cost inferred
from a shipped-pair record (``draft_pass_cost``)."""

from __future__ import annotations

import statistics


def model_beside(results, batches: list[int] | None = None) -> list[dict]:
    """The cost model beside a ``measure_pairs`` record, at each concurrency it measured, for llama-server's step. Per
    slot, ``draft-simple`` (llama.cpp at the pinned version, ``tools/server/server-context.cpp`` and
    ``common/speculative.cpp``) has the target verify k + 1 tokens, the draft re-evaluate that same batch ("always
    re-evaluate for simplicity", TAG_SPEC_AVOID_DRAFT_REEVAL), then run k passes of one token: one draft pass more
    than the textbook k. So T_step = k·T_draft(B, 1) + T_draft(B, k + 1) + T_target(B, k + 1), and S(B) =
    E[N]·T_target(B, 1) / T_step. "S roofline": each pass at the per-kernel roofline with the recording machine's
    measured roofs (``notes["roofs"]``), no overheads. "S overhead-bound": every pass costs the same fixed time, S =
    E[N] / (k + 2), with the engine's own tokens per step (``tokens_per_step``, also in the row) where its counters
    say, the E[N] its measured S was made of (else the model's). α: specnotes' own decoder on the prompt set the
    engine drew from (the shipped pair), or 1 (the big pair, its own draft). For the big pair also the verify/decode
    time ratio r = T(B, k+1) / T(B, 1) each measured S implies (α = 1, draft = target: S = (k + 1) / (k + 2r), so r
    = ((k + 1)/S − k) / 2), beside the roofline's; and, since a pass over k + 1 tokens cannot cost less than a pass
    over one (r ≥ 1), the ceiling S ≤ (k + 1)/(k + 2) (``checks.ceiling`` with α = 1 and k + 1 plain steps of
    drafting). Every pair of either record is checked against its ceiling for k and α by ``checks.above_ceiling``:
    a pair past it by more than the noise allows is noise, a burst of load that slowed its plain run. It is listed
    in "pairs above the ceiling" and left out of the pairs' median, min and max (the fastest TPOTs keep every
    run)."""
    from specnotes import measure
    from specnotes.analytic import cost
    from specnotes.measure import checks
    from specnotes.tiny import model

    notes = results.notes
    k = notes["k"]
    roof = measure.MeasuredRoof(notes["roofs"]["bandwidth"], notes["roofs"]["flops"], dtype="fp32")
    accel = roof.as_accelerator(name="the recording CPU (measured roofs)")
    if notes["kind"] == "shipped":
        card = model.model_card()
        target, draft = (shape_of(model.ModelConfig(**card[w]["config"])) for w in ("target", "draft"))
        alpha = notes["specnotes_acceptance"]["alpha"]
    else:
        c = notes["big_config"]
        target = draft = shape_of(model.ModelConfig(c["n_layers"], c["d_model"], c["n_heads"], c["d_ff"]))
        alpha = 1.0
    en = cost.expected_tokens(alpha, k)
    per_step = tokens_per_step(results) or en
    context = mean_context(results)
    t = lambda shape, b, n: cost.pass_time(shape, accel, b, n, context, dtype="fp32")
    rows = []
    for row in pair_table(results):
        b = row["concurrency"]
        step = k * t(draft, b, 1) + t(draft, b, k + 1) + t(target, b, k + 1)
        out = {"concurrency": b, "k": k, "S measured": row["S fastest"], "S median of pairs": row["S"],
               "S min": row["S min"], "S max": row["S max"], "S each": row["S each"],
               "S (client tokens/s)": row["S (client tokens/s)"],
               "S roofline": en * t(target, b, 1) / step,
               "S overhead-bound": per_step / (k + 2), "tokens per step": per_step}
        # every pair's S against what k drafts at this α can give (measure.checks.ceiling): one past it by more than
        # the noise allows is left out of the pairs' median, min and max
        steps = k + 1 if notes["kind"] == "big" else 0  # the big pair drafts with itself, and re-scores the batch
        noise = [x for x in row["S each"] if checks.above_ceiling(x, alpha, k, steps)]
        kept = [x for x in row["S each"] if x not in noise]
        if noise or notes["kind"] == "big":
            out["pairs above the ceiling"] = noise
        if notes["kind"] == "big":
            out |= {"verify/decode measured": ((k + 1) / row["S fastest"] - k) / 2,
                    "verify/decode roofline": t(target, b, k + 1) / t(target, b, 1),
                    "S ceiling (α = 1)": checks.ceiling(alpha, k, steps)}
            out["pairs above the ceiling"] = out.pop("pairs above the ceiling")  # the last column, as before
        if noise and kept:
            out |= {"S median of pairs": statistics.median(kept), "S min": kept[0], "S max": kept[-1]}
        rows.append(out)
    return rows


def mean_context(results) -> int:
    """The context a measured step attends over, on average, as the record's params say: the prompt
    (``prompt_chars``, one token per byte; the longest, for a prompts file) and half the ``max_tokens`` new tokens."""
    from specnotes.serve import engine_client

    return max(r.params["prompt_chars"] + r.params["max_tokens"] // 2
               for r in results.sections[engine_client.SPEEDUP])


def shape_of(config):
    """A specnotes ``ModelConfig`` as the cost model's shape, float32 weights and KV (as served here)."""
    from specnotes.analytic import cost

    return cost.ModelShape(config.n_layers, config.d_model, config.n_heads, config.n_heads, config.d_ff,
                           config.vocab_size, weight_bytes=4, kv_bytes=4, compute="fp32")


def pair_table(results) -> list[dict]:
    """One row per concurrency of ``measure_pairs``' document. S(B) from the engine's own per-request TPOT (off
    over on, medians) in each pair, their median, min, max and spread (max / min); "S fastest", the fastest
    pair's TPOT off over the fastest pair's TPOT on (load from other programs only ever slows a run, so the
    fastest of each is the best estimate of what the engine does alone, as the book keeps the fastest sample
    of its roofs); S from the client's output tokens per second, and from the client's TPOT; how far the
    client's TPOT was from the engine's (the cross-check); the engine's acceptance; those fastest TPOTs."""
    from specnotes.serve import engine_client

    by: dict[int, list] = {}
    for r in results.sections[engine_client.SPEEDUP]:
        by.setdefault(r.params["concurrency"], []).append(r)
    rows = []
    for c, records in sorted(by.items()):
        s = sorted(r.extra.get("speedup_engine_tpot", r.extra["speedup"]) for r in records)
        acc = [r.extra["engine_acceptance_on"] for r in records if r.extra.get("engine_acceptance_on") is not None]
        cross = [r.extra[key] for r in records for key in ("tpot_client_over_engine_off", "tpot_client_over_engine_on")
                 if key in r.extra]
        rows.append({"concurrency": c, "pairs": len(s), "S each": s, "S": statistics.median(s), "S min": s[0],
                     "S max": s[-1], "spread max/min": s[-1] / s[0],
                     "S (client tokens/s)": statistics.median([r.extra["speedup_tokens_per_s"] for r in records]),
                     "S (client TPOT)": statistics.median([r.extra["speedup"] for r in records]),
                     "client/engine TPOT": (min(cross), max(cross)) if cross else None,
                     "engine acceptance": sum(acc) / len(acc) if acc else None,
                     "TPOT off ms": 1e3 * min(r.extra.get("engine_tpot_median_s_off", r.extra["tpot_off_median_s"])
                                              for r in records),
                     "TPOT on ms": 1e3 * min(r.extra.get("engine_tpot_median_s_on", r.extra["tpot_on_median_s"])
                                             for r in records)})
        rows[-1]["S fastest"] = rows[-1]["TPOT off ms"] / rows[-1]["TPOT on ms"]
    return rows


def tokens_per_step(results) -> float | None:
    """The engine's tokens per speculative step, 1 + accepted / verify steps, from its own counters over every run
    with speculation on (one value pooled over every level and pair); None where the record has no such counters."""
    on = [r for r in results.notes.get("engine_runs", []) if r.get("speculation") == "on" and r.get("verify_steps")]
    if not on:
        return None
    return 1 + sum(r["draft_accepted"] for r in on) / sum(r["verify_steps"] for r in on)


def draft_pass_cost(results) -> list[dict]:
    """What a draft pass cost the engine, inferred from a shipped-pair record, at each concurrency: the engine's
    tokens per step (1 + accepted / verify steps, its own counters, which count whole runs: one value pooled over
    every level and pair), its step time (fastest TPOT on × tokens
    per step), and, taking the verify pass at one plain pass's time (fastest TPOT off: the roofline's verify /
    decode ratio for this pair is about 1), the time of each of the step's k + 1 draft passes,
    T_draft ≈ (T_step − T_off) / (k + 1), and c = T_draft / T_off beside the roofline's c for the same passes."""
    from specnotes import measure
    from specnotes.analytic import cost
    from specnotes.tiny import model

    notes = results.notes
    k = notes["k"]
    roof = measure.MeasuredRoof(notes["roofs"]["bandwidth"], notes["roofs"]["flops"], dtype="fp32")
    accel = roof.as_accelerator()
    card = model.model_card()
    target, draft = (shape_of(model.ModelConfig(**card[w]["config"])) for w in ("target", "draft"))
    context = mean_context(results)
    per_step = tokens_per_step(results)
    rows = []
    for row in pair_table(results):
        b = row["concurrency"]
        t_off, t_on = row["TPOT off ms"] / 1e3, row["TPOT on ms"] / 1e3
        step = t_on * per_step
        t_draft = (step - t_off) / (k + 1)
        roof_t = cost.pass_time(target, accel, b, 1, context, dtype="fp32")
        roof_d = cost.pass_time(draft, accel, b, 1, context, dtype="fp32")
        rows.append({"concurrency": b, "tokens per step": per_step, "step ms": 1e3 * step, "TPOT off ms": 1e3 * t_off,
                     "draft pass ms (inferred)": 1e3 * t_draft, "c (inferred)": t_draft / t_off,
                     "target pass ms (roofline)": 1e3 * roof_t, "draft pass ms (roofline)": 1e3 * roof_d,
                     "c (roofline)": roof_d / roof_t})
    return rows
