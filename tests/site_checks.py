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
