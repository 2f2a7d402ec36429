"""Chapter 10's analysis of sparse targets, without torch: config.json parsing, the dense twin, routing
statistics and the sentences the chapter's numbers choose.

- ``read_config(path)``, ``shape_from_config(config)``: a Hugging Face ``config.json`` (a file, a dict), every
  field it reads checked and bounded → ``cost.ModelShape`` for a dense model, ``cost.MoEShape`` for a mixture of
  experts (``num_experts`` / ``n_routed_experts`` / ``num_local_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size``, shared experts, dense layers, MLA's ``kv_lora_rank`` and ``qk_rope_head_dim``);
  Llama 4's text model under ``text_config``.
- ``dense_twin(shape)``: the dense model with the same active parameters per token.
- ``effective_tokens``, ``mean_distinct``, ``consecutive_overlap``: routing measured against independence;
  ``expert_rates`` and ``imbalanced_distinct``: the distinct experts unbalanced routing alone predicts.
- ``speedup_curves``: S(B) of a MoE target and of its dense twin on one GPU (the worked example).
- ``describe_*``: sentences chosen by the numbers (each registered with its claims in ``tests/registry.py``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from specnotes import validate
from specnotes.analytic import cost
from specnotes.analytic.cost import ModelShape, MoEShape

EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")
PER_TOKEN_KEYS = ("num_experts_per_tok", "experts_per_token")
CLOSE = 0.05  # two numbers within 5% of each other are "about" equal in a chosen sentence
RISE = 0.05  # S(B) must rise by more than 5% above S(1) to "rise before it falls"


# ---------------------------------------------------------------------------------------------- config.json


# The most a config.json may declare, field by field: past every published model (the largest: 126 layers,
# Llama-3.1-405B; hidden 18,432, PaLM; MLP 73,728, PaLM; vocabulary 262,144, Gemma 3; 512 experts, Qwen3-Next)
# and small enough that a report's numbers stay finite and every loop over layers short. A field outside
# [its least, its most] is refused by name (shape_from_config), before anything is computed from it.
MAX_LAYERS = 1024
MAX_WIDTH = 1 << 18  # any width: hidden, MLP, expert, latent rank, head dimension
MAX_HEADS = 1024
MAX_VOCAB = 1 << 21
MAX_EXPERTS = 4096
CONFIG_MAX_BYTES = 16 << 20  # a config.json is kilobytes


def _int(config: dict, key: str, where: str, low: int = 1, high: int = MAX_WIDTH) -> int:
    """``config[key]``, an integer in [low, high]; else a BadArgument naming ``where``, the key, the range and
    the value (a missing key: "lacks")."""
    value = config.get(key)
    if value is None:
        raise validate.BadArgument(f"{where} lacks {key}: an integer in [{low}, {high}]")
    if isinstance(value, bool) or not isinstance(value, int):
        raise validate.BadArgumentType(f"{where}: {key} must be an integer in [{low}, {high}], got "
                                       f"{validate.shown(value)}")
    return validate.integer(f"{where}: {key}", value, low=low, high=high)


def _indices(config: dict, key: str, where: str, n_layers: int) -> set[int]:
    """``config[key]``: a list of layer indices, each in [0, n_layers)."""
    value = config[key]
    if not isinstance(value, list):
        raise validate.BadArgumentType(f"{where}: {key} must be a list of layer indices in [0, {n_layers - 1}], "
                                       f"got {validate.shown(value)}")
    return {_int({f"{key}[{i}]": v}, f"{key}[{i}]", where, 0, n_layers - 1) for i, v in enumerate(value)}


def _given(config: dict, key: str) -> bool:
    """Whether ``key`` is set: null and 0 (false) mean "none" (no shared experts, no latent attention)."""
    return config.get(key) not in (None, 0)


def _first(config: dict, keys: Sequence[str]) -> str | None:
    return next((key for key in keys if config.get(key) is not None), None)


def moe_layer_count(config: dict, n_layers: int, where: str = "config") -> int:
    """How many of ``n_layers`` layers are MoE, by whichever convention the config uses: Llama 4's
    ``moe_layers`` or ``interleave_moe_layer_step``; DeepSeek's ``first_k_dense_replace`` and
    ``moe_layer_freq`` (layer i is MoE when i ≥ k and i % freq = 0); Qwen's ``mlp_only_layers`` and
    ``decoder_sparse_step`` (layer i is MoE when it is not MLP-only and (i + 1) % step = 0). Each field is
    checked (indices in [0, n_layers), steps in [1, n_layers]); ``n_layers`` is at most ``MAX_LAYERS``."""
    n_layers = validate.integer("n_layers", n_layers, low=1, high=MAX_LAYERS)
    if config.get("moe_layers") is not None:
        return len(_indices(config, "moe_layers", where, n_layers))
    if config.get("interleave_moe_layer_step") is not None:
        step = _int(config, "interleave_moe_layer_step", where, 1, n_layers)
        return len(range(step - 1, n_layers, step))
    get = lambda key, low, default: default if config.get(key) is None else _int(config, key, where, low, n_layers)
    first, freq = get("first_k_dense_replace", 0, 0), get("moe_layer_freq", 1, 1)
    step = get("decoder_sparse_step", 1, 1)
    only = _indices(config, "mlp_only_layers", where, n_layers) if config.get("mlp_only_layers") is not None else set()
    return sum(1 for i in range(n_layers) if i >= first and i % freq == 0 and i not in only and (i + 1) % step == 0)


def _text(config: dict, key: str, where: str) -> str | None:
    value = config.get(key)
    if value is not None and not isinstance(value, str):
        raise validate.BadArgumentType(f"{where}: {key} must be a string, got {validate.shown(value)}")
    return value


def read_config(path) -> ModelShape:
    """The config.json at ``path`` (read offline, at most ``CONFIG_MAX_BYTES``) → ``shape_from_config``'s shape;
    every error names the file."""
    config = validate.json_file(path, "config", CONFIG_MAX_BYTES)
    if not isinstance(config, dict):
        raise validate.BadArgumentType(f"config: {path} holds a JSON {type(config).__name__}, not the object of a "
                                       "Hugging Face config.json")
    return shape_from_config(config, where=str(path))


def shape_from_config(config: dict, name: str = "", where: str | None = None) -> ModelShape:
    """A Hugging Face ``config.json``, parsed (a dict) → the cost model's shape: the one validating reader of a
    config. ``num_key_value_heads`` defaults to the attention heads, ``tie_word_embeddings`` to false;
    ``head_dim`` is kept where the heads do not split ``hidden_size`` evenly (Qwen3, gpt-oss). A config with
    experts gives a ``MoEShape``:

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

    Every field it reads is checked against its range (``MAX_LAYERS``, ``MAX_WIDTH``, ``MAX_HEADS``,
    ``MAX_VOCAB``, ``MAX_EXPERTS``) before anything is computed: a bad one is a BadArgument naming ``where``
    (the file, else the name), the field, the range and the value. ``name`` defaults to the last part of the
    config's ``_name_or_path``, else its ``model_type``."""
    if not isinstance(config, dict):
        raise validate.BadArgumentType(f"config must be a dict (a parsed config.json), got {type(config).__name__}")
    where = where or name or (config.get("_name_or_path") if isinstance(config.get("_name_or_path"), str) else None) \
        or "config"
    outer = config
    if config.get("text_config") is not None:  # Llama 4 and other multimodal configs: the text model
        if not isinstance(config["text_config"], dict):
            raise validate.BadArgumentType(f"{where}: text_config must be an object, got "
                                           f"{validate.shown(config['text_config'])}")
        config = {**config["text_config"], **{k: v for k, v in outer.items() if k == "_name_or_path"}}
        where = f"{where}: text_config"
    label = name or (_text(config, "_name_or_path", where) or "").rstrip("/").rsplit("/", 1)[-1] \
        or _text(outer, "model_type", where) or "config.json"
    keys = {"n_layers": ("num_hidden_layers", MAX_LAYERS), "d_model": ("hidden_size", MAX_WIDTH),
            "n_heads": ("num_attention_heads", MAX_HEADS), "d_ff": ("intermediate_size", MAX_WIDTH),
            "vocab": ("vocab_size", MAX_VOCAB)}
    missing = [key for key, _ in keys.values() if config.get(key) is None]
    if missing:
        raise validate.BadArgument(f"{where} lacks {', '.join(missing)}: not a decoder config.json the model knows")
    values = {field: _int(config, key, where, 1, most) for field, (key, most) in keys.items()}
    values["n_kv_heads"] = values["n_heads"] if config.get("num_key_value_heads") is None else \
        _int(config, "num_key_value_heads", where, 1, values["n_heads"])
    if config.get("head_dim") is not None:
        head_dim = _int(config, "head_dim", where, 1, MAX_WIDTH)
        if head_dim * values["n_heads"] != values["d_model"]:
            values["head_dim"] = head_dim
    if "head_dim" not in values and values["d_model"] % values["n_heads"]:
        raise validate.BadArgument(f"{where}: hidden_size ({values['d_model']}) must be a multiple of "
                                   f"num_attention_heads ({values['n_heads']}), or head_dim must be given")
    if values["n_heads"] % values["n_kv_heads"]:
        raise validate.BadArgument(f"{where}: num_attention_heads ({values['n_heads']}) must be a multiple of "
                                   f"num_key_value_heads ({values['n_kv_heads']})")
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool) and tied is not None:
        raise validate.BadArgumentType(f"{where}: tie_word_embeddings must be true or false, got "
                                       f"{validate.shown(tied)}")
    _text(config, "model_type", where)
    common = {"name": label, "tied_embeddings": bool(tied)}
    expert_key = _first(config, EXPERT_KEYS)
    try:
        if expert_key is None:
            return ModelShape(**values, **common)
        fields = _moe_fields(config, expert_key, values, where)  # may set the dense layers' d_ff (Llama 4)
        return MoEShape(**values, **common, **fields)
    except validate.BadArgument as err:  # the shape's own consistency checks (heads split the width, ...)
        if str(err).startswith(where):
            raise
        raise type(err)(f"{where}: {err}") from None


def _moe_fields(config: dict, expert_key: str, values: dict, where: str) -> dict:
    n = _int(config, expert_key, where, 1, MAX_EXPERTS)
    per_key = _first(config, PER_TOKEN_KEYS)
    if per_key is None:
        raise validate.BadArgument(f"{where} has {expert_key} but no {' or '.join(PER_TOKEN_KEYS)}: how many "
                                   "experts does a token use?")
    llama4 = str(config.get("model_type", "")).startswith("llama4")
    width_key = "moe_intermediate_size" if config.get("moe_intermediate_size") is not None else "intermediate_size"
    width = _int(config, width_key, where)
    if llama4 and config.get("intermediate_size_mlp") is not None:
        values["d_ff"] = _int(config, "intermediate_size_mlp", where)  # the dense layers' width
    per_token = _int(config, per_key, where, 1, MAX_EXPERTS)
    if per_token > n:
        raise validate.BadArgument(f"{where}: {per_key} must be at most n_experts ({expert_key} = {n}): a token "
                                   f"picks that many distinct experts; got {per_token}")
    fields = {"n_experts": n, "experts_per_token": per_token, "expert_d_ff": width}
    if _given(config, "n_shared_experts"):
        fields["shared_experts"] = _int(config, "n_shared_experts", where, 0, MAX_EXPERTS)
    elif _given(config, "shared_expert_intermediate_size"):
        fields["shared_experts"] = 1 if config.get("num_shared_experts") is None else \
            _int(config, "num_shared_experts", where, 1, MAX_EXPERTS)
        fields["shared_d_ff"] = _int(config, "shared_expert_intermediate_size", where)
    elif llama4:
        fields["shared_experts"] = 1  # transformers' Llama4TextMoe: one shared expert of the experts' width
    moe = moe_layer_count(config, values["n_layers"], where)
    if moe == 0:
        raise validate.BadArgument(f"{where} declares {n} experts but no layer is MoE (check moe_layers, "
                                   "first_k_dense_replace, mlp_only_layers, decoder_sparse_step)")
    fields["dense_layers"] = values["n_layers"] - moe
    if _given(config, "kv_lora_rank"):
        fields.update(kv_lora_rank=_int(config, "kv_lora_rank", where),
                      qk_rope_head_dim=_int(config, "qk_rope_head_dim", where, low=0),
                      q_lora_rank=_int(config, "q_lora_rank", where) if _given(config, "q_lora_rank") else 0,
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


# ---------------------------------------------------------------------------------------------- sentences


def _about(ratio: float, close: float = CLOSE) -> str:
    """"about" within ``close`` (its edge included, past the division's rounding), else "fewer"/"more" (a ratio
    measured / expected)."""
    return "about" if abs(ratio - 1) <= close + 1e-12 else "fewer" if ratio < 1 else "more"


SHOWN = 4  # the most decimals a sentence prints: values equal to this many are "level", never "fell" or "rose"


def _level(x: float) -> float:
    """``x`` as the most decimals a sentence prints: a change that does not show there is no change in words."""
    return round(x, SHOWN)


def _apart(*values: float, digits: int, pct: bool = False) -> tuple[str, ...]:
    """``values`` printed with ``digits`` decimals (percentages with ``pct``), or as many more (up to ``SHOWN``) as
    it takes to print every two that differ apart: a sentence that says one is less than another never prints them
    equal (the choosers compare ``_level`` values)."""
    fmt = (lambda v, d: f"{v:.{d}%}") if pct else (lambda v, d: f"{v:.{d}f}")
    for d in range(digits, max(digits, SHOWN - 2 * pct) + 1):
        shown = tuple(fmt(v, d) for v in values)
        if all(a != b for (a, x), (b, y) in itertools.combinations(zip(shown, values, strict=True), 2) if x != y):
            break
    return shown


def expert_rates(passes: Sequence, n_experts: int) -> list[float]:
    """Each expert's measured routing rate in one layer: the share of tokens that chose it, over ``passes`` (that
    layer's routes of every pass, each [tokens, m], a tensor or nested lists). The rates sum to m."""
    n = validate.integer("n_experts", n_experts, low=1)
    rows = [row for p in passes for row in _rows(p)]
    if not rows:
        raise validate.BadArgument("passes must hold at least one token's experts")
    counts = [0] * n
    for row in rows:
        for e in row:
            counts[validate.integer("an expert index", e, low=0, high=n - 1)] += 1
    return [c / len(rows) for c in counts]


def imbalanced_distinct(rates: Sequence, tokens: float) -> float:
    """E[distinct experts] that ``tokens`` tokens touch per layer if each picked its experts independently of the
    others at the experts' own rates: Σ_e 1 − (1 − π_e)^T, averaged over layers (``rates``: one layer's per-expert
    rates, or a list of layers', ``expert_rates``). Uniform rates m/N give ``cost.expected_experts``; unbalanced
    ones give fewer (1 − (1 − π)^T is concave). What is left between it and a measured count is correlation."""
    rates = list(rates)
    if not rates:
        raise validate.BadArgument("rates must hold at least one layer's rates")
    layers = rates if hasattr(rates[0], "__len__") else [rates]
    tokens = validate.number("tokens", tokens, low=0)
    per_layer = [sum(1 - (1 - validate.number("a routing rate", p, low=0, high=1)) ** tokens for p in layer)
                 for layer in layers]
    return sum(per_layer) / len(per_layer)


def describe_distinct(measured: float, expected: float, tokens: int, *, close: float = CLOSE,
                      imbalanced: float | None = None) -> str:
    """The sentences on distinct experts per pass: ``measured`` against ``expected`` = N(1 − (1 − m/N)^T) at T
    ``tokens`` (independent routing at uniform rates). ``imbalanced``: the same at each expert's own measured rate
    (``imbalanced_distinct``), which splits a gap into its two causes: unbalanced routing (``expected`` against
    ``imbalanced``) and correlated tokens (``imbalanced`` against ``measured``), each named only past ``close``.
    Without it the sentence names neither alone."""
    measured = validate.number("measured", measured, low=0)
    expected = validate.number("expected", expected, low=0, low_open=True)
    if imbalanced is not None:
        imbalanced = validate.number("imbalanced", imbalanced, low=0, low_open=True)
    ratio = measured / expected
    word = _about(ratio, close)
    m_s, e_s, i_s = _apart(measured, expected, expected if imbalanced is None else imbalanced, digits=1)
    head = f"A pass over {tokens} tokens touched {m_s} distinct experts per layer"
    said = {"about": f"{head}, as independent routing predicts ({e_s}, within {close:.0%}).",
            "fewer": f"{head}, {1 - ratio:.0%} fewer than independent routing predicts ({e_s}).",
            "more": f"{head}, {ratio - 1:.0%} more than independent routing predicts ({e_s})."}[word]
    if imbalanced is None:
        return said + {"about": "", "more": " Its tokens spread over the experts more evenly than chance.",
                       "fewer": " Unbalanced routing or tokens that share experts, or both, read fewer."}[word]
    rates = f"At each expert's own measured rate, independent routing predicts {i_s}"
    balance = {"about": "the experts' uneven rates change little", "fewer": "unbalanced routing reads fewer",
               "more": "the experts' rates alone would read more"}[_about(imbalanced / expected, close)]
    tokens_ = {"about": f"the tokens shared experts no more than chance would (within {close:.0%})",
               "fewer": "the tokens share experts more than chance would",
               "more": "the tokens spread over the experts more evenly than chance"}[_about(measured / imbalanced,
                                                                                            close)]
    return f"{said} {rates}: {balance}, and {tokens_}."


def describe_overlap(overlap: float, n_experts: int, per_token: int, *, close: float = CLOSE) -> str:
    """The sentence on consecutive tokens: the share of a token's experts its predecessor also chose, against
    m/N for independent routing (both printed apart where they differ)."""
    overlap = validate.number("overlap", overlap, low=0, high=1)
    base = independent_overlap(n_experts, per_token)
    ratio = overlap / base
    o_s, b_s = _apart(overlap, base, digits=0 if (100 * base).is_integer() else 1, pct=True)  # m/N: 12.5%, not 12%
    head = f"Consecutive tokens shared {o_s} of their experts"
    return {"about": f"{head}, about as many as independent routing would ({b_s} = m/N, within {close:.0%}).",
            "fewer": f"{head}, less than independent routing would ({b_s} = m/N): the router spreads "
                     "neighbours apart.",
            "more": f"{head}, {ratio:.1f}× the {b_s} (m/N) of independent routing: neighbouring tokens "
                    "tend to pick the same experts, so a verify pass touches fewer than the formula."
            }[_about(ratio, close)]


def _falls(values: Sequence[float]) -> bool:
    """Never rises (within float noise) and ends lower than it started."""
    return all(b <= a * (1 + 1e-9) for a, b in zip(values, values[1:], strict=False)) and values[-1] < values[0]


def describe_curve(curves: Curves, *, rise: float = RISE) -> str:
    """The sentence on the worked example's S(B): whether the MoE target's S rises before it falls (its peak
    more than ``rise`` above its first value; "before it falls" only where a later batch is lower), while the
    dense twin's falls from its first batch."""
    b0, s1, peak, at = curves.batches[0], curves.moe[0], max(curves.moe), curves.peak
    d1 = curves.dense[0]
    twin = (f"its dense twin's falls from {d1:.2f} at B = {b0}" if _falls(curves.dense) else
            f"its dense twin's starts at {d1:.2f} and does not fall monotonically")
    if peak > s1 * (1 + rise):
        last = curves.moe[-1]
        s_s, p_s, l_s = _apart(s1, peak, last, digits=2)
        if _level(last) < _level(peak):
            return f"The MoE target's S(B) rises from {s_s} at B = {b0} to {p_s} at B = {at} before it falls; {twin}."
        return (f"The MoE target's S(B) rises from {s_s} at B = {b0} to {l_s} at B = {curves.batches[-1]}, the "
                f"last batch shown, without falling; {twin}.")
    return (f"The MoE target's S(B) does not rise more than {rise:.0%}: {s1:.2f} at B = {b0}, at most {peak:.2f}; "
            f"{twin}.")


def describe_ratio_trend(batches: Sequence[int], measured: Sequence[float], modelled: Sequence[float], *,
                         close: float = 0.10, verify_excess: float | None = None) -> str:
    """The sentence on the measured verify/decode time ratio of the MoE stack against B: it should be highest
    at small B (a verify pass reads more experts) and fall as decode alone touches most of them. Compares
    the first batch with the batch where the model's ratio is lowest; a ratio "fell" when it ended more than
    ``close`` lower, for the measurement and the model alike. ``verify_excess``: the verify passes' median
    measured time over their modelled time, quoted when the ratio did not fall where the model's did."""
    batches = validate.integers("batches", batches, low=1)
    if not len(batches) == len(measured) == len(modelled) or len(batches) < 2:
        raise validate.BadArgument("batches, measured and modelled need the same length, at least 2")
    j = min(range(len(modelled)), key=modelled.__getitem__)
    model_fell = modelled[j] < modelled[0] * (1 - close)
    if not model_fell:
        return (f"The model's verify/decode ratio does not fall by more than {close:.0%} over these batches "
                f"({modelled[0]:.2f} at B = {batches[0]}, at least {modelled[j]:.2f}), so there is no fall to compare "
                f"(measured {measured[0]:.2f} at B = {batches[0]}).")
    fell = measured[j] < measured[0] * (1 - close)
    head = (f"verify/decode measured {measured[0]:.2f} at B = {batches[0]} and {measured[j]:.2f} at B = "
            f"{batches[j]} (the model: {modelled[0]:.2f} and {modelled[j]:.2f})")
    if fell:
        return f"As the model predicts, the ratio fell: {head}."
    why = ("" if verify_excess is None else
           f" The verify passes took {verify_excess:.1f}× their modelled time (median), so here something other "
           "than the experts' bytes, such as the matmuls' efficiency at a few rows per expert, set their times.")
    return f"Unlike the model's, the measured ratio did not fall by more than {close:.0%}: {head}.{why}"


def describe_rise(batches: Sequence[int], speedups: Sequence[float], *, rise: float = RISE) -> str:
    """The sentence on a measured S(B): whether it rose more than ``rise`` above its first value (then fell, or
    rose to the last batch measured), fell from the first batch without ever rising more than ``rise`` above it,
    or neither rose that much nor fell."""
    batches = validate.integers("batches", batches, low=1)
    if len(batches) != len(speedups) or not batches:
        raise validate.BadArgument("batches and speedups need the same length, at least 1")
    if len(batches) == 1:
        return f"S was {speedups[0]:.2f} at B = {batches[0]}, the one batch measured."
    i = max(range(len(speedups)), key=speedups.__getitem__)
    first, peak, last = speedups[0], speedups[i], speedups[-1]
    b0, bi, bn = batches[0], batches[i], batches[-1]
    if peak > first * (1 + rise):
        f_s, p_s, l_s = _apart(first, peak, last, digits=2)
        if _level(last) == _level(peak):
            return f"S rose from {f_s} at B = {b0} to {l_s} at B = {bn}, the last batch measured."
        return f"S rose from {f_s} at B = {b0} to {p_s} at B = {bi}, then fell to {l_s} at B = {bn}."
    if _level(last) < _level(first):
        f_s, l_s = _apart(first, last, digits=2)
        return f"S fell from {f_s} at B = {b0} to {l_s} at B = {bn}, never more than {rise:.0%} above {f_s}."
    return (f"S never rose more than {rise:.0%} above its {first:.2f} at B = {b0}: at most {peak:.2f}, and "
            f"{last:.2f} at B = {bn}.")


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
    a_s, b_s = _apart(a, b, digits=2)
    head = f"The shipped draft's acceptance rate was α = {a_s} against the MoE target, {b_s} against the dense one"
    if abs(a - b) <= z * se:
        return f"{head}: within {z:g} standard errors ({se:.3f}), no difference these runs can show."
    return f"{head}: {'higher' if a > b else 'lower'}, by more than {z:g} standard errors ({se:.3f})."


# ---------------------------------------------------------------------------------------------- issue 42


def describe_engines(series: Sequence) -> str:
    """The headline on published MoE series, each ``(name, batches, measured S)``: how many fall from their first
    batch to their last (S at the last below S at the first), the median of S_last/S_first over them all, and each
    series that does not fall, with its two values."""
    rows = [(str(n), validate.integers("batches", b, low=1), [validate.number("S", s, low=0, low_open=True)
                                                               for s in v]) for n, b, v in series]
    if not rows or any(len(b) != len(v) or len(b) < 2 for _, b, v in rows):
        raise validate.BadArgument("series: each needs as many S as batches, at least two")
    ratios = sorted(v[-1] / v[0] for _, _, v in rows)
    median = (ratios[(len(ratios) - 1) // 2] + ratios[len(ratios) // 2]) / 2
    rest = [(n, b, v) for n, b, v in rows if not v[-1] < v[0]]
    n, fell = len(rows), len(rows) - len(rest)
    head = ("All" if not rest else "None" if not fell else f"{fell}") + f" of the {n} published MoE series"
    verb = "falls" if fell == 1 or not fell else "fall"
    said = f"{head} {verb} from its first batch to its last" if not fell or fell == 1 else \
        f"{head} {verb} from their first batch to their last"
    said += f"; over all of them S at the last batch is a median {median:.2f}× S at the first."
    for name, b, v in rest:
        first, last = _apart(v[0], v[-1], digits=2)
        said += f" {name} does not fall: {first} at B = {b[0]}, {last} at B = {b[-1]}."
    return said


def describe_slopes(measured: Sequence[float], modelled: Sequence[float], label: str, *, tol: float = 0.15) -> str:
    """A model's slopes S(B_last)/S(B_first) against the measured ones, series by series: how many fall on the
    measured side of 1, how many of those within ``tol`` of it in log, and the two medians."""
    measured = [validate.number("measured", m, low=0, low_open=True) for m in measured]
    modelled = [validate.number("modelled", m, low=0, low_open=True) for m in modelled]
    if len(measured) != len(modelled) or not measured:
        raise validate.BadArgument("measured and modelled need the same length, at least 1")
    same = [(m > 1) == (x > 1) for m, x in zip(measured, modelled, strict=True)]
    close = sum(s and abs(math.log(x / m)) <= tol for s, m, x in zip(same, measured, modelled, strict=True))
    med = lambda xs: sorted(xs)[(len(xs) - 1) // 2] / 2 + sorted(xs)[len(xs) // 2] / 2
    mm, me = _apart(med(modelled), med(measured), digits=2)
    n = len(measured)
    return (f"{label} puts {sum(same)} of the {n} slopes on the measured side of 1, {close} of them within {tol:.2f} "
            f"of it in log; its median slope is {mm} against {me} measured.")


TERM_WORDS = {"dense weights": "the dense weights' reads", "expert weights": "the experts' reads",
              "target KV": "the target's KV reads", "draft KV": "the draft's own KV reads",
              "matmul FLOPs": "the matmuls' math", "attention FLOPs": "attention's math",
              "all-reduce": "the all-reduces", "all-to-all": "the all-to-alls", "fixed": "the fixed costs",
              "host": "the host's lookups"}


def describe_split_change(change: dict, batches: Sequence[int], steps: Sequence[float]) -> str:
    """Why S moved between two batches, from the time split (``cost.change``): ``steps`` is an iteration's cost in
    plain decode steps at each (1 / ``Breakdown.ratio`` = E[N]/S), ``change`` each term's share of its change. S
    falls when the cost rises; the sentence names the term with the largest share in the direction it moved."""
    a, b = validate.integers("batches", batches, low=1)
    x, y = (validate.number("steps", s, low=0, low_open=True) for s in steps)
    unknown = set(change) - set(TERM_WORDS)
    if unknown:
        raise validate.BadArgument(f"change: not terms of cost.TERMS: {sorted(unknown)}")
    sx, sy = _apart(x, y, digits=2)
    if round(x, 2) == round(y, 2):
        return f"From B = {a} to B = {b} an iteration costs {sx} plain decode steps at both, so S stays level."
    rises = y > x
    term = (max if rises else min)(change, key=change.get)
    share = change[term]
    if (share > 0) != rises:
        raise validate.BadArgument("change: no term moved in the direction the cost moved")
    return (f"From B = {a} to B = {b} an iteration goes from {sx} to {sy} plain decode steps, so S "
            f"{'falls' if rises else 'rises'}. The term that {'adds' if rises else 'takes away'} the most is "
            f"{TERM_WORDS[term]}: {share:+.2f} decode steps.")


def describe_correction(batches: Sequence[int], measured: Sequence[float], model: Sequence[float],
                        corrected: Sequence[float], at: int) -> str:
    """The measured stack against the model on this device's roofs and against the same model with the measured
    GEMM efficiency: each one's S at batch ``at`` beside the measured one, and which is nearer over every batch
    (the median |log(model / measured)|)."""
    batches = validate.integers("batches", batches, low=1)
    if not len(batches) == len(measured) == len(model) == len(corrected) or at not in batches:
        raise validate.BadArgument("batches, measured, model and corrected need the same length, and at a batch")
    for name, xs in (("measured", measured), ("model", model), ("corrected", corrected)):
        for v in xs:
            validate.number(name, v, low=0, low_open=True)
    err = lambda xs: sorted(abs(math.log(x / m)) for x, m in zip(xs, measured, strict=True))
    med = lambda es: (es[(len(es) - 1) // 2] + es[len(es) // 2]) / 2
    e0, e1 = med(err(model)), med(err(corrected))
    i = batches.index(at)
    m, x0, x1 = _apart(measured[i], model[i], corrected[i], digits=2)
    d0, d1 = _apart(e0, e1, digits=2)
    nearer = "nearer the measurement" if e1 < e0 else "no nearer the measurement" if e1 == e0 else \
        "farther from the measurement"
    return (f"At B = {at} the stack measured S = {m}; the model on this device's roofs says {x0}, and with the GEMM "
            f"efficiency measured here {x1}. Over every batch the second is {nearer}: a median |log error| of {d1} "
            f"against {d0}.")


def describe_sides(batches: Sequence[int], measured: Sequence[float], model: Sequence[float]) -> str:
    """Where a model's S falls on the other side of 1 from the measured S: the batches where it does, and the
    farthest of them (largest |log(model/measured)|) with both values; or that it is on the measured side at every
    batch."""
    batches = validate.integers("batches", batches, low=1)
    if not len(batches) == len(measured) == len(model) or not batches:
        raise validate.BadArgument("batches, measured and model need the same length, at least 1")
    wrong = [(b, m, x) for b, m, x in zip(batches, measured, model, strict=True)
             if (validate.number("measured", m, low=0, low_open=True) > 1) != (validate.number(
                 "model", x, low=0, low_open=True) > 1)]
    if not wrong:
        return "The model is on the measured side of 1 at every batch."
    b, m, x = max(wrong, key=lambda w: abs(math.log(w[2] / w[1])))
    xs, ms = _apart(x, m, digits=2)
    names = [str(w[0]) for w in wrong]
    at = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return (f"The model is on the other side of 1 from the measurement at B = {at}; farthest at B = {b}, where it "
            f"says {xs} and the stack measured {ms}.")
