"""The model's known biases, which set every tolerance of ``measure.checks``, and the constants they set.

- ``READ_ONLY_SLACK``: the copy that measures bandwidth counts 2 bytes per byte copied, but with
  write-allocate caches DRAM moves 3; a kernel that only reads (a GEMV) can stream up to 1.5x the
  measured "roof". Nothing else may beat the roofs.
- ``SHARE``: small passes run below the compute roof (the peak comes from a large GEMM) and pay fixed
  costs the fastest-pass floor t0 does not fully capture, so measured ratios between passes are pulled
  towards 1. A rise the model predicts must show at least this share of itself, on a log scale: an
  eighth, because on a CPU in fp32 a predicted 3.15x (a verify pass of 80 tokens over one of 20)
  measured 1.04x on a shared 2-core machine, both passes being GEMMs of tens of rows on the library's
  slow small-GEMM path; a flat measurement still fails wherever the model predicts 2x or more.
- ``THRESHOLD``: CPU libraries run GEMMs of a few rows on separate paths, each with its own
  efficiency: on one 2-core AVX-512 CPU, fp32 GEMMs of 2 to 40 rows over the same weight cost 1.1 to
  3.5x a 1-row GEMV, and not monotonically in the rows. A ratio the model predicts to move by less
  than 2x can move either way; only larger predicted rises are tested.
- ``COMPUTE_SLACK``: the compute roof is the fastest of two GEMMs of side 1024; a pass's larger GEMMs
  may run faster. On a CPU without bf16 units a verify pass of 80 rows over d = 2048 weights ran 1.12x
  faster than the measured peak allowed; with the 10% by which the peak's own fastest sample may miss
  under load (``NOISE``), 1.12 x 1.10 = 1.23, rounded up to 1.25.
- ``NOISE``: fastest samples of the same pass on a busy 2-core machine differ by up to ~10%.

``WORK_RATIO`` and ``LOAD`` set what :func:`invariants.more_work_is_slower` compares. :func:`rules` states them all
as the chapters' prose does.
"""


READ_ONLY_SLACK = 1.5
COMPUTE_SLACK = 1.25
SHARE = 1 / 8
NOISE = 0.10
THRESHOLD = 2.0  # a predicted rise smaller than this is not tested (see grows)
WORK_RATIO = 4.0  # a pass the model prices at this many times another's time does more work (more_work_is_slower)
LOAD = 8.0  # how much faster than less work more work must run to be broken, not load (more_work_is_slower)


def rules() -> dict[str, str]:
    """The constants above as the chapters' prose states them, by glue name, so that no chapter types a
    number the checks may change: ``rule_slack`` (READ_ONLY_SLACK, "1.5"), ``rule_compute`` (COMPUTE_SLACK),
    ``rule_load`` (LOAD, "8"), ``rule_work`` (WORK_RATIO, "4"), ``rule_threshold`` (THRESHOLD, "2"),
    ``rule_share`` (SHARE, "1/8") and ``rule_noise`` (NOISE, "10%")."""
    return {"rule_slack": f"{READ_ONLY_SLACK:g}", "rule_compute": f"{COMPUTE_SLACK:g}", "rule_load": f"{LOAD:g}",
            "rule_work": f"{WORK_RATIO:g}", "rule_threshold": f"{THRESHOLD:g}", "rule_share": f"1/{1 / SHARE:g}",
            "rule_noise": f"{NOISE:.0%}"}
