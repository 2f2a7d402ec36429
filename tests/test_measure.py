"""specnotes.measure: timing statistics, records, the knee, and the CPU probes' robust shapes.

The machine running these may be shared and noisy: probe tests assert plausible ranges and
orderings with wide margins, never absolute times.
"""

import itertools
import json
import math
import time

import pytest
import torch

from specnotes import measure as m

CPU = torch.device("cpu")


# ---------------------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize(
    "given, expected",
    [("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32), ("bfloat16", torch.bfloat16),
     ("torch.float16", torch.float16), (torch.float32, torch.float32), ("BF16", torch.bfloat16)],
)
def test_as_dtype_accepts_names_and_dtypes(given, expected):
    assert m.as_dtype(given) is expected


@pytest.mark.parametrize("bad", ["int8", "fp8", "", torch.int64, 16, None])
def test_as_dtype_rejects_with_allowed_values(bad):
    with pytest.raises(ValueError, match="bf16"):
        m.as_dtype(bad)


def test_dtype_name_round_trips():
    for name in ("bf16", "fp16", "fp32"):
        assert m.dtype_name(m.as_dtype(name)) == name


def test_cpu_device_helpers():
    assert m.pick_device("cpu") == CPU
    assert m.default_dtype(CPU) is torch.bfloat16
    name = m.device_name(CPU)
    assert name and f"({torch.get_num_threads()} threads)" in name
    m.sync(CPU)  # a no-op, must not raise


def test_pick_device_rejects_unavailable_or_unknown(monkeypatch):
    monkeypatch.delenv(m.DEVICE_ENV, raising=False)
    with pytest.raises(ValueError):
        m.pick_device("nonsense")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="not available"):
            m.pick_device("cuda")
        assert m.pick_device().type in ("cpu", "mps")


def test_pick_device_env_override(monkeypatch):
    monkeypatch.setenv(m.DEVICE_ENV, "cpu")
    assert m.pick_device() == CPU


def test_num_threads_restores():
    before = torch.get_num_threads()
    with m.num_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError):
        with m.num_threads(0):
            pass
    assert torch.get_num_threads() == before


# ---------------------------------------------------------------------------------------- timing


def test_timing_statistics_exact():
    t = m.Timing([5.0, 1.0, 3.0, 2.0, 4.0])
    assert t.median == 3.0
    assert t.q1 == 2.0 and t.q3 == 4.0  # numpy's linear quantiles
    assert t.iqr == 2.0
    assert t.rel_spread == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        m.Timing([])


def fake_timer(durations):
    """A clock that advances by the next duration each time it is read twice (start, stop)."""
    now = [0.0]
    ticks = iter(itertools.chain.from_iterable((0.0, d) for d in durations))

    def timer():
        now[0] += next(ticks)
        return now[0]

    return timer


def test_time_fn_fake_timer_excludes_warmup_and_counts_calls():
    calls = []
    durations = [0.010, 0.030, 0.020, 0.050, 0.040]
    t = m.time_fn(lambda: calls.append(1), warmup=2, repeats=5, device=CPU, timer=fake_timer(durations))
    assert len(calls) == 7  # 2 warm-up + 5 timed
    assert t.samples == pytest.approx(durations)
    assert t.median == pytest.approx(0.030)
    assert t.iqr == pytest.approx(0.040 - 0.020)


def test_time_fn_sleep_has_robust_bounds():
    t = m.time_fn(lambda: time.sleep(0.005), warmup=1, repeats=5, device=CPU)
    assert len(t.samples) == 5
    assert 0.0045 <= t.median < 0.2
    assert t.q1 <= t.median <= t.q3


def test_time_fn_budget_caps_repeats_but_keeps_three():
    t = m.time_fn(lambda: time.sleep(0.02), warmup=3, repeats=50, device=CPU, budget_s=0.05)
    assert 3 <= len(t.samples) < 50


@pytest.mark.parametrize("kwargs", [{"repeats": 0}, {"warmup": -1}, {"repeats": 2.5}, {"budget_s": 0}])
def test_time_fn_rejects_bad_counts(kwargs):
    with pytest.raises(ValueError):
        m.time_fn(lambda: None, device=CPU, **kwargs)


# ---------------------------------------------------------------------------------------- records


def test_records_json_round_trip_with_provenance(tmp_path):
    timing = m.Timing([0.002, 0.001, 0.003])
    rec = m.Record.from_timing("matmul", {"batch": 4, "d_in": 8, "d_out": 16}, timing, CPU, "bf16",
                               {"bytes_per_s": 1.5e10, "flops_per_s": 2e9})
    assert rec.median_s == 0.002 and rec.q1_s == 0.0015 and rec.q3_s == 0.0025
    assert rec.device == "cpu" and rec.dtype == "bf16" and rec.torch == torch.__version__
    assert rec.host == m.device_name(CPU) and rec.threads == torch.get_num_threads()
    assert rec.date.endswith("+00:00")  # ISO 8601, UTC
    assert rec.cuda is None and rec.driver is None
    assert rec.gb_per_s == pytest.approx(15.0)

    path = m.save_records([rec, rec], tmp_path / "sub" / "records.json")
    doc = json.loads(path.read_text())
    assert doc["schema"] == m.SCHEMA and len(doc["records"]) == 2
    for key in ("device", "dtype", "torch", "date", "host", "samples", "params", "extra"):
        assert key in doc["records"][0]
    back = m.load_records(path)
    assert back == [rec, rec]
    assert back[0].timing.median == rec.median_s


def test_provenance_keys():
    p = m.provenance(CPU, torch.float16)
    assert p["dtype"] == "fp16" and p["device"] == "cpu"
    assert {"device", "dtype", "torch", "date", "host", "threads", "cuda", "driver"} <= set(p)


def test_records_to_frame_flattens():
    pd = pytest.importorskip("pandas")
    rec = m.Record.from_timing("x", {"batch": 2}, m.Timing([1.0]), CPU, "fp32", {"gb_per_s": 3.0})
    frame = m.records_to_frame([rec])
    assert isinstance(frame, pd.DataFrame)
    assert frame.loc[0, "batch"] == 2 and frame.loc[0, "gb_per_s"] == 3.0


# ---------------------------------------------------------------------------------------- knee


BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


@pytest.mark.parametrize("true_knee", [4, 16, 64])
def test_knee_of_flat_then_linear(true_knee):
    times = [max(1.0, b / true_knee) for b in BATCHES]  # the roofline shape: max(bytes/BW, flops/peak)
    fit = m.knee_fit(BATCHES, times)
    assert fit.batch == pytest.approx(true_knee, rel=1e-6)
    assert fit.exponent == pytest.approx(1.0)
    assert fit.predict(BATCHES) == pytest.approx(times)


def test_knee_of_flat_then_sublinear_rise():
    # a CPU-like curve: flat, then step time grows as B**0.5 (the kernel gets more efficient with B)
    times = [max(2.0, 2.0 * (b / 16) ** 0.5) for b in BATCHES]
    fit = m.knee_fit(BATCHES, times)
    assert fit.batch == pytest.approx(16, rel=1e-6)
    assert fit.exponent == pytest.approx(0.5)


def test_knee_with_multiplicative_noise_is_close():
    noise = [1.04, 0.97, 1.02, 0.96, 1.05, 0.98, 1.03, 0.95, 1.01]
    times = [max(1e-3, 1e-3 * b / 16) * e for b, e in zip(BATCHES, noise, strict=True)]
    assert 10 <= m.knee(BATCHES, times) <= 26


def test_knee_with_offset_linear_part():
    # flat, then t = a + s (B - B0): the knee lands within a factor of two of B0
    times = [1.0 + max(0, b - 32) / 32 for b in BATCHES]
    assert 24 <= m.knee(BATCHES, times) <= 64


def test_knee_of_flat_curve_is_none():
    assert m.knee(BATCHES, [1.0, 1.05, 0.98, 1.02, 1.1, 1.0, 1.04, 1.08, 1.1]) is None


def test_knee_order_of_points_does_not_matter():
    times = [max(1.0, b / 8) for b in BATCHES]
    assert m.knee(BATCHES[::-1], times[::-1]) == pytest.approx(8)


@pytest.mark.parametrize(
    "batches, times",
    [([1, 2], [1.0, 2.0]), ([1, 2, 4], [1.0, 2.0]), ([0, 2, 4], [1.0, 1.0, 2.0]),
     ([1, 2, 4], [1.0, -1.0, 2.0]), ([1, 2, 2], [1.0, 1.0, 2.0])],
)
def test_knee_rejects_bad_input(batches, times):
    with pytest.raises(ValueError):
        m.knee(batches, times)


# ---------------------------------------------------------------------------------------- sizes


def test_sizes_cpu_are_small_and_stream_from_dram():
    s = m.sizes_for(CPU)
    assert 64 * m.MiB <= s.copy_bytes <= 2 * m.GiB
    assert s.batches[0] == 1 and list(s.batches) == sorted(s.batches) and s.batches[-1] <= 256
    assert 32 * m.MiB <= 2 * s.weight_elems <= 256 * m.MiB  # bf16 weight bigger than a typical L3
    assert s.repeats >= 3 and s.budget_s is not None


# ---------------------------------------------------------------------------------------- probes (CPU)


def test_copy_bandwidth_is_plausible():
    rec = m.copy_bandwidth(CPU, nbytes=64 * m.MiB, warmup=1, repeats=3)
    assert rec.name == "copy" and rec.extra["bytes"] == 2 * 64 * m.MiB
    assert 0.1 <= rec.gb_per_s <= 10_000
    assert rec.bytes_per_s == pytest.approx(rec.extra["bytes"] / rec.median_s)


def test_matmul_record_counts():
    rec = m.matmul_time(4, 256, 512, "fp32", CPU, warmup=1, repeats=3)
    assert rec.params == {"batch": 4, "d_in": 256, "d_out": 512}
    assert rec.extra["flops"] == 2 * 4 * 256 * 512
    assert rec.extra["bytes"] == 4 * (256 * 512 + 4 * 256 + 4 * 512)
    assert rec.extra["per_token_s"] == pytest.approx(rec.median_s / 4)
    assert rec.dtype == "fp32" and rec.device == "cpu"


def test_matmul_sweep_per_token_time_falls_with_batch_bf16():
    # The weight must not fit in the last-level cache (else B=1 measures the cache); sizes_for makes it
    # at least twice the LLC. A CPU without native bf16 tops out near 10 GFLOP/s, so expect ~2x, not 16x.
    s = m.sizes_for(CPU)
    recs = m.matmul_sweep([1, 16], s.d_in, s.d_out, "bf16", CPU, progress=False, warmup=2, repeats=5)
    assert [r.params["batch"] for r in recs] == [1, 16]
    assert all(r.extra["per_token_s"] == r.median_s / r.params["batch"] for r in recs)
    # Amortizing one weight read over 16 tokens must help. Compared on the fastest sample of each:
    # another process on a shared machine only ever adds time (and stalls multi-threaded GEMMs the most).
    best = [min(r.samples) / r.params["batch"] for r in recs]
    assert best[1] < best[0], [r.samples for r in recs]


@pytest.mark.parametrize(
    "call",
    [lambda: m.matmul_time(0, 8, 8, "fp32", "cpu"), lambda: m.matmul_time(-3, 8, 8, "fp32", "cpu"),
     lambda: m.matmul_time(1.5, 8, 8, "fp32", "cpu"), lambda: m.matmul_time(1, 0, 8, "fp32", "cpu"),
     lambda: m.matmul_time(1, 8, 8, "int8", "cpu"), lambda: m.matmul_sweep([], 8, 8, "fp32", "cpu"),
     lambda: m.copy_bandwidth("cpu", nbytes=0), lambda: m.peak_matmul_flops("cpu", "fp64", n=8)],
)
def test_probes_reject_bad_input(call):
    with pytest.raises(ValueError):
        call()


def test_peak_and_measured_roofline_small(monkeypatch):
    small = m.Sizes(copy_bytes=8 * m.MiB, d_in=64, d_out=64, batches=(1, 2), peak_n=256, warmup=1, repeats=3,
                    budget_s=0.5)
    monkeypatch.setattr(m, "sizes_for", lambda device=None: small)
    peak = m.peak_matmul_flops(CPU, "fp32")
    assert peak.flops_per_s > 1e6 and len(peak.extra["shapes"]) == 2
    assert peak.flops_per_s == max(s["flops_per_s"] for s in peak.extra["shapes"])
    roof = m.measured_roofline(CPU, "fp32")
    bw, flops = roof
    assert bw == roof.bandwidth > 0 and flops == roof.flops > 0
    assert math.isclose(roof.ridge, flops / bw)
    assert [r.name for r in roof.records] == ["copy", "peak_matmul"]


def test_measured_roof_as_accelerator_predicts_with_the_cost_model():
    from specnotes import cost

    roof = m.MeasuredRoof(bandwidth=10e9, flops=20e9)
    here = roof.as_accelerator("bf16")
    assert here.ridge("bf16") == pytest.approx(2.0)
    gemv = cost.gemm_cost(1, 1000, 1000)  # 2 MFLOP, ~2 MB: memory-bound here
    assert cost.roofline_time(gemv, here, "bf16") == pytest.approx(gemv.bytes / 10e9)
