"""One record format, with one provenance block, for everything the book measures and ships.

- :func:`provenance`: where, when and how a number was measured (device, dtype and why, host, threads,
  versions, the date in one format, ``DATE_FORMAT``). The bench, the sampler benchmark, training and
  ``python -m specnotes.pages.refresh`` all write this block.
- :class:`Record`: one measured result (what, its samples and quartiles, derived rates).
- :class:`Results`: a JSON document (``SCHEMA``) of one provenance block and named sections of records:
  ``python -m specnotes.bench`` writes them (``bench chapters``, ``bench sampler``), the package ships
  them in ``data/``, and :func:`load_results` reads any of them back.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specnotes import validate
from specnotes.measure.devices import as_dtype, cpu_info, device_name, dtype_name, resolve
from specnotes.measure.dtypes import dtype_choice, last_choice
from specnotes.measure.timing import Timing

SCHEMA = "specnotes.results/1"
DATE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # ISO 8601, UTC, to the second: the only date format the book writes


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime(DATE_FORMAT)


def _driver_version() -> str | None:
    try:  # private API, present in recent torch builds; the value is e.g. 12040 for CUDA driver 12.4
        v = torch._C._cuda_getDriverVersion()
        return f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:
        return None


# The dtypes callers passed to provenance() in this process, per device, in order: what a chapter that
# measures in a fixed dtype (no probe) measured in, for the provenance its kernel reports at the end.
_GIVEN: dict[str, list[str]] = {}


def provenance(device: torch.device | str | None = None, dtype: torch.dtype | str | None = None, *,
               choose: bool = True, **extra) -> dict:
    """Where and how a number was measured: device, dtype and why that dtype (``dtype_reason``),
    host (GPU name, or CPU model with threads and vector capability), the CPU's vendor, family, model and
    GEMM-relevant flags (``cpu``: the host's CPU, also beside a GPU), CPU threads, torch, Python,
    CUDA and driver versions (None off CUDA), whether CUDA graphs or ``torch.compile`` were used (the
    book's measurements use neither: both False unless a caller says otherwise), the date
    (``DATE_FORMAT``), and any ``extra`` keys (the command, the seconds it took, ...). ``dtype=None``
    means the device's ``dtype_choice``; with ``choose=False``, the choice already made in this process,
    else the fixed dtype(s) earlier calls gave for this device, else none (dtype None)."""
    dev = resolve(device)
    given = _GIVEN.get(str(dev), [])
    if dtype is None and not choose and last_choice(dev) is None and given:
        name = ", ".join(given)
        reason = f"fixed by the chapter: it measures in {name} on every device, without the dtype probe"
    elif dtype is None and not choose and last_choice(dev) is None:
        name, reason = None, "no dtype chosen"
    elif dtype is None:
        choice = dtype_choice(dev) if choose else last_choice(dev)
        name, reason = choice.dtype, choice.reason
    else:
        name, choice = dtype_name(dtype), last_choice(dev)
        reason = choice.reason if choice is not None and choice.dtype == name else "given by the caller"
        if name not in given:
            _GIVEN[str(dev)] = [*given, name]
    on_cuda = dev.type == "cuda"
    return {
        "device": str(dev),
        "dtype": name,
        "dtype_reason": reason,
        "host": device_name(dev),
        "cpu": cpu_info(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda": torch.version.cuda if on_cuda else None,
        "driver": _driver_version() if on_cuda else None,
        "cuda_graphs": False,
        "compiled": False,
        "date": utc_now(),
        **extra,
    }


@dataclass
class Record:
    """One measured result: what was measured (``name``, ``params``), on which device and in which
    dtype, its timing (median and quartiles in seconds, all samples), and derived numbers in
    ``extra`` (e.g. ``bytes``, ``flops``, ``bytes_per_s``). A record transcribed from a chapter's stored
    output or from notes keeps what they kept and None for the rest: only a fastest time is ``samples``
    of one and no quartiles; only a median is no samples (``data/reference/README.md``)."""

    name: str
    params: dict
    median_s: float | None
    q1_s: float | None
    q3_s: float | None
    samples: list[float]
    device: str
    dtype: str
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_timing(cls, name: str, params: dict, timing: Timing, device, dtype, extra: dict | None = None) -> Record:
        return cls(name=name, params=dict(params), median_s=timing.median, q1_s=timing.q1, q3_s=timing.q3,
                   samples=list(timing.samples), device=str(resolve(device)), dtype=dtype_name(as_dtype(dtype)),
                   extra=dict(extra or {}))

    @property
    def timing(self) -> Timing:
        return Timing(list(self.samples))

    @property
    def fastest_s(self) -> float:
        """The fastest sample: what the call costs when nothing else is in the way. A record transcribed
        from notes that kept only a median (``samples`` empty) answers with the median, an upper bound."""
        return min(self.samples) if self.samples else self.median_s

    @property
    def bytes_per_s(self) -> float | None:
        return self.extra.get("bytes_per_s")

    @property
    def flops_per_s(self) -> float | None:
        return self.extra.get("flops_per_s")

    @property
    def gb_per_s(self) -> float | None:
        return None if self.bytes_per_s is None else self.bytes_per_s / 1e9

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Record:
        if not isinstance(d, dict):
            raise validate.BadArgumentType(f"not a record: a JSON object, not {validate.shown(d)}")
        names = {f.name for f in dataclasses.fields(cls)}
        missing = names - set(d) - {"extra"}
        if missing:
            raise validate.BadArgument(f"not a record: missing {sorted(missing)}")
        rec = cls(**{k: v for k, v in d.items() if k in names})
        unknown = {k: v for k, v in d.items() if k not in names}
        if unknown:  # keep fields written by a newer version instead of dropping them
            rec.extra = {**unknown, **rec.extra}
        return rec


def rates(flops: float, nbytes: float, seconds: float, tokens: int) -> dict:
    """What a pass of ``flops`` FLOPs and ``nbytes`` bytes over ``tokens`` tokens achieved in ``seconds``."""
    validate.number("flops", flops, low=0)
    validate.number("nbytes", nbytes, low=0, low_open=True)
    validate.number("seconds", seconds, low=0, low_open=True)
    validate.integer("tokens", tokens, low=1)
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes, "flops_per_s": flops / seconds,
            "bytes_per_s": nbytes / seconds, "gb_per_s": nbytes / seconds / 1e9, "per_token_s": seconds / tokens}


@dataclass
class Results:
    """One provenance block and named sections of records (a JSON document, ``SCHEMA``).
    ``notes``: anything else the writer wants kept (sizes, the budget, sections skipped, seconds)."""

    provenance: dict
    sections: dict[str, list[Record]]
    notes: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "provenance": self.provenance,
                "sections": {k: [r.to_dict() for r in v] for k, v in self.sections.items()}, "notes": self.notes}

    @classmethod
    def from_dict(cls, doc: dict, where: str = "document") -> Results:
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise validate.BadArgument(f"{where}: not a {SCHEMA} file")
        for key, kind in (("provenance", dict), ("sections", dict), ("notes", (dict, type(None)))):
            if not isinstance(doc.get(key), kind):
                raise validate.BadArgumentType(f"{where}: {key} must be a JSON object, got "
                                               f"{validate.shown(doc.get(key))}")
        sections = {}
        for name, records in doc["sections"].items():
            if not isinstance(records, list):
                raise validate.BadArgumentType(f"{where}: sections.{name} must be a list of records")
            try:
                sections[name] = [Record.from_dict(r) for r in records]
            except validate.BadArgument as err:
                raise type(err)(f"{where}: sections.{name}: {err}") from None
        return cls(doc["provenance"], sections, doc.get("notes") or {})


def save_results(results: Results, path: str | os.PathLike) -> Path:
    """Write ``results`` as JSON at ``path`` (folders created); returns the path. Atomic: the text goes to
    a temporary file beside it that then replaces ``path``, so a file at ``path`` is always complete."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results.to_dict(), indent=1) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_results(path: str | os.PathLike) -> Results:
    """Read a file :func:`save_results` wrote; anything else is a ValueError naming the file."""
    try:
        doc = json.loads(Path(path).read_text())
    except (ValueError, UnicodeDecodeError, RecursionError):  # JSONDecodeError is a ValueError
        raise validate.BadArgument(f"{path}: not a {SCHEMA} file (not JSON)") from None
    return Results.from_dict(doc, str(path))

