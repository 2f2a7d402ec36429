"""The report as Markdown that reads as plain text: its two tables (``key_table``, ``detail_table``),
``render``, and ``wrap`` for a terminal."""

from __future__ import annotations

from specnotes.advise.words import _k_short, anchor_gaps, anchor_text, band_text, shell_lines, side, where_it_pays


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table whose columns line up in a terminal too."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows])


def _k_cell(k: int) -> str:
    return f"{k}" if k else "0 (off)"


def _roof_text(roofs: dict) -> str:
    return "/".join("M" if v == "memory" else "C" for v in roofs.values()) or "—"


def s_note(report: dict) -> str:
    """What the key table's S, band and model columns are, as the band was built (``calibrate.BAND_BUILDS``)."""
    dep = report["deployment"]
    about, k = dep["band"], _k_short(report)
    if dep["anchor"]:
        return (f"S ({k}): the model's S anchored on your measurement, times the median error of the nearest "
                f"held-out anchored predictions; band: where the measured S lay for {about['nominal']:.0%} of the "
                "nearest held-out predictions")
    if about.get("centre") == "model":
        said = f"S ({k}): the model's S, moved to the band's edge where the band excludes it"
    else:
        said = f"S ({k}): the central estimate, the model's S times the median error of the nearest held-out points"
    said += f"; band: where the measured S lay for {about['nominal']:.0%} of the nearest held-out points"
    said += ", widened to the spread between sources" if about.get("between") else ""
    return said + ("; model: the model's S alone" if _model_column(report) else "")


def _model_column(report: dict) -> bool:
    """Whether the key table shows the model's own S beside S: only where the two differ somewhere."""
    dep = report["deployment"]
    return bool(dep["band"]) and not dep["anchor"] and any(
        f"{r['speedup']:.2f}" != f"{r['model_speedup']:.2f}" for r in report["rows"])


def key_table(report: dict) -> str:
    """The batches, key columns first (fits a 100-column terminal and a phone): B, the verdict, S (the central
    estimate) and its band, and the model's own S."""
    dep = report["deployment"]
    best = dep["k"] == "best"
    s_name = "S"
    columns = [("B", lambda r: f"{r['batch']}" + ("" if r["fits"] else " (no memory)"))]
    if dep["band"]:  # a batch that does not fit in memory gets no verdict
        columns += [("verdict", lambda r: (r["verdict"] + ("*" if r["extrapolated"] else "")) if r["fits"] else "—"),
                    (s_name, lambda r: f"{r['speedup']:.2f}"),
                    ("band", lambda r: f"{side(r['band'][0])}–{side(r['band'][1])}")]
        if _model_column(report):  # anchored, the measured column takes its place (the model's S is in the text)
            columns.append(("model", lambda r: f"{r['model_speedup']:.2f}"))
    else:
        columns += [("S, model", lambda r: f"{r['speedup']:.2f}")]
    if best:
        columns.insert(2 if dep["band"] else 1, ("k", lambda r: f"{r['k']}"))
    if dep["anchor"]:
        columns.append(("measured", lambda r: "" if r["measured"] is None else
                        f"{r['measured']:.2f}" + (" (a)" if r["measured_role"] == "anchor" else " (h)")))
    return _table([name for name, _ in columns], [[cell(r) for _, cell in columns] for r in report["rows"]])


def detail_table(report: dict) -> str:
    """The model's terms per batch: the best k and its S, the idealized S, tokens per second off and on, the
    roofs of the decode, verify and draft passes."""
    dep = report["deployment"]
    columns = [("B", lambda r: r["batch"])]
    if not dep["tree"]:
        columns += [("best k", lambda r: _k_cell(r["best_k"])), ("S (best k)", lambda r: f"{r['best_speedup']:.2f}")]
    if dep["calibration"]:
        columns += [("S idealized", lambda r: f"{r['idealized_speedup']:.2f}")]
    columns += [("tokens/s off → on", lambda r: f"{r['plain_tokens_per_s']:,.0f} → {r['spec_tokens_per_s']:,.0f}"),
                ("roofs d · v · dr", lambda r: " · ".join(_roof_text(r["roofs"][name])
                                                          for name in ("decode", "verify", "draft")))]
    return _table([name for name, _ in columns], [[cell(r) for _, cell in columns] for r in report["rows"]])


def _params(n: float) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M"


def memory_text(report: dict) -> str:
    dep, g = report["deployment"], report["deployment"]["gpu"]
    fits = report["max_batch"]
    weights = f"{report['weights_per_gpu_GB']:.3g} GB"
    if fits is None:
        return "the GPU has no memory size: batches are not limited"
    if report["weights_per_gpu_GB"] > g["memory_GB"]:
        return f"the weights alone ({weights} per GPU) exceed its {g['memory_GB']:.3g} GB"
    if fits == 0:
        return (f"the weights fit ({weights} of {g['memory_GB']:.3g} GB per GPU), but not one sequence's KV caches "
                f"at L = {dep['context_tokens']} beside them")
    return (f"at most B = {fits} sequences fit: weights and both KV caches at L = {dep['context_tokens']}, "
            f"{g['memory_GB']:.3g} GB per GPU, tp = {dep['tp']}")


def render(report: dict) -> str:
    """The report as Markdown that reads as plain text (the CLI wraps it at 100 columns, ``wrap``): the verdict
    and the band first, then what to do, where to measure, the table of batches, the deployment, the model's
    terms per batch, the quoting checklist, and notes on where the numbers come from."""
    dep = report["deployment"]
    t, d, g = dep["target"], dep["draft"], dep["gpu"]
    acceptance = (f"**tokens per iteration** = {dep['expected_tokens']:.2f} ({dep['alpha_from']}); **tree**: "
                  f"{dep['tree']}, {dep['verified']} verified" if dep["tree"] else
                  f"**α** = {dep['alpha']:.3f}, {dep['alpha_from']}; **k**: {dep['k']}"
                  + ("" if dep["k_from"] == "given" else f" ({dep['k_from']})"))
    commands = report["measure"]["commands"]
    lines = [
        f"**Does speculation pay? {t['name']} with {d['name']} on {g['name']}**",
        "",
        f"**{report['verdict_line']}** {report['band_line']}".rstrip(),
        "",
        f"**Recommendation.** {report['recommendation']}",
        "",
        *[f"**Warning.** {w}\n" for w in report["warnings"]],
        *(["**Measure it** at B = " + ", ".join(map(str, report["measure"]["batches"])) + ": your engine's address "
           "and model name for HOST:PORT and NAME, off, then on, then S(B), then the advisor anchored on it.", "",
           "```bash", *[x for c in commands for x in shell_lines(c)], "```", ""] if commands else []),
        key_table(report),
        "",
        (s_note(report) + ". * extrapolated past the fit."
         + (" Measured: (a) anchored on, (h) held back for comparison. At a measured batch the verdict is the "
            "measurement's." if dep["anchor"] else "")
         if dep["band"] else
         f"S, model ({_k_short(report)}): the model's S. No band: the engine knobs were set by hand.")
        + (" (no memory): the batch does not fit in memory." if any(not r["fits"] for r in report["rows"]) else "")
        + " S = 1: as fast as plain decoding.",
        "",
        f"- **Target**: {t['name']}, {_params(t['params'])} matmul parameters; **draft**: {d['name']}, "
        f"priced as {d['maps_to']}",
        f"- **GPU**: {g['name']} × {dep['tp']}, {dep['math_dtype']}, ridge {g['ridge_FLOP_per_byte']:.0f} FLOP/byte; "
        f"**L** = {dep['context_tokens']}; {acceptance}",
        f"- **Model**: {dep['calibration_note']}.",
        f"- **Band**: {band_text(dep)}.",
        *([f"- **Anchored on**: {anchor_text(dep)}." + (f" {gaps}" if (gaps := anchor_gaps(report)) else "")]
          if dep["anchor"] else []),
        *([f"- **Extrapolates past its fit**: {'; '.join(dep['extrapolations'])}."] if dep["extrapolations"] else []),
        f"- **The model alone**: {where_it_pays(report)}.",
        f"- **Memory**: {memory_text(report)}.",
        "",
        "**The model's terms per batch.** Roofs: matmul/attention kernels of the decode, verify and draft passes "
        "(draft: its first pass; — = no weights), M = memory-bound, C = compute-bound. Tokens/s: the whole batch."
        + (" S idealized: without the engine's costs." if dep["calibration"] else ""),
        "",
        detail_table(report),
        "",
        "**How to quote this speedup**",
        "",
        *[f"- **{item}**: {value}" + ("" if value.endswith(".") else ".") for item, value in report["checklist"]],
        "",
        f"> {report['quote']}",
    ]
    if dep.get("provenance"):
        lines += ["", f"**Note.** {dep['provenance']}."]
    return "\n".join(lines)


def wrap(markdown: str, width: int = 100) -> str:
    """``render``'s Markdown for a terminal: paragraphs, list items and quotes wrapped at ``width`` columns
    (tables and code left as they are)."""
    import textwrap

    out, code = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            code = not code
        if code or line.startswith("```") or line.startswith("|") or len(line) <= width:
            out.append(line)
            continue
        first, rest = ("- ", "  ") if line.startswith("- ") else ("> ", "> ") if line.startswith("> ") else ("", "")
        body = line[len(first):]
        out += textwrap.wrap(body, width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)
    return "\n".join(out)
