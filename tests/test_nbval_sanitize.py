"""The nbval sanitizer (tests/nbval_sanitize.cfg): stored outputs are compared at 8 decimals, because the last
bits of a fit or a sum differ between CPUs' SIMD paths (seen: Intel Ice Lake stored, AMD Zen 5 re-ran)."""
import re
from pathlib import Path

import pytest
from nbval.plugin import get_sanitize_patterns

CFG = Path(__file__).with_name("nbval_sanitize.cfg")


def sanitize(text):
    for regex, replace in get_sanitize_patterns(CFG.read_text()):
        text = re.sub(regex, replace, text)
    return text


@pytest.mark.parametrize("stored, rerun", [
    ("0.07314062128262891", "0.0731406212826287"),    # Chapter 6's held-out median, Ice Lake vs Zen 5
    ("0.16494247199256565", "0.16494247199256526"),
    ("0.24474626272721473", "0.2447462627272148"),
    ("1.2345678901234567e-05", "1.2345678901234512e-05"),
])
def test_last_digits_of_a_float_are_not_compared(stored, rerun):
    assert sanitize(stored) == sanitize(rerun)


@pytest.mark.parametrize("stored, rerun", [
    ("0.07314062128262891", "0.07314063128262891"),   # a change in the 8th decimal is a change
    ("0.073", "0.074"),
    ("S = 1.25", "S = 1.26"),
    ("B = 128", "B = 129"),
])
def test_a_real_change_still_differs(stored, rerun):
    assert sanitize(stored) != sanitize(rerun)
