"""Vendor the website's JavaScript from the npm registry, so the built book needs no CDN.

    python scripts/vendor_assets.py            # refresh book/_assets/vendor/ (needs `npm`)
    python scripts/vendor_assets.py --check    # verify the committed files against VENDORED.json

What is vendored (pinned below; the sizes are of the trimmed, committed files, about 4.7 MB in all):

- MathJax 3.2.2 (Apache-2.0), ~2.0 MB: ``es5/tex-mml-chtml.js`` (what Sphinx loads), the CHTML
  woff-v2 fonts, and the TeX extensions that ``autoload`` fetches on demand (not
  ``all-packages.js``). The full ``es5/`` is 24 MB (speech rule engine, other outputs and fonts).
- @jupyter-widgets/html-manager 1.0.15 (BSD-3-Clause), ~2.0 MB: the html-manager release line of
  ipywidgets 8.x (``ipywidgets._version.__html_manager_version__ == "^1.0.1"``). We ship the
  standalone ``dist/embed.js`` (it bundles base, controls and output widgets and needs no
  require.js) and only the woff2 Font Awesome fonts it references (browsers that read woff2
  never request the eot/ttf/svg/woff fallbacks). Not ``embed-amd.js``: that one needs require.js
  on the page, and with require.js present Altair's HTML takes its AMD branch, which points
  require at the CDN.
- vega 5.33.1, vega-lite 5.20.1, vega-embed 6.29.0 (BSD-3-Clause), ~0.8 MB: the UMD ``.min.js``
  builds of the versions Altair 5.5 asks for (``alt.VEGA_VERSION == "5"``,
  ``alt.VEGALITE_VERSION == "5.20.1"``, ``alt.VEGAEMBED_VERSION == "6"``); tests/test_site.py
  fails if Altair and this table disagree.

Each package gets a LICENSE next to its files (the package's own, or the upstream license text
where the npm tarball ships none) plus the bundle's third-party notice where there is one.
The files are committed: CI and offline builds use them as they are; run this script only to
change a version. Wiring: ``_config.yml`` (``html_static_path``, ``mathjax_path``,
``nb_ipywidgets_js``) and ``book/_ext/offline_assets.py`` (vega on pages that embed a chart,
Altair's version hints, the MathJax 2 ``Hub.Queue`` shim).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "book" / "_assets" / "vendor"
MANIFEST = VENDOR / "VENDORED.json"

BSD3 = """BSD 3-Clause License

Copyright (c) {holder}
All rights reserved.

Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are met:

1. Redistributions of source code must retain the above copyright notice, this
   list of conditions and the following disclaimer.

2. Redistributions in binary form must reproduce the above copyright notice,
   this list of conditions and the following disclaimer in the documentation
   and/or other materials provided with the distribution.

3. Neither the name of the copyright holder nor the names of its
   contributors may be used to endorse or promote products derived from
   this software without specific prior written permission.

THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE
FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER
CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY,
OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
"""

# name -> (npm spec, target folder, [(glob inside the package, path inside the target)], license fallback holder)
# A glob ending in "/*" copies that folder's matching files flat into the target path.
PACKAGES = {
    "mathjax": {
        "spec": "mathjax@3.2.2",
        "dir": "mathjax",
        "files": [
            ("es5/tex-mml-chtml.js", "tex-mml-chtml.js"),
            ("es5/output/chtml/fonts/woff-v2/*.woff", "output/chtml/fonts/woff-v2/"),
            ("es5/input/tex/extensions/*.js", "input/tex/extensions/"),
        ],
        "exclude": ["es5/input/tex/extensions/all-packages.js"],
        "license_holder": None,  # ships LICENSE (Apache-2.0)
    },
    "@jupyter-widgets/html-manager": {
        "spec": "@jupyter-widgets/html-manager@1.0.15",
        "dir": "html-manager",
        "files": [
            ("dist/embed.js", "embed.js"),
            ("dist/*.woff2", ""),
            ("dist/embed.js.LICENSE.txt", "THIRD-PARTY-NOTICES.txt"),
        ],
        "exclude": [],
        "license_holder": "2015 Project Jupyter Contributors",
    },
    "vega": {
        "spec": "vega@5.33.1",
        "dir": "vega",
        "files": [("build/vega.min.js", "vega.min.js")],
        "exclude": [],
        "license_holder": "2015-2023, University of Washington Interactive Data Lab",
    },
    "vega-lite": {
        "spec": "vega-lite@5.20.1",
        "dir": "vega-lite",
        "files": [("build/vega-lite.min.js", "vega-lite.min.js")],
        "exclude": [],
        "license_holder": None,
    },
    "vega-embed": {
        "spec": "vega-embed@6.29.0",
        "dir": "vega-embed",
        "files": [("build/vega-embed.min.js", "vega-embed.min.js")],
        "exclude": [],
        "license_holder": None,
    },
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def npm_pack(spec: str, workdir: Path) -> Path:
    """Download one package tarball from the npm registry and extract it; returns its root."""
    out = subprocess.run(["npm", "pack", spec, "--silent"], cwd=workdir, check=True,
                         capture_output=True, text=True).stdout.split()[-1]
    dest = workdir / out.removesuffix(".tgz")
    with tarfile.open(workdir / out) as tar:
        tar.extractall(dest, filter="data")
    return dest / "package"


def vendor_one(name: str, cfg: dict, workdir: Path) -> dict:
    pkg = npm_pack(cfg["spec"], workdir)
    meta = json.loads((pkg / "package.json").read_text())
    target = VENDOR / cfg["dir"]
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for pattern, dest in cfg["files"]:
        matches = [p for p in sorted(pkg.rglob("*")) if p.is_file()
                   and fnmatch(p.relative_to(pkg).as_posix(), pattern)
                   and not any(fnmatch(p.relative_to(pkg).as_posix(), x) for x in cfg["exclude"])]
        if not matches:
            raise SystemExit(f"{cfg['spec']}: nothing matches {pattern}")
        for src in matches:
            out = target / dest / src.name if (dest == "" or dest.endswith("/")) else target / dest
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out)
    licenses = [p for p in pkg.iterdir() if p.name.upper().startswith(("LICENSE", "LICENCE"))]
    if licenses:
        shutil.copyfile(licenses[0], target / "LICENSE")
    elif cfg["license_holder"] and meta.get("license") == "BSD-3-Clause":
        (target / "LICENSE").write_text(BSD3.format(holder=cfg["license_holder"]))
    else:
        raise SystemExit(f"{cfg['spec']}: no LICENSE in the package and no fallback for {meta.get('license')}")
    files = {p.relative_to(VENDOR).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256(p)}
             for p in sorted(target.rglob("*")) if p.is_file()}
    return {"version": meta["version"], "license": meta.get("license"), "dir": cfg["dir"],
            "homepage": meta.get("homepage"), "files": files}


def refresh() -> dict:
    if shutil.which("npm") is None:
        raise SystemExit("npm not found: apt-get install npm (only needed to change a vendored version)")
    VENDOR.mkdir(parents=True, exist_ok=True)
    manifest = {"generated_by": "scripts/vendor_assets.py", "packages": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg in PACKAGES.items():
            print(f"npm pack {cfg['spec']} ...", flush=True)
            manifest["packages"][name] = vendor_one(name, cfg, Path(tmp))
    MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def check() -> list[str]:
    """Problems with the committed files: missing, changed, or not in the manifest."""
    manifest = json.loads(MANIFEST.read_text())
    problems, listed = [], set()
    for name, pkg in manifest["packages"].items():
        if pkg["version"] != PACKAGES[name]["spec"].rsplit("@", 1)[1]:
            problems.append(f"{name}: manifest has {pkg['version']}, script pins {PACKAGES[name]['spec']}")
        for rel, info in pkg["files"].items():
            listed.add(rel)
            path = VENDOR / rel
            if not path.is_file():
                problems.append(f"missing {rel}")
            elif sha256(path) != info["sha256"]:
                problems.append(f"changed {rel}")
    for path in VENDOR.rglob("*"):
        rel = path.relative_to(VENDOR).as_posix()
        if path.is_file() and path != MANIFEST and rel not in listed:
            problems.append(f"not in manifest: {rel}")
    return problems


def report(manifest: dict) -> None:
    total = 0
    for name, pkg in manifest["packages"].items():
        size = sum(f["bytes"] for f in pkg["files"].values())
        total += size
        print(f"  {name:32s} {pkg['version']:10s} {pkg['license']:14s} {size / 1e6:6.2f} MB  {len(pkg['files'])} files")
    print(f"  {'total':32s} {'':10s} {'':14s} {total / 1e6:6.2f} MB")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify committed files against VENDORED.json")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        report(json.loads(MANIFEST.read_text()))
        for p in problems:
            print("PROBLEM:", p)
        return 1 if problems else 0
    report(refresh())
    return 0


if __name__ == "__main__":
    sys.exit(main())
