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

from specnotes import engine_client  # noqa: E402
from specnotes.engine_client import EngineError  # noqa: E402

MODEL = "stub-model"


class Stub:
    """Streams ``max_tokens`` tokens: the first chunk after ``first_delay`` s, then a chunk of
    ``per_chunk`` tokens every ``per_chunk * token_delay`` s, then usage and [DONE]. Misbehaves on request:
    ``status=500``, ``drop_after=n`` (close the connection after n chunks), ``stall_after=n`` (go silent)."""

    def __init__(self, first_delay=0.08, token_delay=0.02, per_chunk=1, status=200, drop_after=None,
                 stall_after=None, usage=True):
        self.first_delay, self.token_delay, self.per_chunk = first_delay, token_delay, per_chunk
        self.status, self.drop_after, self.stall_after, self.usage = status, drop_after, stall_after, usage
        self.active = self.max_active = self.completions = 0
        self.payloads = []

    def app(self):
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.complete)
        return app

    async def models(self, request):
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def complete(self, request):
        payload = await request.json()
        self.payloads.append(payload)
        if self.status != 200:
            return web.Response(status=self.status, text="stub: internal error")
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
                m = min(self.per_chunk, payload["max_tokens"] - sent)
                chunk = {"choices": [{"index": 0, "text": "x" * m, "finish_reason": None}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
                sent, chunks = sent + m, chunks + 1
                if sent < payload["max_tokens"]:
                    await asyncio.sleep(self.token_delay * min(self.per_chunk, payload["max_tokens"] - sent))
            if self.usage:
                usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": sent}}
                await resp.write(f"data: {json.dumps(usage)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            self.completions += 1
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


def measure(url, concurrencies=(1,), max_tokens=12, requests=None, timeout=5.0, warmup=0):
    return asyncio.run(engine_client.measure(url, MODEL, list(concurrencies), max_tokens, 64, requests, warmup,
                                             timeout, progress=lambda *_: None))


def test_measures_the_injected_ttft_and_tpot():
    stub = Stub(first_delay=0.08, token_delay=0.02)
    with serving(stub) as url:
        [level] = measure(url, max_tokens=12, requests=3)
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
        [level] = measure(url, max_tokens=12, requests=2)
    for r in level.requests:
        assert r.tokens == 12 and len(r.chunk_times) == 4
        # chunks 3 tokens apart: (last - first) = 9 token delays, over 12 - 1 tokens
        expected = 9 * 0.02 / 11
        assert 0.9 * expected <= r.tpot_s < 2 * expected + 0.02, r


def test_without_usage_it_counts_chunks_and_says_so():
    stub = Stub(first_delay=0.01, token_delay=0.005, usage=False)
    with serving(stub) as url:
        [level] = measure(url, max_tokens=5, requests=1)
    assert level.requests[0].tokens == 5 and level.requests[0].tokens_from == "chunks"


def test_holds_the_requested_concurrency():
    stub = Stub(first_delay=0.05, token_delay=0.01)
    with serving(stub) as url:
        levels = measure(url, concurrencies=(1, 4), max_tokens=6, requests=8)
    assert [lv.concurrency for lv in levels] == [1, 4]
    assert stub.max_active == 4 and stub.completions == 16
    assert all(len(lv.requests) == 8 for lv in levels)


def test_an_http_error_is_reported_with_its_status():
    with serving(Stub(status=500)) as url, pytest.raises(EngineError, match=r"HTTP 500 .*stub: internal error"):
        measure(url)


def test_a_dropped_stream_is_reported():
    with serving(Stub(drop_after=3)) as url, pytest.raises(EngineError, match=r"(ended before \[DONE\]|broke) after"):
        measure(url)


def test_a_silent_engine_times_out():
    start = time.perf_counter()
    with serving(Stub(stall_after=2)) as url, pytest.raises(EngineError, match=r"no data .* for 0.3 s .*timeout"):
        measure(url, timeout=0.3)
    assert time.perf_counter() - start < 10


def test_an_unreachable_server_and_a_wrong_model_are_explained():
    with serving(Stub()) as url:
        pass  # the port is closed again
    with pytest.raises(EngineError, match="cannot reach .*/models"):
        measure(url)
    with serving(Stub()) as url, pytest.raises(EngineError, match="not 'nope'"):
        asyncio.run(engine_client.measure(url, "nope", [1], 4, 16, 1, 0, 2.0, progress=lambda *_: None))


def test_main_writes_a_complete_record_that_measure_can_read(tmp_path):
    from specnotes.measure import Record

    out = tmp_path / "off.json"
    with serving(Stub(first_delay=0.01, token_delay=0.005)) as url:
        assert engine_client.main(["--url", url, "--model", MODEL, "--concurrency", "1,2", "--max-tokens", "6",
                                   "--requests", "4", "--warmup", "1", "--label", "off", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == engine_client.SCHEMA and doc["provenance"]["label"] == "off"
    records = [Record.from_dict(r) for r in doc["sections"][engine_client.SECTION]]
    assert [r.params["concurrency"] for r in records] == [1, 2]
    for r in records:
        assert r.params["requests"] == 4 and len(r.samples) == 4 and r.q1_s <= r.median_s <= r.q3_s
        assert r.extra["output_tokens"] == 24 and r.extra["output_tokens_per_s"] > 0
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("stub", [Stub(status=500), Stub(drop_after=2)], ids=["http-500", "dropped-stream"])
def test_main_writes_nothing_when_a_request_fails(tmp_path, capsys, stub):
    out = tmp_path / "run.json"
    with serving(stub) as url:
        code = engine_client.main(["--url", url, "--model", MODEL, "--concurrency", "1", "--max-tokens", "6",
                                   "--requests", "2", "--warmup", "0", "--timeout", "2", "--out", str(out)])
    assert code == 1 and not out.exists() and not list(tmp_path.iterdir())
    assert "Nothing was written" in capsys.readouterr().err


def test_speedup_divides_the_two_runs():
    def doc(tpots, tokens_per_s):
        return {"sections": {engine_client.SECTION: [
            {"params": {"concurrency": c}, "median_s": t, "extra": {"output_tokens_per_s": r, "ttft_median_s": 0.1}}
            for c, t, r in zip((1, 8), tpots, tokens_per_s, strict=True)]}}

    rows = engine_client.speedup(doc([0.020, 0.030], [50, 260]), doc([0.010, 0.040], [100, 195]))
    assert [r["concurrency"] for r in rows] == [1, 8]
    assert rows[0]["S (TPOT)"] == pytest.approx(2.0) and rows[1]["S (TPOT)"] == pytest.approx(0.75)
    assert rows[0]["S (tokens/s)"] == pytest.approx(2.0) and rows[1]["S (tokens/s)"] == pytest.approx(0.75)


@pytest.mark.parametrize("argv, message", [
    (["--url", "localhost:8000/v1"], "must start with http"),
    (["--url", "http://h/v1", "--concurrency", "1,0"], "--concurrency"),
    (["--url", "http://h/v1", "--max-tokens", "1"], "--max-tokens"),
    (["--url", "http://h/v1", "--timeout", "0"], "--timeout"),
])
def test_bad_arguments_are_refused(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit):
        engine_client.parse_args([*argv, "--model", MODEL, "--out", str(tmp_path / "x.json")])
    assert message in capsys.readouterr().err
