"""specnotes: the helper package of "Speculative decoding is a bandwidth trade".

The folders are the book's layers, each importing only those below it (``make lint`` checks it, with
import-linter; CONTRIBUTING.md says what each holds):

    advise, bench      the advisor (python -m specnotes.advise) and the benchmarks (python -m specnotes.bench)
    pages              what the pages show: plots, explorers, the intro's figure, problems, notebook helpers
    serve              k policies, the decode worker, the SimPy pool, the paged KV cache, engines and their client
    tiny               the shipped byte-level models, their drafters, training, generation and export
    measure, sampling  how the book measures on this device; exact speculative sampling and its kernels
    record             the published measurements and the calibrations fitted to them
    analytic           the cost model: accelerators, pass costs, E[N], S(B), context, mixtures of experts
    validate           the one argument validator

``analytic`` and ``record`` need no torch. Import a module from its layer: ``from specnotes.analytic import cost``.
"""

__version__ = "0.1.0"
