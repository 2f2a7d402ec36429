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
"""

from __future__ import annotations

import argparse
import math
import operator
from collections.abc import Iterable


class BadArgument(ValueError):
    """A public function was called with an argument outside its allowed range."""


class BadArgumentType(BadArgument, TypeError):
    """An argument of the wrong type (a float where an integer is needed, a string for a number)."""


def _range_text(low, high, low_open: bool, high_open: bool, kind: str) -> str:
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
        raise BadArgumentType(f"{name} must be {allowed()}, got {value!r} ({type(value).__name__})") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadArgument(f"{name} must be {allowed()}, got {value}")
    return value


def number(name: str, value, low: float | None = None, high: float | None = None, *,
           low_open: bool = False, high_open: bool = False, allow_inf: bool = False) -> float:
    """A real number in [low, high] (``low_open``/``high_open`` exclude an end). NaN never passes;
    infinity only with ``allow_inf``. Bools and strings are rejected."""
    allowed = lambda: _range_text(low, high, low_open, high_open, "number")
    if isinstance(value, (bool, str, bytes)):
        raise BadArgumentType(f"{name} must be {allowed()}, got {value!r} ({type(value).__name__})")
    try:  # numpy scalars are numbers.Real; a 0-d tensor converts
        value = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise BadArgumentType(f"{name} must be {allowed()}, got {value!r} ({type(value).__name__})") from None
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


def weights(name: str, values, normalized: bool = False):
    """A floating-point tensor [..., V] of finite, non-negative weights whose every row has a positive
    total; ``normalized``: every row sums to 1 (within 1e-3), a probability distribution. Reads the
    values (on a GPU this waits for them): check once, where the tensor enters, not in a loop."""
    import torch

    if not isinstance(values, torch.Tensor) or not values.is_floating_point() or values.dim() == 0:
        kind = f"a {values.dtype} tensor" if isinstance(values, torch.Tensor) else type(values).__name__
        raise BadArgumentType(f"{name} must be a floating-point tensor [..., V] of weights, got {kind}")
    if values.numel() == 0:
        return values
    if not torch.isfinite(values).all() or (values < 0).any():
        raise BadArgument(f"{name} must hold finite weights >= 0, got values from {values.min()} to {values.max()}")
    totals = values.sum(-1)
    if normalized and not torch.allclose(totals, torch.ones_like(totals), atol=1e-3):
        raise BadArgument(f"{name} must be probability distributions (each row sums to 1), got row sums from "
                          f"{float(totals.min()):.4g} to {float(totals.max()):.4g}")
    if (totals <= 0).any():
        raise BadArgument(f"{name}: every row needs a positive total; a row of zeros gives nothing to sample")
    return values


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
