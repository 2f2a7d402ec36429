"""The engine client against a stub OpenAI-compatible server on 127.0.0.1 (aiohttp, test-only).

The stub proves only that the client speaks the protocol, measures what it is sent (known delays in,
the same TPOT and TTFT out) and fails cleanly: it is not an engine, and its numbers mean nothing else.
"""

import asyncio
import contextlib
import json
import threading
import time

import pytest

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

from specnotes import bench, measure  # noqa: E402
from specnotes.serve import engine_client  # noqa: E402
from specnotes.serve.engine_client import EngineError  # noqa: E402

MODEL = "stub-model"


class Stub:
    """Streams ``max_tokens`` tokens: the first chunk after ``first_delay`` s, then a chunk of
    ``per_chunk`` tokens every ``per_chunk * token_delay`` s, then usage and [DONE]. Misbehaves on request:
    ``status=500``, ``drop_after=n`` (close the connection after n chunks), ``stall_after=n`` (go silent),
    ``fail_from=n`` (answer HTTP 500 once n requests have completed), ``malformed_after=n`` (send ``malformed``,
    a data line that is not a JSON object, after n chunks). ``close_after_response``: a connection serves one
    completion, as llama-server's does (it closes it after each): a request sent on it again is not answered,
    the connection is closed. Closing right after the response would race a pooled client's next write, and a
    client that saw the close in time would pass; this way reusing a connection always fails. ``context``: the
    context length /v1/models reports (vLLM's ``max_model_len``); ``timings``: send llama-server's ``timings``
    object (``predicted_per_token_ms`` = ``token_delay``, ``draft_n`` and ``draft_n_accepted`` from ``drafts``)
    in the last chunk."""

    def __init__(self, first_delay=0.08, token_delay=0.02, per_chunk=1, status=200, drop_after=None,
                 stall_after=None, usage=True, fail_from=None, malformed_after=None, malformed=b"{'text': 'x'",
                 close_after_response=False, context=None, timings=False, drafts=(8, 6)):
        self.first_delay, self.token_delay, self.per_chunk = first_delay, token_delay, per_chunk
        self.status, self.drop_after, self.stall_after, self.usage = status, drop_after, stall_after, usage
        self.fail_from, self.malformed_after, self.malformed = fail_from, malformed_after, malformed
        self.close_after_response, self.context = close_after_response, context
        self.timings, self.drafts = timings, drafts
        self.active = self.max_active = self.completions = 0
        self.payloads = []
        self.served = set()  # connections that have carried a completion (close_after_response)

    def app(self):
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.complete)
        return app

    async def models(self, request):
        entry = {"id": MODEL, "object": "model"} | ({"max_model_len": self.context} if self.context else {})
        return web.json_response({"object": "list", "data": [entry]})

    async def complete(self, request):
        if self.close_after_response and request.transport in self.served:
            request.transport.close()
            return web.Response(status=500)  # never sent: the connection is gone
        payload = await request.json()
        self.payloads.append(payload)
        if self.status != 200 or (self.fail_from is not None and self.completions >= self.fail_from):
            return web.Response(status=self.status if self.status != 200 else 500, text="stub: internal error")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await asyncio.sleep(self.first_delay)
            sent = chunks = 0
            while sent < payload["max_tokens"]:
                if chunks == self.drop_after:
                    request.transport.close()
                    return resp
                if chunks == self.stall_after:
                    await asyncio.sleep(3)
                if chunks == self.malformed_after:
                    await resp.write(b"data: " + self.malformed + b"\n\n")
                m = min(self.per_chunk, payload["max_tokens"] - sent)
                chunk = {"choices": [{"index": 0, "text": "x" * m, "finish_reason": None}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
                sent, chunks = sent + m, chunks + 1
                if sent < payload["max_tokens"]:
                    await asyncio.sleep(self.token_delay * min(self.per_chunk, payload["max_tokens"] - sent))
            if self.usage:
                usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": sent}}
                if self.timings:
                    usage["timings"] = {"predicted_n": sent, "predicted_per_token_ms": 1e3 * self.token_delay,
                                        "draft_n": self.drafts[0], "draft_n_accepted": self.drafts[1]}
                await resp.write(f"data: {json.dumps(usage)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            self.completions += 1
            self.served.add(request.transport)
            return resp
        finally:
            self.active -= 1


@contextlib.contextmanager
def serving(stub):
    """The stub on 127.0.0.1 (a free port), in a thread with its own event loop."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(stub.app(), shutdown_timeout=0.5)  # do not wait for a stalled handler
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def run_levels(url, concurrencies=(1,), max_tokens=12, requests=None, timeout=5.0, warmup=0):
    return asyncio.run(engine_client.measure(url, MODEL, list(concurrencies), max_tokens, 64, requests, warmup,
                                             timeout, progress=lambda *_: None))


def test_measures_the_injected_ttft_and_tpot():
    stub = Stub(first_delay=0.08, token_delay=0.02)
    with serving(stub) as url:
        [level] = run_levels(url, max_tokens=12, requests=3)
    assert [r.tokens for r in level.requests] == [12, 12, 12]
    for r in level.requests:
        assert 0.08 <= r.ttft_s < 0.08 + 0.25, r  # never less than the server waited
        assert 0.9 * 0.02 <= r.tpot_s < 2 * 0.02 + 0.02, r
        assert r.tokens_from == "usage"
    payload = stub.payloads[0]
    assert payload["stream"] and payload["ignore_eos"] and payload["max_tokens"] == 12
    assert payload["stream_options"] == {"include_usage": True} and payload["model"] == MODEL


def test_counts_tokens_from_usage_when_chunks_carry_several():
    # a speculating engine streams the tokens one verify pass accepted in one chunk
    stub = Stub(first_delay=0.02, token_delay=0.02, per_chunk=3)
    with serving(stub) as url:
        [level] = run_levels(url, max_tokens=12, requests=2)
    for r in level.requests:
        assert r.tokens == 12 and len(r.chunk_times) == 4
        # chunks 3 tokens apart: (last - first) = 9 token delays, over 12 - 1 tokens
        expected = 9 * 0.02 / 11
        assert 0.9 * expected <= r.tpot_s < 2 * expected + 0.02, r


def test_without_usage_it_counts_chunks_and_says_so():
    stub = Stub(first_delay=0.01, token_delay=0.005, usage=False)
    with serving(stub) as url:
        [level] = run_levels(url, max_tokens=5, requests=1)
    assert level.requests[0].tokens == 5 and level.requests[0].tokens_from == "chunks"


def test_holds_the_requested_concurrency():
    stub = Stub(first_delay=0.05, token_delay=0.01)
    with serving(stub) as url:
        levels = run_levels(url, concurrencies=(1, 4), max_tokens=6, requests=8)
    assert [lv.concurrency for lv in levels] == [1, 4]
    assert stub.max_active == 4 and stub.completions == 16
    assert all(len(lv.requests) == 8 for lv in levels)


def test_an_http_error_is_reported_with_its_status():
    with serving(Stub(status=500)) as url, pytest.raises(EngineError, match=r"HTTP 500 .*stub: internal error"):
        run_levels(url)


def test_a_dropped_stream_is_reported():
    with serving(Stub(drop_after=3)) as url, pytest.raises(EngineError, match=r"(ended before \[DONE\]|broke) after"):
        run_levels(url)


def test_a_silent_engine_times_out():
    start = time.perf_counter()
    with serving(Stub(stall_after=2)) as url, pytest.raises(EngineError, match=r"no data .* for 0.3 s .*timeout"):
        run_levels(url, timeout=0.3)
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("line, why", [(b"{'text': 'x'", "Expecting property name"), (b"[1, 2]", "JSON list"),
                                       (b"null", "JSON NoneType")])
def test_a_malformed_stream_line_is_an_engine_error(line, why):
    with serving(Stub(malformed_after=2, malformed=line)) as url, \
            pytest.raises(EngineError, match=rf"sent a malformed stream line after 2 chunks: .*{why}.*one JSON object"):
        run_levels(url)


def test_fewer_requests_than_a_concurrency_is_refused_before_any_request():
    stub = Stub()
    with serving(stub) as url:
        with pytest.raises(ValueError, match=r"--requests 4 is below --concurrency 8, 16: .*--requests 16 or more"):
            run_levels(url, concurrencies=(1, 8, 16), requests=4)
        assert stub.payloads == []  # refused before anything was sent: no level mislabelled
        [level] = run_levels(url, concurrencies=(4,), requests=4)  # as many requests as in flight: fine
    assert level.concurrency == 4 and len(level.requests) == 4 and stub.max_active == 4
    assert engine_client.check_levels([1, 2], None) == [1, 2]


def test_bench_serve_refuses_fewer_requests_than_a_concurrency(tmp_path, capsys):
    # at the command line (exit 2, before anything is sent), and in engine_client.measure for other callers
    out = tmp_path / "run.json"
    with serving(Stub()) as url, pytest.raises(SystemExit) as exit_:
        serve(url, out, "--concurrency", "1,8")
    assert exit_.value.code == 2 and "--requests 4 is below --concurrency 8" in capsys.readouterr().err
    assert not out.exists()
    with serving(Stub()) as url, pytest.raises(ValueError, match="--requests 4 is below --concurrency 8"):
        asyncio.run(engine_client.measure(url, MODEL, [1, 8], 6, 16, 4, 0, 2.0, progress=lambda *_: None))


def test_an_unreachable_server_and_a_wrong_model_are_explained():
    with serving(Stub()) as url:
        pass  # the port is closed again
    with pytest.raises(EngineError, match="cannot reach .*/models"):
        run_levels(url)
    with serving(Stub()) as url, pytest.raises(EngineError, match="not 'nope'"):
        asyncio.run(engine_client.measure(url, "nope", [1], 4, 16, 1, 0, 2.0, progress=lambda *_: None))


# ---------------------------------------------------------------------------------------------- bench serve


def serve(url, out, *extra):
    return bench.main(["serve", "--url", url, "--model", MODEL, "--max-tokens", "6", "--requests", "4",
                       "--warmup", "0", "--timeout", "2", "--out", str(out), *extra])


def test_bench_serve_writes_one_results_file_that_measure_reads(tmp_path):
    out = tmp_path / "off.json"
    with serving(Stub(first_delay=0.01, token_delay=0.005)) as url:
        assert serve(url, out, "--concurrency", "1,2", "--label", "off") == 0
    results = measure.load_results(out)  # the one format: schema specnotes.results/1
    prov = results.provenance
    assert set(measure.provenance("cpu")) <= set(prov)  # the same provenance block, every key present
    assert prov["device"] == "remote engine" and prov["host"] == url and prov["label"] == "off"
    assert prov["engine_model"] == MODEL and "bench serve --url" in prov["command"]
    records = results.sections[engine_client.SECTION]
    assert [r.params["concurrency"] for r in records] == [1, 2]
    for r in records:
        assert r.params["requests"] == 4 and len(r.samples) == 4 and r.q1_s <= r.median_s <= r.q3_s
        assert r.extra["output_tokens"] == 24 and r.extra["output_tokens_per_s"] > 0
        assert 0.9 * 0.005 <= r.median_s < 2 * 0.005 + 0.02  # the injected TPOT, never less
    assert [p.name for p in tmp_path.iterdir()] == ["off.json"]  # no temporary file left


@pytest.mark.parametrize("stub, extra", [
    (Stub(status=500), ()),
    (Stub(drop_after=2), ()),
    (Stub(stall_after=1, token_delay=0.005), ("--timeout", "0.3")),
    (Stub(fail_from=4, first_delay=0.01, token_delay=0.005), ()),  # level 1 completes, level 2 fails
    (Stub(malformed_after=1, first_delay=0.01, token_delay=0.005), ()),
], ids=["http-500", "dropped-stream", "timeout", "second-level-fails", "malformed-line"])
def test_bench_serve_writes_nothing_when_a_request_fails(tmp_path, capsys, stub, extra):
    out = tmp_path / "run.json"
    out.write_text("an earlier complete file\n")
    with serving(stub) as url:
        assert serve(url, out, "--concurrency", "1,2", *extra) == 1
    assert out.read_text() == "an earlier complete file\n" and len(list(tmp_path.iterdir())) == 1
    err = capsys.readouterr().err
    assert "Nothing was written" in err
    if stub.fail_from:
        assert "at concurrency 2: HTTP 500" in err and stub.completions == 4


@pytest.mark.parametrize("argv, message", [
    (["--url", "localhost:8000/v1"], "must start with http"),
    (["--url", "http://h/v1", "--concurrency", "1,0"], "--concurrency"),
    (["--url", "http://h/v1", "--concurrency", "1,two"], "--concurrency must be integers"),
    (["--url", "http://h/v1", "--max-tokens", "1"], "--max-tokens"),
    (["--url", "http://h/v1", "--timeout", "0"], "--timeout"),
    (["--url", "http://h/v1", "--concurrency", "1,8", "--requests", "4"], "--requests"),  # 8 could never be in flight
])
def test_bench_serve_refuses_bad_arguments(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["serve", *argv, "--model", MODEL, "--out", str(tmp_path / "x.json")])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_engine_client_module_is_bench_serve(capsys, tmp_path):
    with pytest.raises(SystemExit):
        engine_client.main(["--url", "ftp://h/v1", "--model", MODEL, "--out", str(tmp_path / "x.json")])
    assert "python -m specnotes.bench serve" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- S(B)


def run_file(label, levels, model=MODEL, max_tokens=6):
    """A ``bench serve`` result written by hand: {concurrency: (TPOT samples, output tokens/s, TTFT)}."""
    records = [measure.Record(engine_client.SECTION, {"concurrency": c, "model": model, "max_tokens": max_tokens,
                                                      "prompt_chars": 64, "requests": len(tpots)},
                              sorted(tpots)[len(tpots) // 2], min(tpots), max(tpots), sorted(tpots),
                              "remote engine", "", {"output_tokens_per_s": rate, "ttft_median_s": ttft})
               for c, (tpots, rate, ttft) in levels.items()]
    return measure.Results(engine_client.provenance("http://h/v1", model, label), {engine_client.SECTION: records})


OFF = run_file("off", {1: ([0.019, 0.020, 0.021], 50.0, 0.10), 8: ([0.030] * 3, 260.0, 0.20),
                       16: ([0.05] * 3, 300.0, 0.3)})
ON = run_file("on, k=4", {1: ([0.0095, 0.010, 0.0105], 100.0, 0.12), 8: ([0.040] * 3, 195.0, 0.25),
                          32: ([0.06] * 3, 500.0, 0.4)})


def test_speedup_divides_the_two_runs_by_hand():
    result = engine_client.speedup(OFF, ON, command="by hand")
    records = result.sections[engine_client.SPEEDUP]
    assert [r.params["concurrency"] for r in records] == [1, 8]  # the concurrencies both runs measured
    one, eight = (r.extra for r in records)
    assert one["speedup"] == pytest.approx(0.020 / 0.010) and eight["speedup"] == pytest.approx(0.75)
    assert one["speedup_tokens_per_s"] == pytest.approx(2.0) and eight["speedup_tokens_per_s"] == pytest.approx(0.75)
    # identical requests in a run: every bootstrap resample has the same medians, so the IQR is the point
    assert eight["speedup_q1"] == pytest.approx(0.75) and eight["speedup_q3"] == pytest.approx(0.75)
    # three requests each: resampled medians lie in [0.019, 0.021] and [0.0095, 0.0105]
    assert 0.019 / 0.0105 <= one["speedup_q1"] <= one["speedup"] <= one["speedup_q3"] <= 0.021 / 0.0095
    assert records[1].median_s == 0.040 and records[1].samples == [0.040] * 3  # timing: the run with speculation
    assert records[0].params["off"] == "off" and records[0].params["on"] == "on, k=4"
    assert [r.params["concurrency"] for r in result.sections["engine_serve_off"]] == [1, 8, 16]
    assert result.notes["off"]["label"] == "off" and result.provenance["command"] == "by hand"
    row = engine_client.speedup_table(result)[1]
    assert row == {"concurrency": 8, "S (TPOT)": pytest.approx(0.75), "S q1": pytest.approx(0.75),
                   "S q3": pytest.approx(0.75), "S (tokens/s)": pytest.approx(0.75), "TTFT off ms": pytest.approx(200),
                   "TTFT on ms": pytest.approx(250)}


@pytest.mark.parametrize("on, message", [
    (run_file("on", {1: ([0.01], 1.0, 0.1)}, model="other"), "differ in model"),
    (run_file("on", {1: ([0.01], 1.0, 0.1)}, max_tokens=128), "differ in max_tokens"),
    (run_file("on", {4: ([0.01], 1.0, 0.1)}), "share no concurrency"),
    (measure.Results({}, {"sampler": []}), "no engine_serve records"),
])
def test_speedup_refuses_runs_that_do_not_divide(on, message):
    with pytest.raises(ValueError, match=message):
        engine_client.speedup(OFF, on)


def test_speedup_warns_and_records_when_tokens_were_counted_from_chunks():
    chunked = run_file("on", {1: ([0.01] * 3, 100.0, 0.1), 8: ([0.04] * 3, 195.0, 0.2)})
    chunked.sections[engine_client.SECTION][1].extra["tokens_from"] = ["chunks"]
    off = run_file("off", {1: ([0.02] * 3, 50.0, 0.1), 8: ([0.03] * 3, 260.0, 0.2)})
    for r in off.sections[engine_client.SECTION]:
        r.extra["tokens_from"] = ["usage"]
    with pytest.warns(engine_client.ChunkCountWarning, match="concurrency 8 the on run counted tokens from stream "
                                                             "chunks.*TPOT is too large"):
        result = engine_client.speedup(off, chunked)
    one, eight = (r.extra for r in result.sections[engine_client.SPEEDUP])
    assert eight["tpot_from_chunks"] and eight["tokens_from_on"] == ["chunks"] and eight["tokens_from_off"] == ["usage"]
    assert not one["tpot_from_chunks"] and one["tokens_from_on"] == []  # unknown (a record without the field)


def test_bench_serve_speedup_writes_s_of_b_records(tmp_path, capsys):
    off, on, out = tmp_path / "off.json", tmp_path / "on.json", tmp_path / "s.json"
    measure.save_results(OFF, off)
    measure.save_results(ON, on)
    assert bench.main(["serve-speedup", "--off", str(off), "--on", str(on), "--out", str(out)]) == 0
    records = measure.load_results(out).sections[engine_client.SPEEDUP]
    assert [(r.params["concurrency"], round(r.extra["speedup"], 6)) for r in records] == [(1, 2.0), (8, 0.75)]
    assert "0.750" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench.main(["serve-speedup", "--off", str(off), "--on", str(off), "--out", str(out)])
    assert "same file" in capsys.readouterr().err


def test_two_stub_runs_end_to_end(tmp_path):
    # off: 6 tokens one per chunk, 0.04 s apart, TPOT 5 · 0.04 / 5 = 0.04 s. "On": chunks of 4 and 2 tokens,
    # 2 · 0.01 s apart, TPOT 0.02 / 5 = 0.004 s. S = 10 injected; contention can only add time to both
    off, on, out = tmp_path / "off.json", tmp_path / "on.json", tmp_path / "s.json"
    with serving(Stub(first_delay=0.01, token_delay=0.04)) as url:
        assert serve(url, off, "--concurrency", "1,2", "--label", "off") == 0
    with serving(Stub(first_delay=0.01, token_delay=0.01, per_chunk=4)) as url:
        assert serve(url, on, "--concurrency", "1,2", "--label", "on") == 0
    assert bench.main(["serve-speedup", "--off", str(off), "--on", str(on), "--out", str(out)]) == 0
    for r in measure.load_results(out).sections[engine_client.SPEEDUP]:
        assert r.extra["speedup"] > 1.5 and r.extra["speedup_tokens_per_s"] > 1.5, r.extra


# ---------------------------------------------------------------------------------------------- what real engines do


def test_a_server_that_closes_after_every_response_is_measured_whole():
    # llama-server closes the connection after each streamed completion; a pooled connection reused after that
    # failed every second request with 'Cannot write to closing transport'
    stub = Stub(first_delay=0.005, token_delay=0.002, close_after_response=True)
    with serving(stub) as url:
        levels = run_levels(url, concurrencies=(1, 2), max_tokens=4, requests=6, warmup=2)
    assert [len(lv.requests) for lv in levels] == [6, 6] and stub.completions == 14


def test_the_pooled_client_fails_on_such_a_server():
    # the mutant: the old connector (keep-alive pool) against the same stub must fail, or the test above proves nothing
    async def pooled(url):
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
            for _ in range(6):
                await engine_client.stream_completion(session, url, MODEL, "x", 4, 2.0)

    with serving(Stub(first_delay=0.005, token_delay=0.002, close_after_response=True)) as url, \
            pytest.raises(EngineError, match="cannot talk to"):
        asyncio.run(pooled(url))


@contextlib.contextmanager
def mute_server():
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        sock.close()


def test_an_engine_that_never_answers_is_a_timeout_that_says_how_long():
    start = time.perf_counter()
    with mute_server() as url, pytest.raises(EngineError, match=r"no answer from .*/models within 0.4 s \(timeout\)"):
        run_levels(url, timeout=0.4)
    assert time.perf_counter() - start < 10


def test_bench_serve_says_timeout_for_a_mute_engine(tmp_path, capsys):
    with mute_server() as url:
        assert serve(url, tmp_path / "x.json", "--concurrency", "1", "--timeout", "0.3") == 1
    err = capsys.readouterr().err
    assert "within 0.3 s (timeout)" in err and "Nothing was written" in err


@pytest.mark.parametrize("where", ["file-as-folder", "folder"])
def test_bench_serve_refuses_an_unwritable_out_before_measuring(tmp_path, capsys, where):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "run.json" if where == "file-as-folder" else tmp_path
    stub = Stub()
    with serving(stub) as url, pytest.raises(SystemExit) as exit_:
        serve(url, out, "--concurrency", "1")
    assert exit_.value.code == 2 and "--out" in capsys.readouterr().err
    assert stub.payloads == []  # nothing was measured


def test_temperature_and_prompt_files_reach_the_engine_and_the_record(tmp_path):
    prompts = tmp_path / "mine.json"
    prompts.write_text(json.dumps(["first prompt", "second, longer prompt"]))
    out = tmp_path / "run.json"
    stub = Stub(first_delay=0.005, token_delay=0.002)
    with serving(stub) as url:
        assert serve(url, out, "--concurrency", "1", "--temperature", "0.7", "--prompts", str(prompts)) == 0
    assert {p["temperature"] for p in stub.payloads} == {0.7}
    assert {p["prompt"] for p in stub.payloads} == {"first prompt", "second, longer prompt"}
    [record] = measure.load_results(out).sections[engine_client.SECTION]
    assert record.params["temperature"] == 0.7 and record.params["prompts"].startswith("mine.json (2 prompts")
    assert record.params["prompt_chars"] == len("second, longer prompt")
    lines = tmp_path / "lines.txt"
    lines.write_text("one\n\ntwo\n")
    assert engine_client.load_prompts(lines) == ["one", "two"]
    for bad, message in (("[1, 2]", "list of strings"), ("{", "not JSON"), ("[]", "no prompt")):
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(ValueError, match=message):
            engine_client.load_prompts(tmp_path / "bad.json")


def test_two_runs_at_different_temperatures_do_not_divide():
    hot = run_file("on", {1: ([0.01], 1.0, 0.1)})
    hot.sections[engine_client.SECTION][0].params["temperature"] = 1.0
    with pytest.raises(ValueError, match="differ in temperature"):
        engine_client.speedup(OFF, hot)


def test_prompts_past_the_engines_context_are_refused_before_any_completion(tmp_path, capsys):
    stub = Stub(first_delay=0.005, token_delay=0.002, context=256)
    with serving(stub) as url:
        with pytest.raises(SystemExit) as exit_:
            serve(url, tmp_path / "x.json", "--concurrency", "1", "--prompt-chars", "1024")
        assert exit_.value.code == 2 and "past the engine's context of 256" in capsys.readouterr().err
        assert stub.payloads == []
        # the default fits: 1024 characters cut to what the context leaves for the output (256 - 6)
        assert serve(url, tmp_path / "x.json", "--concurrency", "1") == 0
    [record] = measure.load_results(tmp_path / "x.json").sections[engine_client.SECTION]
    assert record.params["prompt_chars"] == 250 and {len(p["prompt"]) for p in stub.payloads} == {250}
    assert engine_client.fit_prompt_chars(None, 256, None) == engine_client.PROMPT_CHARS
    with pytest.raises(ValueError, match="--max-tokens 300 leaves no room"):
        engine_client.fit_prompt_chars(None, 300, 256)


def test_the_engines_own_timings_are_kept_beside_the_clients():
    stub = Stub(first_delay=0.01, token_delay=0.01, timings=True, drafts=(8, 6))
    with serving(stub) as url:
        [level] = run_levels(url, max_tokens=8, requests=3)
    extra = level.record(MODEL, 8, 64).extra
    assert extra["engine_draft_tokens"] == 24 and extra["engine_draft_accepted"] == 18
    assert extra["engine_acceptance"] == pytest.approx(0.75) and extra["engine_tpot_median_s"] == pytest.approx(0.01)
    assert extra["engine_predicted_tokens"] == 24
    assert "engine_tpot_median_s" not in Stub().__dict__ and level.engine_timings()["engine_timed_requests"] == 3


def test_engine_client_does_not_import_bench():
    # the house reads bottom-up: bench dispatches serve / serve-speedup to engine_client, never the reverse
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(engine_client))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not [m for m in imported if "bench" in m], imported


class StubServer:
    """What engine.measure_pairs needs of a llama-server, backed by a stub that streams at a fixed pace."""

    def __init__(self, url, **args):
        self.url, self.name, self.args = url, args["name"], args

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def metrics(self):
        return {}

    def command(self):
        return ["stub"]


@pytest.mark.parametrize(("settle", "pairs", "ran", "stop"), [(0.5, 4, 2, "settled: pair 2 moved no level's S"),
                                                              (1e-9, 3, 3, "the most pairs asked for (3)")])
def test_engine_measure_stops_once_s_settles(monkeypatch, settle, pairs, ran, stop):
    """measure_pairs on two stubs (on: the same pace as off): it runs pairs until the last one moved no level's S by
    ``settle``, at least min_pairs and at most ``pairs`` of them, and says which ended it."""
    from specnotes.serve import engine
    from specnotes.serve.engine import speedup  # where measure_pairs reads what is patched

    with serving(Stub(first_delay=0.01, token_delay=0.004)) as off, serving(Stub(first_delay=0.01,
                                                                                token_delay=0.004)) as on:
        urls = iter([off, on])
        monkeypatch.setattr(speedup, "Server", lambda **args: StubServer(next(urls), **args))
        monkeypatch.setattr(speedup, "build_info", lambda version=None: {})
        monkeypatch.setattr(speedup, "specnotes_acceptance", lambda *args, **kwargs: {})
        results = engine.measure_pairs("t.gguf", "d.gguf", [1, 2], pairs=pairs, max_tokens=6, prompt_chars=16,
                                       requests=4, warmup=0, name=MODEL, progress=lambda *_: None, min_pairs=2,
                                       settle=settle)
    assert results.notes["pairs"] == ran and results.notes["stop"].startswith(stop)
    assert {r.params["pair"] for r in results.sections[engine_client.SPEEDUP]} == set(range(ran))
    assert results.notes["min_pairs"] == 2 and results.notes["max_pairs"] == pairs
