"""The command line: ``run`` (the report for a command line, as the page calls it),
``main`` (``python -m specnotes.advise``) and ``--calibration list``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from specnotes import validate
from specnotes.advise.base import SCHEMA
from specnotes.advise.calibration import _calibrate
from specnotes.advise.figure import plot
from specnotes.advise.flags import (  # noqa: F401
    FLAGS,
    MXFP4_BITS,
    POSITIVE,
    TOKENS,
    _RaisingParser,
    deployment_kwargs,
    flag_message,
    from_args,
    needs,
    parser,
)
from specnotes.advise.markdown import render, wrap
from specnotes.advise.report import advise
from specnotes.analytic import cost, hardware


def run(argv: list[str], calibration_lookup=None, progress: bool | None = False) -> dict:
    """The report for a command line (what the page's presets call): errors are ``validate.BadArgument``
    with the flag's name."""
    args = parser(_RaisingParser).parse_args(argv)
    try:
        return advise(from_args(args, calibration_lookup), progress, argv)
    except validate.BadArgument as err:
        raise type(err)(flag_message(str(err))) from None


def plot_path(text: str) -> Path:
    """A file the plot can be written to: its folder exists and is writable, its suffix a format matplotlib writes."""
    from matplotlib.backend_bases import FigureCanvasBase

    path = Path(text)
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise validate.BadArgument(f"plot must end in one of {', '.join('.' + f for f in formats)} (the formats "
                                   f"matplotlib writes), such as s.png; got {text!r}")
    folder = path.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise validate.BadArgument(f"plot must be a file in a folder that exists and is writable; "
                                   f"{str(folder)!r} {'is not writable' if folder.is_dir() else 'does not exist'}")
    return path


def calibration_listing() -> list[dict]:
    """Every stored calibration: GPU, name, engine and version, what it was fitted to, its knobs; and the
    pooled knobs (any GPU)."""
    stored = _calibrate().stored()
    out = [{"gpu": accel, "name": name, "engine": r["engine"], "version": r["version"], "fitted_to": r["fitted_to"],
            "knobs": _calibrate().calibration(accel, name)}
           for accel, names in stored.items() if accel in hardware.ACCELERATORS
           for name, r in names.items() if "alias_of" not in r]
    out += [{"gpu": accel, "name": name, "engine": None, "version": None, "alias_of": r["alias_of"],
             "knobs": _calibrate().calibration(accel, name)}
            for accel, names in stored.items() if accel in hardware.ACCELERATORS
            for name, r in names.items() if "alias_of" in r]
    return out + [{"gpu": "any", "name": "pooled", "engine": "every engine in the record", "version": None,
                   "fitted_to": stored["pooled"]["fitted_to"], "knobs": stored["pooled"]["knobs"]}]


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.calibration == "list":
        listing = calibration_listing()
        if args.json:
            print(json.dumps({"schema": f"{SCHEMA}/calibrations", "calibrations": listing}, indent=2))
        for c in [] if args.json else listing:
            what = (f"= {c['alias_of']}" if "alias_of" in c else
                    f"{c['engine']} {c['version'] or ''}: B {c['fitted_to']['batch'][0]}–{c['fitted_to']['batch'][1]}, "
                    f"{', '.join(c['fitted_to']['drafters'])}, {', '.join(c['fitted_to']['targets'])}")
            print(f"{c['gpu']:10} {c['name']:18} {what}")
        return 0
    if args.target is None and args.target_shape is None and args.from_record is None:
        p.error(f"--target is required: one of {', '.join(cost.PRESETS)}, a config.json path, or --target-shape")
    try:
        plot_file = plot_path(args.plot) if args.plot else None
        report = advise(from_args(args), progress=None, argv=argv if argv is not None else sys.argv[1:])
    except validate.BadArgument as err:
        p.error(flag_message(str(err)))
    if plot_file:  # drawn before the report is printed: a failure prints nothing but the error
        import matplotlib

        matplotlib.use("Agg")
        try:
            plot(report).figure.savefig(plot_file)
        except (OSError, RuntimeError, ValueError) as err:
            p.error(f"--plot: could not write {str(plot_file)!r}: {err}")
        print(f"plot: {plot_file}", file=sys.stderr)
    print(json.dumps(report, indent=2) if args.json else wrap(render(report)))
    return 0
