"""Calibrations, the store (calibrate.store, cli): the stored values equal a refit, ``calibration`` and
``lookup`` read them, and ``python -m specnotes.record.calibrate --cv``."""

import pytest

from specnotes import validate
from specnotes.analytic import hardware
from specnotes.record import calibrate


def test_stored_calibrations_are_what_fit_engines_gives():
    stored = calibrate.stored()
    v = calibrate.VARIANTS[calibrate.CHOSEN]
    assert stored["model"]["variant"] == v.name and stored["model"]["free"] == list(v.free)
    full = calibrate.fit_engines(v)
    names = 0
    for accel, by_name in calibrate.calibrations().items():
        for name, record in by_name.items():
            if "alias_of" in record:
                assert calibrate.calibration(accel, name) == calibrate.calibration(accel, record["alias_of"])
                continue
            names += 1
            engine = record["family"]  # "sglang", or "sglang-moe" for its MoE targets (calibrate.MOE_APART)
            assert name == calibrate.calibration_name(engine, record["version"])
            knobs, how = full.knobs((engine, record["version"], accel))
            assert how == "fitted to this engine on this GPU"
            assert record["knobs"]["overlap"] == knobs["overlap"] == "none"
            for knob, value in record["knobs"].items():
                if knob != "overlap":
                    assert value == pytest.approx(knobs[knob], rel=1e-3, abs=1e-12), (accel, name, knob)
    # one stored calibration per (engine, version, GPU) of the record whose GPU is in the book's table (the record's
    # other devices, MI355X and GB200, keep theirs in calibrations.json, outside calibrations())
    assert names == len([k for k in full.keys if k[2] in hardware.ACCELERATORS])
    assert {k[2] for k in full.keys} - set(hardware.ACCELERATORS) == {"MI355X", "GB200"}
    assert stored["pooled"]["knobs"]["layer_overhead"] == pytest.approx(
        full.knobs(("no such engine", None, "H100-SXM"))[0]["layer_overhead"], rel=1e-3)


def test_stored_cross_validation_is_what_cross_validate_gives():
    rows = calibrate.stored()["cross_validation"]["rows"]
    again = calibrate.cross_validate().rows()
    assert [(r["variant"], r["held out"], r["points"]) for r in rows] == [
        (r["variant"], r["held out"], r["points"]) for r in again]
    for r, a in zip(rows, again, strict=True):
        assert r["median |log ratio|"] == pytest.approx(a["median |log ratio|"], abs=1e-4)
        assert r["bias"] == pytest.approx(a["bias"], abs=1e-4)


def test_calibration_is_reexported_by_cost_and_returns_a_copy():
    knobs = calibrate.calibration("H100-SXM", "specdecode_bench")
    assert knobs == calibrate.calibration("H100-SXM", "specdecode_bench")
    knobs["overhead"] = 1.0
    assert calibrate.calibration("H100-SXM", "specdecode_bench")["overhead"] != 1.0
    assert set(knobs) <= {"overlap", *calibrate.KNOBS}


@pytest.mark.parametrize("args,match", [
    (("H100", "specdecode_bench"), "accelerator_name"),
    (("T4", "specdecode_bench"), "no calibration for T4"),
    (("H100-SXM", "tgi-2.0"), "source"),
])
def test_calibration_checks_its_arguments(args, match):
    with pytest.raises(validate.BadArgument, match=match):
        calibrate.calibration(*args)


def test_lookup_says_which_calibration_it_found():
    name, knobs, how = calibrate.lookup("H100-SXM", "vllm", "0.10.1")
    assert name == "vllm-0.10.1" and knobs == calibrate.calibration("H100-SXM", "specdecode_bench")
    assert how == "fitted to vLLM 0.10.1 on H100-SXM"
    name, _, how = calibrate.lookup("H100-SXM", "SGLang", "0.5.3.post3")
    assert name.startswith("sglang-") and "not to SGLang 0.5.3.post3" in how
    name, knobs, how = calibrate.lookup("L40S", "sglang", "0.5.9")
    assert name is None and "not on L40S" in how and knobs == calibrate.stored()["families"]["sglang"]["knobs"]
    name, knobs, how = calibrate.lookup("H100-SXM", "tensorrt-llm")
    assert name is None and "pooled" in how and knobs == calibrate.stored()["pooled"]["knobs"]


def test_cli_cross_validation(capsys):
    assert calibrate.main(["--cv"]) == 0
    out = capsys.readouterr().out
    assert "per-layer cost" in out and "one source" in out
    for bucket in ("B = 1 ", "B = 2–8", "B = 9–64", "B > 64", "up to 8× above", "goals (issue 34)"):
        assert bucket in out
    for part in ("kept out by the rule", "by family", "MoE", "concurrency", "built as 'nearest' instead",
                 "MoE engines fitted apart", "candidate batch terms"):
        assert part in out, part
    with pytest.raises(SystemExit) as err:
        calibrate.main(["--bogus"])
    assert err.value.code == 2


def test_lookup_keeps_moe_engines_apart():
    name, _, how = calibrate.lookup("H100-SXM", "sglang", moe=True)
    assert name == "sglang-moe" and "MoE" in how
    name, _, how = calibrate.lookup("H100-SXM", "sglang")
    assert name != "sglang-moe" and name.startswith("sglang-")
    name, knobs, how = calibrate.lookup("H100-SXM", "vllm", "0.10.1", moe=True)  # vLLM's MoE series: other GPUs
    assert name is None and how.startswith("vLLM, MoE targets was fitted on GB200, MI355X") and knobs[
        "expert_slowdown"] > 1
    name, knobs, how = calibrate.lookup("H100-SXM", "magicdec", moe=True)  # no MoE series of this engine
    assert "no MagicDec research engine serving a mixture of experts" in how
    assert calibrate._versions_of("sglang", ["sglang", "sglang-0.5.9", "sglang-moe", "sglangx-1"]) == [
        "sglang", "sglang-0.5.9"]
