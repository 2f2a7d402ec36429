"""S(B) on llama-server (:func:`measure_pairs`): two servers up at once, speculation off and on, pairs of runs
interleaved level by level until S settles, with the engine's own counters and provenance for every run, this
machine's roofs and the shipped pair's acceptance by specnotes' own decoder."""

from __future__ import annotations

import asyncio
import os
import platform
import time
from pathlib import Path

from specnotes import validate
from specnotes.serve.engine.build import build_info
from specnotes.serve.engine.models import SHIPPED_CONTEXT
from specnotes.serve.engine.process import Server
from specnotes.serve.engine.tables import pair_table


def engine_counters(before: dict, after: dict) -> dict:
    """What the engine counted between two ``/metrics`` reads: tokens, seconds generating (summed over slots),
    decode calls, drafted and accepted tokens, and what they imply: the engine's seconds per generated token
    per slot (its TPOT) and its acceptance (accepted / drafted)."""
    delta = lambda key: after.get(key, 0.0) - before.get(key, 0.0)
    tokens, seconds = delta("tokens_predicted_total"), delta("tokens_predicted_seconds_total")
    drafted, accepted = delta("spec_decode_num_draft_tokens_total"), delta("spec_decode_num_accepted_tokens_total")
    return {"tokens_predicted": tokens, "seconds_generating": seconds, "decode_calls": delta("n_decode_total"),
            "draft_tokens": drafted, "draft_accepted": accepted,
            "verify_steps": delta("spec_decode_num_drafts_total"),
            "tpot_s": seconds / tokens if tokens else None, "acceptance": accepted / drafted if drafted else None}


async def pair_levels(servers: dict, name: str, concurrencies: list[int], max_tokens: int,
                      prompt_chars: int | None, requests: int | None, timeout_s: float, progress=print) -> dict:
    """One pair of runs, interleaved: at each concurrency a level on the server without speculation, then the
    same level on the one with it, so both see the same minute of a busy machine. -> {"off": Run, "on": Run},
    each holding its levels in order."""
    from specnotes.serve import engine_client

    runs: dict = {}
    for c in concurrencies:
        for which in ("off", "on"):
            run = await engine_client.measure_run(servers[which].url, name, [c], max_tokens, prompt_chars, requests,
                                                  0, timeout_s, progress=lambda m, w=which: progress(f"  {w}: {m}"))
            if which in runs:
                runs[which].levels.extend(run.levels)
            else:
                runs[which] = run
    return runs


async def warm(server: Server, max_tokens: int, prompt_chars: int | None, requests: int, timeout_s: float):
    from specnotes.serve import engine_client

    if requests:
        await engine_client.measure_run(server.url, server.name, [1], max_tokens, prompt_chars, requests, 0,
                                        timeout_s, progress=lambda *_: None)


def engine_provenance(server_args: dict) -> dict:
    """The engine's side of the provenance: version, commit, build flags, CPU, threads, slots, k, models."""
    info = build_info()
    return {"engine": "llama.cpp llama-server", "llama_cpp_python": info.get("llama-cpp-python"),
            "llama_cpp_commit": info.get("llama.cpp commit"), "build_flags": info.get("flags"),
            "compiler": info.get("compiler"), "cpu": cpu_name(), "machine": platform.machine(),
            "cores": os.cpu_count(), "threads": server_args.get("threads"), "slots": server_args.get("slots"),
            "k": server_args.get("k"), "context_per_slot": server_args.get("context", SHIPPED_CONTEXT),
            "model": str(Path(server_args["model"]).name),
            "draft": str(Path(server_args["draft"]).name) if server_args.get("draft") else None,
            "kv_cache": "f32", "flash_attention": "off (float32 attention)",
            "spec_type": "draft-simple (n_min 0, p_min 0: k drafts every step)"}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


MAX_PAIRS, MIN_PAIRS, SETTLE = 8, 3, 0.05  # engine measure's defaults: pairs run until S settles, 3 to 8 of them


def measure_pairs(model: Path, draft: Path, concurrencies: list[int], k: int = 4, pairs: int = MAX_PAIRS,
                  max_tokens: int = 128, prompt_chars: int | None = 64, requests: int | None = None,
                  warmup: int = 2, threads: int | None = None, timeout_s: float = 120.0, name: str = "specnotes-target",
                  command: str = "", progress=print, kind: str = "shipped", roofs: bool = False,
                  min_pairs: int = MIN_PAIRS, settle: float = SETTLE, context: int = SHIPPED_CONTEXT):
    """S(B) on llama-server: two servers with ``max(concurrencies)`` slots of ``context`` tokens, one without
    speculation and one with ``k`` drafts per step from ``draft``, both up at once. Pairs of runs, each concurrency
    in turn on one and then the other (``pair_levels``: interleaved, so a busy minute hits both runs of a pair
    alike), until S has settled (``settled``: after at least ``min_pairs`` pairs, the last pair moved no level's S
    by ``settle`` or more) or ``pairs`` pairs have run; ``notes["stop"]`` says which.
    Each pair gives one ``engine_client.speedup`` document; they go into one ``Results`` (section ``engine_speedup``,
    each record's params saying its ``pair``; sections ``engine_serve_off`` and ``engine_serve_on`` likewise), with
    the engine's provenance and its own counters for every run. Nothing is returned unless every run completed.
    ``kind``: "shipped" (the shipped pair: specnotes' own decoder measures its acceptance on all 64 prompts of the
    set the engine's requests come from, where each level sends the first max(16, 4 × concurrency) (or ``requests``)
    of them, ``notes["specnotes_acceptance"]``), "big" (``big_gguf``, its own draft) or "custom" (any GGUF pair,
    checked first by ``gguf_export.check_pair``; ``notes["pair"]`` names the files and their vocabulary).
    ``roofs``: measure this machine's copy bandwidth and float32 GEMM peak first (``notes["roofs"]``), for the cost
    model beside the measurement."""
    from specnotes.measure.records import Results
    from specnotes.serve import engine_client
    from specnotes.tiny import gguf_export

    kind = validate.choice("kind", kind, KINDS)
    concurrencies = validate.integers("concurrencies", concurrencies, low=1)
    pairs = validate.integer("pairs", pairs, low=1)
    min_pairs = min(validate.integer("min_pairs", min_pairs, low=1), pairs)
    settle = validate.number("settle", settle, low=0, low_open=True)
    extra_notes = {"kind": kind}
    if kind == "custom":
        extra_notes["pair"] = {"target": str(model), "draft": str(draft),
                               "vocabulary": gguf_export.check_pair(model, draft)}
    if roofs:
        extra_notes["roofs"] = measured_roofs(threads)
    slots = max(concurrencies)
    base = {"model": model, "slots": slots, "threads": threads, "name": name, "k": k, "context": context}
    labels = {"off": "off", "on": f"on, k={k}"}
    sections = {engine_client.SPEEDUP: [], f"{engine_client.SECTION}_off": [], f"{engine_client.SECTION}_on": []}
    engine_runs = []
    start = time.perf_counter()
    with Server(**base) as off_server, Server(**base, draft=draft) as on_server:
        servers = {"off": off_server, "on": on_server}
        for server in servers.values():
            asyncio.run(warm(server, max_tokens, prompt_chars, warmup, timeout_s))
        stop, done = f"the most pairs asked for ({pairs})", Results({}, sections, {})
        for pair in range(pairs):
            progress(f"pair {pair + 1} (at most {pairs}): each concurrency with speculation off, then on")
            before_rows = pair_table(done) if pair else None
            before = {which: server.metrics() for which, server in servers.items()}
            runs = asyncio.run(pair_levels(servers, name, concurrencies, max_tokens, prompt_chars, requests, timeout_s,
                                           progress))
            docs = {}
            for which, server in servers.items():
                counters = engine_counters(before[which], server.metrics())
                engine_runs.append({"pair": pair, "speculation": which, **counters})
                run = runs[which]
                docs[which] = engine_client.results(run.levels, server.url, name, labels[which], max_tokens,
                                                    run.prompt_chars, " ".join(server.command()), run.prompts,
                                                    run.temperature, run.context)
            doc = engine_client.speedup(docs["off"], docs["on"], command)
            for section, records in doc.sections.items():
                for r in records:
                    r.params["pair"] = pair
                sections[section].extend(records)
            if pair + 1 >= min_pairs and settled(before_rows, pair_table(done), settle):
                stop = f"settled: pair {pair + 1} moved no level's S by {settle:.0%} or more"
                break
        progress(f"stopped after {pair + 1} pairs: {stop}")
    args = base | {"draft": draft}
    prov = engine_client.provenance(f"llama-server on 127.0.0.1 ({cpu_name()})", name, f"S(B): on, k={k} over off",
                                    command)
    prov |= {"host": cpu_name(), "engine_build": engine_provenance(args)}
    ran = pair + 1
    notes = {"what": "S(B) on llama.cpp's llama-server, measured by specnotes' own client (engine_client); "
                     f"{ran} pairs, each level off then on (interleaved, two servers up at once); "
                     "engine_speedup params.pair says which pair",
             "engine_runs": engine_runs, "pairs": ran, "k": k, "max_tokens": max_tokens, "stop": stop,
             "min_pairs": min_pairs, "max_pairs": pairs, "settle": settle, "context_per_slot": context,
             "seconds": round(time.perf_counter() - start, 1), **extra_notes}
    if kind == "shipped":
        first = sections[engine_client.SPEEDUP][0].params
        prompts = engine_client.default_prompts(64, first["prompt_chars"])
        progress("specnotes' own decoder on the 64 prompts the engine's requests were drawn from")
        notes["specnotes_acceptance"] = specnotes_acceptance(prompts, k, max_tokens)
    elif kind == "big":
        notes["big_config"] = big_shape_notes(model)
    return Results(prov, sections, notes)


KINDS = ("shipped", "big", "custom")


def settled(before: list[dict] | None, after: list[dict], settle: float = SETTLE) -> bool:
    """Has S settled? ``pair_table`` rows before and after the last pair: at every concurrency, S from the fastest
    TPOTs and the median of the pairs' S each moved by less than ``settle`` (relative). No rows before: not yet."""
    if not before:
        return False
    was = {r["concurrency"]: r for r in before}
    moved = lambda r, key: abs(r[key] / was[r["concurrency"]][key] - 1)
    return all(r["concurrency"] in was and moved(r, "S fastest") < settle and moved(r, "S") < settle for r in after)


def big_shape_notes(path: Path) -> dict:
    """The config of a ``big_gguf`` file, read back from its own header (``gguf_header.read_header``): each field
    an integer >= 1, else a ValueError naming the file and the key."""
    from specnotes.tiny import gguf_header

    meta = gguf_header.read_header(path).metadata
    value = lambda key: validate.integer(f"GGUF file {path}: {key}", meta.get(key), low=1)
    return {"n_layers": value("llama.block_count"), "d_model": value("llama.embedding_length"),
            "n_heads": value("llama.attention.head_count"), "d_ff": value("llama.feed_forward_length"),
            "vocab_size": 256, "file_bytes": path.stat().st_size}


def measured_roofs(threads: int | None = None) -> dict:
    """This machine's float32 roofs as the book measures them (``measure.measured_roofline`` on the CPU), with
    ``threads`` torch threads (the engine's)."""
    import torch

    from specnotes import measure
    from specnotes.measure.devices import llc_bytes

    with measure.num_threads(threads):
        roof = measure.measured_roofline("cpu", torch.float32)
        used = torch.get_num_threads()
    return {"bandwidth": roof.bandwidth, "flops": roof.flops, "dtype": roof.dtype, "threads": used,
            "llc_bytes": llc_bytes()}


def specnotes_acceptance(prompts: list[str], k: int, max_tokens: int, which: tuple[str, str] = ("target", "draft")
                         ) -> dict:
    """The shipped pair's acceptance on ``prompts`` by specnotes' own decoder at temperature 0 (the engine's
    setting): ``accepted_per_drafted`` (what llama-server's counters give: accepted / drafted), the book's α
    (accepted / checked, ``GenerationStats.alpha``) and E[N] per iteration."""
    from specnotes import measure
    from specnotes.tiny import generate, model

    target, draft = (model.load_model(w) for w in which)
    with measure.num_threads(1):
        out = generate.speculative_generate(target, draft, [model.encode(p) for p in prompts], max_tokens, k=k)
    stats = out.stats
    accepted = stats.accepted[stats.active]
    drafted = stats.drafts_proposed[stats.active]
    return {"accepted_per_drafted": float(accepted.sum() / drafted.sum()), "alpha": stats.alpha,
            "mean_tokens_per_iteration": stats.mean_tokens_per_iteration, "drafted": int(drafted.sum()),
            "accepted": int(accepted.sum()), "prompts": len(prompts), "max_tokens": max_tokens, "k": k}
