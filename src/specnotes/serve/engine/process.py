"""llama-server as a process on 127.0.0.1 (:class:`Server`), and its HTTP endpoints and counters.

:class:`Server` starts it at a free port with ``slots`` parallel slots (``-np``; continuous batching over them),
with or without a draft model (``-md``, speculation type ``draft-simple``, ``k`` drafts per step:
``--spec-draft-n-max k``, with no minimum and no confidence cut-off, so every step drafts k), waits for
``/health``, and stops it on exit, also on error (a context manager, ``atexit`` for anything left, and on Linux a
parent-death signal for a parent killed outright). Attention runs in float32, as specnotes' own: a float32 KV
cache (``-ctk f32 -ctv f32``) *and* flash attention off (``-fa off``). With flash attention on (the default,
``auto``, picks it on a CPU) llama.cpp casts a float32 K and V to float16 before its flash-attention kernel
(``src/llama-graph.cpp``), and accumulates V in float16: logprobs then drift from float64 by up to 6e-4 (7.6e-6
with it off), enough to flip a near-tie and part the greedy output from specnotes' (found by
``tests/serve/test_engine.py``: at token 52 of one prompt, where the top two logits lie 2.6e-4 apart).
``Server.metrics()`` reads the engine's own counters from ``/metrics`` (tokens, time generating, drafted and
accepted tokens): ``speedup.measure_pairs`` records them with every run, so the record says from the engine itself
that speculation ran.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from specnotes import validate
from specnotes.serve.engine.build import engine_dir, require_binary
from specnotes.serve.engine.models import SHIPPED_CONTEXT


class EngineStartError(RuntimeError):
    """llama-server exited or did not become healthy; the message holds the end of its log."""


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
