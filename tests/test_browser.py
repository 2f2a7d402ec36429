"""The built website in a real headless browser, with no internet: `make browser` (part of `make test`).

Serves ``_build/html`` on 127.0.0.1 from a thread and loads every page of ``_toc.yml`` in Debian's
chromium through Playwright. Every request that leaves 127.0.0.1 is recorded and aborted. Per page:
no such request, no failed request, no JavaScript error (but the theme's known one), math typeset by
MathJax, every image decoded, every stored widget rendered by the html-manager, and every Vega-Lite
chart drawn and re-drawn when one of its sliders moves. Every page again on a 390-px phone: nothing wider
than the screen. Every figure at both sizes: its smallest text (recorded in its PNG by specnotes.pages.plots) renders at
``plots.MIN_RENDERED_PX`` or more at the width the page shows it. Tables and stored outputs a reader can read
(issue 47): no word of a table cell broken inside a syllable, no table wider than its column at 1280 px (nor a
table of words on a phone), no stored progress bar, no legend over a data point (the PNG's record), no chart labels
running together on a phone, Chapter 6 at most half as tall as it was with its long tables folded, the intro's
chapter count from the TOC and its figure at 9 px on a phone.

Needs the built book (make book; selected by ``-m browser``) and ``/usr/bin/chromium``
(``apt-get install chromium``; or set ``CHROMIUM=/path``). Without chromium the tests skip, except
under ``CI=true`` where they fail.
``SPECNOTES_SCREENSHOTS=/some/dir`` also saves a full-page screenshot of each page there; ``SPECNOTES_SITE=/path``
checks another built site (an older revision's ``_build/html``) instead of this checkout's.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# SPECNOTES_SITE: another built site to check (an older revision's _build/html, to show a new test failing there)
HTML = Path(os.environ.get("SPECNOTES_SITE") or ROOT / "_build" / "html")
pytestmark = [pytest.mark.built, pytest.mark.browser]

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
# Console errors that are known and harmless. Name each one; anything else fails.
KNOWN_CONSOLE_ERRORS = {
    # sphinx-thebe declares it in two inline scripts on every Jupyter Book 1.x page.
    "theme: THEBE_JS_URL declared twice": re.compile(r"Identifier 'THEBE_JS_URL' has already been declared"),
}
LOCAL_HOSTS = {"127.0.0.1"}
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


sys.path.insert(0, str(ROOT / "book" / "_ext"))
from book_toc import toc_files  # noqa: E402  (the walker the status page uses; no Sphinx needed)

PAGES = toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def site():
    if not (HTML / f"{PAGES[0]}.html").is_file():
        pytest.fail(f"{HTML} is not built: run `make book` first")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(HTML)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _missing(why: str):
    message = f"{why}: install it with `apt-get install chromium` (Debian), or set CHROMIUM=/path/to/chromium"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " (CI=true: the browser tests are required)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def browser():
    exe = os.environ.get("CHROMIUM") or "/usr/bin/chromium"
    if not (Path(exe).is_file() and os.access(exe, os.X_OK)):
        exe = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    if not exe:
        _missing("no chromium found")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright python package is missing (pip install playwright)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class Visit:
    """One page load with everything the browser reported about it."""

    def __init__(self, browser, base: str, rel: str, viewport: dict | None = None, phone: bool = False):
        self.rel = rel
        self.external: list[str] = []
        self.failed: list[str] = []
        self.errors: list[str] = []
        screen = {"device_scale_factor": 2, "is_mobile": True, "has_touch": True} if phone else {}
        self.context = browser.new_context(service_workers="block", viewport=viewport or DESKTOP, **screen)
        self.page = self.context.new_page()
        self.context.route("**/*", self._route)
        self.page.on("requestfailed", self._request_failed)
        self.page.on("response", lambda r: r.status >= 400 and self.failed.append(f"{r.status} {r.url}"))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.goto(f"{base}/{rel}.html", wait_until="load")
        self._settle()

    def _route(self, route):
        url = route.request.url
        parsed = urlparse(url)
        if parsed.scheme in ("http", "https", "ws", "wss") and parsed.hostname not in LOCAL_HOSTS:
            self.external.append(url)
            route.abort("blockedbyclient")
        else:
            route.continue_()

    def _request_failed(self, request):
        if request.url not in self.external:
            self.failed.append(f"{request.failure} {request.url}")

    def _settle(self):
        page = self.page
        # MathJax 3 typesets after its startup promise; then any output it adds (fonts) loads.
        page.evaluate("""async () => {
            const mj = window.MathJax;
            if (mj && mj.startup && mj.startup.promise) await mj.startup.promise;
        }""")
        views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
        if views:
            try:
                page.wait_for_function(WIDGETS_RENDERED, timeout=20_000)
            except Exception:
                pass  # test_widgets_render reports which ones
        if page.evaluate(CHARTS_EXPECTED):
            try:
                page.wait_for_function(CHARTS_DRAWN, timeout=20_000)
            except Exception:
                pass  # test_vega_charts_draw_and_react reports it
        page.wait_for_load_state("networkidle")

    def unexpected_errors(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in KNOWN_CONSOLE_ERRORS.values())]

    def close(self):
        self.context.close()


WIDGETS_RENDERED = """() => [...document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')]
    .every(s => { const w = s.previousElementSibling;
                  return w && w.classList.contains('widget-subarea') && w.querySelector('.jupyter-widgets'); })"""
# Charts the page embeds (Altair's HTML output calls vegaEmbed from an inline script); vega-embed
# gives each drawn one the class .vega-embed, so a chart whose libraries never loaded has none.
CHARTS_EXPECTED = """() => [...document.querySelectorAll('script:not([src])')]
    .filter(s => s.textContent.includes('vegaEmbed(')).length"""
CHARTS_DRAWN = f"""() => document.querySelectorAll('.vega-embed').length >= ({CHARTS_EXPECTED})()
    && [...document.querySelectorAll('.vega-embed')].every(e => e.querySelector('svg.marks, canvas.marks'))
    || document.querySelector('.cell_output .error')"""


def _visits(browser, site, phone: bool):
    """Each page loaded once at one screen size, shared by the checks below; screenshots if asked for."""
    cache: dict[str, Visit] = {}
    shots = os.environ.get("SPECNOTES_SCREENSHOTS")

    def visit(rel: str) -> Visit:
        if rel not in cache:
            cache[rel] = Visit(browser, site, rel, PHONE if phone else DESKTOP, phone=phone)
            if shots:
                Path(shots).mkdir(parents=True, exist_ok=True)
                name = ("phone__" if phone else "") + rel.replace("/", "__")
                cache[rel].page.screenshot(path=str(Path(shots) / f"{name}.png"), full_page=True)
        return cache[rel]

    return visit, cache


@pytest.fixture(scope="module")
def visits(browser, site):
    """Every page at 1280 px."""
    visit, cache = _visits(browser, site, phone=False)
    yield visit
    for v in cache.values():
        v.close()


@pytest.fixture(scope="module")
def phone_visits(browser, site):
    """Every page on a 390-px phone (device scale 2, mobile viewport), settled as at 1280 px."""
    visit, cache = _visits(browser, site, phone=True)
    yield visit
    for v in cache.values():
        v.close()


@pytest.mark.parametrize("rel", PAGES)
def test_no_request_leaves_localhost(visits, rel):
    assert visits(rel).external == [], "the page asked the internet for these (vendor them: scripts/vendor_assets.py)"


@pytest.mark.parametrize("rel", PAGES)
def test_no_failed_request(visits, rel):
    assert visits(rel).failed == []


@pytest.mark.parametrize("rel", PAGES)
def test_no_javascript_errors(visits, rel):
    assert visits(rel).unexpected_errors() == []


@pytest.mark.parametrize("rel", PAGES)
def test_math_is_typeset(visits, rel):
    page = visits(rel).page
    result = page.evaluate("""() => {
        const math = [...document.querySelectorAll('.math, .amsmath')];
        const body = document.querySelector('main') || document.body;
        const copy = body.cloneNode(true);
        copy.querySelectorAll('pre, code, script, style, textarea, .highlight, mjx-container').forEach(e => e.remove());
        const text = copy.textContent;
        return {math: math.length,
                untypeset: math.filter(e => !e.querySelector('mjx-container') && e.tagName !== 'MJX-CONTAINER')
                               .map(e => e.textContent.slice(0, 60)),
                containers: document.querySelectorAll('mjx-container').length,
                raw: (text.match(/\\\\[(\\[][^]{0,40}/g) || []).slice(0, 5),
                mjxErrors: [...document.querySelectorAll('mjx-merror')].map(e => e.textContent.slice(0, 60)),
                widgetTex: [...document.querySelectorAll('.widget-subarea')].map(w => {
                    const c = w.cloneNode(true);
                    c.querySelectorAll('mjx-container, input, textarea').forEach(e => e.remove());
                    return (c.textContent.match(/\\$[^$]*\\\\[A-Za-z][^$]*\\$/g) || []).join(' ');
                }).filter(t => t)};
    }""")
    assert result["raw"] == [], "raw TeX left in the page text"
    assert result["mjxErrors"] == [], "MathJax could not parse these"
    assert result["widgetTex"] == [], "widget labels with $...$ TeX left untypeset (see book/_assets/specnotes)"
    if result["math"]:
        assert result["containers"] > 0, "math on the page but MathJax rendered nothing"
        assert result["untypeset"] == []


@pytest.mark.parametrize("rel", PAGES)
def test_images_load(visits, rel):
    broken = visits(rel).page.evaluate("""async () => {
        const imgs = [...document.querySelectorAll('main img, article img')];
        await Promise.all(imgs.map(i => i.decode().catch(() => null)));
        return imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'));
    }""")
    assert broken == []


@pytest.mark.parametrize("rel", PAGES)
def test_widgets_render(visits, rel):
    page = visits(rel).page
    missing = page.evaluate("""() => [...document.querySelectorAll(
            'script[type="application/vnd.jupyter.widget-view+json"]')]
        .filter(s => { const w = s.previousElementSibling;
                       return !(w && w.classList.contains('widget-subarea') && w.querySelector('.jupyter-widgets')); })
        .map(s => s.textContent.trim().slice(0, 120))""")
    assert missing == [], "stored widget views the html-manager did not render"


SNAPSHOT = """(el) => {
    const svg = [...el.querySelectorAll('svg text')].map(t => t.textContent).join('|') + '#'
              + [...el.querySelectorAll('svg path')].map(p => p.getAttribute('d')).join('|');
    const canvas = [...el.querySelectorAll('canvas')]
        .map(c => { try { return c.toDataURL(); } catch (e) { return ''; } });
    return svg + '#' + canvas.join('|');
}"""


@pytest.mark.parametrize("rel", PAGES)
def test_vega_charts_draw_and_react(visits, rel):
    page = visits(rel).page
    errors = page.locator(".cell_output .error")
    assert errors.count() == 0, errors.first.text_content()
    charts = page.locator(".vega-embed")
    assert charts.count() >= page.evaluate(CHARTS_EXPECTED), "charts on the page that vega-embed never drew"
    for i in range(charts.count()):
        chart = charts.nth(i)
        assert chart.locator(".error").count() == 0, chart.locator(".error").first.text_content()
        assert chart.locator("svg.marks, canvas.marks").count() > 0, f"chart {i} was not drawn"
        sliders = chart.locator(".vega-bindings input[type=range]")
        for j in range(sliders.count()):
            slider = sliders.nth(j)
            before = chart.evaluate(SNAPSHOT)
            lo, hi, value = (slider.get_attribute("min"), slider.get_attribute("max"), slider.input_value())
            target = lo if value != lo else hi
            slider.fill(target)
            try:
                page.wait_for_function(f"([el, before]) => ({SNAPSHOT})(el) !== before",
                                       arg=[chart.element_handle(), before], timeout=5_000)
            except Exception:
                pytest.fail(f"chart {i}: moving slider {j} "
                            f"({slider.get_attribute('name')}) from {value} to {target} changed nothing")
            slider.fill(value)  # leave the page as it was for the next slider


def test_known_error_is_still_the_only_one(visits):
    """If the theme fixes its THEBE_JS_URL error, drop it from KNOWN_CONSOLE_ERRORS (keep the list honest)."""
    seen = " ".join(e for rel in PAGES for e in visits(rel).errors)
    stale = [name for name, pattern in KNOWN_CONSOLE_ERRORS.items() if not pattern.search(seen)]
    assert stale == [], f"known errors no longer seen: {stale}"


# ---- figures: every chapter has one, each says what it shows, each fits a phone -------------------

from site_checks import says_what_it_shows  # noqa: E402  (tests/site_checks.py, shared with test_built_book)

FIGURES = """() => [...document.querySelectorAll('article.bd-article img')].map(i => {
    const r = i.getBoundingClientRect();
    return {src: i.getAttribute('src'), alt: i.getAttribute('alt'), width: r.width, height: r.height,
            left: r.left, right: r.right, natural: i.naturalWidth};
})"""


@pytest.mark.parametrize("rel", PAGES)
def test_figures_are_drawn_and_say_what_they_show(visits, rel):
    figures = visits(rel).page.evaluate(FIGURES)
    if rel.startswith("notebooks/"):
        assert figures, "a chapter page without a figure"
    assert [f["src"] for f in figures if not says_what_it_shows(f["src"], f["alt"])] == [], "alt text says nothing"
    assert [f["src"] for f in figures if not (f["natural"] > 0 and f["width"] > 50)] == [], "figures not drawn"


SIDEBAR = """() => { const s = document.querySelector('.bd-sidebar-secondary');
    const r = s && s.getBoundingClientRect(); return r && r.width > 0 ? r.left : null; }"""


@pytest.mark.parametrize("rel", PAGES)
def test_no_figure_runs_under_the_contents_sidebar(visits, rel):
    """At 1280 px the page's contents sit in a column on the right: a figure wider than the text (a cell tagged
    full-width, say) is drawn under it and loses its right side."""
    page = visits(rel).page
    edge = page.evaluate(SIDEBAR)
    if edge is None:
        pytest.skip("no contents sidebar on this page at 1280 px")
    under = [(f["src"], round(f["right"]), round(edge)) for f in page.evaluate(FIGURES) if f["right"] > edge + 1]
    assert under == [], "figures drawn under the contents sidebar"


@pytest.fixture(scope="module")
def phone(phone_visits):
    return lambda rel: phone_visits(rel).page


@pytest.mark.parametrize("rel", [p for p in PAGES if p.startswith("notebooks/")] + ["book/intro", "book/claims"])
def test_figures_fit_a_phone(phone, rel):
    page = phone(rel)
    width = page.evaluate("() => document.documentElement.clientWidth")
    figures = page.evaluate(FIGURES)
    wide = [(f["src"], round(f["left"]), round(f["right"])) for f in figures
            if f["width"] > 0 and (f["left"] < -1 or f["right"] > width + 1)]
    assert wide == [], f"figures wider than a {width}px screen"
    assert all(f["natural"] > 0 for f in figures)
    # the page opens with its title, not with the install cell
    first = page.evaluate("() => { const a = document.querySelector('article.bd-article');"
                          " const h = a.querySelector('h1'); const c = a.querySelector('.cell');"
                          " return {title: !!h, cellFirst: !!(c && h && (c.compareDocumentPosition(h) & 4))}; }")
    assert first == {"title": True, "cellFirst": False}


# ---- text a reader can read, pages that fit a phone --------------------------------------------

from site_checks import png_text, smallest_text_px  # noqa: E402

from specnotes.pages.plots import MIN_RENDERED_PX  # noqa: E402

# Every figure of the page but the claims page's thumbnails (links to the figures, small on purpose): where it is
# shown, its natural width, the figure number it is captioned with, and its PNG (a file of _images or inline).
SHOWN = """() => [...document.querySelectorAll('article.bd-article img')]
    .filter(i => !i.classList.contains('specnotes-thumb-image') && i.getBoundingClientRect().width > 0)
    .map(i => { const f = i.closest('figure'); const n = f && f.querySelector('.caption-number');
                return {url: i.currentSrc || i.src, shown: i.getBoundingClientRect().width, natural: i.naturalWidth,
                        name: (n ? n.textContent.trim() + ' ' : '') + ((i.getAttribute('src') || '').startsWith('data:')
                              ? "a widget's image" : (i.getAttribute('src') || '').split('/').pop().slice(-24))}; })"""


def _png(url: str) -> bytes:
    if url.startswith("data:"):
        import base64

        return base64.b64decode(url.split(",", 1)[1])
    return (HTML / unquote(urlparse(url).path).lstrip("/")).read_bytes()


def _illegible(page, screen: str) -> list[str]:
    """Each figure whose smallest text renders under MIN_RENDERED_PX[screen], or that has no record of it."""
    bad = []
    for f in page.evaluate(SHOWN):
        px = smallest_text_px(png_text(_png(f["url"])), f["natural"], f["shown"])
        if px is None:
            bad.append(f"{f['name']}: no record of its smallest text (made before specnotes.pages.plots kept one: "
                       "re-execute the notebook)")
        elif px < MIN_RENDERED_PX[screen]:
            bad.append(f"{f['name']}: smallest text {px:.1f} px (shown {f['shown']:.0f} of {f['natural']} px wide)")
    return bad


@pytest.mark.parametrize("rel", PAGES)
def test_figure_text_is_legible_at_1280px(visits, rel):
    """Every figure's smallest text renders at MIN_RENDERED_PX["desktop"] or more in the 1280-px layout."""
    bad = _illegible(visits(rel).page, "desktop")
    assert not bad, f"text under {MIN_RENDERED_PX['desktop']:g} px at 1280 px:\n" + "\n".join(bad)


@pytest.mark.parametrize("rel", PAGES)
def test_figure_text_is_legible_on_a_phone(phone_visits, rel):
    """... and MIN_RENDERED_PX["phone"] or more on a 390-px phone."""
    bad = _illegible(phone_visits(rel).page, "phone")
    assert not bad, f"text under {MIN_RENDERED_PX['phone']:g} px on a 390-px phone:\n" + "\n".join(bad)


WIDEST = f"""() => {{ const out = [];  // what runs past the phone's edge: inline content (code, links, tables)
    for (const e of document.querySelectorAll('article.bd-article *')) {{
        const r = e.getBoundingClientRect();
        if (r.right <= {PHONE["width"]} + 1 || r.width === 0 || !/^inline|^table$/.test(getComputedStyle(e).display))
            continue;
        let scrolls = false;  // inside a box that scrolls or clips it: that box's business, not the page's
        for (let a = e.parentElement; a && a !== document.body; a = a.parentElement)
            if (getComputedStyle(a).overflowX !== 'visible') {{ scrolls = true; break; }}
        if (!scrolls) out.push(`${{e.tagName.toLowerCase()}} to ${{Math.round(r.right)}} px: `
                               + (e.textContent || '').trim().slice(0, 60));
    }}
    if (!out.length)  // text with no element of its own (a bare URL): the innermost boxes it overflows
        for (const e of [...document.querySelectorAll('article.bd-article *')].reverse())
            if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === 'visible' && out.length < 2)
                out.push(`${{e.tagName.toLowerCase()}}.${{String(e.className).split(' ')[0]}} overflows: `
                         + (e.textContent || '').trim().slice(0, 60));
    return out.slice(0, 5); }}"""


@pytest.mark.parametrize("rel", PAGES)
def test_nothing_is_wider_than_a_phone(phone_visits, rel):
    """At 390 px no page scrolls sideways: its widest element fits the screen (long code breaks, wide tables
    and equations scroll in their own box, book/_assets/specnotes/pages.css)."""
    page = phone_visits(rel).page
    width = page.evaluate("() => ({scroll: document.documentElement.scrollWidth, inner: innerWidth})")
    # a mobile browser widens its layout to what overflows, so innerWidth alone would agree with any page
    assert width["inner"] == PHONE["width"] and width["scroll"] <= width["inner"], page.evaluate(WIDEST)


# ---- tables, stored outputs and legends a reader can read (issue 47, part 5) ---------------------------

# Each word of a table cell that the browser broke inside a syllable: its column is narrower than the word
# ("mod/el", "ear/ly-/exi/t"). A break after a hyphen, a dash or a slash ("early-/exit") is a line break, not that.
BROKEN_WORDS = """() => { const out = [];
    for (const cell of document.querySelectorAll('article.bd-article table th, article.bd-article table td')) {
        const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            if (node.parentElement.closest('mjx-container, script, style')) continue;
            for (const w of node.textContent.matchAll(/\\S+/g))
                for (const m of w[0].matchAll(/[^-\u2010-\u2014\\/]+[-\u2010-\u2014\\/]*/g)) {
                    const r = document.createRange(), at = w.index + m.index;
                    r.setStart(node, at); r.setEnd(node, at + m[0].length);
                    const tops = new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top)));
                    if (tops.size > 1) out.push(w[0]);
                }
        }
    }
    return [...new Set(out)].slice(0, 8); }"""

# Each table wider than the box it is shown in: its last columns are cut off, or scroll out of sight. ``frames``: a
# cell's HTML table (a pandas table of numbers) may scroll inside its own box (book/_assets/specnotes/pages.css), as
# on a phone, where such a table has more columns than 342 px hold.
CLIPPED_TABLES = """(frames) => { const out = [];
    const article = document.querySelector('article.bd-article');
    for (const t of article.querySelectorAll('table')) {
        if (!t.getBoundingClientRect().width || (frames && t.closest('.output.text_html'))) continue;
        let box = article;  // the nearest box that clips or scrolls it, else the text column
        for (let a = t.parentElement; a && a !== article; a = a.parentElement)
            if (getComputedStyle(a).overflowX !== 'visible') { box = a; break; }
        const over = t.getBoundingClientRect().right - box.getBoundingClientRect().right;
        const hidden = box === article ? 0 : box.scrollWidth - box.clientWidth;
        if (over > 1 || hidden > 1) {
            const head = (t.querySelector('th, td') || t).textContent.trim().slice(0, 30);
            const wider = Math.round(Math.max(over, hidden));
            out.push(`a table of ${t.rows.length} rows (first cell "${head}") is ${wider} px wider than its box`);
        }
    }
    return out; }"""


def _both(request, rel):
    visits = request.getfixturevalue("phone_visits" if request.param == "phone" else "visits")
    return visits(rel).page


@pytest.fixture(params=["desktop", "phone"])
def screen(request):
    return request.param


@pytest.mark.parametrize("rel", PAGES)
def test_no_table_column_is_narrower_than_its_longest_word(request, screen, rel):
    page = request.getfixturevalue("phone_visits" if screen == "phone" else "visits")(rel).page
    broken = page.evaluate(BROKEN_WORDS)
    assert broken == [], f"words broken across lines in a table cell at {screen} width: {broken}"


@pytest.mark.parametrize("rel", PAGES)
def test_no_table_is_clipped(request, screen, rel):
    """At 1280 px every table fits the text column, none scrolls. On a 390-px phone every table of words (Markdown,
    a report's) fits the screen; a pandas table of numbers may scroll inside its own box."""
    page = request.getfixturevalue("phone_visits" if screen == "phone" else "visits")(rel).page
    clipped = page.evaluate(CLIPPED_TABLES, screen == "phone")
    assert clipped == [], f"tables cut off at {screen} width: {clipped}"


PROGRESS_TEXT = re.compile(r"\b\d+it \[|\?it/s\]|\bit/s\]|\d+/\?\s|\b0it\b|\|\s*\d+/\d+ \[\d\d:\d\d")
PROGRESS_SHOWN = """() => ({
    bars: [...document.querySelectorAll('article.bd-article .widget-progress, article.bd-article progress')]
          .filter(e => e.getBoundingClientRect().width > 0).length,
    text: (document.querySelector('article.bd-article') || document.body).innerText })"""


@pytest.mark.parametrize("rel", PAGES)
def test_no_stored_progress_bar_shows(visits, rel):
    """A progress bar is live feedback while a cell runs; stored, it says "batch: 0it [00:00, ?it/s]" to no one."""
    shown = visits(rel).page.evaluate(PROGRESS_SHOWN)
    text = [m.group(0) for m in PROGRESS_TEXT.finditer(shown["text"])]
    assert shown["bars"] == 0 and text == [], f"{shown['bars']} progress bars and their text {text[:4]} in the page"


def _legend_record(f) -> str:
    record = png_text(_png(f["url"]))
    if plots.LEGEND_RECORD not in record:
        return f"{f['name']}: no record of its legends (made before specnotes.pages.plots kept one: re-execute it)"
    n = int(record[plots.LEGEND_RECORD])
    return f"{f['name']}: its legend covers {n} data points" if n else ""


from specnotes.pages import plots  # noqa: E402


@pytest.mark.parametrize("rel", PAGES)
def test_no_legend_covers_a_data_point(visits, rel):
    """Every figure's PNG records how many data points its legends covered when it was saved
    (``plots.LEGEND_RECORD``; ``plots.clear_legends`` moves a legend off the data first): none."""
    bad = [x for x in (_legend_record(f) for f in visits(rel).page.evaluate(SHOWN)) if x]
    assert not bad, "\n".join(bad)


OVERLAPPING_LABELS = """() => { const out = [];
    for (const chart of document.querySelectorAll('article.bd-article .vega-embed svg')) {
        for (const group of chart.querySelectorAll('g.role-axis-label, g.mark-text')) {
            const boxes = [...group.querySelectorAll('text')].map(t => [t.textContent, t.getBoundingClientRect()])
                .filter(([s, r]) => s.trim() && r.width > 0);
            for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
                const [a, p] = boxes[i], [b, q] = boxes[j];
                if (p.left < q.right + 3 && q.left < p.right + 3 && p.top < q.bottom - 1 && q.top < p.bottom - 1)
                    out.push(`"${a}" and "${b}"`);
            }
        }
    }
    for (const label of document.querySelectorAll('article.bd-article .vega-bind-name, '
                                                  + 'article.bd-article .widget-label'))
        if (/[\\^_=]\\s*$/.test(label.textContent.trim())) out.push(`a slider named "${label.textContent.trim()}"`);
    return out.slice(0, 6); }"""


@pytest.mark.parametrize("rel", PAGES)
def test_chart_labels_do_not_run_together_on_a_phone(phone_visits, rel):
    """On a 390-px phone no two labels of a chart's axis overlap or come within 3 px ("512 1,024" ran together), and no
    slider's name ends in an operator that its readout completes ("N = 2^ [slider] 7"). The labels are read from a
    chart drawn as SVG; vega-embed's default canvas shows none to the page (the explorers draw on canvas today, so
    only their slider names are checked until they render as SVG, ``embedOptions: {"renderer": "svg"}``)."""
    assert phone_visits(rel).page.evaluate(OVERLAPPING_LABELS) == []


# ---- the intro and Chapter 6 (issue 47, parts 1, 5 and 6) --------------------------------------------------

CHAPTER_6 = "notebooks/06_published_record"
# Chapter 6 at 40e5d32 (issue 47): 36,000 px tall at 1280 px (40 screens), 59 screens of 844 px on a phone
CHAPTER_6_WAS = {"desktop": 36_000, "phone": 59 * PHONE["height"]}
LONG_TABLE = 15  # rows: a longer table is folded, under a one-line summary


@pytest.mark.parametrize("where", ["desktop", "phone"])
def test_chapter_6_is_at_most_half_as_tall(request, where):
    page = request.getfixturevalue("phone_visits" if where == "phone" else "visits")(CHAPTER_6).page
    height = page.evaluate("() => document.documentElement.scrollHeight")
    assert height <= CHAPTER_6_WAS[where] / 2, f"{height:,} px at {where} width; at most {CHAPTER_6_WAS[where] // 2:,}"


FOLDED = """(n) => [...document.querySelectorAll('article.bd-article table')]
    .filter(t => t.tBodies.length && [...t.tBodies].reduce((k, b) => k + b.rows.length, 0) > n)
    .map(t => { const fold = t.closest('details');
                const before = fold && fold.querySelector('summary');
                return {rows: [...t.tBodies].reduce((k, b) => k + b.rows.length, 0),
                        folded: !!fold && !fold.open, summary: before ? before.textContent.trim() : ''}; })"""


def test_chapter_6_folds_its_long_tables_under_one_line_summaries(visits):
    tables = visits(CHAPTER_6).page.evaluate(FOLDED, LONG_TABLE)
    open_ = [t["rows"] for t in tables if not t["folded"]]
    assert open_ == [], f"tables of more than {LONG_TABLE} rows shown open: {open_} rows"
    assert all(t["summary"] and "\n" not in t["summary"] for t in tables)


def test_the_intro_counts_the_tocs_chapters(visits):
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    chapters = [c["file"] for part in toc["parts"] if part.get("numbered") for c in part["chapters"]]
    page = visits("book/intro").page
    text = page.evaluate("() => document.querySelector('article.bd-article').innerText")
    words = "zero one two three four five six seven eight nine ten eleven twelve".split()
    said = re.search(r"\b(\w+) chapters, each opening with one question", text, re.I)
    assert said and said.group(1).lower() == words[len(chapters)], said and said.group(0)
    listed = page.evaluate("""() => { const h = [...document.querySelectorAll('article.bd-article h2')]
        .find(e => e.textContent.includes('The chapters')); let e = h && h.nextElementSibling;
        while (e && e.tagName !== 'OL') e = e.nextElementSibling; return e ? e.children.length : 0; }""")
    assert listed == len(chapters)


def test_the_intros_figure_reads_at_9px_on_a_phone(phone_visits):
    """Fig. 1 carries the book's thesis; on a phone its ticks rendered at about 7 px (issue 47): 9 px or more."""
    shown = [f for f in phone_visits("book/intro").page.evaluate(SHOWN) if not f["name"].startswith("a widget")]
    assert shown
    for f in shown:
        px = smallest_text_px(png_text(_png(f["url"])), f["natural"], f["shown"])
        assert px is not None and px >= MIN_RENDERED_PX["desktop"], f"{f['name']}: smallest text {px} px on a phone"


def test_the_onboarding_route_names_sections_its_chapters_have():
    """Every quoted section of the route's table is a heading of the chapter it links (a renamed section would
    send a new reader looking for nothing)."""
    text = (ROOT / "book" / "onboarding.md").read_text()
    missing = []
    for row in re.findall(r"^\| [\d–]+ \| (.*?) \|", text, re.M):
        for doc, quoted in re.findall(r"\{doc\}`\.\./notebooks/(\w+)`: (.*)", row):
            html = (HTML / "notebooks" / f"{doc}.html").read_text()
            headings = " ".join(re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<h[1-4][^>]*>(.*?)</h[1-4]>", html,
                                                                               re.S))
            bare = lambda x: re.sub(r"\s+", " ", re.sub(r"\$[^$]*\$|\\\(.*?\\\)", "", x)).strip()  # math left out
            plain = bare(headings.replace("¶", "").replace("#", ""))
            missing += [f"{doc}: {q}" for q in re.findall(r'"([^"]+)"', quoted)
                        if bare(q) not in plain and q != "AI = B + k"]  # (that one quotes the source note)
    assert missing == []
