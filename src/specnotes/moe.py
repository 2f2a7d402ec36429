"""Chapter 10's analysis of sparse targets, without torch: config.json parsing, the dense twin, routing
statistics and the sentences the chapter's numbers choose.

- ``shape_from_config(config)``: a Hugging Face ``config.json`` (a dict) → ``cost.ModelShape`` for a dense
  model, ``cost.MoEShape`` for a mixture of experts (``num_experts`` / ``n_routed_experts`` /
  ``num_local_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``, shared experts, dense layers,
  MLA's ``kv_lora_rank`` and ``qk_rope_head_dim``); Llama 4's text model under ``text_config``.
- ``dense_twin(shape)``: the dense model with the same active parameters per token.
- ``effective_tokens``, ``mean_distinct``, ``consecutive_overlap``: routing measured against independence.
- ``speedup_curves``: S(B) of a MoE target and of its dense twin on one GPU (the worked example).
- ``describe_*``: sentences chosen by the numbers (each boundary tested in ``tests/test_moe.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specnotes import cost, validate
from specnotes.cost import ModelShape, MoEShape

EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")
PER_TOKEN_KEYS = ("num_experts_per_tok", "experts_per_token")
CLOSE = 0.05  # two numbers within 5% of each other are "about" equal in a chosen sentence
RISE = 0.05  # S(B) must rise by more than 5% above S(1) to "rise before it falls"


# ---------------------------------------------------------------------------------------------- config.json


def _int(config: dict, key: str, where: str, low: int = 1) -> int:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise validate.BadArgument(f"{where}: {key} must be an integer, got {value!r}")
    return validate.integer(f"{where}: {key}", value, low=low)


def _first(config: dict, keys: Sequence[str]) -> str | None:
    return next((key for key in keys if config.get(key) is not None), None)


def moe_layer_count(config: dict, n_layers: int) -> int:
    """How many of ``n_layers`` layers are MoE, by whichever convention the config uses: Llama 4's
    ``moe_layers`` or ``interleave_moe_layer_step``; DeepSeek's ``first_k_dense_replace`` and
    ``moe_layer_freq`` (layer i is MoE when i ≥ k and i % freq = 0); Qwen's ``mlp_only_layers`` and
    ``decoder_sparse_step`` (layer i is MoE when it is not MLP-only and (i + 1) % step = 0)."""
    if config.get("moe_layers") is not None:
        return len({i for i in config["moe_layers"] if 0 <= i < n_layers})
    if config.get("interleave_moe_layer_step"):
        return len(range(config["interleave_moe_layer_step"] - 1, n_layers, config["interleave_moe_layer_step"]))
    first, freq = config.get("first_k_dense_replace") or 0, config.get("moe_layer_freq") or 1
    only, step = set(config.get("mlp_only_layers") or ()), config.get("decoder_sparse_step") or 1
    return sum(1 for i in range(n_layers) if i >= first and i % freq == 0 and i not in only and (i + 1) % step == 0)


def shape_from_config(config: dict, name: str = "") -> ModelShape:
    """A Hugging Face ``config.json``, parsed (a dict) → the cost model's shape. ``num_key_value_heads``
    defaults to the attention heads, ``tie_word_embeddings`` to false; ``head_dim`` is kept where the heads
    do not split ``hidden_size`` evenly (Qwen3, gpt-oss). A config with experts gives a ``MoEShape``:

    - experts: ``num_experts`` (Qwen), ``n_routed_experts`` (DeepSeek) or ``num_local_experts`` (Mixtral,
      gpt-oss, Llama 4); per token ``num_experts_per_tok`` (or gpt-oss's ``experts_per_token``);
    - expert width ``moe_intermediate_size``, else ``intermediate_size`` (Mixtral, gpt-oss, Llama 4, whose
      dense layers are ``intermediate_size_mlp`` wide);
    - shared experts: DeepSeek's ``n_shared_experts`` of the experts' width, Qwen2-MoE's one expert of
      ``shared_expert_intermediate_size`` (``num_shared_experts`` of it where given), Llama 4's one of the
      experts' width;
    - dense layers: the layers ``moe_layer_count`` does not count as MoE;
    - MLA: ``kv_lora_rank``, ``qk_rope_head_dim``, ``q_lora_rank`` (null: none), ``qk_nope_head_dim``,
      ``v_head_dim``.

    ``name`` defaults to the config's ``_name_or_path`` (its last part)."""
    if not isinstance(config, dict):
        raise validate.BadArgumentType(f"config must be a dict (a parsed config.json), got {type(config).__name__}")
    outer = config
    if isinstance(config.get("text_config"), dict):  # Llama 4 and other multimodal configs: the text model
        config = {**config["text_config"], **{k: v for k, v in outer.items() if k == "_name_or_path"}}
    where = name or config.get("_name_or_path") or "config"
    keys = {"n_layers": "num_hidden_layers", "d_model": "hidden_size", "n_heads": "num_attention_heads",
            "d_ff": "intermediate_size", "vocab": "vocab_size"}
    missing = [key for key in keys.values() if config.get(key) is None]
    if missing:
        raise validate.BadArgument(f"{where} lacks {', '.join(missing)}: not a decoder config.json the model knows")
    values = {field: _int(config, key, where) for field, key in keys.items()}
    values["n_kv_heads"] = _int(config, "num_key_value_heads", where) if config.get("num_key_value_heads") \
        else values["n_heads"]
    head_dim = config.get("head_dim")
    if head_dim and head_dim * values["n_heads"] != values["d_model"]:
        values["head_dim"] = _int(config, "head_dim", where)
    label = str(name or config.get("_name_or_path") or "config.json").rstrip("/").rsplit("/", 1)[-1]
    common = {"name": label, "tied_embeddings": bool(config.get("tie_word_embeddings", False))}
    expert_key = _first(config, EXPERT_KEYS)
    if expert_key is None:
        return ModelShape(**values, **common)
    fields = _moe_fields(config, expert_key, values, where)  # may set the dense layers' d_ff (Llama 4)
    return MoEShape(**values, **common, **fields)


def _moe_fields(config: dict, expert_key: str, values: dict, where: str) -> dict:
    n = _int(config, expert_key, where)
    per_key = _first(config, PER_TOKEN_KEYS)
    if per_key is None:
        raise validate.BadArgument(f"{where} has {expert_key} but no {' or '.join(PER_TOKEN_KEYS)}: how many "
                                   "experts does a token use?")
    llama4 = str(config.get("model_type", "")).startswith("llama4")
    width_key = "moe_intermediate_size" if config.get("moe_intermediate_size") else "intermediate_size"
    width = _int(config, width_key, where)
    if llama4 and config.get("intermediate_size_mlp"):
        values["d_ff"] = _int(config, "intermediate_size_mlp", where)  # the dense layers' width
    fields = {"n_experts": n, "experts_per_token": _int(config, per_key, where), "expert_d_ff": width}
    if config.get("n_shared_experts"):
        fields["shared_experts"] = _int(config, "n_shared_experts", where, low=0)
    elif config.get("shared_expert_intermediate_size"):
        fields["shared_experts"] = _int(config, "num_shared_experts", where) if config.get("num_shared_experts") \
            else 1
        fields["shared_d_ff"] = _int(config, "shared_expert_intermediate_size", where)
    elif llama4:
        fields["shared_experts"] = 1  # transformers' Llama4TextMoe: one shared expert of the experts' width
    moe = moe_layer_count(config, values["n_layers"])
    if moe == 0:
        raise validate.BadArgument(f"{where} declares {n} experts but no layer is MoE (check moe_layers, "
                                   "first_k_dense_replace, mlp_only_layers, decoder_sparse_step)")
    fields["dense_layers"] = values["n_layers"] - moe
    if config.get("kv_lora_rank"):
        fields.update(kv_lora_rank=_int(config, "kv_lora_rank", where),
                      qk_rope_head_dim=_int(config, "qk_rope_head_dim", where, low=0),
                      q_lora_rank=_int(config, "q_lora_rank", where) if config.get("q_lora_rank") else 0,
                      qk_nope_head_dim=_int(config, "qk_nope_head_dim", where),
                      v_head_dim=_int(config, "v_head_dim", where))
    return fields


# ---------------------------------------------------------------------------------------------- the model


def dense_twin(shape: MoEShape, name: str = "") -> ModelShape:
    """The dense model of the same active size: ``shape``'s layers, width, attention heads and vocabulary, one
    MLP as wide as its active experts (m·expert_d_ff plus the shared experts), so every token runs the same
    FLOPs and a pass reads only those weights. (An MLA model's twin gets grouped-query attention with its
    ``n_kv_heads``: the twin compares MLPs, not caches.)"""
    if not isinstance(shape, MoEShape):
        raise validate.BadArgumentType(f"shape must be a MoEShape, got {type(shape).__name__}")
    shared = shape.shared_experts * (shape.shared_d_ff or shape.expert_d_ff)
    width = shape.experts_per_token * shape.expert_d_ff + shared
    head_dim = shape.head_dim if not shape.mla else None
    return ModelShape(shape.n_layers, shape.d_model, shape.n_heads, shape.n_kv_heads, width, shape.vocab,
                      shape.weight_bytes, shape.kv_bytes, name or f"dense twin of {shape.name}", shape.compute,
                      shape.tied_embeddings, head_dim)


def effective_tokens(n_experts: int, per_token: int, distinct: float) -> float:
    """The number of independently routed tokens that would touch ``distinct`` experts on average: T with
    N·(1 − (1 − m/N)^T) = distinct (inf when distinct = N, which no finite T reaches)."""
    n = validate.integer("n_experts", n_experts, low=1)
    m = validate.integer("per_token", per_token, low=1, high=n)
    d = validate.number("distinct", distinct, low=0, high=n)
    if d == n:
        return math.inf
    if m == n:
        return 1.0 if d else 0.0
    return math.log(1 - d / n) / math.log(1 - m / n)


def _rows(routes) -> list[list[int]]:
    rows = routes.tolist() if hasattr(routes, "tolist") else list(routes)
    return [list(r) for r in rows]


def mean_distinct(passes: Sequence) -> float:
    """Mean distinct experts per (pass, layer): ``passes`` holds, per pass and layer, the experts its tokens
    chose ([tokens, m], a tensor or nested lists)."""
    counts = [len({e for row in _rows(p) for e in row}) for p in passes]
    if not counts:
        raise validate.BadArgument("passes must hold at least one pass")
    return sum(counts) / len(counts)


def consecutive_overlap(sequences: Sequence) -> float:
    """How many of a token's m experts the token before it in the same sequence (and layer) also chose, as a
    share of m, averaged over consecutive pairs. ``sequences``: per sequence and layer, [tokens, m]. Routing
    independent of the previous token gives m/N (``independent_overlap``)."""
    shares = []
    for seq in sequences:
        rows = _rows(seq)
        shares += [len(set(a) & set(b)) / len(b) for a, b in zip(rows, rows[1:], strict=False)]
    if not shares:
        raise validate.BadArgument("sequences must hold at least one sequence of two tokens")
    return sum(shares) / len(shares)


def independent_overlap(n_experts: int, per_token: int) -> float:
    """E[|S_t ∩ S_{t−1}|] / m for two independent uniform choices of m of N experts: m/N."""
    n = validate.integer("n_experts", n_experts, low=1)
    return validate.integer("per_token", per_token, low=1, high=n) / n


@dataclass(frozen=True)
class Curves:
    """S(B) of a MoE target and of its dense twin (same draft, GPU, k, α, context) at ``batches``."""

    batches: list[int]
    moe: list[float]
    dense: list[float]
    moe_ranges: list[tuple[int, int]]
    dense_ranges: list[tuple[int, int]]

    @property
    def peak(self) -> int:
        """The batch where the MoE target's S is highest."""
        return self.batches[max(range(len(self.moe)), key=self.moe.__getitem__)]


def speedup_curves(target: MoEShape, draft, accel, k: int, alpha: float, context: int = 0, batches=None,
                   limit: int | None = None, **model) -> Curves:
    """S(B) of ``target`` and of ``dense_twin(target)`` with the same ``draft`` (a draft model or head), and the
    batch ranges where each pays (``cost.paying_batches`` up to ``limit``, default the MoE target's memory
    limit, or 4096 without one). ``model``: the time functions' keyword arguments."""
    twin = dense_twin(target)
    batches = validate.integers("batches", batches or [2**i for i in range(13)], low=1)
    if limit is None:
        fits = cost.max_batch(target, draft, accel, context, k=k)
        limit = fits if fits else 4096
    s = lambda shape: [cost.batch_speedup(shape, draft, accel, b, k, alpha, context, **model) for b in batches]
    pays = lambda shape: cost.paying_batches(shape, draft, accel, k, alpha, context, limit=limit, **model)
    return Curves(batches, s(target), s(twin), pays(target), pays(twin))


def published_moe_series() -> list[tuple[str, object]]:
    """(source name, series) of every published series whose target is a MoE preset (``cost.MOE_PRESETS``) and
    which gives a speedup against the batch or the requests in flight of a closed loop: what Chapter 10 draws
    beside the model where the cost model can price it (``published_curve``), and lists with the reason where
    not."""
    from specnotes import published  # the record is read only when asked for

    found = []
    for name in published.names():
        for series in published.load(name).series:
            columns = set(series.columns)
            if (series.setup.get("target") in cost.MOE_PRESETS and "speedup" in columns
                    and columns & {"batch", "concurrency"}):
                found.append((name, series))
    return found


def published_curve(series, source: str | None = None) -> tuple[list[int], list[float], list[float] | None, str]:
    """(batches, measured S, the idealized model's S at each point or None, what the model assumed or why it has
    nothing) for a published MoE series (``published_moe_series``; ``source``: the name of the source it comes
    from). The series is read as Chapter 6 reads it (``calibrate.series_cases``: the preset target, the drafter
    its setup names, MTP included, each point's own k or tree and acceptance, the closed loop's requests in
    flight as the batch); a series Chapter 6 cannot price gets None and the rules it fails. Each point is priced
    at its own settings by the idealized roofline, with no engine knobs (Chapter 6 fits and judges those); a
    series with no published acceptance is scaled to its smallest batch's measured S, as Chapter 6 anchors it."""
    from specnotes import calibrate

    key = "batch" if "batch" in series.columns else "concurrency"
    batches, measured = [int(b) for b in series.column(key)], [float(s) for s in series.column("speedup")]
    try:
        cases = calibrate.series_cases(source, series)
    except calibrate.Unpriceable as err:
        return batches, measured, None, f"no model curve: {err}"
    if [c.batch for c in cases] != batches:
        return batches, measured, None, "no model curve: only some of its points can be predicted"
    model = calibrate.predict(cases)
    first = cases[0]
    said = (f"acceptance anchored at B = {min(batches)}" if first.anchored else
            "each point's own tokens per iteration" if first.tokens is not None or len({c.alpha for c in cases}) > 1
            else f"α = {first.alpha:.2f}")
    gpu = getattr(first.accel, "name", first.accel)
    assumed = f"; {first.gpu_assumed}" if first.gpu_assumed else ""
    return batches, measured, model, (f"idealized model: {said}; {gpu}, tp = {first.tp}, L = {first.context}"
                                      f"{assumed}")


# ---------------------------------------------------------------------------------------------- sentences


def _about(ratio: float, close: float = CLOSE) -> str:
    """"about" within ``close``, else "fewer"/"more" (a ratio measured / expected)."""
    return "about" if abs(ratio - 1) <= close else "fewer" if ratio < 1 else "more"


def describe_distinct(measured: float, expected: float, tokens: int, *, close: float = CLOSE) -> str:
    """The sentence on distinct experts per pass: measured against N(1 − (1 − m/N)^T) at T ``tokens``."""
    measured = validate.number("measured", measured, low=0)
    expected = validate.number("expected", expected, low=0, low_open=True)
    ratio = measured / expected
    head = f"A pass over {tokens} tokens touched {measured:.1f} distinct experts per layer"
    return {"about": f"{head}, as independent routing predicts ({expected:.1f}, within {close:.0%}).",
            "fewer": f"{head}, {1 - ratio:.0%} fewer than independent routing predicts ({expected:.1f}): its tokens "
                     f"share experts more than chance would.",
            "more": f"{head}, {ratio - 1:.0%} more than independent routing predicts ({expected:.1f}): its tokens "
                    f"spread over the experts more evenly than chance."}[_about(ratio, close)]


def describe_overlap(overlap: float, n_experts: int, per_token: int, *, close: float = CLOSE) -> str:
    """The sentence on consecutive tokens: the share of a token's experts its predecessor also chose, against
    m/N for independent routing."""
    overlap = validate.number("overlap", overlap, low=0, high=1)
    base = independent_overlap(n_experts, per_token)
    ratio = overlap / base
    head = f"Consecutive tokens shared {overlap:.0%} of their experts"
    return {"about": f"{head}, as independent routing would ({base:.0%} = m/N).",
            "fewer": f"{head}, less than independent routing would ({base:.0%} = m/N): the router spreads "
                     "neighbours apart.",
            "more": f"{head}, {ratio:.1f}× the {base:.0%} (m/N) of independent routing: neighbouring tokens "
                    "tend to pick the same experts, so a verify pass touches fewer than the formula."
            }[_about(ratio, close)]


def describe_curve(curves: Curves, *, rise: float = RISE) -> str:
    """The sentence on the worked example's S(B): whether the MoE target's S rises before it falls (its peak
    more than ``rise`` above S(1)) while the dense twin's falls from B = 1."""
    s1, peak, at = curves.moe[0], max(curves.moe), curves.peak
    d1 = curves.dense[0]
    dense_falls = all(b <= a * (1 + 1e-9) for a, b in zip(curves.dense, curves.dense[1:], strict=False))
    twin = (f"its dense twin's falls from {d1:.2f} at B = 1" if dense_falls else
            f"its dense twin's starts at {d1:.2f} and does not fall monotonically")
    if peak > s1 * (1 + rise) and at > curves.batches[0]:
        return (f"The MoE target's S(B) rises from {s1:.2f} at B = 1 to {peak:.2f} at B = {at} before it falls; "
                f"{twin}.")
    return f"The MoE target's S(B) does not rise: {s1:.2f} at B = 1, at most {peak:.2f}; {twin}."


def describe_ratio_trend(batches: Sequence[int], measured: Sequence[float], modelled: Sequence[float], *,
                         close: float = 0.10, verify_excess: float | None = None) -> str:
    """The sentence on the measured verify/decode time ratio of the MoE stack against B: it should be highest
    at small B (a verify pass reads more experts) and fall as decode alone touches most of them. Compares
    the first batch with the batch where the model's ratio is lowest. ``verify_excess``: the verify passes'
    median measured time over their modelled time, quoted when the ratio did not fall."""
    batches = validate.integers("batches", batches, low=1)
    if not len(batches) == len(measured) == len(modelled) or len(batches) < 2:
        raise validate.BadArgument("batches, measured and modelled need the same length, at least 2")
    j = min(range(len(modelled)), key=modelled.__getitem__)
    if j == 0:
        return (f"The model's verify/decode ratio is lowest at the first batch, so there is no fall to compare "
                f"(measured {measured[0]:.2f} at B = {batches[0]}).")
    fell = measured[j] < measured[0] * (1 - close)
    head = (f"verify/decode measured {measured[0]:.2f} at B = {batches[0]} and {measured[j]:.2f} at B = "
            f"{batches[j]} (the model: {modelled[0]:.2f} and {modelled[j]:.2f})")
    if fell:
        return f"As the model predicts, the ratio fell: {head}."
    why = ("" if verify_excess is None else
           f" The verify passes took {verify_excess:.1f}× their modelled time (median), so here something other "
           "than the experts' bytes, such as the matmuls' efficiency at a few rows per expert, set their times.")
    return f"Unlike the model, the ratio did not fall by more than {close:.0%}: {head}.{why}"


def describe_rise(batches: Sequence[int], speedups: Sequence[float], *, rise: float = RISE) -> str:
    """The sentence on a measured S(B): whether it rose more than ``rise`` above its first value before it fell,
    fell from the first batch, or rose to the last batch measured."""
    batches = validate.integers("batches", batches, low=1)
    if len(batches) != len(speedups) or not batches:
        raise validate.BadArgument("batches and speedups need the same length, at least 1")
    i = max(range(len(speedups)), key=speedups.__getitem__)
    first, peak, last = speedups[0], speedups[i], speedups[-1]
    if peak <= first * (1 + rise) or i == 0:
        return f"S fell from {first:.2f} at B = {batches[0]} to {last:.2f} at B = {batches[-1]}, never rising above it."
    if i == len(speedups) - 1:
        return (f"S rose from {first:.2f} at B = {batches[0]} to {peak:.2f} at B = {batches[i]}, the last batch "
                "measured.")
    return (f"S rose from {first:.2f} at B = {batches[0]} to {peak:.2f} at B = {batches[i]}, then fell to {last:.2f} "
            f"at B = {batches[-1]}.")


def describe_alpha(moe_accepted: int, moe_checked: int, dense_accepted: int, dense_checked: int, *,
                   z: float = 2.0) -> str:
    """The sentence comparing the acceptance rate of the MoE target with the dense target's, same draft and
    prompts: different only if the two rates are more than ``z`` standard errors apart (two-proportion test)."""
    for name, value in (("moe_checked", moe_checked), ("dense_checked", dense_checked)):
        validate.integer(name, value, low=1)
    a = validate.integer("moe_accepted", moe_accepted, low=0, high=moe_checked) / moe_checked
    b = validate.integer("dense_accepted", dense_accepted, low=0, high=dense_checked) / dense_checked
    pooled = (moe_accepted + dense_accepted) / (moe_checked + dense_checked)
    se = math.sqrt(max(pooled * (1 - pooled), 1e-12) * (1 / moe_checked + 1 / dense_checked))
    head = f"The shipped draft's acceptance rate was α = {a:.2f} against the MoE target, {b:.2f} against the dense one"
    if abs(a - b) <= z * se:
        return f"{head}: within {z:g} standard errors ({se:.3f}), no difference these runs can show."
    return f"{head}: {'higher' if a > b else 'lower'}, by more than {z:g} standard errors ({se:.3f})."
