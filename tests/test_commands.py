"""The commands the pages print run as printed: every shell block (```bash, sh, shell, console) and every
inline command (`make ...`, `python -m specnotes....`, `.venv/bin/...`) in README.md, book/ and the chapters.

Checked without doing the work: a ``make`` target exists in the Makefile (and a ``VAR=value`` names one of its
variables); a ``python -m specnotes.X`` module has a ``main`` whose argument parser accepts the printed flags
(``argparse.ArgumentParser.parse_args`` is stopped right after parsing, before ``main`` does anything); a
``.venv/bin/X`` comes after a command in the same block that creates ``.venv`` (``make setup`` or a target that
depends on it), and a program other than python or pip after a ``.venv/bin/pip install``. A ``...`` in a
command's flags stands for the flags of the command before it (``python -m specnotes.advise ... --json``).
Commands of other programs (``vllm serve``, ``pip install``, ``git clone``) are not checked here.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import re
import shlex
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md")), *sorted((ROOT / "book").glob("*.ipynb")),
         *sorted((ROOT / "notebooks").glob("*.ipynb"))]
SHELL = re.compile(r"^```(?:bash|sh|shell|console)[^\n]*\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
PYTHON = re.compile(r"^(?:\S*/)?python3?$")
COMMANDISH = re.compile(r"^(?:make |(?:\S*/)?python3? -m specnotes\b|\.venv/bin/)")


# ---- what the Makefile offers -----------------------------------------------------------------------------


def makefile() -> tuple[dict[str, list[str]], set[str]]:
    """({target: prerequisites}, variables) of the Makefile, $(NAME) prerequisites kept as written."""
    text = (ROOT / "Makefile").read_text()
    rules: dict[str, list[str]] = {}
    for target, prereqs in re.findall(r"^([A-Za-z0-9_.$()/-]+)\s*:(?![=])([^\n]*)", text, re.M):
        rules.setdefault(target, []).extend(prereqs.split())
    variables = set(re.findall(r"^([A-Z_]+)\s*[?:]?=", text, re.M))
    return rules, variables


def creates_venv(target: str, rules: dict[str, list[str]], seen: frozenset = frozenset()) -> bool:
    """Whether ``make target`` sets up .venv: it is the stamp rule's target or depends on it."""
    if target in seen:
        return False
    prereqs = rules.get(target, [])
    return "$(STAMP)" in prereqs or any(creates_venv(p, rules, seen | {target}) for p in prereqs if p in rules)


# ---- what the pages print ---------------------------------------------------------------------------------


def page_texts(path: Path) -> list[str]:
    """The Markdown of a page: the file, or a notebook's Markdown cells."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    return [path.read_text()]


class Command(list):
    """One command's words, and the comment printed after it (``# set up .venv``)."""

    comment = ""


def split_commands(script: str) -> list[Command]:
    """A shell block as commands: continuations joined, comments kept aside, ``&&``, ``||`` and ``;`` split."""
    commands = []
    for line in script.replace("\\\n", " ").splitlines():
        line = re.sub(r"^\$\s+", "", line.strip())  # a console prompt
        if not line:
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split, lexer.commenters = True, "#"
        comment = re.search(r"(?:^|\s)#\s*(.*)$", line)
        command = Command()
        for word in [*lexer, ";"]:
            if word in ("&&", ";", "||"):
                if command:
                    commands.append(command)
                command = Command()
            else:
                command.append(word)
        if commands and comment:
            commands[-1].comment = comment.group(1)
    return commands


def printed_blocks(text: str) -> list[tuple[str, list[list[str]]]]:
    """("block", commands) for each shell block and ("inline", commands) for each paragraph's inline commands."""
    blocks = [("block", split_commands(body)) for body in SHELL.findall(text)]
    prose = SHELL.sub("", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))
    for paragraph in re.split(r"\n\s*\n", prose):
        spans = [s.strip() for s in INLINE.findall(paragraph) if COMMANDISH.match(s.strip())]
        if spans:
            blocks.append(("inline", [c for s in spans for c in split_commands(s)]))
    return [(kind, commands) for kind, commands in blocks if commands]


def all_blocks() -> list[tuple[str, str, list[list[str]]]]:
    out = []
    for path in PAGES:
        for text in page_texts(path):
            for kind, commands in printed_blocks(text):
                out.append((str(path.relative_to(ROOT)), kind, commands))
    return out


# ---- the checks -------------------------------------------------------------------------------------------


class _Parsed(Exception):
    def __init__(self, namespace):
        super().__init__("parsed")
        self.namespace = namespace


def parse_cli(module_name: str, args: list[str]) -> argparse.Namespace | None:
    """Run ``module.main(args)`` until its parser has parsed ``args``, and stop there. A rejected flag raises
    SystemExit (argparse's exit 2, its message on stderr). None: the module's main takes no arguments."""
    module = importlib.import_module(module_name)
    main = getattr(module, "main", None)
    if main is None:
        raise AssertionError(f"{module_name} has no main(): `python -m {module_name}` does nothing")
    if not inspect.signature(main).parameters:
        if args:
            raise AssertionError(f"`python -m {module_name}` takes no arguments, the page gives {args}")
        return None
    original = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_and_stop):
        try:
            main(list(args))
        except _Parsed as parsed:
            return parsed.namespace
    raise AssertionError(f"{module_name}.main never parsed its arguments")


def problems(commands: list[list[str]], kind: str = "block") -> list[str]:
    """What does not run as printed in one block (``kind`` "inline": prose that mentions a command, whose
    flags are checked only where it gives some)."""
    rules, variables = makefile()
    found, venv, pip_installed, previous = [], False, False, {}
    for argv in commands:
        env = 0
        while env < len(argv) and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[env]):
            env += 1  # VAR=value before a command
        words = argv[env:]
        if not words:
            continue
        program, args = words[0], words[1:]
        shown = " ".join(argv)
        if program == "make":
            for arg in args:
                if "=" in arg:
                    if arg.split("=", 1)[0] not in variables:
                        found.append(f"`{shown}`: the Makefile has no variable {arg.split('=', 1)[0]}")
                elif arg.startswith("-"):
                    continue
                elif arg not in rules:
                    found.append(f"`{shown}`: the Makefile has no target {arg!r}")
                elif creates_venv(arg, rules):
                    venv = True
            if not args and creates_venv(next(iter(rules)), rules):  # the default target
                venv = True
            says_venv = re.search(r"\.venv(?![-\w])", getattr(argv, "comment", ""))
            if says_venv and not any(creates_venv(a, rules) for a in args if a in rules):
                found.append(f"`{shown}  # {argv.comment}`: the comment says .venv, but make {' '.join(args)} "
                             "does not create it")
            continue
        if program.startswith(".venv/bin/"):
            tool = program.removeprefix(".venv/bin/")
            if not venv:
                found.append(f"`{shown}`: nothing before it in this block creates .venv (make setup does; "
                             "make book builds .venv-book)")
            elif not re.match(r"^(python3?|pip3?)$", tool) and not pip_installed:
                found.append(f"`{shown}`: {tool} is not in .venv until a `.venv/bin/pip install` puts it there")
            if re.match(r"^pip3?$", tool) and args[:1] == ["install"]:
                pip_installed = True
        if PYTHON.match(Path(program).name) and args[:1] == ["-m"] and len(args) > 1 \
                and args[1].split(".")[0] == "specnotes":
            module, flags = args[1], args[2:]
            if "..." in flags:
                if module not in previous:
                    found.append(f"`{shown}`: '...' but no earlier `python -m {module}` to stand for")
                    continue
                at = flags.index("...")
                flags = flags[:at] + previous[module] + flags[at + 1:]
            else:
                previous[module] = flags
            try:
                if kind == "block" or flags:
                    parse_cli(module, flags)
                else:
                    importlib.import_module(module).main  # noqa: B018  (a mention: the module and its main exist)
            except SystemExit as stop:
                if stop.code not in (0, None):  # --help exits 0: it runs as printed
                    found.append(f"`{shown}`: its flags do not parse (exit {stop.code})")
            except (ImportError, AttributeError, AssertionError) as error:
                found.append(f"`{shown}`: {error}")
    return found


BLOCKS = all_blocks()


@pytest.mark.parametrize("where, kind, commands", BLOCKS,
                         ids=[f"{w}:{k}{i}" for i, (w, k, _) in enumerate(BLOCKS)])
def test_printed_commands_run_as_printed(where, kind, commands):
    assert problems(commands, kind) == []


def test_the_pages_print_the_commands_a_reader_needs():
    """The checks above see the README's and the onboarding route's commands (a parser that finds nothing passes
    everything)."""
    shown = {" ".join(c) for where, _, commands in BLOCKS for c in commands}
    assert {"make book", "make test", "make setup", ".venv/bin/pip install jupyterlab"} <= shown
    assert any(c.startswith("python -m specnotes.advise --target") for c in shown)
    assert any(c.startswith("python -m specnotes.bench serve --url") for c in shown)


# ---- the checks can fail ------------------------------------------------------------------------------------


@pytest.mark.parametrize("script, complaint", [
    ("make bok", "no target 'bok'"),
    ("make colab-one COLAB_ONE=04_batch_size\nmake test NOTAVAR=1", "no variable NOTAVAR"),
    ("make book\n.venv/bin/pip install jupyterlab", "nothing before it in this block creates .venv"),
    ("make book  # set up .venv\nmake test", "the comment says .venv"),
    ("make setup\n.venv/bin/jupyter lab notebooks/", "jupyter is not in .venv"),
    ("python -m specnotes.advise --target Llama-3.1-8B --gpu H100-SXM --batch 1-256 --no-such-flag",
     "do not parse"),
    ("python -m specnotes.bench serve --url http://HOST:8000/v1 --concurrency 1,2,x", "do not parse"),
    ("python -m specnotes.pages.refresh", "do not parse"),
    ("python -m specnotes.nosuchmodule", "No module named"),
    ("python -m specnotes.pages.exercises ch4.p1a", "do not parse"),  # it takes no arguments: exit 2
    ("python -m specnotes.advise ... --json", "no earlier"),
])
def test_a_command_that_would_not_run_is_reported(script, complaint):
    found = problems(split_commands(script))
    assert any(complaint in f for f in found), found


def test_commands_that_run_pass():
    script = """make setup   # .venv
.venv/bin/pip install jupyterlab && .venv/bin/jupyter lab notebooks/
python -m specnotes.advise --target Llama-3.1-8B --drafter eagle3 --gpu H100-SXM --engine vllm \\
    --engine-version 0.10.1 --batch 1-256 --context 1024 --mean-accepted 2.3 --k 3
python -m specnotes.advise ... --json
SPECNOTES_DTYPE=float32 make nbval
python -m specnotes.pages.exercises"""
    assert problems(split_commands(script)) == []
    assert split_commands("a 'b c' # d\n$ e && f;g") == [["a", "b c"], ["e"], ["f"], ["g"]]
