"""Thumbnails of labelled figures from other pages, each a link to its figure (book/claims.md).

    ```{figure-thumbs} ch2-timeline-figure ch4-measured-figure
    ```

draws, for each label, the first image inside that figure (a chapter cell's output, named with
``mystnb: figure: name:`` in its metadata) as a small linked picture with the first sentence of the
figure's caption under it.
The image is the chapter's own stored output, copied into the page when the site is built, so it
changes whenever the chapter is executed again; its alt text is the chapter's (``mystnb: image: alt:``).
A label that names no figure, or a figure with no image (a cell not executed yet), is a build warning:
an error under ``-W``.
"""

from __future__ import annotations

import copy

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)


class figure_thumbs(nodes.General, nodes.Element):  # noqa: N801  (docutils names nodes in lower case)
    """Placeholder for the thumbnails, filled in once every page has been read."""


class FigureThumbs(SphinxDirective):
    required_arguments = 1
    optional_arguments = 20
    option_spec = {"class": directives.class_option}

    def run(self):
        node = figure_thumbs(labels=list(self.arguments), classes=["specnotes-thumbs"] + self.options.get("class", []))
        self.set_source_info(node)
        return [node]


def _figure(app: Sphinx, label: str):
    """(docname, figure node) of a labelled figure, or None."""
    found = app.env.get_domain("std").labels.get(label)
    if not found:
        return None
    docname, labelid, _ = found
    doctree = app.env.get_doctree(docname)
    for fig in doctree.findall(nodes.figure):
        if labelid in fig["ids"]:
            return docname, fig
    return None


def _thumb(app: Sphinx, fromdoc: str, label: str, where) -> nodes.Node | None:
    target = _figure(app, label)
    image = next(iter(target[1].findall(nodes.image)), None) if target else None
    if image is None:
        why = "no figure has that label" if target is None else f"the figure in {target[0]} has no image (execute it)"
        logger.warning(f"figure-thumbs: {label!r}: {why}", location=where, type="specnotes", subtype="thumbs")
        return None
    docname, fig = target
    _, labelid, _ = app.env.get_domain("std").labels[label]
    uri = app.builder.get_relative_uri(fromdoc, docname) + "#" + labelid
    thumb = copy.deepcopy(image)
    thumb["classes"] = ["specnotes-thumb-image"]
    for size in ("width", "height", "scale"):
        thumb.attributes.pop(size, None)
    link = nodes.reference("", "", thumb, refuri=uri, internal=True)
    caption = next(iter(fig.findall(nodes.caption)), None)
    text = caption.astext().split(". ")[0].rstrip(".") + "." if caption is not None else label  # its first sentence
    caption_link = nodes.reference("", text, refuri=uri, internal=True)
    return nodes.container("", nodes.paragraph("", "", link), nodes.paragraph("", "", caption_link),
                           classes=["specnotes-thumb"])


def fill(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for node in list(doctree.findall(figure_thumbs)):
        thumbs = [t for t in (_thumb(app, docname, label, node) for label in node["labels"]) if t is not None]
        node.replace_self(nodes.container("", *thumbs, classes=node["classes"]) if thumbs else [])


def setup(app: Sphinx):
    app.add_node(figure_thumbs)
    app.add_directive("figure-thumbs", FigureThumbs)
    app.connect("doctree-resolved", fill)
    app.add_css_file("specnotes/thumbs.css")
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
