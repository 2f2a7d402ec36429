"""The three readers of files the package reads, fuzzed: a config.json (``moe.read_config``), a record of the reader's
own S(B) (``advise.read_record``, then ``record_inputs``) and a GGUF header (``gguf_header.parse_header``). Each gets
structured inputs (a valid file with fields replaced by any JSON value, or a GGUF header built from random fields
with counts that may lie) and byte mutations of a valid file (flips, inserts, deletes, truncation, 4- and 8-byte
integers overwritten): only a ``ValueError`` or a valid result may come out, and a valid result is within the
reader's stated bounds.

Examples per test: ``SPECNOTES_FUZZ_EXAMPLES``, default 100, derandomized (seconds, repeatable, in ``make unit``);
``make fuzz`` runs 10,000 random ones each, issue 45's 10k per reader twice over: 192 CPU-seconds for the six (8 min
wall on a shared 2-core machine). It is not part of ``make test``, whose unit step takes 6 min.
"""

from __future__ import annotations

import copy
import json
import math
import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from named_cases import DEEPSEEK_V3, LLAMA_8B, QWEN3_MOE, gpu_record, shipped_record

from specnotes import advise, validate
from specnotes.analytic import moe
from specnotes.analytic.cost import ModelShape
from specnotes.tiny import gguf_header

EXAMPLES = int(os.environ.get("SPECNOTES_FUZZ_EXAMPLES", "100"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=EXAMPLES <= 1000,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # make unit: repeatable
TMP = Path(tempfile.mkdtemp(prefix="specnotes-fuzz-"))
EDGES = [0, 1, -1, 2, 255, 256, 2**31 - 1, 2**32 - 1, 2**53 + 1, 2**63 - 1, 2**64 - 1, 2**64, 10**30, 10**400]
scalars = (st.none() | st.booleans() | st.integers() | st.sampled_from(EDGES) | st.floats()
           | st.text(max_size=12) | st.sampled_from(["", "all", "2", "1e30", "NaN", "fp32", "llama-server"]))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
DELETE = object()


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """``data`` after one to eight edits: a byte replaced, bytes inserted or deleted, the end cut off, or a 4- or
    8-byte little-endian integer written over (a count or a length, in a binary header)."""
    b = bytearray(data)
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, max(len(b) - 1, 0)))
        op = draw(st.sampled_from(["byte", "insert", "delete", "cut", "u32", "u64"]))
        if op == "byte" and b:
            b[i] = draw(st.integers(0, 255))
        elif op == "insert":
            b[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del b[i:i + draw(st.integers(1, 16))]
        elif op == "cut":
            del b[i:]
        elif op in ("u32", "u64"):
            bits = 32 if op == "u32" else 64
            n = draw(st.sampled_from([e for e in EDGES if 0 <= e < 2**bits]) | st.integers(0, 2**bits - 1))
            b[i:i + bits // 8] = n.to_bytes(bits // 8, "little")
    return bytes(b)


def write(name: str, data) -> Path:
    path = TMP / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    return path


def dumps(doc) -> str | None:
    try:
        return json.dumps(doc)
    except ValueError:  # an integer past the digits Python prints
        return None


# ---------------------------------------------------------------------------------------------- config.json

CONFIG_KEYS = sorted({*QWEN3_MOE, *DEEPSEEK_V3, *LLAMA_8B, *moe.EXPERT_KEYS, *moe.PER_TOKEN_KEYS, "moe_layers",
                      "interleave_moe_layer_step", "text_config", "head_dim", "intermediate_size_mlp",
                      "shared_expert_intermediate_size", "num_shared_experts", "_name_or_path"})
LLAMA4 = {"model_type": "llama4", "text_config": {
    "model_type": "llama4_text", "head_dim": 128, "hidden_size": 5120, "interleave_moe_layer_step": 1,
    "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_attention_heads": 40, "num_experts_per_tok": 1,
    "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16, "vocab_size": 202048}}
CONFIGS = [QWEN3_MOE, DEEPSEEK_V3, LLAMA_8B, LLAMA4]


def valid_shape(shape) -> None:
    """A shape a config gave: within the reader's bounds, its sizes finite."""
    assert isinstance(shape, ModelShape)
    assert 1 <= shape.n_layers <= moe.MAX_LAYERS and 1 <= shape.vocab <= moe.MAX_VOCAB
    assert shape.d_model <= moe.MAX_WIDTH and shape.d_ff <= moe.MAX_WIDTH and shape.n_heads <= moe.MAX_HEADS
    assert math.isfinite(shape.params) and math.isfinite(shape.kv_bytes_per_token)


@fuzz
@given(base=st.sampled_from(CONFIGS), changes=st.dictionaries(st.sampled_from(CONFIG_KEYS),
                                                               json_values | st.just(DELETE), max_size=6),
       nested=st.booleans())
def test_the_config_reader_takes_any_fields(base, changes, nested):
    config = copy.deepcopy(base)
    target = config["text_config"] if nested and "text_config" in config else config
    for key, value in changes.items():
        target.pop(key, None) if value is DELETE else target.__setitem__(key, value)
    try:
        shape = moe.shape_from_config(config)
    except ValueError:
        return
    valid_shape(shape)


CONFIG_TEXTS = [json.dumps(c, indent=1).encode() for c in CONFIGS]


@fuzz
@given(data=st.sampled_from(CONFIG_TEXTS).flatmap(mutated))
def test_the_config_reader_takes_any_bytes(data):
    try:
        shape = moe.read_config(write("config.json", data))
    except ValueError as err:
        assert "config" in str(err)  # the file is named
        return
    valid_shape(shape)


# ---------------------------------------------------------------------------------------------- records


def small_shipped() -> dict:
    """The shipped llama-server record with its first pairs only (what the reader reads, faster to parse)."""
    doc = shipped_record()
    doc["sections"] = {"engine_speedup": doc["sections"]["engine_speedup"][:6]}
    doc["notes"].pop("engine_runs", None)
    doc["notes"]["target_config"] = {"n_layers": 4, "d_model": 192, "n_heads": 4, "d_ff": 576, "vocab_size": 256}
    return doc


def big_config_record() -> dict:
    doc = small_shipped()
    doc["notes"]["big_config"] = {"n_layers": 6, "d_model": 768, "n_heads": 12, "d_ff": 2048, "vocab_size": 256}
    doc["provenance"]["engine_build"]["model"] = doc["provenance"]["engine_build"]["draft"] = "random-big-f32.gguf"
    return doc


RECORDS = [small_shipped(), gpu_record(), big_config_record()]
ROW_KEYS = [("params",), ("params", "concurrency"), ("params", "prompt_chars"), ("params", "max_tokens"), ("extra",),
            ("extra", "speedup"), ("extra", "speedup_engine_tpot"), ()]
DOC_KEYS = [("schema",), ("sections",), ("sections", "engine_speedup"), ("provenance",), ("notes",),
            *[("provenance", k) for k in ("engine_build", "label", "host", "gpu", "engine_model")],
            *[("provenance", "engine_build", k) for k in ("k", "model", "draft", "cpu", "gpu", "engine")],
            *[("notes", k) for k in ("k", "roofs", "on", "specnotes_acceptance", "big_config", "target_config",
                                     "draft_config")],
            *[("notes", "roofs", k) for k in ("bandwidth", "flops", "dtype")], ("notes", "on", "label"),
            ("notes", "specnotes_acceptance", "alpha"),
            *[("notes", c, k) for c in ("big_config", "target_config") for k in ("n_layers", "d_model", "n_heads",
                                                                                 "n_kv_heads", "d_ff", "vocab_size",
                                                                                 "weight_bytes", "compute")]]


def put(doc, path, value) -> None:
    """``doc`` at ``path`` set to ``value`` (DELETE: removed), where every step exists and is a container."""
    *keys, last = path
    for k in keys:
        if not isinstance(doc, (dict, list)) or (isinstance(doc, dict) and k not in doc) or \
                (isinstance(doc, list) and not (isinstance(k, int) and k < len(doc))):
            return
        doc = doc[k]
    if isinstance(doc, dict):
        doc.pop(last, None) if value is DELETE else doc.__setitem__(last, value)
    elif isinstance(doc, list) and isinstance(last, int) and last < len(doc):
        doc.pop(last) if value is DELETE else doc.__setitem__(last, value)


GIVEN = advise.deployment_kwargs(advise.parser().parse_args([]))


def valid_record(rec: dict) -> None:
    """What the reader returns is within its ranges, and merging it with no flags gives a value or a ValueError."""
    assert rec["speedups"] and all(1 <= b <= advise.NO_MEMORY_LIMIT for b in rec["speedups"])
    most = advise.records.MOST_SPEEDUP if rec["k"] is None else rec["k"] + 1
    assert all(0 < s <= most and math.isfinite(s) for s in rec["speedups"].values())
    assert rec["k"] is None or 1 <= rec["k"] <= advise.inputs.K_MOST
    assert rec["alpha"] is None or 0 <= rec["alpha"] <= 1
    assert rec["context"] is None or 0 <= rec["context"] <= advise.MAX_CONTEXT
    assert rec["roofs"] is None or (0 < rec["roofs"]["bandwidth"] <= 1e15 and 0 < rec["roofs"]["flops"] <= 1e18)
    try:
        advise.record_inputs(rec, GIVEN)
    except ValueError:
        pass


@fuzz
@given(base=st.sampled_from(RECORDS), changes=st.lists(st.tuples(
    st.sampled_from(DOC_KEYS) | st.tuples(st.integers(0, 6), st.sampled_from(ROW_KEYS)).map(
        lambda ik: ("sections", "engine_speedup", ik[0], *ik[1])),
    json_values | st.just(DELETE)), min_size=1, max_size=5))
def test_the_record_reader_takes_any_fields(base, changes):
    doc = copy.deepcopy(base)
    for path, value in changes:
        put(doc, path, value)
    text = dumps(doc)
    if text is None:
        return
    try:
        rec = advise.read_record(write("record.json", text))
    except ValueError as err:
        assert str(err).startswith("from_record: ")  # the flag's name first: the CLI maps it to --from-record
        return
    valid_record(rec)


RECORD_TEXTS = [json.dumps(r).encode() for r in RECORDS]


@fuzz
@given(data=st.sampled_from(RECORD_TEXTS).flatmap(mutated))
def test_the_record_reader_takes_any_bytes(data):
    try:
        rec = advise.read_record(write("record.json", data))
    except ValueError as err:
        assert str(err).startswith("from_record: ")
        return
    valid_record(rec)


# ---------------------------------------------------------------------------------------------- GGUF headers


def gguf_string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


SCALAR_VALUES = {0: st.integers(0, 255), 1: st.integers(-128, 127), 2: st.integers(0, 2**16 - 1),
                 3: st.integers(-2**15, 2**15 - 1), 4: st.integers(0, 2**32 - 1), 5: st.integers(-2**31, 2**31 - 1),
                 6: st.floats(width=32), 7: st.integers(0, 3), 10: st.integers(0, 2**64 - 1),
                 11: st.integers(-2**63, 2**63 - 1), 12: st.floats()}
FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}


@st.composite
def gguf_value(draw, depth: int = 0) -> tuple[int, bytes]:
    """(a value type, its bytes): any type id (unknown ones too), arrays of any element type (arrays of arrays,
    which the reader refuses, too) whose declared count may lie."""
    kind = draw(st.sampled_from([*FORMATS, 8, 9, 13, 2**32 - 1]))
    if kind in FORMATS:
        return kind, struct.pack("<" + FORMATS[kind], draw(SCALAR_VALUES[kind]))
    if kind == 8:
        return kind, gguf_string(draw(st.binary(max_size=12)))
    if kind == 9 and depth == 0:
        items = draw(st.lists(gguf_value(depth=1), max_size=4))
        element = items[0][0] if items and draw(st.booleans()) else draw(st.sampled_from([*FORMATS, 8, 9, 13]))
        count = draw(st.sampled_from([len(items)]) | st.sampled_from(EDGES[:11]).filter(lambda n: n >= 0))
        return kind, struct.pack("<IQ", element, count) + b"".join(v for _, v in items)
    return kind, draw(st.binary(max_size=8))


@st.composite
def gguf_headers(draw) -> bytes:
    """A GGUF header from random fields: version, pairs (keys that may repeat, or not be UTF-8), tensors (any
    dimension count, type and offset), and declared counts that may not match what follows."""
    pairs = draw(st.lists(st.tuples(st.sampled_from([b"general.alignment", b"tokenizer.ggml.tokens", b"a"])
                                    | st.binary(max_size=10), gguf_value()), max_size=5))
    tensors = draw(st.lists(st.tuples(st.binary(max_size=10), st.lists(st.sampled_from(EDGES[:11]).filter(
        lambda n: n >= 0), max_size=5), st.integers(0, 2**32 - 1), st.sampled_from([0, 32, 64, 2**63])),
        max_size=3))
    version = draw(st.sampled_from([3, 3, 2, 1, 4, 2**24 * 3]))
    n_tensors = draw(st.sampled_from([len(tensors)]) | st.sampled_from(EDGES[:11]).filter(lambda n: n >= 0))
    n_pairs = draw(st.sampled_from([len(pairs)]) | st.sampled_from(EDGES[:11]).filter(lambda n: n >= 0))
    out = gguf_header.MAGIC + struct.pack("<IQQ", version, n_tensors, n_pairs)
    out += b"".join(gguf_string(k) + struct.pack("<I", kind) + v for k, (kind, v) in pairs)
    out += b"".join(gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
                    + struct.pack("<IQ", kind, offset) for name, dims, kind, offset in tensors)
    return out + draw(st.binary(max_size=64))


def valid_header(header, size: int) -> None:
    """A header the reader took: within its bounds, every tensor's data starting inside the file's ``size``."""
    assert header.version in gguf_header.VERSIONS and header.data_start <= max(size, header.data_start)
    assert len(header.metadata) <= gguf_header.MAX_PAIRS and len(header.tensors) <= gguf_header.MAX_TENSORS
    for dims, kind, offset in header.tensors.values():
        assert 1 <= len(dims) <= gguf_header.MAX_DIMS and kind <= gguf_header.MAX_TYPE and math.prod(dims) < 2**63
        assert header.data_start + offset <= size


@fuzz
@given(data=gguf_headers())
def test_the_gguf_reader_takes_any_header(data):
    try:
        header = gguf_header.parse_header(data, "fuzz.gguf")
    except ValueError as err:
        assert "fuzz.gguf" in str(err)
        return
    valid_header(header, len(data))


def gguf_file() -> bytes:
    from gguf_files import vocab_file

    path = vocab_file(TMP / "base.gguf", [f"t{i}" for i in range(20)])
    return path.read_bytes()


GGUF_BYTES = gguf_file()


@fuzz
@given(data=mutated(GGUF_BYTES))
def test_the_gguf_reader_takes_any_bytes(data):
    try:
        header = gguf_header.read_header(write("mutated.gguf", data))
    except ValueError as err:
        assert "mutated.gguf" in str(err)
        return
    valid_header(header, len(data))
    from specnotes.tiny import gguf_export

    try:  # what the engine reads of it: the vocabulary's fields checked, or a ValueError
        gguf_export.vocabulary(TMP / "mutated.gguf")
    except ValueError:
        pass


# ---------------------------------------------------------------------------------------------- the fuzzers can fail


def _unchecked_int(config, key, where, low=1, high=0):
    return config.get(key)


def _unchecked_obj(self, at, value, required=False):
    return {} if value is None else value


def _unchecked_take(self, n, what):
    self.pos += n
    return self.buf[self.pos - n:self.pos]


@pytest.mark.parametrize("fuzzer, where, name, broken", [
    (test_the_config_reader_takes_any_fields, moe, "_int", _unchecked_int),
    (test_the_record_reader_takes_any_fields, advise.records._Fields, "obj", _unchecked_obj),
    (test_the_gguf_reader_takes_any_bytes, gguf_header._Bytes, "take", _unchecked_take),
])
def test_each_fuzzer_finds_a_reader_without_its_checks(fuzzer, where, name, broken, monkeypatch):
    """With one check taken out of a reader (a config field's type and range, a record's objects, the GGUF
    reader's end of the bytes), its fuzzer finds an input that gives something other than a ValueError or a valid
    result: a TypeError, an AttributeError, a struct.error."""
    monkeypatch.setattr(where, name, broken)
    with pytest.raises(Exception) as found:
        fuzzer()
    assert not isinstance(found.value, validate.BadArgument), found.value
