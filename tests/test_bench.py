import json

import pytest
import torch

from specnotes import bench, measure, stack


def test_quick_bench_writes_every_section_in_the_one_format(tmp_path):
    assert bench.main(["--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*.json")
    raw = json.loads(path.read_text())
    assert raw["schema"] == measure.SCHEMA and raw["notes"]["skipped"] == []
    prov = raw["provenance"]
    assert prov["device"] == "cpu" and prov["dtype_reason"] and "chapters --quick" in prov["command"]
    assert path.name == f"{bench.slug(prov['host'])}-{prov['dtype']}.json"
    results = measure.load_results(path)
    assert set(results.sections) == {"roofline", "stack_sweep", "matmul_sweep", "roofline_after"}
    assert [r.name for r in results.sections["roofline"]] == ["copy", "peak_matmul"]
    # the decode-GEMM sweep doubles M from 1 past the widest verify pass (k + 1 = 3 rows times the last batch)
    rows = [r.params["batch"] for r in results.sections["matmul_sweep"]]
    assert rows == [2**i for i in range(len(rows))] and rows[-1] >= min(16, 3 * results.notes["stack_sweep_last"])
    notes = results.notes
    assert notes["roof"]["bandwidth"] > 0 and notes["roof"]["flops"] > 0 and notes["t0_gemm_s"] > 0
    assert {"t0_target_s", "t0_draft_s", "cache_bytes", "stack_sweep_limit", "stacks", "alpha"} <= set(notes)
    # quick stacks: k = 2, B from 1 to at most 4; every B has decode (n = 1) and verify (n = 3) passes
    passes = {(r.params["stack"], r.params["batch"], r.params["new_tokens"]) for r in results.sections["stack_sweep"]}
    assert {("quick target", 1, 1), ("quick target", 1, 3), ("quick draft", 1, 1)} <= passes
    assert results.notes["stack_sweep_stop"] in ("done", "budget", "limit")
    # and it holds what each chapter needs to replay (findings.recorded; tests/test_reference.py replays them on
    # the shipped records, whose numbers are fixed, rather than on this run's, which another process can stall)
    from specnotes import findings

    replay = findings.recorded(results)
    assert set(replay.chapters) == {1, 2, 4} and replay.model.k == 2 and replay.floor == notes["t0_gemm_s"]
    assert replay.sweep.batches == sorted({r.params["batch"] for r in results.sections["stack_sweep"]})


def test_budget_skips_sections_instead_of_running_over():
    results = bench.run("cpu", quick=True, budget_s=0.0)
    assert results.sections == {}
    assert results.notes["skipped"] == ["roofline", "stack_sweep", "matmul_sweep", "roofline_after"]


def test_sampler_records_agree_and_carry_the_input_bytes():
    records = bench.sampler_records([(2, 3, 16)], "cpu", repeats=3)
    assert [r.name for r in records] == ["sampler_fused", "sampler_loop", "sampler_from_logits"]
    # p is [2, 4, 16] and q [2, 3, 16] float32: (128 + 96) · 4 bytes; their logits, the same
    assert all(r.extra["input_bytes"] == 896 and r.params == {"B": 2, "k": 3, "V": 16} for r in records)
    table = bench.sampler_table(measure.Results({}, {"sampler": records}))
    assert table == [{"B": 2, "k": 3, "V": 16, "fused ms": 1e3 * records[0].median_s,
                      "loop ms": 1e3 * records[1].median_s, "loop / fused": records[1].median_s / records[0].median_s}]
    # with a copy bandwidth, every sampler's time over the time to read its inputs once: 896 B at 896 B/ms
    copy = measure.Record("copy", {}, 1.0, 1.0, 1.0, [1.0], "cpu", "fp32", extra={"bytes_per_s": 896e3})
    table = bench.sampler_table(measure.Results({}, {"sampler": records, "roofline": [copy]}))
    assert table[0]["fused / read once"] == pytest.approx(1e3 * records[0].median_s)
    assert table[0]["from logits / read once"] == pytest.approx(1e3 * records[2].median_s)
    assert table[0]["from logits ms"] == 1e3 * records[2].median_s


def test_sampler_cases_span_the_acceptance_range():
    g = torch.Generator().manual_seed(0)
    sigma = bench.noise_for_alpha(0.5, 2000, g)
    alpha = {}
    for case in bench.SAMPLER_CASES:
        drafts, q, p, (u, v), (lq, lp) = bench.sampler_case(16, 3, 2000, "cpu", g, case, sigma)
        assert drafts.shape == (16, 3) and q.shape == (16, 3, 2000) and p.shape == (16, 4, 2000)
        alpha[case] = float(torch.minimum(p[:, :3], q).sum(-1).mean())
    assert alpha["independent"] < 0.3 and abs(alpha["realistic"] - 0.5) < 0.03 and alpha["all accepted"] > 0.999
    assert bench.noise_for_alpha(0.8, 2000, g) < sigma < bench.noise_for_alpha(0.2, 2000, g)  # more noise, lower α
    with pytest.raises(ValueError, match="alpha"):
        bench.noise_for_alpha(1.0, 100, g)


CALLS = ["from_logits", "from_target_logits", "copy_inputs", "lse_rows_read", "logsumexp_rows_read", "lse_target_rows",
         "logsumexp_target_rows", "softmax_rows_read", "softmax_target_rows", "softmax_then_sample",
         "softmax_then_loop"]


def expected_floor(t, rows):
    """The floor as issue 29 now defines it, written out separately: max(read once, the fastest of the three ways)."""
    read_once = t("copy_inputs") / 2
    ways = {"log-normalizers": min(t(f"lse_{rows}"), t(f"logsumexp_{rows}")), "softmax": t(f"softmax_{rows}")}
    term = min(ways, key=ways.get)
    return max(read_once, ways[term]), "reading once" if read_once >= ways[term] else term


def test_sampler_case_records_count_the_rows_read():
    records = bench.sampler_case_records([(8, 2, 32000)], "cpu", repeats=3, alpha=0.5, sigma=1.0, threads=(1, 2))
    assert [(r.name, r.params["case"], r.params["threads"]) for r in records] == [
        (n, c, t) for c in bench.SAMPLER_CASES for t in (1, 2) for n in CALLS]
    by = {r.params["case"]: r.extra for r in records if r.name == "from_logits"}
    every = by["all accepted"]
    assert every["rows_read"] == every["rows_total"] == 8 * 5 and every["mean_accepted"] == 2
    assert every["target_rows"] == 8 * 3  # the draft-probabilities path exponentiates the k + 1 rows of p only
    assert every["bytes_read"] == every["input_bytes"] == 8 * 5 * 32000 * 4  # more than one chunk
    assert by["independent"]["rows_read"] < by["realistic"]["rows_read"] < every["rows_read"]
    assert by["independent"]["alpha"] < by["realistic"]["alpha"] < every["alpha"]
    table = bench.sampler_case_table(measure.Results({}, {"sampler_cases": records}))
    assert [(row["case"], row["threads"]) for row in table] == [(c, t) for c in bench.SAMPLER_CASES for t in (1, 2)]
    timed = {(r.name, r.params["case"], r.params["threads"]): r.median_s for r in records}
    for row in table:
        t = lambda n: timed[n, row["case"], row["threads"]]  # noqa: B023
        read_once = t("copy_inputs") / 2
        (floor, term), (floor_p, term_p) = expected_floor(t, "rows_read"), expected_floor(t, "target_rows")
        assert row["floor ms"] == pytest.approx(1e3 * floor) and row["floor is"] == term
        assert row["÷ floor"] == pytest.approx(t("from_logits") / floor)
        assert row["÷ read once"] == pytest.approx(t("from_logits") / read_once)
        assert row["read once ms"] == pytest.approx(1e3 * read_once)  # half the copy: it reads and writes
        assert row["probs ÷ floor"] == pytest.approx(t("from_target_logits") / floor_p)
        assert row["probs floor is"] == term_p
        assert row["÷ bytes read"] == pytest.approx(row["÷ read once"] * 32 / (32 * row["rows read"]))
        assert row["softmax of rows read ÷ read once"] == pytest.approx(
            row["÷ read once"] / row["÷ softmax of rows read"])  # the earlier floor, on the same scale
    assert table[-1]["rows read"] == 1.0


def synthetic_records(ms: dict[str, float]) -> list[measure.Record]:
    """One case's calls at fixed times (ms; every call not named takes 1 ms), as sampler_case_records writes them."""
    extra = {"alpha": 0.5, "mean_accepted": 2.0, "rows_read": 10, "rows_total": 20, "input_bytes": 2, "bytes_read": 1}
    params = {"B": 64, "k": 4, "V": 32000, "case": "realistic", "threads": 1}
    return [measure.Record(n, params, ms.get(n, 1.0) / 1e3, None, None, [ms.get(n, 1.0) / 1e3] * 3, "cpu", "fp32",
                           extra=extra) for n in CALLS]


# (times in ms, floor ms, floor is, fastest way; the draft-probabilities path's floor ms and term); copy_inputs reads
# and writes, so reading once is half of it
FLOORS = [
    ({"copy_inputs": 4.0, "lse_rows_read": 6.5, "logsumexp_rows_read": 8.0, "softmax_rows_read": 3.7,
      "lse_target_rows": 5.0, "logsumexp_target_rows": 6.0, "softmax_target_rows": 2.5},
     3.7, "softmax", "torch.softmax", 2.5, "softmax"),
    ({"copy_inputs": 4.0, "lse_rows_read": 3.0, "logsumexp_rows_read": 4.0, "softmax_rows_read": 3.5,
      "lse_target_rows": 3.5, "logsumexp_target_rows": 2.5, "softmax_target_rows": 3.0},
     3.0, "log-normalizers", "fused.log_normalizers", 2.5, "log-normalizers"),
    ({"copy_inputs": 4.0, "lse_rows_read": 3.0, "logsumexp_rows_read": 2.5, "softmax_rows_read": 3.5},
     2.5, "log-normalizers", "torch.logsumexp", 2.0, "reading once"),
    ({"copy_inputs": 8.0, "lse_rows_read": 3.0, "logsumexp_rows_read": 3.5, "softmax_rows_read": 2.0,
      "lse_target_rows": 3.0, "logsumexp_target_rows": 3.0, "softmax_target_rows": 2.0},
     4.0, "reading once", "torch.softmax", 4.0, "reading once"),
]


@pytest.mark.parametrize(("ms", "floor", "term", "how", "floor_p", "term_p"), FLOORS)
def test_the_floor_is_the_fastest_way_to_the_normalizers_or_reading_once(ms, floor, term, how, floor_p, term_p):
    (row,) = bench.sampler_case_table(measure.Results({}, {"sampler_cases": synthetic_records(ms)}))
    assert row["floor ms"] == pytest.approx(floor) and row["floor is"] == term
    assert row["normalizers fastest by"] == how and row["÷ floor"] == pytest.approx(1.0 / floor)
    assert row["probs floor is"] == term_p and row["probs ÷ floor"] == pytest.approx(1.0 / floor_p)


def test_a_record_without_the_softmax_of_the_target_rows_floors_them_on_the_log_normalizers():
    # the records made before softmax_target_rows was timed: every other term stays as it was
    records = [r for r in synthetic_records(FLOORS[0][0]) if r.name != "softmax_target_rows"]
    (row,) = bench.sampler_case_table(measure.Results({}, {"sampler_cases": records}))
    assert row["floor is"] == "softmax" and row["probs ÷ floor"] == pytest.approx(1.0 / 5.0)


@pytest.mark.parametrize("wrong", ["softmax ignored", "minimum of the terms", "slowest way"])
def test_a_wrong_floor_fails_the_floor_test(monkeypatch, wrong):
    """The test above can fail: each floor that leaves a term out or combines them wrongly is caught by one case."""
    right = bench.floor_of

    def floor_of(times, read_once, rows):
        if wrong == "softmax ignored":
            return right({n: t for n, t in times.items() if not n.startswith("softmax")}, read_once, rows)
        if wrong == "minimum of the terms":
            floor, term, how = right(times, read_once, rows)
            return min(read_once, times[f"{bench.NORMALIZERS[how]}_{rows}"]), term, how
        slowest = max((n for n in times if n.endswith(rows)), key=times.get)
        return max(read_once, times[slowest]), "log-normalizers", "torch.logsumexp"

    monkeypatch.setattr(bench, "floor_of", floor_of)
    failed = 0
    for case in FLOORS:
        try:
            test_the_floor_is_the_fastest_way_to_the_normalizers_or_reading_once(*case)
        except AssertionError:
            failed += 1
    assert failed > 0


def test_sampler_cli_writes_the_one_format(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "SAMPLER_SHAPES", [(1, 2, 8)])
    monkeypatch.setattr(bench, "CASE_SHAPES", [(2, 2, 300), (1, 2, 300)])
    monkeypatch.setattr(bench, "shipped_alpha", lambda: 0.5)
    monkeypatch.setattr(measure.probes, "sizes_for", lambda device=None: measure.Sizes(
        copy_bytes=2**20, d_in=8, d_out=8, batches=(1,), peak_n=8, warmup=1, repeats=3, budget_s=0.5))
    out = tmp_path / "s.json"
    assert bench.main(["sampler", "--device", "cpu", "--repeats", "3", "--threads", "1", "--out", str(out)]) == 0
    results = measure.load_results(out)
    assert results.provenance["dtype"] == "fp32" and "(1 threads," in results.provenance["host"]
    assert results.notes["validate"] is False and results.sections["roofline"][0].name == "copy"
    assert {r.params["case"] for r in results.sections["sampler_cases"]} == set(bench.SAMPLER_CASES)
    assert {r.params["threads"] for r in results.sections["sampler_cases"]} == {1}
    assert results.notes["case_threads"] == [1]
    assert results.notes["alpha_shipped"] == 0.5 and results.notes["sigma"] > 0
    assert "floor" in results.notes and len(results.notes["load_average_before"]) == 3
    assert results.provenance["cpu"]["logical_cpus"] >= 1 and "avx512_bf16" in results.provenance["cpu"]


def test_bench_rejects_bad_arguments():
    with pytest.raises(ValueError, match="budget_s"):
        bench.run("cpu", quick=True, budget_s=-1)
    with pytest.raises(SystemExit):
        bench.main(["sampler", "--repeats", "many"])
    for threads in ("0", "1,x", "1,,2"):
        with pytest.raises(SystemExit):
            bench.main(["sampler", "--threads", threads])
    with pytest.raises(SystemExit):
        bench.main(["sampler", "--repeats", "0"])


def test_stack_sizes_sweep_reaches_past_every_cpus_crossover(monkeypatch):
    # the time budget, not a fixed cap, ends a CPU sweep: with 8 GiB free its largest batch fits in a quarter of it
    monkeypatch.setattr(stack, "memory_bytes", lambda device=None: 8 * 2**30)
    cpu = stack.stack_sizes("cpu")
    assert cpu.min_last >= 8 and cpu.limit >= 512 and cpu.sweep_budget_s <= 30


def test_shipped_alpha_is_the_pairs_acceptance_at_temperature_one():
    alpha = bench.shipped_alpha(256)
    assert 0.2 < alpha < 0.9  # the pair agrees often, not always


def case_rows(ratios, floors=(1.0, 1.0, 1.0), B=64, threads=1, ms=(1.0, 1.0, 1.0), loop_ms=(2.0, 2.0, 2.0),
              read=(1.0, 2.0, 4.0), probs=(1.1, 1.1, 1.1), softmax=None, spread=(0.0, 0.0, 0.0)):
    """Synthetic sampler_case_table rows: ÷ floor, the log-normalizers and the softmax of the rows read over reading
    once (the softmax twice the log-normalizers unless given) and the floor's term and fastest way they imply, ÷ read
    once, the draft-probabilities path over its floor, and the B = 1 times per case."""
    softmax = softmax or tuple(2 * f for f in floors)

    def row(c, a, r, f, s, rd, pr, t, t_loop, sp):
        term = "reading once" if min(f, s) <= 1 else "softmax" if s < f else "log-normalizers"
        return {"B": B, "k": 4, "V": 32000, "case": c, "threads": threads, "α": a, "÷ floor": r, "floor is": term,
                "normalizers fastest by": "torch.softmax" if s < f else "fused.log_normalizers", "÷ read once": rd,
                "lse of rows read ÷ read once": f, "softmax of rows read ÷ read once": s, "probs ÷ floor": pr,
                "probs ÷ read once": pr * f, "from logits ms": t, "softmax, then loop ms": t_loop,
                "spread (IQR / median)": sp}

    return [row(*values) for values in zip(bench.SAMPLER_CASES, (0.16, 0.49, 1.0), ratios, floors, softmax, read,
                                           probs, ms, loop_ms, spread, strict=True)]


ALL = "with 1 thread it holds in all three cases (1.10× (independent), 1.15× (realistic), 1.05× (all accepted))"
SOME = "with 1 thread it holds only at 1.10× (independent), 1.20× (all accepted), not at 1.90× (realistic)"


@pytest.mark.parametrize(("one", "two", "said"), [
    ((1.1, 1.15, 1.05), (1.1, 1.2, 1.1), [ALL, "with 2 threads it holds in all three"]),
    ((2.9, 4.3, 5.3), (1.3, 1.3, 1.3), ["with 1 thread it holds in none of the three",
                                        "with 2 threads it holds in none"]),
    ((1.1, 1.9, 1.2), (1.3, 1.1, 1.3), [SOME, "with 2 threads it holds only at 1.10× (realistic)"]),
])
def test_sampler_bar_sentences_follow_the_numbers(one, two, said):
    rows = case_rows(one) + case_rows(two, threads=2) + case_rows((9, 9, 9), B=1)
    text = bench.sampler_sentences(rows)["bar"]
    assert all(part in text for part in said), text
    assert "takes 1.00×, 2.00×, 4.00× the time to read the inputs once" in text


def test_sampler_bar_sentence_says_where_a_rerun_could_cross_the_bar():
    rows = case_rows((1.0, 1.15, 1.2), spread=(0.05, 0.11, 0.26)) + case_rows((0.7, 0.8, 1.3), threads=2,
                                                                               spread=(0.1, 0.1, 0.1))
    text = bench.sampler_sentences(rows + case_rows((9, 9, 9), B=1))["bar"]
    # |1.15 - 1.2| < 1.2 * 0.11 / 2 and |1.2 - 1.2| < 1.2 * 0.26 / 2; 1.0 and the two-thread ratios are farther
    assert text.endswith("At 1.15× (realistic, 1 thread) and 1.20× (all accepted, 1 thread) the bar lies within half "
                         "the run's spread (IQR / median) of the ratio: a rerun could land on either side of it."), text
    steady = bench.sampler_sentences(case_rows((1.0, 1.15, 1.2)) + case_rows((9, 9, 9), B=1))["bar"]
    assert "either side" not in steady


EXP = "torch's softmax kernel computes its exponentials with a faster vectorized exp than torch.exp"


@pytest.mark.parametrize(("floors", "softmax", "said"), [
    ((1.0, 1.0, 1.0), None, "the fastest way to the normalizers is fused.log_normalizers in all three cases, so the "
                            "floor is reading the inputs once in all three cases."),
    ((1.0, 1.5, 3.0), None, "so the floor is reading the inputs once in the independent case; the log-normalizers of "
                            "the rows read in the realistic and all accepted cases."),
    ((1.0, 1.6, 3.2), (0.9, 1.0, 1.8), "the fastest way to the normalizers is a softmax in all three cases, so the "
                                       "floor is reading the inputs once in the independent and realistic cases; a "
                                       "softmax of the rows read in the all accepted case. A softmax beats"),
    ((2.0, 2.0, 2.0), (1.8, 2.5, 2.5), "the fastest way to the normalizers is a softmax in the independent case; "
                                       "fused.log_normalizers in the realistic and all accepted cases, so the floor is "
                                       "a softmax of the rows read in the independent case; the log-normalizers of the "
                                       "rows read in the realistic and all accepted cases."),
])
def test_sampler_floor_sentence_names_the_term_that_sets_it(floors, softmax, said):
    text = bench.sampler_sentences(case_rows((1, 1, 1), floors, softmax=softmax) + case_rows((9, 9, 9), B=1))["floor"]
    assert said in text, text
    assert (EXP in text) == (softmax is not None)  # said only where a softmax was the fastest way


def test_sampler_probs_sentence_reads_its_own_floor():
    text = bench.sampler_sentences(case_rows((1, 1, 1), probs=(1.05, 1.1, 1.15)) + case_rows((9, 9, 9), B=1))["probs"]
    assert "1.05×, 1.10×, 1.15× its own floor and 1.05×, 1.10×, 1.15× reading the inputs once" in text


@pytest.mark.parametrize(("ms", "said"), [((0.3, 0.4, 0.45), "faster in every case"),
                                         ((0.9, 0.9, 0.9), "slower in every case"),
                                         ((0.3, 0.9, 0.3), "faster only in the independent and all accepted cases"),
                                         ((0.9, 0.3, 0.9), "faster only in the realistic case.")])
def test_sampler_sentences_at_one_sequence(ms, said):
    rows = case_rows((1, 1, 1)) + case_rows((9, 9, 9), B=1, ms=ms, loop_ms=(0.5, 0.5, 0.5))
    assert bench.sampler_sentences(rows)["b1"].endswith(said if said.endswith(".") else said + ".")


def test_sampler_sentences_need_every_case_at_both_shapes():
    one = case_rows((1, 1, 1), B=1)
    with pytest.raises(ValueError, match="one row per case"):
        bench.sampler_sentences(case_rows((1, 1, 1))[:2] + one)
    with pytest.raises(ValueError, match="B = 64"):
        bench.sampler_sentences(one)
    with pytest.raises(ValueError, match="B = 1,"):
        bench.sampler_sentences(case_rows((1, 1, 1)))
    with pytest.raises(ValueError, match="2 thread"):
        bench.sampler_sentences(case_rows((1, 1, 1)) + case_rows((1, 1, 1), threads=2)[:2] + one)


