"""specnotes.measure: devices and the dtype probe, the one timer, records, the CPU probes.

Expected values are derived by hand (counts, fake clocks) or by an independent method (a numpy copy
timed separately), never by re-running the implementation's formula. Probes on the real CPU assert
orderings and bands wide enough for a shared, noisy machine.
"""

import itertools
import json
import os
import re
import time

import numpy as np
import pytest
import torch

from specnotes import measure as m
from specnotes.measure import devices, dtypes

CPU = torch.device("cpu")


# ---------------------------------------------------------------------------------------- dtypes and devices


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


def test_cpu_device_helpers():
    assert m.pick_device("cpu") == CPU
    name = m.device_name(CPU)
    n = torch.get_num_threads()
    assert f"({n} thread{'s' * (n != 1)}, {torch.backends.cpu.get_cpu_capability()})" in name
    with m.num_threads(1):  # one thread is singular: "(1 thread, AVX2)", not "1 threads"
        assert "(1 thread, " in m.device_name(CPU) and "threads" not in m.device_name(CPU)
    with m.num_threads(2):
        assert "(2 threads, " in m.device_name(CPU)
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
    monkeypatch.setenv(m.DEVICE_ENV, "tpu")
    with pytest.raises(ValueError, match="SPECNOTES_DEVICE must be 'cpu', 'cuda', 'cuda:N' or 'mps', got 'tpu'"):
        m.sizes_for()


def test_every_measure_entry_point_checks_its_device():
    # resolve passes a CPU device through and checks everything else as pick_device does
    assert devices.resolve(CPU) is CPU and devices.resolve("cpu") == CPU
    for call in (m.sizes_for, m.copy_bandwidth, m.device_name, devices.cache_bytes, devices.memory_bytes, m.sync):
        with pytest.raises(ValueError, match="device must be 'cpu', 'cuda', 'cuda:N' or 'mps', got 'tpu'"):
            call("tpu")


def test_memory_bytes_is_what_is_free_at_most(monkeypatch):
    free = devices.memory_bytes("cpu")
    assert 0 < free <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # a container's limit below what the host has free wins; unreadable everything: 8 GiB
    monkeypatch.setattr(devices, "_cgroup_limit", lambda: 2**30)
    assert 0 < devices.memory_bytes("cpu") <= 2**30
    monkeypatch.setattr(devices, "_cgroup_limit", lambda: None)
    monkeypatch.setattr(devices, "_meminfo", lambda field: None)
    monkeypatch.setattr(devices.os, "sysconf", lambda name: (_ for _ in ()).throw(ValueError(name)))
    assert devices.memory_bytes("cpu") == 8 * 2**30


def test_meminfo_reads_bytes(tmp_path, monkeypatch):
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal:       32000000 kB\nMemAvailable:   1000 kB\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(fake if path == "/proc/meminfo" else path,
                                                                          *a, **k))
    assert devices._meminfo("MemAvailable") == 1_024_000 and devices._meminfo("Cached") is None


def test_num_threads_restores():
    before = torch.get_num_threads()
    with m.num_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="num_threads"):
            with m.num_threads(bad):
                pass
    assert torch.get_num_threads() == before


# (ratios: k+1-row / 1-row GEMM time, 1-row GB/s) of the CPUs the book runs on, and what must be chosen
@pytest.mark.parametrize("ratios, gemv, chosen", [
    ({"bf16": 1.08, "fp32": 4.5, "fp16": 1.3}, {"bf16": 25, "fp32": 30, "fp16": 20}, "bf16"),  # AVX-512 + AMX
    ({"bf16": 4.4, "fp32": 1.9}, {"bf16": 9, "fp32": 12}, "fp32"),  # AVX2: bf16 math emulated
    ({"bf16": 1.00, "fp32": 1.05}, {"bf16": 10, "fp32": 10}, "bf16"),  # a tie goes to bf16
    ({"bf16": 1.3, "fp32": 1.1}, {"bf16": 10, "fp32": 10}, "fp32"),  # 18% apart: not a tie
    ({"bf16": 1.1, "fp16": 0.5, "fp32": 3}, {"bf16": 20, "fp16": 2, "fp32": 20}, "bf16"),  # fp16: no fast 1-row path
    ({"bf16": 0.8, "fp32": 1.05}, {"bf16": 10, "fp32": 10}, "bf16"),  # below 1 counts as flat, then the tie rule
])
def test_choose_dtype_picks_the_widest_memory_bound_range(ratios, gemv, chosen):
    assert dtypes.choose_dtype(ratios, gemv) == chosen


@pytest.mark.parametrize("ratios, gemv", [({}, {}), ({"bf16": 1.0}, {"fp32": 1.0}), ({"int8": 1.0}, {"int8": 1.0})])
def test_choose_dtype_rejects_mismatched_input(ratios, gemv):
    with pytest.raises(ValueError):
        dtypes.choose_dtype(ratios, gemv)


def test_dtype_env_override_wins_and_is_explained(monkeypatch):
    for value, name in (("float32", "fp32"), ("bfloat16", "bf16"), ("fp16", "fp16")):
        monkeypatch.setenv(m.DTYPE_ENV, value)
        choice = m.dtype_choice(CPU)
        assert choice.dtype == name and m.default_dtype(CPU) is m.DTYPES[name]
        assert m.DTYPE_ENV in choice.reason and value in choice.reason
    monkeypatch.setenv(m.DTYPE_ENV, "int8")
    with pytest.raises(ValueError, match="SPECNOTES_DTYPE"):
        m.dtype_choice(CPU)


def test_probe_runs_once_per_process_and_reports_its_ratios(monkeypatch):
    monkeypatch.delenv(m.DTYPE_ENV, raising=False)
    monkeypatch.setattr(dtypes, "_CHOICES", {})
    costs = {"bf16": (0.010, 1.1), "fp32": (0.020, 4.5), "fp16": (0.012, 2.5)}  # (1-row seconds, 5-row/1-row)
    calls = []

    def fake_row_cost(dtype, d_in, d_out, rows=5, pairs=11, timer=None):
        calls.append(dtype)
        return costs[dtype]

    monkeypatch.setattr(dtypes, "row_cost", fake_row_cost)
    choice = m.dtype_choice(CPU)
    assert m.dtype_choice(CPU) is choice and calls == ["bf16", "fp32", "fp16"]
    assert choice.dtype == "bf16" and choice.source == "probe"
    assert choice.ratios == pytest.approx({"bf16": 1.1, "fp32": 4.5, "fp16": 2.5})
    assert choice.gemv_gb_per_s["fp32"] == pytest.approx(64 * 2**20 / 0.020 / 1e9)  # 3.355 GB/s
    assert "1.10×" in choice.reason and "fp32 4.50×" in choice.reason


def test_row_cost_pairs_with_a_fake_clock(monkeypatch):
    # every 1-row call takes 2 ms and every 5-row call 3 ms, except one 5-row call slowed to 30 ms by
    # another process: the medians ignore it
    durations = iter([0.002, 0.003] * 2 + [0.002, 0.030] + [0.002, 0.003] * 2)  # warm-ups in the first pair
    now = [0.0]
    real = dtypes.time_fn

    def tick():
        now[0] += next(durations)

    monkeypatch.setattr(dtypes, "time_fn", lambda fn, **kw: real(tick, **kw))
    one, ratio = dtypes.row_cost("fp32", 8, 8, pairs=3, timer=lambda: now[0])
    assert one == pytest.approx(0.002) and ratio == pytest.approx(1.5)


def test_real_probe_is_quick_and_consistent(monkeypatch):
    monkeypatch.delenv(m.DTYPE_ENV, raising=False)
    monkeypatch.setattr(dtypes, "_CHOICES", {})
    choice = m.dtype_choice(CPU)
    assert choice.seconds < 4  # budget 1.5 s for the optional fp16; a busy 2-core machine can double it
    assert {"bf16", "fp32"} <= set(choice.ratios) and choice.dtype in choice.ratios
    assert choice.dtype == dtypes.choose_dtype(choice.ratios, choice.gemv_gb_per_s)


# ---------------------------------------------------------------------------------------- timing


def test_timing_statistics_exact():
    t = m.Timing([5.0, 1.0, 3.0, 2.0, 4.0])
    assert t.median == 3.0 and t.fastest == 1.0
    assert t.q1 == 2.0 and t.q3 == 4.0  # numpy's linear quantiles
    assert t.iqr == 2.0
    assert t.rel_spread == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        m.Timing([])


def fake_clock(durations):
    """A clock that only ``tick()`` moves, by the next of ``durations`` each time: (timer, tick)."""
    now, steps = [0.0], iter(durations)

    def tick():
        now[0] += next(steps)

    return (lambda: now[0]), tick


def test_time_fn_fake_clock_excludes_warmup_and_counts_calls():
    durations = [0.100, 0.200, 0.010, 0.030, 0.020, 0.050, 0.040]  # 2 warm-ups, then 5 samples
    timer, tick = fake_clock(durations)
    t = m.time_fn(tick, warmup=2, repeats=5, device=CPU, timer=timer)
    assert t.samples == pytest.approx([0.010, 0.030, 0.020, 0.050, 0.040])
    assert t.median == pytest.approx(0.030) and t.iqr == pytest.approx(0.040 - 0.020)


def test_time_fn_budget_caps_repeats_but_keeps_three():
    timer, tick = fake_clock([0.3] * 60)
    t = m.time_fn(tick, warmup=3, repeats=50, device=CPU, budget_s=0.5, timer=timer)
    # warm-up stops after 1 call (0.3 s >= half the budget); ceil(0.5 / 0.3) = 2 samples, raised to 3
    assert len(t.samples) == 3
    timer, tick = fake_clock([1 / 64] * 60)
    assert len(m.time_fn(tick, warmup=1, repeats=20, device=CPU, budget_s=1 / 8, timer=timer).samples) == 8


def test_time_fn_min_s_stretches_fast_calls_past_a_stall():
    # 3 repeats of 1/64 s would be 3/64 s of samples; min_s = 1/4 s asks for 16
    timer, tick = fake_clock([1 / 64] * 100)
    t = m.time_fn(tick, warmup=0, repeats=3, device=CPU, timer=timer, min_s=1 / 4)
    assert len(t.samples) == 16
    timer, tick = fake_clock([1.0] * 10)  # slow calls: repeats already exceed min_s
    assert len(m.time_fn(tick, warmup=0, repeats=3, device=CPU, timer=timer, min_s=0.5).samples) == 3
    timer, tick = fake_clock(itertools.repeat(0.0))  # free calls stop at MAX_SAMPLES
    assert len(m.time_fn(tick, warmup=0, repeats=3, device=CPU, timer=timer, min_s=1).samples) == m.timing.MAX_SAMPLES


def test_time_interleaved_turns_the_order_and_times_each_call_once_a_round():
    calls, now = [], [0.0]
    cost = {"a": 0.010, "b": 0.030, "c": 0.020}

    def call(name):
        calls.append(name)
        now[0] += cost[name]

    timings = m.time_interleaved({n: (lambda n=n: call(n)) for n in cost}, warmup=1, repeats=3, device=CPU,
                                 timer=lambda: now[0])
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]  # the first round is warm-up
    assert {n: t.samples for n, t in timings.items()} == {n: pytest.approx([c] * 3) for n, c in cost.items()}
    with pytest.raises(ValueError, match="fns"):
        m.time_interleaved({}, device=CPU)
    with pytest.raises(ValueError, match="repeats"):
        m.time_interleaved({"a": lambda: None}, repeats=0, device=CPU)


def test_time_fn_sleep_has_robust_bounds():
    t = m.time_fn(lambda: time.sleep(0.005), warmup=1, repeats=5, device=CPU)
    assert len(t.samples) == 5 and 0.0045 <= t.median < 0.2 and t.q1 <= t.median <= t.q3


@pytest.mark.parametrize("kwargs", [{"repeats": 0}, {"warmup": -1}, {"repeats": 2.5}, {"budget_s": 0}])
def test_time_fn_rejects_bad_counts(kwargs):
    with pytest.raises(ValueError):
        m.time_fn(lambda: None, device=CPU, **kwargs)


def test_doubling_sweep_stops_when_done_at_or_past_min_last():
    timer, tick = fake_clock(itertools.repeat(0.1))
    seen = []

    def point(b):
        tick()
        seen.append(b)
        return 10 / b  # "S": 10, 5, 2.5, 1.25, 0.625 ...

    sweep = m.doubling_sweep(point, lambda bs, rs: rs[-1] < 1, min_last=4, limit=64, timer=timer)
    assert sweep.batches == seen == [1, 2, 4, 8, 16] and sweep.stop == "done"
    sweep = m.doubling_sweep(point, lambda bs, rs: True, min_last=4, limit=64, timer=timer)
    assert sweep.batches == [1, 2, 4] and sweep.stop == "done"  # done from the start, but measured up to 4


def test_doubling_sweep_respects_limit_and_budget():
    timer, tick = fake_clock(itertools.repeat(1.0))
    sweep = m.doubling_sweep(lambda b: tick(), lambda bs, rs: False, limit=8, timer=timer)
    assert sweep.batches == [1, 2, 4, 8] and sweep.stop == "limit"
    # a point costs 0.1·B seconds: after B = 1, 2 (0.3 s spent, last 0.2) the next needs ~0.4 more: 0.7 <= 1;
    # after B = 4 (0.7 s spent, last 0.4), 0.7 + 0.8 > 1: stop before B = 8
    now = [0.0]

    def point(b):
        now[0] += 0.1 * b

    sweep = m.doubling_sweep(point, lambda bs, rs: False, budget_s=1.0, timer=lambda: now[0])
    assert sweep.batches == [1, 2, 4] and sweep.stop == "budget" and sweep.seconds == pytest.approx(0.7)


# ---------------------------------------------------------------------------------------- records


def test_record_and_results_round_trip_with_one_provenance_block(tmp_path):
    rec = m.Record.from_timing("matmul", {"batch": 4}, m.Timing([0.002, 0.001, 0.003]), CPU, "bf16",
                               {"bytes_per_s": 1.5e10})
    assert (rec.median_s, rec.q1_s, rec.q3_s, rec.fastest_s) == (0.002, 0.0015, 0.0025, 0.001)
    assert rec.device == "cpu" and rec.dtype == "bf16" and rec.gb_per_s == pytest.approx(15.0)
    prov = m.provenance(CPU, "fp16", command="pytest")
    results = m.Results(prov, {"sweep": [rec, rec]}, {"budget_s": 1.0})
    path = m.save_results(results, tmp_path / "sub" / "r.json")
    doc = json.loads(path.read_text())
    assert doc["schema"] == m.SCHEMA and set(doc) == {"schema", "provenance", "sections", "notes"}
    assert "date" not in doc["sections"]["sweep"][0]  # provenance once per document, not per record
    back = m.load_results(path)
    assert back.sections["sweep"] == [rec, rec] and back.provenance == prov and back.notes == {"budget_s": 1.0}


def test_save_results_never_leaves_a_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    path.write_text("the earlier, complete file\n")
    with pytest.raises(TypeError):  # notes that JSON cannot hold: nothing is written
        m.save_results(m.Results({}, {}, {"bad": object()}), path)
    assert path.read_text() == "the earlier, complete file\n" and len(list(tmp_path.iterdir())) == 1

    def dies_half_way(self, text):  # the disk fills up mid-write: the temporary file has half the text
        open(self, "w").write(text[: len(text) // 2])
        raise OSError("no space left on device")

    monkeypatch.setattr(type(path), "write_text", dies_half_way)
    with pytest.raises(OSError, match="no space"):
        m.save_results(m.Results({"device": "cpu"}, {}), path)
    assert path.read_text() == "the earlier, complete file\n" and len(list(tmp_path.iterdir())) == 1


def test_load_results_rejects_other_files(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"schema": "something else", "sections": {}}))
    with pytest.raises(ValueError, match=r"x.json: not a specnotes.results/1 file"):
        m.load_results(bad)
    with pytest.raises(ValueError, match="missing"):
        m.Record.from_dict({"name": "x"})


def test_provenance_has_one_date_format_and_says_why_this_dtype(monkeypatch):
    monkeypatch.setenv(m.DTYPE_ENV, "float32")
    p = m.provenance(CPU)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", p["date"])
    assert p["dtype"] == "fp32" and "SPECNOTES_DTYPE" in p["dtype_reason"]
    assert {"device", "host", "threads", "torch", "python", "cuda", "driver", "cuda_graphs", "compiled"} <= set(p)
    assert m.provenance(CPU, "bf16")["dtype_reason"] == "given by the caller"  # not the dtype chosen here


def test_shipped_results_load_in_the_one_format():
    from specnotes import bench
    from specnotes.tiny.model import data_file

    sampler = m.load_results(data_file("bench_sampler.json"))
    shapes = {(r.params["B"], r.params["k"], r.params["V"]) for r in sampler.sections["sampler"]}
    assert shapes == set(bench.SAMPLER_SHAPES) and len(sampler.sections["sampler"]) == 3 * len(shapes)
    assert sampler.sections["roofline"][0].name == "copy"
    card = json.loads(data_file("models.json").read_text())
    assert card["target"]["provenance"]["device"] == "cpu" and card["draft"]["provenance"]["dtype"] == "fp32"
    # the one provenance block (the shipped card was converted from an older record, and says so)
    for which in ("target", "draft"):
        assert set(card[which]["provenance"]) == set(m.provenance(CPU, "fp32")) | {"converted"}


# ---------------------------------------------------------------------------------------- sizes and probes


def test_sizes_cpu_are_small_and_stream_from_dram():
    s = m.sizes_for(CPU)
    assert 256 * m.MiB <= s.copy_bytes <= m.GiB
    assert s.batches[0] == 1 and list(s.batches) == sorted(s.batches) and s.batches[-1] <= 256
    assert 64 * m.MiB <= 2 * s.weight_elems <= 256 * m.MiB  # bf16 weight bigger than a typical L3
    assert s.repeats >= 3 and s.budget_s is not None


def test_copy_bandwidth_counts_read_plus_write_with_a_fake_clock():
    ticks = itertools.count()
    rec = m.copy_bandwidth(CPU, nbytes=8 * m.MiB, warmup=1, repeats=3, timer=lambda: 0.005 * next(ticks))
    assert rec.name == "copy" and rec.extra["bytes"] == 16_777_216  # 8 MiB read + 8 MiB written
    assert rec.median_s == pytest.approx(0.005) and rec.gb_per_s == pytest.approx(3.3554432)


def test_copy_bandwidth_agrees_with_a_numpy_copy_timed_separately():
    nbytes = 64 * m.MiB
    src, dst = np.ones(nbytes // 4, np.float32), np.empty(nbytes // 4, np.float32)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    numpy_gbs = 2 * nbytes / best / 1e9
    rec = m.copy_bandwidth(CPU, nbytes=nbytes, warmup=1, repeats=5)
    torch_gbs = 2 * nbytes / rec.fastest_s / 1e9
    # two streaming copies of the same buffer: within 4x of each other whatever the machine (torch may use
    # two threads where numpy uses one; contention slows either), never 0.1 or 10,000 GB/s apart
    assert numpy_gbs / 4 <= torch_gbs <= numpy_gbs * 4, (torch_gbs, numpy_gbs)


def test_matmul_record_counts_by_hand():
    rec = m.matmul_time(4, 256, 512, "fp32", CPU, warmup=1, repeats=3)
    assert rec.params == {"batch": 4, "d_in": 256, "d_out": 512}
    assert rec.extra["flops"] == 1_048_576  # 2 · 4 · 256 · 512
    assert rec.extra["bytes"] == 536_576  # 4 bytes · (256·512 weights + 4·256 inputs + 4·512 outputs)
    assert rec.dtype == "fp32" and rec.device == "cpu"


def test_rates_by_hand():
    r = m.records.rates(flops=2e9, nbytes=1e9, seconds=0.5, tokens=8)
    assert r == {"flops": 2e9, "bytes": 1e9, "intensity": 2.0, "flops_per_s": 4e9, "bytes_per_s": 2e9,
                 "gb_per_s": 2.0, "per_token_s": 0.0625}


def test_matmul_sweep_per_token_time_falls_with_batch_bf16():
    # The weight must not fit in the last-level cache (else B=1 measures the cache); sizes_for makes it
    # at least twice a typical LLC. Amortizing one weight read over 16 tokens must help, compared on the
    # fastest sample of each (contention only ever adds time). A CPU without bf16 units helps least.
    s = m.sizes_for(CPU)
    recs = m.matmul_sweep([1, 16], s.d_in, s.d_out, "bf16", CPU, progress=False, warmup=2, repeats=5)
    assert [r.params["batch"] for r in recs] == [1, 16]
    best = [r.fastest_s / r.params["batch"] for r in recs]
    assert best[1] < best[0], [r.samples for r in recs]


@pytest.mark.parametrize(
    "call",
    [lambda: m.matmul_time(0, 8, 8, "fp32", "cpu"), lambda: m.matmul_time(-3, 8, 8, "fp32", "cpu"),
     lambda: m.matmul_time(1.5, 8, 8, "fp32", "cpu"), lambda: m.matmul_time(1, 0, 8, "fp32", "cpu"),
     lambda: m.matmul_time(1, 8, 8, "int8", "cpu"), lambda: m.matmul_sweep([], 8, 8, "fp32", "cpu"),
     lambda: m.copy_bandwidth("cpu", nbytes=0), lambda: m.peak_matmul_flops("cpu", "fp64", n=8),
     lambda: m.matmul_floor("cpu", "fp32", repeats=0)],
)
def test_probes_reject_bad_input(call):
    with pytest.raises(ValueError):
        call()


def test_peak_and_measured_roofline_small(monkeypatch):
    small = m.Sizes(copy_bytes=8 * m.MiB, d_in=64, d_out=64, batches=(1, 2), peak_n=256, warmup=1, repeats=3,
                    budget_s=0.5)
    monkeypatch.setattr(m.probes, "sizes_for", lambda device=None: small)
    peak = m.peak_matmul_flops(CPU, "fp32")
    # n x n x n and (n/4) x n x n: 2·256³ and 2·64·256² FLOPs
    assert {(s["batch"], s["flops"]) for s in peak.extra["shapes"]} == {(256, 33_554_432), (64, 8_388_608)}
    assert peak.extra["flops"] / peak.fastest_s == max(s["flops"] / s["fastest_s"] for s in peak.extra["shapes"])
    roof = m.measured_roofline(CPU, "fp32")
    copy = roof.records[0]
    assert [r.name for r in roof.records] == ["copy", "peak_matmul"] and roof.dtype == "fp32"
    assert roof.bandwidth == 2 * 8 * m.MiB / copy.fastest_s >= copy.bytes_per_s  # fastest sample, not median
    assert tuple(roof) == (roof.bandwidth, roof.flops)


def test_measured_roof_as_accelerator_predicts_with_the_cost_model():
    from specnotes.analytic import cost

    roof = m.MeasuredRoof(bandwidth=10e9, flops=20e9, dtype="bf16")
    assert roof.ridge == 2.0 and roof.critical_batch == 2.0  # bf16: 2 bytes per weight, 2 FLOPs per weight
    assert m.MeasuredRoof(10e9, 20e9, dtype="fp32").critical_batch == 4.0
    here = roof.as_accelerator()
    gemv = cost.gemm_cost(1, 1000, 1000)  # 2 MFLOP, 2,004,000 bytes: memory-bound here
    assert cost.roofline_time(gemv, here) == pytest.approx(2_004_000 / 10e9)


def test_best_roof_keeps_the_faster_measurement_of_each_roof():
    slow_copy = m.MeasuredRoof(bandwidth=10e9, flops=400e9, dtype="bf16")
    slow_peak = m.MeasuredRoof(bandwidth=30e9, flops=200e9, dtype="bf16")
    best = slow_copy.best(slow_peak)
    assert (best.bandwidth, best.flops) == (30e9, 400e9) == tuple(slow_peak.best(slow_copy))
    assert best.ridge == pytest.approx(400e9 / 30e9)
    with pytest.raises(ValueError, match="bf16 and fp32"):
        slow_copy.best(m.MeasuredRoof(10e9, 20e9, dtype="fp32"))


def test_matmul_floor_is_below_a_real_gemv():
    floor = m.matmul_floor(CPU, "fp32", repeats=20)
    gemv = m.matmul_time(1, 4096, 4096, "fp32", CPU, warmup=1, repeats=3)  # 64 MiB: milliseconds
    assert 0 < floor < gemv.fastest_s


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
    times = [max(2.0, 2.0 * (b / 16) ** 0.5) for b in BATCHES]
    fit = m.knee_fit(BATCHES, times)
    assert fit.batch == pytest.approx(16, rel=1e-6) and fit.exponent == pytest.approx(0.5)


def test_knee_with_multiplicative_noise_is_close():
    noise = [1.04, 0.97, 1.02, 0.96, 1.05, 0.98, 1.03, 0.95, 1.01]
    times = [max(1e-3, 1e-3 * b / 16) * e for b, e in zip(BATCHES, noise, strict=True)]
    assert 10 <= m.knee(BATCHES, times) <= 26


def test_knee_of_flat_curve_is_none():
    assert m.knee(BATCHES, [1.0, 1.05, 0.98, 1.02, 1.1, 1.0, 1.04, 1.08, 1.1]) is None


@pytest.mark.parametrize(
    "batches, times",
    [([1, 2], [1.0, 2.0]), ([1, 2, 4], [1.0, 2.0]), ([0, 2, 4], [1.0, 1.0, 2.0]),
     ([1, 2, 4], [1.0, -1.0, 2.0]), ([1, 2, 2], [1.0, 1.0, 2.0])],
)
def test_knee_rejects_bad_input(batches, times):
    with pytest.raises(ValueError):
        m.knee(batches, times)


def test_measured_roof_reads_as_one_line():
    text = str(m.MeasuredRoof(bandwidth=20e9, flops=1.2e12, dtype="bf16"))
    assert text == "20.0 GB/s, 1200 GFLOP/s in bf16: ridge 60 FLOP/byte, critical batch 60 tokens"


def test_efficiency_sweep_doubles_m_past_the_rows_asked_for():
    sizes = m.Sizes(copy_bytes=2**20, d_in=64, d_out=128, batches=(1, 2, 4), peak_n=64, warmup=1, repeats=3)
    roof = m.MeasuredRoof(10e9, 100e9, dtype="fp32")
    records, eff = m.efficiency_sweep(roof, 6, "cpu", "fp32", sizes=sizes, progress=False, budget_s=30.0)
    assert [r.params["batch"] for r in records] == [1, 2, 4, 8] and eff.rows == (1, 2, 4, 8)
    assert all(r.params["d_in"] == 64 and r.params["d_out"] == 128 for r in records)
    # M = 1 is memory-bound on these roofs: the fp32 weight and one row in and out, 33,536 bytes at 10 GB/s
    assert eff.ratios[0] == pytest.approx(records[0].fastest_s / ((4 * 64 * 128 + 4 * (64 + 128)) / 10e9))


def test_detect_finds_no_row_for_a_cpu():
    assert m.detect_accelerator("cpu") is None  # a CPU's roofline is measured, never looked up
