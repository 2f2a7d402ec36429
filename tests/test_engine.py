"""llama.cpp's llama-server with the shipped pair (``specnotes.engine``).

Tests marked ``engine`` need the binary (``make engine``) and run in ``make engine-smoke`` (part of ``make
test``): the conversion checked on the engine itself (every byte tokenizes and detokenizes to itself; the
engine's greedy output equals specnotes' token for token, with speculation off and on) and a smoke measurement
of S(B) at two concurrencies through the book's own client. The rest runs in plain ``make unit``.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specnotes import engine, engine_client, generate, measure, model

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
    monkeypatch.setattr(engine, "require_binary", lambda version=engine.LLAMA_CPP_PYTHON: tmp_path / "llama-server")
    fake = {"target": tmp_path / "t.gguf", "draft": tmp_path / "d.gguf"}
    monkeypatch.setattr(engine, "shipped_ggufs", lambda folder=None: fake)
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

    monkeypatch.setattr(engine, "Server", FakeServer)
    monkeypatch.setattr(engine, "warm", nothing)
    monkeypatch.setattr(engine, "pair_levels", fails)
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
    assert result.provenance["command"].startswith("python -m specnotes.engine measure")
    json.dumps(result.to_dict())  # plain JSON all through


def rows(measured, roofline=(2.4, 2.3, 2.2), limit=0.64):
    return [{"concurrency": b, "S measured": s, "S roofline": r, "S overhead-bound": limit}
            for b, s, r in zip((1, 2, 4), measured, roofline, strict=True)]


@pytest.mark.parametrize("measured, ok, says", [
    ((0.55, 0.6, 0.62), True, "overhead-bound on this pair"),
    ((0.2, 0.6, 0.62), True, "below it at B = 1"),
    ((2.1, 2.0, 2.3), False, "nearer the roofline"),
    ((0.6, 1.9, 2.0), False, "only at B = 1 is it nearer"),
])
def test_the_overhead_sentence_follows_the_numbers(measured, ok, says):
    verdict = engine.overhead_verdict(rows(measured))
    assert verdict.ok is ok and verdict.tested and says in verdict.sentence


def test_the_acceptance_sentence_follows_the_numbers():
    ours = {"accepted_per_drafted": 0.54, "alpha": 0.77, "mean_tokens_per_iteration": 3.2, "prompts": 64}
    good = engine.acceptance_verdict(0.52, ours)
    assert good.ok and "on all 64 prompts of the set the engine's requests were drawn from" in good.sentence
    bad = engine.acceptance_verdict(0.30, ours)
    assert not bad.ok and "do not draft alike" in bad.sentence


@pytest.mark.parametrize("r, says", [((1.1, 1.2, 1.4), "at every batch"),
                                     ((1.2, 1.8, 2.5), "Below 1.5 at B = 1 (a pass"),
                                     ((2.0, 2.5, 3.0), "Above 1.5 at every batch")])
def test_the_verify_sentence_follows_the_numbers(r, says):
    k = 4
    table = [{"concurrency": b, "k": k, "S measured": (k + 1) / (k + 2 * rr), "verify/decode measured": rr,
              "verify/decode roofline": 1.0} for b, rr in zip((1, 2, 4), r, strict=True)]
    verdict = engine.verify_verdict(table)
    assert says in verdict.sentence and verdict.ok is (r[0] <= 1.5)
    assert ("would cost 5" in verdict.sentence) is (r[0] <= 1.5)


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


PARENT = """
import subprocess, sys, time
from specnotes import engine
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

    monkeypatch.setattr(engine, "require_binary", lambda version=engine.LLAMA_CPP_PYTHON: tmp_path / "llama-server")
    monkeypatch.setattr(engine.subprocess, "Popen", popen)
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

    from specnotes import gguf_export

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
    monkeypatch.setattr(engine, "require_binary", lambda version=engine.LLAMA_CPP_PYTHON: tmp_path / "llama-server")
    fake = {"target": tmp_path / "t.gguf", "draft": tmp_path / "d.gguf"}
    monkeypatch.setattr(engine, "shipped_ggufs", lambda folder=None: fake)

    def ran(*args, **kwargs):
        raise AssertionError("it ran")

    monkeypatch.setattr(engine, "measure_pairs", ran)
    monkeypatch.setattr(engine, "Server", ran)
    with pytest.raises(SystemExit) as exit_:
        engine.main(argv + (["--out", str(tmp_path / "s.json")] if argv[0] == "measure" else []))
    assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_serve_exits_non_zero_when_the_server_dies(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(engine, "require_binary", lambda version=engine.LLAMA_CPP_PYTHON: tmp_path / "llama-server")
    fake = {"target": tmp_path / "t.gguf", "draft": tmp_path / "d.gguf"}
    monkeypatch.setattr(engine, "shipped_ggufs", lambda folder=None: fake)
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

    monkeypatch.setattr(engine, "Server", Dying)
    assert engine.main(["serve"]) == 1
    assert "llama-server exited with code 3" in (err := capsys.readouterr().err) and "segmentation fault" in err
