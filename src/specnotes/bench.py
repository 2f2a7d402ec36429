"""Record every measurement the chapters make, on this device, as reference JSON.

    python -m specnotes.bench                       # realistic sizes for the device it finds
    python -m specnotes.bench --budget-s 360        # stop starting new sections after 6 minutes
    python -m specnotes.bench --quick --out /tmp/x  # tiny sizes: a smoke test on any machine

Writes ``<out>/<device-slug>.json``: provenance (device, driver/CUDA/torch versions, dtype, date, the
command) and the records of each section, in the order Chapters 1, 2 and 4 use them. The book ships
such files from real GPUs in ``specnotes/data/reference/``; ``load_reference`` reads them back.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from importlib import resources
from pathlib import Path

from specnotes import measure, stack

SCHEMA = "specnotes.reference/1"
DEFAULT_OUT = Path(__file__).parent / "data" / "reference"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def quick_sizes() -> tuple[measure.Sizes, measure.StackSizes]:
    """Tiny sizes for a smoke test: every section runs, in seconds, on any machine."""
    sizes = measure.Sizes(copy_bytes=8 * 2**20, d_in=256, d_out=512, batches=(1, 4, 16), peak_n=256,
                          warmup=1, repeats=3, budget_s=0.5)
    stacks = measure.StackSizes(target=stack.stack_shape(1, 256, 4, 2, 512, name="quick target"),
                                draft=stack.stack_shape(1, 128, 2, 1, 256, name="quick draft"),
                                batches=(1, 4), context=16, k=2, warmup=1, repeats=3, budget_s=0.5)
    return sizes, stacks


def sections(device, dtype, sizes: measure.Sizes, stacks: measure.StackSizes):
    """(name, thunk) for every measurement, cheapest first; each thunk returns a list of records."""
    timing = {"warmup": stacks.warmup, "repeats": stacks.repeats, "budget_s": stacks.budget_s}
    k, ctx = stacks.k, stacks.context
    target = lambda: stack.build_stack(stacks.target, device, dtype)
    return [
        ("roofline", lambda: [measure.copy_bandwidth(device, sizes.copy_bytes, warmup=sizes.warmup,
                                                     repeats=sizes.repeats),
                              measure.peak_matmul_flops(device, dtype, sizes.peak_n, warmup=sizes.warmup,
                                                        repeats=sizes.repeats)]),
        ("matmul_sweep", lambda: measure.matmul_sweep(sizes.batches, sizes.d_in, sizes.d_out, dtype, device,
                                                      progress=False, warmup=sizes.warmup, repeats=sizes.repeats)),
        ("target_stack", lambda: measure.stack_sweep(target(), stacks.batches, (1, k + 1), ctx, progress=False,
                                                     **timing)),
        ("target_stack_one_speculating", lambda: [
            measure.stack_time(target(), b, k + 1, ctx, speculating=1, **timing) for b in stacks.batches if b > 1]),
        ("draft_stack", lambda: measure.stack_sweep(stack.build_stack(stacks.draft, device, dtype), stacks.batches,
                                                    (1,), ctx, progress=False, **timing)),
    ]


def run(device=None, dtype=None, quick: bool = False, budget_s: float = 360.0, command: str = "") -> dict:
    from tqdm.auto import tqdm

    device = measure.pick_device(device)
    dtype = measure.default_dtype(device) if dtype is None else measure.as_dtype(dtype)
    sizes, stacks = quick_sizes() if quick else (measure.sizes_for(device), measure.stack_sizes(device))
    result = {"schema": SCHEMA, "provenance": {**measure.provenance(device, dtype), "command": command},
              "budget_s": budget_s, "sections": {}, "skipped": [], "seconds": {}}
    start = time.perf_counter()
    todo = sections(device, dtype, sizes, stacks)
    for name, thunk in tqdm(todo, desc=f"bench on {measure.device_name(device)}"):
        if time.perf_counter() - start > budget_s:
            result["skipped"].append(name)
            continue
        t = time.perf_counter()
        result["sections"][name] = [r.to_dict() for r in thunk()]
        result["seconds"][name] = round(time.perf_counter() - t, 2)
    result["stack_shapes"] = {"target": vars(stacks.target), "draft": vars(stacks.draft), "k": stacks.k,
                              "context": stacks.context}
    return result


def save(result: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{slug(result['provenance']['host'])}-{result['provenance']['dtype']}.json"
    path.write_text(json.dumps(result, indent=1))
    return path


def load_reference(path: str | Path | None = None) -> list[dict]:
    """Every reference file shipped with the package (or the one at ``path``), as dicts whose
    ``sections`` hold ``measure.Record``s."""
    if path is not None:
        files = [Path(path)]
    else:
        folder = resources.files("specnotes") / "data" / "reference"
        files = sorted(p for p in folder.iterdir() if p.name.endswith(".json")) if folder.is_dir() else []
    refs = []
    for f in files:
        data = json.loads(Path(f).read_text())
        if data.get("schema") != SCHEMA:
            raise ValueError(f"{f}: not a {SCHEMA} file")
        data["sections"] = {k: [measure.Record.from_dict(r) for r in v] for k, v in data["sections"].items()}
        refs.append(data)
    return refs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Record the chapters' measurements on this device.")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None, help="bf16, fp16 or fp32 (default: the device's)")
    parser.add_argument("--budget-s", type=float, default=360.0, help="no new section starts after this")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    command = "python -m specnotes.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    result = run(args.device, args.dtype, args.quick, args.budget_s, command.strip())
    path = save(result, args.out)
    print(f"wrote {path} ({sum(map(len, result['sections'].values()))} records, skipped: {result['skipped']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
