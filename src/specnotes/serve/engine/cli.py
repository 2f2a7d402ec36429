"""llama.cpp's ``llama-server``, an engine someone else wrote, started and stopped from Python on this machine.

The command line (``python -m specnotes.serve.engine``; ``__main__`` runs :func:`main`):

    make engine                                   # build it (scripts/build_engine.sh) and convert the shipped pair
    python -m specnotes.serve.engine measure --out s.json   # S(B) on it: pairs of runs off and on, until S settles
    python -m specnotes.serve.engine measure --target t.gguf --draft d.gguf --out s.json   # any GGUF pair
    python -m specnotes.serve.engine serve --slots 4 --k 4  # just serve on 127.0.0.1:8080, for `bench serve` by hand
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from specnotes import validate
from specnotes.serve.engine.build import EngineNotBuilt, require_binary
from specnotes.serve.engine.models import MODEL_NAMES, SHIPPED_CONTEXT, big_gguf, shipped_ggufs
from specnotes.serve.engine.process import EngineStartError, Server
from specnotes.serve.engine.reference import reference_path
from specnotes.serve.engine.speedup import MAX_PAIRS, MIN_PAIRS, SETTLE, measure_pairs
from specnotes.serve.engine.tables import draft_pass_cost, model_beside, pair_table
from specnotes.serve.engine.verdicts import overhead_verdict, pairs_sentence, verify_verdict


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
    """``python -m specnotes.serve.engine``'s arguments (every default shown by ``--help``)."""
    parser = validate.Parser(prog="python -m specnotes.serve.engine", description=__doc__.splitlines()[0])
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
    from specnotes.tiny import gguf_export

    if (args.target is None) != (args.draft is None):
        parser.error("--target and --draft go together: a GGUF target and a GGUF draft with its vocabulary")
    if args.target is not None:
        if args.big:
            parser.error("--big serves the book's random model: leave out --target and --draft")
        try:
            gguf_export.check_pair(args.target, args.draft)
        except validate.BadArgument as e:
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
    from specnotes.serve import engine_client

    out = reference_path(kind) if args.record and kind != "custom" else args.out
    if args.record and kind == "custom":
        raise validate.BadArgument("--record writes the book's own records: use --out FILE for your pair")
    if out is None:
        raise validate.BadArgument("pass --out FILE, or --record to write the book's reference record")
    engine_client.check_levels(args.concurrency, args.requests)
    engine_client.check_writable("--out", out)
    return out


def main(argv=None) -> int:
    from specnotes.measure.records import save_results
    from specnotes.serve import engine_client

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
    except validate.BadArgument as e:
        parser.error(str(e))
    command = "python -m specnotes.serve.engine " + " ".join(argv)
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
