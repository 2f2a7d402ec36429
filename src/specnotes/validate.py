"""One validator for every public entry point: check an argument once, at the boundary.

Each function returns the value, converted (``integer`` -> int, ``number`` -> float), or raises
``BadArgument``: a ``ValueError`` (and, for a value of the wrong type, also a ``TypeError``) whose
message names the argument, the allowed range and what was passed. Nothing inside the package
re-checks what these have checked.

    integer("k", k, low=0)                       # 0, 1, 2, ... (not 2.0, not True)
    number("alpha", alpha, low=0, high=1)         # a finite real in [0, 1]
    number("overhead", t0, low=0)                 # >= 0
    choice("overlap", overlap, ("kernel", "pass", "none"))
    weights("probs", probs, normalized=True)     # a tensor [..., V] of distributions
    parser.add_argument("--steps", type=cli(integer, low=1))   # a command-line flag, same checks
    Parser(prog="python -m specnotes.x")         # every CLI's parser: its error's message first, exit 2
    json_file(path, "from_record")               # a JSON file read once, bounded: a BadArgument naming it
"""

from __future__ import annotations

import argparse
import json
import math
import operator
from collections.abc import Iterable
from pathlib import Path


class BadArgument(ValueError):
    """A public function was called with an argument outside its allowed range."""


class BadArgumentType(BadArgument, TypeError):
    """An argument of the wrong type (a float where an integer is needed, a string for a number)."""


def shown(value, limit: int = 80) -> str:
    """``value`` as an error message quotes it: its repr, cut to ``limit`` characters; an integer of more than
    18 digits in floating point (Python refuses to print one past 4,300 digits), or as its order of magnitude."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 60:
        try:
            return f"{float(value):.3g}"
        except OverflowError:
            return f"{'-' if value < 0 else ''}about 10^{round(value.bit_length() * math.log10(2))}"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _range_text(low, high, low_open: bool, high_open: bool, kind: str) -> str:
    low, high = (f"{x:g}" if isinstance(x, float) and abs(x) >= 1e6 else x for x in (low, high))  # 1e+15
    if low is None and high is None:
        return f"a finite {kind}"
    if high is None:
        return f"{'an' if kind == 'integer' else 'a'} {kind} {'>' if low_open else '>='} {low}"
    if low is None:
        return f"{'an' if kind == 'integer' else 'a'} {kind} {'<' if high_open else '<='} {high}"
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    return f"{'an' if kind == 'integer' else 'a'} {kind} in {left}{low}, {high}{right}"


def integer(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """An integer in [low, high] (either end optional). numpy integers pass; bools, floats such
    as 2.0, and strings do not."""
    allowed = lambda: _range_text(low, high, False, False, "integer")
    if isinstance(value, bool):
        raise BadArgumentType(f"{name} must be {allowed()}, got {value!r} (a bool)")
    try:
        value = operator.index(value)
    except TypeError:
        raise BadArgumentType(f"{name} must be {allowed()}, got {shown(value)} ({type(value).__name__})") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadArgument(f"{name} must be {allowed()}, got {shown(value)}")
    return value


def number(name: str, value, low: float | None = None, high: float | None = None, *,
           low_open: bool = False, high_open: bool = False, allow_inf: bool = False) -> float:
    """A real number in [low, high] (``low_open``/``high_open`` exclude an end). NaN never passes;
    infinity only with ``allow_inf``. Bools and strings are rejected."""
    allowed = lambda: _range_text(low, high, low_open, high_open, "number")
    if isinstance(value, (bool, str, bytes)):
        raise BadArgumentType(f"{name} must be {allowed()}, got {shown(value)} ({type(value).__name__})")
    try:  # numpy scalars are numbers.Real; a 0-d tensor converts
        value = float(value)
    except OverflowError:  # an integer past a float's range
        raise BadArgument(f"{name} must be {allowed()}, got {shown(value)}") from None
    except (TypeError, ValueError, RuntimeError):
        raise BadArgumentType(f"{name} must be {allowed()}, got {shown(value)} ({type(value).__name__})") from None
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise BadArgument(f"{name} must be {allowed()}, got {value}")
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        raise BadArgument(f"{name} must be {allowed()}, got {value:g}")
    return value


def probability(name: str, value) -> float:
    """A number in [0, 1]."""
    return number(name, value, 0.0, 1.0)


def choice(name: str, value, options: Iterable):
    """One of ``options`` (compared with ==)."""
    options = list(options)
    try:
        ok = value in options
    except TypeError:  # unhashable or incomparable
        ok = False
    if not ok:
        raise BadArgument(f"{name} must be one of {', '.join(map(repr, options))}; got {value!r}")
    return value


def integers(name: str, values: Iterable, low: int | None = None, high: int | None = None) -> list[int]:
    """A non-empty sequence of integers, each in [low, high]."""
    try:
        values = list(values)
    except TypeError:
        raise BadArgumentType(f"{name} must be a sequence of integers, got {values!r}") from None
    if not values:
        raise BadArgument(f"{name} must hold at least one integer")
    return [integer(f"{name}[{i}]", v, low, high) for i, v in enumerate(values)]


def cli(check, **limits):
    """An argparse ``type=`` that reads a flag's value and applies ``check`` (``integer`` or ``number``)
    with ``limits``. A bad value ends the program the argparse way (``parser.error``: exit status 2)
    with a message naming the flag and the allowed range: ``argument --steps: must be an integer >= 1``."""

    def parse(text: str):
        value = text
        for convert in (int, float):
            try:
                value = convert(text)
                break
            except ValueError:
                continue
        try:
            return check("", value, **limits)
        except BadArgument as error:
            raise argparse.ArgumentTypeError(str(error).strip()) from None

    parse.__name__ = check.__name__  # argparse names the expected type after it
    return parse


class Parser(argparse.ArgumentParser):
    """Every command line's parser (and its subcommands'): a bad argument prints its message first, then one
    line on where the options are, not the whole usage; exit status 2, as argparse. A ``BadArgument`` a
    command raises after parsing goes through ``error`` too (``main`` catches it), never as a traceback."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n({self.prog} --help lists every option)\n")


JSON_MAX_BYTES = 64 << 20  # the largest JSON file the package reads (a config.json is kB, a record MB)


def json_file(path, name: str, max_bytes: int = JSON_MAX_BYTES):
    """The JSON value in the file at ``path``, read once: a missing, unreadable, oversized, non-UTF-8 or
    non-JSON file (or one nested past Python's recursion limit, or with an integer of more digits than
    Python converts) is a ``BadArgument`` that starts with ``name`` and the path."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise BadArgument(f"{name}: {path} is {size:,} bytes, past the {max_bytes:,} a JSON file it reads may "
                              "hold")
        return json.loads(path.read_bytes())
    except OSError as err:
        raise BadArgument(f"{name}: cannot read {path} ({err.strerror or type(err).__name__})") from None
    except (UnicodeDecodeError, RecursionError, ValueError) as err:  # JSONDecodeError is a ValueError
        if isinstance(err, BadArgument):
            raise
        why = "nested too deeply" if isinstance(err, RecursionError) else str(err).splitlines()[0][:200]
        raise BadArgument(f"{name}: {path} is not JSON ({why})") from None
