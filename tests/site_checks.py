"""What the built-site checks share (test_built_book on the HTML, test_browser in chromium)."""

import re

GENERIC_ALT = re.compile(r"^(png|jpe?g|svg|image|img|figure|fig|plot|chart|graph|output|picture)(\s*\d+)?$", re.I)


def says_what_it_shows(src: str, alt: str | None) -> bool:
    """Alt text a reader who cannot see the image can use: several words, not a file name or a placeholder."""
    if alt is None:
        return False
    alt = alt.strip()
    name = src.rsplit("/", 1)[-1]
    return (len(alt.split()) >= 6 and not GENERIC_ALT.match(alt) and name not in alt
            and not re.search(r"\.(png|jpe?g|svg|gif)\b", alt, re.I) and "_images/" not in alt)


def png_text(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG (where specnotes.pages.plots records a figure's smallest text), {} if none."""
    import struct

    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    text, at = {}, 8
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"tEXt":
            key, _, value = data[at + 8:at + 8 + length].partition(b"\0")
            text[key.decode("latin-1")] = value.decode("latin-1")
        if kind == b"IEND":
            break
        at += 12 + length
    return text


def smallest_text_px(text: dict[str, str], natural_px: float, shown_px: float) -> float | None:
    """How tall a figure's smallest text renders, in CSS px, from its PNG's record (``plots.FONT_RECORD``, in the
    PNG's own pixels) and how wide the image is shown against its natural width; None without a record."""
    from specnotes.pages.plots import FONT_RECORD, rendered_px

    if FONT_RECORD not in text:
        return None
    return rendered_px(float(text[FONT_RECORD]), natural_px, shown_px)
