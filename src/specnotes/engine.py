"""llama.cpp's ``llama-server``, an engine someone else wrote, started and stopped from Python on this machine.

    make engine                                   # build it (scripts/build_engine.sh) and convert the shipped pair
    python -m specnotes.engine measure --out s.json   # S(B) on it: pairs of runs off and on, until S settles
    python -m specnotes.engine measure --target t.gguf --draft d.gguf --out s.json   # any GGUF pair
    python -m specnotes.engine serve --slots 4 --k 4  # just serve on 127.0.0.1:8080, for `bench serve` by hand

The binary is built from the pinned ``llama-cpp-python`` sdist (``LLAMA_CPP_PYTHON``), which vendors llama.cpp, into
``_build/engine/`` (``engine_dir``). :class:`Server` starts it on 127.0.0.1 at a free port with ``slots`` parallel
slots (``-np``; continuous batching over them), with or without a draft model (``-md``, speculation type
``draft-simple``, ``k`` drafts per step: ``--spec-draft-n-max k``, with no minimum and no confidence cut-off, so
every step drafts k), waits for ``/health``, and stops it on exit, also on error (a context manager, ``atexit`` for
anything left, and on Linux a parent-death signal for a parent killed outright). Attention runs in float32, as
specnotes' own: a float32 KV cache (``-ctk f32 -ctv f32``) *and* flash attention off (``-fa off``). With flash
attention on (the default, ``auto``, picks it on a CPU) llama.cpp casts a float32 K and V to float16 before its
flash-attention kernel (``src/llama-graph.cpp``), and accumulates V in float16: logprobs then drift from float64 by
up to 6e-4 (7.6e-6 with it off), enough to flip a near-tie and part the greedy output from specnotes' (found by
``tests/test_engine.py``: at token 52 of one prompt, where the top two logits lie 2.6e-4 apart).
``Server.metrics()`` reads the engine's own counters from ``/metrics`` (tokens, time generating, drafted and
accepted tokens): :func:`measure_pairs` records them with every run, so the record says from the engine itself that
speculation ran.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import ctypes
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from specnotes import validate

LLAMA_CPP_PYTHON = "0.3.36"  # the pinned sdist (make engine reads it here)
SHIPPED_CONTEXT = 256  # the shipped pair's training block: its context
MODEL_NAMES = {"target": "specnotes-target", "draft": "specnotes-draft"}


class EngineNotBuilt(RuntimeError):
    """No llama-server binary for the pinned version: run ``make engine``."""


class EngineStartError(RuntimeError):
    """llama-server exited or did not become healthy; the message holds the end of its log."""


def repo_root() -> Path | None:
    """The checkout this package runs from (src layout), or None for an installed package."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").exists() and (root / "src" / "specnotes").is_dir() else None


def engine_dir() -> Path:
    """Where ``make engine`` builds: ``$SPECNOTES_ENGINE_DIR``, else ``_build/engine`` in the checkout (or in the
    current folder for an installed package)."""
    if os.environ.get("SPECNOTES_ENGINE_DIR"):
        return Path(os.environ["SPECNOTES_ENGINE_DIR"])
    return (repo_root() or Path.cwd()) / "_build" / "engine"


def version_dir(version: str = LLAMA_CPP_PYTHON) -> Path:
    return engine_dir() / f"llama-cpp-python-{version}"


def binary(version: str = LLAMA_CPP_PYTHON) -> Path | None:
    """The built ``llama-server`` for ``version``, or None."""
    path = version_dir(version) / "bin" / "llama-server"
    return path if path.is_file() and os.access(path, os.X_OK) and (path.parent.parent / "build-info.txt").is_file() \
        else None


def require_binary(version: str = LLAMA_CPP_PYTHON) -> Path:
    path = binary(version)
    if path is None:
        raise EngineNotBuilt(f"no llama-server built for llama-cpp-python {version} under {engine_dir()}: run "
                             "`make engine` (it builds llama.cpp's server from the pinned sdist, CPU only; the "
                             "book's page 'Run it on your cluster' lists the build times measured on two cores)")
    return path


def build_info(version: str = LLAMA_CPP_PYTHON) -> dict:
    """What ``scripts/build_engine.sh`` recorded: version, llama.cpp commit, flags, build seconds, compiler."""
    path = version_dir(version) / "build-info.txt"
    info = {}
    for line in path.read_text().splitlines():
        for key in ("llama-cpp-python", "llama.cpp commit", "build seconds", "compiler", "cpu"):
            if line.startswith(key + " "):
                info[key] = line[len(key) + 1:]
        if line.startswith("GGML_NATIVE="):
            info["flags"] = line
    return info


# ---------------------------------------------------------------------------------------------- model files


def models_dir() -> Path:
    return engine_dir() / "models"


def shipped_ggufs(folder: Path | None = None) -> dict[str, Path]:
    """The shipped target and draft as float32 GGUF files (written once, again when the weights change; a new
    ``gguf_export.FORMAT_VERSION`` names new files): {"target": path, "draft": path}. Their context is the
    256-byte training block."""
    from specnotes import gguf_export, model

    folder = Path(folder or models_dir())
    paths = {}
    for which in ("target", "draft"):
        path = folder / f"{MODEL_NAMES[which]}-f32-v{gguf_export.FORMAT_VERSION}.gguf"
        weights = model.data_file(f"{which}.pt")
        if not path.exists() or path.stat().st_mtime < Path(str(weights)).stat().st_mtime:
            gguf_export.write_gguf(model.load_model(which), path, MODEL_NAMES[which], context=SHIPPED_CONTEXT)
        paths[which] = path
    return paths


def big_gguf(folder: Path | None = None, seed: int = 0, **shape) -> Path:
    """``gguf_export.big_config(**shape)`` with random weights (seeded) as a float32 GGUF, written once: a model
    larger than a CPU's last-level cache (its name says the shape, the seed and ``gguf_export.FORMAT_VERSION``).
    Served as its own draft, every draft is accepted (α = 1)."""
    from specnotes import gguf_export

    config = gguf_export.big_config(**shape)
    folder = Path(folder or models_dir())
    path = folder / (f"random-{config.n_layers}x{config.d_model}-ff{config.d_ff}-h{config.n_heads}-s{seed}-f32"
                     f"-v{gguf_export.FORMAT_VERSION}.gguf")
    if not path.exists():
        gguf_export.write_gguf(gguf_export.random_model(config, seed), path, path.stem, context=SHIPPED_CONTEXT)
    return path


# ---------------------------------------------------------------------------------------------- the server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, payload: dict | None = None, timeout: float = 30.0):
    """GET (or POST ``payload`` as JSON) ``url`` and decode the JSON answer."""
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return json.loads(resp.read())


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text from llama-server's ``/metrics`` -> {name without the ``llamacpp:`` prefix: value}
    (labelled series keep their labels in the name)."""
    values = {}
    for line in text.splitlines():
        match = re.match(r"^llamacpp:(\S+)\s+(\S+)$", line.strip())
        if match:
            values[match[1]] = float(match[2])
    return values


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def parent_death_signal(sig: int = signal.SIGKILL):
    """A ``preexec_fn`` that has Linux send the child ``sig`` when the process that started it dies, even by
    SIGKILL, when no ``atexit`` handler runs; None where ``prctl`` is unavailable (not Linux). The kernel
    watches the *thread* that forked: start servers from one that lives as long as they should."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec():
        prctl(PR_SET_PDEATHSIG, int(sig))
        if os.getppid() != parent:  # the parent died before prctl took effect: no signal will come
            os._exit(1)

    return preexec


_RUNNING: set[Server] = set()


@atexit.register
def _stop_all():
    for server in list(_RUNNING):
        server.stop()


@dataclass
class Server:
    """One llama-server process on 127.0.0.1. ``with Server(model, ...) as s:`` starts it and waits until it is
    healthy; leaving the block stops it (SIGTERM, then SIGKILL), on error too."""

    model: Path
    draft: Path | None = None
    k: int = 4
    slots: int = 1
    context: int = SHIPPED_CONTEXT  # per slot
    threads: int | None = None
    name: str = "specnotes-target"
    batch: int = 512
    extra: tuple[str, ...] = ()
    ready_timeout_s: float = 120.0
    log_path: Path | None = None
    listen_port: int = 0  # 0: a free port, chosen at start
    port: int = field(default=0, init=False)
    process: subprocess.Popen | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        self.model = Path(self.model)
        self.draft = None if self.draft is None else Path(self.draft)
        self.k = validate.integer("k", self.k, low=1)
        self.slots = validate.integer("slots", self.slots, low=1)
        self.context = validate.integer("context", self.context, low=8)
        self.threads = validate.integer("threads", self.threads or os.cpu_count() or 1, low=1)
        for path in (self.model, self.draft):
            if path is not None and not path.is_file():
                raise validate.BadArgument(f"no model file at {path}")

    def __hash__(self):
        return id(self)

    @property
    def speculative(self) -> bool:
        return self.draft is not None

    @property
    def url(self) -> str:
        """The OpenAI base URL (what ``bench serve --url`` takes)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, binary_path: Path | None = None) -> list[str]:
        """The llama-server command line (the port is chosen at start)."""
        cmd = [str(binary_path or require_binary()), "-m", str(self.model), "--alias", self.name,
               "--host", "127.0.0.1", "--port", str(self.port), "-np", str(self.slots),
               "-c", str(self.context * self.slots), "-b", str(self.batch), "-t", str(self.threads),
               "-tb", str(self.threads), "-ctk", "f32", "-ctv", "f32", "-fa", "off", "--metrics", "--no-webui",
               "--no-warmup"]
        if self.draft is not None:
            cmd += ["-md", str(self.draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(self.k),
                    "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "--spec-draft-threads", str(self.threads),
                    "--spec-draft-threads-batch", str(self.threads), "-ctkd", "f32", "-ctvd", "f32"]
        return cmd + list(self.extra)

    def start(self) -> Server:
        path = require_binary()
        self.port = self.listen_port or free_port()
        self.log_path = Path(self.log_path or engine_dir() / "logs" / f"llama-server-{self.port}.log")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command(path), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            preexec_fn=parent_death_signal())
        _RUNNING.add(self)
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self):
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EngineStartError(f"llama-server exited with code {self.process.returncode}; its log "
                                       f"({self.log_path}) ends:\n{self.log_tail()}")
            try:
                if http_json(f"{self.root}/health", timeout=2.0).get("status") == "ok":
                    return
            except (urllib.error.URLError, OSError, json.JSONDecodeError):
                pass
            time.sleep(0.1)
        raise EngineStartError(f"llama-server was not healthy after {self.ready_timeout_s:g} s (timeout); its log "
                               f"({self.log_path}) ends:\n{self.log_tail()}")

    def stop(self):
        """SIGTERM to the server's process group, SIGKILL after 10 s; waits for it. Safe to call twice."""
        process, self.process = self.process, None
        _RUNNING.discard(self)
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def metrics(self) -> dict[str, float]:
        """The engine's own counters (``/metrics``): ``tokens_predicted_total``, ``tokens_predicted_seconds_total``,
        ``n_decode_total``, ``spec_decode_num_draft_tokens_total``, ``spec_decode_num_accepted_tokens_total``, ..."""
        with urllib.request.urlopen(f"{self.root}/metrics", timeout=10) as resp:
            return parse_metrics(resp.read().decode())

    def tokenize(self, text: str) -> list[int]:
        return http_json(f"{self.root}/tokenize", {"content": text})["tokens"]

    def detokenize(self, tokens: list[int]) -> str:
        return http_json(f"{self.root}/detokenize", {"tokens": list(tokens)})["content"]

    def complete_tokens(self, prompt: list[int] | str, n: int) -> list[int]:
        """Greedy completion of ``prompt`` (token ids, or text) by ``/completion``: the ``n`` token ids generated."""
        answer = http_json(f"{self.root}/completion",
                           {"prompt": prompt, "n_predict": n, "temperature": 0.0, "top_k": 1, "ignore_eos": True,
                            "return_tokens": True, "cache_prompt": False, "samplers": ["top_k", "temperature"]},
                           timeout=120)
        return list(answer["tokens"])


# ---------------------------------------------------------------------------------------------- S(B) on it


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
    from specnotes import engine_client

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
    from specnotes import engine_client

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
    from specnotes import engine_client, gguf_export
    from specnotes.measure.records import Results

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
    """The config of a ``big_gguf`` file, read back from its own metadata."""
    import gguf

    fields = gguf.GGUFReader(str(path)).fields
    value = lambda key: fields[key].contents()
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


# ---------------------------------------------------------------------------------------------- the records


REFERENCE = Path(__file__).parent / "data" / "reference" / "llama-server"


def reference_path(kind: str = "shipped", cpu: str | None = None) -> Path:
    """``data/reference/llama-server/<kind>-<cpu>.json``: where ``measure --record`` writes."""
    slug = re.sub(r"[^a-z0-9]+", "-", (cpu or cpu_name()).lower()).strip("-")
    return REFERENCE / f"{validate.choice('kind', kind, KINDS)}-{slug}.json"


def load_reference(kind: str = "shipped"):
    """The committed llama-server record of ``kind`` (the one the book shows)."""
    from specnotes.measure.records import load_results

    found = sorted(REFERENCE.glob(f"{validate.choice('kind', kind, KINDS)}-*.json"))
    if not found:
        raise FileNotFoundError(f"no {kind}-*.json in {REFERENCE}")
    return load_results(found[0])


def model_beside(results, batches: list[int] | None = None) -> list[dict]:
    """The cost model beside a ``measure_pairs`` record, at each concurrency it measured, for llama-server's step.
    Per slot, ``draft-simple`` (llama.cpp at the pinned version, ``tools/server/server-context.cpp`` and
    ``common/speculative.cpp``) has the target verify k + 1 tokens, the draft re-evaluate that same batch ("always
    re-evaluate for simplicity", TAG_SPEC_AVOID_DRAFT_REEVAL), then run k passes of one token: one draft pass
    more than the textbook k. So T_step = k·T_draft(B, 1) + T_draft(B, k + 1) + T_target(B, k + 1), and
    S(B) = E[N]·T_target(B, 1) / T_step. "S roofline": each pass at the per-kernel roofline with the recording machine's
    measured roofs (``notes["roofs"]``), no overheads. "S overhead-bound": every pass costs the same fixed time, S =
    E[N] / (k + 2). α: specnotes' own decoder on the prompt set the engine drew from (the shipped pair), or 1 (the
    big pair, its own draft). For the big pair also the verify/decode time ratio r = T(B, k+1) / T(B, 1) each
    measured S implies (α = 1, draft = target: S = (k + 1) / (k + 2r), so r = ((k + 1)/S − k) / 2), beside the
    roofline's; and, since a pass over k + 1 tokens cannot cost less than a pass over one (r ≥ 1), the ceiling
    S ≤ (k + 1)/(k + 2). A pair above it is noise, a burst of load that slowed its plain run: it is listed in
    "pairs above the ceiling" and left out of the pairs' median, min and max (the fastest TPOTs keep every run)."""
    from specnotes import cost, measure, model

    notes = results.notes
    k = notes["k"]
    roof = measure.MeasuredRoof(notes["roofs"]["bandwidth"], notes["roofs"]["flops"], dtype="fp32")
    accel = roof.as_accelerator(name="the recording CPU (measured roofs)")
    if notes["kind"] == "shipped":
        card = model.model_card()
        target, draft = (shape_of(model.ModelConfig(**card[w]["config"])) for w in ("target", "draft"))
        alpha = notes["specnotes_acceptance"]["alpha"]
    else:
        c = notes["big_config"]
        target = draft = shape_of(model.ModelConfig(c["n_layers"], c["d_model"], c["n_heads"], c["d_ff"]))
        alpha = 1.0
    en = cost.expected_tokens(alpha, k)
    context = mean_context(results)
    t = lambda shape, b, n: cost.pass_time(shape, accel, b, n, context, dtype="fp32")
    rows = []
    for row in pair_table(results):
        b = row["concurrency"]
        step = k * t(draft, b, 1) + t(draft, b, k + 1) + t(target, b, k + 1)
        out = {"concurrency": b, "k": k, "S measured": row["S fastest"], "S median of pairs": row["S"],
               "S min": row["S min"], "S max": row["S max"], "S each": row["S each"],
               "S (client tokens/s)": row["S (client tokens/s)"],
               "S roofline": en * t(target, b, 1) / step,
               "S overhead-bound": en / (k + 2)}
        if notes["kind"] == "big":
            ceiling = (k + 1) / (k + 2)
            kept = [x for x in row["S each"] if x <= ceiling]
            out |= {"verify/decode measured": ((k + 1) / row["S fastest"] - k) / 2,
                    "verify/decode roofline": t(target, b, k + 1) / t(target, b, 1), "S ceiling (α = 1)": ceiling,
                    "pairs above the ceiling": [x for x in row["S each"] if x > ceiling]}
            if kept:
                out |= {"S median of pairs": statistics.median(kept), "S min": kept[0], "S max": kept[-1]}
        rows.append(out)
    return rows


def specnotes_acceptance(prompts: list[str], k: int, max_tokens: int, which: tuple[str, str] = ("target", "draft")
                         ) -> dict:
    """The shipped pair's acceptance on ``prompts`` by specnotes' own decoder at temperature 0 (the engine's
    setting): ``accepted_per_drafted`` (what llama-server's counters give: accepted / drafted), the book's α
    (accepted / checked, ``GenerationStats.alpha``) and E[N] per iteration."""
    from specnotes import generate, measure, model

    target, draft = (model.load_model(w) for w in which)
    with measure.num_threads(1):
        out = generate.speculative_generate(target, draft, [model.encode(p) for p in prompts], max_tokens, k=k)
    stats = out.stats
    accepted = stats.accepted[stats.active]
    drafted = stats.drafts_proposed[stats.active]
    return {"accepted_per_drafted": float(accepted.sum() / drafted.sum()), "alpha": stats.alpha,
            "mean_tokens_per_iteration": stats.mean_tokens_per_iteration, "drafted": int(drafted.sum()),
            "accepted": int(accepted.sum()), "prompts": len(prompts), "max_tokens": max_tokens, "k": k}


def mean_context(results) -> int:
    """The context a measured step attends over, on average, as the record's params say: the prompt
    (``prompt_chars``, one token per byte; the longest, for a prompts file) and half the ``max_tokens`` new tokens."""
    from specnotes import engine_client

    return max(r.params["prompt_chars"] + r.params["max_tokens"] // 2
               for r in results.sections[engine_client.SPEEDUP])


def shape_of(config):
    """A specnotes ``ModelConfig`` as the cost model's shape, float32 weights and KV (as served here)."""
    from specnotes import cost

    return cost.ModelShape(config.n_layers, config.d_model, config.n_heads, config.n_heads, config.d_ff,
                           config.vocab_size, weight_bytes=4, kv_bytes=4, compute="fp32")


def pair_table(results) -> list[dict]:
    """One row per concurrency of ``measure_pairs``' document. S(B) from the engine's own per-request TPOT (off
    over on, medians) in each pair, their median, min, max and spread (max / min); "S fastest", the fastest
    pair's TPOT off over the fastest pair's TPOT on (load from other programs only ever slows a run, so the
    fastest of each is the best estimate of what the engine does alone, as the book keeps the fastest sample
    of its roofs); S from the client's output tokens per second, and from the client's TPOT; how far the
    client's TPOT was from the engine's (the cross-check); the engine's acceptance; those fastest TPOTs."""
    from specnotes import engine_client

    by: dict[int, list] = {}
    for r in results.sections[engine_client.SPEEDUP]:
        by.setdefault(r.params["concurrency"], []).append(r)
    rows = []
    for c, records in sorted(by.items()):
        s = sorted(r.extra.get("speedup_engine_tpot", r.extra["speedup"]) for r in records)
        acc = [r.extra["engine_acceptance_on"] for r in records if r.extra.get("engine_acceptance_on") is not None]
        cross = [r.extra[key] for r in records for key in ("tpot_client_over_engine_off", "tpot_client_over_engine_on")
                 if key in r.extra]
        rows.append({"concurrency": c, "pairs": len(s), "S each": s, "S": statistics.median(s), "S min": s[0],
                     "S max": s[-1], "spread max/min": s[-1] / s[0],
                     "S (client tokens/s)": statistics.median([r.extra["speedup_tokens_per_s"] for r in records]),
                     "S (client TPOT)": statistics.median([r.extra["speedup"] for r in records]),
                     "client/engine TPOT": (min(cross), max(cross)) if cross else None,
                     "engine acceptance": sum(acc) / len(acc) if acc else None,
                     "TPOT off ms": 1e3 * min(r.extra.get("engine_tpot_median_s_off", r.extra["tpot_off_median_s"])
                                              for r in records),
                     "TPOT on ms": 1e3 * min(r.extra.get("engine_tpot_median_s_on", r.extra["tpot_on_median_s"])
                                             for r in records)})
        rows[-1]["S fastest"] = rows[-1]["TPOT off ms"] / rows[-1]["TPOT on ms"]
    return rows


# ---------------------------------------------------------------------------------------------- command line


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (else the usage error, exit 2, before anything runs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: it must be an integer >= 1")
    return value


def positive_ints(text: str) -> list[int]:
    """argparse type: comma-separated integers >= 1."""
    return [positive_int(part.strip()) for part in text.split(",")]


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: it must be a number > 0")
    return value


def serve_until_stopped(server: Server, poll_s: float = 1.0) -> int:
    """Wait while ``server`` runs: 0 after Ctrl-C; 1, with the end of its log, if llama-server dies."""
    try:
        while server.process.poll() is None:
            time.sleep(poll_s)
    except KeyboardInterrupt:
        return 0
    print(f"error: llama-server exited with code {server.process.returncode}; its log ({server.log_path}) ends:\n"
          f"{server.log_tail()}", file=sys.stderr)
    return 1


DEFAULT_PORT = 8080  # engine serve's: the port the book's printed bench serve commands name
CUSTOM_CONTEXT = 2048  # tokens per slot for a pair of your own (the shipped pair's block is SHIPPED_CONTEXT)


class DefaultsShown(argparse.HelpFormatter):
    """``--help`` with every default that its help text does not state already."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return text + " (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    """``python -m specnotes.engine``'s arguments (every default shown by ``--help``)."""
    parser = argparse.ArgumentParser(prog="python -m specnotes.engine", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    helpful = {"formatter_class": DefaultsShown}
    convert = commands.add_parser("convert", help="write the shipped pair (and --big) as GGUF files", **helpful)
    convert.add_argument("--big", action="store_true", help="also the random model larger than the LLC")
    serve = commands.add_parser("serve", help="serve on 127.0.0.1 until interrupted (for bench serve by hand)",
                                **helpful)
    measure = commands.add_parser("measure", help="S(B) on llama-server: pairs of runs, speculation off and on, "
                                                  "until S settles", **helpful)
    for p in (serve, measure):
        p.add_argument("--target", type=Path, default=None,
                       help="your target model, a GGUF file (with --draft; default: the shipped pair)")
        p.add_argument("--draft", type=Path, default=None,
                       help="your draft model, a GGUF file with the target's vocabulary")
        p.add_argument("--k", type=positive_int, default=4, help="drafts per step (speculation on)")
        p.add_argument("--threads", type=positive_int, default=1,
                       help="CPU threads for the target and the draft (1: on a shared 2-core machine "
                            "llama.cpp's spinning worker threads stall each other for seconds)")
        p.add_argument("--context", type=positive_int, default=None,
                       help=f"tokens per slot (default: {SHIPPED_CONTEXT} for the shipped pair, the block it was "
                            f"trained on; {CUSTOM_CONTEXT} for --target)")
        p.add_argument("--big", action="store_true", help="the random model larger than the LLC, its own draft")
    serve.add_argument("--slots", type=positive_int, default=4, help="parallel slots: the most requests batched")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="the port on 127.0.0.1 (0: any free port)")
    serve.add_argument("--no-draft", action="store_true", help="speculation off")
    measure.add_argument("--concurrency", type=positive_ints, default="1,2,4",
                         help="comma-separated requests in flight")
    measure.add_argument("--pairs", type=positive_int, default=MAX_PAIRS,
                         help="the most off/on pairs to run; it stops earlier once S has settled")
    measure.add_argument("--min-pairs", type=positive_int, default=MIN_PAIRS,
                         help="the fewest pairs before S may count as settled")
    measure.add_argument("--settle", type=positive_float, default=SETTLE,
                         help="S has settled when the last pair moved no level's S by this share or more")
    measure.add_argument("--max-tokens", type=positive_int, default=128, help="output tokens per request")
    measure.add_argument("--prompt-chars", type=positive_int, default=64, help="characters per prompt")
    measure.add_argument("--requests", type=positive_int, default=None,
                         help="requests per level (default: 4 x concurrency, at least 16)")
    measure.add_argument("--timeout", type=positive_float, default=120.0, help="seconds without data before a "
                                                                               "request fails")
    measure.add_argument("--roofs", action="store_true", help="also measure this machine's roofs (for the model)")
    measure.add_argument("--record", action="store_true",
                         help="write the book's reference record, data/reference/llama-server/<kind>-<cpu>.json "
                              "(roofs included)")
    measure.add_argument("--out", type=Path, default=None, help="the JSON file to write (or --record)")
    return parser


def chosen_pair(args, parser) -> tuple[Path, Path, str, str, int]:
    """(target, draft, served name, kind, context per slot) for ``args``: --target and --draft, --big, or the
    shipped pair. A usage error, before anything starts, for a lone --target or --draft, for --big with them, and
    for a pair llama-server cannot run (``gguf_export.check_pair``)."""
    from specnotes import gguf_export

    if (args.target is None) != (args.draft is None):
        parser.error("--target and --draft go together: a GGUF target and a GGUF draft with its vocabulary")
    if args.target is not None:
        if args.big:
            parser.error("--big serves the book's random model: leave out --target and --draft")
        try:
            gguf_export.check_pair(args.target, args.draft)
        except ValueError as e:
            parser.error(str(e))
        return args.target, args.draft, args.target.stem, "custom", args.context or CUSTOM_CONTEXT
    if args.big:
        path = big_gguf()
        return path, path, "specnotes-random-big", "big", args.context or SHIPPED_CONTEXT
    paths = shipped_ggufs()
    return paths["target"], paths["draft"], MODEL_NAMES["target"], "shipped", args.context or SHIPPED_CONTEXT


def print_measurement(results, out=print):
    """What a ``measure_pairs`` record says: each level's S beside its pairs' range and spread and which way the
    pairs went, then the sentences the book chooses from such numbers (``pairs_sentence``; with roofs, the
    overhead sentence for the shipped pair, the verify sentence for the big one)."""
    notes = results.notes
    rows = (model_beside(results) if "roofs" in notes and notes["kind"] in ("shipped", "big")
            else pair_table(results))
    out(f"{notes['pairs']} pairs; {notes.get('stop', 'a fixed number, asked for')}")
    for row in rows:
        each = [x for x in row["S each"] if x not in row.get("pairs above the ceiling", [])]
        way = ("lost in every pair" if max(each) < 1 else "won in every pair" if min(each) > 1 else
               "pairs on both sides of 1")
        fastest = row.get("S measured", row.get("S fastest"))
        out(f"B = {row['concurrency']}: S = {fastest:.3f} (fastest TPOTs); pairs {min(each):.3f}-{max(each):.3f}, "
            f"spread {max(each) / min(each):.2f}x; {way}")
    out(pairs_sentence(rows))
    if "roofs" in notes and notes["kind"] == "shipped":
        out(overhead_verdict(rows, draft_pass_cost(results)).sentence)
    elif "roofs" in notes and notes["kind"] == "big":
        out(verify_verdict(rows).sentence)


def check_measure_arguments(args, kind: str) -> Path:
    """``measure``'s checks before anything starts (ValueError naming the flag): a file to write (--out, or --record
    for the book's own pairs), requests enough for every concurrency, and --out writable. -> the file to write."""
    from specnotes import engine_client

    out = reference_path(kind) if args.record and kind != "custom" else args.out
    if args.record and kind == "custom":
        raise validate.BadArgument("--record writes the book's own records: use --out FILE for your pair")
    if out is None:
        raise validate.BadArgument("pass --out FILE, or --record to write the book's reference record")
    engine_client.check_levels(args.concurrency, args.requests)
    engine_client.check_writable("--out", out)
    return out


def main(argv=None) -> int:
    from specnotes import engine_client
    from specnotes.measure.records import save_results

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "convert":
        paths = shipped_ggufs()
        if args.big:
            paths["big"] = big_gguf()
        for which, path in paths.items():
            print(f"{which}: {path} ({path.stat().st_size / 1e6:.1f} MB)")
        return 0
    try:
        require_binary()
    except EngineNotBuilt as e:
        parser.error(str(e))
    target, draft, name, kind, context = chosen_pair(args, parser)
    if args.command == "serve":
        with Server(target, None if args.no_draft else draft, args.k, args.slots, context=context,
                    threads=args.threads, name=name, listen_port=args.port) as server:
            print(f"serving {name} on {server.url} (slots {args.slots}, "
                  f"{'no draft' if args.no_draft else f'draft k={args.k}'}); Ctrl-C stops it")
            return serve_until_stopped(server)
    try:
        out = check_measure_arguments(args, kind)
    except ValueError as e:
        parser.error(str(e))
    command = "python -m specnotes.engine " + " ".join(argv)
    try:
        results = measure_pairs(target, draft, args.concurrency, args.k, args.pairs, args.max_tokens,
                                args.prompt_chars, args.requests, 2, args.threads, args.timeout, name, command,
                                kind=kind, roofs=args.roofs or args.record, min_pairs=args.min_pairs,
                                settle=args.settle, context=context)
    except (engine_client.EngineError, EngineStartError) as e:
        print(f"error: {e}\nNothing was written: a record is only written when every run completed.",
              file=sys.stderr)
        return 1
    print_measurement(results)
    print(f"wrote {save_results(results, out)}")
    return 0


def draft_pass_cost(results) -> list[dict]:
    """What a draft pass cost the engine, inferred from a shipped-pair record, at each concurrency: the engine's
    tokens per step (1 + accepted / verify steps, its own counters, which count whole runs: one value pooled over
    every level and pair), its step time (fastest TPOT on × tokens
    per step), and, taking the verify pass at one plain pass's time (fastest TPOT off: the roofline's verify /
    decode ratio for this pair is about 1), the time of each of the step's k + 1 draft passes,
    T_draft ≈ (T_step − T_off) / (k + 1), and c = T_draft / T_off beside the roofline's c for the same passes."""
    from specnotes import cost, measure, model

    notes = results.notes
    k = notes["k"]
    roof = measure.MeasuredRoof(notes["roofs"]["bandwidth"], notes["roofs"]["flops"], dtype="fp32")
    accel = roof.as_accelerator()
    card = model.model_card()
    target, draft = (shape_of(model.ModelConfig(**card[w]["config"])) for w in ("target", "draft"))
    context = mean_context(results)
    on = [r for r in notes["engine_runs"] if r["speculation"] == "on"]
    per_step = 1 + sum(r["draft_accepted"] for r in on) / sum(r["verify_steps"] for r in on)
    rows = []
    for row in pair_table(results):
        b = row["concurrency"]
        t_off, t_on = row["TPOT off ms"] / 1e3, row["TPOT on ms"] / 1e3
        step = t_on * per_step
        t_draft = (step - t_off) / (k + 1)
        roof_t = cost.pass_time(target, accel, b, 1, context, dtype="fp32")
        roof_d = cost.pass_time(draft, accel, b, 1, context, dtype="fp32")
        rows.append({"concurrency": b, "tokens per step": per_step, "step ms": 1e3 * step, "TPOT off ms": 1e3 * t_off,
                     "draft pass ms (inferred)": 1e3 * t_draft, "c (inferred)": t_draft / t_off,
                     "target pass ms (roofline)": 1e3 * roof_t, "draft pass ms (roofline)": 1e3 * roof_d,
                     "c (roofline)": roof_d / roof_t})
    return rows


def clock_sentence(low: float, high: float, tolerance: float = 0.1) -> str:
    """What the cross-check of the client's median TPOT against the engine's own says (``pair_table``'s
    "client/engine TPOT" range over every level and run)."""
    if 1 - tolerance <= low and high <= 1 + tolerance:
        return (f"The client's median TPOT agreed with the engine's own within {max(1 - low, high - 1):.0%} at every "
                "level, and the client counted exactly the tokens the engine generated.")
    return (f"The client counted exactly the tokens the engine generated, but its median TPOT ranged from {low:.2f} "
            f"to {high:.2f} times the engine's own: at about a millisecond per token a busy machine delayed the "
            "server's streaming thread, and the tokens arrived in bursts. Here the engine's clock is the one to "
            "trust.")


# ---------------------------------------------------------------------------------------------- what the records say


NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}


def listed(values, fmt="{:.2f}") -> str:
    """"0.68, 0.56 and 0.80"."""
    said = [fmt.format(v) for v in values]
    return said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]


def pairs_sentence(rows: list[dict]) -> str:
    """Which way speculation went in every pair at each concurrency (``pair_table`` or ``model_beside`` rows, with
    "S each"; a big record's pairs above the ceiling left out): "lost in every pair" where every pair's S < 1,
    "won in every pair" where every pair's S > 1, and where the pairs lie on both sides of 1 (or on it), that the run
    cannot tell whether speculation pays there."""
    each = {r["concurrency"]: [x for x in r["S each"] if x not in r.get("pairs above the ceiling", [])] for r in rows}
    lost = [b for b, s in each.items() if max(s) < 1]
    won = [b for b, s in each.items() if min(s) > 1]
    mixed = [b for b in each if b not in lost and b not in won]
    counts = {len(s) for s in each.values()}
    every = f"every one of the {counts.pop()} pairs" if len(counts) == 1 else "every pair"
    parts = []
    if lost:
        parts.append(f"lost in {every} at B = {listed(lost, '{}')}, the largest S being "
                     f"{listed(max(each[b]) for b in lost)}")
    if won:
        parts.append(f"won in {every} at B = {listed(won, '{}')}, the smallest S being "
                     f"{listed(min(each[b]) for b in won)}")
    said = "Speculation " + "; it ".join(parts) + "." if parts else ""
    if mixed:
        ranges = listed((f"{min(each[b]):.2f}–{max(each[b]):.2f}" for b in mixed), "{}")
        said += (f" At B = {listed(mixed, '{}')} the pairs gave S = {ranges}, on both sides of 1: this run cannot "
                 "tell whether speculation pays there.")
    return said.strip()


def break_even_c(tokens_per_step: float, k: int) -> float:
    """The draft pass's cost, as a share c of a plain step, at which speculation breaks even on llama-server, taking
    the verify pass at one plain step: a speculative step costs 1 + (k + 1)c plain steps for ``tokens_per_step``
    tokens (k draft passes and the re-evaluation), so S = E[N] / (1 + (k + 1)c) = 1 at c = (E[N] − 1) / (k + 1)."""
    return (tokens_per_step - 1) / (k + 1)


def overhead_verdict(rows: list[dict], costs: list[dict] | None = None):
    """What the shipped pair's record says of the engine's costs, chosen by the numbers. ``rows``: ``model_beside``;
    ``costs``: ``draft_pass_cost`` (optional). Each measured S is placed against the overhead-bound limit
    L = E[N]/(k + 2) and the roofline's R at its concurrency: "below the limit" (S < L), "above the roofline"
    (S > R), else between them, "nearer the limit" or "nearer the roofline" by |log S/L| against |log S/R|. With the
    costs, the draft pass's inferred c against the roofline's (the smallest ratio of the two), and against the
    break-even c (``break_even_c``): "loses" where every c is above it, "pays" where every c is below it. The
    ``Verdict`` holds (the engine is overhead-bound) when every S is nearer the limit than the roofline."""
    import math

    from specnotes.measure.checks import Verdict

    b = [r["concurrency"] for r in rows]
    s = [r["S measured"] for r in rows]
    limit, roof = rows[0]["S overhead-bound"], [r["S roofline"] for r in rows]
    spread = max(r["S max"] / r["S min"] for r in rows) if all("S min" in r for r in rows) else None
    sentences = [f"At B = {listed(b, '{}')} the engine measured S = {listed(s)}"
                 + (f", with its pairs up to {spread:.2f}× apart." if spread else ".")]
    nearer = [abs(math.log(x / limit)) < abs(math.log(x / r)) for x, r in zip(s, roof, strict=True)]
    below = [bb for bb, x in zip(b, s, strict=True) if x < limit]
    above = [bb for bb, x, r in zip(b, s, roof, strict=True) if x > r]
    between = [(bb, n, r) for bb, x, r, n in zip(b, s, roof, nearer, strict=True) if limit <= x <= r]
    where = []
    if between:
        near = {n for _, n, _ in between}
        which = ("nearer the limit" if near == {True} else "nearer the roofline" if near == {False} else
                 f"nearer the limit at B = {listed([bb for bb, n, _ in between if n], '{}')}")
        where.append(("every value lies" if len(between) == len(b) else
                      f"at B = {listed([bb for bb, _, _ in between], '{}')} S lies")
                     + f" between the overhead-bound limit E[N]/(k + 2) = {limit:.2f} and the roofline's "
                       f"{listed(r for _, _, r in between)}, {which}")
    if below:
        where.append(f"at B = {listed(below, '{}')} S is below the limit {limit:.2f}: a speculative step cost more "
                     "than k + 2 plain steps")
    if above:
        where.append(f"at B = {listed(above, '{}')} S is above the roofline's S")
    sentences.append("; ".join(where)[0].upper() + "; ".join(where)[1:] + ".")
    if costs:
        k = rows[0]["k"]
        c = [x["c (inferred)"] for x in costs]
        c_roof = [x["c (roofline)"] for x in costs]
        even = break_even_c(costs[0]["tokens per step"], k)
        sentences.append(f"Taking the verify pass at one plain step, a draft pass cost c = {min(c):.2f}–{max(c):.2f} "
                         f"of a plain step: at least {min(x / y for x, y in zip(c, c_roof, strict=True)):.0f}× what "
                         f"its bytes cost on the roofline, {min(c_roof):.2f}–{max(c_roof):.2f}.")
        verdict = ("so at these costs it loses" if min(c) > even else "so at these costs it pays" if max(c) < even
                   else "and c crosses it between the concurrencies measured")
        sentences.append(f"With {costs[0]['tokens per step']:.2f} tokens per step, speculation pays only below "
                         f"c = {even:.2f}, {verdict}.")
    return Verdict("the engine is overhead-bound on the shipped pair", all(nearer), True, " ".join(sentences),
                   {"S measured": listed(s), "S overhead-bound": limit, "S roofline": listed(roof)})


def acceptance_verdict(engine_acceptance: float, ours: dict, margin: float = 0.05):
    """The engine's accepted / drafted against specnotes' own decoder (``specnotes_acceptance``: every prompt of the
    set the engine's levels sent the first of): at temperature 0 both run the same greedy pair, so they should
    agree within ``margin``."""
    from specnotes.measure.checks import Verdict

    theirs, mine = engine_acceptance, ours["accepted_per_drafted"]
    ok = abs(theirs - mine) <= margin
    prompts = f"all {ours['prompts']} prompts" if ours.get("prompts") else "every prompt"
    sentence = (f"The engine accepted {theirs:.1%} of the tokens it drafted. With the same k on {prompts} of the "
                f"set the engine's requests were drawn from, specnotes' own decoder accepts {mine:.1%}: its α, "
                f"accepted over checked, is {ours['alpha']:.2f}, and E[N] = {ours['mean_tokens_per_iteration']:.2f} "
                "tokens per iteration. "
                + (f"Within {100 * margin:.0f} points of each other: the same pair, the same greedy acceptance." if ok
                   else f"They differ by more than {100 * margin:.0f} points, so the two do not draft alike."))
    return Verdict("the engine accepts what specnotes accepts", ok, True, sentence,
                   {"engine": theirs, "specnotes": mine, "margin": margin})


def verify_verdict(rows: list[dict], bar: float = 1.5):
    """The big pair (α = 1, its own draft): the verify/decode time ratio r = ((k + 1)/S − k)/2 each measured S(B)
    implies (``model_beside``), chosen by the numbers as printed (two decimals). "below ``bar``" where r < bar;
    "under half" where r < (k + 1)/2, half of what a pass that paid per token would cost (r = k + 1; a memory-bound
    pass, which reads the weights once either way, costs r = 1); "rises with B" where r grows at every step. Pairs
    above the α = 1 ceiling are named as noise. The ``Verdict`` holds when r is under half at every batch."""
    from specnotes.measure.checks import Verdict

    k = rows[0]["k"]
    b = [row["concurrency"] for row in rows]
    r = [round(row["verify/decode measured"], 2) for row in rows]
    half = (k + 1) / 2
    sentences = [f"With every draft accepted, S(B) = {listed(row['S measured'] for row in rows)} at "
                 f"B = {listed(b, '{}')} says one verify pass over k + 1 tokens cost r = {listed(r)} decode passes. "
                 f"The roofline says {listed(row['verify/decode roofline'] for row in rows)}, and a pass that paid per "
                 f"token would cost {k + 1}."]
    below = [bb for bb, rr in zip(b, r, strict=True) if rr < bar]
    closer = [bb for bb, rr in zip(b, r, strict=True) if rr < half]
    rising = len(r) > 1 and all(y > x for x, y in zip(r, r[1:], strict=False))
    claim = ("It stays below {bar} at every batch" if below == b else
             f"It is below {bar} only at B = {listed(below, '{}')}" if below else f"It is {bar} or more at every batch")
    claim = claim.format(bar=bar) + (" and rises with B" if rising else "")
    if closer == b:
        sentences.append(claim + f": under half the {k + 1} one-token passes it would cost if it paid per token. "
                         "Reading the weights once for k + 1 tokens is the bandwidth trade, on a real engine.")
    else:
        far = [bb for bb in b if bb not in closer]
        sentences.append(claim + f". At B = {listed(far, '{}')} it is half of {k + 1} or more: there the verify "
                         "pass's arithmetic, not the weight reads, sets its price.")
    noise = [(row["concurrency"], x) for row in rows for x in row.get("pairs above the ceiling", [])]
    if noise:
        ceiling = rows[0]["S ceiling (α = 1)"]
        one = len(noise) == 1
        who = "One pair" if one else f"{NUMBERS.get(len(noise), len(noise))} pairs".capitalize()
        sentences.append(f"{who} at B = {listed(sorted({bb for bb, _ in noise}), '{}')} gave "
                         f"S = {listed(x for _, x in noise)}, above the ceiling (k + 1)/(k + 2) = {ceiling:.2f} "
                         "that no step at α = 1 can pass. Load slowed "
                         + ("its plain run, so it is" if one else "their plain runs, so they are")
                         + " left out of the pairs' range.")
    return Verdict("a verify pass costs under half of k + 1 decode passes", closer == b, True,
                   " ".join(sentences), {"r": listed(r), "bar": bar})


if __name__ == "__main__":
    raise SystemExit(main())
