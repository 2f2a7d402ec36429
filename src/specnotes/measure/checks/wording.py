"""Numbers in words that are true of them: two numbers printed apart where they differ, a change as "rose" or
"fell" or "stayed level"."""


def apart(x: float, y: float, digits: int = 2) -> tuple[str, str]:
    """``x`` and ``y`` printed with ``digits`` decimals, or with as many more (up to 6) as it takes for the printed
    values to differ where the numbers do. A sentence that compares two numbers ("measured 1.09×, at least 1.09×
    needed: too flat") must not print them equal when it says one is below the other; two that agree to 6 decimals
    print with ``digits``, and the sentence must treat them as equal."""
    for d in range(digits, 7):
        a, b = f"{x:.{d}f}", f"{y:.{d}f}"
        if a != b or x == y:
            return a, b
    return f"{x:.{digits}f}", f"{y:.{digits}f}"  # equal to 6 decimals: equal in words too


def moved_by(factor: float, up: str = "rose", down: str = "fell", digits: int = 2) -> str:
    """A change by ``factor`` (new over old) in words that are true of it: "rose 1.21×" above 1, "fell 1.20×" (by
    1/factor) below 1, "stayed level" where it prints as 1 either way."""
    if f"{factor:.{digits}f}" == f"{1:.{digits}f}" and f"{1 / factor:.{digits}f}" == f"{1:.{digits}f}":
        return "stayed level"
    return f"{up} {factor:.{digits}f}×" if factor > 1 else f"{down} {1 / factor:.{digits}f}×"
