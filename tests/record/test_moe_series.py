"""The published MoE series as the record reads them (Chapter 10 draws them beside the model): which series
are MoE, and the idealized curve each gets where Chapter 6 can price it."""
from dataclasses import replace

import pytest

from specnotes.analytic import cost
from specnotes.analytic.cost import MOE_PRESETS, QWEN3_30B_A3B
from specnotes.record import calibrate, published

H100 = "H100-SXM"


def test_published_moe_series_holds_only_moe_targets():
    series = calibrate.published_moe_series()
    for _, s in series:
        target = calibrate.SHAPE_ALIASES.get(s.setup["target"], (s.setup["target"],))[0]
        assert target in MOE_PRESETS and "speedup" in s.columns
    assert {"angelslim_issue163", "specforge_issue339"} <= {name for name, _ in series}


def test_a_published_moe_series_gets_the_idealized_curve():
    setup = {"target": "Qwen3-30B-A3B", "drafter": "eagle3-head", "accelerator": "H100-SXM", "tp": 1, "k": 3,
             "alpha": 0.7, "context": [0, 2048], "tree": False, "engine": "SGLang"}
    s = published.Series("x", "Fig. 1", "S vs B", {"url": "https://example.org"}, "read", None, setup, {}, (),
                         ("batch", "speedup"), ({"batch": 1, "speedup": 1.2}, {"batch": 16, "speedup": 1.5}))
    batches, measured, model, how = calibrate.published_curve(s)
    head = calibrate._draft(setup, QWEN3_30B_A3B)  # the EAGLE-3 head Chapter 6 prices: a dense layer
    assert model == pytest.approx([cost.batch_speedup(QWEN3_30B_A3B, head, H100, b, 3, 0.7, 1024) for b in (1, 16)])
    assert (batches, measured) == ([1, 16], [1.2, 1.5]) and "α = 0.70" in how
    no_k = replace(s, setup={**setup, "k": None})
    assert calibrate.published_curve(no_k)[2] is None and "drafted tokens" in calibrate.published_curve(no_k)[3]
    # a closed loop's requests in flight are its batch; an unpublished GPU gets no curve, and says why
    loop = replace(s, columns=("concurrency", "speedup"), points=({"concurrency": 4, "speedup": 1.1},))
    assert calibrate.published_curve(loop)[0] == [4] and calibrate.published_curve(loop)[2] is not None
    nogpu = replace(s, setup={**setup, "accelerator": None})
    assert calibrate.published_curve(nogpu)[2] is None and "GPU is not published" in calibrate.published_curve(nogpu)[3]
    # on the record: the MoE series Chapter 6 prices get a curve, point by point
    for name, series in calibrate.published_moe_series():
        b, m, model, how = calibrate.published_curve(series, name)
        priced = f"{name}/{series.id}" not in calibrate.record().skipped
        assert (model is not None) == priced and len(b) == len(m) == (len(model) if model else len(b)), how
