"""Accelerators: datasheet peaks, the ridge point, and which row the running device is.

Peaks are *dense* tensor-core FLOP/s (no 2:4 sparsity), bandwidth is HBM/GDDR bytes per
second, memory is bytes, ``link_bandwidth`` the GPU-to-GPU interconnect in bytes per second with both
directions counted, as the datasheets quote it (``cost`` uses half of it per direction). Every row
names the datasheet it was read from; a row whose dense peak is not printed as such (a datasheet that
quotes only sparse, rack-level or INT8 figures) says in ``derived`` how it was obtained. A CPU has no row:
its roofline is measured (``specnotes.measure.measured_roofline``), never guessed.

``ACCELERATORS`` is the book's reference table (every chapter and the explorer iterate it).
``RECORD_DEVICES`` holds the devices that measured published points (``specnotes.record.published``) but are
not rows of that table; ``DEVICES`` is both, and ``accelerator(name)`` looks a name up in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specnotes import validate

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
# Bytes per operand of every peak a row may carry: the dtypes above, and INT8 and 4-bit floats (NVFP4,
# MXFP4), which only some rows have and which are not dtypes a whole model runs in here.
OPERAND_BYTES = {**DTYPE_BYTES, "int8": 1, "fp4": 0.5}

T, G = 1e12, 1e9


@dataclass(frozen=True)
class Accelerator:
    name: str
    peak_flops: dict[str, float]
    mem_bandwidth: float
    memory: float
    source: str
    notes: str = field(default="", compare=False)
    link_bandwidth: float | None = None  # GPU-to-GPU bytes/s, both directions together, as datasheets quote it
    link: str = ""  # which interconnect that is
    derived: str = field(default="", compare=False)  # how a dense peak was derived where none is printed

    def peak(self, dtype: str = "bf16") -> float:
        if dtype not in self.peak_flops:
            raise ValueError(
                f"{self.name} has no {dtype!r} peak in the table; it has {sorted(self.peak_flops)}"
                + (f" ({self.notes})" if self.notes else "")
            )
        return self.peak_flops[dtype]

    def ridge(self, dtype: str = "bf16") -> float:
        """FLOP per byte at which a kernel stops being memory-bound: peak / bandwidth."""
        return self.peak(dtype) / self.mem_bandwidth

    def critical_batch(self, dtype: str = "bf16") -> float:
        """Tokens per weight read at which a GEMM with dtype weights reaches the ridge.

        A GEMM over B tokens does 2·B FLOPs per weight and reads dtype_bytes per weight,
        so AI = 2B / w and the ridge is crossed at B = ridge · w / 2 (= ridge in bf16).
        """
        return self.ridge(dtype) * OPERAND_BYTES[dtype] / 2


ACCELERATORS: dict[str, Accelerator] = {
    a.name: a
    for a in [
        Accelerator(
            "T4", {"fp16": 65 * T, "fp32": 8.1 * T}, 320 * G, 16 * G,
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf",
            notes="Turing has no bf16 tensor cores: use fp16 on a T4",
            link_bandwidth=32 * G, link="PCIe Gen3 x16",
        ),
        Accelerator(
            "L4", {"bf16": 121 * T, "fp16": 121 * T, "fp8": 242.5 * T, "fp32": 30.3 * T}, 300 * G, 24 * G,
            "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet",
            link_bandwidth=64 * G, link="PCIe Gen4 x16",
        ),
        Accelerator(
            "A10G", {"bf16": 70 * T, "fp16": 70 * T, "fp32": 35 * T}, 600 * G, 24 * G,
            "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/",
            notes=("AWS variant of the A10; the A10 itself has 125 TF bf16, the A10G the 70 of this row. "
                   "NVIDIA publishes no A10G datasheet"),
        ),
        Accelerator(
            "A100-40GB", {"bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T}, 1555 * G, 40 * G,
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
            link_bandwidth=600 * G, link="NVLink 3 (SXM4, or NVLink bridge for a pair of PCIe cards)",
        ),
        Accelerator(
            "A100-80GB", {"bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T}, 2039 * G, 80 * G,
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
            notes="SXM4 module",
            link_bandwidth=600 * G, link="NVLink 3",
        ),
        Accelerator(
            "H100-SXM", {"bf16": 989 * T, "fp16": 989 * T, "fp8": 1979 * T, "tf32": 494.5 * T, "fp32": 67 * T},
            3350 * G, 80 * G,
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
            link_bandwidth=900 * G, link="NVLink 4",
        ),
        Accelerator(
            "H100-PCIe", {"bf16": 756 * T, "fp16": 756 * T, "fp8": 1513 * T, "tf32": 378 * T, "fp32": 51 * T},
            2000 * G, 80 * G,
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
            link_bandwidth=600 * G, link="NVLink bridge for a pair of cards (PCIe Gen5 x16 otherwise: 128 GB/s)",
        ),
        Accelerator(
            "H200", {"bf16": 989 * T, "fp16": 989 * T, "fp8": 1979 * T, "tf32": 494.5 * T, "fp32": 67 * T},
            4800 * G, 141 * G,
            "https://www.nvidia.com/en-us/data-center/h200/",
            notes="SXM; same compute as the H100 SXM, 43% more bandwidth",
            link_bandwidth=900 * G, link="NVLink 4",
        ),
        Accelerator(
            "B200", {"bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T, "tf32": 1100 * T, "fp32": 75 * T},
            8000 * G, 180 * G,
            "https://www.nvidia.com/en-us/data-center/dgx-b200/",
            notes="per GPU of a DGX/HGX B200",
            link_bandwidth=1800 * G, link="NVLink 5",
        ),
        Accelerator(
            "MI300X", {"bf16": 1307.4 * T, "fp16": 1307.4 * T, "fp8": 2614.9 * T, "tf32": 653.7 * T, "fp32": 163.4 * T},
            5300 * G, 192 * G,
            "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf",
            link_bandwidth=896 * G, link="AMD Infinity Fabric, 7 links x 128 GB/s",
        ),
        # Consumer and workstation cards. GeForce tensor cores run fp16/bf16 GEMMs with fp32 accumulation
        # (what PyTorch's and vLLM's bf16/fp16 GEMMs use) at half the fp16-accumulate rate: these rows hold
        # the fp32-accumulate peak.
        Accelerator(
            "RTX-3090", {"bf16": 71 * T, "fp16": 71 * T, "tf32": 35.6 * T, "fp32": 35.6 * T}, 936 * G, 24 * G,
            "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf",
            notes=("GeForce RTX 3090 (GA102): fp16/bf16 tensor peak with fp32 accumulate; fp16 with fp16 "
                   "accumulate is 142 TF; no fp8"),
            link_bandwidth=32 * G, link="PCIe Gen4 x16 (a pair can add an NVLink bridge: 112.5 GB/s)",
        ),
        Accelerator(
            "RTX-4090", {"bf16": 165.2 * T, "fp16": 165.2 * T, "fp8": 330.3 * T, "tf32": 82.6 * T, "fp32": 82.6 * T},
            1008 * G, 24 * G,
            "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
            notes=("GeForce RTX 4090 (AD102): fp16/bf16 and fp8 tensor peaks with fp32 accumulate; with fp16 "
                   "accumulate they are 330.3 and 660.6 TF"),
            link_bandwidth=64 * G, link="PCIe Gen4 x16 (no NVLink)",
        ),
        Accelerator(
            "L40S", {"bf16": 362.05 * T, "fp16": 362.05 * T, "fp8": 733 * T, "tf32": 183 * T, "fp32": 91.6 * T},
            864 * G, 48 * G,
            "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413",
            notes="Ada Lovelace (AD102) data-center card, GDDR6",
            link_bandwidth=64 * G, link="PCIe Gen4 x16 (no NVLink)",
        ),
    ]
}


# Devices of the published record outside the reference table. Same units as above.
RECORD_DEVICES: dict[str, Accelerator] = {
    a.name: a
    for a in [
        Accelerator(
            "GB300", {"bf16": 2500 * T, "fp16": 2500 * T, "fp8": 5000 * T, "fp4": 15000 * T, "tf32": 1250 * T,
                      "fp32": 80 * T}, 8000 * G, 279 * G,
            "https://verda.com/blog/gb300-nvl72-architecture",
            notes=("Blackwell Ultra GPU of a GB300 NVL72 rack (72 GPUs, 36 Grace CPUs); read from Verda's "
                   "per-GPU table. NVIDIA's own pages quote the rack, with sparsity"),
            link_bandwidth=1800 * G, link="NVLink 5 (900 GB/s each way)",
            derived=("Verda's per-GPU table lists NVIDIA's figures 'without sparsity (divide by 2)': FP16/BF16 "
                     "2.5, FP8 5, FP4 15, TF32 1.25 PFLOPS; its rack table agrees over 72 GPUs (BF16 180, FP8 "
                     "360, FP4 1,080 PFLOPS dense; 576 TB/s of HBM, 20 TB). Memory is Verda's 279 GB per GPU "
                     "(other pages quote 288 GB of HBM3e)"),
        ),
        Accelerator(
            "MI355X", {"bf16": 2516.6 * T, "fp16": 2516.6 * T, "fp8": 5033.2 * T, "fp4": 10066.3 * T,
                       "fp32": 157.3 * T}, 8000 * G, 288 * G,
            "https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html",
            notes=("AMD Instinct MI355X (CDNA 4, OAM, 1.4 kW, liquid-cooled): 256 compute units (8 XCDs of 32), 288 "
                   "GB of HBM3E at 8 TB/s"),
            link_bandwidth=1075.2 * G, link="AMD Infinity Fabric, 7 links x 153.6 GB/s (both directions)",
            derived=("No datasheet page was read that prints the dense peaks, so they are the chip's: 256 CUs "
                     "(ROCm's GPU specifications table) x 8,192 dense FP8 FLOPs per clock per CU (AMD at ISSCC 2026,"
                     " as world-today-news.com and news.lavx.hu report it: doubled from the MI300X's 4,096) x 2.4 "
                     "GHz (the MI355X's peak clock, AMD at Hot Chips 2025 as wccftech.com reports it) = 5.03 PFLOPS "
                     "FP8, AMD's 'five petaflops'; BF16/FP16 half of it and MXFP4 twice it, as CDNA 4's matrix cores"
                     " rate them (The Register, 2025-06-12: 10 PFLOPS FP4, FP8 and BF16 level with Blackwell's). The"
                     " same count for the MI350X at its 2.2 GHz, 2.31 PFLOPS BF16, is the 2,306.9 TFLOPS "
                     "huggingface.co/hardware/mi350x lists. 288 GB and 8 TB/s: AMD's CDNA 4 pages as the Boston and "
                     "Hume Consulting posts quote them; the link: ~153 GB/s both ways per Infinity Fabric link (Hume"
                     " Consulting), 7 links to the 7 other GPUs of an 8-GPU platform"),
        ),
        Accelerator(
            "B300", {"bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T, "fp4": 13125 * T, "tf32": 1125 * T,
                     "fp32": 75 * T}, 8000 * G, 288 * G,
            "https://www.nvidia.com/en-us/data-center/hgx/",
            notes=("Blackwell Ultra GPU of an HGX/DGX B300 (8 GPUs a baseboard); NVIDIA quotes the baseboard, "
                   "with sparsity"),
            link_bandwidth=1800 * G, link="NVLink 5 (900 GB/s each way)",
            derived=("NVIDIA's HGX B300 table as fibermall.com copies it, per 8 GPUs with sparsity: FP16/BF16 36 "
                     "PFLOPS, FP8 72, TF32 18: halved for dense and divided by 8, 2.25, 4.5 and 1.125 PFLOPS a GPU, "
                     "as glennklockwood.com/garden/processors/B300 lists them (its dense FP4: 13.125 PFLOPS; FP32 "
                     "75 TFLOPS); 288 GB of HBM3e at up to 8 TB/s a GPU and 1.8 TB/s of NVLink (acecloud.ai's HGX "
                     "B300 table: 2.3 TB a node; Verda's per-GPU table gives 270 GB and 7.7 TB/s)"),
        ),
        Accelerator(
            "GB200", {"bf16": 2500 * T, "fp16": 2500 * T, "fp8": 5000 * T, "fp4": 10000 * T, "tf32": 1250 * T,
                      "fp32": 80 * T}, 8000 * G, 186 * G,
            "https://www.nvidia.com/en-us/data-center/gb200-nvl72/",
            notes=("Blackwell GPU of a GB200 superchip (1 Grace CPU, 2 GPUs) in a GB200 NVL72 rack; NVIDIA's page "
                   "quotes the rack, with sparsity"),
            link_bandwidth=1800 * G, link="NVLink 5 (900 GB/s each way)",
            derived=("The rack's figures over its 72 GPUs: 1,440 PFLOPS of FP4 with sparsity (awesomeagents.ai's "
                     "and deploybase.ai's copies of NVIDIA's table) is 10 PFLOPS dense a GPU; Blackwell's tensor "
                     "cores rate FP8 at half that and BF16 at a quarter (the B200 row's 4.5 and 2.25 against its 9 "
                     "dense FP4), so 5 and 2.5 PFLOPS; TF32 and FP32 as the GB300 row's Blackwell peers. 13.4-13.5 "
                     "TB of HBM3e over 72 GPUs: 186 GB a GPU, at 8 TB/s (gpu.blog's GB200 NVL72 page); 1.8 TB/s of "
                     "NVLink 5. Verda's per-GPU table gives 2.25 PFLOPS BF16, 4.5 FP8 and 7.7 TB/s for the GB200's "
                     "GPU instead: a rack-level derivation and a per-GPU table differ by 10%"),
        ),
    ]
}

DEVICES: dict[str, Accelerator] = {**ACCELERATORS, **RECORD_DEVICES}


def usable_dtype(accel: Accelerator | str, dtype: str = "bf16") -> str:
    """``dtype`` if ``accel`` (an Accelerator or a row's name) has a peak for it; bf16 falls back to fp16
    (the T4 has no bf16 tensor cores)."""
    accel = accelerator(accel)
    if dtype in accel.peak_flops:
        return dtype
    if dtype == "bf16" and "fp16" in accel.peak_flops:
        return "fp16"
    raise ValueError(f"{accel.name} has no {dtype!r} peak; it has {sorted(accel.peak_flops)}")


def accelerator(name: str | Accelerator) -> Accelerator:
    """The row called ``name`` in ``DEVICES`` (the reference table or the published record's devices; an
    Accelerator passes through)."""
    if isinstance(name, Accelerator):
        return name
    if not isinstance(name, str):
        raise validate.BadArgumentType(f"accelerator must be an Accelerator or one of {', '.join(ACCELERATORS)}; "
                                       f"got {name!r} ({type(name).__name__})")
    if name not in DEVICES:
        raise ValueError(f"unknown accelerator {name!r}; known: {', '.join(ACCELERATORS)} "
                         f"(and, from the published record, {', '.join(RECORD_DEVICES)})")
    return DEVICES[name]


# Substrings of torch.cuda.get_device_name(), most specific first.
_NAME_PATTERNS: list[tuple[str, str | None]] = [
    ("H100 PCIE", "H100-PCIe"),
    ("H100", "H100-SXM"),
    ("H200", "H200"),
    ("B200", "B200"),
    ("GB300", "GB300"),  # a GB300 NVL72 GPU; an HGX B300 (less memory, 7.7 TB/s) has no row
    ("A100-PCIE-40GB", "A100-40GB"),
    ("A100-SXM4-40GB", "A100-40GB"),
    ("A100 40GB", "A100-40GB"),
    ("A100", "A100-80GB"),
    ("A10G", "A10G"),
    ("L40S", "L40S"),
    ("L40", None),  # an L40 is not an L40S, nor an L4
    ("3090 TI", None),  # more SMs and bandwidth than the RTX 3090 row
    ("RTX 3090", "RTX-3090"),
    ("4090 D", None),  # fewer SMs than the RTX 4090 row
    ("LAPTOP", None),  # laptop parts share desktop names with far lower clocks and bandwidth
    ("RTX 4090", "RTX-4090"),
    ("L4", "L4"),
    ("T4", "T4"),
    ("MI300X", "MI300X"),
]


def match_device_name(device_name: str) -> str | None:
    """Table row for a CUDA/ROCm device name such as 'NVIDIA H100 80GB HBM3', or None."""
    upper = device_name.upper()
    for pattern, row in _NAME_PATTERNS:
        if pattern in upper:
            return row
    return None


def reference_rows(dtype: str = "bf16") -> list[dict]:
    """One row per accelerator: datasheet peaks, bandwidth, ridge and critical batch in ``dtype``.

    bf16 falls back to fp16 where there is no bf16 peak (the T4), and the row says so.
    """
    rows = []
    for a in ACCELERATORS.values():
        used = usable_dtype(a, dtype)
        rows.append({
            "accelerator": a.name,
            "dtype": used,
            "peak TFLOP/s": a.peak(used) / T,
            "bandwidth TB/s": a.mem_bandwidth / 1e12,
            "memory GB": a.memory / G,
            "ridge FLOP/byte": a.ridge(used),
            "critical batch": a.critical_batch(used),
            "fp8 critical batch": a.critical_batch("fp8") if "fp8" in a.peak_flops else None,
            "link GB/s": a.link_bandwidth / G if a.link_bandwidth else None,
            "link": a.link or None,
            "source": a.source,
        })
    return rows
