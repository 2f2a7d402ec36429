"""The advisor as a form for its page of the book (``book/advisor.ipynb``), Jupyter and Colab: ipywidgets
that re-run ``run`` on every change."""

from __future__ import annotations

from specnotes import validate
from specnotes.advise.base import DRAFTERS, ENGINES, K_MAX
from specnotes.advise.calibration import _calibrate
from specnotes.advise.cli import run
from specnotes.advise.figure import plot
from specnotes.advise.markdown import render
from specnotes.analytic import cost, hardware


def form_argv(values: dict) -> list[str]:
    """The command line a form's values stand for (the form runs exactly what the CLI would)."""
    argv = ["--target", values["target"], "--drafter", values["drafter"], "--gpu", values["gpu"],
            "--dtype", values["dtype"], "--tp", str(values["tp"]), "--batch", str(values["batch"]).strip(),
            "--context", str(values["context"]), "--alpha", f"{values['alpha']:g}", "--k", str(values["k"])]
    if values["drafter"] == "model":
        argv += ["--draft", values["draft"]]
    if values["drafter"] == "early-exit":
        argv += ["--exit-layer", str(values["exit_layer"])]
    if values.get("engine") not in (None, "not given"):
        argv += ["--engine", values["engine"]]
    if values.get("calibration") not in (None, "auto"):
        argv += ["--calibration", values["calibration"]]
    return argv


def form(initial: dict | None = None):
    """The advisor as an ipywidgets form for Jupyter and Colab: every change re-runs ``run`` on the form's
    command line and shows it, the report and the plot. Returns the box; ``box.controls`` are the
    widgets, ``box.last`` the last report (None after an error), ``box.redraw()`` redraws."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import Markdown, display

    values = {"target": "Llama-3.1-8B", "drafter": "model", "draft": "Llama-3.2-1B", "exit_layer": 8,
              "gpu": "H100-SXM", "dtype": "bf16", "tp": 1, "batch": "1-512", "context": 2048, "alpha": 0.7,
              "k": "4", "engine": "not given", "calibration": "auto", **(initial or {})}
    style, wide = {"description_width": "initial"}, w.Layout(width="260px")
    stored = sorted({n for a, names in _calibrate().calibrations().items() for n in names})
    controls = {
        "target": w.Dropdown(options=list(cost.PRESETS), description="target"),
        "drafter": w.Dropdown(options=list(DRAFTERS), description="drafter"),
        "draft": w.Dropdown(options=list(cost.PRESETS), description="draft model"),
        "exit_layer": w.BoundedIntText(min=1, max=127, description="exit layer"),
        "gpu": w.Dropdown(options=list(hardware.ACCELERATORS), description="GPU"),
        "dtype": w.Dropdown(options=list(hardware.DTYPE_BYTES), description="dtype"),
        "tp": w.Dropdown(options=[1, 2, 4, 8], description="tp"),
        "batch": w.Text(description="batch (B or LO-HI)"),
        "context": w.BoundedIntText(min=0, max=1 << 20, step=1024, description="context L"),
        "alpha": w.FloatSlider(min=0.0, max=1.0, step=0.01, description="α"),
        "k": w.Dropdown(options=["best"] + [str(k) for k in range(1, K_MAX + 1)], description="k"),
        "engine": w.Dropdown(options=["not given", *ENGINES], description="engine"),
        "calibration": w.Dropdown(options=["auto", "none", "pooled"] + stored, description="calibration"),
    }
    for name, control in controls.items():
        control.value = values[name]
        control.style, control.layout = style, wide
    out = w.Output()
    rows = [list(controls.values())[i:i + 4] for i in range(0, len(controls), 4)]
    box = w.VBox([w.HBox(r) for r in rows] + [out])

    def redraw(*_):
        given = {name: control.value for name, control in controls.items()}
        controls["draft"].disabled = given["drafter"] != "model"
        controls["exit_layer"].disabled = given["drafter"] != "early-exit"
        argv = form_argv(given)
        with out:
            out.clear_output(wait=True)
            try:
                box.last = run(argv)
            except validate.BadArgument as err:
                box.last = None
                print(err)
                return
            display(Markdown(f"`python -m specnotes.advise {' '.join(argv)}`\n\n" + render(box.last)))
            plot(box.last)
            plt.show()

    for control in controls.values():
        control.observe(redraw, names="value")
    box.controls, box.redraw, box.last = controls, redraw, None
    redraw()
    return box
