"""specnotes.pages.refresh: the provenance a chapter's own kernel reports, in measure.provenance's format."""

import json
import subprocess
import sys

import pytest
import torch

from specnotes import measure
from specnotes.pages import refresh


def test_kernel_provenance_reads_the_marked_line():
    prov = {"device": "cpu", "dtype": "bf16", "dtype_reason": "bf16: probe", "date": "2026-12-02T16:00:00Z"}
    outputs = [{"output_type": "stream", "text": "noise\n"},
               {"output_type": "stream", "text": f"{refresh.MARK}{json.dumps(prov)}\n"}]
    assert refresh.kernel_provenance(outputs) == prov
    with pytest.raises(RuntimeError, match="no provenance line"):
        refresh.kernel_provenance([{"output_type": "stream", "text": "nothing\n"}])


def test_the_provenance_cell_reports_the_dtype_the_kernel_chose():
    # a kernel that chose a dtype reports it with its reason; one that chose none says so (and does not probe)
    chose = f"from specnotes import measure\nmeasure.dtype_choice('cpu')\n{refresh.PROVENANCE_CELL}"
    none = refresh.PROVENANCE_CELL
    # a chapter that measures in a fixed dtype (Chapters 3, 7, 8, 9: fp32) says so through measure.provenance
    fixed = f"import torch\nfrom specnotes import measure\nmeasure.provenance('cpu', torch.float32)\n" \
            f"measure.provenance('cpu', torch.float32)\n{refresh.PROVENANCE_CELL}"
    env = {"SPECNOTES_DTYPE": "float32", "SPECNOTES_DEVICE": "cpu", "PATH": "/usr/bin:/bin"}
    out = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
           for code in (chose, none, fixed)]
    chosen, unchosen, given = (refresh.kernel_provenance([{"text": o}]) for o in out)
    assert chosen["dtype"] == "fp32" and "SPECNOTES_DTYPE" in chosen["dtype_reason"]
    assert unchosen["dtype"] is None and unchosen["dtype_reason"] == "no dtype chosen"
    assert given["dtype"] == "fp32" and given["dtype_reason"].startswith("fixed by the chapter"), given


def test_provenance_reports_every_fixed_dtype_once():
    from specnotes.measure import dtypes, records

    # Both are per-process: an earlier test that ran the dtype probe would otherwise decide the answer.
    saved, saved_choices = dict(records._GIVEN), dict(dtypes._CHOICES)
    try:
        records._GIVEN.clear()
        dtypes._CHOICES.clear()
        for dtype in (torch.float32, torch.bfloat16, torch.float32):
            measure.provenance("cpu", dtype)
        assert measure.provenance("cpu", choose=False)["dtype"] == "fp32, bf16"
    finally:
        records._GIVEN.clear()
        records._GIVEN.update(saved)
        dtypes._CHOICES.clear()
        dtypes._CHOICES.update(saved_choices)
