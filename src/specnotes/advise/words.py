"""The report's sentences, from its dict: the verdict and band lines, where it pays, the recommendation,
where and how to measure, what the band and the anchor are, and the quoting checklist and quote."""

from __future__ import annotations

import math

from specnotes.advise.base import K_MAX


def where_it_pays(report: dict) -> str:
    """Where the model's own S (no band) is above 1, over every batch that fits."""
    ranges, limit, crossover = report["paying_batches"], report["limit"], report["crossover_batch"]
    searched = f"1–{limit}" + ("" if report["max_batch"] is not None else ", no memory limit")
    if report["max_batch"] == 0:
        return "nowhere: not one sequence fits in memory"
    if not ranges:
        return f"S ≤ 1 at every batch ({searched})"
    if len(ranges) == 1 and ranges[0] == [1, limit]:
        return f"S > 1 at every batch that fits ({searched})"
    return f"S > 1 for B = {_ranges_text(ranges)} (of {searched})" + (
        f"; crossover B* = {crossover}" if crossover is not None else "")


def _ranges_text(ranges) -> str:
    return ", ".join(f"{a}–{b}" if a != b else f"{a}" for a, b in ranges)


def side(x: float, digits: int = 2) -> str:
    """``x`` with ``digits`` decimals, or as many more (up to 6) as it takes to print it on its own side of 1: a
    band edge of 0.9988 under "the whole band below 1" prints as 0.999, not 1.00."""
    for d in range(digits, 7):
        text = f"{x:.{d}f}"
        if x == 1 or (float(text) > 1) == (x > 1) and float(text) != 1:
            return text
    return text


def _k_text(report) -> str:
    dep = report["deployment"]
    if dep["tree"]:
        return f"the tree {dep['tree']} ({dep['verified']} tokens verified)"
    return "the best k at each batch" if dep["k"] == "best" else f"k = {dep['k']}"


def _k_short(report) -> str:
    dep = report["deployment"]
    return f"a tree, {dep['verified']} tokens verified" if dep["tree"] else "the best k" if dep["k"] == "best" else \
        f"k = {dep['k']}"


def _clip(ranges, lo: int, hi: int) -> list[list[int]]:
    """The parts of ``ranges`` inside [lo, hi]."""
    return [[max(a, lo), min(b, hi)] for a, b in ranges if b >= lo and a <= hi]


def verdict_line(report: dict) -> str:
    """The report's first words: where the band says speculation pays, is uncertain or loses, over the batches
    asked for (``calibrate.verdict_of`` at each batch); without a band, where the model alone says S > 1."""
    dep, limit = report["deployment"], report["limit"]
    lo, hi = dep["batch"]
    hi = min(hi, limit) if report["max_batch"] else hi
    v = report["verdict_batches"]
    if report["max_batch"] == 0:
        return "Does not fit in memory."
    if lo > hi:
        return f"None of the batches asked for fits in memory: at most B = {report['max_batch']}."
    if v is None:
        ranges = _clip(report["paying_batches"], lo, hi)
        said = f"S > 1 for B = {_ranges_text(ranges)}" if ranges else f"S ≤ 1 for every B from {lo} to {hi}"
        return f"No verdict: the engine knobs were set by hand, so the model is not cross-validated. It says {said}."
    parts = [f"{name} for B = {_ranges_text(_clip(v[name], lo, hi))}" + (": measure it" if name == "uncertain" else "")
             for name in ("pays", "uncertain", "loses") if _clip(v[name], lo, hi)]
    line = "; ".join(parts)
    return line[0].upper() + line[1:] + "."


def band_line(report: dict) -> str:
    """S and its band at the ends of the batches asked for: "At B = 1: S = 1.62×, band 1.45–1.71×; ..."."""
    dep = report["deployment"]
    lo, hi = dep["batch"]
    mine = [r for r in report["rows"] if lo <= r["batch"] <= hi and r["fits"]]
    ends = [r for i, r in enumerate(mine) if i in (0, len(mine) - 1)]
    said = []
    for r in ends:
        s = r["speedup"]
        k = f", k = {r['k']}" if dep["k"] == "best" else ""
        band = f", band {side(r['band'][0])}–{side(r['band'][1])}×{k}" if r["band"] else k
        said.append(f"at B = {r['batch']}: S = {s:.2f}×{band}" + ("*" if r["extrapolated"] else ""))
    if not said:
        return ""
    text = "; ".join(said)
    return text[0].upper() + text[1:] + "."


def measure_batches(report: dict) -> list[int]:
    """Where to measure: the first and the last uncertain batch among the batches asked for that fit in memory,
    and the uncertain batch nearest their middle in log B, at most three batches; none where every such batch is
    decisive. Never a batch the reader already measured (``measured_batches``)."""
    v = report["verdict_batches"]
    if not v or not v["uncertain"]:
        return []
    lo, hi = asked(report)
    ranges = _without(_clip(v["uncertain"], lo, hi), measured_batches(report))
    if not ranges:
        return []
    a, b = ranges[0][0], ranges[-1][1]
    middle = math.sqrt(a * b)  # the uncertain batch nearest to it in log B
    nearest = min((min(max(round(middle), x), y) for x, y in ranges), key=lambda n: abs(math.log(n / middle)))
    return sorted({a, nearest, b})


def measured_batches(report: dict) -> list[int]:
    """The batches the reader measured: anchored on and held back."""
    a = report["deployment"]["anchor"]
    return sorted(b for b, _ in a["measured"] + a["held_back"]) if a else []


def _without(ranges, batches) -> list[list[int]]:
    """``ranges`` with the single batches ``batches`` taken out."""
    out = [list(r) for r in ranges]
    for x in batches:
        out = [part for a, b in out for part in ([a, x - 1], [x + 1, b]) if part[0] <= part[1]] \
            if any(a <= x <= b for a, b in out) else out
    return out


def measure_commands(report: dict) -> list[str]:
    """The commands that measure S(B) on the reader's engine at ``measure_batches`` and anchor the advisor on
    them (``bench serve`` off and on, the "on" run labelled with its k, ``bench serve-speedup``, then the advisor
    on the new record, ``follow_up``). Each runs as printed (tests/advise/test_commands_run.py)."""
    batches = measure_batches(report)
    if not batches:
        return []
    c = ",".join(map(str, batches))
    k = _run_k(report)
    serve = f"python -m specnotes.bench serve --url http://HOST:PORT/v1 --model NAME --concurrency {c}"
    on = "on" if k is None else f"'on, k={k}'"  # the record then says its k, which the advisor needs
    return [f"{serve} --label off --out off.json", f"{serve} --label {on} --out on.json",
            "python -m specnotes.bench serve-speedup --off off.json --on on.json --out s.json", follow_up(report)]


def _run_k(report: dict) -> int | None:
    """The k the engine runs at for the measurement: the report's, or with "best" the one at the first batch to
    measure; None for a tree (its tokens verified are not a k)."""
    dep = report["deployment"]
    if dep["tree"]:
        return None
    if dep["k"] != "best":
        return dep["k"]
    first = measure_batches(report)[0]
    return min(report["rows"], key=lambda r: abs(math.log(r["batch"] / first)))["k"]


def follow_up(report: dict) -> str:
    """The advisor anchored on the new record s.json: the report's own command line, with ``--k best`` pinned to
    the k measured (a measurement is at one k), and the reader's earlier measurements kept: ``--measured`` stays
    as it was (its batches are never measured again, so none is named twice); an earlier record is replaced by
    s.json, its points carried over as ``--measured`` and the deployment it described pinned by flags."""
    import shlex

    if not report["argv"]:
        return "python -m specnotes.advise ... --from-record s.json"
    argv, dep = shlex.split(report["argv"]), report["deployment"]
    k = _run_k(report)
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in ("--from-record", "--record-batches"):
            skip = True
            continue
        if a == "--k" and i + 1 < len(argv) and argv[i + 1] == "best":
            out += ["--k", str(k)]
            skip = True
            continue
        out.append(a)
    if "--from-record" in argv:  # every point measured so far, the earlier record's and --measured's
        if "--measured" in out:
            at = out.index("--measured")
            del out[at:at + 2]
        points = dict(map(tuple, dep["anchor"]["measured"] + dep["anchor"]["held_back"]))
        out = _pinned(report, out) + out + ["--measured", ",".join(f"{b}:{v:.4g}" for b, v in sorted(points.items()))]
    return "python -m specnotes.advise " + shlex.join(out + ["--from-record", "s.json"])


def _pinned(report: dict, argv: list[str]) -> list[str]:
    """Flags for what an earlier record told the advisor and the command line did not: the target and draft,
    k, the context, α and a CPU's measured roofs."""
    dep, pins = report["deployment"], []
    g = dep["gpu"]
    given = set(argv)
    if "--target" not in given and "--target-shape" not in given:
        pins += ["--target", dep["target"]["name"]]
    if dep["draft"]["kind"] == "model" and "--draft" not in given and "--draft-shape" not in given:
        pins += ["--draft", dep["draft"]["name"]]
    if "--k" not in given and not dep["tree"]:
        pins += ["--k", str(_run_k(report))]
    if "--context" not in given:
        pins += ["--context", str(dep["context_tokens"])]
    if "--alpha" not in given and "--mean-accepted" not in given and dep["alpha"] is not None:
        pins += ["--alpha", f"{dep['alpha']:.4g}"]
    if "--gpu" not in given and "--bandwidth" not in given:
        from specnotes.analytic import hardware

        pins += (["--gpu", g["name"]] if g["name"] in hardware.ACCELERATORS else
                 ["--bandwidth", f"{g['bandwidth_GB_per_s']:.6g}", "--peak", f"{g['peak_TFLOP_per_s']:.6g}",
                  "--dtype", dep["math_dtype"]])
    return pins


def shell_lines(command: str, width: int = 100) -> list[str]:
    """A shell command broken at spaces with backslashes so that no line is wider than ``width``."""
    lines, line = [], ""
    for word in command.split(" "):
        if line and len(line) + 1 + len(word) > width - 2:
            lines.append(line + " \\")
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    return lines + [line]


def band_text(dep: dict) -> str:
    """How the band was built and how it did on sources it was not built from, in two short sentences."""
    about = dep["band"]
    if about is None:
        return "none: the engine knobs were set by hand, so nothing cross-validates them"
    if dep["anchor"] is not None:
        cover = "; ".join(f"{r['coverage']:.0%} of {r['pairs']} reaching {r['distance']}" for r in about["held_out"]
                          if r["pairs"] and not r["distance"].startswith("up to"))
        return (f"anchored: the central {about['nominal']:.0%} of the {about['points']} held-out errors of "
                f"predictions from another batch of the same series, nearest in log(B / measured B), of "
                f"{about['errors']} from {about['sources']} sources. Built without each source, such a band "
                f"covered {cover}")
    regime = ("points predicted from their published acceptance alone, as here" if about["regime"] ==
              "acceptance only" else f"{about['regime']} points")
    lo, hi = about["batches"]
    cover = "; ".join(f"{r['coverage']:.0%} of {r['points']} at {r['bucket']}" for r in about["held_out"]
                      if r["bucket"] not in ("B > 1", "all") and r.get("points"))
    wide = ", widened to the spread between the sources' typical errors" if about.get("between") else ""
    return (f"the central {about['nominal']:.0%} of the {about['points']} held-out errors nearest in B{wide}, of "
            f"{about['errors']} from {about['sources']} sources ({regime}; B = {lo}–{hi}). Built without each "
            f"source, such a band covered {cover}")


def held_back(report: dict) -> list[dict]:
    """For each held-back measured batch of an anchored report: the anchored S and its band, the measured S,
    and where the measurement fell: "inside" the band (its edges included), "above" or "below" it."""
    out = []
    for r in report["rows"]:
        if r["measured_role"] != "held back":
            continue
        low, high = r["band"] if r["band"] else (r["speedup"], r["speedup"])
        where = "below" if r["measured"] < low else "above" if r["measured"] > high else "inside"
        out.append({"batch": r["batch"], "predicted": r["speedup"], "band": [low, high], "measured": r["measured"],
                    "where": where})
    return out


def held_back_text(report: dict) -> str:
    """The held-back comparison in one sentence per batch: "At B = 4 the anchored advisor says 0.62× (band
    0.53–0.88×); the engine measured 0.68×, inside the band." """
    said = []
    for h in held_back(report):
        where = "inside the band" if h["where"] == "inside" else f"{h['where']} the band"
        said.append(f"At B = {h['batch']} the anchored advisor says {h['predicted']:.2f}×, band {side(h['band'][0])}–"
                    f"{side(h['band'][1])}×; the engine measured {h['measured']:.2f}×, {where}.")
    return " ".join(said)


def anchor_text(dep: dict) -> str:
    """What the model is anchored on: the measured points, the level, and the model's S there before it."""
    a = dep["anchor"]
    said = ", ".join(f"S = {v:.2f} at B = {b}" for b, v in a["measured"])
    model = ", ".join(f"{m:.2f}" for m in a["model_at_measured"])
    held = ("; held back for comparison: " + ", ".join(f"{v:.2f} at B = {b}" for b, v in a["held_back"])
            if a["held_back"] else "")
    return (f"{said} ({a['source']}). The model says {model} there: your engine runs at ×{a['level']:.2f} its "
            f"level, and every S below is scaled by that{held}")


def anchor_gaps(report: dict) -> str:
    """Why the report's S differs from what the reader measured at a batch anchored on, term by term: one level
    is fitted across several measured batches (this batch alone would need another), and the band's centre (the
    median error of the nearest held-out anchored predictions) moves S off the anchored model. Nothing where the
    two print the same."""
    a = report["deployment"]["anchor"]
    if not a:
        return ""
    model_at = dict(zip([b for b, _ in a["measured"]], a["model_at_measured"], strict=True))
    said = []
    for r in report["rows"]:
        if r["measured_role"] != "anchor" or f"{r['speedup']:.2f}" == f"{r['measured']:.2f}":
            continue
        b, m = r["batch"], r["measured"]
        own, centre = m / model_at[b], r["speedup"] / (model_at[b] * a["level"])
        why = []
        if len(a["measured"]) > 1 and f"{own:.2f}" != f"{a['level']:.2f}":
            why.append(f"one level, ×{a['level']:.2f}, is fitted across your {len(a['measured'])} measured batches, "
                       f"and B = {b} alone would need ×{own:.2f}")
        if f"{centre:.2f}" != "1.00":
            why.append(f"the band's centre, the median error of the nearest held-out anchored predictions, moves it "
                       f"×{centre:.2f}")
        if why:
            said.append(f"At B = {b} the report's S is {r['speedup']:.2f} where you measured {m:.2f}: "
                        + "; ".join(why) + ". The verdict there is your measurement's.")
    return " ".join(said)


def above_idealized(report: dict) -> str:
    """Why the calibrated S is above the idealized one at a batch asked for, where it is: the engine's fixed costs
    per pass are the same for a verify pass as for a plain step, and alone they would give a higher S
    (``fixed_cost_speedup``), so they pull S up toward it. Nothing where no batch has it."""
    lo, hi = asked(report)
    knobs = report["deployment"]["engine_knobs"]
    for r in report["rows"]:
        fixed = r.get("fixed_cost_speedup")
        if not (lo <= r["batch"] <= hi and r["fits"] and fixed) or not r["model_speedup"] > r["idealized_speedup"]:
            continue
        if f"{r['model_speedup']:.2f}" == f"{r['idealized_speedup']:.2f}" or fixed <= r["idealized_speedup"]:
            continue
        costs = ", ".join(x for x in (f"{knobs['layer_overhead_us']:.3g} µs per layer of every pass"
                                      if knobs["layer_overhead_us"] else "",
                                      f"{knobs['overhead_ms']:.3g} ms per target pass" if knobs["overhead_ms"] else "",
                                      f"{knobs['draft_overhead_ms']:.3g} ms per draft pass"
                                      if knobs["draft_overhead_ms"] else "") if x)
        anchored = " before anchoring" if report["deployment"]["anchor"] else ""
        return (f"At B = {r['batch']} the calibrated model's S{anchored}, {r['model_speedup']:.2f}, is above the "
                f"idealized {r['idealized_speedup']:.2f}: the engine's fixed costs ({costs}) cost a verify pass what "
                f"they cost a plain step, and alone they would give S = {fixed:.2f}. They pull S toward that.")
    return ""


def recommendation(report: dict) -> str:
    """What to do, in short sentences chosen by the numbers: from the band's verdicts where there is a band
    (``verdict_batches``), else from the model's S alone; then the best k, extrapolation and the idealized
    model."""
    dep, ranges, fits = report["deployment"], report["paying_batches"], report["max_batch"]
    rows = [r for r in report["rows"] if r["fits"]]
    gpu_ = dep["gpu"]
    if fits == 0 and report["weights_per_gpu_GB"] > gpu_["memory_GB"]:
        return (f"It does not fit: the weights alone ({report['weights_per_gpu_GB']:.3g} GB per GPU) exceed the "
                f"{gpu_['name']}'s memory ({gpu_['memory_GB']:.3g} GB) with tp = {dep['tp']}. "
                "Use more GPUs (`--tp`), fewer weight bits (`--weight-bits`) or a smaller model.")
    if fits == 0:
        return (f"It does not fit: the weights fit ({report['weights_per_gpu_GB']:.3g} GB of "
                f"{gpu_['memory_GB']:.3g} GB per GPU with tp = {dep['tp']}), but not one sequence's KV caches at "
                f"L = {dep['context_tokens']} beside them. Use a shorter context (`--context`), more GPUs (`--tp`), "
                "or a smaller cache (a draft KV window, `--draft-context`; a smaller `--dtype`).")
    v = report["verdict_batches"]
    lo, hi = asked(report)  # every sentence speaks of the batches asked for that fit in memory
    if lo > hi:
        return f"None of the batches asked for fits in memory: at most B = {fits}. Ask about B = 1–{fits}."
    ranges = _clip(ranges, lo, hi)
    said = []
    if v is not None:
        on, off, unsure = (_clip(v[name], lo, hi) for name in ("pays", "loses", "uncertain"))
        if on:
            said.append(f"Turn it on for B = {_ranges_text(on)}, where the whole band is above 1.")
        if off:
            said.append(f"Leave it off for B = {_ranges_text(off)}, where the whole band is below 1.")
        if unsure:
            said.append(f"For B = {_ranges_text(unsure)} the band straddles 1: measure S there "
                        "(commands below) and anchor the advisor on it.")
    elif ranges:
        said.append(f"The model alone says S > 1 for B = {_ranges_text(ranges)} (of {lo}–{hi}).")
    else:
        said.append(f"The model alone says S ≤ 1 at every batch from {lo} to {hi}.")
    any_k = _clip(report["best_k_paying_batches"], lo, hi)
    if not ranges and any_k and not dep["tree"] and not dep["anchor"]:
        said.append(f"Another k does better: with the best k at each batch (`--k best`) the model has S > 1 for "
                    f"B = {_ranges_text(any_k)}.")
    elif not ranges and not dep["tree"] and dep["k"] != "best" and not dep["anchor"]:
        said.append("Raise α (a better-matched draft), or use a cheaper drafter.")
    rows = [r for r in rows if lo <= r["batch"] <= hi]
    bests = sorted({r["best_k"] for r in rows})
    if dep["k"] != "best" and not dep["tree"] and len(bests) > 1 and rows:
        last_k = f"{rows[-1]['best_k']}" + (" (off)" if rows[-1]["best_k"] == 0 else "")
        said.append(f"The best k moves from {rows[0]['best_k']} at B = {rows[0]['batch']} to {last_k} at "
                    f"B = {rows[-1]['batch']}: choose k by the batch (`--k best`).")
    fitted = dep["fitted_batch_max"]
    if fitted and hi > fitted:
        said.append(f"Past B = {fitted} this extrapolates: the calibration was fitted on batches up to {fitted}.")
    if _idealized(dep):
        said.append("This is the idealized model (no engine costs): engines run slower than it says.")
    elif dep["calibration"]:
        ideal = _clip(report["idealized_paying_batches"], lo, hi)
        said.append("The idealized roofline " + ("agrees on where S > 1." if ideal == ranges else
                    f"would have S > 1 for B = {_ranges_text(ideal)}." if ideal else
                    f"would have S ≤ 1 for every B from {lo} to {hi}."))
        said.append(above_idealized(report))
    return " ".join(x for x in said if x)


def asked(report: dict) -> tuple[int, int]:
    """The batches asked for that fit in memory: (lo, hi), with lo > hi when none fits."""
    lo, hi = report["deployment"]["batch"]
    return lo, (min(hi, report["limit"]) if report["max_batch"] else hi)


def _idealized(dep: dict) -> bool:
    k = dep["engine_knobs"]
    return not (k["overhead_ms"] or k["draft_overhead_ms"] or k["layer_overhead_us"] or dep["calibration"])


def checklist(report: dict) -> list[list[str]]:
    """The rows of book/quoting.md's checklist, filled in for this report."""
    dep, rows = report["deployment"], report["rows"]
    first = rows[0]
    knobs = dep["engine_knobs"]
    gpu_ = dep["gpu"]
    k = dep["k"]
    en = dep["expected_tokens"]
    weights = f"{dep['weight_bits']}-bit weights, " if dep["weight_bits"] else ""
    k_text = (f"a tree {dep['tree']}, {dep['verified']} tokens verified" if dep["tree"] else f"{k}"
              + ("" if dep["k_from"] == "given" else f" ({dep['k_from']})"))
    return [
        ["Drafted tokens k", k_text + (f", E[N] = {en:.2f} tokens per iteration" if en else
                                       f", searched 1–{K_MAX} per batch")],
        ["Acceptance α, and how it was measured", (f"{dep['alpha']:.3f}, " if dep["alpha"] is not None else "")
         + f"{dep['alpha_from']}" + ("" if dep["tree"] else "; i.i.d. acceptance")],
        ["Batch B", f"{dep['batch'][0]}–{dep['batch'][1]}" if dep["batch"][0] != dep["batch"][1] else
         f"{dep['batch'][0]}"],
        ["Context L", f"{dep['context_tokens']} tokens" + (f" (draft KV window {dep['draft_context_tokens']})"
                                                   if dep["draft_context_tokens"] is not None else "")],
        ["The draft, and c", f"{dep['draft']['name']}; c = {first['c']:.3f} at B = {first['batch']}, modelled"],
        ["Device", f"{gpu_['name']} × {dep['tp']}: {gpu_['peak_TFLOP_per_s']:.0f} TFLOP/s {dep['math_dtype']}, "
                   f"{gpu_['bandwidth_GB_per_s'] / 1e3:.2f} TB/s, ridge {gpu_['ridge_FLOP_per_byte']:.0f} FLOP/byte"],
        ["Dtype", f"{weights}{dep['math_dtype']} math, KV cache in {dep['math_dtype']}"
                  + (f" ({dep['dtype']} asked; this GPU has no {dep['dtype']} peak)"
                     if dep["dtype"] != dep["math_dtype"] else "")],
        ["Temperature", "not modelled: it enters through α, so measure α at the temperature you serve"],
        ["What was timed", "nothing: a modelled TPOT ratio at a fixed batch, equal to its throughput ratio; no "
                           "prefill"],
        ["Baseline", "the same deployment decoding without speculation, modelled"],
        ["Engine (overheads, CUDA graphs)", (f"{dep['calibration']}: " if dep["calibration"] else "")
         + f"{knobs['layer_overhead_us']:.3g} µs per layer of every pass, {knobs['overhead_ms']:.3g} ms per target "
           f"pass, {knobs['draft_overhead_ms']:.3g} ms per draft pass, overlap {knobs['overlap']!r}"
         + (" (idealized roofline)" if _idealized(dep) else "")],
        ["Error", "the band (**Band** above: held-out errors, leaving one source out, Chapter 6)" if dep["band"]
         else "not cross-validated: engine knobs set by hand"],
    ]


def quote(report: dict) -> str:
    """The checklist in one sentence, at the first batch of the report."""
    dep, r = report["deployment"], report["rows"][0]
    model = "the calibrated" if dep["calibration"] else "the idealized" if _idealized(dep) else "the"
    drafting = (f"a tree {dep['tree']} at {dep['expected_tokens']:.2f} tokens per iteration" if dep["tree"]
                else f"k = {r['k']} tokens at α = {dep['alpha']:.2f}")
    band = f", within a band of {side(r['band'][0])}–{side(r['band'][1])}×," if r["band"] else ""
    return (f"With {dep['draft']['name']} drafting {drafting}, "
            f"{dep['target']['name']} on {dep['tp']} × {dep['gpu']['name']} in {dep['math_dtype']} "
            f"at B = {r['batch']}, L = {dep['context_tokens']} is predicted by {model} roofline model to generate "
            f"{r['speedup']:.2f}×{band} as many tokens per second as without speculation. Temperature is not "
            "modelled.")
