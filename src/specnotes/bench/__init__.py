"""Record what the book measures, on this device, as ``measure.Results`` JSON (one provenance block).

    python -m specnotes.bench                          # = bench chapters: Chapters 1, 2 and 4's measurements
    python -m specnotes.bench chapters --budget-s 360  # start no new section after 6 minutes
    python -m specnotes.bench chapters --quick --out /tmp/x   # tiny sizes: a smoke test on any machine
    python -m specnotes.bench sampler [--device cuda] [--repeats 30] [--threads 1]
    python -m specnotes.bench serve --url http://HOST:PORT/v1 --model NAME --concurrency 1,2,4,8,16,32,64,128,256 \\
        --label off --out serve-off.json     # then again with speculation on, --label on --out serve-on.json
    python -m specnotes.bench serve-speedup --off serve-off.json --on serve-on.json --out serve-speedup.json

``chapters`` writes ``<out>/<host>-<dtype>.json`` (default ``specnotes/data/reference/``): the roofs,
the layer stacks' decode/verify/draft sweep, the decode-GEMM sweep up to the stacks' widest verify pass,
and the roofs again, with what the chapters' models need in ``notes``; ``specnotes.measure.findings.recorded``
replays Chapters 1, 2 and 4 on it. No file recorded on a GPU ships yet.

``serve`` measures a real serving engine over its OpenAI-compatible API at each concurrency (Chapter 8;
``specnotes.serve.engine_client``, which holds these two commands), and ``serve-speedup`` turns a run with
speculation off and one with it on into S(B) records. A failed request writes nothing.

``sampler`` times the fused speculative sampler against the per-sequence reference loop
(``sampling.speculative_sample`` vs ``speculative_sample_loop``) for each (B, k, V), after checking
they agree, with the copy bandwidth measured in the same run; it writes
``specnotes/data/bench_sampler.json``, which Chapter 3 shows (:func:`sampler_table`). Those inputs are
independent random logits, where most drafts are rejected at once; section ``sampler_cases`` times sampling
from logits at the bar's shape and at B = 1 at three acceptance levels (independent, the shipped pair's α,
every draft accepted), with the rows it read, against the unfused pipelines (:func:`sampler_case_table`,
Chapter 7).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import sys
import time
from pathlib import Path

import torch

from specnotes import measure, validate
from specnotes.bench.shapes import CASE_SHAPES, CASE_THREADS, SAMPLER_BAR, SAMPLER_CASES, SAMPLER_SHAPES
from specnotes.bench.words import dispatch_sentence, sampler_sentences
from specnotes.measure import stack
from specnotes.sampling import kernel
from specnotes.serve import engine_client

DATA = Path(__file__).parents[1] / "data"
DEFAULT_OUT = DATA / "reference"
SAMPLER_OUT = DATA / "bench_sampler.json"
ALPHA = 0.8  # acceptance rate for the speedup sweep's stopping rule (Chapter 4 uses the same)


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


# ---------------------------------------------------------------------------------------------- chapters


def quick_sizes() -> tuple[measure.Sizes, stack.StackSizes]:
    """Tiny sizes for a smoke test: every section runs, in seconds, on any machine."""
    sizes = measure.Sizes(copy_bytes=8 * 2**20, d_in=256, d_out=512, batches=(1, 4, 16), peak_n=256,
                          warmup=1, repeats=3, budget_s=0.5)
    stacks = stack.StackSizes(target=stack.stack_shape(1, 256, 4, 2, 512, name="quick target"),
                              draft=stack.stack_shape(1, 128, 2, 1, 256, name="quick draft"),
                              context=16, k=2, warmup=1, repeats=3, budget_s=0.5, min_last=4, limit=4,
                              sweep_budget_s=10.0)
    return sizes, stacks


def sections(device, dtype, sizes: measure.Sizes, stacks: stack.StackSizes, notes: dict):
    """(name, thunk) for every measurement, in the order the chapters take them; each thunk returns a list
    of records and leaves in ``notes`` what the chapters' models need to replay them (``findings.recorded``):
    the roofs, measured before and after the sweeps, best of each (``notes["roof"]``); the op floor and
    the stacks' floors; the stacks' shapes, k, context and α; why the sweep stopped; the last-level cache.
    The decode-GEMM sweep runs after the stacks' sweep, up to the rows of its widest verify pass, so the
    per-M efficiency covers every pass the stacks ran."""
    roofs: list[measure.MeasuredRoof] = []

    def roofline():
        copy = measure.copy_bandwidth(device, sizes.copy_bytes, warmup=sizes.warmup, repeats=sizes.repeats)
        peak = measure.peak_matmul_flops(device, dtype, sizes.peak_n, warmup=sizes.warmup, repeats=sizes.repeats)
        roofs.append(measure.MeasuredRoof(copy.extra["bytes"] / copy.fastest_s, peak.extra["flops"] / peak.fastest_s,
                                          (copy, peak), measure.dtype_name(dtype)))
        best = roofs[0]
        for roof in roofs[1:]:
            best = best.best(roof)
        notes["roof"] = {"bandwidth": best.bandwidth, "flops": best.flops, "dtype": best.dtype}
        notes.setdefault("t0_gemm_s", measure.matmul_floor(device, dtype))
        notes["cache_bytes"] = measure.devices.cache_bytes(device)
        return [copy, peak]

    def stack_sweep():
        target = stack.build_stack(stacks.target, device, dtype)
        draft = stack.build_stack(stacks.draft, device, dtype)
        notes["t0_target_s"] = stack.stack_overhead(stacks.target, device, dtype, stacks.context)
        notes["t0_draft_s"] = stack.stack_overhead(stacks.draft, device, dtype, stacks.context)
        sweep = stack.speedup_sweep(target, draft, stacks.k, ALPHA, stacks.context, stacks, progress=False)
        notes.update({"stack_sweep_stop": sweep.stop, "stack_sweep_limit": stacks.limit,
                      "stack_sweep_s": round(sweep.sweep.seconds, 2), "stack_sweep_last": sweep.batches[-1]})
        return [r for kind in stack.PASSES for r in sweep.records[kind].values()]

    def matmul_sweep():
        rows = (stacks.k + 1) * notes.get("stack_sweep_last", 1)
        roof = measure.MeasuredRoof(notes["roof"]["bandwidth"], notes["roof"]["flops"], (), notes["roof"]["dtype"])
        records, _ = measure.efficiency_sweep(roof, rows, device, dtype, sizes=sizes, progress=False,
                                              budget_s=None if sizes.batches[-1] > 16 else 10.0)
        return records

    return [("roofline", roofline), ("stack_sweep", stack_sweep), ("matmul_sweep", matmul_sweep),
            ("roofline_after", roofline)]


def run(device=None, dtype=None, quick: bool = False, budget_s: float = 360.0, command: str = "") -> measure.Results:
    """Every section that starts within ``budget_s`` seconds; the rest are listed in ``notes["skipped"]``."""
    from tqdm.auto import tqdm

    budget_s = validate.number("budget_s", budget_s, low=0)
    device = measure.pick_device(device)
    dtype = measure.default_dtype(device) if dtype is None else measure.as_dtype(dtype)
    sizes, stacks = quick_sizes() if quick else (measure.sizes_for(device), stack.stack_sizes(device))
    notes = {"budget_s": budget_s, "skipped": [], "seconds": {}, "alpha": ALPHA,
             "stacks": {"target": dataclasses.asdict(stacks.target), "draft": dataclasses.asdict(stacks.draft),
                        "k": stacks.k, "context": stacks.context}}
    results = measure.Results(measure.provenance(device, dtype, command=command), {}, notes)
    start = time.perf_counter()
    todo = sections(device, dtype, sizes, stacks, notes)
    for name, thunk in tqdm(todo, desc=f"bench on {measure.device_name(device)}"):
        if time.perf_counter() - start > budget_s or (name != "roofline" and "roofline" not in results.sections):
            notes["skipped"].append(name)
            continue
        t = time.perf_counter()
        results.sections[name] = thunk()
        notes["seconds"][name] = round(time.perf_counter() - t, 2)
    return results


# ---------------------------------------------------------------------------------------------- sampler


def sampler_case(B: int, k: int, V: int, device, generator: torch.Generator, case: str = "independent",
                 sigma: float = 1.0):
    """Target logits 2·N(0, 1) and draft logits for one of ``SAMPLER_CASES``: "independent" (draft 2·N(0, 1) of its
    own: they rarely agree), "realistic" (the target's plus σ·N(0, 1), σ from ``noise_for_alpha``), "all accepted"
    (the target's: q = p). Their distributions (fp32), drafts drawn from q, the uniforms the samplers share
    -> (drafts, q, p, uniforms, (draft_logits, target_logits))."""
    from specnotes.sampling.exact import draw_uniforms

    noise = torch.randn(B, k, V, generator=generator)
    target_logits = 2 * torch.randn(B, k + 1, V, generator=generator)
    draft_logits = {"independent": lambda: 2 * noise, "realistic": lambda: target_logits[:, :k] + sigma * noise,
                    "all accepted": lambda: target_logits[:, :k].clone()}[case]()
    q, p = torch.softmax(draft_logits, -1), torch.softmax(target_logits, -1)
    drafts = torch.multinomial(q.reshape(-1, V), 1, generator=generator).reshape(B, k)
    uniforms = draw_uniforms(B, k, generator)
    return (drafts.to(device), q.to(device), p.to(device), tuple(u.to(device) for u in uniforms),
            (draft_logits.to(device), target_logits.to(device)))


def shipped_alpha(n_bytes: int = 2048) -> float:
    """α of the shipped pair at temperature 1 on held-out text: the mean over positions of Σ_x min(p(x), q(x))."""
    from specnotes.sampling.exact import acceptance_rate
    from specnotes.tiny import model

    ids = model.encode(model.load_text("eval")[:n_bytes])[None]
    with torch.inference_mode():
        p, q = (torch.softmax(m(ids), -1) for m in (model.load_target(), model.load_draft()))
    return float(acceptance_rate(q, p).mean())


def noise_for_alpha(alpha: float, V: int, generator: torch.Generator, rows: int = 64) -> float:
    """σ such that draft logits = target logits (2·N(0, 1)) + σ·N(0, 1) give mean Σ min(p, q) = ``alpha``, by
    bisection on one draw of ``rows`` rows (α falls as σ grows)."""
    from specnotes.sampling.exact import acceptance_rate

    alpha = validate.number("alpha", alpha, low=0, high=1, low_open=True, high_open=True)
    target = 2 * torch.randn(rows, V, generator=generator)
    noise = torch.randn(rows, V, generator=generator)
    p = torch.softmax(target, -1)
    lo, hi = 0.0, 64.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if acceptance_rate(torch.softmax(target + mid * noise, -1), p).mean() > alpha else (lo, mid)
    return (lo + hi) / 2


def sampler_records(shapes, device, repeats: int) -> list[measure.Record]:
    """For each (B, k, V): ``sampler_fused`` (speculative_sample), ``sampler_loop`` (the reference) and
    ``sampler_from_logits`` (fused.sample_from_logits on the logits p and q came from) records, input
    validation off: this times the sampling arithmetic. ``extra["input_bytes"]``: the bytes of the sampler's
    inputs (p and q, or their logits), which a sampler that needs every row must read at least once."""
    from specnotes.sampling.exact import speculative_sample, speculative_sample_loop
    from specnotes.sampling.fused import sample_from_logits

    repeats = validate.integer("repeats", repeats, low=1)
    g = torch.Generator().manual_seed(0)
    records = []
    for B, k, V in shapes:
        drafts, q, p, uniforms, logits = sampler_case(B, k, V, device, g)
        fused = functools.partial(speculative_sample, drafts, q, p, uniforms=uniforms, validate=False)
        loop = functools.partial(speculative_sample_loop, drafts, q, p, uniforms=uniforms, validate=False)
        from_logits = functools.partial(sample_from_logits, drafts, *logits, 1.0, uniforms=uniforms)
        a, b, c = fused(), loop(), from_logits()
        if not (torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])):
            raise AssertionError(f"fused and loop samplers disagree at B={B}, k={k}, V={V}")
        if (c[1] == a[1]).float().mean() < 0.98 or (c[0] == a[0]).all(1).float().mean() < 0.98:
            raise AssertionError(f"sampling from logits disagrees with speculative_sample at B={B}, k={k}, V={V}")
        params = {"B": B, "k": k, "V": V}
        probs, raw = {"input_bytes": p.nbytes + q.nbytes}, {"input_bytes": sum(t.nbytes for t in logits)}
        for name, fn, n, extra in (("sampler_fused", fused, repeats, probs),
                                   ("sampler_loop", loop, max(3, repeats // 4), probs),
                                   ("sampler_from_logits", from_logits, repeats, raw)):
            timing = measure.time_fn(fn, warmup=3, repeats=n, device=device)
            records.append(measure.Record.from_timing(name, params, timing, device, torch.float32, extra))
    return records


def sampler_table(results: measure.Results) -> list[dict]:
    """One row per (B, k, V): median fused and loop times (ms) and loop/fused (Chapter 3's table); with a
    recorded copy bandwidth (``roofline``), also each sampler's time over the time to read its inputs once
    at that bandwidth, and sampling from logits (Chapter 7)."""
    by = {(r.name, r.params["B"], r.params["k"], r.params["V"]): r for r in results.sections["sampler"]}
    copy = results.sections.get("roofline", [])
    bandwidth = copy[0].extra["bytes_per_s"] if copy else None
    rows = []
    for (name, B, k, V), fused in by.items():
        if name != "sampler_fused":
            continue
        loop = by["sampler_loop", B, k, V]
        row = {"B": B, "k": k, "V": V, "fused ms": 1e3 * fused.median_s, "loop ms": 1e3 * loop.median_s,
               "loop / fused": loop.median_s / fused.median_s}
        if bandwidth:
            row["fused / read once"] = fused.median_s * bandwidth / fused.extra["input_bytes"]
            logits = by.get(("sampler_from_logits", B, k, V))
            if logits is not None:
                row["from logits ms"] = 1e3 * logits.median_s
                row["from logits / read once"] = logits.median_s * bandwidth / logits.extra["input_bytes"]
        rows.append(row)
    return rows


def sampler_case_records(shapes, device, repeats: int, alpha: float, sigma: float,
                         threads: tuple[int | None, ...] = (None,)) -> list[measure.Record]:
    """For each (B, k, V), each of ``SAMPLER_CASES`` and each CPU thread count in ``threads`` (None: torch's), the
    calls of ``SAMPLER_CALLS`` timed against each other (``measure.time_interleaved``, so that a burst of load on a
    shared machine lands on all of them alike): the two samplers, the floor's parts (a copy of every input, whose
    bandwidth prices reading the rows each sampler reads, and the normalizers of exactly the rows it exponentiates,
    made contiguous beforehand, computed each of the three ways in ``NORMALIZERS``) and the unfused pipelines.
    Both samplers are timed as a serving loop would call them, with the acceptance measured on the case's first
    (checking) call as their ``expected_acceptance`` (``fused.acceptance_of``), which picks the compiled kernel's
    route (``fused.route``).
    ``params``: B, k, V, ``case``, ``threads``; ``extra``: ``input_bytes`` (all the inputs), ``rows_read``,
    ``bytes_read``, ``target_rows`` (the rows the draft-probabilities path exponentiates), ``probs_rows_read`` (the
    rows it reads), ``stopped`` (sequences that stopped at a rejection), ``rows_total``, ``alpha`` (mean Σ min(p, q)
    over the draft positions), ``mean_accepted``, ``alpha_target``, ``sigma``, ``expected_acceptance`` (what the
    samplers were told), ``route`` and ``probs_route`` (the route it picked for each sampler where the kernel is used,
    else "torch")."""
    from specnotes.sampling import fused
    from specnotes.sampling.exact import acceptance_rate, speculative_sample, speculative_sample_loop

    repeats = validate.integer("repeats", repeats, low=1)
    g = torch.Generator().manual_seed(1)
    records = []
    for B, k, V in shapes:
        for case in SAMPLER_CASES:
            drafts, q, p, uniforms, (lq, lp) = sampler_case(B, k, V, device, g, case, sigma)
            ref = speculative_sample(drafts, q, p, uniforms=uniforms, validate=False)
            for sampler, draft in ((fused.sample_from_logits, lq), (fused.sample_from_target_logits, q)):
                tokens, n = sampler(drafts, draft, lp, 1.0, uniforms=uniforms)
                if not torch.equal(n, ref[1]) or (tokens == ref[0]).all(1).float().mean() < 0.98:
                    raise AssertionError(f"{sampler.__name__} disagrees with speculative_sample: {case}, B={B}, k={k}")
            expect = fused.acceptance_of(n, k)
            read, target = fused.rows_read(n, k, V), fused.rows_read(n, k, V, "target")
            probs_read = fused.rows_read(n, k, V, "probs")
            picked = torch.cat([torch.cat([lp[b, : (r + 1) // 2], lq[b, : r // 2]])  # the rows it read, contiguous
                                for b, r in enumerate(read.tolist())])
            picked_target = torch.cat([lp[b, :r] for b, r in enumerate(target.tolist())])
            inputs = torch.cat([lq.reshape(-1), lp.reshape(-1)])
            copied = torch.empty_like(inputs)
            step = max(1, fused.CHUNK_BYTES // 2 // (V * 4))  # the rows of one side of a sampler's chunk
            calls = {
                "from_logits": functools.partial(fused.sample_from_logits, drafts, lq, lp, 1.0, uniforms=uniforms,
                                                 expected_acceptance=expect),
                "from_target_logits": functools.partial(fused.sample_from_target_logits, drafts, q, lp, 1.0,
                                                        uniforms=uniforms, expected_acceptance=expect),
                "copy_inputs": functools.partial(copied.copy_, inputs),
                "lse_rows_read": functools.partial(fused.log_normalizers, picked),
                "logsumexp_rows_read": functools.partial(logsumexp_chunks, picked, step),
                "lse_target_rows": functools.partial(fused.log_normalizers, picked_target),
                "logsumexp_target_rows": functools.partial(logsumexp_chunks, picked_target, step),
                "softmax_rows_read": functools.partial(softmax_chunks, picked, step),
                "softmax_target_rows": functools.partial(softmax_chunks, picked_target, step),
                "softmax_then_sample": functools.partial(softmax_then, speculative_sample, drafts, lq, lp, uniforms),
                "softmax_then_loop": functools.partial(softmax_then, speculative_sample_loop, drafts, lq, lp,
                                                       uniforms),
            }
            extra = {"input_bytes": inputs.nbytes, "rows_read": int(read.sum()), "rows_total": B * (2 * k + 1),
                     "bytes_read": int(read.sum()) * V * lp.element_size(), "target_rows": int(target.sum()),
                     "probs_rows_read": int(probs_read.sum()), "stopped": int((n < k).sum()),
                     "alpha": float(acceptance_rate(q, p[:, :k]).mean()),
                     "mean_accepted": float(n.double().mean()), "alpha_target": alpha,
                     "sigma": sigma if case == "realistic" else None, "expected_acceptance": expect,
                     "route": fused.route(expect) if kernel.usable(lp, lq, q) else "torch",
                     "probs_route": fused.route(expect, "probs") if kernel.usable(lp, lq, q) else "torch"}
            for count in threads:
                with measure.num_threads(count):
                    timings = measure.time_interleaved(calls, warmup=3, repeats=repeats, device=device)
                    params = {"B": B, "k": k, "V": V, "case": case, "threads": torch.get_num_threads()}
                records += [measure.Record.from_timing(name, params, timing, device, torch.float32, extra)
                            for name, timing in timings.items()]
    return records


def softmax_then(sampler, drafts, draft_logits, target_logits, uniforms):
    """The unfused pipeline: softmax writes q and p, then ``sampler`` reads them (input validation off)."""
    return sampler(drafts, torch.softmax(draft_logits, -1), torch.softmax(target_logits, -1), uniforms=uniforms,
                   validate=False)


def softmax_chunks(rows: torch.Tensor, step: int) -> None:
    """softmax of ``rows`` [R, V], ``step`` rows at a time (the sampler's chunks), each result dropped before the
    next is made, as the sampler drops its chunks: kept, they would be R·V fresh floats a call, and their page
    faults (5x the softmax itself on a 2-core EPYC at R = 576, V = 32,000) would be timed as exponentials."""
    for c in range(0, len(rows), step):
        torch.softmax(rows[c: c + step], -1)


def logsumexp_chunks(rows: torch.Tensor, step: int) -> None:
    """``torch.logsumexp`` of ``rows`` [R, V], ``step`` rows at a time (its temporaries stay in cache): one of the
    ways to compute the normalizers; the floor takes whichever of ``NORMALIZERS`` is fastest."""
    for c in range(0, len(rows), step):
        torch.logsumexp(rows[c: c + step], -1)


# the measured ways to compute the normalizers of the rows a sampler reads: fused.log_normalizers is the compiled
# kernel's one pass per row where it is built (the torch path's exp-and-sum elsewhere); a softmax computes each row's
# normalizer too (and writes the probabilities besides), and without the kernel it can be the fastest
NORMALIZERS = {"fused.log_normalizers": "lse", "torch.logsumexp": "logsumexp", "torch.softmax": "softmax"}


def floor_of(times: dict[str, float], read_rows: float, rows: str) -> tuple[float, str, str]:
    """(floor, the term that sets it, the fastest way to the normalizers) for the rows named ``rows`` ("rows_read"
    or "target_rows"): max(reading the rows the sampler reads once, the fastest of ``NORMALIZERS`` timed in
    ``times`` on those rows). The term: "reading its rows", "log-normalizers" or "softmax"."""
    ways = {how: times[f"{call}_{rows}"] for how, call in NORMALIZERS.items() if f"{call}_{rows}" in times}
    how = min(ways, key=ways.get)
    term = "reading its rows" if read_rows >= ways[how] else "softmax" if how == "torch.softmax" else "log-normalizers"
    return max(read_rows, ways[how]), term, how


def stopped_sequences(extra: dict, B: int) -> int:
    """How many of the B sequences stopped at a rejection (fewer than k drafts accepted): ``extra["stopped"]`` where
    the record has it; in a record made before it was kept, from the rows read, which the compiled sampler counts
    per sequence as 2(n + 1) when it stops and 2k + 1 when it does not (``fused.rows_read``), against n + 1 and
    k + 1 rows of p: so 2·target_rows − rows_read sequences did not stop."""
    if "stopped" in extra:
        return int(extra["stopped"])
    return B - (2 * extra["target_rows"] - extra["rows_read"])


def sampler_case_table(results: measure.Results) -> list[dict]:
    """One row per (B, k, V, case, threads) of the ``sampler_cases`` section.

    The floor of sampling from logits is max(reading the rows it reads once, the normalizers of those rows): the
    first is the bytes of those rows at the bandwidth of the interleaved copy of every input (half the copy: it reads
    and writes them), the second the fastest of the measured ways to the normalizers of exactly those rows
    (``floor_of``: ``fused.log_normalizers``, ``torch.logsumexp`` or a softmax of them). Reading *every* input once
    ("read all ms") is kept as a reference, not a floor: a sampler that stops early never reads most of them.
    The draft-probabilities path likewise: its rows (p up to where it stops, q only there: ``probs_rows_read``, or
    target rows + stopped sequences in an older record) and the normalizers of the target's rows.

    "second pass share": the rows a sampler from logits passes over again after its first pass, per row it reads:
    sampling the residual needs p and q normalized at the two rows it stopped on, and after k acceptances the bonus
    token needs the p row of the last position. The kernel's recomputed route computes their exponentials again
    there; its kept route reads those of the first pass, kept ("route", and "probs route" for the draft-probabilities
    path, with the "expected acceptance" that picked them; None in a record made before the route was chosen)."""
    by = {(r.name, r.params["B"], r.params["k"], r.params["V"], r.params["case"], r.params["threads"]): r
          for r in results.sections["sampler_cases"]}
    rows = []
    for (name, B, k, V, case, threads), r in by.items():
        if name != "from_logits":
            continue
        times = {n: rec.median_s for (n, *key), rec in by.items() if tuple(key) == (B, k, V, case, threads)}
        t = lambda n: times[n]  # noqa: B023
        ex = r.extra
        read_all = t("copy_inputs") / 2
        read_rows = read_all * ex["bytes_read"] / ex["input_bytes"]  # the rows it read, at the copy's bandwidth
        stopped = stopped_sequences(ex, B)
        read_probs = read_rows * ex.get("probs_rows_read", ex["target_rows"] + stopped) / ex["rows_read"]
        floor, term, how = floor_of(times, read_rows, "rows_read")
        floor_target, term_target, _ = floor_of(times, read_probs, "target_rows")
        lse = min(t("lse_rows_read"), t("logsumexp_rows_read"))
        spread = lambda n: by[n, B, k, V, case, threads].timing.rel_spread  # noqa: B023
        rows.append({"B": B, "k": k, "V": V, "case": case, "threads": threads, "α": ex["alpha"],
                     "accepted / sequence": ex["mean_accepted"], "rows read": ex["rows_read"] / ex["rows_total"],
                     "stopped sequences": stopped / B,
                     "second pass share": (2 * stopped + (B - stopped)) / ex["rows_read"],
                     "from logits ms": 1e3 * r.median_s, "read all ms": 1e3 * read_all,
                     "read rows ms": 1e3 * read_rows, "floor ms": 1e3 * floor, "floor is": term,
                     "normalizers fastest by": how, "÷ floor": r.median_s / floor,
                     "÷ read all (reference)": r.median_s / read_all,
                     "from probs ms": 1e3 * t("from_target_logits"),
                     "probs ÷ floor": t("from_target_logits") / floor_target, "probs floor is": term_target,
                     "probs ÷ read all (reference)": t("from_target_logits") / read_all,
                     "lse of rows read ÷ read rows": lse / read_rows,
                     "softmax of rows read ÷ read rows": t("softmax_rows_read") / read_rows,
                     "softmax, then sample ms": 1e3 * t("softmax_then_sample"),
                     "softmax, then loop ms": 1e3 * t("softmax_then_loop"),
                     "spread (IQR / median)": max(spread("from_logits"), spread("copy_inputs"),
                                                  spread(f"{NORMALIZERS[how]}_rows_read")),
                     "expected acceptance": ex.get("expected_acceptance"), "route": ex.get("route"),
                     "probs route": ex.get("probs_route")})
    return rows


def run_sampler(device=None, repeats: int = 30, threads: tuple[int, ...] = CASE_THREADS, command: str = ""
                ) -> measure.Results:
    """The ``sampler`` command: the copy bandwidth and Chapter 3's table with ``threads[0]`` CPU threads, then the
    acceptance cases with each of ``threads``. Provenance adds the CPU's details and the load average before and
    after (a shared machine's load moves every median; the interleaving keeps their ratios)."""
    from specnotes.sampling import fused

    threads = tuple(validate.integers("threads", threads, low=1))
    device = measure.pick_device(device)
    load_before = measure.cpu_details().get("load_average_1_5_15")
    alpha = shipped_alpha()
    sigma = noise_for_alpha(alpha, CASE_SHAPES[0][2], torch.Generator().manual_seed(2))
    with measure.num_threads(threads[0]):
        roofline = [measure.copy_bandwidth(device)]
        records = sampler_records(SAMPLER_SHAPES, device, repeats)
        prov = measure.provenance(device, torch.float32, command=command, cpu=measure.cpu_details())
    start = time.perf_counter()
    cases = sampler_case_records(CASE_SHAPES, device, repeats, alpha, sigma, threads)
    notes = {"what": "speculative_sample (fused) vs speculative_sample_loop (reference), and sampling from logits "
                     "(fused.sample_from_logits), wall time per call; sampler_cases: the two samplers from logits "
                     "(draft logits, or the draft's probabilities) at three acceptance levels (independent logits, "
                     "the shipped pair's alpha at T = 1, every draft accepted), with each thread count, timed "
                     "interleaved with the floor's parts (a copy of every input; the normalizers of the rows "
                     "read, three ways) and the unfused pipelines",
             "floor": "max(reading the rows it reads once, the normalizers of those rows): the rows' bytes at the "
                      "bandwidth of the interleaved copy of every input, and the fastest of fused.log_normalizers "
                      "(on fp32 with the kernel built, its one pass per row), torch.logsumexp and torch.softmax on "
                      "exactly those rows, made contiguous (a softmax computes each row's normalizer too, and "
                      "torch's uses a faster exp than torch.exp on some CPUs); the draft-probabilities path's floor "
                      "likewise, on the rows it reads and the target's rows it exponentiates. Reading every input "
                      "once is a reference, not a floor (bench.sampler_case_table)",
             "bar": SAMPLER_BAR,
             "kernel": kernel.how_built() if kernel.available() else f"not used: {kernel.how_built()}",
             "validate": False, "repeats": repeats, "alpha_shipped": alpha, "sigma": sigma,
             "kept_below": dict(fused.KEPT_BELOW),
             "case_threads": list(threads), "case_seconds": round(time.perf_counter() - start, 1),
             "load_average_before": load_before, "load_average_after": measure.cpu_details().get("load_average_1_5_15")}
    return measure.Results(prov, {"roofline": roofline, "sampler": records, "sampler_cases": cases}, notes)


# ---------------------------------------------------------------------------------------------- CLI


def print_sampler(results: measure.Results):
    print(f"{'B':>5} {'k':>3} {'V':>7} {'fused ms':>10} {'loop ms':>10} {'loop/fused':>10} {'fused/read':>10} "
          f"{'logits ms':>10} {'logits/read':>11}   (x/read: time over reading the inputs once at copy bandwidth)")
    for row in sampler_table(results):
        print(f"{row['B']:5d} {row['k']:3d} {row['V']:7d} {row['fused ms']:10.3f} {row['loop ms']:10.3f} "
              f"{row['loop / fused']:9.1f}x {row['fused / read once']:9.2f}x {row['from logits ms']:10.3f} "
              f"{row['from logits / read once']:10.2f}x")
    print(f"\nsampling from logits by acceptance (alpha: mean sum min(p, q); the shipped pair's at T = 1 is "
          f"{results.notes['alpha_shipped']:.2f});\nfloor = max(reading the rows it reads once, the fastest way to "
          f"their normalizers); /all: over reading every input once, a reference")
    print(f"{'B':>5} {'thr':>3} {'case':>13} {'alpha':>6} {'rows':>5} {'ms':>8} {'floor ms':>8} {'floor is':>16} "
          f"{'/floor':>6} {'/all':>6} {'probs/fl':>8} {'probs/all':>9} {'lse/rows':>8} {'smax/rows':>9} "
          f"{'2nd pass':>8} {'spread':>6}")
    for row in sampler_case_table(results):
        print(f"{row['B']:5d} {row['threads']:3d} {row['case']:>13} {row['α']:6.2f} {row['rows read']:5.0%} "
              f"{row['from logits ms']:8.3f} {row['floor ms']:8.3f} {row['floor is']:>16} {row['÷ floor']:5.2f}x "
              f"{row['÷ read all (reference)']:5.2f}x {row['probs ÷ floor']:7.2f}x "
              f"{row['probs ÷ read all (reference)']:8.2f}x {row['lse of rows read ÷ read rows']:7.2f}x "
              f"{row['softmax of rows read ÷ read rows']:8.2f}x {row['second pass share']:8.0%} "
              f"{row['spread (IQR / median)']:6.2f}")
    print("\n".join(sampler_sentences(sampler_case_table(results)).values()))
    for draft in ("logits", "probs"):
        print(dispatch_sentence(sampler_case_table(results), results.notes["kept_below"], draft=draft))



COMMANDS = ("chapters", "sampler", "serve", "serve-speedup")


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """``python -m specnotes.bench``'s arguments: the parser, and each command's own (for its usage errors)."""
    parser = validate.Parser(prog="python -m specnotes.bench", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    chapters = commands.add_parser("chapters", help="Chapters 1, 2 and 4's measurements (the default)")
    chapters.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: the best there is)")
    chapters.add_argument("--dtype", default=None, help="bf16, fp16 or fp32 (default: the device's)")
    chapters.add_argument("--budget-s", type=validate.cli(validate.number, low=0), default=360.0,
                          help="seconds, >= 0: no new section starts after this")
    chapters.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    chapters.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for <host>-<dtype>.json")
    sampler = commands.add_parser("sampler", help="fused vs loop speculative sampler")
    sampler.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: the best there is)")
    sampler.add_argument("--repeats", type=validate.cli(validate.integer, low=1), default=30)
    sampler.add_argument("--threads", default=",".join(map(str, CASE_THREADS)),
                         help="comma-separated CPU thread counts for the acceptance cases (default: 1,2); the first "
                              "also runs the rest")
    sampler.add_argument("--out", type=Path, default=SAMPLER_OUT, help="the JSON file to write")
    serve = commands.add_parser("serve", help="a real engine's TPOT, TTFT and tokens/s at each concurrency (run "
                                              "once with speculation off, once on)")
    engine_client.serve_arguments(serve)
    combine = commands.add_parser("serve-speedup", help="S(B) records from a serve run off and one on")
    engine_client.speedup_arguments(combine)
    return parser, {"chapters": chapters, "sampler": sampler, "serve": serve, "serve-speedup": combine}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = ["chapters", *argv]
    parser, sub = build_parser()
    serve, combine, sampler = sub["serve"], sub["serve-speedup"], sub["sampler"]
    args = parser.parse_args(argv)
    command = "python -m specnotes.bench " + " ".join(argv)
    for flag, check in (("device", measure.pick_device), ("dtype", measure.as_dtype)):
        if getattr(args, flag, None) is not None:  # checked before anything is measured
            try:
                check(getattr(args, flag))
            except validate.BadArgument as e:
                sub[args.command].error(f"--{flag}: {e}")
    if args.command == "serve":
        return engine_client.serve_main(serve, args, command)
    if args.command == "serve-speedup":
        return engine_client.speedup_main(combine, args, command)
    if args.command == "sampler":
        try:
            counts = validate.integers("--threads", [int(t) for t in args.threads.split(",")], low=1)
        except ValueError as e:
            sampler.error(f"{e} (--threads: thread counts separated by commas, e.g. 1,2)")
        results = run_sampler(args.device, args.repeats, counts, command)
        path = measure.save_results(results, args.out)
        print_sampler(results)
    else:
        results = run(args.device, args.dtype, args.quick, args.budget_s, command)
        name = f"{slug(results.provenance['host'])}-{results.provenance['dtype']}.json"
        path = measure.save_results(results, args.out / name)
        print(f"skipped: {results.notes['skipped']}")
    print(f"wrote {path} ({sum(map(len, results.sections.values()))} records)")
    return 0

