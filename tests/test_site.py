"""The website's plumbing without a browser: vendored JavaScript, no CDN in the built pages,
internal links, the generated status page. The ``built`` ones check _build/html (make bookcheck: pytest -m built)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
VENDOR = ROOT / "book" / "_assets" / "vendor"
sys.path.insert(0, str(ROOT / "book" / "_ext"))


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vendor_assets = _load("vendor_assets", ROOT / "scripts" / "vendor_assets.py")


def manifest() -> dict:
    return json.loads((VENDOR / "VENDORED.json").read_text())["packages"]


def test_vendored_files_match_their_manifest():
    assert vendor_assets.check() == []


def test_every_vendored_package_has_a_license():
    for name, pkg in manifest().items():
        assert (VENDOR / pkg["dir"] / "LICENSE").is_file(), name


def test_vendored_javascript_stays_small():
    total = sum(f["bytes"] for pkg in manifest().values() for f in pkg["files"].values())
    assert total < 8e6, f"{total / 1e6:.1f} MB vendored: trim it in scripts/vendor_assets.py"


def test_vendored_vega_is_what_altair_asks_for():
    alt = pytest.importorskip("altair")
    from offline_assets import satisfies

    have = {name: pkg["version"] for name, pkg in manifest().items()}
    assert satisfies(have["vega"], alt.VEGA_VERSION)
    assert satisfies(have["vega-lite"], alt.VEGALITE_VERSION)
    assert satisfies(have["vega-embed"], alt.VEGAEMBED_VERSION)


def test_vendored_html_manager_is_the_ipywidgets_line():
    from ipywidgets._version import __html_manager_version__  # "^1.0.1" for ipywidgets 8.1

    major = __html_manager_version__.lstrip("^~=").split(".")[0]
    assert manifest()["@jupyter-widgets/html-manager"]["version"].split(".")[0] == major


def test_config_points_at_vendored_files_not_a_cdn():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
    assert not (ROOT / "_static").exists(), "a root _static/ gets every .js in it added to every page"
    assert config["html_static_path"] == ["book/_assets"]
    assert (ROOT / "book" / "_assets" / config["mathjax_path"]).is_file()
    for path in config["nb_ipywidgets_js"]:
        assert "://" not in path and (ROOT / "book" / "_assets" / path).is_file()


def test_satisfies():
    from offline_assets import satisfies

    assert satisfies("5.33.1", "5") and satisfies("5.20.1", "5.20.1")
    assert not satisfies("6.0.0", "5") and not satisfies("5.20.0", "5.20.1")


def test_status_toc_files_walks_parts_and_sections():
    from book_toc import toc_files

    toc = {"root": "a", "parts": [{"chapters": [{"file": "b", "sections": [{"file": "c"}]}, {"url": "x"}]}]}
    assert toc_files(toc) == ["a", "b", "c"]
    assert toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))[0] == "book/intro"


def test_front_pages_link_every_chapter_of_the_toc():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    chapters = [c["file"].split("/")[-1] for part in toc["parts"] if part.get("caption") == "Chapters"
                for c in part["chapters"]]
    cells = json.loads((ROOT / "book" / "intro.ipynb").read_text())["cells"]
    intro = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown").split("## The chapters")[1]
    numbered = re.findall(r"^(\d+)\. (.+)$", intro, re.M)
    assert [int(n) for n, _ in numbered] == list(range(1, len(numbered) + 1))
    # the list is the table of contents in order; a chapter not in it yet is named in bold, not linked
    linked = [m for _, line in numbered for m in re.findall(r"</notebooks/(\w+)>", line)]
    assert linked == chapters
    for n, line in numbered:
        assert "</notebooks/" in line or (line.startswith("**") and not list((ROOT / "notebooks").glob(f"0{n}_*"))), n
    # the onboarding page links the chapters that exist and names none by bare file name
    onboarding = (ROOT / "book" / "onboarding.md").read_text()
    for name in chapters:
        assert f"{{doc}}`../notebooks/{name}`" in onboarding or f"</notebooks/{name}>" in onboarding, name
        assert f"`{name}`" not in onboarding.replace(f"{{doc}}`../notebooks/{name}`", ""), name


# ---- on the built site -------------------------------------------------------------------------

class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for attr in ("href", "src"):
            if attrs.get(attr) is not None:
                self.refs.append((tag, attr, attrs[attr]))


def _parse(path: Path) -> _Refs:
    parser = _Refs()
    parser.feed(path.read_text(errors="replace"))
    return parser


def _pages() -> list[Path]:
    return sorted(p for p in HTML.rglob("*.html") if "_static" not in p.parts and "_sources" not in p.parts)


@pytest.mark.built
def test_built_pages_load_no_script_or_style_from_another_host():
    offenders = []
    for page in _pages():
        html = page.read_text(errors="replace")
        for tag in re.findall(r"<(?:script|link|img|iframe)\b[^>]*>", html):
            if re.search(r"""\b(?:src|href)=["']?(?:https?:)?//""", tag) and not tag.startswith("<a"):
                if tag.startswith("<link") and not re.search(r"rel=\"?(stylesheet|preload|icon|modulepreload)", tag):
                    continue
                offenders.append(f"{page.relative_to(HTML)}: {tag[:160]}")
    assert offenders == []


@pytest.mark.built
def test_internal_links_and_anchors_resolve():
    """`make linkcheck`: every relative href/src in every built page points at a file that exists,
    and every #anchor into a page exists there. Offline; Sphinx's -n covers cross-references at build
    time, this also covers raw HTML links, images and assets. External URLs: `make linkcheck-external`."""
    ids: dict[Path, set[str]] = {}
    broken = []
    for page in _pages():
        refs = _parse(page)
        ids.setdefault(page, refs.ids)
        for tag, attr, value in refs.refs:
            url = urlparse(value)
            if url.scheme or value.startswith(("//", "mailto:", "javascript:", "data:")) or not value.strip():
                continue
            target = (page.parent / unquote(url.path)).resolve() if url.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(HTML)}: {tag} {attr}={value}")
                continue
            if url.fragment and target.suffix == ".html" and tag == "a":
                if target not in ids:
                    ids[target] = _parse(target).ids
                if unquote(url.fragment) not in ids[target]:
                    broken.append(f"{page.relative_to(HTML)}: #{url.fragment} not in {target.relative_to(HTML)}")
    assert broken == []


@pytest.mark.built
def test_status_page_shows_each_notebooks_recorded_provenance():
    from html import unescape

    html = unescape((HTML / "book" / "status.html").read_text())  # a host name like "Xeon @ 2.80GHz" is &#64; there
    from book_toc import toc_files

    for rel in toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text())):
        path = ROOT / f"{rel}.ipynb"
        if not path.is_file():
            continue
        meta = json.loads(path.read_text())["metadata"].get("specnotes")
        if meta is None:
            assert "not recorded" in html
            continue
        date = meta["date"].replace("T", " ").replace("Z", " UTC")
        assert date in html and meta.get("host", meta["device"]) in html and meta["torch"] in html, rel
        if meta.get("dtype"):  # which dtype the chapter measured in, and why (measure.provenance)
            assert meta["dtype_reason"] in html, rel
        assert f"{float(meta['seconds']):.1f} s" in html, rel
    from importlib.metadata import version

    assert version("jupyter-book") in html and version("myst-nb") in html
    for pkg in manifest().values():
        assert pkg["version"] in html


def test_png_text_reads_the_font_record_plots_writes():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from site_checks import png_text, smallest_text_px

    from specnotes.pages import plots

    fig, ax = plots.figure()
    ax.set_title("a title")
    text = png_text(plots.figure_png(fig))
    assert float(text[plots.FONT_RECORD]) == pytest.approx(plots.MIN_FONT * plots.DPI / 72, abs=1e-3)
    # shown at half its natural width, its smallest text renders at half its size
    assert smallest_text_px(text, 700, 350) == pytest.approx(float(text[plots.FONT_RECORD]) / 2)
    assert smallest_text_px({}, 700, 350) is None  # a PNG made without the record
    with pytest.raises(ValueError, match="not a PNG"):
        png_text(b"GIF89a")


def test_the_pages_stylesheets_are_in_the_static_path():
    """_config.yml's html_css_files (book/_assets/specnotes/pages.css: pages that fit a phone) exist where Sphinx
    copies them from, so a renamed file fails here, not silently on the website."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
    assert "specnotes/pages.css" in config["html_css_files"]
    for path in config["html_css_files"]:
        assert (ROOT / "book" / "_assets" / path).is_file(), path
