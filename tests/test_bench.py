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


def test_sampler_case_records_count_the_rows_read():
    records = bench.sampler_case_records([(8, 2, 32000)], "cpu", repeats=3, alpha=0.5, sigma=1.0)
    names = ["from_logits", "softmax_then_sample", "softmax_then_loop", "softmax_rows_read"]
    assert [(r.name, r.params["case"]) for r in records] == [(n, c) for c in bench.SAMPLER_CASES for n in names]
    by = {r.params["case"]: r.extra for r in records if r.name == "from_logits"}
    every = by["all accepted"]
    assert every["rows_read"] == every["rows_total"] == 8 * 5 and every["mean_accepted"] == 2
    assert every["bytes_read"] == every["input_bytes"] == 8 * 5 * 32000 * 4  # more than one chunk
    assert by["independent"]["rows_read"] < by["realistic"]["rows_read"] < every["rows_read"]
    assert by["independent"]["alpha"] < by["realistic"]["alpha"] < every["alpha"]
    copy = measure.Record("copy", {}, 1.0, 1.0, 1.0, [1.0], "cpu", "fp32", extra={"bytes_per_s": 1e9})
    table = bench.sampler_case_table(measure.Results({}, {"sampler_cases": records, "roofline": [copy]}))
    assert [row["case"] for row in table] == list(bench.SAMPLER_CASES)
    for row, extra in zip(table, by.values(), strict=True):
        assert row["÷ bytes read"] == pytest.approx(row["÷ read once"] * extra["input_bytes"] / extra["bytes_read"])
        assert row["rows read"] == extra["rows_read"] / 40
        assert row["softmax of rows read ÷ read once"] == pytest.approx(
            row["÷ read once"] / row["÷ softmax of rows read"])  # the floor, on the bar's scale
    assert table[-1]["rows read"] == 1.0


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
    assert results.notes["alpha_shipped"] == 0.5 and results.notes["sigma"] > 0


def test_bench_rejects_bad_arguments():
    with pytest.raises(ValueError, match="budget_s"):
        bench.run("cpu", quick=True, budget_s=-1)
    with pytest.raises(SystemExit):
        bench.main(["sampler", "--repeats", "many"])


def test_stack_sizes_sweep_reaches_past_every_cpus_crossover(monkeypatch):
    # the time budget, not a fixed cap, ends a CPU sweep: with 8 GiB free its largest batch fits in a quarter of it
    monkeypatch.setattr(stack, "memory_bytes", lambda device=None: 8 * 2**30)
    cpu = stack.stack_sizes("cpu")
    assert cpu.min_last >= 8 and cpu.limit >= 512 and cpu.sweep_budget_s <= 30


def test_shipped_alpha_is_the_pairs_acceptance_at_temperature_one():
    alpha = bench.shipped_alpha(256)
    assert 0.2 < alpha < 0.9  # the pair agrees often, not always


def case_rows(ratios, floors, B=64, ms=(1.0, 1.0, 1.0), loop_ms=(2.0, 2.0, 2.0)):
    """Synthetic sampler_case_table rows: ÷ read once, the softmax floor and the B = 1 times per case."""
    return [{"B": B, "k": 4, "V": 32000, "case": c, "α": a, "÷ read once": r, "softmax of rows read ÷ read once": f,
             "÷ softmax of rows read": r / f, "from logits ms": t, "softmax, then loop ms": t_loop}
            for c, a, r, f, t, t_loop in zip(bench.SAMPLER_CASES, (0.16, 0.49, 1.0), ratios, floors, ms, loop_ms,
                                             strict=True)]


@pytest.mark.parametrize(("ratios", "floors", "bar", "floor"), [
    ((1.2, 1.4, 1.45), (0.9, 1.0, 1.1), "in all three cases", "leave room under the bar in every case"),
    ((2.9, 4.3, 5.3), (1.0, 1.8, 3.4), "in none of the three", "at α = 0.49 and 1.00 the bar is out of reach"),
    ((1.3, 1.9, 2.5), (1.0, 1.2, 2.0), "only at 1.30× at α = 0.16 (independent), and not at 1.90×",
     "at α = 1.00 the bar is out of reach"),
])
def test_sampler_bar_sentences_follow_the_numbers(ratios, floors, bar, floor):
    said = bench.sampler_sentences(case_rows(ratios, floors) + case_rows((9, 9, 9), (9, 9, 9), B=1))
    assert bar in said["bar"] and floor in said["floor"]
    over = ", ".join(f"{r / f:.2f}×" for r, f in zip(ratios, floors, strict=True))
    assert f"sampling from logits takes {over} that softmax" in said["floor"]


@pytest.mark.parametrize(("ms", "said"), [((0.3, 0.4, 0.45), "faster in every case"),
                                         ((0.9, 0.9, 0.9), "slower in every case"),
                                         ((0.3, 0.9, 0.3), "faster only in the independent and all accepted cases"),
                                         ((0.9, 0.3, 0.9), "faster only in the realistic case.")])
def test_sampler_sentences_at_one_sequence(ms, said):
    rows = case_rows((1, 1, 1), (1, 1, 1)) + case_rows((9, 9, 9), (9, 9, 9), B=1, ms=ms, loop_ms=(0.5, 0.5, 0.5))
    assert bench.sampler_sentences(rows)["b1"].endswith(said if said.endswith(".") else said + ".")


def test_sampler_sentences_need_every_case_at_both_shapes():
    one = case_rows((1, 1, 1), (1, 1, 1), B=1)
    with pytest.raises(ValueError, match="one row per case"):
        bench.sampler_sentences(case_rows((1, 1, 1), (1, 1, 1))[:2] + one)
    with pytest.raises(ValueError, match="B = 64"):
        bench.sampler_sentences(one)
    with pytest.raises(ValueError, match="B = 1,"):
        bench.sampler_sentences(case_rows((1, 1, 1), (1, 1, 1)))
