"""The shared argument validator: what passes, what fails, and that the message names the range."""

import math

import numpy as np
import pytest
import torch

from specnotes import validate
from specnotes.validate import BadArgument, BadArgumentType


@pytest.mark.parametrize("value", [0, 3, np.int64(3), torch.tensor(3).item()])
def test_integer_accepts_integers(value):
    assert validate.integer("k", value, low=0) == int(value)


@pytest.mark.parametrize("value", [2.0, True, "3", None, 2.5])
def test_integer_rejects_other_types_with_a_type_error(value):
    with pytest.raises(TypeError, match=r"k must be an integer >= 0"):
        validate.integer("k", value, low=0)


def test_integer_range_error_names_the_range():
    with pytest.raises(ValueError, match=r"batch must be an integer in \[1, 8\], got 9"):
        validate.integer("batch", 9, 1, 8)


@pytest.mark.parametrize("value", [0, 0.5, 1, np.float32(0.25), torch.tensor(0.5)])
def test_probability_accepts(value):
    assert validate.probability("alpha", value) == pytest.approx(float(value))


@pytest.mark.parametrize("value", [math.nan, -0.1, 1.5, math.inf])
def test_probability_rejects(value):
    with pytest.raises(ValueError, match=r"alpha must be a number in \[0.0, 1.0\]"):
        validate.probability("alpha", value)


def test_number_open_ends_and_infinity():
    with pytest.raises(BadArgument, match=r"> 0"):
        validate.number("bandwidth", 0, low=0, low_open=True)
    assert validate.number("limit", math.inf, low=0, allow_inf=True) == math.inf
    with pytest.raises(BadArgument):
        validate.number("limit", math.inf, low=0)
    with pytest.raises(BadArgumentType):
        validate.number("c", "0.1", low=0)


def test_errors_are_value_errors_and_type_errors_are_both():
    assert issubclass(BadArgument, ValueError)
    assert issubclass(BadArgumentType, ValueError) and issubclass(BadArgumentType, TypeError)


def test_choice_and_integers():
    assert validate.choice("overlap", "kernel", ("kernel", "pass")) == "kernel"
    with pytest.raises(ValueError, match=r"overlap must be one of 'kernel', 'pass'; got 'max'"):
        validate.choice("overlap", "max", ("kernel", "pass"))
    assert validate.integers("batches", [1, 2], low=1) == [1, 2]
    with pytest.raises(ValueError, match=r"batches\[1\]"):
        validate.integers("batches", [1, 0], low=1)
    with pytest.raises(ValueError, match="at least one"):
        validate.integers("batches", [], low=1)


def test_cli_type_checks_a_flag_the_argparse_way(capsys):
    import argparse

    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--steps", type=validate.cli(validate.integer, low=1))
    parser.add_argument("--rate", type=validate.cli(validate.number, low=0, high=1))
    assert vars(parser.parse_args(["--steps", "3", "--rate", "0.5"])) == {"steps": 3, "rate": 0.5}
    for argv, message in ((["--steps", "0"], "argument --steps: must be an integer >= 1, got 0"),
                          (["--steps", "2.5"], "argument --steps: must be an integer >= 1, got 2.5 (float)"),
                          (["--rate", "nan"], "argument --rate: must be a number in [0, 1], got nan")):
        with pytest.raises(SystemExit) as exit:
            parser.parse_args(argv)
        assert exit.value.code == 2 and message in capsys.readouterr().err
