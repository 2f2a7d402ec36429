import json
import re

import pytest
import torch

from specnotes import bench, measure
from specnotes.measure import stack
from specnotes.sampling import fused, kernel


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
    # and it holds what each chapter needs to replay (findings.recorded; tests/measure/test_reference.py replays them on
    # the shipped records, whose numbers are fixed, rather than on this run's, which another process can stall)
    from specnotes.measure import findings

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


def expected_floor(t, read_rows, rows):
    """The floor as issue 39 defines it, written out separately: max(reading the rows read once, the fastest of the
    three ways to their normalizers)."""
    ways = {"log-normalizers": min(t(f"lse_{rows}"), t(f"logsumexp_{rows}")), "softmax": t(f"softmax_{rows}")}
    term = min(ways, key=ways.get)
    return max(read_rows, ways[term]), "reading its rows" if read_rows >= ways[term] else term


def test_sampler_case_records_count_the_rows_read():
    records = bench.sampler_case_records([(8, 2, 32000)], "cpu", repeats=3, alpha=0.5, sigma=1.0, threads=(1, 2))
    assert [(r.name, r.params["case"], r.params["threads"]) for r in records] == [
        (n, c, t) for c in bench.SAMPLER_CASES for t in (1, 2) for n in CALLS]
    by = {r.params["case"]: r.extra for r in records if r.name == "from_logits"}
    every = by["all accepted"]
    assert every["rows_read"] == every["rows_total"] == 8 * 5 and every["mean_accepted"] == 2
    assert every["target_rows"] == every["probs_rows_read"] == 8 * 3  # p's k + 1 rows; no q row without a rejection
    assert every["stopped"] == 0 and by["independent"]["stopped"] > 0
    assert every["bytes_read"] == every["input_bytes"] == 8 * 5 * 32000 * 4  # more than one chunk
    assert by["independent"]["rows_read"] < by["realistic"]["rows_read"] < every["rows_read"]
    assert by["independent"]["alpha"] < by["realistic"]["alpha"] < every["alpha"]
    # the samplers were told the acceptance of the case's first call, which picked the kernel's route
    for extra in by.values():
        assert extra["route"] == (fused.route(extra["expected_acceptance"]) if kernel.available() else "torch")
        assert extra["probs_route"] == (fused.route(extra["expected_acceptance"], "probs") if kernel.available() else
                                        "torch")
    assert every["expected_acceptance"] == 1.0 and by["independent"]["expected_acceptance"] < fused.KEPT_BELOW["probs"]
    for extra in by.values():  # what an older record's fields give, where stopped and probs_rows_read are missing
        old = {key: value for key, value in extra.items() if key not in ("stopped", "probs_rows_read")}
        assert bench.stopped_sequences(old, 8) == extra["stopped"]
        assert extra["probs_rows_read"] == extra["target_rows"] + extra["stopped"]
    table = bench.sampler_case_table(measure.Results({}, {"sampler_cases": records}))
    assert [(row["case"], row["threads"]) for row in table] == [(c, t) for c in bench.SAMPLER_CASES for t in (1, 2)]
    timed = {(r.name, r.params["case"], r.params["threads"]): r.median_s for r in records}
    for row in table:
        t = lambda n: timed[n, row["case"], row["threads"]]  # noqa: B023
        extra = by[row["case"]]
        read_all = t("copy_inputs") / 2  # half the copy: it reads and writes
        read_rows = read_all * extra["rows_read"] / extra["rows_total"]  # every row is V floats
        read_probs = read_all * extra["probs_rows_read"] / extra["rows_total"]
        (floor, term), (floor_p, term_p) = (expected_floor(t, read_rows, "rows_read"),
                                            expected_floor(t, read_probs, "target_rows"))
        assert row["floor ms"] == pytest.approx(1e3 * floor) and row["floor is"] == term
        assert row["read rows ms"] == pytest.approx(1e3 * read_rows) and row["read all ms"] == pytest.approx(
            1e3 * read_all)
        assert row["÷ floor"] == pytest.approx(t("from_logits") / floor)
        assert row["÷ read all (reference)"] == pytest.approx(t("from_logits") / read_all)
        assert row["probs ÷ floor"] == pytest.approx(t("from_target_logits") / floor_p)
        assert row["probs floor is"] == term_p
        stopped = extra["stopped"]
        assert row["second pass share"] == pytest.approx((2 * stopped + 8 - stopped) / extra["rows_read"])
    assert table[-1]["rows read"] == 1.0


def synthetic_records(ms: dict[str, float], stopped: int | None = 6) -> list[measure.Record]:
    """One case's calls at fixed times (ms; every call not named takes 1 ms), as sampler_case_records writes them:
    B = 8 sequences, 20 rows of V = 32,000 floats in all, 10 of them read, 6 of the target's exponentiated, 6 of
    the 8 sequences stopped at a rejection (so the probabilities path reads 12 rows); ``stopped=None``: a record
    made before ``stopped`` and ``probs_rows_read`` were kept."""
    extra = {"alpha": 0.5, "mean_accepted": 2.0, "rows_read": 10, "rows_total": 20, "input_bytes": 20 * 32000 * 4,
             "bytes_read": 10 * 32000 * 4, "target_rows": 6}
    if stopped is not None:
        extra |= {"stopped": stopped, "probs_rows_read": 6 + stopped}
    params = {"B": 8, "k": 4, "V": 32000, "case": "realistic", "threads": 1}
    return [measure.Record(n, params, ms.get(n, 1.0) / 1e3, None, None, [ms.get(n, 1.0) / 1e3] * 3, "cpu", "fp32",
                           extra=extra) for n in CALLS]


# (times in ms, floor ms, floor is, fastest way; the draft-probabilities path's floor ms and term). Reading every input
# once is half the copy, and the 10 rows read are half the inputs: reading them once is a quarter of the copy, and the
# probabilities path's 12 rows 0.3 of it
FLOORS = [
    ({"copy_inputs": 4.0, "lse_rows_read": 6.5, "logsumexp_rows_read": 8.0, "softmax_rows_read": 3.7,
      "lse_target_rows": 5.0, "logsumexp_target_rows": 6.0, "softmax_target_rows": 2.5},
     3.7, "softmax", "torch.softmax", 2.5, "softmax"),
    ({"copy_inputs": 4.0, "lse_rows_read": 3.0, "logsumexp_rows_read": 4.0, "softmax_rows_read": 3.5,
      "lse_target_rows": 3.5, "logsumexp_target_rows": 2.5, "softmax_target_rows": 3.0},
     3.0, "log-normalizers", "fused.log_normalizers", 2.5, "log-normalizers"),
    ({"copy_inputs": 24.0, "lse_rows_read": 3.0, "logsumexp_rows_read": 2.5, "softmax_rows_read": 3.5},
     6.0, "reading its rows", "torch.logsumexp", 7.2, "reading its rows"),
    ({"copy_inputs": 16.0, "lse_rows_read": 3.0, "logsumexp_rows_read": 3.5, "softmax_rows_read": 2.0,
      "lse_target_rows": 3.0, "logsumexp_target_rows": 3.0, "softmax_target_rows": 2.0},
     4.0, "reading its rows", "torch.softmax", 4.8, "reading its rows"),
    # the normalizers (3.0) set the floor although reading *every* input once (4.0) would take longer: that old
    # floor was no floor, since the sampler reads only half of them
    ({"copy_inputs": 8.0, "lse_rows_read": 3.0, "logsumexp_rows_read": 3.5, "softmax_rows_read": 5.0,
      "lse_target_rows": 2.0, "logsumexp_target_rows": 2.0, "softmax_target_rows": 5.0},
     3.0, "log-normalizers", "fused.log_normalizers", 2.4, "reading its rows"),
]


@pytest.mark.parametrize(("ms", "floor", "term", "how", "floor_p", "term_p"), FLOORS)
def test_the_floor_is_reading_the_rows_read_or_the_fastest_way_to_their_normalizers(ms, floor, term, how, floor_p,
                                                                                     term_p):
    (row,) = bench.sampler_case_table(measure.Results({}, {"sampler_cases": synthetic_records(ms)}))
    assert row["floor ms"] == pytest.approx(floor) and row["floor is"] == term
    assert row["normalizers fastest by"] == how and row["÷ floor"] == pytest.approx(1.0 / floor)
    assert row["probs floor is"] == term_p and row["probs ÷ floor"] == pytest.approx(1.0 / floor_p)
    assert row["÷ read all (reference)"] == pytest.approx(2.0 / ms["copy_inputs"])


def test_an_older_record_gives_the_same_floor_from_its_rows():
    for ms, *_ in FLOORS:
        new, old = (bench.sampler_case_table(measure.Results({}, {"sampler_cases": synthetic_records(ms, s)}))[0]
                    for s in (6, None))
        assert new == old


def test_a_record_without_the_softmax_of_the_target_rows_floors_them_on_the_log_normalizers():
    # the records made before softmax_target_rows was timed: every other term stays as it was
    records = [r for r in synthetic_records(FLOORS[0][0]) if r.name != "softmax_target_rows"]
    (row,) = bench.sampler_case_table(measure.Results({}, {"sampler_cases": records}))
    assert row["floor is"] == "softmax" and row["probs ÷ floor"] == pytest.approx(1.0 / 5.0)


@pytest.mark.parametrize("wrong", ["softmax ignored", "minimum of the terms", "slowest way", "every input read"])
def test_a_wrong_floor_fails_the_floor_test(monkeypatch, wrong):
    """The test above can fail: each floor that leaves a term out or combines them wrongly is caught by one case, and
    so is issue 29's floor, which read every input once whatever the sampler read."""
    right = bench.floor_of

    def floor_of(times, read_rows, rows):
        if wrong == "softmax ignored":
            return right({n: t for n, t in times.items() if not n.startswith("softmax")}, read_rows, rows)
        if wrong == "minimum of the terms":
            floor, term, how = right(times, read_rows, rows)
            return min(read_rows, times[f"{bench.NORMALIZERS[how]}_{rows}"]), term, how
        if wrong == "every input read":
            return right(times, times["copy_inputs"] / 2, rows)
        slowest = max((n for n in times if n.endswith(rows)), key=times.get)
        return max(read_rows, times[slowest]), "log-normalizers", "torch.logsumexp"

    monkeypatch.setattr(bench, "floor_of", floor_of)
    failed = 0
    for case in FLOORS:
        try:
            test_the_floor_is_reading_the_rows_read_or_the_fastest_way_to_their_normalizers(*case)
        except AssertionError:
            failed += 1
    assert failed > 0


def test_sampler_cli_writes_the_one_format(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "SAMPLER_SHAPES", [(1, 2, 8)])
    for where in (bench, bench.words):  # the records' shapes, and the ones the sentences read
        monkeypatch.setattr(where, "CASE_SHAPES", [(2, 2, 300), (1, 2, 300)])
    monkeypatch.setattr(bench, "shipped_alpha", lambda: 0.5)
    monkeypatch.setattr(measure.probes, "sizes_for", lambda device=None: measure.Sizes(
        copy_bytes=2**20, d_in=8, d_out=8, batches=(1,), peak_n=8, warmup=1, repeats=3, budget_s=0.5))
    out = tmp_path / "s.json"
    assert bench.main(["sampler", "--device", "cpu", "--repeats", "3", "--threads", "1", "--out", str(out)]) == 0
    results = measure.load_results(out)
    assert results.provenance["dtype"] == "fp32" and "(1 thread," in results.provenance["host"]
    assert results.notes["validate"] is False and results.sections["roofline"][0].name == "copy"
    assert {r.params["case"] for r in results.sections["sampler_cases"]} == set(bench.SAMPLER_CASES)
    assert {r.params["threads"] for r in results.sections["sampler_cases"]} == {1}
    assert results.notes["case_threads"] == [1] and results.notes["bar"] == bench.SAMPLER_BAR
    assert results.notes["alpha_shipped"] == 0.5 and results.notes["sigma"] > 0
    assert "rows it reads once" in results.notes["floor"] and len(results.notes["load_average_before"]) == 3
    assert results.provenance["cpu"]["logical_cpus"] >= 1 and "avx512_bf16" in results.provenance["cpu"]
    assert all({"stopped", "probs_rows_read", "expected_acceptance", "route"} <= set(r.extra)
               for r in results.sections["sampler_cases"])
    assert results.notes["kept_below"] == fused.KEPT_BELOW


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


# ---------------------------------------------------------------------------------------------- the sentences


def case_rows(ratios, floors=(1.0, 1.0, 1.0), B=64, threads=1, ms=(1.0, 1.0, 1.0), loop_ms=(2.0, 2.0, 2.0),
              read=(1.0, 2.0, 4.0), probs=(1.1, 1.1, 1.1), softmax=None, spread=(0.0, 0.0, 0.0),
              second=(0.8, 0.4, 0.1), rows_read=(0.3, 0.5, 1.0)):
    """Synthetic sampler_case_table rows: ÷ floor, the log-normalizers and the softmax of the rows read over reading
    those rows once (the softmax twice the log-normalizers unless given) and the floor's term and fastest way they
    imply, ÷ read all, the draft-probabilities path over its floor, the second pass share, the share of rows read,
    and the B = 1 times per case."""
    softmax = softmax or tuple(2 * f for f in floors)

    def row(c, a, r, f, s, rd, pr, t, t_loop, sp, sec, share):
        term = "reading its rows" if min(f, s) <= 1 else "softmax" if s < f else "log-normalizers"
        return {"B": B, "k": 4, "V": 32000, "case": c, "threads": threads, "α": a, "÷ floor": r, "floor is": term,
                "normalizers fastest by": "torch.softmax" if s < f else "fused.log_normalizers",
                "÷ read all (reference)": rd, "lse of rows read ÷ read rows": f,
                "softmax of rows read ÷ read rows": s, "probs ÷ floor": pr, "from logits ms": t,
                "softmax, then loop ms": t_loop, "spread (IQR / median)": sp, "second pass share": sec,
                "rows read": share}

    return [row(*values) for values in zip(bench.SAMPLER_CASES, (0.16, 0.49, 1.0), ratios, floors, softmax, read,
                                           probs, ms, loop_ms, spread, second, rows_read, strict=True)]


def b1():
    return case_rows((9, 9, 9), B=1)


BAR_CLAIM = re.compile(r"[Ww]ith (\d+) threads?,? (?:sampling from logits took (?P<new>[^:]*)|it holds "
                       r"(?P<old>[^;(]*))")


def claimed_within(text: str, bar_text: str | None = None) -> dict[int, set[str]]:
    """What a bar sentence claims, thread count -> the cases it says are within the bar. It reads this module's
    sentences ("within the 1.5× bar in all three cases", "... only in the X and Y cases", "above the 1.5× bar in
    all three cases") and issue 29's ("it holds in all three cases", "in none of the three", "only at 1.10×
    (independent), ... not at ...")."""
    claims = {}
    for match in BAR_CLAIM.finditer(text):
        n = int(match[1])
        said = match["old"] if match["new"] is None else text[match.end():].split(":", 1)[1].split(". ")[0]
        if "all three" in said and "above" not in said:
            claims[n] = set(bench.SAMPLER_CASES)
        elif "none" in said or "above" in said:
            claims[n] = set()
        else:
            held = said.split(" not at ")[0]
            claims[n] = {c for c in bench.SAMPLER_CASES if re.search(rf"\b{c}\b", held)}
    return claims


def bar_of(text: str) -> float:
    """The bar a sentence states: "the 1.5× bar" (this module's) or "in at most 1.2× its floor" (issue 29's)."""
    match = re.search(r"the ([\d.]+)× bar|at most ([\d.]+)× its floor", text)
    return float(match[1] or match[2])


def bar_sentence_is_true(text: str, rows: list[dict]) -> bool:
    """Each thread count's claim is exactly the cases whose ÷ floor is ≤ the stated bar."""
    bar = bar_of(text)
    at = {r["threads"]: {} for r in rows if (r["B"], r["k"], r["V"]) == bench.CASE_SHAPES[0]}
    for r in rows:
        if (r["B"], r["k"], r["V"]) == bench.CASE_SHAPES[0]:
            at[r["threads"]][r["case"]] = r["÷ floor"]
    claims = claimed_within(text)
    return set(claims) == set(at) and all(claims[n] == {c for c, v in at[n].items() if v <= bar} for n in at)


@pytest.mark.parametrize(("ratios", "said"), [
    ((1.49, 1.5, 1.0), "within the 1.5× bar in all three cases."),  # 1.5 is within: the bar is ≤ 1.5
    ((1.51, 1.5, 1.0), "within the 1.5× bar only in the realistic and all accepted cases."),
    ((1.51, 1.52, 1.49), "within the 1.5× bar only in the all accepted case."),
    ((1.51, 1.52, 1.51), "above the 1.5× bar in all three cases."),
    ((1.49, 1.51, 1.49), "within the 1.5× bar only in the independent and all accepted cases."),
])
def test_bar_sentence_at_its_boundary(ratios, said):
    rows = case_rows(ratios) + case_rows((1.0, 1.0, 1.0), threads=2) + b1()
    text = bench.words.sampler_sentences(rows, bar=1.5)["bar"]
    first = text.split(". ")[0] + "."
    assert first.startswith(f"With 1 thread, sampling from logits took {ratios[0]:.2f}×") and first.endswith(said), text
    assert bar_sentence_is_true(text, rows), text
    assert len(first.split()) <= 45 and "(" not in first


def test_bar_sentence_leads_with_the_largest_spread():
    rows = case_rows((1.0, 1.0, 1.0), spread=(0.04, 0.13, 0.05)) + b1()
    assert "with a run spread of at most 13%:" in bench.words.sampler_sentences(rows)["bar"]


@pytest.mark.parametrize(("ratio", "spread", "near"), [
    (1.42, 0.1, False), (1.43, 0.1, True),  # |r - 1.5| against 1.5 · 0.1 / 2 = 0.075
    (1.57, 0.1, True), (1.58, 0.1, False), (1.5, 0.0, False)])
def test_near_sentence_at_its_boundary(ratio, spread, near):
    rows = case_rows((1.0, ratio, 1.0), spread=(0.0, spread, 0.0)) + b1()
    text = bench.words.sampler_sentences(rows, bar=1.5)["bar"]
    assert ("either side of the bar at" in text) == near, text
    if near:
        assert f"at {ratio:.2f}× (realistic, 1 thread): each lies within half its run's spread of it." in text


@pytest.mark.parametrize(("ratio", "below"), [(0.99, True), (1.0, False)])
def test_below_floor_sentence_at_its_boundary(ratio, below):
    rows = case_rows((1.2, ratio, 1.1), spread=(0.1, 1.87, 0.1)) + b1()
    text = bench.words.sampler_sentences(rows)["bar"]
    assert ("it took less than its floor, which no exact sampler can" in text) is below, text
    if below:
        assert f"At {ratio:.2f}× (realistic, 1 thread) it took less than its floor" in text and "up to 187%." in text


@pytest.mark.parametrize(("ratios", "second", "said"), [
    ((1.0, 1.0, 1.0), (0.8, 0.4, 0.1), None),  # all within: no reason to give
    ((2.0, 1.0, 1.0), (0.8, 0.4, 0.1), "the second pass is what puts it over"),  # 2.0 / 1.8 = 1.11
    ((1.6, 1.0, 1.0), (0.06, 0.4, 0.1), "the second pass is not all of it"),  # 1.6 / 1.06 = 1.509 > 1.5 ...
    ((1.6, 1.0, 1.0), (0.07, 0.4, 0.1), "the second pass is what puts it over"),  # ... and 1.6 / 1.07 = 1.495
    ((1.6, 1.6, 1.0), (0.07, 0.4, 0.1), "the second pass is what puts them over"),  # two cases: a range
    ((2.8, 1.7, 1.0), (0.8, 0.1, 0.1), "the second pass is not all of it"),  # 1.7 / 1.1 = 1.55
])
def test_why_sentence_at_its_boundary(ratios, second, said):
    rows = case_rows(ratios, second=second) + b1()
    text = bench.words.sampler_sentences(rows, bar=1.5)["bar"]
    over = [c for c, r in zip(bench.SAMPLER_CASES, ratios, strict=True) if r > 1.5]
    per_pass = [r / (1 + s) for r, s in zip(ratios, second, strict=True) if r > 1.5]
    if said is None:
        assert "Above the bar" not in text
        return
    assert f"Above the bar, in {bench.words.cases_named(over)}, it passes a second time over" in text
    assert said.startswith("the second pass is what puts") == (max(per_pass) <= 1.5)  # the claim, checked
    if max(per_pass) <= 1.5:
        assert said in text, text
    else:
        assert "the second pass is not all of it" in text, text
    if len(per_pass) == 1:  # one case over the bar: one number, not a range of one
        assert f"that takes {per_pass[0]:.2f}× the floor" in text and " to " not in text.split("per pass")[1], text


@pytest.mark.parametrize(("one", "two", "said"), [
    ((1.01, 1.2, 1.6), (1.0, 1.1, 1.5),
     "1.01×, 1.20× and 1.60× with 1 thread and 1.00×, 1.10× and 1.50× with 2 threads."),
    ((0.99, 1.2, 1.6), (1.0, 1.1, 1.5), ". It took less than that with 1 thread in the independent case, where it read "
                                        "only 30% of the rows."),
    ((1.0, 1.15, 1.58), (0.69, 0.81, 1.31), ". It took less than that with 2 threads in the independent and realistic "
                                            "cases, where it read only 30% and 50% of the rows."),
    ((0.99, 1.15, 1.58), (0.69, 0.81, 1.31),
     ". It took less than that with 1 thread in the independent case and with 2 threads in the independent and "
     "realistic cases, where it read only 30% and 50% of the rows.")])
def test_reference_sentence_at_its_boundary(one, two, said):
    rows = case_rows((1, 1, 1), read=one) + case_rows((1, 1, 1), read=two, threads=2) + b1()
    text = bench.words.sampler_sentences(rows)["reference"]
    assert text.endswith(said), text
    assert text.startswith("Against reading every input once, a reference and not a floor, it took")


@pytest.mark.parametrize(("floors", "softmax", "said"), [
    ((0.9, 0.9, 0.9), None, "The fastest way to them was fused.log_normalizers in all three cases, so the floor is "
                            "reading the rows it reads once in all three cases."),
    ((0.9, 1.5, 3.0), None, "so the floor is reading the rows it reads once in the independent case; the "
                            "log-normalizers of those rows in the realistic and all accepted cases."),
    ((1.0, 1.6, 3.2), (0.9, 1.0, 1.8), "The fastest way to them was a softmax in all three cases, so the floor is "
                                       "reading the rows it reads once in the independent and realistic cases; a "
                                       "softmax of those rows in the all accepted case. A softmax can beat"),
    ((2.0, 2.0, 2.0), (1.8, 2.5, 2.5), "The fastest way to them was a softmax in the independent case; "
                                       "fused.log_normalizers in the realistic and all accepted cases, so the floor is "
                                       "a softmax of those rows in the independent case; the log-normalizers of those "
                                       "rows in the realistic and all accepted cases."),
])
def test_sampler_floor_sentence_names_the_term_that_sets_it(floors, softmax, said):
    text = bench.words.sampler_sentences(case_rows((1, 1, 1), floors, softmax=softmax) + b1())["floor"]
    assert said in text, text
    assert ("faster vectorized exp" in text) == (softmax is not None)  # said only where a softmax was the fastest way


def test_the_floor_sentence_says_the_terms_once_where_thread_counts_agree():
    same = case_rows((1, 1, 1), (1.5, 1.5, 1.5)) + case_rows((1, 1, 1), (1.4, 1.4, 1.2), threads=2) + b1()
    text = bench.words.sampler_sentences(same)["floor"]
    assert text.startswith("Against reading those rows once, their normalizers took 1.50×, 1.50× and 1.50× with 1 "
                           "thread and 1.40×, 1.40× and 1.20× with 2 threads.")
    assert text.count("The fastest way to them was") == 1 and "With 1 thread, the fastest" not in text
    apart = case_rows((1, 1, 1), (1.5, 1.5, 1.5)) + case_rows((1, 1, 1), (0.9, 1.4, 1.2), threads=2) + b1()
    text = bench.words.sampler_sentences(apart)["floor"]
    assert "With 1 thread, the fastest way to them was fused.log_normalizers in all three cases, so the floor is " \
           "the log-normalizers of those rows in all three cases." in text
    assert "With 2 threads, the fastest way to them was fused.log_normalizers in all three cases, so the floor is " \
           "reading the rows it reads once in the independent case;" in text


def test_sampler_probs_sentence_reads_its_own_floor():
    text = bench.words.sampler_sentences(case_rows((1, 1, 1), probs=(1.05, 1.1, 1.15)) + b1())["probs"]
    assert "1.05×, 1.10× and 1.15× its own floor with 1 thread" in text


@pytest.mark.parametrize(("ms", "said"), [((0.49, 0.49, 0.49), "faster in every case"),
                                         ((0.5, 0.5, 0.5), "slower in every case"),  # equal is not faster
                                         ((0.49, 0.51, 0.49), "faster only in the independent and all accepted cases"),
                                         ((0.51, 0.49, 0.51), "faster only in the realistic case.")])
def test_sampler_sentences_at_one_sequence(ms, said):
    rows = case_rows((1, 1, 1)) + case_rows((9, 9, 9), B=1, ms=ms, loop_ms=(0.5, 0.5, 0.5))
    assert bench.words.sampler_sentences(rows)["b1"].endswith(said if said.endswith(".") else said + ".")


def test_sampler_sentences_need_every_case_at_both_shapes():
    one = case_rows((1, 1, 1), B=1)
    with pytest.raises(ValueError, match="one row per case"):
        bench.words.sampler_sentences(case_rows((1, 1, 1))[:2] + one)
    with pytest.raises(ValueError, match="B = 64"):
        bench.words.sampler_sentences(one)
    with pytest.raises(ValueError, match="B = 1,"):
        bench.words.sampler_sentences(case_rows((1, 1, 1)))
    with pytest.raises(ValueError, match="2 thread"):
        bench.words.sampler_sentences(case_rows((1, 1, 1)) + case_rows((1, 1, 1), threads=2)[:2] + one)


# what Chapter 7 printed from the shipped record before issue 39, against a floor of reading every input once
OLD_BAR = ("The bar, sampling from logits in at most 1.2× its floor max(reading the inputs once, the fastest measured "
           "way to the normalizers of the rows it reads) at B = 64 and α = 0.16, 0.49, 1.00: with 1 thread it holds "
           "in all three cases (1.00× (independent), 1.15× (realistic), 1.20× (all accepted)), and takes 1.00×, "
           "1.15×, 1.58× the time to read the inputs once; with 2 threads it holds in all three cases (0.69× "
           "(independent), 0.81× (realistic), 1.18× (all accepted)), and takes 0.69×, 0.81×, 1.31× the time to read "
           "the inputs once.")


def test_the_shipped_records_sentences_are_true_of_its_numbers_and_the_old_ones_are_not():
    """On the record Chapter 7 shows: the bar sentence claims exactly the cases within the bar, every sentence is
    at most 45 words with no nested parentheses; and the sentence printed before (issue 29's floor and bar) is
    false of the record's numbers as the floor is now defined: it said the bar held in every case."""
    rows = bench.sampler_case_table(measure.load_results(bench.SAMPLER_OUT))
    said = bench.words.sampler_sentences(rows)
    assert bar_sentence_is_true(said["bar"], rows), said["bar"]
    assert not bar_sentence_is_true(OLD_BAR, rows)
    assert claimed_within(OLD_BAR) == {1: set(bench.SAMPLER_CASES), 2: set(bench.SAMPLER_CASES)}
    for text in said.values():
        for sentence in re.split(r"(?<=[.:]) (?=[A-Z])", text):
            assert len(sentence.split()) <= 45, sentence
            assert not re.search(r"\([^)]*\(", sentence), sentence


# ---------------------------------------------------------------------------------------------- the dispatch sentence


DISPATCH_ROUTE = re.compile(r"(?:the kernel |\bIt )(?P<words>kept the first pass's exponentials for the residual|"
                            r"exponentiated the rows a sequence stopped on again|was not used: the torch path ran) "
                            r"in (?P<cases>all three cases|the [a-z ]+? cases?)"
                            r"(?: \(acceptance (?P<values>[0-9., and]+) on the first call, "
                            r"(?P<side>below|not below|against) (?P<threshold>[0-9.]+)\))?\.")
DISPATCH_RATIOS = re.compile(r"((?:\d+\.\d+×(?:, | and )?)+) (?:its (?:own )?floor )?with (\d+) threads?")


def dispatch_claims(text: str) -> dict:
    """What a dispatch sentence claims: {"routes": case -> (route, acceptance said or None, side, threshold),
    "ratios": threads -> [÷ floor said, in case order], "within": True, or the (ratio, case, threads) said above}."""
    routes = {}
    for match in DISPATCH_ROUTE.finditer(text):
        route = {v: k for k, v in bench.words.ROUTE_WORDS.items()}[match["words"]]
        named = list(bench.SAMPLER_CASES) if match["cases"] == "all three cases" else [
            c for c in bench.SAMPLER_CASES if re.search(rf"\b{c}\b", match["cases"])]
        values = [float(x) for x in re.split(r", | and ", match["values"])] if match["values"] else [None] * len(named)
        for case, value in zip(named, values, strict=True):
            routes[case] = (route, value, match["side"], float(match["threshold"]) if match["threshold"] else None)
    took, verdict = text.split("By those routes, ", 1)[1].split(". ", 1)
    ratios = {int(n): [float(x) for x in re.findall(r"(\d+\.\d+)×", said)] for said, n in DISPATCH_RATIOS.findall(took)}
    within = True if " was within " in verdict else [
        (float(r), c, int(n)) for r, c, n in re.findall(r"(\d+\.\d+)× \(([a-z ]+), (\d+) threads?\)", verdict)]
    return {"routes": routes, "ratios": ratios, "within": within}


def holds_of(text: str, rows: list[dict], kept_below: dict, bar: float = bench.SAMPLER_BAR, draft="logits",
             rule: bool = True) -> None:
    """Every claim of a dispatch sentence holds of the rows it was made from (at the bar's shape); with ``rule``,
    the rows' routes also follow fused.route's rule at ``kept_below``."""
    claims = dispatch_claims(text)
    route_of, ratio = ("route", "÷ floor") if draft == "logits" else ("probs route", "probs ÷ floor")
    kept_below = kept_below[draft]
    at = {n: bench.words.cases_at(rows, bench.CASE_SHAPES[0], n)
          for n in sorted({r["threads"] for r in rows if (r["B"], r["k"], r["V"]) == bench.CASE_SHAPES[0]})}
    assert sorted(claims["routes"]) == sorted(bench.SAMPLER_CASES), text
    for n, by_case in at.items():
        for case, (route, value, side, threshold) in claims["routes"].items():
            row = by_case[case]
            assert row[route_of] == route, (case, n, text)
            if route != "torch":
                a = row["expected acceptance"]
                assert threshold == kept_below and abs(value - a) <= 0.005, (case, text)
                if side != "against":  # true of the number and as printed
                    assert side == ("below" if a < kept_below else "not below") == (
                        "below" if value < kept_below else "not below"), (case, text)
                else:
                    group = [by_case[c]["expected acceptance"] for c, said in claims["routes"].items()
                             if said[0] == route]
                    assert min(group) < kept_below <= max(group), (case, text)
                assert not rule or (route == "kept") == (a < kept_below)  # the rule, fused.route
        for said, c in zip(claims["ratios"][n], bench.SAMPLER_CASES, strict=True):
            x = by_case[c][ratio]
            assert abs(said - x) <= 0.005 and (said > bar) == (x > bar) and (said < bar) == (x < bar), (c, n, text)
    over = [(c, n) for n in at for c in bench.SAMPLER_CASES if at[n][c][ratio] > bar]
    assert (claims["within"] is True) == (not over), text
    if over:
        assert [(c, n) for _, c, n in claims["within"]] == over and all(r > bar for r, _, _ in claims["within"])


KEPT_BELOW = {"logits": 0.8, "probs": 0.7}


def routed_rows(ratios, threads, accept=(0.2, 0.75, 1.0), probs=(1.1, 1.1, 1.1)):
    rows = case_rows(ratios, threads=threads, probs=probs)
    for row, a in zip(rows, accept, strict=True):
        row["expected acceptance"] = a
        row["route"], row["probs route"] = ("kept" if a < KEPT_BELOW[d] else "recomputed" for d in ("logits", "probs"))
    return rows


@pytest.mark.parametrize(("one", "two", "within"), [((1.3, 1.2, 1.1), (1.25, 1.3, 1.05), True),
                                                    ((1.62, 1.2, 1.1), (1.25, 1.3, 1.55), False)])
def test_sampler_dispatch_sentence_says_what_the_rows_hold(one, two, within):
    rows = routed_rows(one, 1) + routed_rows(two, 2, probs=(1.2, 1.6, 1.0))
    text = bench.words.dispatch_sentence(rows, KEPT_BELOW)
    holds_of(text, rows, KEPT_BELOW)
    assert ("Sampling from logits was within the 1.5× bar in every case." in text) is within, text
    assert text.startswith(
        "From draft logits, the kernel kept the first pass's exponentials for the residual in the independent and "
        "realistic cases (acceptance 0.20 and 0.75 on the first call, below 0.8). It exponentiated the rows a "
        "sequence stopped on again in the all accepted case (acceptance 1.00 on the first call, not below 0.8). By "
        "those routes, sampling from logits took"), text
    if not within:
        assert text.endswith("Sampling from logits was above the 1.5× bar at 1.62× (independent, 1 thread) and 1.55× "
                             "(all accepted, 2 threads)."), text
    probs = bench.words.dispatch_sentence(rows, KEPT_BELOW, draft="probs")
    holds_of(probs, rows, KEPT_BELOW, draft="probs")
    assert probs == ("Handed the draft's probabilities, the kernel kept the first pass's exponentials for the residual "
                     "in the independent case (acceptance 0.20 on the first call, below 0.7). It exponentiated the "
                     "rows a sequence stopped on again in the realistic and all accepted cases (acceptance 0.75 and "
                     "1.00 on the first call, not below 0.7). By those routes, that path took 1.10×, 1.10× and 1.10× "
                     "its own floor with 1 thread and 1.20×, 1.60× and 1.00× with 2 threads. That path was above the "
                     "1.5× bar at 1.60× (realistic, 2 threads)."), probs
    for said in (text, probs):
        short_and_flat(said)


def short_and_flat(text: str) -> None:
    """Each sentence of a glued text at most 45 words with no nested parentheses, as tests/readability.py counts them
    on the built page (issue 39)."""
    from readability import MAX_GLUED_WORDS, nested_parentheses, sentences, words

    assert len(sentences(text)) > 1, text
    for sentence in sentences(text):
        assert words(sentence) <= MAX_GLUED_WORDS and not nested_parentheses(sentence), sentence


def test_sampler_dispatch_sentence_stays_short_at_its_longest():
    """Every case above the bar at both thread counts, one route for all three cases, and numbers printed with
    more digits at the edges: still sentences of at most 45 words."""
    accept = (0.8 * (1 - 1e-9), 0.8, 0.79996)
    rows = routed_rows((1.5004, 1.62, 2.0), 1, accept=accept, probs=(1.6, 1.7, 1.8)) + routed_rows(
        (1.5 * (1 + 1e-9), 1.9, 3.0), 2, accept=accept, probs=(1.6, 1.7, 1.8))
    for row in rows:
        row["route"] = row["probs route"] = "kept"
    said = {draft: bench.words.dispatch_sentence(rows, KEPT_BELOW, draft=draft) for draft in ("logits", "probs")}
    for draft, text in said.items():
        holds_of(text, rows, KEPT_BELOW, draft=draft, rule=False)
        short_and_flat(text)
    assert "in all three cases (acceptance 0.799999999, 0.80 and 0.79996 on the first call, against 0.8)" in said[
        "logits"] and "(acceptance 0.80, 0.80 and 0.80 on the first call, not below 0.7)" in said["probs"], said
    assert "1.500000002× (independent, 2 threads)" in said["logits"], said


@pytest.mark.parametrize(("ratio", "acceptance", "said"), [
    (1.5, 0.2, "1.50×"), (1.5004, 0.2, "1.5004×"), (1.4996, 0.7996, "0.7996 on the first call, below 0.8"),
    (1.2, 0.8, "0.80 and 1.00 on the first call, not below 0.8")])
def test_sampler_dispatch_sentence_just_inside_and_outside_its_edges(ratio, acceptance, said):
    """At the bar and at the threshold, and a hair either side: the sentence is true as printed (a ratio that rounds
    onto the bar, or an acceptance onto the threshold, is printed with the digits that tell its side)."""
    rows = routed_rows((ratio, 1.2, 1.1), 1, accept=(0.2, acceptance, 1.0)) + routed_rows((1.2, 1.2, 1.1), 2,
                                                                                         accept=(0.2, acceptance, 1.0))
    text = bench.words.dispatch_sentence(rows, KEPT_BELOW)
    holds_of(text, rows, KEPT_BELOW)
    assert said in text and ("within the 1.5× bar in every case" in text) is (ratio <= 1.5), text


def test_sampler_dispatch_sentence_needs_routes_that_agree():
    rows = case_rows((1.3, 1.2, 1.1))
    with pytest.raises(ValueError, match="before the kernel chose"):
        bench.words.dispatch_sentence(rows, KEPT_BELOW)
    rows = routed_rows((1.3, 1.2, 1.1), 1) + routed_rows((1.3, 1.2, 1.1), 2, accept=(0.2, 0.9, 1.0))
    with pytest.raises(ValueError, match="differs between thread counts"):
        bench.words.dispatch_sentence(rows, KEPT_BELOW)

