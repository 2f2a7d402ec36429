"""The published record: measurements from papers, blogs and repositories, with provenance.

One JSON file per source in ``specnotes/data/published/``. ``load(name)`` reads one and checks it;
``names()`` lists them. A source holds one or more *series*; every series says

- ``source``: where the numbers are (``url``, and/or ``repo`` + ``path`` + a 40-hex ``commit``),
- ``figure``: which figure or table, ``what`` it measures,
- ``how_read``: how the numbers were obtained ("read from the vector PDF ...", "copied from the table"),
  and ``uncertainty``: ± on each value (null where the numbers are copied exactly),
- ``setup``: the experiment (target, draft, accelerator, tp, engine and version, k, α or tokens per
  iteration, context, dataset, ...). A value is a string, a number, a bool, a [low, high] range when
  the source only bounds it, or null when the source does not give it; every null is explained in
  ``missing`` (and every entry of ``missing`` is a null),
- either ``points`` (rows whose keys are ``columns``) or ``values`` (named numbers, with ``units``).

Setup keys with a fixed meaning are checked: ``accelerator`` is a row of ``hardware.DEVICES``;
``weight_bits`` (bits per stored weight: 4 for INT4 AWQ or a 4-bit float, 8 for FP8, 16 for bf16),
``weight_format`` (one of ``WEIGHT_FORMATS``, whose bits must agree with ``weight_bits``) and ``kv_bytes``
(bytes per cached K or V element: 1 for an fp8 KV cache) describe quantized deployments. Point columns with
a fixed meaning are checked too (``POINT_COLUMNS``): a batch or concurrency is a whole number >= 1, a speedup
or throughput positive, a mean acceptance length at least 1.

Nothing here is fitted or invented: a number the source does not give is null or a range.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from dataclasses import dataclass
from functools import cache
from importlib import resources

from specnotes import validate
from specnotes.analytic.hardware import DEVICES

_TOP = {"name", "title", "reference", "url", "summary", "series", "notes"}
_SERIES = {"id", "figure", "what", "source", "how_read", "uncertainty", "setup", "missing", "notes",
           "columns", "points", "values", "units"}
_COMMIT = re.compile(r"[0-9a-f]{40}")
_ID = re.compile(r"[a-z0-9_]+")

# Stored weight formats and their bits per weight (the scales of a block format are not counted).
WEIGHT_FORMATS = {"bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4-awq": 4, "int4-gptq": 4, "nvfp4": 4,
                  "mxfp4": 4}
KV_BYTES = (0.5, 1, 2, 4)  # bytes per cached K or V element: fp4, fp8, bf16/fp16, fp32


def _whole(v, low):
    return _is_number(v) and v == int(v) and v >= low


# Point columns with a fixed meaning: (check, what it must be).
POINT_COLUMNS = {
    "batch": (lambda v: _whole(v, 1), "a whole number >= 1"),
    "concurrency": (lambda v: _whole(v, 1), "a whole number >= 1"),
    "k": (lambda v: _whole(v, 0), "a whole number >= 0"),
    "speedup": (lambda v: v > 0, "> 0"),
    "throughput_sd": (lambda v: v > 0, "> 0"),
    "throughput_plain": (lambda v: v > 0, "> 0"),
    "mean_acceptance_length": (lambda v: v >= 1, ">= 1 (the bonus token counts)"),
}


@dataclass(frozen=True)
class Series:
    """One measured curve, table or set of fitted constants, with its provenance (see the module docstring)."""

    id: str
    figure: str
    what: str
    source: dict
    how_read: str
    uncertainty: float | None
    setup: dict
    missing: dict
    notes: tuple[str, ...]
    columns: tuple[str, ...] = ()
    points: tuple[dict, ...] = ()
    values: dict | None = None
    units: dict | None = None

    def column(self, name: str) -> list:
        """One column of ``points``, in order."""
        validate.choice("column", name, self.columns)
        return [p[name] for p in self.points]

    def where(self, **match) -> list[dict]:
        """The points whose columns equal ``match`` (``where(context=32000)``)."""
        for key in match:
            validate.choice("column", key, self.columns)
        return [p for p in self.points if all(p[k] == v for k, v in match.items())]

    def describe(self, width: int = 96) -> str:
        """The series' provenance as wrapped text: figure, source, how read, setup, what is missing."""
        width = validate.integer("width", width, low=40)
        source = ", ".join(f"{k} {v}" for k, v in self.source.items())
        setup = "; ".join(f"{k} = {v}" for k, v in self.setup.items() if v is not None)
        missing = "; ".join(f"{k}: {v}" for k, v in self.missing.items()) or "nothing"
        parts = [("figure", self.figure), ("source", source), ("how read", self.how_read),
                 ("uncertainty", "exact as published" if self.uncertainty is None else f"±{self.uncertainty:g}"),
                 ("setup", setup), ("missing", missing)]
        return "\n".join(textwrap.fill(text, width, initial_indent=f"{name:>12}: ", subsequent_indent=" " * 14)
                         for name, text in parts)

    def weight_bytes(self) -> float | None:
        """Bytes per stored weight: ``weight_bits`` / 8 where the setup gives it, else from ``weight_format``
        or the ``dtype`` (bf16 2, fp8 1); None where the source says none of these."""
        bits = self.setup.get("weight_bits") or WEIGHT_FORMATS.get(self.setup.get("weight_format"))
        if bits is None:
            bits = WEIGHT_FORMATS.get(self.setup.get("dtype"))
        return None if bits is None else bits / 8

    def bounds(self, key: str) -> tuple[float, float]:
        """A numeric setup value as (low, high): a number gives (v, v), a range its two ends."""
        validate.choice("setup key", key, self.setup)
        value = self.setup[key]
        if isinstance(value, list):
            return float(value[0]), float(value[1])
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise validate.BadArgument(f"setup[{key!r}] of {self.id} is {value!r}, not a number or a range")
        return float(value), float(value)


@dataclass(frozen=True)
class Source:
    """One published source: its title, BibTeX key(s), URL and series."""

    name: str
    title: str
    reference: tuple[str, ...]
    url: str
    summary: str
    series: tuple[Series, ...]
    notes: tuple[str, ...]

    def ids(self) -> list[str]:
        return [s.id for s in self.series]

    def __getitem__(self, series_id: str) -> Series:
        for s in self.series:
            if s.id == series_id:
                return s
        raise validate.BadArgument(f"{self.name} has no series {series_id!r}; it has {', '.join(self.ids())}")


def _folder():
    return resources.files("specnotes").joinpath("data", "published")


def names() -> list[str]:
    """The published sources shipped with the package (file names without .json)."""
    return sorted(p.name[:-5] for p in _folder().iterdir() if p.name.endswith(".json"))


@cache
def load(name: str) -> Source:
    """The published source ``name`` (see ``names()``), checked field by field."""
    validate.choice("name", name, names())
    doc = json.loads(_folder().joinpath(f"{name}.json").read_text(encoding="utf-8"))
    return parse(doc, name)


def parse(doc: dict, name: str) -> Source:
    """Check a published record (the parsed JSON of one file) and build its ``Source``.

    Raises ``validate.BadArgument`` naming the field that is missing or wrong.
    """
    _require(isinstance(doc, dict), name, "the file must hold a JSON object")
    _keys(doc, _TOP, _TOP, name)
    _require(doc["name"] == name, name, f"'name' is {doc['name']!r}, but the file is {name}.json")
    for key in ("title", "url", "summary"):
        _text(doc[key], f"{name}.{key}")
    refs = [doc["reference"]] if isinstance(doc["reference"], str) else doc["reference"]
    _require(isinstance(refs, list) and refs and all(isinstance(r, str) and r for r in refs), name,
             "'reference' must be a BibTeX key or a list of them")
    _require(isinstance(doc["series"], list) and doc["series"], name, "'series' must be a non-empty list")
    series = tuple(_series(s, f"{name}.series[{i}]") for i, s in enumerate(doc["series"]))
    ids = [s.id for s in series]
    _require(len(set(ids)) == len(ids), name, "series ids must be unique")
    return Source(name, doc["title"], tuple(refs), doc["url"], doc["summary"], series, _notes(doc["notes"], name))


def _series(s: dict, where: str) -> Series:
    _require(isinstance(s, dict), where, "a series must be a JSON object")
    required = {"id", "figure", "what", "source", "how_read", "uncertainty", "setup", "missing", "notes"}
    _keys(s, required, _SERIES, where)
    where = f"{where} ({s['id']})"
    _require(isinstance(s["id"], str) and _ID.fullmatch(s["id"]), where, "'id' must be lower-case letters, digits, _")
    for key in ("figure", "what"):
        _text(s[key], f"{where}.{key}")
    _text(s["how_read"], f"{where}.how_read", min_length=20)
    _source(s["source"], f"{where}.source")
    unc = s["uncertainty"]
    _require(unc is None or (_is_number(unc) and unc >= 0), where, "'uncertainty' must be null or a number >= 0")
    setup, missing = s["setup"], s["missing"]
    _require(isinstance(setup, dict) and isinstance(missing, dict), where, "'setup' and 'missing' must be objects")
    for key, value in setup.items():
        _setup_value(value, f"{where}.setup.{key}")
        if value is None:
            _require(key in missing, where, f"setup.{key} is null: say why in 'missing'")
    for key, why in missing.items():
        _require(setup.get(key, 0) is None, where, f"missing.{key} explains a value that is not null in 'setup'")
        _text(why, f"{where}.missing.{key}")
    accel = setup.get("accelerator")
    _require(accel is None or accel in DEVICES, where,
             f"setup.accelerator {accel!r} is not a row of hardware.DEVICES (put the wording in accelerator_text)")
    _quantization(setup, where)
    has_points, has_values = "points" in s, "values" in s
    _require(has_points != has_values, where, "give either 'points' (with 'columns') or 'values' (with 'units')")
    notes = _notes(s["notes"], where)
    common = dict(id=s["id"], figure=s["figure"], what=s["what"], source=s["source"], how_read=s["how_read"],
                  uncertainty=unc, setup=setup, missing=missing, notes=notes)
    if has_points:
        columns = s.get("columns")
        _require(isinstance(columns, list) and columns and all(isinstance(c, str) for c in columns), where,
                 "'columns' must be a non-empty list of names")
        _require(isinstance(s["points"], list) and s["points"], where, "'points' must be a non-empty list")
        for j, p in enumerate(s["points"]):
            _require(isinstance(p, dict) and set(p) == set(columns), where, f"point {j} must have exactly {columns}")
            _require(all(_is_number(v) for v in p.values()), where, f"point {j} has a value that is not a number")
            for col, (ok, what) in POINT_COLUMNS.items():
                _require(col not in p or ok(p[col]), where, f"point {j}: {col} must be {what}; got {p.get(col)!r}")
        return Series(**common, columns=tuple(columns), points=tuple(s["points"]))
    values, units = s["values"], s.get("units")
    _require(isinstance(values, dict) and values and all(_is_number(v) for v in values.values()), where,
             "'values' must map names to finite numbers")
    _require(isinstance(units, dict) and set(units) == set(values), where, "'units' must name the unit of every value")
    return Series(**common, values=values, units=units)


def _quantization(setup: dict, where: str) -> None:
    """weight_bits, weight_format, kv_bytes and moe, where given: in range and consistent with each other."""
    bits, fmt, kv = setup.get("weight_bits"), setup.get("weight_format"), setup.get("kv_bytes")
    if bits is not None:
        _require(_is_number(bits) and bits == int(bits) and 1 <= bits <= 32, where,
                 f"setup.weight_bits must be a whole number of bits per weight from 1 to 32 (4 for INT4 AWQ or "
                 f"NVFP4, 8 for FP8, 16 for bf16); got {bits!r}")
    if fmt is not None:
        _require(fmt in WEIGHT_FORMATS, where,
                 f"setup.weight_format must be one of {', '.join(WEIGHT_FORMATS)}; got {fmt!r}")
        _require(bits is None or bits == WEIGHT_FORMATS[fmt], where,
                 f"setup.weight_bits {bits!r} disagrees with weight_format {fmt!r} ({WEIGHT_FORMATS[fmt]} bits)")
    moe = setup.get("moe")
    _require(moe is None or isinstance(moe, bool), where, f"setup.moe must be true or false; got {moe!r}")
    if kv is not None:
        _require(_is_number(kv) and kv in KV_BYTES, where,
                 f"setup.kv_bytes must be one of {', '.join(map(str, KV_BYTES))} bytes per cached element "
                 f"(1 for an fp8 KV cache); got {kv!r}")


def _source(src, where: str) -> None:
    _require(isinstance(src, dict) and src, where, "must be an object with 'url' and/or 'repo', 'path', 'commit'")
    repo = {"repo", "path", "commit"}
    _require(set(src) <= repo | {"url"}, where, f"unknown keys {sorted(set(src) - repo - {'url'})}")
    repo_keys = repo & set(src)
    _require("url" in src or repo_keys, where, "needs a 'url' or a 'repo' + 'path' + 'commit'")
    if "url" in src:
        _require(isinstance(src["url"], str) and src["url"].startswith(("https://", "http://")), where,
                 "'url' must be http(s)")
    if repo_keys:
        _require(repo_keys == repo, where, "a repository source needs 'repo', 'path' and 'commit'")
        _require(isinstance(src["repo"], str) and src["repo"].count("/") == 1, where, "'repo' must be owner/name")
        _text(src["path"], f"{where}.path")
        _require(isinstance(src["commit"], str) and _COMMIT.fullmatch(src["commit"]), where,
                 "'commit' must be 40 hex digits")


def _setup_value(value, where: str) -> None:
    if value is None or isinstance(value, str | bool) or _is_number(value):
        return
    ok = isinstance(value, list) and len(value) == 2 and all(_is_number(v) for v in value) and value[0] <= value[1]
    _require(ok, where, f"must be a string, number, bool, null or a [low, high] range; got {value!r}")


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _text(value, where: str, min_length: int = 1) -> None:
    _require(isinstance(value, str) and len(value.strip()) >= min_length, where,
             f"must be a text of at least {min_length} characters")


def _notes(notes, where: str) -> tuple[str, ...]:
    _require(isinstance(notes, list) and all(isinstance(n, str) and n for n in notes), where,
             "'notes' must be a list of texts")
    return tuple(notes)


def _keys(obj: dict, required: set, allowed: set, where: str) -> None:
    _require(not (required - set(obj)), where, f"missing {sorted(required - set(obj))}")
    _require(not (set(obj) - allowed), where, f"unknown keys {sorted(set(obj) - allowed)}")


def _require(ok, where: str, message: str) -> None:
    if not ok:
        raise validate.BadArgument(f"published record {where}: {message}")
