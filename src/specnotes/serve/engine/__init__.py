"""llama.cpp's ``llama-server``, an engine someone else wrote, started and stopped from Python on this machine.

    make engine                                   # build it (scripts/build_engine.sh) and convert the shipped pair
    python -m specnotes.serve.engine measure --out s.json   # S(B) on it: pairs of runs off and on, until S settles
    python -m specnotes.serve.engine measure --target t.gguf --draft d.gguf --out s.json   # any GGUF pair
    python -m specnotes.serve.engine serve --slots 4 --k 4  # just serve on 127.0.0.1:8080, for `bench serve` by hand

One module per job:

- ``build``      the pinned sdist (``LLAMA_CPP_PYTHON``, which ``make engine`` reads there), where the binary is built;
- ``models``     the shipped pair and the big random model as float32 GGUF files;
- ``process``    :class:`Server`: llama-server on 127.0.0.1, started, health-checked and stopped; its endpoints;
- ``speedup``    S(B) on it (:func:`measure_pairs`): pairs of runs off and on until S settles, with its counters;
- ``tables``     what a record says in numbers: S per concurrency, the cost model beside it, the draft's cost;
- ``reference``  the book's committed records (``data/reference/llama-server``);
- ``verdicts``   the sentences and verdicts the book chooses from a record;
- ``cli``        the command line (``convert``, ``serve``, ``measure``), run by ``__main__``.

The names below are this package's face (``engine.Server``, ``engine.load_reference``).
"""

from specnotes.serve.engine.build import (
    LLAMA_CPP_PYTHON,
    EngineNotBuilt,
    binary,
    build_info,
    engine_dir,
    repo_root,
    require_binary,
    version_dir,
)
from specnotes.serve.engine.cli import (
    CUSTOM_CONTEXT,
    DEFAULT_PORT,
    DefaultsShown,
    build_parser,
    check_measure_arguments,
    chosen_pair,
    main,
    positive_float,
    positive_int,
    positive_ints,
    print_measurement,
    serve_until_stopped,
)
from specnotes.serve.engine.models import MODEL_NAMES, SHIPPED_CONTEXT, big_gguf, models_dir, shipped_ggufs
from specnotes.serve.engine.process import (
    PR_SET_PDEATHSIG,
    EngineStartError,
    Server,
    free_port,
    http_json,
    parent_death_signal,
    parse_metrics,
)
from specnotes.serve.engine.reference import REFERENCE, load_reference, reference_path
from specnotes.serve.engine.speedup import (
    KINDS,
    MAX_PAIRS,
    MIN_PAIRS,
    SETTLE,
    big_shape_notes,
    cpu_name,
    engine_counters,
    engine_provenance,
    measure_pairs,
    measured_roofs,
    pair_levels,
    settled,
    specnotes_acceptance,
    warm,
)
from specnotes.serve.engine.tables import draft_pass_cost, mean_context, model_beside, pair_table, shape_of
from specnotes.serve.engine.verdicts import (
    NUMBERS,
    acceptance_verdict,
    break_even_c,
    clock_sentence,
    listed,
    overhead_verdict,
    pairs_sentence,
    verify_verdict,
)

__all__ = [
    "CUSTOM_CONTEXT", "DEFAULT_PORT", "KINDS", "LLAMA_CPP_PYTHON", "MAX_PAIRS", "MIN_PAIRS", "MODEL_NAMES", "NUMBERS",
    "PR_SET_PDEATHSIG", "REFERENCE", "SETTLE", "SHIPPED_CONTEXT", "DefaultsShown", "EngineNotBuilt",
    "EngineStartError", "Server", "acceptance_verdict", "big_gguf", "big_shape_notes", "binary", "break_even_c",
    "build_info", "build_parser", "check_measure_arguments", "chosen_pair", "clock_sentence", "cpu_name",
    "draft_pass_cost", "engine_counters", "engine_dir", "engine_provenance", "free_port", "http_json", "listed",
    "load_reference", "main", "mean_context", "measure_pairs", "measured_roofs", "model_beside", "models_dir",
    "overhead_verdict", "pair_levels", "pair_table", "pairs_sentence", "parent_death_signal", "parse_metrics",
    "positive_float", "positive_int", "positive_ints", "print_measurement", "reference_path", "repo_root",
    "require_binary", "serve_until_stopped", "settled", "shape_of", "shipped_ggufs", "specnotes_acceptance",
    "verify_verdict", "version_dir", "warm",
]
