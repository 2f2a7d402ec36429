"""Chapter 1's problems (01_roofline_decode): the roofline of a decode step."""

from __future__ import annotations

from functools import partial

from specnotes.analytic import cost, hardware
from specnotes.analytic.cost import LLAMA_3_2_1B, LLAMA_3_70B
from specnotes.pages.exercises.answers import (
    H100,
    H200,
    compute_time_ms,
    constant,
    critical_batch,
    decode_step_ms,
    decode_tokens_per_s,
    overhead_bound_params_b,
    peak_over_bandwidth,
    weight_read_ms,
    weights_gb,
    which_fits,
)
from specnotes.pages.exercises.registry import _M, _P, register

for _problem in [
    # Chapter 1: the roofline of a decode step
    _P("ch1.p1a", "01_roofline_decode", "Llama-3-70B decode step at B = 1 on one H200, bf16 (ms; a bound: "
       "the bf16 weights alone fill its 141 GB)",
       partial(decode_step_ms, LLAMA_3_70B, H200, "bf16"), "ms",
       mistakes=(_M(partial(weight_read_ms, LLAMA_3_70B.params, 1, H200),
                    "off by a factor of 2: a bf16 weight is 2 bytes, so the step reads 2P bytes"),
                 _M(partial(compute_time_ms, LLAMA_3_70B, H200, "bf16"),
                    "that is the compute time 2P/peak: at B = 1 the step is memory-bound, so use bytes/bandwidth"))),
    _P("ch1.p1b", "01_roofline_decode", "the same step with fp8 weights (ms)",
       partial(decode_step_ms, LLAMA_3_70B.in_dtype("fp8"), H200, "fp8"), "ms",
       mistakes=(_M(partial(decode_step_ms, LLAMA_3_70B, H200, "bf16"),
                    "that is the bf16 step: fp8 weights are 1 byte each, so the step reads half the bytes"),
                 _M(partial(compute_time_ms, LLAMA_3_70B, H200, "fp8"),
                    "that is the compute time 2P/peak at the fp8 peak: the step is still memory-bound"))),
    _P("ch1.p1c", "01_roofline_decode", "tokens per second for that one user, bf16 (tokens/s)",
       partial(decode_tokens_per_s, LLAMA_3_70B, H200, "bf16"), "tokens/s",
       mistakes=(_M(partial(decode_tokens_per_s, LLAMA_3_70B.in_dtype("fp8"), H200, "fp8"),
                    "that is the fp8 rate: the question asks for bf16"),)),
    _P("ch1.p1d", "01_roofline_decode", "which fits on the H200 with room for a 1,024-token sequence: \"neither\", "
       "\"bf16\", \"fp8\" or \"both\"", partial(which_fits, LLAMA_3_70B, H200),
       choices={"neither": "neither leaves room for a KV cache", "bf16": "only the bf16 weights",
                "fp8": "only the fp8 weights", "both": "both"},
       mistakes=(_M(constant("both"), f"the bf16 weights, embedding table included, take {weights_gb(LLAMA_3_70B):.1f} "
                    f"GB of the H200's {hardware.accelerator(H200).memory / 1e9:.0f} GB: no room is left for a KV "
                    "cache (cost.max_batch gives 0)"),
                 _M(constant("neither"), f"fp8 halves the weights to {weights_gb(LLAMA_3_70B, 'fp8'):.1f} GB: "
                    f"{cost.max_batch(LLAMA_3_70B.in_dtype('fp8'), None, H200, 1024)} sequences of 1,024 tokens fit "
                    "beside them"),
                 _M(constant("bf16"), "bf16 weights take twice fp8's bytes: where bf16 leaves room, fp8 does too"))),
    _P("ch1.p2", "01_roofline_decode", "critical batch of an H100 SXM with fp8 weights and fp8 math (tokens)",
       partial(critical_batch, H100, "fp8"), "tokens",
       mistakes=(_M(partial(peak_over_bandwidth, H100, "fp8"),
                    "that is the fp8 ridge, peak/BW: the critical batch is ridge · w/2, with w = 1 byte in fp8"),
                 _M(partial(peak_over_bandwidth, H100, "bf16", 0.5),
                    "that uses the bf16 peak with 1-byte weights: fp8 math runs at the fp8 peak, twice bf16's"))),
    _P("ch1.p3a", "01_roofline_decode", "Llama-3.2-1B decode step at B = 1 on a T4, fp16 (ms)",
       partial(decode_step_ms, LLAMA_3_2_1B, "T4", "fp16"), "ms",
       mistakes=(_M(partial(weight_read_ms, LLAMA_3_2_1B.n_layers * LLAMA_3_2_1B.layer_params, 2, "T4"),
                    "you left out the LM head: P counts every projection plus the d_model × vocab head, which a "
                    "step reads even when it shares its weights with the embedding"),
                 _M(partial(compute_time_ms, LLAMA_3_2_1B, "T4", "fp16"),
                    "that is the compute time 2P/peak: at B = 1 the step is memory-bound"))),
    _P("ch1.p3b", "01_roofline_decode", "batch at which that step stops being memory-bound, T4 fp16 (tokens)",
       partial(critical_batch, "T4", "fp16"), "tokens",
       mistakes=(_M(partial(critical_batch, "T4", "fp32"),
                    "that uses the fp32 peak: the T4 runs fp16 on its tensor cores (65 TFLOP/s)"),
                 _M(partial(peak_over_bandwidth, "T4", "fp16", 2),
                    "off by a factor of 2: a decode GEMM does 2B/w FLOPs per byte, which is B for 2-byte weights"))),
    _P("ch1.p4", "01_roofline_decode", "parameter count below which a 1 ms overhead exceeds an H100 bf16 weight read "
       "(billions)", partial(overhead_bound_params_b, 1e-3, H100), "billion parameters",
       mistakes=(_M(partial(overhead_bound_params_b, 1e-3, H100, 1),
                    "off by a factor of 2: P = t0 · BW / w, and a bf16 weight is w = 2 bytes"),)),
]:
    register(_problem)
