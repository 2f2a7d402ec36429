"""Compare every notebook's stored outputs between two git revisions.

    python scripts/compare_outputs.py 40e5d32 HEAD

For each notebook in both revisions, its code cells are paired in order and their outputs compared after nbval's
sanitizer (tests/nbval_sanitize.cfg: addresses, timings and float noise) is applied to both: the check that a change
to the package moved no number a page shows. Prints each cell that differs and exits 1 if any does.
"""

from __future__ import annotations

import configparser
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def show(rev: str, path: str) -> str | None:
    done = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def notebooks(rev: str) -> list[str]:
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", rev], capture_output=True,
                            text=True, check=True).stdout.split()
    return [p for p in listed if p.endswith(".ipynb") and p.startswith(("notebooks/", "book/"))]


def sanitizers() -> list[tuple[re.Pattern, str]]:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "tests" / "nbval_sanitize.cfg")
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]


def text_of(output: dict, rules) -> str:
    if output.get("output_type") == "stream":
        text = "".join(output.get("text", ""))
    else:
        data = output.get("data", {})
        text = "".join(data.get("text/plain", "")) + "".join(data.get("text/markdown", ""))
    for pattern, replace in rules:
        text = pattern.sub(replace, text)
    return text


def code_outputs(source: str, rules) -> list[tuple[str, str]]:
    cells = [c for c in json.loads(source)["cells"] if c["cell_type"] == "code"]
    return [("".join(c["source"])[:60], "\n".join(text_of(o, rules) for o in c.get("outputs", []))) for c in cells]


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python scripts/compare_outputs.py REV_BEFORE REV_AFTER", file=sys.stderr)
        return 2
    before, after = args
    rules, differ = sanitizers(), 0
    for path in sorted(set(notebooks(before)) | set(notebooks(after))):
        old, new = show(before, path), show(after, path)
        if old is None or new is None:
            print(f"{path}: only in {after if old is None else before}")
            continue
        a, b = code_outputs(old, rules), code_outputs(new, rules)
        if len(a) != len(b):
            print(f"{path}: {len(a)} code cells before, {len(b)} after")
            differ += 1
            continue
        changed = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x[1] != y[1]]
        differ += len(changed)
        print(f"{path}: {len(a)} code cells, {len(changed)} with other outputs")
        for i in changed:
            print(f"    code cell {i}: {b[i][0]!r}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
