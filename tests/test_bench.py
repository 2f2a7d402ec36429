import json

import pytest

from specnotes import bench


def test_quick_bench_writes_every_section_with_provenance(tmp_path):
    assert bench.main(["--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*.json")
    raw = json.loads(path.read_text())
    assert raw["schema"] == bench.SCHEMA and raw["skipped"] == []
    prov = raw["provenance"]
    assert prov["device"] == "cpu" and prov["torch"] and prov["date"] and "--quick" in prov["command"]
    assert set(raw["sections"]) == {"roofline", "matmul_sweep", "target_stack", "target_stack_one_speculating",
                                    "draft_stack"}
    (ref,) = bench.load_reference(path)
    stack = ref["sections"]["target_stack"]
    assert {(r.params["batch"], r.params["new_tokens"]) for r in stack} == {(1, 1), (1, 3), (4, 1), (4, 3)}
    assert all(r.median_s > 0 for records in ref["sections"].values() for r in records)


def test_budget_skips_sections_instead_of_running_over(tmp_path):
    result = bench.run("cpu", quick=True, budget_s=0.0)
    assert result["sections"] == {} and len(result["skipped"]) == 5  # no section starts past the budget


def test_load_reference_rejects_other_files(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"schema": "something else", "sections": {}}))
    with pytest.raises(ValueError, match="not a specnotes.reference/1 file"):
        bench.load_reference(bad)
    assert isinstance(bench.load_reference(), list)  # the shipped folder (may be empty)
