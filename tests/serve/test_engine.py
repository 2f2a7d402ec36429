"""llama.cpp's llama-server with the shipped pair (``specnotes.serve.engine``).

Tests marked ``engine`` need the binary (``make engine``) and run in ``make engine-smoke`` (part of ``make
test``): the conversion checked on the engine itself (every byte tokenizes and detokenizes to itself; the
engine's greedy output equals specnotes' token for token, with speculation off and on) and a smoke measurement
of S(B) at two concurrencies through the book's own client. The rest runs in plain ``make unit``.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specnotes import measure
from specnotes.measure import checks
from specnotes.serve import engine, engine_client
from specnotes.serve.engine import cli, process, speedup  # where each name a test patches is read
from specnotes.tiny import generate, model

PROMPT_CHARS, NEW_TOKENS = 64, 128  # 192 bytes: inside the 256-byte block the pair was trained on


# ---------------------------------------------------------------------------------------------- no engine needed


METRICS = """# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 300
llamacpp:tokens_predicted_seconds_total 1.5
llamacpp:n_decode_total 120
llamacpp:spec_decode_num_draft_tokens_total 400
llamacpp:spec_decode_num_accepted_tokens_total 220
llamacpp:spec_decode_num_drafts_total 100
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 80
"""


def test_the_engines_counters_are_read_and_differenced():
    after = engine.parse_metrics(METRICS)
    assert after["tokens_predicted_total"] == 300
    assert after['spec_decode_num_accepted_tokens_per_pos_total{position="0"}'] == 80
    before = {"tokens_predicted_total": 100, "tokens_predicted_seconds_total": 0.5,
              "spec_decode_num_draft_tokens_total": 0, "spec_decode_num_accepted_tokens_total": 0}
    c = engine.engine_counters(before, after)
    assert c["tokens_predicted"] == 200 and c["tpot_s"] == pytest.approx(1.0 / 200)
    assert c["draft_tokens"] == 400 and c["acceptance"] == pytest.approx(0.55) and c["verify_steps"] == 100
    assert engine.engine_counters(after, after)["acceptance"] is None  # nothing drafted: no acceptance


def test_a_missing_engine_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECNOTES_ENGINE_DIR", str(tmp_path))
    assert engine.binary() is None and engine.engine_dir() == tmp_path
    with pytest.raises(engine.EngineNotBuilt, match="make engine"):
        engine.require_binary()
    with pytest.raises(ValueError, match="no model file"):
        engine.Server(tmp_path / "none.gguf")


def test_the_command_line_drafts_k_every_step(tmp_path):
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    target.write_bytes(b"")
    draft.write_bytes(b"")
    off = engine.Server(target, slots=4, threads=1).command(binary_path=tmp_path / "llama-server")
    on = engine.Server(target, draft, k=3, slots=4, threads=1).command(binary_path=tmp_path / "llama-server")
    assert "-md" not in off and off[off.index("-np") + 1] == "4" and off[off.index("-c") + 1] == str(4 * 256)
    assert on[on.index("-md") + 1] == str(draft) and on[on.index("--spec-draft-n-max") + 1] == "3"
    assert on[on.index("--spec-draft-p-min") + 1] == "0" and on[on.index("--spec-type") + 1] == "draft-simple"
    assert "f32" == on[on.index("-ctk") + 1] == on[on.index("-ctv") + 1] and on[on.index("-fa") + 1] == "off"
    with pytest.raises(ValueError, match="k must be"):
        engine.Server(target, draft, k=0)


def test_a_failed_run_writes_no_record(tmp_path, monkeypatch):
    # a level fails on the server with speculation: the command exits 1 and the earlier file stays as it was
    monkeypatch.setenv("SPECNOTES_ENGINE_DIR", str(tmp_path / "engine"))  # nothing is written to _build/engine
    monkeypatch.setattr(cli, "require_binary", lambda version=engine.LLAMA_CPP_PYTHON: tmp_path / "llama-server")
    fake = {"target": tmp_path / "t.gguf", "draft": tmp_path / "d.gguf"}
    monkeypatch.setattr(cli, "shipped_ggufs", lambda folder=None: fake)
    started = []

    class FakeServer:
        def __init__(self, **args):
            self.args, self.name, self.url = args, args["name"], "http://127.0.0.1:9/v1"

        def __enter__(self):
            started.append(self.args)
            return self

        def __exit__(self, *exc):
            started.remove(self.args)

        def metrics(self):
            return {}

    async def fails(*args, **kw):
        raise engine_client.EngineError("at concurrency 2: HTTP 500")

    async def nothing(*args, **kw):
        return None

    monkeypatch.setattr(speedup, "Server", FakeServer)
    monkeypatch.setattr(speedup, "warm", nothing)
    monkeypatch.setattr(speedup, "pair_levels", fails)
    out = tmp_path / "s.json"
    out.write_text("earlier\n")
    assert engine.main(["measure", "--concurrency", "1,2", "--out", str(out)]) == 1
    assert out.read_text() == "earlier\n" and started == []  # both servers stopped
    assert not (tmp_path / "engine").exists()


# ---------------------------------------------------------------------------------------------- on the engine


@pytest.fixture(scope="module")
def pair():
    engine.require_binary()  # under -m engine a missing binary fails: make engine-smoke builds it first
    return engine.shipped_ggufs()


def prompts(n: int = 4) -> list[str]:
    return engine_client.default_prompts(n, PROMPT_CHARS)


@pytest.mark.engine
def test_every_byte_tokenizes_and_detokenizes_to_itself(pair):
    with engine.Server(pair["target"], threads=1) as server:
        # detokenize: each of the 256 token ids is its own byte (the server gives a piece that is not valid
        # UTF-8 on its own as a list of byte values)
        answer = engine.http_json(f"{server.root}/tokenize", {"content": list(range(256)), "with_pieces": True})
        pieces = answer["tokens"]
        assert [p["id"] for p in pieces] == list(range(256))
        as_bytes = [p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces]
        assert as_bytes == [bytes([i]) for i in range(256)]
        # tokenize: text whose UTF-8 uses every byte that valid UTF-8 can hold (all but 0xC0, 0xC1, 0xF5-0xFF)
        text = "".join(map(chr, range(0, 0x800))) + "".join(map(chr, (0x0800, 0xFFFF, 0x10000, 0x40000, 0x80000,
                                                                      0xC0000, 0x10FFFF))) + "".join(
            chr(0x1000 * i + 0x80 + j) for i in range(1, 16) for j in range(0, 0x40, 7))
        ids = server.tokenize(text)
        assert ids == list(text.encode("utf-8"))
        assert set(range(256)) - set(ids) == {0xC0, 0xC1, *range(0xF5, 0x100)}
        assert server.detokenize(ids) == text


def specnotes_greedy(which: str, prompt: str, n: int) -> list[int]:
    out = generate.generate(model.load_model(which), [model.encode(prompt)], n, temperature=0.0)
    return out.tokens[0].tolist()


@pytest.mark.engine
@pytest.mark.parametrize("which", ["target", "draft"])
def test_greedy_output_equals_specnotes_token_for_token(pair, which):
    with engine.Server(pair[which], threads=1, name=which) as server:
        for prompt in prompts():
            ids = model.encode(prompt).tolist()
            theirs = server.complete_tokens(ids, NEW_TOKENS)
            ours = specnotes_greedy(which, prompt, NEW_TOKENS)
            first = next((i for i, (a, b) in enumerate(zip(theirs, ours, strict=True)) if a != b), None)
            assert first is None, f"{which}: parted at token {first} of {NEW_TOKENS} on {prompt!r}"


@pytest.mark.engine
def test_speculation_on_the_engine_keeps_the_greedy_output(pair):
    # the draft proposes, the target verifies: at temperature 0 the output is the target's own (on a server with
    # 2 slots; the two prompts are sent one after the other)
    with engine.Server(pair["target"], pair["draft"], k=4, slots=2, threads=1) as server:
        before = server.metrics()
        for prompt in prompts(2):
            assert server.complete_tokens(model.encode(prompt).tolist(), NEW_TOKENS) == \
                specnotes_greedy("target", prompt, NEW_TOKENS)
        counters = engine.engine_counters(before, server.metrics())
    assert counters["draft_tokens"] > 0 and 0 < counters["draft_accepted"] <= counters["draft_tokens"]


@pytest.mark.engine
def test_smoke_s_of_b_on_the_engine(pair, tmp_path):
    """Two concurrencies, speculation off and on, through bench serve's client; the record has both runs, the
    engine's own counters (drafts only with speculation on), and TPOTs the engine's own timings confirm."""
    out = tmp_path / "s.json"
    argv = ["measure", "--concurrency", "1,2", "--pairs", "1", "--max-tokens", "32", "--requests", "4",
            "--out", str(out)]
    assert engine.main(argv) == 0
    result = measure.load_results(out)
    records = result.sections[engine_client.SPEEDUP]
    assert [r.params["concurrency"] for r in records] == [1, 2]
    for r in records:
        assert r.extra["speedup"] > 0 and r.extra["speedup_engine_tpot"] > 0 and r.extra["engine_draft_tokens_on"] > 0
        assert "engine_draft_tokens_off" not in r.extra or r.extra["engine_draft_tokens_off"] == 0
        # the cross-check is recorded: the client's median TPOT over the engine's own, in both runs
        assert r.extra["tpot_client_over_engine_off"] > 0 and r.extra["tpot_client_over_engine_on"] > 0
    # the engine generated exactly the tokens the client counted, run by run
    for which, run in (("off", result.sections["engine_serve_off"]), ("on", result.sections["engine_serve_on"])):
        counted = sum(r.extra["output_tokens"] for r in run)
        engine_counted = next(e["tokens_predicted"] for e in result.notes["engine_runs"] if e["speculation"] == which)
        assert engine_counted == counted == 2 * 4 * 32, (which, engine_counted, counted)
    runs = {(r["speculation"]): r for r in result.notes["engine_runs"]}
    assert runs["on"]["draft_tokens"] > 0 and runs["off"]["draft_tokens"] == 0
    build = result.provenance["engine_build"]
    assert build["llama_cpp_python"] == engine.LLAMA_CPP_PYTHON and build["llama_cpp_commit"]
    assert result.provenance["command"].startswith("python -m specnotes.serve.engine measure")
    json.dumps(result.to_dict())  # plain JSON all through


@pytest.mark.engine
def test_any_gguf_pair_by_path_on_the_engine(pair, tmp_path):
    """The shipped pair passed as paths, as a reader passes their own: the same measurement, recorded as a custom
    pair with its files and vocabulary, and the engine's counters say it speculated."""
    out = tmp_path / "custom.json"
    argv = ["measure", "--target", str(pair["target"]), "--draft", str(pair["draft"]), "--concurrency", "1",
            "--pairs", "1", "--max-tokens", "16", "--requests", "4", "--out", str(out)]
    assert engine.main(argv) == 0
    result = measure.load_results(out)
    assert result.notes["kind"] == "custom" and result.notes["pair"]["vocabulary"]["target"] == 256
    assert result.notes["pair"]["target"] == str(pair["target"]) and "specnotes_acceptance" not in result.notes
    assert result.notes["context_per_slot"] == engine.CUSTOM_CONTEXT
    on = [r for r in result.notes["engine_runs"] if r["speculation"] == "on"]
    assert on and all(r["draft_tokens"] > 0 for r in on)
    assert result.provenance["engine_build"]["model"] == pair["target"].name


def rows(measured, roofline=(2.4, 2.3, 2.2), limit=0.64, each=None):
    return [{"concurrency": b, "k": 4, "S measured": s, "S roofline": r, "S overhead-bound": limit,
             "S each": list(e) if e else [s], "S min": min(e) if e else s, "S max": max(e) if e else s}
            for b, s, r, e in zip((1, 2, 4), measured, roofline, each or (None,) * 3, strict=True)]


def costs(c, c_roof=(0.07, 0.08, 0.09), per_step=3.0):
    return [{"concurrency": b, "c (inferred)": x, "c (roofline)": y, "tokens per step": per_step}
            for b, x, y in zip((1, 2, 4), c, c_roof, strict=True)]


@pytest.mark.parametrize("measured, ok, says", [
    # between the limit 0.64 and the roofline R, nearer the limit below sqrt(0.64 R): 1.239, 1.213 and 1.187
    ((0.65, 1.2, 1.18), True, "Every value lies between the overhead-bound limit E[N]/(k + 2) = 3.84/6 = 0.64 and the "
                              "roofline's 2.40, 2.30 and 2.20, nearer the limit."),
    ((0.65, 1.2, 1.19), False, "nearer the limit at B = 1 and 2."),
    ((0.64, 1.3, 1.3), False, "nearer the limit at B = 1."),  # S = L lies between them
    ((0.63, 0.8, 0.9), True, "at B = 1 S is below the limit 0.64: a speculative step cost more than k + 2 plain "
                             "steps."),
    ((0.7, 0.65, 0.5), True, "At B = 1 and 2 S lies between the overhead-bound limit E[N]/(k + 2) = 3.84/6 = 0.64 "
                             "and the "
                             "roofline's 2.40 and 2.30, nearer the limit; at B = 4 S is below the limit 0.64"),
    ((2.39, 2.31, 2.2), False, "nearer the roofline; at B = 2 S is above the roofline's S."),
])
def test_the_overhead_sentence_at_its_boundaries(measured, ok, says):
    verdict = engine.overhead_verdict(rows(measured))
    assert says in verdict.sentence, verdict.sentence
    assert verdict.ok is ok and verdict.tested
    assert "near or below" not in verdict.sentence  # the old claim, false wherever S is above the limit


@pytest.mark.parametrize("c, says", [
    ((0.41, 0.6, 0.7), "speculation pays only below c = 0.40, so at these costs it loses."),  # (3 - 1) / (4 + 1)
    ((0.39, 0.6, 0.7), "and c crosses it between the concurrencies measured."),
    ((0.2, 0.3, 0.39), "so at these costs it pays."),
    ((0.2, 0.3, 0.4), "and c crosses it"),  # c = 0.40 exactly is not below it
])
def test_the_draft_cost_sentence_at_its_boundaries(c, says):
    sentence = engine.overhead_verdict(rows((0.7, 0.7, 0.7)), costs(c)).sentence
    assert says in sentence, sentence
    assert f"c = {min(c):.2f}–{max(c):.2f} of a plain step" in sentence


def test_the_break_even_c_is_where_the_modelled_s_is_one():
    # a speculative step: the verify pass at one plain step, and k + 1 draft passes of c each
    for per_step, k in ((3.0, 4), (2.2, 3), (5.5, 7)):
        c = engine.break_even_c(per_step, k)
        assert per_step / (1 + (k + 1) * c) == pytest.approx(1.0)


@pytest.mark.parametrize("each, says", [
    ([(0.9, 0.99), (0.5, 0.6), (0.7, 0.8)], "Speculation lost in every one of the 2 pairs at B = 1, 2 and 4, the "
                                            "largest S being 0.99, 0.60 and 0.80."),
    ([(0.9, 1.0), (0.5, 0.6), (0.7, 0.8)], "At B = 1 the pairs gave S = 0.90–1.00, on both sides of 1: this run "
                                           "cannot tell whether speculation pays there."),  # 1.00 is not a loss
    ([(1.01, 1.2), (0.5, 0.6), (0.95, 1.14)], "won in every one of the 2 pairs at B = 1, the smallest S being 1.01."),
    ([(1.0, 1.2), (0.5, 0.6), (0.95, 1.14)], "At B = 1 and 4 the pairs gave S = 1.00–1.20 and 0.95–1.14, on both "
                                             "sides of 1"),
])
def test_the_pairs_sentence_at_its_boundaries(each, says):
    table = [{"concurrency": b, "S each": list(e)} for b, e in zip((1, 2, 4), each, strict=True)]
    sentence = engine.pairs_sentence(table)
    assert says in sentence, sentence
    for b, e in zip((1, 2, 4), each, strict=True):  # what it says of each level is true of its pairs
        if max(e) < 1:
            assert "lost" in sentence and str(b) in sentence.split("lost")[1].split(",")[0] + sentence
        if min(e) <= 1 <= max(e):
            assert "cannot tell" in sentence


def test_pairs_above_the_ceiling_are_left_out_and_named():
    table = [{"concurrency": 4, "S each": [0.6, 0.64, 1.16], "pairs above the ceiling": [1.16]}]
    assert engine.pairs_sentence(table) == ("Speculation lost in every one of the 2 pairs at B = 4, the largest S "
                                            "being 0.64.")


@pytest.mark.parametrize("engine_rate, ok", [(0.545 - 0.0499, True), (0.545 - 0.0501, False), (0.5949, True),
                                             (0.5951, False)])
def test_the_acceptance_sentence_at_its_boundaries(engine_rate, ok):
    ours = {"accepted_per_drafted": 0.545, "alpha": 0.77, "mean_tokens_per_iteration": 3.2, "prompts": 64}
    verdict = engine.acceptance_verdict(engine_rate, ours)
    assert verdict.ok is ok and "on all 64 prompts of the set the engine's requests were drawn from" in verdict.sentence
    assert ("Within 5 points of each other" in verdict.sentence) is ok
    assert ("do not draft alike" in verdict.sentence) is not ok
    assert all(len(s.split()) <= 45 for s in verdict.sentence.split(". "))


def verify_rows(r, k=4, noise=((), (), ())):
    return [{"concurrency": b, "k": k, "S measured": (k + 1) / (k + 2 * rr), "verify/decode measured": rr,
             "verify/decode roofline": 1.0, "S ceiling (α = 1)": (k + 1) / (k + 2), "pairs above the ceiling": list(n)}
            for b, rr, n in zip((1, 2, 4), r, noise, strict=True)]


@pytest.mark.parametrize("r, says, ok", [
    ((1.1, 1.2, 1.4), "It stays below 1.5 at every batch and rises with B: under half the 5", True),
    ((1.44, 1.4951, 1.9), "It is below 1.5 only at B = 1 and rises with B", True),  # 1.4951 prints 1.50
    ((1.44, 1.4949, 1.9), "It is below 1.5 only at B = 1 and 2 and rises with B", True),  # 1.4949 prints 1.49
    ((1.5, 1.6, 1.55), "It is 1.5 or more at every batch:", True),  # not rising
    ((1.2, 2.49, 2.4), "It is below 1.5 only at B = 1:", True),  # 2.49 < (k + 1) / 2 = 2.5
    ((1.2, 2.5, 2.4), "At B = 2 it is half of 5 or more: there the verify pass's arithmetic", False),
    ((2.0, 2.5, 3.0), "It is 1.5 or more at every batch and rises with B. At B = 2 and 4 it is half of 5", False),
])
def test_the_verify_sentence_at_its_boundaries(r, says, ok):
    verdict = engine.verify_verdict(verify_rows(r))
    assert says in verdict.sentence, verdict.sentence
    assert verdict.ok is ok
    printed = [f"{x:.2f}" for x in r]
    assert f"r = {printed[0]}, {printed[1]} and {printed[2]} decode passes" in verdict.sentence
    assert "about one decode pass" not in verdict.sentence  # the old claim


def test_the_verify_sentence_names_pairs_above_the_ceiling():
    one = engine.verify_verdict(verify_rows((1.4, 1.5, 1.9), noise=((), (), (1.16,)))).sentence
    assert one.endswith("One pair at B = 4 gave S = 1.16, above the ceiling (k + 1)/(k + 2) = 0.83 that no step at "
                        "α = 1 can pass, by more than the 10% noise allows. Load slowed its plain run, so it is left "
                        "out of the pairs' range.")
    two = engine.verify_verdict(verify_rows((1.4, 1.5, 1.9), noise=((0.94,), (), (1.16,)))).sentence
    assert "Two pairs at B = 1 and 4 gave S = 0.94 and 1.16" in two and "their plain runs" in two
    assert "ceiling" not in engine.verify_verdict(verify_rows((1.4, 1.5, 1.9))).sentence


def test_the_big_records_pairs_above_the_ceiling_leave_its_range():
    rows = engine.model_beside(engine.load_reference("big"))
    ceiling = 5 / 6  # (k + 1)/(k + 2), k = 4: measure.checks.ceiling with α = 1 and k + 1 plain steps of drafting
    allowed = ceiling * (1 + checks.NOISE)
    assert rows[0]["S ceiling (α = 1)"] == pytest.approx(ceiling)
    for row in rows:
        kept = [x for x in row["S each"] if x <= allowed]
        assert row["pairs above the ceiling"] == [x for x in row["S each"] if x > allowed]
        assert row["S max"] == max(kept) <= allowed and row["S min"] == min(kept)
    assert sum(len(row["pairs above the ceiling"]) for row in rows) == 2  # 0.942 at B = 1 and 1.16 at B = 4


def test_the_shipped_records_pairs_are_checked_against_their_ceiling(monkeypatch):
    # α = 0.77, k = 4: E[N] = 3.17, far above any pair; a pair made impossible is flagged and left out
    rec = engine.load_reference("shipped")
    rows = engine.model_beside(rec)
    assert all("pairs above the ceiling" not in row for row in rows)
    flagged = []
    real = checks.above_ceiling
    monkeypatch.setattr(checks, "above_ceiling", lambda x, *a, **k: flagged.append(x) or real(x * 10, *a, **k))
    rows = engine.model_beside(rec)
    assert flagged and any(row.get("pairs above the ceiling") for row in rows)


@pytest.mark.parametrize("moved, done", [(0.049, True), (0.051, False)])
def test_s_has_settled_when_the_last_pair_moved_it_less_than_the_share(moved, done):
    before = [{"concurrency": b, "S fastest": 0.7, "S": 0.8} for b in (1, 2)]
    after = [{"concurrency": 1, "S fastest": 0.7, "S": 0.8}, {"concurrency": 2, "S fastest": 0.7 * (1 + moved),
                                                               "S": 0.8}]
    assert engine.settled(before, after, 0.05) is done
    after[1] |= {"S fastest": 0.7, "S": 0.8 * (1 - moved)}
    assert engine.settled(before, after, 0.05) is done
    assert engine.settled(None, after, 0.05) is False


def test_the_clock_sentence_follows_the_cross_check():
    assert "agreed with the engine's own within 3%" in engine.clock_sentence(0.97, 1.02)
    assert "ranged from 0.02 to 1.13" in engine.clock_sentence(0.02, 1.13)


def test_the_committed_records_read_back_and_say_what_the_chapter_says():
    shipped, big = engine.load_reference("shipped"), engine.load_reference("big")
    assert shipped.provenance["engine_build"]["llama_cpp_python"] == engine.LLAMA_CPP_PYTHON
    rows = engine.model_beside(shipped)
    assert [r["concurrency"] for r in rows] == [1, 2, 4, 8] and all(r["S measured"] > 0 for r in rows)
    costs = engine.draft_pass_cost(shipped)
    assert all(c["c (roofline)"] < 0.2 for c in costs)  # the bytes say a draft pass is cheap
    runs = big.notes["engine_runs"]
    assert all(r["draft_accepted"] == r["draft_tokens"] > 0 for r in runs if r["speculation"] == "on")
    assert all(r["draft_tokens"] == 0 for r in runs if r["speculation"] == "off")


# what Chapter 8 printed from the committed records before issue 39
OLD_OVERHEAD = ("At B = 1, 2, 4, 8 the engine measured S = 0.68, 0.56, 0.68, 0.80: far below the roofline's 2.32, "
                "2.25, 2.15, 1.70, and near or below the overhead-bound limit E[N]/(k + 2) = 0.53, where every pass "
                "costs the same fixed time. A pass costs the engine about the same time whatever it reads, the draft's "
                "as much as the target's: this engine is overhead-bound on this pair, and speculation, which trades "
                "passes for bytes, can only lose.")
OLD_VERIFY = ("With every draft accepted, S(B) = 0.73, 0.71, 0.64 at B = 1, 2, 4 says one verify pass over k + 1 "
              "tokens costs r = 1.44, 1.50, 1.90 decode passes (the roofline: 1.00, 1.00, 1.00). Below 1.5 at B = 1, 2 "
              "(a pass that paid per token would cost 5): reading the weights once for k + 1 tokens costs little more "
              "than reading them for one, and the price rises as the batch's tokens per weight read grow.")


def batches(text: str, after: str) -> list[int]:
    """The batch sizes a sentence lists right after ``after``: "B = 1, 2 and 4" -> [1, 2, 4]."""
    listed = re.match(r"[\d, and]+", text.split(after, 1)[1].strip()).group(0)
    return [int(x) for x in listed.replace("and", ",").split(",") if x.strip()]


def test_the_committed_records_sentences_are_true_of_their_numbers_and_the_old_ones_are_not():
    """The chooser's sentences on the records Chapter 8 shows say what their numbers say; the sentences it printed
    before say what they do not: "near or below" the limit where every S is above it, a draft pass "as much as the
    target's" where c is 0.56-0.88 of it, r "below 1.5" at B = 2 where r prints 1.50."""
    shipped, big = engine.load_reference("shipped"), engine.load_reference("big")
    rows, costs = engine.model_beside(shipped), engine.draft_pass_cost(shipped)
    limit = rows[0]["S overhead-bound"]
    said = engine.overhead_verdict(rows, costs).sentence
    if "Every value lies between" in said:
        assert all(limit <= r["S measured"] <= r["S roofline"] for r in rows)
    c = [x["c (inferred)"] for x in costs]
    assert f"c = {min(c):.2f}–{max(c):.2f}" in said
    even = engine.break_even_c(costs[0]["tokens per step"], 4)
    assert ("at these costs it loses" in said) == (min(c) > even)
    # issue 44, item 15: one E[N] for the limit and the break-even, the engine's tokens per step (3.04/6 = 0.51, not
    # the 0.53 that specnotes' own E[N] = 3.17 gave beside the engine's 3.04)
    per_step = costs[0]["tokens per step"]
    assert limit == per_step / 6 and f"E[N]/(k + 2) = {per_step:.2f}/6 = {limit:.2f}" in said
    assert f"With {per_step:.2f} tokens per step" in said
    # the old sentence: "near or below" the limit and "the draft's as much as the target's" are false of the record
    assert "near or below the overhead-bound limit" in OLD_OVERHEAD and all(r["S measured"] > limit for r in rows)
    assert "the draft's as much as the target's" in OLD_OVERHEAD and max(c) < 0.9
    lost = engine.pairs_sentence(rows)
    for b in batches(lost, "lost in every one of the 5 pairs at B = "):
        assert max(next(r["S each"] for r in rows if r["concurrency"] == b)) < 1
    big_rows = engine.model_beside(big)
    verify = engine.verify_verdict(big_rows).sentence
    r = [round(x["verify/decode measured"], 2) for x in big_rows]
    below = batches(verify, "It is below 1.5 only at B = ") if "only at B" in verify else []
    assert below == [x["concurrency"] for x, rr in zip(big_rows, r, strict=True) if rr < 1.5]
    assert batches(OLD_VERIFY, "Below 1.5 at B = ") == [1, 2] and r[1] == 1.50  # the old claim: 1.50 is not below
    assert "about one decode pass" not in verify and max(r) > 1.25
    # the B = 4 pair at S = 1.16 is above the α = 1 ceiling: named, and left out of the pairs' range
    assert "1.16, above the ceiling (k + 1)/(k + 2) = 0.83" in verify


PARENT = """
import subprocess, sys, time
from specnotes.serve import engine
child = subprocess.Popen(["sleep", "60"], start_new_session=True, preexec_fn=engine.parent_death_signal())
print(child.pid, flush=True)
time.sleep(60)
"""


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"  # a zombie has exited
    except (FileNotFoundError, IndexError):
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_server_dies_with_a_parent_killed_outright():
    # SIGKILL runs no atexit handler: only the parent-death signal stops a server in its own session
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        assert not gone(child)
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while not gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(child)
    finally:
        if not gone(child):
            os.kill(child, signal.SIGKILL)


def test_the_server_is_started_with_the_parent_death_signal(tmp_path, monkeypatch):
    target = tmp_path / "t.gguf"
    target.write_bytes(b"")
    seen = {}

    def popen(cmd, **kwargs):
        seen.update(kwargs)
        raise OSError("not started")

    monkeypatch.setattr(process, "require_binary", lambda version=engine.LLAMA_CPP_PYTHON: tmp_path / "llama-server")
    monkeypatch.setattr(process.subprocess, "Popen", popen)
    monkeypatch.setenv("SPECNOTES_ENGINE_DIR", str(tmp_path))
    with pytest.raises(OSError, match="not started"):
        engine.Server(target, threads=1).start()
    assert seen["start_new_session"] and (seen["preexec_fn"] is not None) == sys.platform.startswith("linux")


def test_a_new_gguf_writer_writes_new_files(tmp_path, monkeypatch):
    # the cached GGUF files are named by the writer's format version: bumping it never serves a stale file
    written = []

    def write(model, path, name, context=None):
        written.append(Path(path).name)
        Path(path).write_bytes(b"gguf")
        return path

    from specnotes.tiny import gguf_export

    monkeypatch.setattr(gguf_export, "write_gguf", write)
    monkeypatch.setattr(gguf_export, "random_model", lambda config, seed=0: None)
    first = engine.shipped_ggufs(tmp_path), engine.big_gguf(tmp_path, n_layers=1, d_model=64, n_heads=2, d_ff=128)
    assert len(written) == 3 and engine.shipped_ggufs(tmp_path) == first[0] and len(written) == 3  # cached
    monkeypatch.setattr(gguf_export, "FORMAT_VERSION", gguf_export.FORMAT_VERSION + 1)
    second = engine.shipped_ggufs(tmp_path), engine.big_gguf(tmp_path, n_layers=1, d_model=64, n_heads=2, d_ff=128)
    assert len(written) == 6 and set(second[0].values()).isdisjoint(first[0].values()) and second[1] != first[1]
    assert all(f"-v{gguf_export.FORMAT_VERSION}." in name for name in written[3:])


def test_the_model_beside_reads_the_context_from_the_record():
    shipped = engine.load_reference("shipped")
    assert engine.mean_context(shipped) == 64 + 128 // 2  # 64-character prompts, 128 new tokens
    before = engine.model_beside(shipped)[-1]["S roofline"], engine.draft_pass_cost(shipped)[-1]["c (roofline)"]
    for r in shipped.sections[engine_client.SPEEDUP]:
        r.params["prompt_chars"] = 4000
    assert engine.mean_context(shipped) == 4000 + 64
    after = engine.model_beside(shipped)[-1]["S roofline"], engine.draft_pass_cost(shipped)[-1]["c (roofline)"]
    assert after[0] != pytest.approx(before[0]) and after[1] != pytest.approx(before[1])


@pytest.mark.parametrize("argv, says", [
    (["measure", "--k", "0"], "--k: 0 is not allowed: it must be an integer >= 1"),
    (["measure", "--pairs", "0"], "--pairs: 0 is not allowed"),
    (["measure", "--concurrency", "1,0"], "--concurrency: 0 is not allowed"),
    (["measure", "--concurrency", "1,x"], "--concurrency: 'x' is not an integer"),
    (["measure", "--concurrency", "4", "--requests", "2"], "--requests 2 is below --concurrency 4"),
    (["measure", "--timeout", "0"], "--timeout: 0.0 is not allowed"),
    (["serve", "--k", "0"], "--k: 0 is not allowed"),
    (["serve", "--slots", "0"], "--slots: 0 is not allowed"),
])
def test_bad_command_lines_are_usage_errors_before_anything_runs(argv, says, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "require_binary", lambda version=engine.LLAMA_CPP_PYTHON: tmp_path / "llama-server")
    fake = {"target": tmp_path / "t.gguf", "draft": tmp_path / "d.gguf"}
    monkeypatch.setattr(cli, "shipped_ggufs", lambda folder=None: fake)

    def ran(*args, **kwargs):
        raise AssertionError("it ran")

    monkeypatch.setattr(cli, "measure_pairs", ran)
    monkeypatch.setattr(cli, "Server", ran)
    with pytest.raises(SystemExit) as exit_:
        engine.main(argv + (["--out", str(tmp_path / "s.json")] if argv[0] == "measure" else []))
    assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_serve_exits_non_zero_when_the_server_dies(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "require_binary", lambda version=engine.LLAMA_CPP_PYTHON: tmp_path / "llama-server")
    fake = {"target": tmp_path / "t.gguf", "draft": tmp_path / "d.gguf"}
    monkeypatch.setattr(cli, "shipped_ggufs", lambda folder=None: fake)
    log = tmp_path / "server.log"
    log.write_text("model loaded\nsegmentation fault\n")

    class Dying:
        def __init__(self, *args, **kwargs):
            self.url, self.log_path = "http://127.0.0.1:9/v1", log
            self.process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.process.wait()

        log_tail = engine.Server.log_tail

    monkeypatch.setattr(cli, "Server", Dying)
    assert engine.main(["serve"]) == 1
    assert "llama-server exited with code 3" in (err := capsys.readouterr().err) and "segmentation fault" in err


# ---------------------------------------------------------------------------------------------- any GGUF pair


def fake_engine(monkeypatch, tmp_path):
    """engine.main with a binary that is never run, and measure_pairs caught: -> the arguments it was given."""
    monkeypatch.setattr(cli, "require_binary", lambda version=engine.LLAMA_CPP_PYTHON: tmp_path / "llama-server")
    seen = {}

    def caught(*args, **kwargs):
        seen.update(args=args, kwargs=kwargs)
        raise engine_client.EngineError("stopped by the test")

    monkeypatch.setattr(cli, "measure_pairs", caught)
    return seen


def test_measure_takes_any_gguf_pair_by_path(tmp_path, monkeypatch):
    paths = engine.shipped_ggufs(tmp_path / "models")  # the shipped pair, passed as paths
    seen = fake_engine(monkeypatch, tmp_path)
    argv = ["measure", "--target", str(paths["target"]), "--draft", str(paths["draft"]), "--out", str(tmp_path / "s")]
    assert engine.main(argv) == 1  # the caught measurement
    target, draft, levels, k, *_ = seen["args"]
    assert (target, draft, levels, k) == (paths["target"], paths["draft"], [1, 2, 4], 4)
    assert seen["kwargs"]["kind"] == "custom" and seen["kwargs"]["context"] == engine.CUSTOM_CONTEXT
    assert seen["args"][11] == paths["target"].stem  # served under its file's name


@pytest.mark.parametrize("which, says", [
    ("not gguf", "model.bin is not a GGUF file"),
    ("other vocabulary", "cannot draft for specnotes-target-f32-v1.gguf: its vocabulary differs (400 tokens"),
    ("lone target", "--target and --draft go together"),
    ("with --big", "--big serves the book's random model"),
    ("--record", "--record writes the book's own records"),
])
def test_a_pair_llama_server_cannot_run_is_a_usage_error(tmp_path, monkeypatch, capsys, which, says):
    paths = engine.shipped_ggufs(tmp_path / "models")
    fake_engine(monkeypatch, tmp_path)
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"PK\x03\x04 a zip, not a model")
    pytest.importorskip("gguf")
    from gguf_files import vocab_file  # a GGUF file with a vocabulary and nothing else

    other = vocab_file(tmp_path / "other.gguf", [f"<{i}>" for i in range(400)])
    pair = {"not gguf": ["--target", str(paths["target"]), "--draft", str(bad)],
            "other vocabulary": ["--target", str(paths["target"]), "--draft", str(other)],
            "lone target": ["--target", str(paths["target"])],
            "with --big": ["--big", "--target", str(paths["target"]), "--draft", str(paths["draft"])],
            "--record": ["--target", str(paths["target"]), "--draft", str(paths["draft"]), "--record"]}[which]
    with pytest.raises(SystemExit) as exit_:
        engine.main(["measure", *pair, "--out", str(tmp_path / "s.json")])
    assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_help_shows_every_default(capsys):
    with pytest.raises(SystemExit):
        engine.main(["measure", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("(default: 4)", "(default: 1,2,4)", f"(default: {engine.MAX_PAIRS})",
                    f"(default: {engine.MIN_PAIRS})", f"(default: {engine.SETTLE})", "(default: 128)", "(default: 64)",
                    "(default: 120.0)", "(default: 4 x concurrency, at least 16)", "default: the shipped pair"):
        assert default in text, default
    assert "(default: None)" not in text and "(default: False)" not in text


# ---------------------------------------------------------------------------------------------- what the book prints


BOOK = Path(__file__).parents[2]
COMMAND = re.compile(r"python -m specnotes\.(bench|engine|advise)\b[^`\n]*")


def printed_commands() -> list[tuple[str, str]]:
    """(where, command) for every `python -m specnotes.bench|engine|advise ...` Chapter 8 and serve.md print, inline
    or in a bash block (continuation lines joined); not the runbook checklist's prose."""
    found = []
    sources = {"serve.md": (BOOK / "book" / "serve.md").read_text()}
    nb = json.loads((BOOK / "notebooks" / "08_serving.ipynb").read_text())
    sources |= {f"Chapter 8 cell {i}": "".join(c["source"]) for i, c in enumerate(nb["cells"])
                if c["cell_type"] == "markdown"}
    for where, text in sources.items():
        text = re.sub(r"```text.*?```", "", text, flags=re.S)
        inline = [" ".join(m.split()) for m in re.findall(r"`(python -m specnotes\.[^`]+)`", text)]
        blocks = [" ".join(m.group(0).split()) for block in re.findall(r"```bash(.*?)```", text, re.S)
                  for m in COMMAND.finditer(block.replace("\\\n", " "))]  # continuation lines joined
        found += [(where, c) for c in inline + blocks]
    return found


def test_the_book_prints_commands_to_check():
    modules = {c.split()[2] for _, c in printed_commands()}
    assert {"specnotes.bench", "specnotes.serve.engine"} <= modules, modules


@pytest.mark.parametrize("where, command", printed_commands())
def test_every_command_the_book_prints_parses_as_printed(where, command, tmp_path, monkeypatch):
    """Each printed command, as printed, gets past its parser and the checks that run before anything is measured
    (bench serve's --url, --concurrency and --out); placeholders such as HOST are the reader's to fill."""
    import shlex

    from specnotes import bench

    monkeypatch.chdir(tmp_path)
    argv = shlex.split(command)[3:]
    module = command.split()[2]
    if module == "specnotes.bench":
        parser, _ = bench.build_parser()
        if not argv or argv[0] not in (*bench.COMMANDS, "-h", "--help"):
            argv = ["chapters", *argv]  # as bench.main does
        args = parser.parse_args(argv)
        if args.command == "serve":
            engine_client.check_serve_arguments(args)
    elif module == "specnotes.serve.engine":
        args = engine.build_parser().parse_args(argv)
        if args.command == "measure":
            engine.check_measure_arguments(args, kind="custom" if args.target else "shipped")
    else:
        from specnotes import advise

        advise.parser().parse_args(argv)


def test_measure_prints_each_level_beside_its_spread_and_the_chosen_sentences():
    shipped, big = engine.load_reference("shipped"), engine.load_reference("big")
    lines = []
    engine.print_measurement(shipped, lines.append)
    rows = engine.model_beside(shipped)
    assert lines[0] == "5 pairs; a fixed number, asked for"  # recorded before pairs ran until S settled
    for line, row in zip(lines[1:5], rows, strict=True):
        each = row["S each"]
        assert line == (f"B = {row['concurrency']}: S = {row['S measured']:.3f} (fastest TPOTs); pairs "
                        f"{min(each):.3f}-{max(each):.3f}, spread {max(each) / min(each):.2f}x; lost in every pair")
    assert lines[5] == engine.pairs_sentence(rows)
    assert lines[6] == engine.overhead_verdict(rows, engine.draft_pass_cost(shipped)).sentence
    lines.clear()
    engine.print_measurement(big, lines.append)
    assert "spread" in lines[3] and lines[-1] == engine.verify_verdict(engine.model_beside(big)).sentence
    # B = 4's pair above the ceiling is left out of the range it prints
    assert lines[3].startswith("B = 4: S = 0.641") and "pairs 0.638-0.641," in lines[3]
