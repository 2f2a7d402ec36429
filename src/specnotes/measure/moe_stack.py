"""A stack of mixture-of-experts layers with random weights: Chapter 10's measured workload.

Each layer is the Llama-style attention of ``specnotes.measure.stack`` (same KV cache, same grouped attention)
followed by a MoE MLP: a router picks each token's top-m of N experts (softmax weights over the m), the
(token, expert) pairs are sorted by expert, and two grouped matmuls (``torch._grouped_mm``: one GEMM per
expert over its own rows, in one call, skipping experts no token chose) run the gated up-projection and the
down-projection; the outputs are weighted and added back per token. No Python loop over experts: the
weights of an expert nobody routed to are never read, which is what the cost model charges
(``cost.MoEShape``: bytes of the E[D](T) distinct experts touched). Where the grouped matmul is missing
(older GPUs, older torch, CPUs), the touched experts' weights are gathered into a buffer made once and one
batched matmul runs over them (``moe_path``), which reads them twice more; the record says which path ran.

The timing half reuses ``specnotes.measure.stack``: ``stack.speedup_sweep`` with this module's pass timer, and
``stack.StackModel`` for the cost model on this device's measured roofs (its floors measured on tiny stacks
of the same kind). :func:`distinct_experts` counts the experts a pass actually touched.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import torch
import torch.nn.functional as F

from specnotes import validate
from specnotes.analytic import cost
from specnotes.analytic.cost import MoEShape
from specnotes.measure import stack
from specnotes.measure.devices import as_dtype, dtype_name, memory_bytes, resolve
from specnotes.measure.dtypes import default_dtype
from specnotes.measure.records import Record, rates
from specnotes.measure.timing import time_fn


def moe_stack_shape(n_layers: int, d_model: int, n_heads: int, n_kv_heads: int, n_experts: int, per_token: int,
                    expert_d_ff: int, name: str = "") -> MoEShape:
    """The cost-model shape of a bare MoE stack: no LM head (vocab = 1), every layer MoE, no shared expert."""
    return MoEShape(n_layers, d_model, n_heads, n_kv_heads, expert_d_ff, vocab=1, name=name, n_experts=n_experts,
                    experts_per_token=per_token, expert_d_ff=expert_d_ff)


@dataclass
class MoEStack:
    shape: MoEShape
    layers: list[dict[str, torch.Tensor]]
    device: torch.device
    dtype: torch.dtype


def build_moe_stack(shape: MoEShape, device="cpu", dtype=torch.bfloat16, seed: int = 0) -> MoEStack:
    """Random weights of ``shape`` in ``dtype`` (experts stored [N, out, in]); the stack's shape is ``shape`` in
    that dtype, so the cost model counts the bytes the stack really reads."""
    if not isinstance(shape, MoEShape) or shape.mla or shape.shared_experts or shape.dense_layers:
        raise validate.BadArgument("build_moe_stack takes a MoEShape with grouped-query attention, no shared expert "
                                   "and no dense layer (moe_stack_shape makes one)")
    device, dtype = resolve(device), as_dtype(dtype)
    shape = shape.in_dtype(dtype_name(dtype))
    gen = torch.Generator().manual_seed(seed)
    d, dh, f, n = shape.d_model, shape.d_head, shape.expert_d_ff, shape.n_experts

    def weight(*size):
        w = torch.randn(*size, generator=gen) * size[-1] ** -0.5
        return w.to(device=device, dtype=dtype)

    layers = [{
        "attn_norm": torch.ones(d, device=device, dtype=dtype),
        "wqkv": weight((shape.n_heads + 2 * shape.n_kv_heads) * dh, d),
        "wo": weight(d, shape.n_heads * dh),
        "mlp_norm": torch.ones(d, device=device, dtype=dtype),
        "router": weight(n, d),
        "w_gate_up": weight(n, 2 * f, d),
        "w_down": weight(n, d, f),
    } for _ in range(shape.n_layers)]
    if not _grouped_mm_works(str(device), dtype):  # the gathered path: room for the touched experts, made once
        for layer in layers:
            layer["buf_gate_up"], layer["buf_down"] = torch.empty_like(layer["w_gate_up"]), torch.empty_like(
                layer["w_down"])
    return MoEStack(shape, layers, device, dtype)


@cache
def _grouped_mm_works(device: str, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` runs here as a grouped GEMM (CUDA from sm90), probed once on a tiny
    problem. Not on a CPU: there it exists as a reference kernel, which on one 2-core machine ran 15 to 150
    times slower than the gathered batched matmul once an expert had more than one row."""
    if not hasattr(torch, "_grouped_mm") or torch.device(device).type != "cuda":
        return False
    try:
        a = torch.ones(32, 32, device=device, dtype=dtype)
        b = torch.ones(2, 32, 32, device=device, dtype=dtype)
        offs = torch.tensor([16, 32], device=device, dtype=torch.int32)
        torch._grouped_mm(a, b.transpose(1, 2), offs=offs)
        return True
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def moe_path(device, dtype) -> str:
    """"grouped_mm" or "gather + bmm": how :func:`experts` runs on this device and dtype."""
    return "grouped_mm" if _grouped_mm_works(str(resolve(device)), as_dtype(dtype)) else "gather + bmm"


def route(x: torch.Tensor, router: torch.Tensor, per_token: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's top-m experts [T, m] and their weights [T, m] (softmax over the m chosen scores)."""
    scores, chosen = (x @ router.t()).topk(per_token, dim=-1)
    return chosen, torch.softmax(scores.float(), dim=-1).to(x.dtype)


def _grouped(rows: torch.Tensor, w: torch.Tensor, counts: torch.Tensor, offsets: torch.Tensor,
             buffer: torch.Tensor | None = None) -> torch.Tensor:
    """rows sorted by expert (``counts[e]`` rows for expert e) times each row's expert's weight [N, out, in].
    ``buffer``: room for the gathered weights (like ``w``), reused across passes so that the fallback allocates
    nothing (autograd needs a fresh gather: give none when training)."""
    if _grouped_mm_works(str(rows.device), rows.dtype):
        return torch._grouped_mm(rows, w.transpose(1, 2), offs=offsets)
    # fallback: the touched experts' weights gathered, rows padded to the busiest expert, one batched matmul
    touched = counts.nonzero().flatten()
    gathered = w[touched] if buffer is None else torch.index_select(w, 0, touched, out=buffer[:len(touched)])
    c = int(counts.max())
    starts = offsets - counts
    slot = torch.arange(rows.shape[0], device=rows.device) - starts.repeat_interleave(counts)
    group = torch.arange(len(counts), device=rows.device).repeat_interleave(counts)
    where = torch.full((len(counts),), -1, device=rows.device, dtype=torch.long)
    where[touched] = torch.arange(len(touched), device=rows.device)
    padded = rows.new_zeros(len(touched), c, rows.shape[1])
    padded[where[group], slot] = rows
    out = torch.bmm(padded, gathered.transpose(1, 2))
    return out[where[group], slot]


def experts(x: torch.Tensor, layer: dict, per_token: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The MoE MLP of one layer on x [T, d_model]: (output [T, d_model], chosen experts [T, m])."""
    chosen, weights = route(x, layer["router"], per_token)
    n = layer["router"].shape[0]
    flat = chosen.flatten()
    order = flat.argsort(stable=True)
    token = order // per_token
    counts = torch.bincount(flat, minlength=n)
    offsets = counts.cumsum(0).to(torch.int32)
    gate, up = _grouped(x[token], layer["w_gate_up"], counts, offsets, layer.get("buf_gate_up")).chunk(2, dim=-1)
    down = _grouped(F.silu(gate) * up, layer["w_down"], counts, offsets, layer.get("buf_down"))
    out = torch.zeros_like(x).index_add_(0, token, down * weights.flatten()[order, None])
    return out, chosen


def forward(st: MoEStack, x: torch.Tensor, caches, context: int, groups, routes: list | None = None) -> torch.Tensor:
    """x: [tokens, d_model], tokens ordered by group (``stack.groups_for``). Writes the new K/V into ``caches``;
    appends each layer's chosen experts [tokens, m] to ``routes`` if given."""
    m = st.shape.experts_per_token
    for layer, kv in zip(st.layers, caches, strict=True):
        qkv = stack.rms_norm(x, layer["attn_norm"]) @ layer["wqkv"].t()
        x = x + stack.attention(st, qkv, kv, context, groups) @ layer["wo"].t()
        y, chosen = experts(stack.rms_norm(x, layer["mlp_norm"]), layer, m)
        x = x + y
        if routes is not None:
            routes.append(chosen)
    return x


def distinct_experts(routes: list[torch.Tensor]) -> list[int]:
    """Distinct experts each layer's tokens touched, one count per layer (``routes``: [T, m] per layer)."""
    return [int(torch.unique(r).numel()) for r in routes]


def moe_pass_time(st: MoEStack, batch: int, new_tokens: int, context: int = 0, *, warmup: int = 2, repeats: int = 5,
                  budget_s: float | None = None, min_s: float = 0.0) -> Record:
    """Time one forward pass of a MoE stack (``batch`` sequences × ``new_tokens`` after ``context`` cached ones).
    ``extra``: the cost model's FLOPs and bytes at independent routing (``cost.forward_cost``), the distinct
    experts the pass's tokens touched (mean over layers, and per layer), their expected number under
    independent routing, the bytes at the measured count, and which matmul path ran."""
    batch = validate.integer("batch", batch, low=1)
    new_tokens = validate.integer("new_tokens", new_tokens, low=1)
    context = validate.integer("context", context, low=0)
    s = st.shape
    x, caches, groups = stack.pass_inputs(st, batch, new_tokens, context)
    routes: list[torch.Tensor] = []
    with torch.inference_mode():
        forward(st, x, caches, context, groups, routes)  # the routing this pass takes (the same every repeat)
        timing = time_fn(lambda: forward(st, x, caches, context, groups), warmup=warmup, repeats=repeats,
                         device=st.device, budget_s=budget_s, min_s=min_s)
    touched = distinct_experts(routes)
    mean = sum(touched) / len(touched)
    model = cost.forward_cost(s, batch, new_tokens, context)
    measured_bytes = model.bytes + s.weight_bytes * s.moe_layers * s.expert_params * (
        mean - cost.expected_experts(s.n_experts, s.experts_per_token, batch * new_tokens))
    params = {"stack": s.name, "batch": batch, "new_tokens": new_tokens, "context": context}
    extra = {**rates(model.flops, model.bytes, timing.median, model.tokens), "tokens": model.tokens,
             "distinct_experts": mean, "distinct_per_layer": touched,
             "expected_experts": cost.expected_experts(s.n_experts, s.experts_per_token, model.tokens),
             "bytes_at_measured_distinct": measured_bytes, "path": moe_path(st.device, st.dtype)}
    return Record.from_timing("moe_pass", params, timing, st.device, st.dtype, extra)


def time_pass(st, batch: int, new_tokens: int, context: int, speculating, sizes: stack.StackSizes) -> Record:
    """``stack.speedup_sweep``'s pass timer for a MoE target and a dense draft stack alike."""
    kwargs = {"warmup": sizes.warmup, "repeats": sizes.repeats, "budget_s": sizes.budget_s, "min_s": sizes.min_s}
    if isinstance(st, MoEStack):
        return moe_pass_time(st, batch, new_tokens, context, **kwargs)
    return stack.stack_time(st, batch, new_tokens, context, speculating, **kwargs)


def moe_overhead(shape: MoEShape, device=None, dtype=None, context: int = 0, repeats: int = 30,
                 min_s: float = 0.25) -> float:
    """The per-pass floor t0 of a MoE stack: the fastest pass of a stack with ``shape``'s layers, heads and
    experts but tiny widths (4 per head, experts of width 8), whose roofline time is nanoseconds: routing,
    sorting and the grouped matmuls' launches included. Seconds."""
    dev = resolve(device)
    dt = default_dtype(dev) if dtype is None else as_dtype(dtype)
    tiny = moe_stack_shape(shape.n_layers, 4 * shape.n_heads, shape.n_heads, shape.n_kv_heads, shape.n_experts,
                           shape.experts_per_token, 8, name="floor")
    return moe_pass_time(build_moe_stack(tiny, dev, dt), 1, 1, context, warmup=3, repeats=repeats,
                         min_s=min_s).fastest_s


def stack_model(target: MoEStack, draft: stack.LayerStack, roof, k: int, alpha: float, context: int
                ) -> stack.StackModel:
    """``stack.StackModel`` of a MoE target and a dense draft on this device's measured roofs (``roof``:
    ``measure.measured_roofline``), each floor measured now on a tiny stack of its kind."""
    t0 = moe_overhead(target.shape, target.device, target.dtype, context)
    t0_draft = stack.stack_overhead(draft.shape, draft.device, draft.dtype, context)
    return stack.StackModel(target.shape, draft.shape, roof.as_accelerator(), t0, t0_draft, k, alpha, context)


def moe_sizes(device: torch.device | str | None = None) -> stack.StackSizes:
    """The stacks and sweep sizes for ``device`` (``stack.StackSizes``; its ``target`` is a ``MoEShape``); the
    sweep stops at the batch whose verify pass would fill ``stack.MEMORY_SHARE`` of the memory."""
    dev = resolve(device)
    if dev.type == "cuda":
        sizes = stack.StackSizes(
            # 2 of Qwen3-30B-A3B's 48 layers (128 experts of width 768, 8 per token) and 2 of Qwen3-0.6B's 28
            target=moe_stack_shape(2, 2048, 32, 4, 128, 8, 768, name="Qwen3-30B-A3B, 2 of 48 layers"),
            draft=stack.stack_shape(2, 1024, 16, 8, 3072, name="Qwen3-0.6B-like, 2 layers"),
            context=512, k=3, warmup=5, repeats=15, budget_s=2.0, min_last=64, limit=4096, sweep_budget_s=90.0)
    else:
        sizes = stack.StackSizes(
            # one layer whose 32 experts (6.3 MB each in fp32) outweigh its attention (10.5 MB) 19 to 1, so that
            # the experts a pass touches set its bytes; a small draft. The sweep doubles B until S < 1 - NOISE.
            target=moe_stack_shape(1, 1024, 8, 2, 32, 2, 512, name="1 MoE layer, d=1024, 32 experts, 2 per token"),
            draft=stack.stack_shape(1, 256, 4, 1, 512, name="1 layer, d=256"),
            context=128, k=3, warmup=2, repeats=7, budget_s=0.8, min_last=16, limit=256, sweep_budget_s=40.0,
            min_s=0.3)
    share = stack.MEMORY_SHARE["cuda" if dev.type == "cuda" else "other"]
    return replace(sizes, limit=min(sizes.limit, stack.sweep_limit(sizes, share * memory_bytes(dev))))


def moe_sweep(target: MoEStack, draft: stack.LayerStack, k: int, alpha: float, context: int,
              sizes: stack.StackSizes, progress: bool = True) -> stack.BatchSweep:
    """Decode, verify (k + 1 tokens per sequence) and draft passes at B = 1, 2, 4, ... (``stack.speedup_sweep``
    with :func:`time_pass`; no "B + k" pass)."""
    return stack.speedup_sweep(target, draft, k, alpha, context, sizes, mixed=False, progress=progress,
                               time_pass=lambda st, b, n, ctx, spec: time_pass(st, b, n, ctx, spec, sizes))
