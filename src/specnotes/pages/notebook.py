"""What the chapters need from the notebook environment, and nothing that Colab lacks.

``glue`` is myst-nb's when myst-nb is installed (the book's build and test environment: it stores
the value in the cell's output, where the website's ``{glue:text}`` roles find it). Where it is not
(Colab, a plain Jupyter), ``glue`` only shows the value when asked to, so a chapter runs unchanged.
"""

from __future__ import annotations

try:
    from myst_nb import glue
except ImportError:  # Colab or any environment without the book's build tools

    def glue(name: str, variable, display: bool = True) -> None:
        """Stand-in for ``myst_nb.glue``: the website is built elsewhere, so only display."""
        if display:
            from IPython.display import display as show

            show(variable)


__all__ = ["glue"]
