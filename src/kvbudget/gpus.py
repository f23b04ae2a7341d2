"""GPU presets: how many bytes a device offers a process, from sourced facts.

Facts come from ``data/gpus.csv`` (see ``data/GPUS.md`` for every source). The bytes a
preset offers follow GPUS.md's offline rule:

* the CUDA-visible total where one was measured (``cudaMemGetInfo`` / ``deviceQuery``
  totals in GPUS.md's table), else
* ``(driver_total_mib - 1024) x 2**20`` for NVIDIA parts (a 1 GiB allowance for the
  driver's reservation, a judgement: 354-763 MiB were observed), and
  ``driver_total_mib x 2**20`` for AMD parts (HIP saw the full size on MI300X).

At run time, prefer the device's own ``torch.cuda.mem_get_info()``; pass it as
``--gpu-memory``.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from kvbudget.errors import InvalidArgumentError

MIB = 1024**2
_NVIDIA_RESERVE_MIB = 1024

# CUDA-visible totals measured on real devices (GPUS.md, "From driver_total_mib to the
# bytes a planner should start from", captures from thamada/gls and PC2-A100).
_MEASURED_CUDA_TOTAL_BYTES: dict[str, int] = {
    "NVIDIA H100 SXM 80GB": 85045477376,
    "NVIDIA H100 NVL 94GB": 99861594112,
    "NVIDIA H200 SXM 141GB": 150021734400,
    "NVIDIA A100 SXM 80GB": 85100068864,
    "NVIDIA A100 SXM 40GB": 42405855232,
    "NVIDIA L40S": 47803596800,
    "NVIDIA L4": 23570219008,
    "NVIDIA GeForce RTX 4090": 25386352640,
    "NVIDIA GeForce RTX 5090": 33680457728,
    "NVIDIA RTX 6000 Ada Generation": 51002867712,
    # deviceQuery totals of the rows added from GPUS.md's "Added rows" section
    "NVIDIA GeForce RTX 3090": 25327697920,
    "NVIDIA A10": 23595909120,
    "NVIDIA A40": 47608692736,  # ECC on
    "NVIDIA RTX A6000": 47834660864,  # ECC on
    "NVIDIA GH200 96GB HBM3": 101468602368,
}

# Short preset names (case-insensitive) -> gpus.csv row name.
_SHORT_NAMES: dict[str, str] = {
    "h100": "NVIDIA H100 SXM 80GB",
    "h100-80gb": "NVIDIA H100 SXM 80GB",
    "h100-sxm": "NVIDIA H100 SXM 80GB",
    "h100-pcie": "NVIDIA H100 PCIe 80GB",
    "h100-nvl": "NVIDIA H100 NVL 94GB",
    "h200": "NVIDIA H200 SXM 141GB",
    "h200-141gb": "NVIDIA H200 SXM 141GB",
    "h200-nvl": "NVIDIA H200 NVL",
    "b200": "NVIDIA B200",
    "gb200": "NVIDIA GB200 (per GPU)",
    "b300": "NVIDIA B300",
    "gb300": "NVIDIA GB300 (per GPU)",
    "a100-40gb": "NVIDIA A100 SXM 40GB",
    "a100-80gb": "NVIDIA A100 SXM 80GB",
    "a100": "NVIDIA A100 SXM 80GB",
    "a100-pcie-80gb": "NVIDIA A100 PCIe 80GB",
    "l40s": "NVIDIA L40S",
    "l4": "NVIDIA L4",
    "a10g": "NVIDIA A10G",
    "rtx-4090": "NVIDIA GeForce RTX 4090",
    "rtx-5090": "NVIDIA GeForce RTX 5090",
    "rtx-6000-ada": "NVIDIA RTX 6000 Ada Generation",
    "rtx-pro-6000": "NVIDIA RTX PRO 6000 Blackwell",
    "rtx-3060": "NVIDIA GeForce RTX 3060 12GB",
    "rtx-3090": "NVIDIA GeForce RTX 3090",
    "a10": "NVIDIA A10",
    "a40": "NVIDIA A40",
    "rtx-a6000": "NVIDIA RTX A6000",
    "l20": "NVIDIA L20",
    "h20": "NVIDIA H20 96GB",
    "gh200": "NVIDIA GH200 96GB HBM3",
    "gh200-144gb": "NVIDIA GH200 144GB HBM3e",
    "a100-pcie-40gb": "NVIDIA A100 PCIe 40GB",
    "mi300x": "AMD Instinct MI300X",
    "mi325x": "AMD Instinct MI325X",
    "mi355x": "AMD Instinct MI355X",
}


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One GPU model: its name, vendor size and the bytes a process can plan with."""

    name: str
    short_name: str
    vendor_memory_gb: int
    driver_total_mib: int | None
    memory_bytes: int  # what the planner starts from (see module docstring)
    memory_source: str
    host_link_gb_s: int | None
    hbm_bandwidth_tb_s: float | None = None  # the first (vendor) figure of gpus.csv
    bf16_dense_tflops: float | None = None  # data/gpu_flops.csv (GPU_FLOPS.md: sources)


def _first_int(cell: str) -> int | None:
    head = cell.split(";")[0].strip().split(" ")[0]
    return int(head) if head.isdigit() else None


def _first_float(cell: str) -> float | None:
    """The first of ``;``-separated figures as a float, or None when it is not one."""
    head = cell.split(";")[0].strip()
    try:
        return float(head)
    except ValueError:
        return None


def _rows(name: str = "gpus.csv") -> dict[str, dict[str, str]]:
    """The rows of ``data/<name>`` by GPU name."""
    text = (Path(__file__).resolve().parent / "data" / name).read_text(encoding="utf-8")
    return {row["name"]: row for row in csv.DictReader(io.StringIO(text))}


def list_gpus() -> tuple[str, ...]:
    """Short preset names accepted by :func:`get_gpu`, sorted."""
    rows = _rows()
    usable = [k for k, v in _SHORT_NAMES.items() if _spec_bytes(v, rows[v]) is not None]
    return tuple(sorted(usable))


def _spec_bytes(name: str, row: dict[str, str]) -> tuple[int, str] | None:
    if name in _MEASURED_CUDA_TOTAL_BYTES:
        return _MEASURED_CUDA_TOTAL_BYTES[name], "measured CUDA-visible total (GPUS.md)"
    mib = _first_int(row["driver_total_mib"])
    if mib is None:
        return None
    if name.startswith("AMD"):
        return mib * MIB, f"driver total {mib} MiB (AMD: no reservation)"
    return (
        (mib - _NVIDIA_RESERVE_MIB) * MIB,
        f"driver total {mib} MiB - {_NVIDIA_RESERVE_MIB} MiB reservation allowance",
    )


def get_gpu(name: str) -> GpuSpec:
    """The preset for ``name``: a short name (``H200``, ``a100-80gb``) or a gpus.csv name.

    Raises InvalidArgumentError for an unknown GPU or one without a known memory total.
    """
    if not isinstance(name, str):
        raise InvalidArgumentError(f"gpu must be a GPU name such as 'H200', got {name!r}")
    rows = _rows()
    key = name.strip().lower()
    full = _SHORT_NAMES.get(key) or next((n for n in rows if n.lower() == key), None)
    if full is None:
        raise InvalidArgumentError(
            f"unknown GPU {name!r}; known: {', '.join(list_gpus())} "
            "(or give --gpu-memory BYTES / --kv-budget BYTES)"
        )
    row = rows[full]
    found = _spec_bytes(full, row)
    if found is None:
        raise InvalidArgumentError(
            f"GPU {full!r} has no known memory total in gpus.csv; give --gpu-memory BYTES"
        )
    short = next((k for k, v in _SHORT_NAMES.items() if v == full), key)
    return GpuSpec(
        name=full,
        short_name=short,
        vendor_memory_gb=_first_int(row["vendor_memory_gb"]) or 0,
        driver_total_mib=_first_int(row["driver_total_mib"]),
        memory_bytes=found[0],
        memory_source=found[1],
        host_link_gb_s=_first_int(row["host_link_gb_s"]),
        hbm_bandwidth_tb_s=_first_float(row["hbm_bandwidth_tb_s"]),
        bf16_dense_tflops=_first_float(
            _rows("gpu_flops.csv").get(full, {}).get("bf16_dense_tflops", "")
        ),
    )
