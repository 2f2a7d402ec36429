"""Readability of the book's prose: words per sentence, long sentences, parentheses, and the glued sentences.

Vendored from the project's shared tool (``readability.py --html PAGE.html ...``) so that CI, which has only this
repository, runs the same measure: the ``<main>`` article's ``<p>`` and ``<li>`` text of a built page (glued values
already substituted), code, math, tables and cell outputs dropped, split into sentences the same way. Added here:
the sentences that hold a glued text (myst-nb's ``<span class="pasted-text">``) of ``GLUED_WORDS`` words or more,
which a chooser wrote, and their nested parentheses.

Usage: ``python tests/readability.py _build/html/book/*.html _build/html/notebooks/*.html`` prints one row per page
and a total. ``tests/test_readability.py`` runs it over the built site (``make bookcheck``).
"""

from __future__ import annotations

import html
import re
import statistics as st
import sys
from dataclasses import dataclass, field

GLUED_WORDS = 6  # a glued text this long is a chosen sentence or clause, not a number
OPEN, CLOSE = "\u27e6", "\u27e7"  # marks a glued text's ends in the flattened prose

# The goals (the scaling book's own numbers, measured the same way) and the hard limits.
GOAL_MEAN, GOAL_OVER_40, GOAL_PARENS = 24.0, 0.13, 0.35
MAX_WORDS, MAX_GLUED_WORDS = 80, 45


def text_from_html(s: str) -> str:
    m = re.search(r"<article.*?</article>", s, re.S) or re.search(r"<main.*?</main>", s, re.S)
    s = m.group(0) if m else s
    s = re.sub(r'<span class="pasted-text">(.*?)</span>',
               lambda g: f"{OPEN}{g.group(1)}{CLOSE}" if len(re.sub(r"<[^>]+>", "", g.group(1)).split()) >= GLUED_WORDS
               else g.group(1), s, flags=re.S)
    s = re.sub(r'<(script|style|pre|code|math|svg|table|figure|div class="cell_output[^"]*")[^>]*>.*?</\1>', " ", s,
               flags=re.S)
    s = re.sub(r'<span class="math[^"]*">.*?</span>', " X ", s, flags=re.S)
    s = re.sub(r"\\\(.*?\\\)", " X ", s, flags=re.S)
    paras = re.findall(r"<(p|li)[^>]*>(.*?)</\1>", s, flags=re.S)
    out = []
    for _, p in paras:
        p = re.sub(r"<[^>]+>", "", p)
        p = html.unescape(p).strip()
        if p and p.rstrip(CLOSE)[-1:] not in ".!?:;":
            p += "."  # a paragraph or list item ends a sentence
        out.append(p)
    return "\n".join(out)


def sentences(t: str) -> list[str]:
    t = re.sub(r"\s+", " ", t)
    t = re.sub(r"\b(e\.g|i\.e|et al|vs|cf|Fig|Eq|Sec|Ch|approx)\.", r"\1", t)
    parts = re.split(rf"(?:(?<=[.!?])|(?<=[.!?]{CLOSE}))\s+(?=[A-Z({OPEN}])", t)
    return [p for p in parts if len(p.split()) >= 3]


def words(sentence: str) -> int:
    return len(sentence.replace(OPEN, " ").replace(CLOSE, " ").split())


def nested_parentheses(sentence: str) -> bool:
    depth = 0
    for ch in sentence:
        depth += ch == "("
        if depth >= 2:
            return True
        depth -= ch == ")" and depth > 0
    return False


@dataclass
class Page:
    name: str
    sentences: list[str]
    glued: list[str] = field(default_factory=list)  # sentences that hold (part of) a chosen glued text

    @property
    def counts(self) -> list[int]:
        return [words(x) for x in self.sentences]

    @property
    def mean(self) -> float:
        return st.mean(self.counts) if self.sentences else 0.0

    @property
    def over_40(self) -> float:
        return sum(n > 40 for n in self.counts) / len(self.sentences) if self.sentences else 0.0

    @property
    def parens(self) -> float:
        return sum(x.count("(") for x in self.sentences) / len(self.sentences) if self.sentences else 0.0

    @property
    def longest(self) -> int:
        return max(self.counts, default=0)

    def too_long(self, limit: int = MAX_WORDS) -> list[str]:
        return [x for x in self.sentences if words(x) > limit]

    def glued_too_long(self, limit: int = MAX_GLUED_WORDS) -> list[str]:
        return [x for x in self.glued if words(x) > limit]

    def glued_nested(self) -> list[str]:
        return [x for x in self.glued if nested_parentheses(x)]

    def meets_goals(self) -> bool:
        return self.mean <= GOAL_MEAN and self.over_40 <= GOAL_OVER_40 and self.parens <= GOAL_PARENS


def glued_sentences(all_sentences: list[str]) -> list[str]:
    """The sentences that hold part of a glued text: any that opens one, and any that starts inside one."""
    out, depth = [], 0
    for x in all_sentences:
        if depth > 0 or OPEN in x:
            out.append(x)
        depth = max(depth + x.count(OPEN) - x.count(CLOSE), 0)
    return out


def measure_page(name: str, page_html: str) -> Page:
    ss = sentences(text_from_html(page_html))
    return Page(name, ss, glued_sentences(ss))


def total(pages: list[Page]) -> Page:
    return Page("ALL", [x for p in pages for x in p.sentences], [x for p in pages for x in p.glued])


def table(pages: list[Page]) -> str:
    """One row per page and the total: sentences, mean words, share over 40 words, parentheses per sentence, the
    longest sentence, the longest glued one, and whether the page meets the three goals."""
    head = (f"{'page':28s} {'sent':>5s} {'mean':>5s} {'>40w':>5s} {'(/s':>5s} {'max':>4s} {'glued':>5s} "
            f"{'g.max':>5s} {'goals':>5s}")
    rows = [head]
    for p in [*pages, total(pages)]:
        gmax = max((words(x) for x in p.glued), default=0)
        rows.append(f"{p.name[:28]:28s} {len(p.sentences):5d} {p.mean:5.1f} {p.over_40:5.0%} {p.parens:5.2f} "
                    f"{p.longest:4d} {len(p.glued):5d} {gmax:5d} {'yes' if p.meets_goals() else 'no':>5s}")
    return "\n".join(rows)


if __name__ == "__main__":
    from pathlib import Path

    found = [measure_page(Path(f).stem, Path(f).read_text(errors="ignore")) for f in sys.argv[1:]]
    print(table([p for p in found if p.sentences]))
