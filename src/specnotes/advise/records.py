"""A record of the reader's own measurement (``python -m specnotes.bench serve-speedup``, ``python -m
specnotes.serve.engine measure``): read (``read_record``) and merged with the flags (``record_inputs``)."""

from __future__ import annotations

import re
from pathlib import Path

from specnotes import validate
from specnotes.advise.base import NO_MEMORY_LIMIT
from specnotes.advise.inputs import K_MOST, MAX_CONTEXT, SHAPE_LIMITS, _shipped_shapes, measured_points, resolve
from specnotes.analytic import cost, hardware
from specnotes.analytic.cost import ModelShape


def _model_name(name) -> str:
    """A model's name as a record writes it, without folders, .gguf and a float-format suffix."""
    stem = Path(str(name)).name
    stem = re.sub(r"\.gguf$", "", stem, flags=re.I)
    return re.sub(r"[-_.](f32|f16|bf16|q\d\w*)$", "", stem, flags=re.I)


def _same_model(asked: str, recorded: str) -> bool:
    """Whether a model asked for (a preset's or config's name) is the one a record names: the asked name, in
    lower case without punctuation, inside the recorded one ("Llama-3.1-8B" is in
    "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")."""
    flat = lambda x: re.sub(r"[^a-z0-9]", "", str(x).lower())
    return flat(asked) in flat(recorded) or flat(recorded) in flat(asked)


def llama_server_record(kind: str = "shipped") -> Path:
    """The book's llama-server record of ``kind`` ("shipped": the shipped pair; "big"), as ``python -m
    specnotes.serve.engine measure --record`` wrote it into data/reference/llama-server."""
    from importlib import resources

    folder = Path(str(resources.files("specnotes").joinpath("data", "reference", "llama-server")))
    found = sorted(folder.glob(f"{validate.choice('kind', kind, ('shipped', 'big'))}-*.json"))
    if not found:
        raise validate.BadArgument(f"no {kind}-*.json in {folder}")
    return found[0]


def _device_name(name) -> str | None:
    """A CPU's name as a record writes it, without trademark marks ("Intel(R) Xeon(R)" → "Intel Xeon")."""
    return None if name is None else re.sub(r"\s+", " ", re.sub(r"\((R|TM)\)", "", str(name), flags=re.I)).strip()


SCHEMA = "specnotes.results/1"
RECORD_MAX_BYTES = 64 << 20  # a record of hundreds of pairs is a few MB
MOST_BANDWIDTH = 1e15  # B/s: 200x an H200's 4.8 TB/s; a roof past it is a unit slip
MOST_FLOPS = 1e18  # FLOP/s: 500x an H200's dense fp8
MOST_SPEEDUP = K_MOST + 1  # k drafts give at most k + 1 tokens a step


class _Fields:
    """Checks of one record's fields: each names the file and the field's path and gives the allowed range."""

    def __init__(self, path: Path):
        self.where = f"from_record: {path}"

    def fail(self, at: str, message: str, kind=validate.BadArgument):
        raise kind(f"{self.where}: {at} {message}")

    def obj(self, at: str, value, required: bool = False) -> dict:
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            self.fail(at, f"must be a JSON object, got {validate.shown(value)}", validate.BadArgumentType)
        return value

    def text(self, at: str, value) -> str | None:
        if value is not None and not isinstance(value, str):
            self.fail(at, f"must be a string, got {validate.shown(value)}", validate.BadArgumentType)
        return value

    def check(self, check, at: str, value, **limits):
        try:
            return check(at, value, **limits)
        except validate.BadArgument as err:
            raise type(err)(f"{self.where}: {err}") from None

    def shape(self, at: str, value, name: str, fp32: bool = False) -> ModelShape:
        """A model's shape as a record writes it (``notes["target_config"]``: n_layers, d_model, n_heads, d_ff,
        vocab_size (256 for ``fp32``, the big model's), optionally n_kv_heads, weight_bytes, kv_bytes and compute:
        4, 4 and fp32 if not), within a config.json's bounds (``SHAPE_LIMITS``)."""
        c = self.obj(at, value)
        c = {**c, "n_kv_heads": c.get("n_heads") if c.get("n_kv_heads") is None else c["n_kv_heads"],
             "vocab_size": c.get("vocab_size", 256 if fp32 else None)}
        keys = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size")
        ints = [self.check(validate.integer, f"{at}.{key}", c.get(key), low=1, high=most)
                for key, (_, most) in zip(keys, SHAPE_LIMITS, strict=True)]
        nums = {key: self.check(validate.number, f"{at}.{key}", c.get(key, 4), low=0, high=8, low_open=True)
                for key in ("weight_bytes", "kv_bytes")}
        compute = self.check(validate.choice, f"{at}.compute", c.get("compute", "fp32"),
                             options=hardware.DTYPE_BYTES)
        try:
            return ModelShape(*ints, **nums, compute=compute, name=name)
        except validate.BadArgument as err:
            self.fail(at, f"is no model: {err}")


def read_record(path) -> dict:
    """The one validating reader of a record that ``python -m specnotes.bench serve-speedup`` or ``python -m
    specnotes.serve.engine measure`` wrote (schema specnotes.results/1, section engine_speedup): S per concurrency
    (the median over the record's pairs of the engine's own TPOT ratio where it timed itself, else the
    client's), their quartiles, and what the record says of the deployment: k, the target and draft (their
    shapes where the record carries them), the device (a CPU's measured roofs), the context and the acceptance
    specnotes measured. Every field it reads is checked: a bad one is a BadArgument that names the file, the
    field's path (``sections.engine_speedup[3].params.concurrency``), the value and the allowed range."""
    path = Path(path)
    f = _Fields(path)
    doc = validate.json_file(path, "from_record", RECORD_MAX_BYTES)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("sections"), dict) \
            or not doc["sections"].get("engine_speedup"):
        raise validate.BadArgument(f"from_record: {str(path)!r} is not an S(B) record (schema {SCHEMA} with an "
                                   "engine_speedup section, as bench serve-speedup and engine measure write)")
    rows = doc["sections"]["engine_speedup"]
    if not isinstance(rows, list):
        f.fail("sections.engine_speedup", f"must be a list of records, got {validate.shown(rows)}",
               validate.BadArgumentType)
    prov, notes = f.obj("provenance", doc.get("provenance")), f.obj("notes", doc.get("notes"))
    build = f.obj("provenance.engine_build", prov.get("engine_build"))
    labels = " ".join(x for x in (f.text("provenance.label", prov.get("label")),
                                  f.text("notes.on.label", f.obj("notes.on", notes.get("on")).get("label"))) if x)
    k_at, k = ("notes.k", notes["k"]) if notes.get("k") is not None else ("provenance.engine_build.k", build.get("k"))
    label_k = re.search(r"\bk\s*=\s*(\d{1,9})\b", labels)
    if k is None and label_k:
        k_at, k = "the label's k", int(label_k.group(1))
    k = None if k is None else f.check(validate.integer, k_at, k, low=1, high=K_MOST)
    by: dict[int, list] = {}
    for i, r in enumerate(rows):
        at = f"sections.engine_speedup[{i}]"
        params = f.obj(f"{at}.params", f.obj(at, r, True).get("params"), True)
        extra = f.obj(f"{at}.extra", r.get("extra"))
        key = "speedup_engine_tpot" if extra.get("speedup_engine_tpot") is not None else "speedup"
        if extra.get(key) is None:
            continue
        b = f.check(validate.integer, f"{at}.params.concurrency", params.get("concurrency"), low=1,
                    high=NO_MEMORY_LIMIT)
        by.setdefault(b, []).append(f.check(validate.number, f"{at}.extra.{key}", extra[key], low=0, low_open=True,
                                            high=MOST_SPEEDUP if k is None else k + 1))
    if not by:
        raise validate.BadArgument(f"from_record: {str(path)!r} holds no speedup")
    roofs = notes.get("roofs")
    if roofs is not None:
        roofs = f.obj("notes.roofs", roofs)
        roof = lambda key, most: f.check(validate.number, f"notes.roofs.{key}", roofs.get(key), low=0, high=most,
                                         low_open=True)
        roofs = {**roofs, "bandwidth": roof("bandwidth", MOST_BANDWIDTH), "flops": roof("flops", MOST_FLOPS),
                 "dtype": f.check(validate.choice, "notes.roofs.dtype", roofs.get("dtype", "fp32"),
                                  options=hardware.DTYPE_BYTES)}
    params = rows[0]["params"]
    engine = f.text("provenance.engine_build.engine", build.get("engine"))
    context = None
    if "llama-server" in str(engine or "") and "prompt_chars" in params and "max_tokens" in params:
        prompt = f.check(validate.integer, "sections.engine_speedup[0].params.prompt_chars", params["prompt_chars"],
                         low=0, high=MAX_CONTEXT)
        tokens = f.check(validate.integer, "sections.engine_speedup[0].params.max_tokens", params["max_tokens"],
                         low=1, high=2 * (MAX_CONTEXT - prompt))
        context = prompt + tokens // 2  # one token per byte, mid-decode
    alpha = f.obj("notes.specnotes_acceptance", notes.get("specnotes_acceptance")).get("alpha")
    alpha = None if alpha is None else f.check(validate.probability, "notes.specnotes_acceptance.alpha", alpha)
    model = f.text("provenance.engine_build.model", build.get("model")) or \
        f.text("provenance.engine_model", prov.get("engine_model"))
    draft = f.text("provenance.engine_build.draft", build.get("draft"))
    host = f.text("provenance.engine_build.cpu", build.get("cpu")) or f.text("provenance.host", prov.get("host"))
    shapes = {}  # model name → its shape: engine measure --big's model, or a GGUF pair of the reader's own
    if notes.get("big_config") is not None and model is not None:
        shapes[_model_name(model)] = f.shape("notes.big_config", notes["big_config"], _model_name(model), True)
    for which, name in (("target", model), ("draft", draft)):
        if name is not None and notes.get(f"{which}_config") is not None:
            shapes.setdefault(_model_name(name), f.shape(f"notes.{which}_config", notes[f"{which}_config"],
                                                         _model_name(name)))
    median = lambda xs: sorted(xs)[len(xs) // 2] if len(xs) % 2 else sum(sorted(xs)[len(xs) // 2 - 1:][:2]) / 2
    quart = lambda xs: (sorted(xs)[len(xs) // 4], sorted(xs)[(3 * len(xs)) // 4]) if len(xs) > 1 else (xs[0], xs[0])
    return {"path": str(path), "speedups": {b: median(v) for b, v in sorted(by.items())},
            "quartiles": {b: quart(v) for b, v in sorted(by.items())}, "pairs": {b: len(v) for b, v in by.items()},
            "k": k, "model": model, "draft": draft, "device": _device_name(host) if roofs else None, "roofs": roofs,
            "gpu": f.text("provenance.engine_build.gpu", build.get("gpu")) or f.text("provenance.gpu", prov.get("gpu")),
            "context": context, "alpha": alpha, "engine": engine, "shapes": shapes}


def record_inputs(rec: dict, given: dict, use=None) -> dict:
    """``deployment`` arguments from a record (``read_record``) merged with the ones given on the command line
    (``given``: deployment's keyword arguments, None where not given): what the record says fills what is not
    given, and a record that disagrees with what is given is refused, saying both: the model, the draft, k, the
    GPU or the roofs given by hand, the dtype its roofs were measured in, and the context it ran at. A model the
    record names loosely ("meta-llama/Llama-3.1-8B-Instruct") is read as its preset, and a note
    (``notes``) says so. ``use``: the batches of the record to anchor on (default: all); the others are held
    back."""
    out = dict(given)
    where = rec["path"]
    names = {**_shipped_shapes(), **rec["shapes"]}
    notes = list(given.get("notes") or ())
    for which in ("target", "draft"):
        recorded = rec["model"] if which == "target" else rec["draft"]
        if recorded is None:
            continue
        asked = given.get(which)
        shape_given = given.get(f"{which}_shape") is not None
        if asked is None and not shape_given:
            name = _model_name(recorded)
            if name not in names:
                try:
                    name, why = resolve(which, name, cost.PRESETS, "a preset")
                except validate.BadArgument:
                    raise validate.BadArgument(f"{which}: the record {where} ran {recorded!r}, which is no preset: "
                                               f"give --{which} (a preset or a config.json) or --{which}-shape") \
                        from None
                notes.append(f"the record's {which} {recorded} read as the preset {name}{f' ({why})' if why else ''}")
            out[which] = names.get(name) or cost.PRESETS[name]
        elif asked is not None and not _same_model(getattr(asked, "name", asked), _model_name(recorded)):
            raise validate.BadArgument(f"{which} {getattr(asked, 'name', asked)!r} disagrees with the record {where}, "
                                       f"which ran {recorded!r}: drop --{which} or pass a record of this model")
    both = [out.get(w) for w in ("target", "draft")]
    if all(isinstance(x, ModelShape) for x in both) and both[0].vocab != both[1].vocab and given.get("draft") is None:
        raise validate.BadArgument(f"from_record: {where}: its draft's vocabulary ({both[1].vocab}) is not its "
                                   f"target's ({both[0].vocab}): no engine drafts across vocabularies")
    if rec["k"] is not None:
        if given.get("k") is not None and str(given["k"]).strip() != str(rec["k"]):
            raise validate.BadArgument(f"k {given['k']} disagrees with the record {where}, which ran k = {rec['k']}: "
                                       "drop --k or pass a record measured at this k")
        out["k"] = str(rec["k"])
    if rec["roofs"]:
        roofs = rec["roofs"]
        measured_on = (f"{rec['device'] or 'a CPU'} (its roofs: {roofs['bandwidth'] / 1e9:.1f} GB/s, "
                       f"{roofs['flops'] / 1e9:.0f} GFLOP/s in {roofs['dtype']})")
        if given.get("gpu_name") is not None:
            raise validate.BadArgument(f"gpu {given['gpu_name']} disagrees with the record {where}, which was measured "
                                       f"on {measured_on}: drop --gpu (the record's roofs are used) or pass a record "
                                       "measured on that GPU")
        hand = [f"--{k} {given[k]:g}" for k in ("bandwidth", "peak") if given.get(k) is not None]
        if hand:
            raise validate.BadArgument(f"the roofs given by hand ({' and '.join(hand)}) disagree with the record "
                                       f"{where}, which was measured on {measured_on}: drop them (the record's roofs "
                                       "are used) or pass a record measured on that device")
        if given.get("dtype") is not None and given["dtype"] != roofs["dtype"]:
            raise validate.BadArgument(f"dtype {given['dtype']} disagrees with the record {where}, whose roofs were "
                                       f"measured in {roofs['dtype']}: drop --dtype or pass a record measured in "
                                       f"{given['dtype']}")
        out["bandwidth"], out["peak"] = roofs["bandwidth"] / 1e9, roofs["flops"] / 1e12
        out["dtype"] = roofs["dtype"]
        out["device_label"] = f"{rec['device'] or 'the recording CPU'} (roofs measured by the record)"
    elif rec["gpu"] and given.get("gpu_name") and not _same_model(given["gpu_name"], rec["gpu"]):
        raise validate.BadArgument(f"gpu {given['gpu_name']} disagrees with the record {where}, which was measured on "
                                   f"{rec['gpu']}: pass --gpu {rec['gpu']} or a record measured on {given['gpu_name']}")
    if rec["context"] is not None:
        if given.get("context") is not None and given["context"] != rec["context"]:
            raise validate.BadArgument(f"context {given['context']} disagrees with the record {where}, which was "
                                       f"measured at L = {rec['context']} tokens: drop --context (the record's is "
                                       "used) or pass a record measured at this context")
        out["context"] = rec["context"]
    if given.get("alpha") is None and given.get("mean_accepted") is None and rec["alpha"] is not None:
        out["alpha"] = rec["alpha"]
        out["alpha_note"] = "from the record: specnotes' own decoder on the engine's prompts, at temperature 0"
    use = sorted(rec["speedups"]) if use is None else use
    missing = [b for b in use if b not in rec["speedups"]]
    if missing:
        raise validate.BadArgument(f"record_batches: the record {where} has no B = {', '.join(map(str, missing))}; it "
                                   f"has {', '.join(map(str, rec['speedups']))}")
    points = [(b, rec["speedups"][b]) for b in use]
    out["measured"] = list(points) + [tuple(p) for p in measured_points(given["measured"])] \
        if given.get("measured") else points
    out["measured_from"] = f"the record {Path(where).name}"
    out["held_back"] = tuple((b, s) for b, s in rec["speedups"].items() if b not in use)
    out["quartiles"] = rec["quartiles"]
    out["notes"] = tuple(notes)
    return out
