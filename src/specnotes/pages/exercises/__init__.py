"""Self-checking problems: ``exercises.check("ch4.p1a", your_answer)`` says "right", or what went wrong.

Every problem's reference answer is computed by the book's own functions (``answer`` below calls the
problem's answer function; the chapter's folded answer glues the same value), never typed in. A check
compares your value with it within the problem's tolerance (relative, or exact for integers); if it is
off, against the typical wrong answers listed for that problem (each computed from the model too, each
with a hint); then against generic slips (units, a factor of 2, the reciprocal, off by one).

    from specnotes.pages import exercises
    exercises.check("ch1.p1a", 29.0)      # right: ...
    exercises.check("ch4.p1a", 971)       # off by a factor of k + 1: did you use B + k? ...
    exercises.problems()                  # every problem: id, chapter, one-line summary
    exercises.answer("ch2.p1a")           # the reference value (what the chapter glues)

Ids are ``ch<chapter>.p<problem>`` with a letter per part (``ch1.p1a``, ``ch1.p1b``); a problem whose
answer is a statement, not a number, is multiple choice (``check("ch2.p3", "b")``).

Adding a problem
----------------
One entry in its chapter's module (``ch5``; a new chapter's problems get a module of their own, imported
below), or ``register(Problem(...))`` from anywhere, with an answer function that the chapter's hidden answer
cell calls too, so the glued answer and the checker cannot disagree::

    Problem("ch5.p1", "05_context_length", "KV bytes read per sequence, Llama-3-8B at L = 8192 (GB)",
            answer=partial(kv_read_gb, LLAMA_3_8B, 8192), unit="GB",
            mistakes=(Mistake(partial(kv_read_gb, LLAMA_3_8B, 8192, heads=32), "that counts all 32 query "
                              "heads: the cache holds n_kv_heads = 8"),))

then, in the notebook, ``glue("p1_kv", exercises.answer("ch5.p1"))`` in the hidden answer cell and a
check cell after the problem (a markdown line and ``# exercises.check("ch5.p1", your_answer)``, as in
every chapter). ``tests/pages/test_exercises.py`` runs every entry against its reference answer and against
each listed mistake (the hint must come back), so an entry with no mistake fails the test.
``rel`` is the relative tolerance (default 2%: readers round datasheet constants); ``rel=0`` means
exact (integers: a best k, a batch from a table).

The modules
-----------
``registry`` holds ``Problem``, ``Mistake``, ``PROBLEMS`` and ``register`` and reads them back (``problem``,
``problems``, ``answer``); ``checking`` compares a reader's value (``check``, ``check_all``, ``Verdict``);
``answers`` holds the answer functions the chapters share; ``ch1`` to ``ch11`` each register one chapter's
problems (with the answer functions only that chapter uses); ``cli`` and ``__main__`` are
``python -m specnotes.pages.exercises``. The names below are this package's face (``exercises.check``).
"""

# Each chapter's module registers its problems when it is imported: in this order, the order PROBLEMS has always
# listed them in (Chapters 7 and 10 came after 9, and 11 after 10).
from specnotes.pages.exercises import ch1, ch2, ch3, ch4, ch5, ch6, ch8, ch9, ch7, ch10, ch11  # noqa: F401  # isort: skip

# isort: split
from specnotes.pages.exercises.answers import free_verify_batch, your_engine_fit
from specnotes.pages.exercises.ch3 import SPEC_BENCH_SPS_MEAN_ACCEPTED
from specnotes.pages.exercises.ch7 import CH7_CONTEXT, early_exit_speedup
from specnotes.pages.exercises.ch10 import widest_paying
from specnotes.pages.exercises.ch11 import best_fixed_rate
from specnotes.pages.exercises.checking import Verdict, check, check_all
from specnotes.pages.exercises.cli import main
from specnotes.pages.exercises.registry import PROBLEMS, Mistake, Problem, answer, problem, problems, register

__all__ = [
    "CH7_CONTEXT", "PROBLEMS", "SPEC_BENCH_SPS_MEAN_ACCEPTED", "Mistake", "Problem", "Verdict", "answer", "check",
    "check_all", "early_exit_speedup", "free_verify_batch", "main", "problem", "problems", "register", "widest_paying",
    "your_engine_fit", "best_fixed_rate",
]
