"""The pages of a jupyter-book ``_toc.yml``, in reading order.

A plain module (no Sphinx): the status page's extension and the tests of the built site both use it,
and the tests must be collectable where Sphinx is not installed.
"""

from __future__ import annotations


def toc_files(toc: dict) -> list[str]:
    """Every ``file`` in a jupyter-book ``_toc.yml`` (already parsed), in reading order."""
    out = [toc["root"]] if "root" in toc else []

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                out.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return out
