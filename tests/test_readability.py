"""The book's prose measured on the built site (``make bookcheck``), page by page, with ``tests/readability.py``.

Enforced on the pages in ``ENFORCED``: no sentence over 80 words, and no glued sentence (one a chooser wrote) over 45
words. Reported for every page, in a table printed with the test run and written to ``_build/readability.txt``: the
goals, at most 24 words a sentence on average, at most 13% of sentences over 40 words, at most 0.35 parentheses a
sentence (the scaling book's own numbers, measured the same way). Every page with prose is in ``ENFORCED``; a new
page joins it once it complies (until then the skip message says what it still has). The unit tests at the
end show that the measure catches what it must, without a built site.
"""

from pathlib import Path

import pytest
import readability
from readability import MAX_GLUED_WORDS, MAX_WORDS, measure_page, table, words

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"

# The pages whose prose meets the two limits: all of them. Add a new page once it complies.
ENFORCED = {"intro", "notation", "quoting", "claims", "glossary", "onboarding", "gpus", "serve", "status",
            "01_roofline_decode", "02_draft_and_verify", "03_acceptance", "04_batch_size", "05_context_length",
            "06_published_record", "07_cheaper_drafters", "08_serving", "09_kv_reuse", "10_sparse_targets",
            "11_engines_since", "advisor", "references"}


def built_pages() -> list[Path]:
    return sorted([*HTML.glob("book/*.html"), *HTML.glob("notebooks/*.html")])


@pytest.fixture(scope="module")
def pages():
    found = built_pages()
    if not found:
        pytest.skip("no built site: run make book first")
    measured = [measure_page(p.stem, p.read_text(errors="ignore")) for p in found]
    return {p.name: p for p in measured if p.sentences}


@pytest.mark.built
def test_readability_table_per_page(pages, capsys):
    text = table(list(pages.values()))
    (ROOT / "_build" / "readability.txt").write_text(text + "\n")
    with capsys.disabled():
        print("\nReadability of the built pages (goals: mean ≤ 24 words, ≤ 13% over 40, ≤ 0.35 parentheses a "
              "sentence):\n" + text)
    assert ENFORCED <= set(pages), f"enforced pages missing from the build: {sorted(ENFORCED - set(pages))}"


def _page_ids():
    return [p.stem for p in built_pages()] or ["(no built site)"]


@pytest.mark.built
@pytest.mark.parametrize("name", _page_ids())
def test_no_sentence_over_80_words_and_no_glued_sentence_over_45(pages, name):
    if name not in pages:
        pytest.skip(f"{name}: no prose")
    page = pages[name]
    long = [f"{words(x)} words: {x[:160]}…" for x in page.too_long()]
    glued = [f"{words(x)} words (glued): {x[:160]}…" for x in page.glued_too_long()]
    if name not in ENFORCED:
        pytest.skip(f"{name} is not enforced yet: {len(long)} sentences over {MAX_WORDS} words, {len(glued)} glued "
                    f"over {MAX_GLUED_WORDS}")
    assert not long and not glued, "\n".join(long + glued)


# ---------------------------------------------------------------------------------------------- the measure itself


def page_html(body: str) -> str:
    return f"<html><body><main><article>{body}</article></main></body></html>"


def test_the_measure_counts_sentences_words_and_parentheses():
    page = measure_page("p", page_html("<p>One short sentence here. Another one (with a note) follows it.</p>"
                                       "<li>A list item without a stop</li><pre>code is dropped</pre>"))
    assert [words(x) for x in page.sentences] == [4, 7, 6]
    assert page.parens == pytest.approx(1 / 3) and page.longest == 7 and page.glued == []


def test_the_measure_finds_a_long_glued_sentence_and_its_nested_parentheses():
    chosen = " ".join(["word"] * 46) + " (a note (nested)) ends."
    page = measure_page("p", page_html(f'<p>The run shows this. <span class="pasted-text">{chosen.capitalize()}'
                                       f'</span> Then prose goes on.</p><p>A number <span class="pasted-text">1.23'
                                       "</span> is not a sentence.</p>"))
    assert len(page.glued) == 1 and words(page.glued[0]) == 50
    assert page.glued_too_long() == page.glued and page.glued_nested() == page.glued
    assert not page.too_long()  # 50 words: under the 80-word limit for any sentence
    assert not measure_page("p", page_html(f"<p>{' '.join(['w'] * 80)}.</p>")).too_long()
    assert measure_page("p", page_html(f"<p>{' '.join(['w'] * 81)}.</p>")).too_long()


def test_a_glued_text_of_two_sentences_marks_both():
    page = measure_page("p", page_html('<p><span class="pasted-text">First chosen sentence of six words. Second '
                                       "chosen one has six words.</span> Then the prose again.</p>"))
    assert len(page.glued) == 2 and len(page.sentences) == 3


def test_the_table_reports_the_goals():
    good = measure_page("good", page_html("<p>" + "Short and clear sentence here. " * 5 + "</p>"))
    bad = measure_page("bad", page_html("<p>" + " ".join(["long"] * 45) + " (one) (two).</p>"))
    text = table([good, bad])
    assert text.splitlines()[1].split()[-1] == "yes" and text.splitlines()[2].split()[-1] == "no"
    assert readability.GOAL_MEAN == 24.0 and readability.GOAL_OVER_40 == 0.13 and readability.GOAL_PARENS == 0.35
