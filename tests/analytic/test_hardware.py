import pytest

from specnotes.analytic import hardware
from specnotes.analytic.hardware import ACCELERATORS, accelerator

DESIGN_ROWS = ["T4", "L4", "A10G", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "B200", "MI300X",
               "RTX-3090", "RTX-4090", "L40S"]


def test_table_has_every_design_row_with_a_source():
    assert list(ACCELERATORS) == DESIGN_ROWS
    for a in ACCELERATORS.values():
        assert a.source.startswith("https://")
        assert 1e11 < a.mem_bandwidth < 1e13 and 1e10 < a.memory < 1e12
        assert all(1e12 < v < 1e16 for v in a.peak_flops.values())


def test_ridge_by_hand():
    assert accelerator("H100-SXM").ridge() == pytest.approx(989 / 3.35)  # ≈ 295, the scaling book's number
    assert accelerator("A100-80GB").ridge() == pytest.approx(312 / 2.039)
    assert accelerator("T4").ridge("fp16") == pytest.approx(65 / 0.32)


def test_critical_batch_scales_with_weight_bytes():
    h = accelerator("H100-SXM")
    assert h.critical_batch("bf16") == pytest.approx(h.ridge("bf16"))
    assert h.critical_batch("fp32") == pytest.approx(2 * 67 / 3.35)
    assert h.critical_batch("fp8") == pytest.approx(1979 / 3.35 / 2)


def test_bad_names_and_dtypes():
    with pytest.raises(ValueError, match="known: T4, L4"):
        accelerator("H300")
    with pytest.raises(ValueError, match="no bf16 tensor cores"):
        accelerator("T4").ridge("bf16")


@pytest.mark.parametrize("name,row", [
    ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"), ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-80GB", "A100-80GB"), ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("Tesla T4", "T4"),
    ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"), ("NVIDIA L40", None), ("NVIDIA A10G", "A10G"),
    ("NVIDIA B200", "B200"), ("AMD Instinct MI300X", "MI300X"), ("NVIDIA GeForce RTX 4090", "RTX-4090"),
    ("NVIDIA GeForce RTX 3090", "RTX-3090"), ("NVIDIA GeForce RTX 3090 Ti", None), ("NVIDIA GeForce RTX 4090 D", None),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", None), ("NVIDIA GeForce RTX 3080", None),
])
def test_match_device_name(name, row):
    assert hardware.match_device_name(name) == row


def test_reference_rows():
    rows = {r["accelerator"]: r for r in hardware.reference_rows()}
    assert rows["T4"]["dtype"] == "fp16"  # no bf16 on Turing
    assert rows["H100-SXM"]["critical batch"] == pytest.approx(989 / 3.35)
    assert rows["A100-40GB"]["fp8 critical batch"] is None
    assert rows["H200"]["critical batch"] < rows["H100-SXM"]["critical batch"]  # same FLOPs, more bandwidth


def test_usable_dtype():
    assert hardware.usable_dtype(accelerator("T4"), "bf16") == "fp16"
    assert hardware.usable_dtype(accelerator("H100-SXM"), "fp8") == "fp8"
    with pytest.raises(ValueError, match="has no 'fp8' peak"):
        hardware.usable_dtype(accelerator("A100-80GB"), "fp8")
    # a row's name works as well as the row itself
    assert hardware.usable_dtype("T4") == "fp16" and hardware.usable_dtype("H100-SXM", "fp8") == "fp8"
    with pytest.raises(TypeError, match="accelerator must be an Accelerator or one of T4"):
        accelerator(None)


def test_the_a10g_note_keeps_its_own_peak_apart_from_the_a10s():
    # the note quotes the A10's 125 TF next to a 70 TF row: it must say which number is the A10G's
    a10g = accelerator("A10G")
    assert a10g.peak("bf16") == 70e12
    assert "the A10 itself has 125 TF bf16" in a10g.notes
    assert f"the A10G the {a10g.peak('bf16') / 1e12:.0f} of this row" in a10g.notes


def test_consumer_and_workstation_rows_by_hand():
    # datasheet/whitepaper numbers typed here independently of the table: fp32-accumulate tensor peaks
    rtx3090, rtx4090, l40s = accelerator("RTX-3090"), accelerator("RTX-4090"), accelerator("L40S")
    assert (rtx3090.peak("bf16"), rtx3090.mem_bandwidth, rtx3090.memory) == (71e12, 936e9, 24e9)
    assert (rtx4090.peak("bf16"), rtx4090.mem_bandwidth, rtx4090.memory) == (165.2e12, 1008e9, 24e9)
    assert (l40s.peak("bf16"), l40s.mem_bandwidth, l40s.memory) == (362.05e12, 864e9, 48e9)
    # the consumer cards' ridges sit far below an H100's: speculation's headroom ends at a much smaller batch
    assert rtx3090.ridge() == pytest.approx(71 / 0.936) and rtx3090.ridge() < 0.3 * accelerator("H100-SXM").ridge()
    assert l40s.ridge() > accelerator("H100-SXM").ridge()  # GDDR6: more FLOPs per byte than HBM parts
    with pytest.raises(ValueError, match="no fp8"):
        rtx3090.ridge("fp8")  # Ampere has no fp8 tensor cores
    assert "fp16 accumulate" in rtx3090.notes and "fp16 accumulate" in rtx4090.notes


# ---- devices of the published record outside the reference table (issue 34, part 4)

def test_record_devices_are_apart_from_the_reference_table():
    # the chapters and the explorer iterate ACCELERATORS: a record device must not change it
    assert list(ACCELERATORS) == DESIGN_ROWS and not set(hardware.RECORD_DEVICES) & set(ACCELERATORS)
    assert hardware.DEVICES == {**ACCELERATORS, **hardware.RECORD_DEVICES}
    for a in hardware.RECORD_DEVICES.values():
        assert a.source.startswith("https://") and a.notes
        assert 1e11 < a.mem_bandwidth < 1e13 and 1e10 < a.memory < 1e12
        assert all(1e12 < v < 1e17 for v in a.peak_flops.values())
        assert set(a.peak_flops) <= set(hardware.OPERAND_BYTES)
        assert accelerator(a.name) is a


def test_gb300_row_by_hand():
    # Verda's per-GPU table (NVIDIA's figures without sparsity): BF16 2.5, FP8 5, FP4 15 PFLOPS; 8 TB/s; 279 GB
    gb300 = accelerator("GB300")
    assert (gb300.peak("bf16"), gb300.peak("fp8"), gb300.peak("fp4")) == (2.5e15, 5e15, 15e15)
    assert (gb300.mem_bandwidth, gb300.memory) == (8e12, 279e9)
    # the ridge from the row: 2500 TF / 8 TB/s = 312.5 FLOP per byte in bf16, 1875 in fp4
    assert gb300.ridge("bf16") == pytest.approx(312.5) and gb300.ridge("fp4") == pytest.approx(1875)
    # 4-bit weights: 2B FLOPs per 0.5 bytes, so the ridge is crossed at B = 1875 * 0.5 / 2
    assert gb300.critical_batch("fp4") == pytest.approx(468.75)
    assert gb300.critical_batch("bf16") == pytest.approx(312.5)
    # the rack-level figures the row was derived from, said in the row
    assert "divide by 2" in gb300.derived and "72 GPUs" in gb300.derived
    # its dense BF16 peak is the rack's 180 PFLOPS over 72 GPUs
    assert gb300.peak("bf16") * 72 == pytest.approx(180e15)


def test_unknown_name_lists_both_tables():
    with pytest.raises(ValueError, match="from the published record, GB300"):
        accelerator("GB400")


@pytest.mark.parametrize("name,row", [("NVIDIA GB300", "GB300"), ("NVIDIA B300 SXM6 AC", None)])
def test_match_record_device_names(name, row):
    assert hardware.match_device_name(name) == row
