"""Checks on the built website (_build/html); run by `make bookcheck` after the strict build."""

import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
pytestmark = pytest.mark.built


sys.path.insert(0, str(ROOT / "book" / "_ext"))
from book_toc import toc_files as walk_toc  # noqa: E402  (a plain module: no Sphinx needed; tested in test_site)
from site_checks import says_what_it_shows  # noqa: E402  (shared with test_browser)


def toc_files():
    return walk_toc(yaml.safe_load((ROOT / "_toc.yml").read_text()))


def page(rel):
    return (HTML / f"{rel}.html").read_text()


@pytest.mark.parametrize("rel", toc_files())
def test_every_toc_page_is_built_without_errors(rel):
    html = page(rel)
    assert "<title>" in html
    assert "Traceback (most recent call last)" not in html
    assert 'class="output traceback' not in html


def test_no_unresolved_glue_or_references():
    for rel in toc_files():
        html = page(rel)
        assert "glue:" not in html and "{glue" not in html, rel
        assert "??" not in re.sub(r"<script.*?</script>", "", html, flags=re.S), rel


@pytest.mark.parametrize("rel", [f for f in toc_files() if f.startswith("notebooks/")])
def test_chapter_has_colab_launch_link(rel):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = config["repository"]["url"].removeprefix("https://github.com/")
    expected = f"https://colab.research.google.com/github/{repo}/blob/{config['repository']['branch']}/{rel}.ipynb"
    assert expected in page(rel)


def test_chapter_1_shows_derivation_table_and_measured_roofline():
    html = page("notebooks/01_roofline_decode")
    assert "critical batch" in html.lower()
    assert "H100-SXM" in html and "MI300X" in html  # the table of critical batches
    assert html.count('<img alt="_images/') + html.count('src="../_images/') >= 1  # the measured plots
    assert "Takeaway" in html and "Problems to work" in html
    assert re.search(r"ridge of\s*<span[^>]*>\s*295", html)  # a glued number rendered in prose


@pytest.mark.parametrize("rel", [f for f in toc_files() if f.startswith("notebooks/")])
def test_every_glued_number_is_rendered(rel):
    # an unexecuted notebook builds without error but pastes nothing: count roles against filled spans
    import json

    cells = json.loads((ROOT / f"{rel}.ipynb").read_text())["cells"]
    roles = sum("".join(c["source"]).count("{glue:text}") for c in cells if c["cell_type"] == "markdown")
    filled = re.findall(r'<span class="pasted-text">([^<]+)</span>', page(rel))
    assert roles > 0 and len(filled) == roles, (roles, len(filled))


def _visible_text(html):
    """The page's text: tags dropped (each as a space), entities decoded, whitespace collapsed."""
    from html import unescape

    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)  # widget state holds old report text
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_advisor_page_shows_its_stored_reports_and_plots():
    # book/advisor.ipynb stores a report (display(Markdown(...)), rendered as GFM) and an S(B) plot per
    # deployment; the site is built from those outputs: each report's title and first table row, and every plot
    import json

    cells = json.loads((ROOT / "book" / "advisor.ipynb").read_text())["cells"]
    outputs = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])]
    reports = ["".join(o["data"]["text/markdown"]) for o in outputs if "text/markdown" in o.get("data", {})]
    plots = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(reports) >= 4 and len(plots) == len(reports)  # the notebook was executed (make refresh)
    html = page("book/advisor")
    text = _visible_text(html)
    for report in reports:
        title = re.search(r"\*\*(Does speculation pay\? [^*]+)\*\*", report).group(1)
        row = next(line for line in report.splitlines() if re.match(r"\| \d+ ", line))  # the table's first row
        cells_ = " ".join(c.strip() for c in row.strip().strip("|").split("|"))
        assert title in text, title
        assert " ".join(cells_.split()) in text, (title, cells_)  # a table, not a paragraph of pipes
    assert "| B " not in text  # GFM tables rendered (commonmark would leave the pipes)
    assert text.count("How to quote this speedup") == len(reports)
    assert html.count("<table") >= 2 * len(reports)  # each report's table and its checklist
    assert html.count('src="../_images/') >= len(plots)  # the plots
    assert "Traceback" not in html


# ---- figures and alt text ------------------------------------------------------------------------

def article(html):
    """The page's own content: the article, without the theme's header, sidebars and footer."""
    match = re.search(r'<article class="bd-article"[^>]*>(.*?)</article>', html, re.S)
    assert match, "no <article class=\"bd-article\"> in the page"
    return match.group(1)


def images(html):
    """(src, alt or None) of every <img> in the page's article."""
    from html.parser import HTMLParser

    found = []

    class Images(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag == "img":
                attrs = dict(attrs)
                found.append((attrs.get("src", ""), attrs.get("alt")))

    Images().feed(article(html))
    return found


@pytest.mark.parametrize("src, alt, ok", [
    ("../_images/ab12.png", None, False), ("../_images/ab12.png", "", False),
    ("../_images/ab12.png", "../_images/ab12.png", False), ("../_images/ab12.png", "png", False),
    ("../_images/ab12.png", "Output 3", False), ("../_images/ab12.png", "a figure", False),
    ("../_images/ab12.png", "Plot of S(B) against batch size on four GPUs", True),
])
def test_alt_text_check_rejects_what_says_nothing(src, alt, ok):
    assert says_what_it_shows(src, alt) is ok


@pytest.mark.parametrize("rel", [f for f in toc_files() if f.startswith("notebooks/")])
def test_every_chapter_has_a_figure(rel):
    assert images(page(rel)), f"{rel}: no figure on the page"


@pytest.mark.parametrize("rel", toc_files())
def test_every_figure_says_what_it_shows(rel):
    bad = [(src, alt) for src, alt in images(page(rel)) if not says_what_it_shows(src, alt)]
    assert bad == [], "images without alt text that says what they show (cell metadata mystnb.image.alt)"


def test_the_intro_states_the_book_in_a_figure():
    html = page("book/intro")
    assert len(images(html)) >= 1 and 'id="intro-thesis-figure"' in html
    assert "The book in one figure" in _visible_text(html)


@pytest.mark.parametrize("rel", toc_files())
def test_every_page_opens_with_its_title(rel):
    # the install cell stays first in the notebook (Colab) but is not on the site (remove-cell)
    body = article(page(rel))
    first_heading = body.find("<h1")
    assert first_heading >= 0
    assert 'class="cell' not in body[:first_heading], f"{rel}: a cell comes before the title"
    assert "find_spec" not in _visible_text(page(rel)), f"{rel}: the install cell is on the page"
