import json

import pytest

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
    assert set(results.sections) == {"roofline", "matmul_sweep", "stack_sweep"}
    assert [r.name for r in results.sections["roofline"]] == ["copy", "peak_matmul"]
    assert [r.params["batch"] for r in results.sections["matmul_sweep"]] == [1, 4, 16]
    # quick stacks: k = 2, B from 1 to at most 4; every B has decode (n = 1) and verify (n = 3) passes
    passes = {(r.params["stack"], r.params["batch"], r.params["new_tokens"]) for r in results.sections["stack_sweep"]}
    assert {("quick target", 1, 1), ("quick target", 1, 3), ("quick draft", 1, 1)} <= passes
    assert results.notes["stack_sweep_stop"] in ("done", "budget", "limit")


def test_budget_skips_sections_instead_of_running_over():
    results = bench.run("cpu", quick=True, budget_s=0.0)
    assert results.sections == {} and results.notes["skipped"] == ["roofline", "matmul_sweep", "stack_sweep"]


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


def test_sampler_cli_writes_the_one_format(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "SAMPLER_SHAPES", [(1, 2, 8)])
    monkeypatch.setattr(measure.probes, "sizes_for", lambda device=None: measure.Sizes(
        copy_bytes=2**20, d_in=8, d_out=8, batches=(1,), peak_n=8, warmup=1, repeats=3, budget_s=0.5))
    out = tmp_path / "s.json"
    assert bench.main(["sampler", "--device", "cpu", "--repeats", "3", "--threads", "1", "--out", str(out)]) == 0
    results = measure.load_results(out)
    assert results.provenance["dtype"] == "fp32" and "(1 threads," in results.provenance["host"]
    assert results.notes["validate"] is False and results.sections["roofline"][0].name == "copy"


def test_bench_rejects_bad_arguments():
    with pytest.raises(ValueError, match="budget_s"):
        bench.run("cpu", quick=True, budget_s=-1)
    with pytest.raises(SystemExit):
        bench.main(["sampler", "--repeats", "many"])


def test_stack_sizes_sweep_reaches_past_every_cpus_crossover():
    cpu = stack.stack_sizes("cpu")
    assert cpu.min_last >= 8 and cpu.limit >= 128 and cpu.sweep_budget_s <= 30
