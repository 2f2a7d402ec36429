"""Numbers printed so that the words around them stay true (``shown``, ``shown_pair``)."""

from __future__ import annotations


def shown(x: float, against: float, decimals: int = 3, style: str = "f") -> str:
    """``x`` printed with ``decimals`` (style "f", "+f" for a sign, or "%"), with more decimals where fewer would
    print it equal to ``against`` or on its other side: a sentence that says "below 80%" never prints "80%"."""
    def fmt(v, d):
        return f"{v:.{d}%}" if style == "%" else f"{v:+.{d}f}" if style == "+f" else f"{v:.{d}f}"

    def value(text):
        return float(text.rstrip("%")) / (100 if style == "%" else 1)

    for d in range(decimals, decimals + 6):
        text = fmt(x, d)
        shown_, goal = value(text), value(fmt(against, d))
        if x == against or (shown_ != goal and (shown_ < goal) == (x < against)):
            return text
    return fmt(x, decimals + 6)


def shown_pair(a: float, b: float, decimals: int = 3, style: str = "f") -> tuple[str, str]:
    """``a`` and ``b`` printed with as many decimals as it takes to tell them apart (as many as asked if equal)."""
    for d in range(decimals, decimals + 6):
        fa, fb = (f"{v:.{d}%}" if style == "%" else f"{v:+.{d}f}" if style == "+f" else f"{v:.{d}f}" for v in (a, b))
        if fa != fb or a == b:
            return fa, fb
    return fa, fb
