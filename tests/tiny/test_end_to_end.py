"""specnotes.tiny.end_to_end: Chapter 3's wall-clock sweep, its arithmetic checked by hand and its runs on a
tiny pair."""

from types import SimpleNamespace

import pytest
import torch

from specnotes.tiny import end_to_end
from specnotes.tiny.model import ModelConfig, Transformer

pytestmark = pytest.mark.usefixtures("one_thread")


def timing(*ms):
    return SimpleNamespace(samples=[m / 1e3 for m in ms])


def test_speedup_rows_by_hand():
    passes = {"target": {1: timing(5, 4, 6), 3: timing(5, 7)}, "draft": {1: timing(1, 2)}}
    stats = SimpleNamespace(alpha=0.7, mean_tokens_per_iteration=2.5, iterations=10)
    walls = {"plain": [0.10, 0.12, 0.11], 2: [0.08, 0.10, 0.12], "stats": {2: stats}}
    (row,) = end_to_end.speedup_rows(passes, walls)
    # paired ratios 0.10/0.08, 0.12/0.10, 0.11/0.12 = 1.25, 1.2, 0.917: median 1.2, and 1 inside the range
    assert row["S measured (median)"] == pytest.approx(1.2)
    assert (row["S low"], row["S high"]) == pytest.approx((0.11 / 0.12, 1.25))
    assert row["measured"] == "within noise"
    # fastest passes: T_t(1) = 4 ms, T_d = 1 ms, T_t(3) = 5 ms; c = 0.25
    assert row["S Leviathan E[N]/(1+kc)"] == pytest.approx(2.5 / 1.5)
    assert row["S from passes"] == pytest.approx(2.5 * 4 / (2 * 1 + 5))
    # fastest speculative run 80 ms over 10 iterations = 8 ms each, of which 7 ms are passes
    assert row["unmodelled ms per iteration"] == pytest.approx(1.0)
    assert (row["k"], row["α"], row["E[N]"], row["iterations"]) == (2, 0.7, 2.5, 10)


@pytest.mark.parametrize(("low", "high", "expected"), [(1.01, 1.3, "faster"), (0.7, 0.99, "slower"),
                                                       (0.95, 1.05, "within noise"), (1.0, 1.2, "within noise")])
def test_verdict(low, high, expected):
    assert end_to_end.verdict(low, high) == expected


def test_runs_on_a_tiny_pair():
    torch.manual_seed(0)
    config = ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=128)
    target, draft = Transformer(config).eval(), Transformer(config).eval()
    ids = torch.arange(40) % 200
    passes = end_to_end.pass_timings(target, draft, ids, 20, [1, 3], warmup=1, repeats=3)
    assert sorted(passes["target"]) == [1, 2, 4] and list(passes["draft"]) == [1]
    walls = end_to_end.wall_clock_runs(target, draft, "a prompt", 12, [1, 3], repeats=2)
    assert len(walls["plain"]) == len(walls[1]) == len(walls[3]) == 2 and sorted(walls["stats"]) == [1, 3]
    rows = end_to_end.speedup_rows(passes, walls)
    assert [r["k"] for r in rows] == [1, 3]
    assert all(r["S low"] <= r["S measured (median)"] <= r["S high"] for r in rows)
