"""Each input of a report checked on its own: model shapes (a preset, the shipped pair, a config.json, six
integers), names matched loosely and said so (``resolve``), batches and α ranges (``number_range``), k, a tree,
the GPU, the drafter, tp, weight bits and measured (B, S) points. A bad one is a ``validate.BadArgument`` naming
the argument."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from specnotes import validate
from specnotes.advise.base import DRAFTERS, NO_MEMORY_LIMIT
from specnotes.analytic import cost, hardware, moe
from specnotes.analytic.cost import ModelShape

SHAPE_LIMITS = (("n_layers", moe.MAX_LAYERS), ("d_model", moe.MAX_WIDTH), ("n_heads", moe.MAX_HEADS),
                ("n_kv_heads", moe.MAX_HEADS), ("d_ff", moe.MAX_WIDTH), ("vocab", moe.MAX_VOCAB))  # a config's


def shape_from_text(text: str, name: str = "") -> ModelShape:
    """``"n_layers,d_model,n_heads,n_kv_heads,d_ff,vocab"`` → a ModelShape, each within a config.json's bounds
    (``moe.MAX_LAYERS``, ...)."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 6 or not all(p.isdigit() and len(p) < 10 for p in parts):
        raise validate.BadArgument("shape must be six positive integers n_layers,d_model,n_heads,n_kv_heads,d_ff,"
                                   f"vocab; got {validate.shown(text)}")
    values = [validate.integer(f"shape's {field}", int(p), low=1, high=most)
              for p, (field, most) in zip(parts, SHAPE_LIMITS, strict=True)]
    return ModelShape(*values, name=name or f"shape {text}")


def _flat(text) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


SUFFIXES = ("instruct", "chat", "base")  # a tuned model of a base keeps the base's config.json


def resolve(arg: str, value, choices, what: str = "one of") -> tuple[str, str | None]:
    """(the choice ``value`` names, why it was read so, or None where it is the choice itself or differs only in
    case and punctuation: "h200" is "H200"). Read in turn: a Hugging Face id as its name after the last "/"
    ("Qwen/Qwen3-30B-A3B"); without a final -Instruct, -Chat or -Base ("Llama-3.1-8B-Instruct": the tuned model
    has its base's shape); a prefix of exactly one choice ("Qwen3-30B" → "Qwen3-30B-A3B"). Otherwise a
    BadArgument naming the nearest choices first ("did you mean ...?") and then all of them."""
    import difflib

    choices = list(choices)
    if value in choices:
        return value, None
    flat = {_flat(c): c for c in choices}
    text = str(value)
    if _flat(text) in flat:
        return flat[_flat(text)], None
    tail = text.rstrip("/").rsplit("/", 1)[-1]
    base = re.sub(rf"[-_ .]({'|'.join(SUFFIXES)})$", "", tail, flags=re.I)
    for form, why in ((tail, "a Hugging Face id, by its name after the /"),
                      (base, f"a -{tail[len(base) + 1:]} model has its base's shape")):
        if form != text and _flat(form) in flat:
            return flat[_flat(form)], why
    starts = [c for f, c in flat.items() if _flat(base) and f.startswith(_flat(base))]
    if len(starts) == 1:
        return starts[0], f"the one {what.removeprefix('a ')} whose name starts so"
    near = starts or [flat[f] for f in difflib.get_close_matches(_flat(base), list(flat), n=3, cutoff=0.6)]
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    raise validate.BadArgument(f"{arg} {validate.shown(text)} is not {what} the table knows: {hint}It knows "
                               f"{', '.join(choices)}")


def match_name(arg: str, value: str, choices, what: str = "one of", notes: list | None = None) -> str:
    """``value`` as one of ``choices`` (``resolve``); how a loose name was read goes to ``notes`` ("--target
    Qwen3-30B read as Qwen3-30B-A3B, the one preset whose name starts so")."""
    name, why = resolve(arg, value, choices, what)
    if why and notes is not None:
        notes.append(f"--{arg.replace('_', '-')} {value} read as {name} ({why})")
    return name


def preset_of(shape: ModelShape) -> ModelShape | None:
    """The preset ``shape`` is, field for field but its name (a config.json identical to one), preferring the one
    its name contains ("Llama-3.1-8B-Instruct" is Llama-3.1-8B's, not Llama-3-8B's, same shape)."""
    same = [p for p in {**cost.PRESETS, **_shipped_shapes()}.values() if replace(shape, name=p.name) == p]
    return next((p for p in same if _flat(p.name) in _flat(shape.name)), same[0] if same else None)


def model_shape(name: str, value, shape_text: str | None = None, notes: list | None = None) -> ModelShape:
    """A preset name (``resolve``d: its notes go to ``notes``), a config.json path (``moe.read_config``; one
    identical to a preset is that preset, and a note says so), or (``shape_text``) six integers; ``name`` is
    the argument's."""
    if shape_text is not None:
        if value is not None:
            raise validate.BadArgument(f"{name} and {name}_shape exclude each other: give one of them")
        try:
            return shape_from_text(shape_text)
        except validate.BadArgument as err:
            raise validate.BadArgument(f"{name}_shape: {err}") from None
    if isinstance(value, ModelShape):
        return value
    known = {**cost.PRESETS, **_shipped_shapes()}
    if value in known:
        return known[value]
    if value is not None and str(value).endswith(".json"):
        if not Path(value).is_file():
            raise validate.BadArgument(f"{name} must be a preset or a config.json that exists; {value!r} does not")
        try:
            shape = moe.read_config(value)
        except validate.BadArgument as err:
            raise type(err)(f"{name}: {str(err).removeprefix('config: ')}") from None
        preset = preset_of(shape)
        if preset is not None and notes is not None:
            notes.append(f"--{name} {value} ({shape.name}) has the shape of the preset {preset.name}, field for "
                         "field: read as that preset")
        return preset or shape
    if value is None:
        raise validate.BadArgument(f"{name} is required: a preset ({', '.join(known)}), the path of a Hugging Face "
                                   f"config.json, or --{name}-shape")
    try:
        return known[match_name(name, value, known, "a preset", notes)]
    except validate.BadArgument as err:
        raise validate.BadArgument(f"{err}; or give the path of a Hugging Face config.json") from None


MAX_BATCH = 1 << 16  # the largest batch a report considers (NO_MEMORY_LIMIT)


MAX_CONTEXT = 10_000_000  # tokens: past the longest context window any model publishes (10M, Llama 4 Scout)


NUMBER = r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"  # 64, 0.7, .5, 1e-3, 2.5E+2: no sign, no nan or inf
RANGE = re.compile(rf"\s*({NUMBER})\s*(?:-\s*({NUMBER})\s*)?")


def number_range(name: str, text, example: str, what: str = "a number") -> tuple[str, str]:
    """``"A"`` → (A, A), ``"A-B"`` → (A, B), the ends as written (scientific notation too: "1e-3-0.5"); a range
    whose ends run from high to low is refused as reversed. ``example``: a range the message shows."""
    m = RANGE.fullmatch(str(text))
    if not m:
        raise validate.BadArgument(f"{name} must be {what} or a range LO-HI such as {example}; got "
                                   f"{validate.shown(text)}")
    lo, hi = m.group(1), m.group(2) or m.group(1)
    if float(lo) > float(hi):
        raise validate.BadArgument(f"{name} range {text} is reversed: give it from low to high, {hi}-{lo}")
    return lo, hi


def batch_range(text) -> tuple[int, int]:
    """``"64"`` → (64, 64); ``"1-512"`` → (1, 512); at most ``MAX_BATCH``; ``"64-1"`` is reversed."""
    lo, hi = number_range("batch", text, "1-512", "a positive integer")
    if not (lo.isdigit() and hi.isdigit()) or len(lo + hi) > 1000:
        raise validate.BadArgument(f"batch must be a positive integer or a range LO-HI such as 1-512; got "
                                   f"{validate.shown(text)}")
    return tuple(validate.integer("batch", int(x), low=1, high=MAX_BATCH) for x in (lo, hi))


K_MOST = 64  # the largest k a flag or a record may give


def k_value(text) -> int | None:
    """``"best"`` → None (the best k at each batch), else an integer in 1..64."""
    if str(text).strip().lower() == "best":
        return None
    if not str(text).strip().isdigit() or len(str(text).strip()) > 6:
        raise validate.BadArgument(f"k must be an integer in [1, {K_MOST}] or 'best'; got {validate.shown(text)}")
    return validate.integer("k", int(text), low=1, high=K_MOST)


def alpha_value(alpha, mean_accepted, k: int | None, k_given: bool = True) -> tuple[float, str]:
    """(α, how it was obtained) from ``alpha``, or from ``mean_accepted`` ("M" measured at k, or "M@K").

    A mean accepted length depends on the k it was measured at: "M" needs ``k`` given (``k_given``), and
    with ``--k best`` only "M@K" says it."""
    if alpha is not None and mean_accepted is not None:
        raise validate.BadArgument("alpha or mean_accepted: give one of them, not both")
    if alpha is None and mean_accepted is None:
        raise validate.BadArgument("alpha or mean_accepted: give the acceptance rate α (--alpha 0.7), a range if you "
                                   "do not know it yet (--alpha 0.5-0.8: the report spans it), or a mean accepted "
                                   f"length at its k (--mean-accepted 2.3@3). {MEASURE_ALPHA}")
    if alpha is not None:
        lo_hi = alpha_range(alpha)
        if lo_hi[0] != lo_hi[1]:
            return sum(lo_hi) / 2, (f"a range {lo_hi[0]:g}–{lo_hi[1]:g}: S at the middle, the band spans both ends "
                                    f"({MEASURE_ALPHA_SHORT})")
        return lo_hi[0], "given"
    text, _, at = str(mean_accepted).partition("@")
    measured_k = k if not at else validate.integer("mean_accepted", int(at) if at.strip().isdigit() else at, low=1)
    if measured_k is None or not (at or k_given):
        raise validate.BadArgument("mean_accepted needs the k it was measured at: give --k K, or M@K (a mean "
                                   "accepted length of 2.3 tokens means α = 0.61 at k = 2 but 0.44 at k = 4)")
    try:
        mean = float(text)
    except ValueError:
        raise validate.BadArgumentType(f"mean_accepted must be a number M or M@K, got {mean_accepted!r}") from None
    if not 1 <= mean <= measured_k + 1:
        raise validate.BadArgument(f"mean_accepted must be in [1, {measured_k + 1}] (tokens per iteration with "
                                   f"the bonus token, at k = {measured_k}); got {mean:g}")
    alpha = cost.implied_alpha(mean, measured_k)
    return alpha, f"from a mean accepted length of {mean:g} tokens at k = {measured_k}, by the inverse of E[N]"


MEASURE_ALPHA = ("Measure α on your traffic: Chapter 3 measures a pair's, and python -m specnotes.bench serve records "
                 "the engine's acceptance where the engine reports it.")


MEASURE_ALPHA_SHORT = "measure α: Chapter 3, or the acceptance bench serve records"


def accept_by_position(text) -> tuple[float, ...]:
    """``"0.8,0.7,0.6"`` (or a sequence) → (0.8, 0.7, 0.6): per-position acceptance as vLLM logs it, the share of
    drafts whose first i tokens all passed, P(N ≥ i + 1): each in [0, 1], not rising, at most 16 positions."""
    parts = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
    if not parts or not all(_is_float(p) for p in parts):
        raise validate.BadArgument(f"accept_by_position must be per-position acceptance rates such as 0.8,0.7,0.6 "
                                   f"(vLLM's: the share of drafts whose first i tokens all passed); got "
                                   f"{validate.shown(text)}")
    rates = tuple(validate.probability(f"accept_by_position[{i}]", float(p)) for i, p in enumerate(parts))
    if len(rates) > 16:
        raise validate.BadArgument(f"accept_by_position gives at most 16 positions, got {len(rates)}")
    if any(b > a for a, b in zip(rates, rates[1:], strict=False)):
        raise validate.BadArgument(f"accept_by_position must not rise along the draft: vLLM's per-position rate is a "
                                   f"survival, P(N ≥ i + 1) (a conditional rate, EAGLE's n-α, is S_i / S_(i-1)); got "
                                   f"{validate.shown(text)}")
    return rates


def alpha_range(value) -> tuple[float, float]:
    """``0.7`` or ``"0.7"`` → (0.7, 0.7); ``"0.5-0.8"`` → (0.5, 0.8), ``"1e-3"`` → (0.001, 0.001): α in [0, 1],
    low ≤ high (``number_range``)."""
    if isinstance(value, tuple):
        lo, hi = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        lo = hi = value
    else:
        try:
            lo, hi = map(float, number_range("alpha", value, "0.5-0.8"))
        except validate.BadArgument as err:
            if "reversed" in str(err):
                raise
            raise validate.BadArgument(f"alpha must be a number in [0, 1] or a range LO-HI such as 0.5-0.8; got "
                                       f"{validate.shown(value)}") from None
    lo, hi = validate.probability("alpha", lo), validate.probability("alpha", hi)
    if lo > hi:
        raise validate.BadArgument(f"alpha range {lo:g}-{hi:g} is reversed: give it from low to high, {hi:g}-{lo:g}")
    return lo, hi


def tree_value(text, verified=None) -> tuple[tuple[int, ...], int]:
    """``"1,4,4"`` → the tree's tokens per sequence at each draft level, and the tree tokens verified per
    sequence (``verified``, default the sum of the widths)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise validate.BadArgument(f"tree must be the tokens per sequence at each draft level, positive integers "
                                   f"such as 1,4,4; got {text!r}")
    widths = tuple(int(p) for p in parts)
    verified = sum(widths) if verified is None else validate.integer("verified", verified, low=len(widths))
    return widths, verified


def gpu(name=None, bandwidth=None, peak=None, memory=None, link=None, dtype: str = "bf16",
        notes: list | None = None) -> hardware.Accelerator:
    """A row of the accelerator table (``resolve``d: its notes go to ``notes``), or one built (or overridden) from
    GB/s, TFLOP/s and GB."""
    if name is not None:
        try:
            name = match_name("gpu", name, hardware.ACCELERATORS, "a GPU", notes)
        except validate.BadArgument as err:
            raise validate.BadArgument(f"{err}; or give --bandwidth and --peak for one that is not in the table") \
                from None
    if name is None and (bandwidth is None or peak is None):
        raise validate.BadArgument("gpu: give a GPU from the table, or both bandwidth (GB/s) and peak (TFLOP/s)")
    given = {"bandwidth": bandwidth, "peak": peak, "memory": memory, "link": link}
    for arg, value in given.items():
        if value is not None:
            validate.number(arg, value, low=0, low_open=True)
    if name is not None and not any(v is not None for v in given.values()):
        return hardware.ACCELERATORS[name]
    base = hardware.ACCELERATORS[name] if name else hardware.Accelerator("custom GPU", {}, 0.0, 0.0, "")
    peaks = dict(base.peak_flops)
    if peak is not None:
        peaks[dtype] = peak * 1e12
    said = ", ".join(f"--{arg} {value:g}" for arg, value in given.items() if value is not None)
    return replace(base, name=f"{name} (modified)" if name else "custom GPU", peak_flops=peaks,
                   mem_bandwidth=bandwidth * 1e9 if bandwidth is not None else base.mem_bandwidth,
                   memory=memory * 1e9 if memory is not None else base.memory,
                   link_bandwidth=link * 1e9 if link is not None else base.link_bandwidth,
                   source=f"{base.source + '; ' if base.source else ''}given on the command line: {said}")


def drafter(kind: str, target: ModelShape, draft: ModelShape | None, exit_layer,
            draft_vocab: int | None = None) -> tuple[cost.Draft, str]:
    """(the cost model's drafter, its name) for a drafter kind."""
    kind = match_name("drafter", kind, DRAFTERS, "a drafter")
    if kind not in ("model", "block") and draft is not None:
        raise validate.BadArgument(f"draft: a separate draft model goes with drafter 'model' or 'block', not {kind!r}")
    if kind != "early-exit" and exit_layer is not None:
        raise validate.BadArgument(f"exit_layer goes with drafter 'early-exit', not {kind!r}")
    if kind != "eagle3" and draft_vocab is not None:
        raise validate.BadArgument(f"draft_vocab goes with drafter 'eagle3' (its reduced vocabulary), not {kind!r}")
    if kind == "model":
        if draft is None:
            raise validate.BadArgument("draft is required with drafter 'model' (a preset, a config.json or a shape)")
        if draft.vocab != target.vocab:
            raise validate.BadArgument(f"draft: its vocabulary ({draft.vocab}) must be the target's ({target.vocab})")
        return draft, draft.name
    if kind == "early-exit":
        if exit_layer is None:
            raise validate.BadArgument(f"exit_layer is required with drafter 'early-exit' (1..{target.n_layers - 1})")
        layers = validate.integer("exit_layer", exit_layer, low=1, high=target.n_layers - 1)
        return cost.EarlyExit(layers), f"early exit after layer {layers} of {target.n_layers} ({target.name})"
    if kind == "ngram":
        return cost.NGRAM, "n-gram / prompt lookup (no weights)"
    if kind == "block":  # DFlash, P-EAGLE, PARD: up to 16 tokens in one pass (Chapter 11)
        if draft is not None and draft.vocab != target.vocab:
            raise validate.BadArgument(f"draft: a block drafter's vocabulary ({draft.vocab}) must be the target's "
                                       f"({target.vocab})")
        shape = draft or replace(target, n_layers=1, tied_embeddings=True, name=f"one {target.name} layer and its "
                                 "LM head (assumed: give --draft for the block drafter's own shape)")
        return cost.Block(shape, k_max=16), f"block drafter, one pass for up to 16 tokens ({shape.name})"
    if kind == "eagle":
        head = cost.eagle_head(target)
        return head, head.name
    if kind == "mtp":
        head = cost.mtp_head(target)
        return head, head.name
    vocab = validate.integer("draft_vocab", 32000 if draft_vocab is None else draft_vocab, low=1, high=target.vocab)
    head = cost.eagle3_head(target, vocab, name=f"EAGLE-3 head for {target.name}, {vocab:,}-token vocabulary")
    return head, head.name


def tp_choices(shape: ModelShape) -> list[int]:
    """The tensor-parallel degrees that split ``shape`` evenly: tp divides the query heads, and divides the
    KV heads or is a multiple of them (each KV head then kept on tp / n_kv_heads GPUs, as ``cost`` prices it)."""
    return [t for t in range(1, shape.n_heads + 1)
            if shape.n_heads % t == 0 and (shape.n_kv_heads % t == 0 or t % shape.n_kv_heads == 0)]


def tp_check(tp: int, shapes: list[ModelShape]) -> int:
    """``tp`` if it splits every model that runs on the GPUs (the target, a draft model or head) evenly."""
    heads = [(s.n_heads, s.n_kv_heads) for s in shapes]
    shapes = [s for i, s in enumerate(shapes) if heads[i] not in heads[:i]]  # one model per head count
    allowed = sorted(set.intersection(*(set(tp_choices(s)) for s in shapes)))
    if tp not in allowed:
        listed = "; ".join(f"{s.name}: {s.n_heads} query heads, {s.n_kv_heads} KV heads" for s in shapes)
        raise validate.BadArgument(f"tp must be one of {', '.join(map(str, allowed))} here ({listed}): tp must "
                                   "divide the query heads, and divide the KV heads or be a multiple of them "
                                   f"(each KV head is then replicated); got {tp}")
    return tp


def measured_points(text) -> tuple[tuple[int, float], ...]:
    """``"1:1.42,8:1.30"`` (or [(1, 1.42), (8, 1.30)]) → ((1, 1.42), (8, 1.3)): batches ≥ 1, each once, and
    speedups > 0."""
    if isinstance(text, str):
        pairs = []
        for part in [p.strip() for p in text.split(",") if p.strip()]:
            b, sep, v = part.partition(":")
            if not sep or not b.strip().isdigit() or not _is_float(v):
                raise validate.BadArgument(f"measured must be B:S pairs such as 1:1.42,8:1.30 (a batch, a colon, the "
                                           f"speedup measured there); got {part!r}")
            pairs.append((int(b), float(v)))
    else:
        pairs = [(b, v) for b, v in text]
    if not pairs:
        raise validate.BadArgument("measured must hold at least one B:S pair, such as 8:1.30")
    out = []
    for b, v in pairs:
        b = validate.integer("measured batch", b, low=1, high=NO_MEMORY_LIMIT)
        v = validate.number(f"measured speedup at B = {b}", v, low=0, low_open=True)
        out.append((b, v))
    batches = [b for b, _ in out]
    if len(set(batches)) != len(batches):
        raise validate.BadArgument(f"measured names a batch twice ({', '.join(map(str, batches))}): one S per batch")
    return tuple(sorted(out))


def _is_float(text) -> bool:
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def _shipped_shapes() -> dict[str, ModelShape]:
    """The book's shipped pair as llama-server serves them (float32 GGUF): "specnotes-target", "specnotes-draft"
    (data/models.json's configurations; multi-head KV)."""
    from importlib import resources

    card = json.loads(resources.files("specnotes").joinpath("data", "models.json").read_text())
    return {f"specnotes-{w}": _fp32_shape(card[w]["config"], f"specnotes-{w}") for w in ("target", "draft")}


def _fp32_shape(c: dict, name: str) -> ModelShape:
    return ModelShape(c["n_layers"], c["d_model"], c["n_heads"], c["n_heads"], c["d_ff"], c["vocab_size"],
                      weight_bytes=4, kv_bytes=4, compute="fp32", name=name)
