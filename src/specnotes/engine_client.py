"""Measure S(B) on a real serving engine: a streaming client for any OpenAI-compatible server (Chapter 8).

    python -m specnotes.engine_client --url http://HOST:PORT/v1 --model NAME --label off \\
        --concurrency 1,2,4,8,16,32,64,128,256 --max-tokens 256 --out serve-off.json

drives the server (vLLM's ``vllm serve``, SGLang's ``launch_server``, anything that speaks the OpenAI
``/v1/completions`` streaming protocol) at each concurrency in turn: ``concurrency`` requests always
in flight (closed loop), a fixed prompt set, a fixed output length (``max_tokens`` with ``ignore_eos``,
which both engines accept), temperature 0. For every request it records the time to the first token
(TTFT), the time per output token after it (TPOT = (last − first chunk) / (tokens − 1), tokens from the
stream's ``usage``, since a speculating engine sends several tokens per chunk) and the gaps between
chunks; for every level, output tokens per second. Run it once with speculation off and once on: the
ratio of the two records is S(B) on that engine (``speedup``).

Any failed request (an HTTP error, a stream that ends before ``[DONE]``, no data for ``--timeout``
seconds) stops the run with a message that says which, and writes nothing: a record on disk is always
complete. The record is the same document ``specnotes.bench`` writes: provenance, then per-level
records (``measure.Record`` fields; the samples are the requests' TPOTs).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from urllib.parse import urlparse

from specnotes import validate

SCHEMA = "specnotes.reference/1"  # the document specnotes.bench writes
SECTION = "engine_serve"


class EngineError(RuntimeError):
    """The engine failed a request, or could not be reached: the measurement is incomplete."""


@dataclass
class RequestTiming:
    ttft_s: float
    latency_s: float
    tokens: int
    chunk_times: list[float] = field(repr=False)  # seconds after sending, one per chunk with text
    tokens_from: str = "usage"

    @property
    def tpot_s(self) -> float:
        """Seconds per output token after the first chunk: (last − first chunk) / (tokens − 1)."""
        return (self.chunk_times[-1] - self.chunk_times[0]) / (self.tokens - 1) if self.tokens > 1 else float("nan")

    @property
    def gaps_s(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]


@dataclass
class LevelResult:
    concurrency: int
    requests: list[RequestTiming]
    wall_s: float

    @property
    def output_tokens(self) -> int:
        return sum(r.tokens for r in self.requests)

    def record(self, label: str, model: str, url: str, max_tokens: int, prompt_chars: int) -> dict:
        """One ``measure.Record`` (as a dict) for this level: samples are the requests' TPOTs."""
        tpots = sorted(r.tpot_s for r in self.requests)
        ttfts = sorted(r.ttft_s for r in self.requests)
        gaps = [g for r in self.requests for g in r.gaps_s]
        q1, median, q3 = statistics.quantiles(tpots, n=4, method="inclusive") if len(tpots) > 1 else tpots * 3
        return {
            "name": SECTION,
            "params": {"concurrency": self.concurrency, "label": label, "model": model, "max_tokens": max_tokens,
                       "prompt_chars": prompt_chars, "requests": len(self.requests)},
            "median_s": median, "q1_s": q1, "q3_s": q3, "samples": tpots,
            "device": "remote engine", "dtype": "", "torch": "",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": url,
            "extra": {
                "what": "samples: per-request TPOT in seconds",
                "ttft_median_s": statistics.median(ttfts), "ttft_p90_s": _quantile(ttfts, 0.9),
                "tpot_mean_s": statistics.fmean(tpots), "tpot_p90_s": _quantile(tpots, 0.9),
                "chunk_gap_median_s": statistics.median(gaps) if gaps else None,
                "output_tokens": self.output_tokens, "output_tokens_per_s": self.output_tokens / self.wall_s,
                "requests_per_s": len(self.requests) / self.wall_s, "wall_s": self.wall_s,
                "tokens_from": sorted({r.tokens_from for r in self.requests}),
            },
            "threads": None, "cuda": None, "driver": None,
        }


def _quantile(sorted_xs: list[float], q: float) -> float:
    return sorted_xs[min(len(sorted_xs) - 1, int(q * len(sorted_xs)))]


def default_prompts(n: int, chars: int) -> list[str]:
    """``n`` fixed prompts of ``chars`` characters from the book's held-out text (the same on every run)."""
    text = (resources.files("specnotes") / "data" / "austen_eval.txt").read_text(encoding="utf-8")
    step = max(chars, (len(text) - chars) // n)
    return [text[i * step: i * step + chars] for i in range(n)]


# ---------------------------------------------------------------------------------------------- the client


async def stream_completion(session, url: str, model: str, prompt: str, max_tokens: int, timeout_s: float,
                            clock=time.perf_counter) -> RequestTiming:
    """POST one streaming completion and time its chunks. Raises ``EngineError`` on any failure."""
    import aiohttp

    payload = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
               "ignore_eos": True, "stream_options": {"include_usage": True}}
    endpoint = f"{url}/completions"
    chunk_times: list[float] = []
    usage_tokens, done = None, False
    start = clock()
    try:
        async with session.post(endpoint, json=payload,
                                timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeout_s,
                                                              sock_read=timeout_s)) as resp:
            if resp.status != 200:
                body = (await resp.text())[:300]
                raise EngineError(f"HTTP {resp.status} from {endpoint}: {body!r}")
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    usage_tokens = chunk["usage"].get("completion_tokens")
                if any(c.get("text") for c in chunk.get("choices") or []):
                    chunk_times.append(clock() - start)
    except asyncio.TimeoutError:
        raise EngineError(f"no data from {endpoint} for {timeout_s:g} s after {len(chunk_times)} chunks "
                          f"(timeout): is the engine overloaded or stuck?") from None
    except aiohttp.ClientPayloadError as e:
        raise EngineError(f"the stream from {endpoint} broke after {len(chunk_times)} chunks: {e}") from None
    except aiohttp.ClientConnectionError as e:
        raise EngineError(f"cannot talk to {endpoint}: {e}") from None
    if not done:
        raise EngineError(f"the stream from {endpoint} ended before [DONE] after {len(chunk_times)} chunks "
                          f"(dropped connection?)")
    if not chunk_times:
        raise EngineError(f"{endpoint} returned no tokens")
    tokens, source = (usage_tokens, "usage") if usage_tokens else (len(chunk_times), "chunks")
    return RequestTiming(chunk_times[0], clock() - start, tokens, chunk_times, source)


async def run_level(session, url: str, model: str, prompts: list[str], max_tokens: int, concurrency: int,
                    requests: int, timeout_s: float, clock=time.perf_counter) -> LevelResult:
    """``requests`` completions with ``concurrency`` always in flight; the first failure cancels the rest."""
    queue: asyncio.Queue = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(prompts[i % len(prompts)])
    results: list[RequestTiming] = []

    async def worker():
        while not queue.empty():
            prompt = queue.get_nowait()
            results.append(await stream_completion(session, url, model, prompt, max_tokens, timeout_s, clock))

    start = clock()
    tasks = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*tasks)
    except EngineError as e:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise EngineError(f"at concurrency {concurrency}: {e}") from None
    return LevelResult(concurrency, results, clock() - start)


async def check_model(session, url: str, model: str, timeout_s: float):
    """GET /models: the server is up and serves ``model``."""
    import aiohttp

    try:
        async with session.get(f"{url}/models", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                raise EngineError(f"HTTP {resp.status} from {url}/models: {(await resp.text())[:300]!r}")
            served = [m.get("id") for m in (await resp.json()).get("data", [])]
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        raise EngineError(f"cannot reach {url}/models: {e or type(e).__name__}. Is the server running, and is "
                          "--url the OpenAI base URL (ending in /v1)?") from None
    if model not in served:
        raise EngineError(f"{url} serves {served}, not {model!r}: pass one of those as --model")


async def measure(url: str, model: str, concurrencies: list[int], max_tokens: int = 256, prompt_chars: int = 1024,
                  requests_per_level: int | None = None, warmup: int = 2, timeout_s: float = 60.0,
                  prompts: list[str] | None = None, progress=print) -> list[LevelResult]:
    """Every level in turn (after ``warmup`` unmeasured requests). Requests per level: by default
    4 × concurrency, at least 16, so every slot turns over a few times."""
    import aiohttp

    url = url.rstrip("/")
    prompts = prompts or default_prompts(64, prompt_chars)
    connector = aiohttp.TCPConnector(limit=max(concurrencies))
    async with aiohttp.ClientSession(connector=connector) as session:
        await check_model(session, url, model, timeout_s)
        if warmup:
            await run_level(session, url, model, prompts, max_tokens, 1, warmup, timeout_s)
        levels = []
        for c in concurrencies:
            n = requests_per_level or max(16, 4 * c)
            level = await run_level(session, url, model, prompts, max_tokens, c, n, timeout_s)
            tpot = statistics.median(r.tpot_s for r in level.requests)
            progress(f"concurrency {c}: {n} requests, TPOT median {1e3 * tpot:.1f} ms, "
                     f"{level.output_tokens / level.wall_s:.0f} output tokens/s")
            levels.append(level)
    return levels


# ---------------------------------------------------------------------------------------------- records


def document(levels: list[LevelResult], label: str, model: str, url: str, max_tokens: int, prompt_chars: int,
             command: str) -> dict:
    """The bench-format document: provenance and one record per level."""
    provenance = {"device": "remote engine", "host": url, "engine_model": model, "label": label,
                  "client": platform.node(), "python": platform.python_version(),
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "command": command}
    return {"schema": SCHEMA, "provenance": provenance,
            "sections": {SECTION: [lv.record(label, model, url, max_tokens, prompt_chars) for lv in levels]},
            "skipped": [], "seconds": {SECTION: round(sum(lv.wall_s for lv in levels), 2)}}


def write_atomic(doc: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def speedup(off: dict, on: dict) -> list[dict]:
    """S at each concurrency both documents measured: TPOT off / TPOT on (medians), and the ratio of
    output tokens per second."""
    by_c = lambda doc: {r["params"]["concurrency"]: r for r in doc["sections"][SECTION]}  # noqa: E731
    a, b = by_c(off), by_c(on)
    return [{"concurrency": c, "S (TPOT)": a[c]["median_s"] / b[c]["median_s"],
             "S (tokens/s)": b[c]["extra"]["output_tokens_per_s"] / a[c]["extra"]["output_tokens_per_s"],
             "TTFT off ms": 1e3 * a[c]["extra"]["ttft_median_s"], "TTFT on ms": 1e3 * b[c]["extra"]["ttft_median_s"]}
            for c in sorted(a.keys() & b.keys())]


# ---------------------------------------------------------------------------------------------- command line


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m specnotes.engine_client",
                                     description="Measure TPOT, TTFT and tokens/s of an OpenAI-compatible engine at "
                                                 "several concurrencies (run once with speculation off, once on).")
    parser.add_argument("--url", required=True, help="the OpenAI base URL, e.g. http://HOST:8000/v1")
    parser.add_argument("--model", required=True, help="the served model name (GET /v1/models lists them)")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32,64,128,256",
                        help="comma-separated requests in flight (default: 1,2,4,...,256)")
    parser.add_argument("--label", default="", help="what this run is, e.g. 'off' or 'on, k=4' (kept in the record)")
    parser.add_argument("--max-tokens", type=int, default=256, help="output tokens per request (ignore_eos)")
    parser.add_argument("--prompt-chars", type=int, default=1024, help="characters per prompt (book text)")
    parser.add_argument("--requests", type=int, default=None, help="requests per level (default 4 x concurrency, "
                                                                   ">= 16)")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured requests first")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds without data before a request fails")
    parser.add_argument("--out", type=Path, required=True, help="where to write the record (JSON)")
    args = parser.parse_args(argv)
    if urlparse(args.url).scheme not in ("http", "https"):
        parser.error(f"--url must start with http:// or https://, got {args.url!r}")
    try:
        args.concurrency = validate.integers("--concurrency", [int(c) for c in args.concurrency.split(",")], low=1)
        validate.integer("--max-tokens", args.max_tokens, low=2)
        validate.integer("--prompt-chars", args.prompt_chars, low=1)
        validate.integer("--warmup", args.warmup, low=0)
        validate.number("--timeout", args.timeout, low=0, low_open=True)
        if args.requests is not None:
            validate.integer("--requests", args.requests, low=1)
    except ValueError as e:
        parser.error(str(e))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command = "python -m specnotes.engine_client " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        levels = asyncio.run(measure(args.url, args.model, args.concurrency, args.max_tokens, args.prompt_chars,
                                     args.requests, args.warmup, args.timeout))
    except EngineError as e:
        print(f"error: {e}\nNothing was written: a record is only written when every level completed.",
              file=sys.stderr)
        return 1
    doc = document(levels, args.label, args.model, args.url, args.max_tokens, args.prompt_chars, command.strip())
    print(f"wrote {write_atomic(doc, args.out)} ({len(levels)} levels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
