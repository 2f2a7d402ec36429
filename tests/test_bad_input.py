"""Bad input gets a clear error: one table of (call, arguments, exception, message).

Every public entry point checks its arguments once, at the boundary, with ``specnotes.validate``: a
``ValueError`` (a ``TypeError`` too for a wrong type) whose message names the argument and the allowed
range. The command-line tools fail the argparse way: exit status 2 and a message naming the flag.
Each row is a call that used to do something else: truncate, index out of range deep inside torch,
return nonsense (α = 3, TV = 1.5, token 255 forever) or nothing at all.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from specnotes import measure
from specnotes.analytic import cost, hardware
from specnotes.measure import checks, records, stack
from specnotes.pages import exercises, refresh
from specnotes.record import calibrate
from specnotes.sampling import exact
from specnotes.serve import kvcache, poolsim, serving
from specnotes.tiny import drafters, end_to_end, generate, model, train

TINY = model.ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, exit_layer=1, max_seq_len=64)
torch.manual_seed(0)
NET = model.Transformer(TINY).eval()
NO_EXIT = model.Transformer(model.ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64)).eval()
SMALL_VOCAB = model.Transformer(model.ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, vocab_size=100)).eval()
P = torch.tensor([[0.5, 0.25, 0.25, 0.0]])
Q = torch.tensor([[0.25, 0.25, 0.25, 0.25]])
DRAFTS = torch.tensor([[1, 2]])
Q2, P3 = Q.expand(2, 4)[None], P.expand(3, 4)[None]


def filled_cache():
    """A cache of capacity 8 for 2 sequences, holding 5 tokens of each."""
    cache = NET.new_cache(2, 8)
    NET(torch.zeros(2, 5, dtype=torch.int64), cache)
    return cache


class CommandLineExit(Exception):
    pass


def command_line(main):
    """Run a CLI's main(argv): its exit status and what it printed become the exception's message."""

    def run(argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                main(argv)
            except SystemExit as exit:
                raise CommandLineExit(f"exit status {exit.code}: {' '.join(err.getvalue().split())}") from None
        raise AssertionError(f"{main.__module__} accepted {argv}")

    return run


def row(call, kwargs, error, match, *, id, marks=()):
    return pytest.param(call, kwargs, error, match, id=id, marks=marks)


ROWS = [
    # ------------------------------------------------------------------ sampling
    row(exact.logits_to_probs, dict(logits=torch.zeros(1, 4), temperature=math.nan), ValueError,
        r"temperature must be a number >= 0, got nan", id="logits_to_probs: temperature nan"),
    row(exact.logits_to_probs, dict(logits=torch.zeros(1, 4), temperature=-1), ValueError,
        r"temperature must be a number >= 0, got -1", id="logits_to_probs: temperature -1"),
    row(exact.logits_to_probs, dict(logits=torch.zeros(1, 4), temperature="hot"), TypeError,
        r"temperature must be a number >= 0", id="logits_to_probs: temperature str"),
    row(exact.sample_from, dict(probs=torch.zeros(2, 4)), ValueError,
        r"probs: every row needs a positive total", id="sample_from: all-zero weights (was: token V-1)"),
    row(exact.sample_from, dict(probs=torch.tensor([[0.5, -0.5, 1.0]])), ValueError,
        r"probs must hold finite weights >= 0", id="sample_from: negative weight (was: token V-1)"),
    row(exact.sample_from, dict(probs=torch.tensor([[1, 2]])), TypeError,
        r"probs must be a floating-point tensor", id="sample_from: integer tensor"),
    row(exact.inverse_cdf, dict(weights=torch.zeros(4), v=torch.tensor(0.5)), ValueError,
        r"weights: every row needs a positive total", id="inverse_cdf: all-zero weights (was: token V-1)"),
    row(exact.inverse_cdf, dict(weights=torch.tensor([-1.0, 0.5, 0.5]), v=torch.tensor(0.5)), ValueError,
        r"weights must hold finite weights >= 0", id="inverse_cdf: negative weights"),
    row(exact.inverse_cdf, dict(weights=torch.ones(2, 4), v=torch.rand(3)), ValueError,
        r"v must be a tensor of shape \(2,\)", id="inverse_cdf: v of the wrong shape"),
    row(exact.acceptance_rate, dict(draft_probs=3 * Q, target_probs=3 * P), ValueError,
        r"draft_probs must be probability distributions \(each row sums to 1\)",
        id="acceptance_rate: unnormalised (was: α = 3)"),
    row(exact.total_variation, dict(p=3 * P, q=Q), ValueError,
        r"p must be probability distributions", id="total_variation: unnormalised (was: TV = 1.5)"),
    row(exact.total_variation, dict(p=P, q=torch.ones(1, 2) / 2), ValueError,
        r"p and q must have the same shape", id="total_variation: shapes differ"),
    row(exact.speculative_sample, dict(draft_tokens=DRAFTS.float(), draft_probs=Q2, target_probs=P3), TypeError,
        r"draft_tokens must be int64 token ids", id="speculative_sample: float drafts"),
    row(exact.speculative_sample, dict(draft_tokens=DRAFTS + 10, draft_probs=Q2, target_probs=P3), ValueError,
        r"draft_tokens must be token ids in \[0, 4\)", id="speculative_sample: draft id out of range"),
    row(exact.speculative_sample, dict(draft_tokens=DRAFTS, draft_probs=2 * Q2, target_probs=P3), ValueError,
        r"draft_probs must be probability distributions", id="speculative_sample: unnormalised q"),
    row(exact.speculative_sample, dict(draft_tokens=[[1, 2]], draft_probs=Q2, target_probs=P3), TypeError,
        r"draft_tokens must be a tensor", id="speculative_sample: a list"),
    *[row(sampler, dict(draft_tokens=drafts, draft_probs=q, target_probs=p), error, match,
          id=f"{sampler.__name__}: {why}")
      for sampler in (exact.speculative_sample, exact.speculative_sample_loop)
      for drafts, q, p, error, match, why in [
          (DRAFTS[:, :1], Q2, P3, ValueError, r"shape mismatch: draft_tokens \(1, 1\) needs draft_probs", "k mismatch"),
          (DRAFTS, Q2, P3[:, :2], ValueError, r"needs draft_probs \(1, 2, 4\) and target_probs \(1, 3, 4\)",
           "target without the bonus position"),
          (DRAFTS, Q2[..., :3] / Q2[..., :3].sum(-1, keepdim=True), P3, ValueError, r"shape mismatch", "vocabularies"),
          (DRAFTS.int(), Q2, P3, TypeError, r"draft_tokens must be int64 token ids, got torch.int32", "int32 drafts"),
          (DRAFTS, Q2, -P3, ValueError, r"target_probs must hold finite weights >= 0", "negative p"),
          (DRAFTS[0], Q2, P3, ValueError, r"expected draft_tokens \[B,k\], draft_probs \[B,k,V\]", "rank"),
          (DRAFTS, torch.tensor([[[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0]]]), P3, ValueError,
           r"a drafted token has zero draft probability", "draft never drawn from q"),
      ]],
    # ------------------------------------------------------------------ generate
    row(generate.generate, dict(model=NET, prompts=[[1.7, 2.2]], max_new_tokens=4), TypeError,
        r"prompts\[0\] must be a text or a 1-D sequence of integer token ids",
        id="generate: float prompt (was: truncated)"),
    row(generate.generate, dict(model=NET, prompts=[[300, 1]], max_new_tokens=4), ValueError,
        r"prompts\[0\] must be a non-empty sequence of token ids in \[0, 256\)", id="generate: token id 300"),
    row(generate.generate, dict(model=NET, prompts=[[5], [-1, 3]], max_new_tokens=4), ValueError,
        r"prompts\[1\] must be a non-empty sequence of token ids in \[0, 256\)", id="generate: token id -1"),
    row(generate.generate, dict(model=NET, prompts=["ab"], max_new_tokens=-3), ValueError,
        r"max_new_tokens must be an integer >= 0, got -3", id="generate: max_new_tokens -3"),
    row(generate.speculative_generate, dict(target=NET, drafter=NET, prompts=["ab"], max_new_tokens=-3), ValueError,
        r"max_new_tokens must be an integer >= 0, got -3", id="speculative_generate: max_new_tokens -3 (was: empty)"),
    row(generate.speculative_generate, dict(target=NET, drafter=NET, prompts=["ab"], max_new_tokens=4, k=2.5),
        TypeError, r"k must be an integer >= 1, got 2.5", id="speculative_generate: k 2.5"),
    row(generate.speculative_generate, dict(target=NET, drafter=NET, prompts=["ab"], max_new_tokens=4, k=0),
        ValueError, r"k must be an integer >= 1, got 0", id="speculative_generate: k 0"),
    row(generate.generate, dict(model=NET, prompts=["ab"], max_new_tokens=4, temperature=math.nan), ValueError,
        r"temperature must be a number >= 0, got nan", id="generate: temperature nan (was: token 255 forever)"),
    row(generate.speculative_generate, dict(target=NET, drafter=NET, prompts=["ab"], max_new_tokens=4,
                                            temperature=math.nan), ValueError,
        r"temperature must be a number >= 0, got nan", id="speculative_generate: temperature nan"),
    row(generate.generate, dict(model=NET, prompts=[], max_new_tokens=4), ValueError,
        r"prompts must hold at least one prompt", id="generate: no prompt"),
    row(generate.generate, dict(model=NET, prompts=[""], max_new_tokens=4), ValueError,
        r"prompts\[0\] must be a non-empty sequence", id="generate: empty prompt"),
    row(generate.generate, dict(model=NET, prompts=["x" * 60], max_new_tokens=10), ValueError,
        r"prompts\[0\] has 60 tokens: with 10 more positions .* passes the model's 64-token context",
        id="generate: past the context"),
    row(generate.speculative_generate, dict(target=NET, drafter="draft", prompts=["ab"], max_new_tokens=4), TypeError,
        r"drafter must be a Transformer or have start, propose and commit methods",
        id="speculative_generate: drafter str"),
    row(generate.speculative_generate, dict(target=NET, drafter=SMALL_VOCAB, prompts=["ab"], max_new_tokens=4),
        ValueError, r"drafter and target must share a vocabulary, got 100 and 256",
        id="speculative_generate: vocabularies"),
    row(generate.forward_timing, dict(model=NET, ids=torch.arange(20), context=0, new_tokens=1), ValueError,
        r"context must be an integer >= 1, got 0", id="forward_timing: context 0"),
    row(generate.forward_timing, dict(model=NET, ids=torch.arange(20), context=19, new_tokens=3), ValueError,
        r"ids must hold at least context \+ new_tokens = 22 token ids, got 20", id="forward_timing: too few ids"),
    # ------------------------------------------------------------------ model
    row(model.ModelConfig, dict(n_layers=2.5), TypeError, r"n_layers must be an integer >= 1, got 2.5",
        id="ModelConfig: n_layers 2.5"),
    row(model.ModelConfig, dict(d_model=30, n_heads=4), ValueError, r"d_model must split into n_heads heads",
        id="ModelConfig: heads do not split d_model"),
    row(model.ModelConfig, dict(n_layers=4, exit_layer=4), ValueError, r"exit_layer must be an integer in \[1, 3\]",
        id="ModelConfig: exit_layer past the last block"),
    row(model.ModelConfig, dict(norm_eps=0), ValueError, r"norm_eps must be a number > 0",
        id="ModelConfig: norm_eps 0"),
    row(NET, dict(tokens=torch.tensor([[1.0, 2.0]])), TypeError, r"tokens must be integer token ids, got torch.float32",
        id="Transformer: float tokens"),
    row(NET, dict(tokens=torch.tensor([[300]])), ValueError, r"tokens must be ids in \[0, 256\), got ids from 300",
        id="Transformer: token id 300 (was: IndexError from F.embedding)"),
    row(NET, dict(tokens=torch.tensor([1, 2])), TypeError, r"tokens must be a \[B, n\] tensor", id="Transformer: 1-D"),
    row(NET, dict(tokens=torch.tensor([[1]]), exit_layer=0), ValueError, r"exit_layer must be an integer in \[1, 2\]",
        id="Transformer: exit_layer 0"),
    row(NO_EXIT, dict(tokens=torch.tensor([[1]]), exit_layer=1), ValueError, r"this model has no early-exit head",
        id="Transformer: exit without a head"),
    row(model.load_text, dict(split="test"), ValueError, r"split must be one of 'train', 'eval'; got 'test'",
        id="load_text: split"),
    row(model.load_model, dict(which="big"), ValueError, r"which must be one of 'target', 'draft'; got 'big'",
        id="load_model: which"),
    row(model.encode, dict(text=b"bytes"), TypeError, r"text must be a str, got bytes", id="encode: bytes"),
    row(model.eval_loss, dict(model=NET, text="ab", block=4), ValueError,
        r"text must hold at least block \+ 1 = 5 bytes", id="eval_loss: text too short"),
    row(model.eval_loss, dict(model=NET, text="abcdef", block=0), ValueError, r"block must be an integer in \[1, 64\]",
        id="eval_loss: block 0"),
    row(NET.new_cache, dict(batch=0, capacity=8), ValueError, r"batch must be an integer >= 1, got 0",
        id="new_cache: batch 0"),
    row(lambda: NET(torch.zeros(2, 4, dtype=torch.int64), filled_cache()), {}, ValueError,
        r"sequence would reach 9 tokens, past the cache capacity 8", id="Transformer: past the cache capacity"),
    row(lambda: NET(torch.zeros(3, 1, dtype=torch.int64), filled_cache()), {}, ValueError,
        r"cache holds 2 sequences, tokens have 3", id="Transformer: batch differs from the cache's"),
    row(lambda: filled_cache().rollback(torch.tensor([6, 2])), {}, ValueError,
        r"rollback can only shorten sequences", id="KVCache.rollback: growing a sequence"),
    # ------------------------------------------------------------------ drafters
    row(drafters.DraftModelDrafter, dict(model="draft"), TypeError, r"model must be a specnotes.tiny.model.Transformer",
        id="DraftModelDrafter: not a model"),
    row(drafters.DraftModelDrafter, dict(model=NO_EXIT, exit_layer=1), ValueError, r"this model has no early-exit head",
        id="DraftModelDrafter: exit without a head"),
    row(drafters.EarlyExitDrafter, dict(target=NO_EXIT), ValueError,
        r"EarlyExitDrafter needs a target with an early-exit", id="EarlyExitDrafter: no head"),
    # ------------------------------------------------------------------ end_to_end
    row(end_to_end.wall_clock_runs, dict(target=NET, draft=NET, prompt="ab", new_tokens=4, ks=[0], repeats=2),
        ValueError, r"ks\[0\] must be an integer >= 1, got 0", id="wall_clock_runs: k 0"),
    row(end_to_end.wall_clock_runs, dict(target=NET, draft=NET, prompt="ab", new_tokens=4, ks=[1], repeats=0),
        ValueError, r"repeats must be an integer >= 1, got 0", id="wall_clock_runs: repeats 0"),
    row(end_to_end.pass_timings, dict(target=NET, draft=NET, ids=torch.arange(8), context=4, ks=[]), ValueError,
        r"ks must hold at least one integer", id="pass_timings: no k"),
    # ------------------------------------------------------------------ command-line tools
    row(command_line(train.main), dict(argv=["--threads", "0"]), CommandLineExit,
        r"exit status 2: .*argument --threads: must be an integer >= 1, got 0", id="train: --threads 0"),
    row(command_line(train.main), dict(argv=["--steps", "2.5"]), CommandLineExit,
        r"exit status 2: .*argument --steps: must be an integer >= 1, got 2.5", id="train: --steps 2.5"),
    row(command_line(train.main), dict(argv=["--which", "both"]), CommandLineExit,
        r"exit status 2: .*argument --which: invalid choice: 'both'", id="train: --which both"),
    row(command_line(refresh.main), dict(argv=["no/such/chapter.ipynb"]), CommandLineExit,
        r"exit status 2: .*argument notebooks: must be an existing .ipynb file, got 'no/such/chapter.ipynb'",
        id="refresh: missing notebook"),
    row(command_line(refresh.main), dict(argv=["README.md"]), CommandLineExit,
        r"exit status 2: .*argument notebooks: must be an existing .ipynb file, got 'README.md'",
        id="refresh: not a notebook"),
]

# ---------------------------------------------------------------------- cost
SHAPE = dict(n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=128, vocab=100)
L8, L1, H100 = cost.LLAMA_3_8B, cost.LLAMA_3_2_1B, "H100-SXM"
PAIR = dict(target=L8, draft=L1, accel=H100)
ROWS += [
    row(cost.ModelShape, SHAPE | dict(n_layers=2.5), TypeError, r"n_layers must be an integer >= 1, got 2.5",
        id="ModelShape: n_layers 2.5"),
    row(cost.ModelShape, SHAPE | dict(n_layers=True), TypeError, r"n_layers must be an integer >= 1, got True",
        id="ModelShape: n_layers True"),
    row(cost.ModelShape, SHAPE | dict(weight_bytes=-2), ValueError, r"weight_bytes must be a number > 0",
        id="ModelShape: weight_bytes -2"),
    row(cost.ModelShape, SHAPE | dict(d_model=100, n_heads=3), ValueError,
        r"d_model must be a multiple of n_heads", id="ModelShape: heads do not divide d_model"),
    row(L8.in_dtype, dict(dtype="fp64"), ValueError, r"dtype must be one of .*'bf16'.*; got 'fp64'",
        id="in_dtype: fp64"),
    row(L8.weight_only, dict(bits=0), ValueError, r"bits must be a number in \[1, 16\]", id="weight_only: 0 bits"),
    row(cost.expected_tokens, dict(alpha=0.5, k=2.0), TypeError, r"k must be an integer >= 0, got 2.0",
        id="expected_tokens: k 2.0"),
    row(cost.expected_tokens, dict(alpha=0.5, k=True), TypeError, r"k must be an integer >= 0, got True",
        id="expected_tokens: k True"),
    row(cost.expected_tokens, dict(alpha=1.1, k=4), ValueError, r"alpha must be a number in \[0.0, 1.0\], got 1.1",
        id="expected_tokens: alpha 1.1"),
    row(cost.expected_tokens, dict(alpha=math.nan, k=4), ValueError, r"alpha must be a number in \[0.0, 1.0\]",
        id="expected_tokens: alpha nan"),
    row(cost.expected_tokens, dict(alpha=0.5, k=-1), ValueError, r"k must be an integer >= 0, got -1",
        id="expected_tokens: k -1"),
    row(cost.speedup, dict(alpha=0.8, k=4, c=math.nan), ValueError, r"\bc\b.* must be a number >= 0, got nan",
        id="speedup: c nan (was: nan)"),
    row(cost.speedup, dict(alpha=0.8, k=4, c=-0.1), ValueError, r"\bc\b.* must be a number >= 0, got -0.1",
        id="speedup: c -0.1"),
    row(cost.implied_alpha, dict(tokens_per_iteration=5.5, k=4), ValueError,
        r"tokens_per_iteration must be a number in \[1, 5\]", id="implied_alpha: more tokens than k + 1"),
    row(cost.decode_cost, dict(shape=L8, batch=0), ValueError, r"batch must be an integer >= 1, got 0",
        id="decode_cost: batch 0"),
    row(cost.decode_cost, dict(shape=L8, batch=2.0), TypeError, r"batch must be an integer >= 1, got 2.0",
        id="decode_cost: batch 2.0"),
    row(cost.verify_cost, dict(shape=L8, batch=4, k=-1), ValueError, r"k must be an integer >= 0, got -1",
        id="verify_cost: k -1"),
    row(cost.forward_cost, dict(shape=L8, batch=1, new_tokens=1, context=-5), ValueError,
        r"context must be an integer >= 0, got -5", id="forward_cost: context -5"),
    row(cost.mixed_verify_cost, dict(shape=L8, batch=4, k=2, speculating=5), ValueError,
        r"speculating must be an integer in \[0, 4\], got 5", id="mixed_verify_cost: more speculating than batch"),
    row(cost.roofline_time, dict(cost=cost.decode_cost(L8, 1), accel="H300"), ValueError,
        r"unknown accelerator 'H300'; known: T4, L4", id="roofline_time: unknown accelerator"),
    row(cost.roofline_time, dict(cost=cost.decode_cost(L8, 1), accel=H100, dtype="int3"), ValueError,
        r"dtype must be one of", id="roofline_time: unknown dtype"),
    row(cost.roofline_time, dict(cost=cost.decode_cost(L8, 1), accel="T4", dtype="bf16"), ValueError,
        r"T4 has no 'bf16' peak", id="roofline_time: bf16 asked of a T4"),
    row(cost.roofline_time, dict(cost=cost.decode_cost(L8, 1, tp=2), accel="A10G"), ValueError,
        r"A10G has no link bandwidth", id="roofline_time: tp without a link"),
    row(cost.crossover_batch, PAIR | dict(k=4, alpha=0.8, dtype="fp8"), ValueError,
        r"dtype='fp8' disagrees with the model's math dtype 'bf16'",
        id="crossover_batch: dtype disagrees with the shapes (was: 320, not 160)"),
    row(cost.batch_speedup, PAIR | dict(batch=0, k=4, alpha=0.8), ValueError, r"batch must be an integer >= 1",
        id="batch_speedup: batch 0"),
    row(cost.batch_speedup, PAIR | dict(batch=1, k=4, alpha=0.8, overlap="max"), ValueError,
        r"overlap must be one of 'kernel', 'pass', 'none'; got 'max'", id="batch_speedup: overlap 'max'"),
    row(cost.batch_speedup, PAIR | dict(batch=1, k=4, alpha=0.8, overhead=-1), ValueError,
        r"overhead must be a number >= 0, got -1", id="batch_speedup: negative overhead"),
    row(cost.batch_speedup, PAIR | dict(batch=1, k=4, alpha=0.8, tp=0), ValueError,
        r"tp must be an integer >= 1, got 0", id="batch_speedup: tp 0"),
    row(cost.batch_speedup, dict(target=L8, draft="Llama-3.2-1B", accel=H100, batch=1, k=4, alpha=0.8), TypeError,
        r"draft must be a ModelShape, EarlyExit, SinglePass, Block, Heads, EagleHead or NoWeights; got str",
        id="batch_speedup: a draft given by name"),
    row(cost.draft_time, dict(draft=cost.EarlyExit(8), accel=H100, batch=1, k=4), ValueError,
        r"an EarlyExit draft needs the target shape", id="draft_time: early exit without its target"),
    row(cost.EarlyExit, dict(layers=0), ValueError, r"layers must be an integer >= 1, got 0", id="EarlyExit: 0 layers"),
    row(cost.max_batch, PAIR | dict(context=-1), ValueError, r"context must be an integer >= 0, got -1",
        id="max_batch: context -1"),
    row(cost.paying_batches, PAIR | dict(k=4, alpha=0.8, limit=0), ValueError, r"limit must be an integer >= 1, got 0",
        id="paying_batches: limit 0"),
    row(cost.speedup_from_times, dict(alpha=0.8, k=4, t_decode=1.0, t_draft_step=1.0, t_verify=0.0), ValueError,
        r"t_verify must be a number > 0, got 0", id="speedup_from_times: zero verify time"),
]

# ---------------------------------------------------------------------- measure (H1: measure's rows)
DEVICES = r"device must be 'cpu', 'cuda', 'cuda:N' or 'mps', got 'tpu'"
LAYERS = stack.stack_shape(1, 64, 4, 2, 128, name="tiny")
ROWS += [
    row(measure.sizes_for, dict(device="tpu"), ValueError, DEVICES, id="sizes_for: tpu (was: torch RuntimeError)"),
    row(measure.copy_bandwidth, dict(device="tpu"), ValueError, DEVICES,
        id="copy_bandwidth: tpu (was: torch RuntimeError)"),
    row(measure.sizes_for, dict(device=3.5), TypeError, r"device must be a str or torch.device \('cpu', 'cuda'",
        id="sizes_for: device 3.5"),
    row(measure.sync, dict(device="cuda:x"), ValueError, r"device must be 'cpu', .*, got 'cuda:x'", id="sync: cuda:x"),
    row(measure.devices.cache_bytes, dict(device="tpu"), ValueError, DEVICES, id="cache_bytes: tpu"),
    row(measure.devices.memory_bytes, dict(device="tpu"), ValueError, DEVICES, id="memory_bytes: tpu"),
    row(measure.pick_device, dict(prefer="meta"), ValueError, r"device 'meta' is not available here; 'cpu' always is",
        id="pick_device: meta"),
    row(measure.as_dtype, dict(dtype="int8"), ValueError,
        r"unknown dtype 'int8'; use one of \['bf16', 'fp16', 'fp32'\]", id="as_dtype: int8"),
    row(measure.devices.fits_in_cache, dict(nbytes=-1, device="cpu"), ValueError, r"nbytes must be a number >= 0",
        id="fits_in_cache: -1 bytes"),
    row(lambda: measure.num_threads(0).__enter__(), {}, ValueError, r"num_threads must be an integer >= 1, got 0",
        id="num_threads: 0"),
    row(measure.time_fn, dict(fn=lambda: None, repeats=0, device="cpu"), ValueError,
        r"repeats must be an integer >= 1, got 0", id="time_fn: repeats 0"),
    row(measure.time_fn, dict(fn=lambda: None, budget_s=0, device="cpu"), ValueError,
        r"budget_s must be a number > 0, got 0", id="time_fn: budget 0"),
    row(measure.time_fn, dict(fn=lambda: None, min_s=math.nan, device="cpu"), ValueError,
        r"min_s must be a number >= 0, got nan", id="time_fn: min_s nan"),
    row(measure.Timing, dict(samples=[]), ValueError, r"samples must hold at least one time", id="Timing: no sample"),
    row(measure.doubling_sweep, dict(point=lambda b: b, done=lambda bs, rs: True, limit=0), ValueError,
        r"limit must be an integer >= 1, got 0", id="doubling_sweep: limit 0"),
    row(measure.matmul_time, dict(batch=0, d_in=8, d_out=8, dtype="fp32", device="cpu"), ValueError,
        r"batches\[0\] must be an integer >= 1, got 0", id="matmul_time: batch 0"),
    row(measure.copy_bandwidth, dict(device="cpu", nbytes=0), ValueError, r"nbytes must be an integer >= 1, got 0",
        id="copy_bandwidth: 0 bytes"),
    row(measure.peak_matmul_flops, dict(device="cpu", dtype="fp32", n=2), ValueError, r"n must be an integer >= 4",
        id="peak_matmul_flops: n 2"),
    row(measure.knee, dict(batches=[1, 2, 4], times=[1.0, 2.0, math.nan]), ValueError,
        r"times\[2\] must be a number > 0, got nan", id="knee: a nan time (was: a nan knee)"),
    row(measure.knee, dict(batches=[1, 2, 4], times=[1.0, 2.0, 4.0], tol=-0.1), ValueError,
        r"tol must be a number >= 0, got -0.1", id="knee: tol -0.1"),
    row(measure.MeasuredRoof, dict(bandwidth=0, flops=1e9), ValueError, r"bandwidth must be a number > 0, got 0",
        id="MeasuredRoof: no bandwidth (was: ZeroDivisionError in ridge)"),
    row(measure.MeasuredRoof, dict(bandwidth=1e9, flops=1e9, dtype="int8"), ValueError, r"unknown dtype 'int8'",
        id="MeasuredRoof: int8"),
    row(records.rates, dict(flops=1.0, nbytes=1.0, seconds=0.0, tokens=1), ValueError,
        r"seconds must be a number > 0, got 0", id="rates: 0 s (was: ZeroDivisionError)"),
    row(measure.load_results, dict(path="README.md"), ValueError, r"README.md: not a specnotes.results/1 file",
        id="load_results: not JSON"),
    row(measure.Record.from_dict, dict(d={}), ValueError, r"not a record: missing", id="Record.from_dict: empty"),
    row(checks.speedup_bound, dict(batches=[1, 2], measured=[1.2, 0.9], caps=[1.5, 0.0]), ValueError,
        r"caps\[1\] must be a number > 0, got 0", id="speedup_bound: a zero cap"),
    row(checks.speedup_falls, dict(batches=[2, 1], measured=[1.2, 0.9], modelled=[1.2, 0.9]), ValueError,
        r"batches must increase", id="speedup_falls: batches out of order"),
    row(checks.describe_crossing, dict(batches=[1, 2], speedups=[1.2, 0.9], stop="maybe", model_bstar=4, ridge=1,
                                       critical_batch=1, k=4), ValueError,
        r"stop must be one of 'done', 'budget', 'limit'; got 'maybe'", id="describe_crossing: stop 'maybe'"),
    row(checks.fastest_roofs, dict(accel="H300"), ValueError, r"unknown accelerator 'H300'",
        id="fastest_roofs: unknown accelerator"),
    row(stack.stack_sizes, dict(device="tpu"), ValueError, DEVICES, id="stack_sizes: tpu"),
    row(stack.build_stack, dict(shape=LAYERS, device="tpu"), ValueError, DEVICES,
        id="build_stack: tpu (was: torch RuntimeError)"),
    row(stack.build_stack, dict(shape=LAYERS, dtype="int8"), ValueError, r"unknown dtype 'int8'",
        id="build_stack: int8"),
    row(stack.pass_cost, dict(shape=LAYERS, batch=0, new_tokens=1), ValueError, r"batch must be an integer >= 1",
        id="pass_cost: batch 0"),
    row(stack.speedup_sweep, dict(target=None, draft=None, k=0, alpha=0.8, context=4), ValueError,
        r"k must be an integer >= 1, got 0", id="speedup_sweep: k 0"),
    row(stack.speedup_sweep, dict(target=None, draft=None, k=4, alpha=1.5, context=4), ValueError,
        r"alpha must be a number in \[0.0, 1.0\], got 1.5", id="speedup_sweep: alpha 1.5"),
    # ------------------------------------------------------------------ hardware
    row(hardware.usable_dtype, dict(accel=3), TypeError, r"accelerator must be an Accelerator or one of T4, L4",
        id="usable_dtype: accelerator 3"),
    row(hardware.usable_dtype, dict(accel="H300"), ValueError, r"unknown accelerator 'H300'; known: T4",
        id="usable_dtype: unknown name"),
    row(hardware.usable_dtype, dict(accel="A100-80GB", dtype="fp8"), ValueError, r"A100-80GB has no 'fp8' peak",
        id="usable_dtype: fp8 on an A100"),
    row(command_line(calibrate.main), dict(argv=["--bogus"]), CommandLineExit,
        r"exit status 2: .*unrecognized arguments: --bogus", id="calibrate: unknown flag (was: rewrote the data)"),
]

# ---------------------------------------------------------------------- pool, prefix cache, serving (issue #26)
RNG = np.random.default_rng(0)
ROWS += [
    row(poolsim.tokens_per_step, dict(rng=RNG, alpha=1.5, k=4, size=5), ValueError,
        r"alpha must be a number in \[0.0, 1.0\], got 1.5", id="tokens_per_step: alpha 1.5 (was: [4 4 4 4 4])"),
    row(poolsim.tokens_per_step, dict(rng=RNG, alpha=0.5, k=-1, size=5), ValueError,
        r"k must be an integer >= 0, got -1", id="tokens_per_step: k -1 (was: zeros)"),
    row(poolsim.tokens_per_step, dict(rng=RNG, alpha=0.5, k=2, size=-1), ValueError,
        r"size must be an integer >= 0, got -1", id="tokens_per_step: size -1 (was: numpy ValueError)"),
    row(poolsim.simulate, dict(rate=10.0, step_time=lambda b, k: 0.01, policy=None, alpha=0.8, output_tokens=20),
        TypeError, r"policy must be a function B -> k", id="simulate: policy None (was: TypeError inside simpy)"),
    row(poolsim.simulate, dict(rate=10.0, step_time=lambda b, k: -1.0, policy=lambda b: 2, alpha=0.8,
                               output_tokens=20, requests=20, warmup=2), ValueError,
        r"step_time\(1, 2\) \(seconds\) must be a number > 0, got -1",
        id="simulate: negative step time (was: ValueError inside simpy)"),
    row(kvcache.verify_trace, dict(prompt_length=10, accepted=[5], k=3, block_size=4), ValueError,
        r"accepted\[0\] must be an integer in \[-1, 3\], got 5", id="verify_trace: 5 accepted of k = 3 (was: a trace)"),
    row(kvcache.verify_trace, dict(prompt_length=10, accepted=[1.7], k=3, block_size=4), TypeError,
        r"accepted\[0\] must be an integer in \[-1, 3\], got 1.7", id="verify_trace: 1.7 (was: truncated)"),
    row(kvcache.block_hashes, dict(tokens=list(range(8)), block_size=0, n_blocks=1), ValueError,
        r"block_size must be an integer >= 1, got 0", id="block_hashes: block_size 0"),
    row(kvcache.block_hashes, dict(tokens=list(range(8)), block_size=4, n_blocks=-1), ValueError,
        r"n_blocks must be an integer in \[0, 2\], got -1", id="block_hashes: n_blocks -1"),
    row(kvcache.block_hashes, dict(tokens=list(range(8)), block_size=4, n_blocks=3), ValueError,
        r"n_blocks must be an integer in \[0, 2\], got 3", id="block_hashes: more blocks than tokens"),
    row(kvcache.generate_cached, dict(model=NO_EXIT, prompts=["ab"], max_new_tokens=1, cache=kvcache.PrefixCache(NET)),
        ValueError, r"this PrefixCache was built for another target model",
        id="generate_cached: another model's cache"),
    row(kvcache.first_divergence, dict(reference=torch.tensor([1, 2]), other=torch.tensor([1, 3])), ValueError,
        r"reference must be a \[B, n\] tensor of token ids", id="first_divergence: 1-D (was: IndexError)"),
    row(serving.crossover, dict(step_time=lambda b, k: 1.0 + k, alpha=0.8, k=1, max_batch=0), ValueError,
        r"max_batch must be an integer >= 1, got 0", id="crossover: max_batch 0 (was: 1)"),
    row(exercises.check_all, dict(answers="notadict"), TypeError, r"answers must be a dict \{problem id: answer\}",
        id="check_all: a str (was: AttributeError)"),
]


# ---------------------------------------------------------------------- pool simulation, paged cache (issue #36)
ZERO_STEP = dict(step_time=lambda b, k: 0.0, policy=lambda b: 2, alpha=0.8, output_tokens=20)
ZERO = r"step_time\(1, 2\) \(seconds\) must be a number > 0, got 0"
LONG = "abcdefghijklmnopqrst"  # 20 tokens: with 10 new ones and k = 4, up to 40 positions, 3 blocks of 16
ROWS += [
    row(poolsim.simulate, dict(rate=10.0, **ZERO_STEP, requests=20, warmup=2), ValueError, ZERO,
        id="simulate: zero step time (was: a result, every request finished on arrival)"),
    row(poolsim.steady_batch, dict(rate=10.0, **ZERO_STEP), ValueError, ZERO,
        id="steady_batch: zero step time (was: 0.0)"),
    row(poolsim.max_rate, dict(**ZERO_STEP, max_batch=4), ValueError, ZERO,
        id="max_rate: zero step time (was: ZeroDivisionError)"),
    row(poolsim.solve, dict(f=lambda x: x, target=0.5, lo=1.0, hi=0.0), ValueError, r"hi must be a number > 1.0, got 0",
        id="solve: lo above hi (was: 'target 0.5 is outside f([1, 0]) = [1, 0]')"),
    row(kvcache.speculative_generate_cached, dict(target=NET, drafter=drafters.DraftModelDrafter(NET), prompts=[LONG],
                                                  max_new_tokens=10, cache=kvcache.PrefixCache(NET, NET, num_blocks=1)),
        ValueError, r"num_blocks must be an integer >= 3 for sequences of up to 40 tokens \(the longest prompt, "
        r"max_new_tokens = 10 and 10 positions a speculative step may write\) in blocks of 16; this PrefixCache has 1",
        id="speculative_generate_cached: a one-block pool (was: 'sequence would reach 19 tokens, past the cache "
           "capacity 16')"),
    row(kvcache.generate_cached, dict(model=NET, prompts=[LONG], max_new_tokens=10,
                                      cache=kvcache.PrefixCache(NET, num_blocks=1)), ValueError,
        r"num_blocks must be an integer >= 2 for sequences of up to 30 tokens \(the longest prompt, max_new_tokens = "
        r"10\) in blocks of 16; this PrefixCache has 1",
        id="generate_cached: a one-block pool (was: 'sequence would reach 19 tokens, past the cache capacity 16')"),
]


# ---------------------------------------------------------------------- the advisor (issue 36, part 5)
from specnotes import advise  # noqa: E402  (its own block: rows of other modules are added above)

ADVISE = ["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", "--gpu", "H100-SXM", "--alpha", "0.7", "--context",
          "512"]
ROWS += [
    row(command_line(advise.main), dict(argv=ADVISE + ["--batch", "1-1000000000"]), CommandLineExit,
        r"exit status 2: .*--batch must be an integer in \[1, 65536\], got 1000000000",
        id="advise: --batch 1-1000000000 (was: a report up to B = 10^9)"),
    row(command_line(advise.main), dict(argv=ADVISE + ["--batch", "1-1e9"]), CommandLineExit,
        r"exit status 2: .*--batch must be a positive integer or a range LO-HI such as 1-512; got '1-1e9'",
        id="advise: --batch 1-1e9"),
    row(command_line(advise.main), dict(argv=ADVISE[:-2] + ["--context", "1000000000000"]), CommandLineExit,
        r"exit status 2: .*argument --context: must be an integer in \[0, 10000000\], got 1000000000000",
        id="advise: --context 10^12 (was: a report)"),
    row(command_line(advise.main), dict(argv=ADVISE[:-2] + ["--context", "1e12"]), CommandLineExit,
        r"exit status 2: .*argument --context: must be an integer in \[0, 10000000\], got 1000000000000.0",
        id="advise: --context 1e12"),
    row(command_line(advise.main), dict(argv=ADVISE + ["--plot", "/nonexistent/dir/s.png"]), CommandLineExit,
        r"exit status 2: .*--plot must be a file in a folder that exists and is writable; '/nonexistent/dir' does "
        r"not exist", id="advise: --plot in a folder that does not exist"),
    row(command_line(advise.main), dict(argv=ADVISE[:-2]), CommandLineExit,
        r"exit status 2: .*--context is required", id="advise: no --context (was: 0, silently)"),
]

@pytest.mark.parametrize(("call", "kwargs", "error", "match"), ROWS)
def test_bad_input_raises_a_clear_error(call, kwargs, error, match):
    with pytest.raises(error, match=match):
        call(**kwargs)


def test_every_type_error_is_also_a_value_error():
    # callers that catch ValueError for any bad argument keep working when the type is what is wrong
    with pytest.raises(ValueError):
        generate.speculative_generate(NET, NET, ["ab"], 4, k=2.5)


@pytest.mark.parametrize("module", ["specnotes.tiny.train", "specnotes.pages.refresh", "specnotes.record.calibrate"])
def test_command_line_tools_exit_with_status_2_naming_the_flag(module, tmp_path):
    import subprocess
    import sys

    argv = {"specnotes.tiny.train": ["--threads", "0"], "specnotes.pages.refresh": [str(tmp_path / "missing.ipynb")],
            "specnotes.record.calibrate": ["--bogus"]}[module]
    done = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True)
    assert done.returncode == 2
    assert {"specnotes.tiny.train": "--threads", "specnotes.pages.refresh": "notebooks",
            "specnotes.record.calibrate": "--bogus"}[module] in done.stderr


def test_calibrate_writes_only_when_asked(monkeypatch, capsys):
    from specnotes.record.calibrate import cli as calibrate_cli

    def refuse(path=None, cv=None):
        raise AssertionError("calibrate wrote data/calibrations.json without --write")

    monkeypatch.setattr(calibrate_cli, "write_calibrations", refuse)  # main reads it where it lives
    assert calibrate.main([]) == 0
    out = capsys.readouterr().out
    assert "H100-SXM specdecode_bench" in out and "not written (--write rewrites" in out
    written = []
    monkeypatch.setattr(calibrate_cli, "write_calibrations",
                        lambda path=None, cv=None: written.append(path) or {"about": ""})
    assert calibrate.main(["--write"]) == 0 and written == [None]


# ---------------------------------------------------------------------- files read, command lines (issue 45 part 2)
from named_cases import CASES, prepare  # noqa: E402  (data only: the same table runs against an older checkout)

MAINS = {"advise": "specnotes.advise", "engine": "specnotes.serve.engine.cli", "bench": "specnotes.bench",
         "calibrate": "specnotes.record.calibrate", "exercises": "specnotes.pages.exercises.cli",
         "train": "specnotes.tiny.train"}


def run_main(cli: str, argv: list[str], seconds: float, monkeypatch) -> tuple[int, str, str]:
    """A CLI's main(argv) in this process: (exit status, stdout, stderr). Past ``seconds`` it is stopped (a hang
    fails). The engine's binary is not needed: its arguments are checked before it starts."""
    import importlib
    import signal

    module = importlib.import_module(MAINS[cli])
    if cli == "engine":
        monkeypatch.setattr(module, "require_binary", lambda: None)

    def stop(*_):
        raise TimeoutError(f"{cli} {argv} ran past {seconds} s")

    out, err = io.StringIO(), io.StringIO()
    before = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = module.main(argv)
            except SystemExit as exit:
                rc = exit.code
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.issue}: {c.id}" for c in CASES])
def test_a_named_case(case, tmp_path, monkeypatch):
    """Issue 45 part 2's 36 cases and issue 47 part 4's 9: a refused one exits 2 with the CLI's own message
    first (no usage block, no traceback), naming the file, the field, the value and the range; a valid one
    answers (exit 0) and says what it did."""
    rc, out, err = run_main(case.cli, prepare(case, tmp_path), case.seconds, monkeypatch)
    assert "Traceback" not in err and rc == case.rc, (rc, err[-2000:])
    if rc == 2:
        first = err.splitlines()[0]
        assert first.startswith("python -m specnotes.") and ": error: " in first, err
        assert re.search(case.says, first), first
    else:
        assert re.search(case.says, " ".join(out.split())), out[:3000]  # the report's lines joined
    assert case.absent is None or not Path(case.absent.replace("{tmp}", str(tmp_path))).exists()


@pytest.mark.parametrize("module", ["specnotes.advise", "specnotes.serve.engine", "specnotes.bench",
                                    "specnotes.record.calibrate", "specnotes.pages.exercises", "specnotes.tiny.train"])
def test_every_command_line_puts_its_message_first(module):
    """python -m MODULE --no-such-flag: exit 2, the first line its error, then where the options are."""
    import subprocess
    import sys

    argv = {"specnotes.serve.engine": ["measure"], "specnotes.bench": ["chapters"]}.get(module, [])
    done = subprocess.run([sys.executable, "-m", module, *argv, "--no-such-flag"], capture_output=True, text=True)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and "unrecognized arguments: --no-such-flag" in lines[0], done.stderr
    assert lines[0].startswith(f"python -m {module}") and lines[-1].endswith("--help lists every option)")


LEVEL = {"name": "engine_serve", "params": {"concurrency": 1}, "median_s": 0.01, "q1_s": 0.01, "q3_s": 0.01,
         "samples": [0.01], "device": "", "dtype": "", "extra": {"output_tokens_per_s": 90.0, "ttft_median_s": 0.1}}


@pytest.mark.parametrize("off, says", [
    ({"schema": "specnotes.results/1", "sections": {}}, r"off\.json: provenance must be a JSON object, got None"),
    ({"schema": "specnotes.results/1", "provenance": {}, "sections": {"engine_serve": [5]}},
     r"off\.json: sections\.engine_serve: not a record: a JSON object, not 5"),
    ({"schema": "specnotes.results/1", "provenance": {}, "sections": {"engine_serve": [
        {**LEVEL, "params": {}}]}}, r"the off run's engine_serve\[0\]\.params\.concurrency must be an integer >= 1"),
    ({"schema": "specnotes.results/1", "provenance": {}, "sections": {"engine_serve": [
        {**LEVEL, "samples": ["fast"]}]}}, r"the off run's engine_serve\[0\]\.samples\[0\] must be a number > 0"),
])
def test_bench_serve_speedup_checks_the_runs_it_reads(off, says, tmp_path, monkeypatch):
    """Its two runs (was: a KeyError or a numpy error): the envelope by ``measure.load_results``, each level's fields
    by ``engine_client``'s reader of a serve run."""
    import json

    on = {"schema": "specnotes.results/1", "provenance": {}, "sections": {"engine_serve": [LEVEL]}}
    for name, doc in (("off", off), ("on", on)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    argv = ["serve-speedup", "--off", str(tmp_path / "off.json"), "--on", str(tmp_path / "on.json"), "--out",
            str(tmp_path / "s.json")]
    rc, _, err = run_main("bench", argv, 20, monkeypatch)
    assert rc == 2 and re.search(says, err.splitlines()[0]), err
