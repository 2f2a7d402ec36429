"""Measure S(B) on a real serving engine: a streaming client for any OpenAI-compatible server (Chapter 8).

    python -m specnotes.bench serve --url http://HOST:PORT/v1 --model NAME --label off \\
        --concurrency 1,2,4,8,16,32,64,128,256 --max-tokens 256 --out serve-off.json
    python -m specnotes.bench serve-speedup --off serve-off.json --on serve-on.json --out serve-speedup.json

``serve`` drives the server (vLLM's ``vllm serve``, SGLang's ``launch_server``, llama.cpp's ``llama-server``,
anything that speaks the OpenAI ``/v1/completions`` streaming protocol) at each concurrency in turn:
``concurrency`` requests always in flight (closed loop), a fixed prompt set (the book's held-out text, or
``--prompts FILE``), a fixed output length (``max_tokens`` with ``ignore_eos``, which all three accept),
``--temperature`` (default 0; the engine's other sampling defaults apply). For every request it records the time to the
first token (TTFT), the time per output token after it (TPOT = (last − first chunk) / (tokens − 1),
tokens from the stream's ``usage``, since a speculating engine sends several tokens per chunk) and the
gaps between chunks; for every level, output tokens per second. Run it once with speculation off and
once on; ``serve-speedup`` (:func:`speedup`) turns the two into S(B) records.

Where the engine reports its context (``/v1/models``: vLLM's ``max_model_len``, llama.cpp's ``n_ctx_train``),
prompts longer than the context leaves for the output are refused before anything is sent, and the default
prompt length fits it. ``--out`` is checked writable before anything is measured. Each request has a
connection of its own (``force_close``): llama-server closes the connection after every streamed
completion, and a pooled connection the server closed breaks the next request sent on it. When the engine
reports its own timings (llama-server's ``timings``: tokens per second, drafted and accepted tokens) the
records keep them beside the client's numbers. Where it exports vLLM's speculation counters at ``/metrics``
(``vllm:spec_decode_num_drafts``, ``vllm:spec_decode_num_accepted_tokens_per_pos``), each level's record also
keeps the per-position acceptance over that level (``spec_positions``): vLLM's survival P(N ≥ i + 1), not the
conditional rate (Chapter 11).

Any failed request (an HTTP error, a stream that ends before ``[DONE]``, no data for ``--timeout``
seconds) stops the run with a message that says which, and writes nothing: a file on disk is always
complete. Both write ``Results`` (``specnotes.results/1``, one provenance block), the format of
every ``specnotes.bench`` command: an ``engine_serve`` record per concurrency, whose samples are the
requests' TPOTs. The command line lives here (:func:`main`); ``specnotes.bench`` dispatches to it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import platform
import re
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from specnotes import validate
from specnotes.measure.records import Record, Results, load_results, save_results, utc_now
from specnotes.measure.timing import quantile

SECTION = "engine_serve"  # one record per concurrency of one run
SPEEDUP = "engine_speedup"  # one record per concurrency of two runs, off and on
DEVICE = "remote engine"
SAME = ("model", "max_tokens", "prompt_chars", "prompts", "temperature")  # what two runs must share to be divided
PROMPT_CHARS = 1024  # the default prompt length, where the engine's context leaves room for it
BOOK_TEXT = "book held-out text"  # params["prompts"] of a run on the default prompts


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
    engine: dict | None = None  # the engine's own timings of this request, where it sends them (llama-server)

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
    positions: dict | None = None  # per-position acceptance from the engine's /metrics over this level (vLLM)

    @property
    def output_tokens(self) -> int:
        return sum(r.tokens for r in self.requests)

    def engine_timings(self) -> dict:
        """What the engine said about these requests (llama-server's ``timings``), summed or medianed: its
        TPOT (``predicted_per_token_ms``), its tokens, and the drafts it made and accepted. Empty when the
        engine sent none."""
        timed = [r.engine for r in self.requests if r.engine]
        if not timed:
            return {}
        drafted = sum(t.get("draft_n", 0) for t in timed)
        accepted = sum(t.get("draft_n_accepted", 0) for t in timed)
        return {"engine_tpot_median_s": statistics.median(t["predicted_per_token_ms"] / 1e3 for t in timed),
                "engine_predicted_tokens": sum(t.get("predicted_n", 0) for t in timed),
                "engine_draft_tokens": drafted, "engine_draft_accepted": accepted,
                "engine_acceptance": accepted / drafted if drafted else None, "engine_timed_requests": len(timed)}

    def record(self, model: str, max_tokens: int, prompt_chars: int, prompts: str = BOOK_TEXT,
               temperature: float = 0.0) -> Record:
        """This level as one ``measure.Record``: the samples are the requests' TPOTs."""
        tpots = sorted(r.tpot_s for r in self.requests)
        ttfts = sorted(r.ttft_s for r in self.requests)
        gaps = [g for r in self.requests for g in r.gaps_s]
        q1, median, q3 = (quantile(tpots, q) for q in (0.25, 0.5, 0.75))
        return Record(
            name=SECTION,
            params={"concurrency": self.concurrency, "model": model, "max_tokens": max_tokens,
                    "prompt_chars": prompt_chars, "prompts": prompts, "temperature": temperature,
                    "requests": len(self.requests)},
            median_s=median, q1_s=q1, q3_s=q3, samples=tpots, device=DEVICE, dtype="",
            extra={"what": "samples: per-request TPOT in seconds",
                   "ttft_median_s": statistics.median(ttfts), "ttft_p90_s": quantile(ttfts, 0.9),
                   "tpot_mean_s": statistics.fmean(tpots), "tpot_p90_s": quantile(tpots, 0.9),
                   "chunk_gap_median_s": statistics.median(gaps) if gaps else None,
                   "output_tokens": self.output_tokens, "output_tokens_per_s": self.output_tokens / self.wall_s,
                   "requests_per_s": len(self.requests) / self.wall_s, "wall_s": self.wall_s,
                   "tokens_from": sorted({r.tokens_from for r in self.requests}), **self.engine_timings(),
                   **(self.positions or {})})


_METRIC = re.compile(r'^(vllm:spec_decode_num_(?:drafts|accepted_tokens_per_pos))(?:_total)?(\{[^}]*\})?\s+'
                     r'([0-9.eE+-]+)\s*$')


def spec_counters(text: str) -> dict:
    """vLLM's speculation counters in a Prometheus exposition: {"drafts": n, "accepted": {position: n}} summed
    over every other label (several models or engines), positions 0-based as vLLM counts them."""
    drafts, accepted = 0.0, {}
    for line in text.splitlines():
        m = _METRIC.match(line.strip())
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        if name.endswith("drafts"):
            drafts += value
        else:
            pos = re.search(r'position="(\d+)"', labels)
            if pos:
                accepted[int(pos.group(1))] = accepted.get(int(pos.group(1)), 0.0) + value
    return {"drafts": drafts, "accepted": accepted}


def spec_positions(before: str | None, after: str | None) -> dict | None:
    """The per-position acceptance of the drafts made between two scrapes of ``/metrics`` (the counters' growth):
    accepted at position i over drafts, vLLM's survival P(N ≥ i + 1). None when the engine exports no such
    counters or made no drafts between them."""
    if before is None or after is None:
        return None
    a, b = spec_counters(before), spec_counters(after)
    drafts = b["drafts"] - a["drafts"]
    if drafts <= 0 or not b["accepted"]:
        return None
    rates = [(b["accepted"][i] - a["accepted"].get(i, 0.0)) / drafts for i in sorted(b["accepted"])]
    return {"engine_drafts": drafts, "engine_acceptance_by_position": rates,
            "engine_acceptance_by_position_is": "vLLM's survival P(N >= i + 1) per draft position, from /metrics"}


async def scrape_metrics(session, url: str, timeout_s: float) -> str | None:
    """The engine's Prometheus ``/metrics`` (at the server's root, beside ``/v1``), or None if it has none."""
    import aiohttp

    root = url[: -len("/v1")] if url.endswith("/v1") else url
    try:
        async with session.get(root + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return await resp.text() if resp.status == 200 else None
    except (asyncio.TimeoutError, aiohttp.ClientError):
        return None


def default_prompts(n: int, chars: int) -> list[str]:
    """``n`` fixed prompts of ``chars`` characters from the book's held-out text (the same on every run)."""
    text = (resources.files("specnotes") / "data" / "austen_eval.txt").read_text(encoding="utf-8")
    step = max(chars, (len(text) - chars) // n)
    return [text[i * step: i * step + chars] for i in range(n)]


def load_prompts(path) -> list[str]:
    """Prompts from a file (``--prompts``): a JSON list of strings (``.json``), or one prompt per non-empty
    line of text. Your traffic's prompts give your S(B); the book's give the book's."""
    path = Path(path)
    if path.suffix == ".json":
        prompts = validate.json_file(path, "--prompts")
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise validate.BadArgument(f"--prompts {path}: a .json file must hold a list of strings")
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise validate.BadArgument(f"--prompts {path}: cannot read it ({e})") from None
        prompts = [line for line in text.splitlines() if line.strip()]
    prompts = [p for p in prompts if p]
    if not prompts:
        raise validate.BadArgument(f"--prompts {path} holds no prompt")
    return prompts


def prompts_label(path, prompts: list[str]) -> str:
    """What ``params["prompts"]`` says of prompts read from a file: its name and their hash."""
    digest = hashlib.sha256("\x00".join(prompts).encode()).hexdigest()[:12]
    return f"{Path(path).name} ({len(prompts)} prompts, sha256 {digest})"


def check_writable(flag: str, path) -> Path:
    """``path`` can be written (``--out``): its folder exists (none is created), and a file written and removed
    beside it, before anything is measured. A ``ValueError`` naming ``flag`` otherwise."""
    path = Path(path)
    if path.is_dir():
        raise validate.BadArgument(f"{flag} {path} is a folder: pass the JSON file to write")
    if not path.parent.is_dir():
        raise validate.BadArgument(f"{flag} {path}: its folder {path.parent} does not exist: create it, or pass a path "
                                   "in a folder that exists; nothing was measured")
    probe = path.with_name(path.name + ".tmp")
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise validate.BadArgument(f"{flag} {path} cannot be written ({e.strerror or e}): pass a path in a folder "
                                   "you can write; nothing was measured") from None
    return path


# ---------------------------------------------------------------------------------------------- the client


async def stream_completion(session, url: str, model: str, prompt: str, max_tokens: int, timeout_s: float,
                            clock=time.perf_counter, temperature: float = 0.0) -> RequestTiming:
    """POST one streaming completion and time its chunks. Raises ``EngineError`` on any failure."""
    import aiohttp

    payload = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
               "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    endpoint = f"{url}/completions"
    chunk_times: list[float] = []
    usage_tokens, done, engine = None, False, None
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
                if isinstance(chunk.get("timings"), dict) and "predicted_per_token_ms" in chunk["timings"]:
                    engine = chunk["timings"]
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
    return RequestTiming(chunk_times[0], clock() - start, tokens, chunk_times, source, engine)


async def run_level(session, url: str, model: str, prompts: list[str], max_tokens: int, concurrency: int,
                    requests: int, timeout_s: float, clock=time.perf_counter, temperature: float = 0.0) -> LevelResult:
    """``requests`` completions with ``concurrency`` always in flight; the first failure cancels the rest."""
    queue: asyncio.Queue = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(prompts[i % len(prompts)])
    results: list[RequestTiming] = []

    async def worker():
        while not queue.empty():
            prompt = queue.get_nowait()
            results.append(await stream_completion(session, url, model, prompt, max_tokens, timeout_s, clock,
                                                   temperature))

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


async def check_model(session, url: str, model: str, timeout_s: float) -> int | None:
    """GET /models: the server is up and serves ``model``. Returns the context length the engine reports for it
    (vLLM and SGLang: ``max_model_len``; llama-server: ``meta.n_ctx_train``), or None."""
    import aiohttp

    endpoint = f"{url}/models"
    try:
        async with session.get(endpoint, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                raise EngineError(f"HTTP {resp.status} from {endpoint}: {(await resp.text())[:300]!r}")
            served = (await resp.json()).get("data", [])
    except asyncio.TimeoutError:  # before aiohttp.ClientError: its timeouts are both
        raise EngineError(f"no answer from {endpoint} within {timeout_s:g} s (timeout): the engine accepted the "
                          "connection but did not respond. Is it still loading the model, or stuck? (--timeout "
                          "sets the wait)") from None
    except aiohttp.ClientError as e:
        raise EngineError(f"cannot reach {endpoint}: {type(e).__name__}{f': {e}' if str(e) else ''}. Is the server "
                          "running, and is --url the OpenAI base URL (ending in /v1)?") from None
    names = [m.get("id") for m in served]
    if model not in names:
        raise EngineError(f"{url} serves {names}, not {model!r}: pass one of those as --model")
    entry = served[names.index(model)]
    context = entry.get("max_model_len") or (entry.get("meta") or {}).get("n_ctx_train")
    return int(context) if isinstance(context, (int, float)) and context > 0 else None


def fit_prompt_chars(prompt_chars: int | None, max_tokens: int, context: int | None) -> int:
    """The prompt length to use: ``prompt_chars``, or by default ``PROMPT_CHARS`` cut to what the engine's
    ``context`` leaves for ``max_tokens`` output tokens. A prompt that does not fit is refused: past its
    context a model's output is noise, and so is the acceptance it gives. (Characters bound tokens from above
    for the book's ASCII text on any tokenizer whose tokens are at least one byte.)"""
    if context is not None and max_tokens >= context:
        raise validate.BadArgument(f"--max-tokens {max_tokens} leaves no room for a prompt in the engine's context "
                                   f"of {context} tokens: pass --max-tokens {context // 2} or fewer")
    if prompt_chars is None:
        return PROMPT_CHARS if context is None else min(PROMPT_CHARS, context - max_tokens)
    prompt_chars = validate.integer("--prompt-chars", prompt_chars, low=1)
    if context is not None and prompt_chars + max_tokens > context:
        raise validate.BadArgument(f"--prompt-chars {prompt_chars} + --max-tokens {max_tokens} is past the engine's "
                                   f"context of {context} tokens: pass --prompt-chars {context - max_tokens} or "
                                   "fewer (or fewer --max-tokens)")
    return prompt_chars


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


@dataclass
class Run:
    """A measured run: its levels and what its requests were (``prompt_chars``, ``prompts``, ``temperature``)."""
    levels: list[LevelResult]
    prompt_chars: int
    prompts: str
    temperature: float
    context: int | None


async def measure_run(url: str, model: str, concurrencies: list[int], max_tokens: int = 256,
                      prompt_chars: int | None = None, requests_per_level: int | None = None, warmup: int = 2,
                      timeout_s: float = 60.0, prompts: list[str] | None = None, progress=print,
                      temperature: float = 0.0, prompts_name: str = BOOK_TEXT) -> Run:
    """Every level in turn (after ``warmup`` unmeasured requests). Requests per level: by default
    4 × concurrency, at least 16, so every slot turns over a few times; never fewer than the concurrency
    (``check_levels``: a ``ValueError`` naming ``--requests`` and ``--concurrency``). Prompts: ``prompts``,
    or the book's text cut to ``prompt_chars`` (``fit_prompt_chars``: checked against the context the
    engine reports, before any completion is sent)."""
    import aiohttp

    concurrencies = check_levels(concurrencies, requests_per_level)
    temperature = validate.number("--temperature", temperature, low=0)
    url = url.rstrip("/")
    # A connection per request: llama-server closes it after each streamed completion, and a pooled
    # connection the server has closed fails the next request ("Cannot write to closing transport").
    connector = aiohttp.TCPConnector(limit=max(concurrencies), force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        context = await check_model(session, url, model, timeout_s)
        if prompts is None:
            prompt_chars = fit_prompt_chars(prompt_chars, max_tokens, context)
            prompts = default_prompts(64, prompt_chars)
        else:
            prompt_chars = fit_prompt_chars(max(map(len, prompts)), max_tokens, context)
        if warmup:
            await run_level(session, url, model, prompts, max_tokens, 1, warmup, timeout_s, temperature=temperature)
        levels = []
        for c in concurrencies:
            n = requests_per_level or max(16, 4 * c)
            before = await scrape_metrics(session, url, timeout_s)
            level = await run_level(session, url, model, prompts, max_tokens, c, n, timeout_s,
                                    temperature=temperature)
            level.positions = spec_positions(before, await scrape_metrics(session, url, timeout_s) if before
                                             else None)
            tpot = statistics.median(r.tpot_s for r in level.requests)
            progress(f"concurrency {c}: {n} requests, TPOT median {1e3 * tpot:.1f} ms, "
                     f"{level.output_tokens / level.wall_s:.0f} output tokens/s")
            levels.append(level)
    return Run(levels, prompt_chars, prompts_name, temperature, context)


async def measure(url: str, model: str, concurrencies: list[int], max_tokens: int = 256,
                  prompt_chars: int | None = None, requests_per_level: int | None = None, warmup: int = 2,
                  timeout_s: float = 60.0, prompts: list[str] | None = None, progress=print,
                  temperature: float = 0.0) -> list[LevelResult]:
    """``measure_run``'s levels."""
    run = await measure_run(url, model, concurrencies, max_tokens, prompt_chars, requests_per_level, warmup,
                            timeout_s, prompts, progress, temperature)
    return run.levels


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
            command: str = "", prompts: str = BOOK_TEXT, temperature: float = 0.0,
            context: int | None = None) -> Results:
    """One run as ``Results``: an ``engine_serve`` record per concurrency."""
    notes = {"what": "engine_serve samples: per-request TPOT (s); see extra for TTFT and tokens/s (and the "
                     "engine's own timings, engine_*, where it sent them)",
             "seconds": round(sum(lv.wall_s for lv in levels), 2), "engine_context": context}
    return Results(provenance(url, model, label, command),
                   {SECTION: [lv.record(model, max_tokens, prompt_chars, prompts, temperature) for lv in levels]},
                   notes)


def _run_records(run: Results, which: str) -> dict[int, Record]:
    """A ``bench serve`` run's levels by concurrency, every field ``speedup`` reads checked: a BadArgument naming
    the run and the field (concurrency an integer >= 1, once; TPOT samples and median > 0; output tokens/s > 0;
    TTFT >= 0; tokens_from a list of strings)."""
    if SECTION not in run.sections or not run.sections[SECTION]:
        raise validate.BadArgument(f"the {which} run has no {SECTION} records: is it a `bench serve` file?")
    out = {}
    for i, r in enumerate(run.sections[SECTION]):
        at = f"the {which} run's {SECTION}[{i}]"
        if not isinstance(r.params, dict) or not isinstance(r.extra, dict):
            raise validate.BadArgumentType(f"{at}: params and extra must be JSON objects")
        c = validate.integer(f"{at}.params.concurrency", r.params.get("concurrency"), low=1)
        if c in out:
            raise validate.BadArgument(f"{at}: concurrency {c} appears twice in the {which} run")
        validate.number(f"{at}.median_s", r.median_s, low=0, low_open=True)
        if not isinstance(r.samples, list) or not r.samples:
            raise validate.BadArgument(f"{at}.samples must be a non-empty list of TPOTs (seconds)")
        for j, t in enumerate(r.samples):
            validate.number(f"{at}.samples[{j}]", t, low=0, low_open=True)
        validate.number(f"{at}.extra.output_tokens_per_s", r.extra.get("output_tokens_per_s"), low=0, low_open=True)
        validate.number(f"{at}.extra.ttft_median_s", r.extra.get("ttft_median_s"), low=0)
        tokens_from = r.extra.get("tokens_from") or []
        if not isinstance(tokens_from, list) or not all(isinstance(x, str) for x in tokens_from):
            raise validate.BadArgumentType(f"{at}.extra.tokens_from must be a list of strings")
        out[c] = r
    return out


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
        values = {repr(r.params.get(key)) for r in [*a.values(), *b.values()]}
        if len(values) > 1:
            raise validate.BadArgument(f"the two runs differ in {key} ({', '.join(sorted(values))}): S(B) divides "
                                       "two runs of the same model, output length, prompts and temperature")
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
                   "tpot_from_chunks": bool(chunked), **engine_speedup(x, y),
                   **{f"{key}_{which}": r.extra[key] for which, r in (("off", x), ("on", y))
                      for key in ("engine_tpot_median_s", "engine_acceptance", "engine_draft_tokens",
                                  "engine_draft_accepted") if key in r.extra}}))
    prov = provenance(on.provenance.get("host", ""), next(iter(b.values())).params["model"],
                      f"S(B): {on.provenance.get('label', 'on')} over {off.provenance.get('label', 'off')}", command)
    return Results(prov, {SPEEDUP: records, f"{SECTION}_off": list(a.values()),
                                  f"{SECTION}_on": list(b.values())},
                           {"off": off.provenance, "on": on.provenance,
                            "what": "S(B) at each concurrency B (requests in flight) both runs measured"})


def engine_speedup(off: Record, on: Record) -> dict:
    """Where the engine timed its own requests (llama-server's ``timings``): S from its median per-request TPOT
    (``speedup_engine_tpot``), and how far the client's median TPOT is from the engine's in each run
    (``tpot_client_over_engine_off`` / ``_on``). The client's clock sees tokens when they arrive; on a busy
    machine an engine producing a token every millisecond can stream them in bursts, and then the engine's
    own clock is the one to trust (the client's tokens per second, over a whole level, stays right)."""
    a, b = off.extra.get("engine_tpot_median_s"), on.extra.get("engine_tpot_median_s")
    if not a or not b:
        return {}
    return {"speedup_engine_tpot": a / b, "tpot_client_over_engine_off": off.median_s / a,
            "tpot_client_over_engine_on": on.median_s / b}


def speedup_table(results: Results) -> list[dict]:
    """One row per concurrency of a ``speedup`` document: S from TPOT with its IQR, S from tokens/s, TTFTs."""
    return [{"concurrency": r.params["concurrency"], "S (TPOT)": r.extra["speedup"],
             "S q1": r.extra["speedup_q1"], "S q3": r.extra["speedup_q3"],
             "S (tokens/s)": r.extra["speedup_tokens_per_s"],
             "TTFT off ms": 1e3 * r.extra["ttft_off_median_s"], "TTFT on ms": 1e3 * r.extra["ttft_on_median_s"]}
            for r in results.sections[SPEEDUP]]


# ---------------------------------------------------------------------------------------------- the command line
# python -m specnotes.bench serve / serve-speedup (bench dispatches here; this module never imports bench)


def serve_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("--url", required=True, help="the OpenAI base URL, e.g. http://HOST:8000/v1")
    parser.add_argument("--model", required=True, help="the served model name (GET /v1/models lists them)")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32,64,128,256",
                        help="comma-separated requests in flight (default: 1,2,4,...,256)")
    parser.add_argument("--label", default="", help="what this run is, e.g. 'off' or 'on, k=4' (kept in the record)")
    parser.add_argument("--max-tokens", type=int, default=256, help="output tokens per request (ignore_eos)")
    parser.add_argument("--prompt-chars", type=int, default=None,
                        help=f"characters per prompt cut from the book's text (default {PROMPT_CHARS}, or what the "
                             "engine's reported context leaves for --max-tokens); refused past that context")
    parser.add_argument("--prompts", type=Path, default=None,
                        help="your prompts instead of the book's: a .json list of strings, or one per line")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="sampling temperature (default 0: greedy; the engine's other sampling defaults apply)")
    parser.add_argument("--requests", type=int, default=None, help="requests per level (default 4 x concurrency, "
                                                                   ">= 16)")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured requests first")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds without data before a request fails")
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")


def check_serve_arguments(args: argparse.Namespace):
    """Validate ``serve``'s flags (ValueError naming the flag) before anything is sent; ``--concurrency``
    becomes a list, ``--prompts`` the prompts read (``args.prompt_list``), and ``--out`` is tried."""
    from urllib.parse import urlparse

    if urlparse(args.url).scheme not in ("http", "https"):
        raise validate.BadArgument(f"--url must start with http:// or https://, got {args.url!r}")
    try:
        levels = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        raise validate.BadArgument(f"--concurrency must be integers separated by commas, got "
                                   f"{args.concurrency!r}") from None
    args.concurrency = validate.integers("--concurrency", levels, low=1)
    validate.integer("--max-tokens", args.max_tokens, low=2)
    if args.prompt_chars is not None:
        validate.integer("--prompt-chars", args.prompt_chars, low=1)
    if args.prompts is not None and args.prompt_chars is not None:
        raise validate.BadArgument("--prompts and --prompt-chars exclude each other: file prompts are used whole")
    validate.number("--temperature", args.temperature, low=0)
    validate.integer("--warmup", args.warmup, low=0)
    validate.number("--timeout", args.timeout, low=0, low_open=True)
    if args.requests is not None:
        validate.integer("--requests", args.requests, low=1)
        check_levels(args.concurrency, args.requests)
    args.prompt_list = None if args.prompts is None else load_prompts(args.prompts)
    check_writable("--out", args.out)


def run_serve(args: argparse.Namespace, command: str = "") -> Results:
    """Every concurrency level in turn; ``EngineError`` if any request fails."""
    name = BOOK_TEXT if args.prompt_list is None else prompts_label(args.prompts, args.prompt_list)
    run = asyncio.run(measure_run(args.url, args.model, args.concurrency, args.max_tokens, args.prompt_chars,
                                  args.requests, args.warmup, args.timeout, args.prompt_list,
                                  temperature=args.temperature, prompts_name=name))
    return results(run.levels, args.url.rstrip("/"), args.model, args.label, args.max_tokens, run.prompt_chars,
                   command, run.prompts, run.temperature, run.context)


def serve_main(parser: argparse.ArgumentParser, args: argparse.Namespace, command: str) -> int:
    """``bench serve``: bad flags exit 2 (argparse), before anything is measured; a failed request prints why,
    writes nothing, exits 1."""
    try:
        check_serve_arguments(args)
    except ValueError as e:
        parser.error(str(e))
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        parser.error("bench serve needs aiohttp: pip install 'specnotes[serving]'")
    try:
        run = run_serve(args, command)
    except EngineError as e:
        print(f"error: {e}\nNothing was written: a record is only written when every level completed.",
              file=sys.stderr)
        return 1
    except ValueError as e:  # a prompt past the context the engine reported: refused before any completion
        parser.error(str(e))
    path = save_results(run, args.out)
    print(f"wrote {path} ({len(run.sections[SECTION])} levels)")
    return 0


def serve_speedup(off, on, command: str = "") -> Results:
    """``bench serve-speedup``: the two files read back, S(B) computed (:func:`speedup`)."""
    if Path(off).resolve() == Path(on).resolve():
        raise validate.BadArgument("--off and --on are the same file: pass the run with speculation off and the "
                                   "run with it on")
    return speedup(load_results(off), load_results(on), command)


def print_speedup(results: Results):
    print(f"{'B':>5} {'S (TPOT)':>9} {'IQR':>13} {'S (tok/s)':>10} {'TTFT off ms':>12} {'TTFT on ms':>11}")
    for row in speedup_table(results):
        print(f"{row['concurrency']:5d} {row['S (TPOT)']:9.3f} {row['S q1']:6.3f}-{row['S q3']:<6.3f} "
              f"{row['S (tokens/s)']:10.3f} {row['TTFT off ms']:12.1f} {row['TTFT on ms']:11.1f}")


def speedup_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("--off", type=Path, required=True, help="the serve run with speculation off")
    parser.add_argument("--on", type=Path, required=True, help="the serve run with speculation on")
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")


def speedup_main(parser: argparse.ArgumentParser, args: argparse.Namespace, command: str) -> int:
    try:
        check_writable("--out", args.out)
        result = serve_speedup(args.off, args.on, command)
    except (ValueError, OSError) as e:
        parser.error(str(e))
    print_speedup(result)
    print(f"wrote {save_results(result, args.out)} ({len(result.sections[SPEEDUP])} levels)")
    return 0


def main(argv=None) -> int:
    """``python -m specnotes.serve.engine_client ...`` is ``python -m specnotes.bench serve ...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = validate.Parser(prog="python -m specnotes.bench serve",
                                     description="a real engine's TPOT, TTFT and tokens/s at each concurrency")
    serve_arguments(parser)
    args = parser.parse_args(argv)
    return serve_main(parser, args, "python -m specnotes.bench serve " + " ".join(argv))


if __name__ == "__main__":
    raise SystemExit(main())
