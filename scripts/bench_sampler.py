"""Benchmark the fused speculative sampler against the per-sequence reference loop.

    python scripts/bench_sampler.py [--device cuda] [--repeats 20] [--out PATH]

For each (B, k, V): random target/draft distributions, drafts drawn from q, the same uniforms
for both samplers; checks they agree, then times each (synchronized, after warm-up; median and
interquartile range over repeats). Input validation is off in both (``validate=False``): this
times the sampling arithmetic. Prints a table and writes JSON with provenance.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from specnotes.sampling import draw_uniforms, speculative_sample, speculative_sample_loop

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src" / "specnotes" / "data" / "bench_sampler.json"
SHAPES = [(B, k, V) for V in (256, 32000) for B in (1, 8, 64) for k in (4,)] + [(8, 8, 256), (8, 8, 32000)]


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn, device, repeats: int, warmup: int = 3) -> tuple[float, float]:
    """Median and interquartile range of the wall time of fn(), in seconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return statistics.median(times), q[2] - q[0]


def make_case(B, k, V, device, generator):
    q = torch.softmax(2 * torch.randn(B, k, V, generator=generator), -1)
    p = torch.softmax(2 * torch.randn(B, k + 1, V, generator=generator), -1)
    drafts = torch.multinomial(q.reshape(-1, V), 1, generator=generator).reshape(B, k)
    uniforms = draw_uniforms(B, k, generator)
    return drafts.to(device), q.to(device), p.to(device), tuple(u.to(device) for u in uniforms)


def bench(shapes, device: torch.device, repeats: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    rows = []
    for B, k, V in shapes:
        drafts, q, p, uniforms = make_case(B, k, V, device, g)
        args = (drafts, q, p)
        fused = functools.partial(speculative_sample, *args, uniforms=uniforms, validate=False)
        loop = functools.partial(speculative_sample_loop, *args, uniforms=uniforms, validate=False)
        a, b = fused(), loop()
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), "fused and loop samplers disagree"
        fused_s, fused_iqr = time_call(fused, device, repeats)
        loop_s, loop_iqr = time_call(loop, device, max(3, repeats // 4))
        rows.append(
            {
                "B": B,
                "k": k,
                "V": V,
                "fused_s": fused_s,
                "fused_iqr_s": fused_iqr,
                "loop_s": loop_s,
                "loop_iqr_s": loop_iqr,
                "speedup": loop_s / fused_s,
            }
        )
        print(f"{B:5d} {k:3d} {V:7d} {fused_s * 1e3:10.3f} {loop_s * 1e3:10.3f} {loop_s / fused_s:8.1f}x", flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"{'B':>5} {'k':>3} {'V':>7} {'fused ms':>10} {'loop ms':>10} {'loop/fused':>9}")
    rows = bench(SHAPES, device, args.repeats)
    record = {
        "what": "speculative_sample (fused) vs speculative_sample_loop (reference), median wall time per call",
        "dtype": "float32",
        "validate": False,
        "repeats": args.repeats,
        "device": device_name(device),
        "device_type": device.type,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "results": rows,
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
