"""Serve the book's JavaScript from the book itself (no CDN), page by page.

The vendored files live in ``book/_assets/vendor`` (``scripts/vendor_assets.py``; copied to
``_static/vendor`` through ``html_static_path``). ``_config.yml`` points Sphinx's MathJax
(``mathjax_path``) and myst-nb's widget manager (``nb_ipywidgets_js``) at them. This extension
adds what those settings cannot, only on the pages that need it:

- pages that embed an Altair chart (its HTML output calls ``maybeLoadScript("vega", "5")``...):
  the vega, vega-lite and vega-embed UMD bundles, in ``<head>``, with a priority below 500 so
  they load before any other script, and Altair's ``VEGA_DEBUG`` version hints, so the chart's
  loader finds them on the page instead of requesting the CDN. A chart that asks for a major
  version we do not vendor is a build warning (an error under ``-W``).
- every page: the theme's ``default_mode`` (``auto``), so a first visit logs no console error.
- pages with stored widgets: a shim for the MathJax 2 ``Hub.Queue`` call the html-manager makes
  (it typesets ``$...$`` in widget labels), and MathJax itself if the page has no other math.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parents[1] / "_assets"
MANIFEST = ASSETS / "vendor" / "VENDORED.json"
VEGA_BUNDLES = [("vega", "vega/vega.min.js"), ("vega-lite", "vega-lite/vega-lite.min.js"),
                ("vega-embed", "vega-embed/vega-embed.min.js")]
ALTAIR_LOAD = re.compile(r'maybeLoadScript\(\s*"(vega(?:-lite|-embed)?)"\s*,\s*"([^"]+)"\s*\)')
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def vendored_versions() -> dict[str, str]:
    packages = json.loads(MANIFEST.read_text())["packages"]
    return {name: pkg["version"] for name, pkg in packages.items()}


def satisfies(vendored: str, requested: str) -> bool:
    """Altair asks for "5" (a major) or "5.20.1" (exact); vendored is an exact version."""
    want, have = requested.split("."), vendored.split(".")
    return have[: len(want)] == want


def add_page_assets(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    if app.builder is None or app.builder.format != "html":
        return
    body = context.get("body", "") or ""
    requested = dict(ALTAIR_LOAD.findall(body))
    if requested:
        vendored = vendored_versions()
        hints = {}
        for lib, version in requested.items():
            if lib not in vendored or not satisfies(vendored[lib], version):
                logger.warning(f"{pagename}: the chart asks for {lib}@{version} but book/_assets/vendor has "
                               f"{vendored.get(lib)}; refresh with scripts/vendor_assets.py",
                               type="specnotes", subtype="vendor")
            # Altair's loader keys: "vega_version", "vegalite_version", "vegaembed_version"
            hints[f"{lib.replace('-', '', 1)}_version"] = version
        for i, (_, path) in enumerate(VEGA_BUNDLES):
            app.add_js_file(f"vendor/{path}", priority=200 + i)
        app.add_js_file(None, body=f"var VEGA_DEBUG = {json.dumps(hints, sort_keys=True)};", priority=210)
    if WIDGET_VIEW in body:
        if getattr(app.builder, "math_renderer_name", None) == "mathjax":
            domain = app.env.get_domain("math")
            if not domain.has_equations(pagename) and app.registry.html_assets_policy != "always":
                # widget labels may hold $...$ math: load MathJax here too (Sphinx does on pages with math)
                if app.config.mathjax3_config:
                    app.add_js_file(None, body=f"window.MathJax = {json.dumps(app.config.mathjax3_config)}")
                app.add_js_file(app.config.mathjax_path, loading_method="defer")
        app.add_js_file("specnotes/mathjax-hub-shim.js", priority=510, loading_method="defer")


def default_theme_mode(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """pydata-sphinx-theme's layout writes ``{{ default_mode }}`` into the page, a variable that
    nothing sets under sphinx-book-theme, so every first visit logs "Got invalid theme mode: .
    Resetting to auto." as a console error. Say "auto" (what it falls back to anyway), so the
    browser tests can insist on a clean console."""
    if not context.get("default_mode"):
        context["default_mode"] = "auto"


def setup(app: Sphinx) -> dict:
    app.connect("html-page-context", default_theme_mode)
    app.connect("html-page-context", add_page_assets)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
