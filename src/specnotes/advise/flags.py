"""The command line's flags: the parser, ``FLAGS`` (each ``deployment`` argument's flag), the checks that need two
flags, and the ``Deployment`` a parsed command line names (``from_args``)."""

from __future__ import annotations

import argparse
import re

from specnotes import validate
from specnotes.advise.base import DRAFTERS, ENGINES, K_DEFAULT, OVERLAPS, Deployment
from specnotes.advise.build import deployment
from specnotes.advise.inputs import MAX_CONTEXT, alpha_range
from specnotes.advise.records import read_record, record_inputs
from specnotes.analytic import cost, hardware

# deployment() argument → the flag that sets it
FLAGS = {"target": "--target", "target_shape": "--target-shape", "draft": "--draft", "draft_shape": "--draft-shape",
         "drafter": "--drafter", "exit_layer": "--exit-layer", "gpu": "--gpu", "bandwidth": "--bandwidth",
         "peak": "--peak", "memory": "--memory", "link": "--link", "dtype": "--dtype", "weight_bits": "--weight-bits",
         "tp": "--tp", "batch": "--batch", "context": "--context", "draft_context": "--draft-context",
         "alpha": "--alpha", "mean_accepted": "--mean-accepted", "k": "--k", "calibration": "--calibration",
         "overhead": "--overhead-ms", "draft_overhead": "--draft-overhead-ms", "overlap": "--overlap",
         "layer_overhead": "--layer-overhead-us", "layers": "--exit-layer", "mean_tokens": "--mean-accepted",
         "plot": "--plot", "engine": "--engine", "engine_version": "--engine-version", "tree": "--tree",
         "verified": "--verified", "draft_vocab": "--draft-vocab", "measured": "--measured",
         "from_record": "--from-record", "record_batches": "--record-batches",
         "accept_by_position": "--accept-by-position", "accept_by_position_": "--accept-by-position"}


def _alpha_arg(text) -> str:
    try:
        alpha_range(text)
    except validate.BadArgument as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("alpha ")) from None
    return text


def _batch_list(text) -> list[int]:
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"must be batches B[,B...] such as 1,2; got {text!r}")
    return [int(p) for p in parts]


def flag_message(message: str) -> str:
    """A validate error with argument names replaced by the CLI's flags: "alpha must ..." → "--alpha must ...".
    The first word is mapped, and any later argument name with an underscore (unambiguous in prose)."""
    name, sep, rest = message.partition(" ")
    bare = name.rstrip(":")
    if bare in FLAGS:
        name = FLAGS[bare] + name[len(bare):]
    for arg, flag in FLAGS.items():
        if "_" in arg:
            rest = re.sub(rf"(?<![\w-]){arg}\b", flag, rest)
    return name + sep + rest


_Parser = validate.Parser  # an error prints its message first and one line on where the options are (exit 2)


class _RaisingParser(argparse.ArgumentParser):
    """For ``run``: a command line that argparse rejects raises BadArgument instead of exiting."""

    def error(self, message):
        raise validate.BadArgument(message)


POSITIVE = validate.cli(validate.number, low=0, low_open=True)  # GB/s, TFLOP/s, GB


TOKENS = validate.cli(validate.integer, low=0)


# bits per weight of MXFP4 (gpt-oss's experts): the OCP Microscaling Formats (MX) Specification v1.0, section 5:
# blocks of 32 FP4 (E2M1) elements that share one 8-bit (E8M0) scale, 4 + 8 / 32 bits per element
MXFP4_BITS = 4 + 8 / 32


def parser(cls=None) -> argparse.ArgumentParser:
    cls = cls or _Parser
    p = cls(prog="python -m specnotes.advise",
            description="Does speculative decoding pay for my deployment? A one-page report from the book's cost "
                        "model, with its cross-validated error.",
            epilog="Example: python -m specnotes.advise --target Llama-3.1-8B --drafter eagle3 --gpu H100-SXM "
                   "--engine vllm --batch 1-256 --context 1024 --mean-accepted 2.3 --k 3")
    presets = ", ".join(cost.PRESETS)
    m = p.add_argument_group("models")
    m.add_argument("--target", help=f"preset ({presets}) or a Hugging Face config.json path")
    m.add_argument("--target-shape", help="n_layers,d_model,n_heads,n_kv_heads,d_ff,vocab")
    m.add_argument("--draft", help="draft model for --drafter model: a preset or a config.json path")
    m.add_argument("--draft-shape", help="the draft as n_layers,d_model,n_heads,n_kv_heads,d_ff,vocab")
    m.add_argument("--drafter", default="model", help=f"one of {', '.join(DRAFTERS)} (default: model)")
    m.add_argument("--exit-layer", type=validate.cli(validate.integer, low=1),
                   help="early exit: the layer whose output drafts")
    m.add_argument("--draft-vocab", type=validate.cli(validate.integer, low=1),
                   help="eagle3: the head's draft vocabulary, tokens (default 32000, the published heads')")
    m.add_argument("--tree", help="a draft tree: tokens per sequence at each level, such as 1,4,4 (with "
                                  "--mean-accepted, no --k)")
    m.add_argument("--verified", type=validate.cli(validate.integer, low=1),
                   help="a tree's tokens verified per sequence (default: the sum of --tree)")
    h = p.add_argument_group("hardware")
    h.add_argument("--gpu", help=f"one of {', '.join(hardware.ACCELERATORS)}")
    h.add_argument("--bandwidth", type=POSITIVE, help="memory bandwidth, GB/s (a GPU not in the table, or an override)")
    h.add_argument("--peak", type=POSITIVE, help="dense peak of --dtype, TFLOP/s")
    h.add_argument("--memory", type=POSITIVE, help="memory per GPU, GB")
    h.add_argument("--link", type=POSITIVE, help="GPU-to-GPU bandwidth, GB/s, both directions (for --tp)")
    h.add_argument("--dtype", help=f"weights, KV and math: one of {', '.join(hardware.DTYPE_BYTES)} (default bf16, "
                                   "or the dtype a --from-record's roofs were measured in)")
    h.add_argument("--weight-bits", type=validate.cli(validate.number, low=1, high=16),
                   help="weight-only quantization: bits per weight, scales included, in [1, 16] (math stays --dtype): "
                        f"4 for INT4 with no scales counted, {MXFP4_BITS:g} for MXFP4 as gpt-oss ships (the OCP "
                        "Microscaling Formats spec v1.0: 4-bit E2M1 elements and one 8-bit E8M0 scale per 32)")
    h.add_argument("--tp", type=validate.cli(validate.integer, low=1), default=1,
                   help="tensor-parallel GPUs (default 1): divides the query heads, and divides or is a multiple of "
                        "the KV heads")
    w = p.add_argument_group("workload")
    w.add_argument("--batch", default="1", help="a batch size, or a range such as 1-512 (default 1)")
    w.add_argument("--context", type=validate.cli(validate.integer, low=0, high=MAX_CONTEXT),
                   help="context length L your requests decode at, tokens (required; a --from-record of llama-server "
                        "gives it)")
    w.add_argument("--draft-context", type=TOKENS, help="the draft's own KV length (a window), tokens")
    w.add_argument("--alpha", type=_alpha_arg, help="acceptance rate α in [0, 1], or a range LO-HI such as 0.5-0.8 "
                                                    "when you do not know it yet")
    w.add_argument("--mean-accepted", help="mean tokens per iteration (bonus included), measured at --k, or M@K")
    w.add_argument("--accept-by-position", metavar="S1,S2,...",
                   help="per-position acceptance as vLLM logs it (the share of drafts whose first i tokens all "
                        "passed), such as 0.8,0.7,0.6, in place of --alpha; k defaults to their number")
    w.add_argument("--k", help=f"draft tokens per iteration, or 'best' (default {K_DEFAULT}, and the report says so)")
    m = p.add_argument_group("your measurement (anchors the model's level on it)")
    m.add_argument("--measured", metavar="B:S[,B:S...]",
                   help="S measured on your engine at batch B (TPOT off over on), such as 1:1.42,8:1.30; needs --k")
    m.add_argument("--from-record", metavar="FILE",
                   help="a record of python -m specnotes.bench serve-speedup or python -m specnotes.serve.engine "
                        "measure: its S(B), k, models and device (a record that disagrees with the flags is refused)")
    m.add_argument("--record-batches", type=_batch_list, metavar="B[,B...]",
                   help="anchor on these of the record's batches only (the others are shown, held back)")
    c = p.add_argument_group("the engine")
    c.add_argument("--engine", help=f"the engine you serve with ({', '.join(ENGINES)} are in the published record; "
                                    "another gets the knobs pooled over them)")
    c.add_argument("--engine-version", help="its version, such as 0.10.1")
    c.add_argument("--calibration", default="auto",
                   help="auto (the engine's calibration on this GPU, or the nearest, saying which; default), none "
                        "(the idealized model), pooled, a stored calibration's name, or list")
    c.add_argument("--overhead-ms", "--overhead", dest="overhead", type=validate.cli(validate.number, low=0),
                   help="ms added to every target pass")
    c.add_argument("--draft-overhead-ms", "--draft-overhead", dest="draft_overhead",
                   type=validate.cli(validate.number, low=0), help="ms added to every draft pass (n-gram: per lookup)")
    c.add_argument("--layer-overhead-us", dest="layer_overhead", type=validate.cli(validate.number, low=0),
                   help="µs added per decoder layer of every pass")
    c.add_argument("--overlap", help=f"one of {', '.join(OVERLAPS)} (default kernel)")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print the report as JSON (schema in the module docstring)")
    o.add_argument("--plot", metavar="FILE.png", help="also draw S(B) with the paying range shaded")
    return p


def needs(args: argparse.Namespace) -> None:
    """Flags that mean nothing without another: a BadArgument naming both, rather than one ignored."""
    for flag, value, other, given, why in (
            ("--engine-version", args.engine_version, "--engine", args.engine, "the version of which engine?"),
            ("--record-batches", args.record_batches, "--from-record", args.from_record, "batches of which record?"),
            ("--link", args.link, "--tp 2 or more", args.tp > 1, "GPU-to-GPU bandwidth prices tensor parallelism")):
        if value is not None and not given:
            raise validate.BadArgument(f"{flag} needs {other}: {why}")


def from_args(args: argparse.Namespace, calibration_lookup=None) -> Deployment:
    needs(args)
    kwargs = deployment_kwargs(args, calibration_lookup)
    if args.from_record:
        use = None if args.record_batches is None else [int(b) for b in args.record_batches]
        kwargs = record_inputs(read_record(args.from_record), kwargs, use)
    return deployment(**{**kwargs, "dtype": kwargs["dtype"] or "bf16"})


def deployment_kwargs(args: argparse.Namespace, calibration_lookup=None) -> dict:
    """``deployment``'s keyword arguments from the parsed command line."""
    return dict(target=args.target, draft=args.draft, target_shape=args.target_shape, draft_shape=args.draft_shape,
                drafter_kind=args.drafter, exit_layer=args.exit_layer, gpu_name=args.gpu, bandwidth=args.bandwidth,
                peak=args.peak, memory=args.memory, link=args.link, dtype=args.dtype, weight_bits=args.weight_bits,
                tp=args.tp, batch=args.batch, context=args.context, draft_context=args.draft_context,
                alpha=args.alpha, mean_accepted=args.mean_accepted, k=args.k, calibration=args.calibration,
                overhead=args.overhead, draft_overhead=args.draft_overhead, overlap=args.overlap,
                calibration_lookup=calibration_lookup, engine=args.engine, engine_version=args.engine_version,
                layer_overhead=args.layer_overhead, tree=args.tree, verified=args.verified,
                draft_vocab=args.draft_vocab, measured=args.measured, accept_by_position_=args.accept_by_position)
