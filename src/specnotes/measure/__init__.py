"""How the book measures, on whatever device it finds (introduced in Chapter 1).

One module per job:

- ``devices``  which device (``SPECNOTES_DEVICE``), dtype names, sizes, cache and memory: the bottom;
- ``timing``   the one timer: sync, warm-up, repeats, median/IQR, budgets, the doubling sweep;
- ``dtypes``   which dtype a device measures in (probed on a CPU by timing GEMMs; ``SPECNOTES_DTYPE``);
- ``probes``   this device's measured roofs: copy bandwidth, GEMM peak, overhead floor, GEMM sweeps, knee;
- ``records``  one record format with one provenance block (bench, sampler benchmark, training, refresh);
- ``checks``   what a measurement may assert on *this* device, derived from its measured roofs.

What the chapters measure with them, each a module of this package: ``stack`` (a Llama-style layer stack with a
KV cache, its timing and Chapters 2/4's sweep), ``kvtiming`` (Chapter 5's passes over a real KV cache),
``moe_stack`` (Chapter 10's expert layers) and ``findings`` (what Chapters 1, 2 and 4 find in a measurement).
The names above are this package's face (``measure.time_fn``); the rest is imported from its module. Sits on
torch; imports ``analytic`` and ``validate``, never ``sampling``, ``tiny`` or anything above.
"""

from specnotes.measure import checks
from specnotes.measure.devices import (
    DEVICE_ENV,
    DTYPE_ENV,
    DTYPES,
    GiB,
    MiB,
    Sizes,
    as_dtype,
    cpu_details,
    detect_accelerator,
    device_name,
    dtype_name,
    num_threads,
    pick_device,
    sizes_for,
)
from specnotes.measure.dtypes import DtypeChoice, default_dtype, dtype_choice
from specnotes.measure.probes import (
    GemmEfficiency,
    KneeFit,
    MeasuredRoof,
    copy_bandwidth,
    efficiency_sweep,
    knee,
    knee_fit,
    matmul_floor,
    matmul_sweep,
    matmul_time,
    measured_roofline,
    peak_matmul_flops,
)
from specnotes.measure.records import SCHEMA, Record, Results, load_results, provenance, save_results
from specnotes.measure.timing import Timing, doubling_sweep, sync, time_fn, time_interleaved

__all__ = [
    "DEVICE_ENV", "DTYPE_ENV", "DTYPES", "GiB", "MiB", "SCHEMA", "DtypeChoice", "KneeFit", "MeasuredRoof", "Record",
    "Results", "Sizes", "Timing", "GemmEfficiency", "as_dtype", "checks", "copy_bandwidth", "cpu_details",
    "default_dtype", "detect_accelerator", "device_name", "efficiency_sweep",
    "doubling_sweep", "dtype_choice", "dtype_name", "knee", "knee_fit", "load_results", "matmul_floor",
    "matmul_sweep", "matmul_time", "measured_roofline", "num_threads", "peak_matmul_flops", "pick_device",
    "provenance", "save_results", "sizes_for", "sync", "time_fn", "time_interleaved",
]
