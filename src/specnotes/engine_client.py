"""Measure S(B) on a real serving engine: a streaming client for any OpenAI-compatible server (Chapter 8).

    python -m specnotes.bench serve --url http://HOST:PORT/v1 --model NAME --label off \\
        --concurrency 1,2,4,8,16,32,64,128,256 --max-tokens 256 --out serve-off.json
    python -m specnotes.bench serve-speedup --off serve-off.json --on serve-on.json --out serve-speedup.json

``serve`` drives the server (vLLM's ``vllm serve``, SGLang's ``launch_server``, anything that speaks the
OpenAI ``/v1/completions`` streaming protocol) at each concurrency in turn: ``concurrency`` requests
always in flight (closed loop), a fixed prompt set, a fixed output length (``max_tokens`` with
``ignore_eos``, which both engines accept), temperature 0. For every request it records the time to the
first token (TTFT), the time per output token after it (TPOT = (last − first chunk) / (tokens − 1),
tokens from the stream's ``usage``, since a speculating engine sends several tokens per chunk) and the
gaps between chunks; for every level, output tokens per second. Run it once with speculation off and
once on; ``serve-speedup`` (:func:`speedup`) turns the two into S(B) records.

Any failed request (an HTTP error, a stream that ends before ``[DONE]``, no data for ``--timeout``
seconds) stops the run with a message that says which, and writes nothing: a file on disk is always
complete. Both write ``Results`` (``specnotes.results/1``, one provenance block), the format of
every ``specnotes.bench`` command: an ``engine_serve`` record per concurrency, whose samples are the
requests' TPOTs.
"""

from __future__ import annotations

import asyncio
import json
import platform
import statistics
import time
import warnings
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from specnotes import validate
from specnotes.measure.records import Record, Results, utc_now
from specnotes.measure.timing import quantile

SECTION = "engine_serve"  # one record per concurrency of one run
SPEEDUP = "engine_speedup"  # one record per concurrency of two runs, off and on
DEVICE = "remote engine"
SAME = ("model", "max_tokens", "prompt_chars")  # what two runs must share to be divided


class EngineError(RuntimeError):
    """The engine failed a request, or could not be reached: the measurement is incomplete."""


class ChunkCountWarning(UserWarning):
    """A run counted its tokens from stream chunks (the engine sent no usage): its TPOT is wrong for a
    speculating engine, which sends several tokens per chunk."""


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

    def record(self, model: str, max_tokens: int, prompt_chars: int) -> Record:
        """This level as one ``measure.Record``: the samples are the requests' TPOTs."""
        tpots = sorted(r.tpot_s for r in self.requests)
        ttfts = sorted(r.ttft_s for r in self.requests)
        gaps = [g for r in self.requests for g in r.gaps_s]
        q1, median, q3 = (quantile(tpots, q) for q in (0.25, 0.5, 0.75))
        return Record(
            name=SECTION,
            params={"concurrency": self.concurrency, "model": model, "max_tokens": max_tokens,
                    "prompt_chars": prompt_chars, "requests": len(self.requests)},
            median_s=median, q1_s=q1, q3_s=q3, samples=tpots, device=DEVICE, dtype="",
            extra={"what": "samples: per-request TPOT in seconds",
                   "ttft_median_s": statistics.median(ttfts), "ttft_p90_s": quantile(ttfts, 0.9),
                   "tpot_mean_s": statistics.fmean(tpots), "tpot_p90_s": quantile(tpots, 0.9),
                   "chunk_gap_median_s": statistics.median(gaps) if gaps else None,
                   "output_tokens": self.output_tokens, "output_tokens_per_s": self.output_tokens / self.wall_s,
                   "requests_per_s": len(self.requests) / self.wall_s, "wall_s": self.wall_s,
                   "tokens_from": sorted({r.tokens_from for r in self.requests})})


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
                try:
                    chunk = json.loads(data)
                    why = None if isinstance(chunk, dict) else f"JSON {type(chunk).__name__}, not an object"
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    why = getattr(e, "msg", None) or str(e)
                if why:
                    raise EngineError(f"{endpoint} sent a malformed stream line after {len(chunk_times)} chunks: "
                                      f"{data[:120]!r} ({why}); an OpenAI-compatible stream sends one JSON object "
                                      "per 'data:' line")
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


def check_levels(concurrencies: list[int], requests_per_level: int | None) -> list[int]:
    """The concurrencies, checked against the requests per level (``--concurrency``, ``--requests``): a level
    of c requests in flight needs at least c requests, or fewer would ever be in flight than its record says."""
    concurrencies = validate.integers("--concurrency", concurrencies, low=1)
    if requests_per_level is not None:
        requests_per_level = validate.integer("--requests", requests_per_level, low=1)
        above = [c for c in concurrencies if c > requests_per_level]
        if above:
            raise validate.BadArgument(
                f"--requests {requests_per_level} is below --concurrency {', '.join(map(str, above))}: a level needs "
                f"at least as many requests as it holds in flight, or at most {requests_per_level} would run at once "
                f"under a larger label. Pass --requests {max(concurrencies)} or more, or leave it out (default "
                "4 x concurrency, at least 16)")
    return concurrencies


async def measure(url: str, model: str, concurrencies: list[int], max_tokens: int = 256, prompt_chars: int = 1024,
                  requests_per_level: int | None = None, warmup: int = 2, timeout_s: float = 60.0,
                  prompts: list[str] | None = None, progress=print) -> list[LevelResult]:
    """Every level in turn (after ``warmup`` unmeasured requests). Requests per level: by default
    4 × concurrency, at least 16, so every slot turns over a few times; never fewer than the concurrency
    (``check_levels``: a ``ValueError`` naming ``--requests`` and ``--concurrency``)."""
    import aiohttp

    concurrencies = check_levels(concurrencies, requests_per_level)
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


def provenance(url: str, model: str, label: str, command: str = "") -> dict:
    """``measure.provenance``'s keys for a remote engine: the engine's URL as the host, the served model
    and what this run is (``label``); torch, dtype, threads, CUDA graphs and compilation are the engine's
    business (None here: its launch command says them)."""
    return {"device": DEVICE, "dtype": None, "dtype_reason": "chosen by the engine", "host": url, "cpu": None,
            "threads": None, "torch": None, "python": platform.python_version(), "cuda": None, "driver": None,
            "cuda_graphs": None, "compiled": None, "date": utc_now(), "engine_model": model, "label": label,
            "client": platform.node(), "command": command}


def results(levels: list[LevelResult], url: str, model: str, label: str, max_tokens: int, prompt_chars: int,
            command: str = "") -> Results:
    """One run as ``Results``: an ``engine_serve`` record per concurrency."""
    notes = {"what": "engine_serve samples: per-request TPOT (s); see extra for TTFT and tokens/s",
             "seconds": round(sum(lv.wall_s for lv in levels), 2)}
    return Results(provenance(url, model, label, command),
                           {SECTION: [lv.record(model, max_tokens, prompt_chars) for lv in levels]}, notes)


def _run_records(run: Results, which: str) -> dict[int, Record]:
    if SECTION not in run.sections or not run.sections[SECTION]:
        raise validate.BadArgument(f"the {which} run has no {SECTION} records: is it a `bench serve` file?")
    return {r.params["concurrency"]: r for r in run.sections[SECTION]}


def median_ratio_iqr(off: list[float], on: list[float], resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """The quartiles of median(off) / median(on) over bootstrap resamples of both runs' requests."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(off), np.asarray(on)
    ratios = (np.median(rng.choice(a, (resamples, a.size)), axis=1)
              / np.median(rng.choice(b, (resamples, b.size)), axis=1))
    q1, q3 = np.quantile(ratios, [0.25, 0.75])
    return float(q1), float(q3)


def speedup(off: Results, on: Results, command: str = "") -> Results:
    """S(B) from a run with speculation off and one with it on, at every concurrency both measured.

    An ``engine_speedup`` record per concurrency B: its timing is the speculative run's TPOT (samples per
    request), and ``extra`` holds S = median TPOT off / median TPOT on (``speedup``), the bootstrap IQR of
    that ratio (``speedup_q1``, ``speedup_q3``), S from output tokens per second (``speedup_tokens_per_s``),
    and both runs' TPOT and TTFT medians. The two runs' records travel along (``engine_serve_off``,
    ``engine_serve_on``) and their provenance blocks in the notes. Runs of different models, output lengths
    or prompt sizes are refused. A level whose tokens were counted from stream chunks rather than the engine's
    usage (``tokens_from``) gives a wrong TPOT for a speculating engine: ``speedup`` warns
    (``ChunkCountWarning``) and records it (``tokens_from_off``, ``tokens_from_on``, ``tpot_from_chunks``)."""
    a, b = _run_records(off, "off"), _run_records(on, "on")
    for key in SAME:
        values = {r.params[key] for r in [*a.values(), *b.values()]}
        if len(values) > 1:
            raise validate.BadArgument(f"the two runs differ in {key} ({sorted(map(str, values))}): S(B) divides "
                                       "two runs of the same model, output length and prompts")
    common = sorted(a.keys() & b.keys())
    if not common:
        raise validate.BadArgument(f"the two runs share no concurrency (off: {sorted(a)}, on: {sorted(b)})")
    records = []
    for c in common:
        x, y = a[c], b[c]
        q1, q3 = median_ratio_iqr(x.samples, y.samples)
        sources = {which: r.extra.get("tokens_from") or [] for which, r in (("off", x), ("on", y))}
        chunked = [which for which, s in sources.items() if "chunks" in s]
        if chunked:
            warnings.warn(f"at concurrency {c} the {' and '.join(chunked)} run counted tokens from stream chunks (the "
                          "engine sent no usage): a speculating engine sends several tokens per chunk, so that "
                          "run's TPOT is too large and S(B) is wrong. Use an engine that honours "
                          "stream_options.include_usage.", ChunkCountWarning, stacklevel=2)
        records.append(Record(
            name=SPEEDUP, params={**y.params, "off": off.provenance.get("label", ""),
                                  "on": on.provenance.get("label", "")},
            median_s=y.median_s, q1_s=y.q1_s, q3_s=y.q3_s, samples=list(y.samples), device=DEVICE, dtype="",
            extra={"what": "S(B) = median TPOT off / median TPOT on; timing: the speculative run's TPOT",
                   "speedup": x.median_s / y.median_s, "speedup_q1": q1, "speedup_q3": q3,
                   "speedup_tokens_per_s": y.extra["output_tokens_per_s"] / x.extra["output_tokens_per_s"],
                   "tpot_off_median_s": x.median_s, "tpot_on_median_s": y.median_s,
                   "ttft_off_median_s": x.extra["ttft_median_s"], "ttft_on_median_s": y.extra["ttft_median_s"],
                   "tokens_from_off": sources["off"], "tokens_from_on": sources["on"],
                   "tpot_from_chunks": bool(chunked)}))
    prov = provenance(on.provenance.get("host", ""), next(iter(b.values())).params["model"],
                      f"S(B): {on.provenance.get('label', 'on')} over {off.provenance.get('label', 'off')}", command)
    return Results(prov, {SPEEDUP: records, f"{SECTION}_off": list(a.values()),
                                  f"{SECTION}_on": list(b.values())},
                           {"off": off.provenance, "on": on.provenance,
                            "what": "S(B) at each concurrency B (requests in flight) both runs measured"})


def speedup_table(results: Results) -> list[dict]:
    """One row per concurrency of a ``speedup`` document: S from TPOT with its IQR, S from tokens/s, TTFTs."""
    return [{"concurrency": r.params["concurrency"], "S (TPOT)": r.extra["speedup"],
             "S q1": r.extra["speedup_q1"], "S q3": r.extra["speedup_q3"],
             "S (tokens/s)": r.extra["speedup_tokens_per_s"],
             "TTFT off ms": 1e3 * r.extra["ttft_off_median_s"], "TTFT on ms": 1e3 * r.extra["ttft_on_median_s"]}
            for r in results.sections[SPEEDUP]]


def main(argv=None) -> int:
    """``python -m specnotes.engine_client ...`` is ``python -m specnotes.bench serve ...``."""
    import sys

    from specnotes import bench

    return bench.main(["serve", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
