"""The advisor's Chapter 11 inputs: a block drafter priced as one pass for up to 16 tokens, and per-position
acceptance (--accept-by-position) in place of one α; their numbers are the cost model's, their errors name the flag."""

import pytest

from specnotes import advise, validate
from specnotes.analytic import cost

BASE = ["--target", "Qwen3-8B", "--gpu", "H100-SXM", "--batch", "1-64", "--context", "1024", "--calibration", "none"]
SURV = [0.9, 0.8, 0.7, 0.6]


def test_a_block_drafter_is_priced_as_one_pass_of_one_target_layer():
    report = advise.run(BASE + ["--drafter", "block", "--alpha", "0.8", "--k", "12"])
    d = report["deployment"]
    assert d["draft"]["kind"] == "block" and "one pass" in d["draft"]["maps_to"]
    head = cost.Block(cost.ModelShape(1, 4096, 32, 8, 12288, 151936, tied_embeddings=True), k_max=16)
    want = cost.batch_speedup(cost.QWEN3_8B, head, "H100-SXM", 1, 12, 0.8, 1024)
    assert report["rows"][0]["speedup"] == pytest.approx(want, rel=1e-9)
    # drafting 12 tokens costs one pass: less than 12 passes of the same weights would
    assert cost.draft_time(head, "H100-SXM", 1, 12, 1024) < 2 * cost.draft_time(head, "H100-SXM", 1, 1, 1024)


def test_a_block_drafter_takes_its_own_shape_and_refuses_more_than_16():
    report = advise.run(BASE + ["--drafter", "block", "--draft", "Qwen3-0.6B", "--alpha", "0.7", "--k", "8"])
    assert report["deployment"]["draft"]["name"].endswith("(Qwen3-0.6B)")
    with pytest.raises(validate.BadArgument, match="16"):
        advise.run(BASE + ["--drafter", "block", "--alpha", "0.7", "--k", "17"])
    with pytest.raises(validate.BadArgument, match=r"block drafter's vocabulary \(128256\) must be the target's"):
        advise.run(BASE + ["--drafter", "block", "--draft", "Llama-3.2-1B", "--alpha", "0.7", "--k", "8"])


def test_a_block_drafter_says_the_record_has_no_calibration_for_it():
    report = advise.run(BASE[:-2] + ["--drafter", "block", "--alpha", "0.7", "--k", "8"])
    assert any("drafter 'block'" in x for x in report["deployment"]["extrapolations"])


def test_per_position_acceptance_gives_e_n_as_one_plus_the_survivals():
    report = advise.run(BASE + ["--drafter", "eagle3", "--accept-by-position", ",".join(map(str, SURV))])
    d = report["deployment"]
    assert d["k"] == 4 and d["accept_by_position"] == SURV
    assert d["expected_tokens"] == pytest.approx(1 + sum(SURV))
    assert d["alpha"] == pytest.approx(cost.pooled_alpha(cost.conditional_rates(SURV)))
    want = cost.tree_speedup(cost.QWEN3_8B, cost.EAGLE3_QWEN3_8B, "H100-SXM", 1, (1,) * 4, 4, 1 + sum(SURV), 1024)
    assert report["rows"][0]["speedup"] == pytest.approx(want, rel=1e-9)
    # a shorter k uses the first survivals only; 'best' searches up to their number
    two = advise.run(BASE + ["--drafter", "eagle3", "--accept-by-position", "0.9,0.8,0.7,0.6", "--k", "2"])
    assert two["deployment"]["expected_tokens"] == pytest.approx(1 + 0.9 + 0.8)
    best = advise.run(BASE + ["--drafter", "block", "--accept-by-position", "0.9,0.8,0.7,0.6", "--k", "best"])
    assert all(1 <= r["k"] <= 4 for r in best["rows"] if r.get("k"))


@pytest.mark.parametrize(("value", "extra", "match"), [
    ("0.8,0.9", [], "must not rise"),
    ("0.8,1.2", [], r"accept_by_position\[1\]|--accept-by-position\[1\]"),
    ("a,b", [], "per-position acceptance rates"),
    ("x" * 5000, [], r"got 'x+\.\.\.$"),  # a long value is quoted cut short (validate.shown)
    (",".join(["0.5"] * 17), [], "at most 16"),
    ("0.9,0.8", ["--k", "3"], "k"),
    ("0.9,0.8", ["--alpha", "0.7"], "replaces alpha"),
])
def test_bad_per_position_acceptance_is_named(value, extra, match):
    with pytest.raises(validate.BadArgument, match=match):
        advise.run(BASE + ["--drafter", "eagle3", "--accept-by-position", value, *extra])


def test_the_command_line_flag(capsys):
    assert advise.main(BASE + ["--drafter", "block", "--accept-by-position", "0.9,0.8,0.7"]) == 0
    out = capsys.readouterr().out
    assert "P(N ≥ i + 1) = 0.9, 0.8, 0.7" in out and "block drafter" in out
