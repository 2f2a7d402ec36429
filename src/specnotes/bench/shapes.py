"""The sampler benchmark's shapes, cases and bar (``python -m specnotes.bench sampler``), shared by its records
(``specnotes.bench``) and its sentences (``specnotes.bench.words``)."""

SAMPLER_SHAPES = [(B, 4, V) for V in (256, 32000) for B in (1, 8, 64)] + [(8, 8, 256), (8, 8, 32000)]
CASE_SHAPES = [(64, 4, 32000), (1, 4, 32000)]  # the bar's shape, and one sequence
SAMPLER_CASES = ("independent", "realistic", "all accepted")
# issue 39: sampling from logits within 1.5x its floor (max(reading the rows it reads once, their normalizers)) in
# every case at CASE_SHAPES[0] on a CPU, with 1 and 2 threads (issue 29's 1.2x was against a floor of reading every
# input once, which a sampler that stops early beats)
SAMPLER_BAR = 1.5
CASE_THREADS = (1, 2)

# the terms that can set the floor ("floor is"), as the sentences name them
FLOOR_TERMS = {"reading its rows": "reading the rows it reads once",
               "log-normalizers": "the log-normalizers of those rows", "softmax": "a softmax of those rows"}
