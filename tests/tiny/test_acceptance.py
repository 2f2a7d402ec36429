"""Chapter 11's acceptance statistics by hand: per-position counts, acceptance by place in the sequence, E[N]
predicted on held-out runs; and the suffix drafter's host-time line."""

import pytest
import torch

from specnotes.tiny import acceptance, suffix
from specnotes.tiny.generate import GenerationStats


def stats(accepted, k=2):
    accepted = torch.tensor(accepted)
    return GenerationStats(k=k, temperature=0.0, batch=accepted.shape[1], accepted=accepted)


def test_position_counts_by_hand():
    st = stats([[0, 2], [1, 2], [2, -1], [0, -1]])
    # position 1: checked 6 times (every active pair), passed 4; position 2: checked where ≥ 1 passed (4), passed 3
    assert acceptance.position_counts(st) == ([6, 4], [4, 3])
    assert acceptance.rates(*acceptance.position_counts(st)) == pytest.approx(st.alpha_by_position)
    assert acceptance.merged_counts([st, st]) == ([12, 8], [8, 6])
    assert acceptance.rates([3, 0], [1, 0]) == [1 / 3, 1 / 3]  # never checked: the last rate measured


def test_by_place_by_hand():
    # one sequence with a 10-token prompt: iterations start at 10, 13 (3 tokens gained), 14, 17
    st = stats([[2], [0], [2], [1]])
    bands = acceptance.by_place(st, [10], [0, 12, 16])
    # [0, 12): the first iteration (2 passed, 2 checked); [12, 16): the 2nd and 3rd (0 + 2 passed, 1 + 2 checked);
    # [16, ...): the 4th (1 passed, 2 checked)
    assert bands == [(2, 2), (3, 2), (2, 1)]
    with pytest.raises(ValueError, match="edges"):
        acceptance.by_place(st, [10], [5, 0])


def test_held_out_by_hand():
    fit = stats([[2, 0], [1, 2]])  # position 1: 4 checked, 3 passed; position 2: 3 checked, 2 passed
    test = stats([[2], [2]])
    h = acceptance.held_out([fit], [test])
    assert h["alphas"] == pytest.approx([3 / 4, 2 / 3])
    assert h["per_position"] == pytest.approx(1 + 3 / 4 + 3 / 4 * 2 / 3)
    assert h["measured"] == 3.0 and h["per_position_error"] == pytest.approx(h["per_position"] / 3 - 1)
    pooled = (3 + 2) / (4 + 3)
    assert h["iid"] == pytest.approx(1 + pooled + pooled**2)
    with pytest.raises(ValueError, match="one k"):
        acceptance.held_out([fit], [stats([[1]], k=1)])


def test_host_line():
    assert suffix.host_line([1, 2, 4], [1.5, 2.0, 3.0]) == pytest.approx((1.0, 0.5))
    assert suffix.host_line([1, 2], [2.0, 1.0])[1] == 0  # a falling line is clamped flat
    with pytest.raises(ValueError):
        suffix.host_line([4, 4], [1.0, 2.0])


def test_per_sequence_tokens_and_their_relative_error_by_hand():
    st = stats([[2, 0], [1, 0], [-1, 0]])  # sequence 0: 3 then 2 tokens; sequence 1: 1, 1, 1
    assert acceptance.per_sequence_tokens(st) == [2.5, 1.0]
    # mean 1.75, sample sd sqrt(((0.75)² + (0.75)²) / 1) = 1.0607, over sqrt(2): 0.75, relative 0.4286
    assert acceptance.relative_error(st) == pytest.approx(0.75 / 1.75)
    with pytest.raises(ValueError, match="2 sequences"):
        acceptance.relative_error(stats([[1]]))
