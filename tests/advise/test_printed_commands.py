"""Every command the advisor prints runs as printed, and the README's advisor examples print what the README shows.

The measuring commands of a report (``report["measure"]["commands"]``) are parsed by the parser of the module they
name (``tests/test_commands.py``'s ``problems``, as the book's own printed commands are), for reports of every kind
that prints them; and once run for real, end to end: ``bench serve`` off and on against a stub OpenAI-compatible
engine on 127.0.0.1 (tests/serve/test_engine_client.py), ``bench serve-speedup``, then the advisor anchored on the
record they wrote."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from specnotes import advise, bench

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))
from test_commands import problems, split_commands  # noqa: E402

SHIPPED = str(advise.llama_server_record("shipped"))
H100 = ["--gpu", "H100-SXM"]
REPORTS = {
    "a chain, k given": ["--target", "Llama-3.1-8B", "--drafter", "eagle3", *H100, "--engine", "vllm",
                         "--engine-version", "0.10.1", "--batch", "1-256", "--context", "1024",
                         "--mean-accepted", "2.3@3"],
    "an α range, k by default": ["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", *H100, "--engine", "vllm",
                                 "--batch", "1-512", "--context", "2048", "--alpha", "0.5-0.8"],
    "the best k": ["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", *H100, "--batch", "1-512", "--context",
                   "2048", "--alpha", "0.7", "--k", "best", "--engine", "vllm"],
    "anchored on --measured": ["--target", "Llama-3.1-8B", "--drafter", "eagle3", *H100, "--engine", "vllm",
                               "--engine-version", "0.10.1", "--batch", "1-256", "--context", "1024",
                               "--mean-accepted", "2.3@3", "--measured", "1:1.1,16:1.5"],
    "anchored on a record": ["--from-record", SHIPPED, "--batch", "1-64"],
    "a measurement of exactly 1": ["--target", "Llama-3.1-8B", "--drafter", "eagle3", *H100, "--engine", "vllm",
                                   "--batch", "1-16", "--context", "1024", "--alpha", "0.5-0.7", "--k", "3",
                                   "--measured", "16:1.0"],
    "a mixture of experts": ["--target", "Qwen3-30B-A3B", "--drafter", "eagle3", *H100, "--engine", "sglang",
                             "--batch", "1-64", "--context", "2048", "--mean-accepted", "2.6@3"],
}


@pytest.fixture(scope="module")
def reports():
    return {name: advise.run(argv) for name, argv in REPORTS.items()}


def test_every_kind_of_report_prints_commands(reports):
    # the checks below would pass on a report that prints nothing
    assert all(r["measure"]["commands"] for r in reports.values()), {n: r["measure"] for n, r in reports.items()}


@pytest.mark.parametrize("name", REPORTS)
def test_the_measuring_commands_parse_as_printed(reports, name):
    r = reports[name]
    commands = [shlex.split(c) for c in r["measure"]["commands"]]
    assert problems(commands) == [], r["measure"]["commands"]
    # the report's code block (broken at 100 columns with backslashes) is the same commands
    block = re.search(r"```bash\n(.*?)```", advise.render(r), re.S).group(1)
    assert [list(c) for c in split_commands(block)] == commands


@pytest.mark.parametrize("name", REPORTS)
def test_no_command_asks_for_a_batch_already_measured(reports, name):
    r = reports[name]
    measured = set(advise.measured_batches(r))
    assert not measured & set(r["measure"]["batches"])
    concurrency = re.search(r"--concurrency (\S+)", r["measure"]["commands"][0]).group(1)
    assert [int(b) for b in concurrency.split(",")] == r["measure"]["batches"]


@pytest.mark.parametrize("argv, served", [
    (["--target", "Llama-3.1-8B", "--drafter", "eagle3", *H100, "--engine", "vllm", "--engine-version", "0.10.1",
      "--batch", "1-16", "--context", "1024", "--alpha", "0.5-0.7", "--k", "3", "--measured", "1:1.1"],
     "meta-llama/Llama-3.1-8B-Instruct"),
    (["--from-record", SHIPPED, "--batch", "1-64"], "specnotes-target"),
    (["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", *H100, "--engine", "vllm", "--batch", "1-16",
      "--context", "2048", "--alpha", "0.5-0.8"], "meta-llama/Llama-3.1-8B-Instruct"),
], ids=["--measured", "a record", "k by default"])
def test_the_printed_commands_run_end_to_end(argv, served, tmp_path, monkeypatch):
    pytest.importorskip("aiohttp")
    sys.path.insert(0, str(TESTS / "serve"))
    import test_engine_client as stub

    monkeypatch.setattr(stub, "MODEL", served)  # the name the stub serves, as NAME is filled in
    r = advise.run(argv)
    commands = r["measure"]["commands"]
    assert len(commands) == 4 and r["measure"]["batches"], commands
    monkeypatch.chdir(tmp_path)
    # S = TPOT off / TPOT on = 2 ms / 1.5 ms: about 1.33, within what k drafts can give. Each run as printed,
    # HOST:PORT and NAME filled in, shortened by three flags of its own (32 tokens a request, no warm-up)
    for command, delay in zip(commands[:2], (0.002, 0.0015), strict=True):
        words = shlex.split(command)
        assert words[:4] == ["python", "-m", "specnotes.bench", "serve"]
        with stub.serving(stub.Stub(first_delay=0.002, token_delay=delay, per_chunk=16)) as url:
            words = [url if w == "http://HOST:PORT/v1" else served if w == "NAME" else w for w in words]
            assert bench.main(words[3:] + ["--max-tokens", "32", "--warmup", "0"]) == 0
    words = shlex.split(commands[2])
    assert words[:4] == ["python", "-m", "specnotes.bench", "serve-speedup"] and bench.main(words[3:]) == 0
    words = shlex.split(commands[3])
    assert words[:3] == ["python", "-m", "specnotes.advise"] and words[-2:] == ["--from-record", "s.json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert advise.main(words[3:] + ["--json"]) == 0
    anchored = json.loads(out.getvalue())
    batches = [b for b, _ in anchored["deployment"]["anchor"]["measured"]]
    # the new record's batches and every earlier measurement, each once
    assert set(r["measure"]["batches"]) | set(advise.measured_batches(r)) == set(batches)
    assert len(batches) == len(set(batches))
    assert not set(anchored["measure"]["batches"]) & set(batches)  # and the next report asks for none of them


def _readme_examples() -> list[tuple[list[str], list[str]]]:
    """(argv, the lines the README shows) for each command of its "Ask the advisor" block."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Ask the advisor", 1)[1].split("\n## ", 1)[0]
    commands = [c for c in split_commands(re.search(r"```bash\n(.*?)```", section, re.S).group(1))]
    shown = [block.splitlines() for block in re.findall(r"```text\n(.*?)```", section, re.S)]
    assert len(commands) == len(shown) == 2, "the README's advisor block: two commands and their first lines"
    return [(list(c)[3:], lines) for c, lines in zip(commands, shown, strict=True)]


@pytest.mark.parametrize("argv, lines", _readme_examples(), ids=["dense", "moe"])
def test_the_readmes_advisor_examples_print_what_it_shows(argv, lines):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert advise.main(argv) == 0
    assert out.getvalue().splitlines()[:len(lines)] == lines
    assert advise.run(argv)["deployment"]["target"]["name"] in lines[0]


def test_the_readme_has_a_dense_and_a_moe_example():
    from specnotes.analytic import cost

    targets = [argv[argv.index("--target") + 1] for argv, _ in _readme_examples()]
    assert targets[0] in cost.PRESETS and targets[1] in cost.MOE_PRESETS
