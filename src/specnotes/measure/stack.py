"""A stack of Llama-style transformer layers with random weights and a KV cache.

This is the workload Chapters 2 and 4 time: one forward pass over a batch in which each sequence
adds ``n`` new tokens after ``context`` cached ones. Timing needs realistic shapes, not trained
weights. The batch may be ragged — some sequences verifying k + 1 tokens, the rest decoding one —
so the source note's "B + k" batch can be timed next to the "B(k + 1)" one.

Linear layers run on the flattened [tokens, d_model] matrix (every weight read once per pass,
whatever the mix); attention runs per group of sequences with the same number of new tokens.

The second half times it (through ``measure.timing``, the book's one timer): one pass
(:func:`stack_time`), the per-pass floor (:func:`stack_overhead`), and Chapters 2 and 4's sweep
(:func:`speedup_sweep`): decode, verify and draft passes at B = 1, 2, 4, ... until speculation
clearly stops paying, next to the cost model on this device's measured roofs (:class:`StackModel`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from specnotes import validate
from specnotes.analytic import cost
from specnotes.analytic.cost import ModelShape
from specnotes.measure import checks
from specnotes.measure.checks import NOISE
from specnotes.measure.devices import as_dtype, dtype_name, memory_bytes, resolve
from specnotes.measure.dtypes import default_dtype
from specnotes.measure.records import Record, rates
from specnotes.measure.timing import Sweep, doubling_sweep, time_fn


def stack_shape(n_layers: int, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, name: str = "") -> ModelShape:
    """The cost-model shape of a bare layer stack: no LM head (vocab = 1 adds d_model parameters, ~0)."""
    return ModelShape(n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab=1, name=name)


@dataclass
class LayerStack:
    shape: ModelShape
    layers: list[dict[str, torch.Tensor]]
    device: torch.device
    dtype: torch.dtype


def build_stack(shape: ModelShape, device="cpu", dtype=torch.bfloat16, seed: int = 0) -> LayerStack:
    """Random weights of ``shape`` in ``dtype``; the stack's shape is ``shape`` in that dtype, so the
    cost model counts the bytes the stack really reads."""
    device, dtype = resolve(device), as_dtype(dtype)
    shape = shape.in_dtype(dtype_name(dtype))
    gen = torch.Generator().manual_seed(seed)
    d, dh, dff = shape.d_model, shape.d_head, shape.d_ff
    qkv_rows = (shape.n_heads + 2 * shape.n_kv_heads) * dh

    def weight(rows, cols):
        w = torch.randn(rows, cols, generator=gen) * cols**-0.5
        return w.to(device=device, dtype=dtype)

    layers = [{
        "attn_norm": torch.ones(d, device=device, dtype=dtype),
        "wqkv": weight(qkv_rows, d),
        "wo": weight(d, d),
        "mlp_norm": torch.ones(d, device=device, dtype=dtype),
        "w_gate_up": weight(2 * dff, d),
        "w_down": weight(d, dff),
    } for _ in range(shape.n_layers)]
    return LayerStack(shape, layers, device, dtype)


def kv_cache(stack: LayerStack, batch: int, length: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, K and V of shape [batch, n_kv_heads, length, d_head], filled with noise, drawn in the
    stack's dtype (on a CUDA device there, elsewhere on the CPU): no float32 copy of a large cache."""
    gen = torch.Generator(stack.device if stack.device.type == "cuda" else "cpu").manual_seed(seed)
    s = stack.shape
    size = (batch, s.n_kv_heads, length, s.d_head)
    return [tuple(torch.randn(size, generator=gen, device=gen.device, dtype=stack.dtype).to(stack.device)
                  for _ in range(2)) for _ in range(s.n_layers)]


def groups_for(batch: int, new_tokens: int, speculating: int | None = None) -> list[tuple[int, int, int]]:
    """(first sequence, last sequence + 1, new tokens each). With ``speculating`` = s, the first s
    sequences add ``new_tokens`` and the other batch - s add one (a batch where only some speculate)."""
    if speculating is None or speculating == batch:
        return [(0, batch, new_tokens)]
    speculating = validate.integer("speculating", speculating, low=0, high=batch)
    groups = [(0, speculating, new_tokens)] if speculating else []
    return groups + [(speculating, batch, 1)]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype) * weight


def causal_mask(n: int, context: int, device) -> torch.Tensor | None:
    """New token i sees the context and new tokens 0..i. One new token sees everything: no mask."""
    if n == 1:
        return None
    keys = torch.arange(context + n, device=device)
    return keys[None, :] <= (context + torch.arange(n, device=device))[:, None]


def grouped_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                      mask: torch.Tensor | None) -> torch.Tensor:
    """``scaled_dot_product_attention`` with grouped-query attention folded: q [B, heads, n, d] over
    keys/values [B, kv_heads, L, d]. The g = heads / kv_heads query heads that share a KV head become
    g·n query rows of that head, so each KV head is read once for all of them, as GQA decode kernels do
    (SDPA's ``enable_gqa`` may instead run each query head over its KV head separately)."""
    b, heads, n, d = q.shape
    g = heads // keys.shape[1]
    if g == 1:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    rows = q.reshape(b, keys.shape[1], g * n, d)  # head h = kv·g + j -> rows j·n .. j·n + n - 1 of head kv
    y = F.scaled_dot_product_attention(rows, keys, values, attn_mask=None if mask is None else mask.repeat(g, 1))
    return y.view(b, heads, n, d)


def attention(stack: LayerStack, qkv: torch.Tensor, cache, context: int, groups) -> torch.Tensor:
    s = stack.shape
    k_cache, v_cache = cache
    q_width, kv_width = s.n_heads * s.d_head, s.n_kv_heads * s.d_head
    out, row = [], 0
    for first, last, n in groups:
        b = last - first
        rows = qkv[row:row + b * n].view(b, n, -1)
        row += b * n
        q = rows[..., :q_width].view(b, n, s.n_heads, s.d_head).transpose(1, 2)
        k = rows[..., q_width:q_width + kv_width].view(b, n, s.n_kv_heads, s.d_head).transpose(1, 2)
        v = rows[..., q_width + kv_width:].view(b, n, s.n_kv_heads, s.d_head).transpose(1, 2)
        k_cache[first:last, :, context:context + n] = k
        v_cache[first:last, :, context:context + n] = v
        keys = k_cache[first:last, :, :context + n]
        values = v_cache[first:last, :, :context + n]
        y = grouped_attention(q, keys, values, causal_mask(n, context, qkv.device))
        out.append(y.transpose(1, 2).reshape(b * n, q_width))
    return torch.cat(out) if len(out) > 1 else out[0]


def forward(stack: LayerStack, x: torch.Tensor, caches, context: int, groups) -> torch.Tensor:
    """x: [tokens, d_model], tokens ordered by group. Writes the new K/V into ``caches`` at ``context``."""
    for layer, cache in zip(stack.layers, caches, strict=True):
        qkv = rms_norm(x, layer["attn_norm"]) @ layer["wqkv"].t()
        x = x + attention(stack, qkv, cache, context, groups) @ layer["wo"].t()
        gate, up = (rms_norm(x, layer["mlp_norm"]) @ layer["w_gate_up"].t()).chunk(2, dim=-1)
        x = x + (F.silu(gate) * up) @ layer["w_down"].t()
    return x


def pass_inputs(stack: LayerStack, batch: int, new_tokens: int, context: int, speculating: int | None = None,
                seed: int = 0):
    """Everything one timed pass needs: (x, caches, groups). The cache holds context + new_tokens."""
    groups = groups_for(batch, new_tokens, speculating)
    tokens = sum((last - first) * n for first, last, n in groups)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, stack.shape.d_model, generator=gen).to(stack.device, stack.dtype)
    return x, kv_cache(stack, batch, context + new_tokens, seed), groups


# ---------------------------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class StackSizes:
    """Layer stacks and sweep sizes for one device.

    target, draft: the same fraction of each model's layers, so their time ratio is the full
        models' ratio (LM heads left out: a stack is layers only).
    context: cached tokens per sequence; k: draft tokens.
    warmup, repeats, budget_s: timing of one pass (``time_fn``).
    min_last, limit, sweep_budget_s: the batch sweep (``speedup_sweep``) measures at least up to
        B = min_last, never past B = limit (:func:`stack_sizes` sets it to the largest batch whose passes
        fit in memory, :func:`sweep_limit`), and starts no batch that would not fit in sweep_budget_s.
    min_s: seconds of samples a fast pass gathers at least (``time_fn``).
    """

    target: ModelShape
    draft: ModelShape
    context: int
    k: int
    warmup: int
    repeats: int
    budget_s: float | None
    min_last: int = 8
    limit: int = 256
    sweep_budget_s: float | None = 20.0
    min_s: float = 0.0


MEMORY_SHARE = {"cuda": 0.5, "other": 0.25}  # of the device's memory one pass may fill (CPU: what is free now)


def pass_bytes(shape: ModelShape, batch: int, new_tokens: int, context: int, itemsize: int = 4) -> int:
    """Bytes one timed pass (:func:`stack_time`) allocates at its peak, in a dtype of ``itemsize`` bytes:
    the KV cache of context + new_tokens tokens per sequence (:func:`kv_cache`), and for its
    batch·new_tokens tokens the activations alive at once (fused QKV; the gated MLP's up-projection, its
    halves and their product, 6·d_ff; the residual stream, norms and attention output, 8·d_model) and the
    attention scores, all counted at 4 bytes. The CPU stack's fp32 verify pass at B = 128 to 512 grew the
    process by 3.1 MB per sequence; this counts 3.3."""
    s = shape
    tokens, length = batch * new_tokens, context + new_tokens
    cache = 2 * s.n_layers * batch * s.n_kv_heads * length * s.d_head * itemsize
    activations = tokens * ((s.n_heads + 2 * s.n_kv_heads) * s.d_head + 6 * s.d_ff + 8 * s.d_model)
    scores = batch * s.n_heads * new_tokens * length
    return cache + 4 * (activations + scores)


def sweep_limit(sizes: StackSizes, memory: float) -> int:
    """The largest batch B = 2^i whose verify pass over ``sizes.target`` (:func:`pass_bytes`, in float32,
    the widest dtype) fits in ``memory`` bytes; at least 1."""
    batch = 1
    while pass_bytes(sizes.target, 2 * batch, sizes.k + 1, sizes.context) <= memory:
        batch *= 2
    return batch


def stack_sizes(device: torch.device | str | None = None) -> StackSizes:
    """The stacks and sweep sizes for ``device``; the sweep's largest batch is what fits in
    ``MEMORY_SHARE`` of its memory (:func:`sweep_limit`, ``measure.devices.memory_bytes``): the time budget,
    not a fixed cap, ends a sweep before S falls clearly below 1."""
    dev = resolve(device)
    sizes = _stack_sizes(dev)
    share = MEMORY_SHARE["cuda" if dev.type == "cuda" else "other"]
    return replace(sizes, limit=sweep_limit(sizes, share * memory_bytes(dev)))


def _stack_sizes(dev: torch.device) -> StackSizes:
    if dev.type == "cuda":
        return StackSizes(
            # 4 of Llama-3-8B's 32 layers and 2 of Llama-3.2-1B's 16: an eighth of each model.
            target=stack_shape(4, 4096, 32, 8, 14336, name="Llama-3-8B, 4 of 32 layers"),
            draft=stack_shape(2, 2048, 32, 8, 8192, name="Llama-3.2-1B, 2 of 16 layers"),
            # B(k+1) crosses every GPU's ridge (~200-600 tokens) by B = 128; the sweep goes on until S < 1 - NOISE.
            context=512, k=4, warmup=5, repeats=15, budget_s=2.0, min_last=64, sweep_budget_s=90.0,
        )
    return StackSizes(
        # Llama-shaped but small: 2 layers of d=2048 (180 MB of bf16 weights, larger than most CPUs' L3),
        # and a draft an eighth of its size. The sweep doubles B from 1 until S < 1 - NOISE (at least to 8) within
        # 20 s: a CPU without bf16 units crosses at B = 1, one with AVX-512 bf16 at 16 to 32, one with AMX past 256.
        target=stack_shape(2, 2048, 16, 4, 5632, name="2 layers, d=2048"),
        draft=stack_shape(1, 1024, 8, 2, 2816, name="1 layer, d=1024"),
        # each pass sampled for at least 0.15 s (a shared machine stalls a process for up to ~0.2 s at a
        # time; the fastest sample must come from outside a stall), slow ones at least 3 times
        context=256, k=4, warmup=2, repeats=5, budget_s=0.5, min_last=8, sweep_budget_s=20.0,
        min_s=0.15,
    )


def pass_cost(shape: ModelShape, batch: int, new_tokens: int, context: int = 0,
              speculating: int | None = None) -> cost.PassCost:
    """The cost model's FLOPs and bytes for one stack pass: ``batch`` sequences adding ``new_tokens``
    each (or, with ``speculating`` = s, only the first s adding ``new_tokens`` and the rest one)."""
    batch = validate.integer("batch", batch, low=1)
    new_tokens = validate.integer("new_tokens", new_tokens, low=1)
    speculating = batch if speculating is None else speculating
    return cost.mixed_verify_cost(shape, batch, new_tokens - 1, speculating, context)


def stack_time(stack: LayerStack, batch: int, new_tokens: int, context: int = 0, speculating: int | None = None, *,
               warmup: int = 2, repeats: int = 5, budget_s: float | None = None, min_s: float = 0.0) -> Record:
    """Time one forward pass of ``stack``: ``batch`` sequences adding ``new_tokens`` each after
    ``context`` cached tokens (or, with ``speculating`` = s, only the first s adding ``new_tokens``
    and the rest one). ``extra`` holds the cost model's FLOPs and bytes for the same pass
    (:func:`pass_cost`) and the achieved rates."""
    model = pass_cost(stack.shape, batch, new_tokens, validate.integer("context", context, low=0), speculating)
    x, caches, groups = pass_inputs(stack, batch, new_tokens, context, speculating)
    with torch.inference_mode():
        timing = time_fn(lambda: forward(stack, x, caches, context, groups), warmup=warmup, repeats=repeats,
                         device=stack.device, budget_s=budget_s, min_s=min_s)
    params = {"stack": stack.shape.name, "batch": batch, "new_tokens": new_tokens, "context": context,
              "speculating": batch if speculating is None else speculating}
    return Record.from_timing("stack_pass", params, timing, stack.device, stack.dtype,
                              {**rates(model.flops, model.bytes, timing.median, model.tokens), "tokens": model.tokens})


def stack_overhead(shape: ModelShape, device=None, dtype=None, context: int = 0, repeats: int = 30,
                   min_s: float = 0.25) -> float:
    """The per-pass floor t0 of a layer stack: the fastest pass of a stack with ``shape``'s layers and
    kernels but tiny dimensions (4 per head), whose roofline time is nanoseconds, over at least
    ``repeats`` passes and ``min_s`` seconds of them. Seconds."""
    dev = resolve(device)
    dt = default_dtype(dev) if dtype is None else as_dtype(dtype)
    tiny = stack_shape(shape.n_layers, 4 * shape.n_heads, shape.n_heads, shape.n_kv_heads, 8, name="floor")
    return stack_time(build_stack(tiny, dev, dt), 1, 1, context, warmup=3, repeats=repeats, min_s=min_s).fastest_s


# ---------------------------------------------------------------------------------------------- Chapters 2 and 4


@dataclass(frozen=True)
class StackModel:
    """The cost model of the stacks on this device: its measured roofs (an ``Accelerator``, e.g.
    ``measure.measured_roofline().as_accelerator()``) and each stack's per-pass floor; with
    ``efficiency`` (a ``measure.GemmEfficiency``, :meth:`with_efficiency`), also what the roofline leaves
    out of a GEMM of M rows on this device, measured on a decode GEMM over another weight."""

    target: ModelShape
    draft: ModelShape
    accel: object  # hardware.Accelerator
    t0_target: float
    t0_draft: float
    k: int
    alpha: float
    context: int
    efficiency: object = None  # measure.GemmEfficiency

    @classmethod
    def measure(cls, target: LayerStack, draft: LayerStack, roof, k: int, alpha: float, context: int) -> StackModel:
        """The model of these stacks on this device: ``roof`` from ``measure.measured_roofline`` and each
        stack's per-pass floor, measured now (:func:`stack_overhead`)."""
        t0 = stack_overhead(target.shape, target.device, target.dtype, context)
        t0_draft = stack_overhead(draft.shape, draft.device, draft.dtype, context)
        return cls(target.shape, draft.shape, roof.as_accelerator(), t0, t0_draft, k, alpha, context)

    def with_roof(self, roof) -> StackModel:
        """This model on other measured roofs (``measure.MeasuredRoof``), e.g. ``roof.best(measured again)``."""
        return replace(self, accel=roof.as_accelerator())

    def with_efficiency(self, efficiency) -> StackModel:
        """This model with every pass's matmuls at ``efficiency(M)`` times their roofline time, M the rows
        (tokens) of the pass: the per-M GEMM efficiency of a decode-GEMM sweep (``measure.GemmEfficiency``)."""
        return replace(self, efficiency=efficiency)

    def bounded_by(self, sweep: BatchSweep) -> StackModel:
        """This model with each floor at most what the sweep's fastest pass at its first batch left over
        after the roofline time of that pass. A floor cannot exceed a whole real pass: on a machine whose
        cores are taken away for seconds at a time, every sample of a tiny pass can land in a stall
        (its threads wait for each other), while the real passes, longer, still find quiet moments."""
        b = sweep.batches[0]
        measured = {kind for kind in ("decode", "draft") if b in sweep.records.get(kind, {})}  # a record may lack one
        slack = {kind: max(0.0, sweep.time(kind, b) - self.time(kind, b, floor=False)) if kind in measured else floor
                 for kind, floor in (("decode", self.t0_target), ("draft", self.t0_draft))}
        return replace(self, t0_target=min(self.t0_target, slack["decode"]),
                       t0_draft=min(self.t0_draft, slack["draft"]))

    def _pass(self, kind: str, batch: int) -> tuple[ModelShape, float, cost.PassCost]:
        shape, t0 = (self.draft, self.t0_draft) if kind == "draft" else (self.target, self.t0_target)
        new, spec = {"decode": (1, None), "verify": (self.k + 1, None), "mixed": (self.k + 1, 1),
                     "draft": (1, None)}[validate.choice("kind", kind, PASSES)]
        return shape, t0, pass_cost(shape, batch, new, self.context, spec)

    def work(self, kind: str, batch: int) -> tuple[float, float]:
        """(FLOPs, bytes) of one ``kind`` pass at ``batch``, as the cost model counts them."""
        _, _, pass_ = self._pass(kind, batch)
        return pass_.flops, pass_.bytes

    def time(self, kind: str, batch: int, floor: bool = True) -> float:
        """Seconds of one ``kind`` pass ("decode", "verify", "mixed": one sequence verifies, "draft"):
        its roofline time plus, with ``floor``, the stack's per-pass floor; with an ``efficiency``, its
        matmuls take ``efficiency(M)`` times their roofline time, M the pass's tokens (a MoE's experts: the rows
        each touched expert gets, T·m/E[D], which set its grouped GEMM's efficiency)."""
        shape, t0, pass_ = self._pass(kind, batch)
        seconds = cost.roofline_time(pass_, self.accel, overhead=t0 if floor else 0.0)
        if self.efficiency is None:
            return seconds
        extra = 0.0
        for gemm in pass_.parts:  # the matmuls at the pass's rows; a MoE's experts at the rows each expert gets
            if gemm.name not in ("matmul", "experts"):
                continue
            rows = pass_.tokens if gemm.name == "matmul" else max(1, round(
                gemm.flops * shape.weight_bytes / (2 * gemm.bytes)))
            gemm_s = cost.roofline_time(cost.PassCost(gemm.flops, gemm.bytes, pass_.tokens, (gemm,), pass_.compute),
                                        self.accel)
            extra += (self.efficiency(rows) - 1) * gemm_s
        return seconds + extra

    def least_time(self, kind: str, batch: int, cache_bytes: float = 0.0) -> float:
        """The least seconds a ``kind`` pass can take on this device: its roofline time, kernel by kernel,
        on ``checks.fastest_roofs`` (no floor); a stack whose weights fit in ``cache_bytes`` (the
        last-level cache, ``measure.devices.cache_bytes``) has no memory roof."""
        shape, _, pass_ = self._pass(kind, batch)
        cached = shape.weight_bytes_total <= validate.number("cache_bytes", cache_bytes, low=0)
        return cost.roofline_time(pass_, checks.fastest_roofs(self.accel, cached=cached))

    def speedup_cap(self, batch: int, t_decode: float, cache_bytes: float = 0.0) -> float:
        """The largest S this device's roofs allow at ``batch``, given the measured plain decode time
        ``t_decode`` (seconds): E[N]·t_decode over the least time of k draft steps and a verify pass
        (:meth:`least_time`); ``checks.speedup_bound`` asserts the measured S under it."""
        return cost.speedup_from_times(self.alpha, self.k, t_decode, self.least_time("draft", batch, cache_bytes),
                                       self.least_time("verify", batch, cache_bytes))

    def speedup(self, batch: int) -> float:
        """S(B) from this model's pass times, as the measured S is computed from measured ones:
        E[N]·T_decode / (k·T_draft + T_verify), each pass at the stacks' context."""
        return cost.speedup_from_times(self.alpha, self.k, self.time("decode", batch), self.time("draft", batch),
                                       self.time("verify", batch))

    def breakdown(self, batch: int) -> cost.Breakdown:
        """One iteration of these stacks at ``batch`` and the decode step it replaces, split by term
        (``cost.breakdown``): this device's measured roofs, each stack's floor as its fixed cost per pass, no GEMM
        efficiency; its passes take :meth:`time`'s seconds."""
        return cost.breakdown(self.target, self.draft, self.accel, batch, self.k, self.context,
                              overhead=self.t0_target, draft_overhead=self.t0_draft)

    def crossover(self, limit: int = 1 << 16) -> int | None:
        """The model's B*: S(B) <= 1 from there on (None: it still pays at ``limit``)."""
        return cost.crossover_batch(self.target, self.draft, self.accel, self.k, self.alpha, self.context,
                                    max_batch=limit, overhead=self.t0_target, draft_overhead=self.t0_draft)


PASSES = ("decode", "verify", "mixed", "draft")


@dataclass
class BatchSweep:
    """Chapters 2 and 4's measurement: ``records[kind][B]`` for kind in ``PASSES`` at each B in
    ``batches``, and why the sweep stopped (``measure.timing.Sweep``: "done" = S fell below 1 - NOISE,
    clearly below 1; "budget"; "limit")."""

    k: int
    alpha: float
    context: int
    batches: list[int]
    records: dict[str, dict[int, Record]]
    sweep: Sweep

    def time(self, kind: str, batch: int) -> float:
        """The fastest sample of that pass: contention on a shared machine only ever adds time."""
        return self.records[kind][batch].fastest_s

    def speedup(self, batch: int) -> float:
        """S(B) from the measured passes: E[N]·T_decode / (k·T_draft + T_verify)."""
        return cost.speedup_from_times(self.alpha, self.k, self.time("decode", batch), self.time("draft", batch),
                                       self.time("verify", batch))

    @property
    def stop(self) -> str:
        return self.sweep.stop

    @property
    def why_stopped(self) -> str:
        """Why the sweep stopped, in words."""
        return {"done": f"S fell below {1 - NOISE:.2f} (clearly below 1, beyond the {NOISE:.0%} noise)",
                "budget": "the time budget ran out",
                "limit": f"it reached the largest batch that fits in memory, B = {self.sweep.limit}"}[self.stop]


def speedup_sweep(target: LayerStack, draft: LayerStack, k: int, alpha: float, context: int,
                  sizes: StackSizes | None = None, *, mixed: bool = True, progress: bool = True,
                  timer: Callable[[], float] | None = None,
                  time_pass: Callable[..., Record] | None = None) -> BatchSweep:
    """Time decode, verify (k + 1 tokens for every sequence), draft and, with ``mixed``, the "B + k"
    pass (one sequence verifies) at B = 1, 2, 4, ... until the measured S(B) has fallen below 1 - NOISE
    (clearly below 1: fastest samples of a pass differ by up to NOISE on a busy machine) at a
    B >= ``sizes.min_last``, or B would pass ``sizes.limit`` (what fits in memory), or the next B would not fit in
    ``sizes.sweep_budget_s`` (``measure.timing.doubling_sweep``); each pass timed with ``sizes``'
    warmup, repeats, budget_s and min_s (:func:`stack_time`). ``sizes`` defaults to
    :func:`stack_sizes` for the target's device; ``time_pass(stack, batch, new_tokens, context,
    speculating)`` replaces :func:`stack_time` (tests)."""
    from tqdm.auto import tqdm

    k = validate.integer("k", k, low=1)
    alpha = validate.probability("alpha", alpha)
    context = validate.integer("context", context, low=0)
    sizes = sizes or stack_sizes(target.device)
    time_pass = time_pass or (lambda stack, b, n, ctx, spec: stack_time(
        stack, b, n, ctx, spec, warmup=sizes.warmup, repeats=sizes.repeats, budget_s=sizes.budget_s,
        min_s=sizes.min_s))
    records: dict[str, dict[int, Record]] = {kind: {} for kind in PASSES}
    bar = tqdm(desc=f"{target.shape.name} + {draft.shape.name}: batch", disable=not progress)

    def point(b: int) -> float:
        bar.set_postfix(B=b)
        records["decode"][b] = time_pass(target, b, 1, context, None)
        records["verify"][b] = time_pass(target, b, k + 1, context, None)
        records["draft"][b] = time_pass(draft, b, 1, context, None)
        if mixed and b > 1:
            records["mixed"][b] = time_pass(target, b, k + 1, context, 1)
        bar.update()
        return cost.speedup_from_times(alpha, k, records["decode"][b].fastest_s, records["draft"][b].fastest_s,
                                       records["verify"][b].fastest_s)

    sweep = doubling_sweep(point, lambda batches, speedups: speedups[-1] < 1 - NOISE, min_last=sizes.min_last,
                           limit=sizes.limit, budget_s=sizes.sweep_budget_s, timer=timer)
    bar.close()
    return BatchSweep(k, alpha, context, sweep.batches, records, sweep)
