"""``python -m specnotes.advise``: does speculative decoding pay for my deployment?

    python -m specnotes.advise --target Llama-3.1-8B --drafter eagle3 --gpu H100-SXM --engine vllm \\
        --engine-version 0.10.1 --batch 1-256 --context 1024 --mean-accepted 2.3@3

prints a one-page report from the book's cost model (``specnotes.analytic.cost``): S at the given batch(es) with a
band from its cross-validated error, the batch ranges where speculation pays, is uncertain, or loses, the best k
per batch (``cost.best_k``), the memory limit (``cost.max_batch``), which roof each pass's kernels sit
under, what the calibration extrapolates past, a recommendation in plain words, and the book's "how to
quote a speedup" checklist filled in. The same report is a page of the book (``book/advisor.ipynb``):
``advise`` computes it, ``render`` writes it (Markdown that reads as plain text in a terminal), ``plot``
draws S(B); the CLI and the page call the same three.

Models: ``--target``/``--draft`` take a preset (``cost.PRESETS``: Llama-3(.1)-8B/70B, Llama-3.2-1B,
Qwen3-8B/32B/0.6B/1.7B; the shipped pair as llama-server runs it, specnotes-target and specnotes-draft; and the
mixtures of experts ``cost.MOE_PRESETS``: Mixtral-8x7B, Qwen3-30B-A3B, Qwen3-235B-A22B, gpt-oss-20b/120b,
DeepSeek-V3, Llama-4-Scout, Qwen2-57B-A14B) or the path of a Hugging Face ``config.json`` (read offline by
``moe.read_config``, every field checked; it is named by its ``_name_or_path`` or ``model_type``, and one identical
to a preset is that preset). Names match without regard to case or punctuation; a Hugging Face id
(``Qwen/Qwen3-30B-A3B``), a final -Instruct, -Chat or -Base, and a unique prefix are read as the preset and the
report's first warnings say so ("--target Qwen3-30B read as Qwen3-30B-A3B"); an unknown name gets the nearest
suggested (so do ``--gpu``, ``--drafter`` and ``--dtype``). ``--weight-bits`` counts a block format's scales
(MXFP4: 4.25);
``--target-shape``/``--draft-shape`` take ``n_layers,d_model,n_heads,n_kv_heads,d_ff,vocab``. The drafter
kind (``--drafter``) maps to a drafter of the cost model:

- ``model``: a separate draft model, ``--draft``: a ``ModelShape``, k sequential one-token passes.
- ``early-exit``: the target's first ``--exit-layer`` layers and its LM head: ``cost.EarlyExit``.
- ``ngram``: prompt lookup, no weights: ``cost.NGRAM``; it costs only the draft overhead per lookup.
- ``eagle``: an EAGLE(-1) head, ``cost.eagle_head``: an fc from 2·d_model and one decoder layer of the
  target's width, drafting with the target's full LM head.
- ``eagle3``: an EAGLE-3 head, ``cost.eagle3_head``: an fc from the three fused target features, one decoder
  layer whose QKV reads [embedding; feature], and its own LM head over ``--draft-vocab`` tokens (32,000 for
  the published heads).
- ``mtp``: the target's multi-token-prediction module, ``cost.mtp_head``: one more layer of the target's own
  kind (MoE and MLA for DeepSeek-V3), an fc from 2·d_model, the target's LM head; one pass at k = 1.

A head's first draft pass runs over the k + 1 tokens the verify pass scored, as vLLM and SGLang run it.
``--tree W1,W2,...`` drafts a tree instead of a chain: level i runs Wi tokens per sequence (the first
usually 1), and one verify pass scores ``--verified`` tree tokens (default: the sum of the widths); a tree
has no i.i.d. α, so it takes ``--mean-accepted M`` (tokens per iteration, bonus included) and no ``--k``.

GPU: ``--gpu`` (a row of ``hardware.ACCELERATORS``), or ``--bandwidth GB/s --peak TFLOP/s [--memory GB]
[--link GB/s]`` for one that is not in the table (these also override a row's values). Acceptance:
``--alpha``, a range ``--alpha LO-HI`` (S at the middle, the band spans both ends), or ``--mean-accepted M``
(tokens per iteration including the bonus token, as Spec-Bench reports it) measured at ``--k K``, or ``M@K``,
which also sets k = K unless ``--k`` says otherwise; converted by ``cost.implied_alpha``. Without ``--k`` a
chain drafts k = 4 and the report says so; ``--mean-accepted`` without the k it was measured at is refused.
``--context`` is required (a llama-server record gives it): the KV reads it sets can change the answer.

The engine: a calibration is the cost model's engine knobs (a time per decoder layer of every pass, per
draft pass, ...) fitted to the published record for one engine (name and version) on one GPU and
cross-validated (``specnotes.record.calibrate``, Chapter 6). ``--calibration auto`` (the default) takes the
calibration of ``--engine`` (and ``--engine-version``) on the GPU; where the record has that engine only at
another version, on another GPU, or not at all, it says so and uses the nearest (the engine's other
version, its knobs from other GPUs, or the knobs pooled over every engine); without ``--engine`` it uses
the pooled knobs and says so. ``none`` asks for the idealized roofline, ``pooled`` for the pooled knobs, a
NAME for one stored calibration of the GPU; ``list`` lists them (``--json``: as JSON). The report names
everything the request extrapolates past: batches, context, GPU, engine, drafter, target, tp and weight
dtype the calibration was not fitted on. ``--overhead-ms``, ``--draft-overhead-ms``,
``--layer-overhead-us`` and ``--overlap`` set or override knobs (then the model has no cross-validated
band).

The band: the cross-validated error of the model in use, as a function of the batch
(``calibrate.Band``, Chapter 6): leaving one source out, the held-out points of the published record that
were predicted from their published acceptance alone (as the advisor predicts from ``--alpha`` /
``--mean-accepted``); at each B, the central 90% of the errors log(predicted / measured) of the 20 such points
nearest in log B, widened to the spread between the sources' typical errors (``calibrate.BAND_BUILDS``: a
deployment the record has not seen is a new source). The report's S is the model's S, moved to the band's
edge where the band excludes it; a stored band of the first build (centred on the nearest errors' median)
still works, and then the model's own S is beside it. How often the band, built without a source, covered
that source's points is stored per batch bucket (``calibrate.band_table``) and quoted. "pays" where the whole
band lies above S = 1, "loses" where it lies below, "uncertain: measure it" where it straddles 1
(``calibrate.verdict_of``), with the commands that measure it; "*" where the request lies past what the
calibration was fitted on or past the batches the band was built from. A batch that does not fit in memory
gets no verdict, and the recommendation and the batches to measure stay within the batches asked for.
A mixture-of-experts target gets its engine's MoE calibration (``calibrate.MOE_APART``), or says it has none.

Anchored on the reader's own measurement: ``--measured B:S[,B:S...]`` (S measured on the engine, TPOT off over
on, at batch B; needs ``--k``) and ``--from-record FILE`` (a record of ``python -m specnotes.bench
serve-speedup`` or ``python -m specnotes.serve.engine measure``: its S per concurrency, the median over its pairs,
and what it says of the deployment: k, target and draft, a CPU's measured roofs, the context, the acceptance
specnotes measured; ``--record-batches`` anchors on some of its batches and shows the others held back). The
model's S(B) is scaled by the measured level (the geometric mean of measured over modelled S; without α, the α
that level implies), and its band is the anchored one (``calibrate.anchor_band``): the held-out errors of
predicting one batch of a published series from another, as a function of log2(B / the nearest measured B). A
record that disagrees with the flags (model, draft, k, GPU or roofs, dtype, context) is refused, naming both; a
measured batch that does not fit in memory, or an S above k + 1, is refused, naming where it came from. Every field
of a record is checked as it is read (``read_record``): a bad one names the file and the field.

``--json`` prints the report as JSON (schema ``specnotes.advise/3``; every quantity with a unit says it)::

    {"schema": "specnotes.advise/3",
     "argv": the command line's inputs (no --json, --plot) | null,
     "deployment": {"target": {"name", "params", "shape": [6 ints], "weight_bytes", "kv_bytes", "compute"},
                    "draft": {"kind": "model"|"early-exit"|"ngram"|"eagle"|"eagle3", "name", "maps_to",
                              "params"},
                    "gpu": {"name", "bandwidth_GB_per_s", "peak_TFLOP_per_s", "memory_GB", "ridge_FLOP_per_byte",
                            "source"},
                    "dtype", "math_dtype", "weight_bits", "tp", "batch": [lo, hi], "context_tokens",
                    "draft_context_tokens", "alpha", "alpha_from", "k": int | "best", "k_from",
                    "tree": [widths] | null, "verified": int | null, "expected_tokens" (at k, or null),
                    "accept_by_position": [P(N ≥ i + 1) per draft position] | null (Chapter 11),
                    "engine", "engine_version", "calibration": name | null, "calibration_about": what it was
                    fitted to | null, "calibration_note": which model the report uses, and why,
                    "engine_knobs": {"overlap", "overhead_ms", "draft_overhead_ms", "layer_overhead_us",
                                     "allreduce_latency_us", "expert_slowdown"},
                    "band": {"variant", "regime", "nominal", "points", "errors", "sources", "batches": [lo, hi],
                             "held_out": [{"bucket", "points", "covered", "coverage", "decisive", ...}]} | null,
                    "anchor": {"source", "measured": [[B, S], ...], "held_back": [[B, S], ...], "level",
                               "model_at_measured": [S, ...], "quartiles": {B: [q1, q3]}} | null,
                    "extrapolations": [str, ...],
                    "fitted_batch_max": the largest batch the calibration was fitted on | null,
                    "provenance": a note on where the calibration's data come from ("" if none)},
     "max_batch": int | null,          # cost.max_batch; null: the GPU has no memory size
     "limit": int,                     # the largest batch considered: max_batch, or 65536
     "weights_per_gpu_GB": float,      # target + draft weights on each GPU (> memory: nothing fits)
     "rows": [{"batch", "fits", "k", "speedup" (the band's centre: the model's S, moved into the band where the
               band excludes it), "model_speedup" (the model's own),
               "band": [lo, hi] | null, "verdict": "pays"|"uncertain"|"loses" | null,
               "verdict_from": "band" | "measured" (at a batch the reader measured, the measurement decides) | null,
               "extrapolated",
               "best_k" (0: leave it off), "best_speedup",
               "idealized_speedup", "fixed_cost_speedup" (S if every pass cost only the engine's fixed costs; null
               without a calibration), "c", "plain_ms", "iteration_ms", "plain_tokens_per_s", "spec_tokens_per_s",
               "roofs": {"decode"|"verify"|"draft": {"matmul"|"experts"|"attention"|"heads"|"lm head":
                         "memory"|"compute"}},
               "split": {"batch", "k", "seconds": {"decode"|"draft"|"verify": {term: s}}, "bounds": {pass:
                         {kernel: "memory"|"compute"}}, "ratio", "relative": {term: s in an iteration / T_decode}}
                        (cost.breakdown: the time split by term),
               "measured": S measured here | null, "measured_role": "anchor"|"held back" | null}],
     "paying_batches": [[first, last], ...],   # the model's S > 1 (for "best": the union over k = 1..16)
     "verdict_batches": {"pays": [[first, last], ...], "uncertain": [...], "loses": [...]} | null,
     "verdict_extrapolated": bool,     # the request lies past the calibration's fit: the verdicts extrapolate
     "best_k_paying_batches": [[first, last], ...],  # the same for "best" k (the union over k = 1..16)
     "idealized_paying_batches": [[first, last], ...],  # the same without the calibration
     "crossover_batch": int | null,    # first B past the model's last paying range; null: pays up to the limit
     "curve": [[B, S, low, centre, high], ...],  # the model's S(B) up to the memory limit and the band's factors
                                       # (through every row's batch)
     "curve_band": [[B, low, high], ...] | null,  # the band in S along the curve, as the rows have it: an α range's
                                       # ends times the band's low and high factors (what --plot shades)
     "warnings": [str, ...],           # a calibration applied past its fit; no batch asked for fits
     "verdict_line": str, "band_line": str,  # the report's first words: the verdicts, then S and its band
     "recommendation": str,
     "measure": {"batches": [B, ...], "commands": [str, ...]},  # where the band is uncertain: how to measure it
     "checklist": [[item, value], ...], "quote": str}

``--calibration list --json`` prints ``{"schema": "specnotes.advise/2/calibrations", "calibrations":
[{"gpu", "name", "engine", "version", "fitted_to", "knobs"}, ...]}``.

``--plot FILE.png`` draws S(B) with the paying range shaded (``specnotes.pages.plots``); the file's folder must
exist and its suffix be a format matplotlib writes (checked before anything is computed). ``--tp``
must split every model on the GPUs evenly (``tp_choices``: it divides the query heads, and divides
the KV heads or is a multiple of them). Bad input is an argparse error naming the flag and its allowed
values (exit status 2). Imports no torch.

The package, one module per job (each imports those it needs by name, never this face):

- ``base``         the constants, ``Deployment`` and ``Anchor``: the bottom;
- ``inputs``       each input checked on its own: model shapes, names, batches, k, α, a tree, the GPU, the drafter, tp;
- ``calibration``  which calibration a report uses and what the request extrapolates past;
- ``model``        the cost model evaluated for a Deployment: S, the best k, memory, verdicts, one row per batch;
- ``build``        ``deployment``: every input checked once, anchored on a measurement where one is given;
- ``report``       ``advise``: the report as a dict;
- ``words``        the report's sentences; ``markdown``: ``render`` and ``wrap``; ``figure``: ``plot``;
- ``records``      ``--from-record``: a record of the reader's measurement, read and merged with the flags;
- ``cli``          the parser, ``run`` and ``main``; ``page``: ``form``, the page's ipywidgets.

The names imported below are this package's face (``advise.run``, ``advise.render``; the private ``_clip``,
``_ranges_text`` and ``_model_column`` only because the tests use them).
"""

import sys

from specnotes.advise.base import (
    DRAFTERS,
    ENGINES,
    K_DEFAULT,
    K_MAX,
    NO_MEMORY_LIMIT,
    OVERLAPS,
    SCHEMA,
    Anchor,
    Deployment,
)
from specnotes.advise.build import anchored, deployment
from specnotes.advise.calibration import (
    PUBLISHED_DRAFTERS,
    Request,
    Resolved,
    calibrate_name_matches,
    extrapolations,
    gpu_doubt_text,
    request_of,
    resolve_calibration,
    stored_band,
)
from specnotes.advise.cli import (
    FLAGS,
    POSITIVE,
    TOKENS,
    calibration_listing,
    deployment_kwargs,
    flag_message,
    from_args,
    main,
    parser,
    plot_path,
    run,
)
from specnotes.advise.figure import plot
from specnotes.advise.inputs import (
    MAX_BATCH,
    MAX_CONTEXT,
    MEASURE_ALPHA,
    MEASURE_ALPHA_SHORT,
    alpha_range,
    alpha_value,
    batch_range,
    drafter,
    gpu,
    k_value,
    match_name,
    measured_points,
    model_shape,
    number_range,
    preset_of,
    resolve,
    shape_from_text,
    tp_check,
    tp_choices,
    tree_value,
)
from specnotes.advise.markdown import _model_column as _model_column
from specnotes.advise.markdown import detail_table, key_table, memory_text, render, s_note, wrap
from specnotes.advise.model import (
    anchor_distance,
    band_batches,
    band_of,
    best_k,
    best_speedup,
    draft_kernels,
    end_speedups,
    extrapolated,
    factors,
    k_on,
    kernel_roofs,
    measured_at,
    memory_limit,
    paying,
    roofs,
    row,
    speedup,
    verdict_batches,
    weights_per_gpu,
)
from specnotes.advise.page import form, form_argv
from specnotes.advise.records import llama_server_record, read_record, record_inputs
from specnotes.advise.report import (
    advise,
    anchor_json,
    anchor_warnings,
    band_json,
    curve_band,
    curve_batches,
    describe,
    engine_knobs,
    report_batches,
)
from specnotes.advise.words import _clip as _clip
from specnotes.advise.words import _ranges_text as _ranges_text
from specnotes.advise.words import (
    above_idealized,
    anchor_gaps,
    anchor_text,
    asked,
    band_line,
    band_text,
    checklist,
    follow_up,
    held_back,
    held_back_text,
    measure_batches,
    measure_commands,
    measured_batches,
    quote,
    recommendation,
    shell_lines,
    side,
    verdict_line,
    where_it_pays,
)
from specnotes.analytic.moe import read_config as shape_from_config  # a config.json path → its shape

__all__ = [
    "SCHEMA", "DRAFTERS", "K_MAX", "K_DEFAULT", "NO_MEMORY_LIMIT", "OVERLAPS", "ENGINES", "Deployment", "Anchor",
    "shape_from_text", "shape_from_config", "match_name", "resolve", "preset_of", "number_range", "model_shape",
    "MAX_BATCH", "MAX_CONTEXT", "batch_range",
    "k_value", "alpha_value", "MEASURE_ALPHA", "MEASURE_ALPHA_SHORT", "alpha_range", "tree_value", "gpu", "drafter",
    "tp_choices", "tp_check", "measured_points", "PUBLISHED_DRAFTERS", "Request", "request_of", "extrapolations",
    "Resolved", "resolve_calibration", "stored_band", "gpu_doubt_text", "calibrate_name_matches", "anchor_distance",
    "speedup", "best_k", "k_on", "memory_limit", "weights_per_gpu", "paying", "band_of", "factors", "end_speedups",
    "best_speedup", "measured_at", "verdict_batches", "band_batches", "extrapolated", "kernel_roofs", "draft_kernels",
    "roofs", "row", "anchored", "deployment", "report_batches", "curve_batches", "curve_band", "advise",
    "anchor_warnings", "engine_knobs", "band_json", "anchor_json", "describe", "where_it_pays", "verdict_line",
    "band_line", "measure_batches", "measure_commands", "measured_batches", "follow_up", "side", "anchor_gaps",
    "above_idealized", "shell_lines", "band_text", "held_back", "held_back_text", "anchor_text", "recommendation",
    "asked", "checklist", "quote", "s_note", "key_table", "detail_table", "memory_text", "render", "wrap", "plot",
    "form_argv", "form", "llama_server_record", "read_record", "record_inputs", "FLAGS", "flag_message", "POSITIVE",
    "TOKENS", "parser", "from_args", "deployment_kwargs", "run", "plot_path", "calibration_listing", "main",
]


if __name__ == "__main__":
    sys.exit(main())
