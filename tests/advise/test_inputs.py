"""The advisor's inputs: names resolved openly (issue 47 part 4), ranges, fractional weight bits, flags that need
another flag, and a record's fields merged with the flags or refused (issue 45 part 2)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from named_cases import QWEN3_MOE, gpu_record, shipped_record

from specnotes import advise, validate
from specnotes.analytic import cost

H100 = "H100-SXM"
BASE = ["--draft", "Llama-3.2-1B", "--gpu", H100, "--alpha", "0.7", "--context", "512"]


@pytest.mark.parametrize("value, name, why", [
    ("Llama-3.1-8B", "Llama-3.1-8B", None),
    ("llama-3.1-8b", "Llama-3.1-8B", None),  # case and punctuation: the name itself, nothing to say
    ("meta-llama/Llama-3.1-8B", "Llama-3.1-8B", "a Hugging Face id, by its name after the /"),
    ("Llama-3.1-8B-Instruct", "Llama-3.1-8B", "a -Instruct model has its base's shape"),
    ("meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B", "a -Instruct model has its base's shape"),
    ("Qwen3-8B-Base", "Qwen3-8B", "a -Base model has its base's shape"),
    ("Qwen3-30B", "Qwen3-30B-A3B", "the one preset whose name starts so"),
])
def test_a_name_is_resolved_and_how_is_said(value, name, why):
    assert advise.resolve("target", value, cost.PRESETS, "a preset") == (name, why)


@pytest.mark.parametrize("value, says", [
    ("Qwen3", "did you mean"),  # a prefix of several presets is no one of them
    ("Llama-3.1-8B-Instruct-2507", "is not a preset the table knows"),  # a suffix after -Instruct: not stripped
    ("Qwen/", "is not a preset"),
])
def test_an_unknown_or_ambiguous_name_is_refused(value, says):
    with pytest.raises(validate.BadArgument, match=says):
        advise.resolve("target", value, cost.PRESETS, "a preset")


def test_a_loose_name_is_said_in_the_reports_first_lines():
    r = advise.run(["--target", "Llama-3.1-8B-Instruct", *BASE[:2], "--gpu", "h100-sxm", *BASE[4:]])
    assert r["warnings"][0] == ("--target Llama-3.1-8B-Instruct read as Llama-3.1-8B (a -Instruct model has its "
                                "base's shape)")
    assert len(r["warnings"]) == 1 or "read as" not in r["warnings"][1]  # h100-sxm is H100-SXM: nothing said
    text = advise.render(r)
    assert text.index("read as Llama-3.1-8B") < text.index("| B |")  # before the table
    assert not advise.run(["--target", "Llama-3.1-8B", *BASE])["warnings"]


def test_a_config_is_named_by_its_name_or_type_and_a_presets_twin_is_the_preset(tmp_path):
    folder = tmp_path / "cfg"
    folder.mkdir()
    twin = folder / "qwen3moe.json"
    twin.write_text(json.dumps(QWEN3_MOE))
    notes = []
    assert advise.model_shape("target", str(twin), notes=notes) is cost.PRESETS["Qwen3-30B-A3B"]
    assert notes == [f"--target {twin} (qwen3_moe) has the shape of the preset Qwen3-30B-A3B, field for field: read "
                     "as that preset"]
    other = folder / "wider.json"
    other.write_text(json.dumps({**QWEN3_MOE, "num_hidden_layers": 40}))
    assert advise.model_shape("target", str(other)).name == "qwen3_moe"  # not "cfg", the folder's name
    other.write_text(json.dumps({**QWEN3_MOE, "num_hidden_layers": 40, "_name_or_path": "me/Qwen3-40L"}))
    assert advise.model_shape("target", str(other)).name == "Qwen3-40L"


def test_a_twin_of_two_presets_is_the_one_its_name_says():
    llama = cost.PRESETS["Llama-3-8B"]  # Llama-3.1-8B has the same shape
    assert advise.preset_of(replace(llama, name="Llama-3.1-8B-Instruct")).name == "Llama-3.1-8B"
    assert advise.preset_of(replace(llama, name="llama")).name == "Llama-3-8B"


@pytest.mark.parametrize("text, ends", [("1e-3", (0.001, 0.001)), ("0.5-0.8", (0.5, 0.8)), ("1e-3-5e-1", (0.001, 0.5)),
                                        (".5", (0.5, 0.5)), ("2.5E-1", (0.25, 0.25))])
def test_alpha_takes_scientific_notation(text, ends):
    assert advise.alpha_range(text) == pytest.approx(ends)


@pytest.mark.parametrize("flag, value, says", [
    ("--alpha", "0.8-0.5", "range 0.8-0.5 is reversed: give it from low to high, 0.5-0.8"),
    ("--batch", "64-1", "--batch range 64-1 is reversed: give it from low to high, 1-64"),
    ("--alpha", "-0.5", "must be a number in [0, 1] or a range LO-HI"),
    ("--alpha", "nan", "must be a number in [0, 1] or a range LO-HI"),
    ("--batch", "1-" + "9" * 5000, "--batch must be a positive integer or a range LO-HI"),  # no int of 5000 digits
    ("--weight-bits", "0.5", "argument --weight-bits: must be a number in [1, 16], got 0.5"),
])
def test_ranges_and_bits_are_refused_by_name(flag, value, says):
    with pytest.raises(validate.BadArgument) as err:
        advise.run(["--target", "Llama-3.1-8B", *BASE, flag, value])
    assert says in str(err.value)


def test_fractional_weight_bits_price_the_weights_and_the_help_says_mxfp4s_source():
    r = advise.run(["--target", "Llama-3.1-8B", *BASE, "--weight-bits", "4.25"])
    four = advise.run(["--target", "Llama-3.1-8B", *BASE, "--weight-bits", "4"])
    assert r["deployment"]["weight_bits"] == 4.25
    assert r["weights_per_gpu_GB"] == pytest.approx(four["weights_per_gpu_GB"] * 4.25 / 4)
    help_text = " ".join(advise.parser().format_help().split())
    assert "4.25 for MXFP4" in help_text and "OCP Microscaling Formats spec v1.0" in help_text
    assert "one 8-bit E8M0 scale per 32" in help_text


@pytest.mark.parametrize("extra, says", [
    (["--engine-version", "0.10.1"], "--engine-version needs --engine"),
    (["--record-batches", "1,2"], "--record-batches needs --from-record"),
    (["--link", "900"], "--link needs --tp 2 or more"),
])
def test_a_flag_that_needs_another_says_so(extra, says):
    with pytest.raises(validate.BadArgument, match=says):
        advise.run(["--target", "Llama-3.1-8B", *BASE, *extra])
    advise.run(["--target", "Llama-3.1-8B", *BASE, "--engine", "vllm", "--engine-version", "0.10.1"])  # with it


def test_the_plot_flag_refuses_a_missing_folder_and_creates_none(tmp_path):
    with pytest.raises(SystemExit) as exit_:
        advise.main(["--target", "Llama-3.1-8B", *BASE, "--plot", str(tmp_path / "new" / "s.png")])
    assert exit_.value.code == 2 and not (tmp_path / "new").exists()


# ---------------------------------------------------------------------------------------------- records


def write(tmp_path, doc, name="r.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("extra, says", [
    (["--context", "1024"], "--context 1024 disagrees with the record .*measured at L = 128 tokens: drop --context"),
    (["--dtype", "bf16"], "--dtype bf16 disagrees with the record .*whose roofs were measured in fp32"),
    (["--bandwidth", "100"], r"^the roofs given by hand \(--bandwidth 100\) disagree with the record"),
    (["--bandwidth", "100", "--peak", "5"], r"by hand \(--bandwidth 100 and --peak 5\) disagree .*drop them"),
])
def test_a_record_whose_context_dtype_or_device_disagrees_is_refused(extra, says, tmp_path):
    with pytest.raises(validate.BadArgument, match=says):
        advise.run(["--from-record", write(tmp_path, shipped_record()), *extra])


def test_what_the_record_says_is_taken_and_what_agrees_passes(tmp_path):
    path = write(tmp_path, shipped_record())
    r = advise.run(["--from-record", path, "--context", "128", "--dtype", "fp32"])  # the record's own values
    assert r["deployment"]["context_tokens"] == 128 and r["deployment"]["math_dtype"] == "fp32"
    assert r["deployment"]["dtype"] == advise.run(["--from-record", path])["deployment"]["dtype"] == "fp32"


def test_a_records_model_named_loosely_is_read_as_its_preset_and_said(tmp_path):
    path = write(tmp_path, gpu_record())
    r = advise.run(["--drafter", "eagle3", "--gpu", H100, "--context", "720", "--alpha", "0.6", "--from-record", path])
    assert r["deployment"]["target"]["name"] == "Llama-3.1-8B"
    assert r["warnings"][0] == ("the record's target meta-llama/Llama-3.1-8B-Instruct read as the preset "
                                "Llama-3.1-8B (a -Instruct model has its base's shape)")
    assert "--target" not in r["warnings"][0]  # nothing said of a flag not given


def test_a_records_values_are_never_blamed_on_a_flag_not_given(tmp_path):
    doc = shipped_record()
    for pair in doc["sections"]["engine_speedup"]:
        pair["extra"]["speedup_engine_tpot"] = 4.9  # within k + 1 = 5: read, then past what the model allows
    with pytest.raises(validate.BadArgument) as err:
        advise.run(["--from-record", write(tmp_path, doc), "--memory", "0.0001"])  # nothing fits in 100 kB
    assert str(err.value).startswith("the record r.json: B = 1 does not fit in memory"), err.value
    doc["sections"]["engine_speedup"][0]["extra"]["speedup_engine_tpot"] = 5.5
    with pytest.raises(validate.BadArgument, match=r"speedup_engine_tpot must be a number in \(0, 5\], got 5.5"):
        advise.run(["--from-record", write(tmp_path, doc)])


def test_a_records_shapes_are_checked_when_read(tmp_path):
    doc = shipped_record()
    doc["provenance"]["engine_build"]["model"] = "mine-f32.gguf"
    doc["notes"]["target_config"] = {"n_layers": 4, "d_model": 190, "n_heads": 4, "d_ff": 576, "vocab_size": 256}
    with pytest.raises(validate.BadArgument, match=r"notes\.target_config is no model: d_model must be a multiple"):
        advise.read_record(write(tmp_path, doc))
    doc["notes"]["target_config"] = {"n_layers": 4, "d_model": 192, "n_heads": 4, "d_ff": 576, "vocab_size": 300}
    with pytest.raises(validate.BadArgument, match=r"its draft's vocabulary \(256\) is not its target's \(300\)"):
        advise.run(["--from-record", write(tmp_path, doc)])


def test_a_record_file_that_is_no_record_names_the_file(tmp_path):
    for text, says in (("[", "is not JSON"), ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
                       ('{"n": ' + "9" * 5000 + "}", "is not JSON"), ("[]", "is not an S\\(B\\) record")):
        (tmp_path / "x.json").write_text(text)
        with pytest.raises(validate.BadArgument, match=f"from_record: .*x.json.*{says}"):
            advise.read_record(tmp_path / "x.json")
    assert Path(advise.llama_server_record()).is_file()
