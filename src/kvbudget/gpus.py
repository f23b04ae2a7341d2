"""GPU presets: how many bytes a device offers a process, from sourced facts.

Facts come from ``data/gpus.csv`` (see ``data/GPUS.md`` for every source). The bytes a
preset offers follow GPUS.md's offline rule:

* the CUDA-visible total where one was measured (``cudaMemGetInfo`` / ``deviceQuery``
  totals in GPUS.md's table), else
* ``(driver_total_mib - 1024) x 2**20`` for NVIDIA parts (a 1 GiB allowance for the
  driver's reservation, a judgement: 354-763 MiB were observed), and
  ``driver_total_mib x 2**20`` for AMD parts (HIP saw the full size on MI300X).

A unified-memory part (the GB10 of DGX Spark) has no memory of its own: CUDA's total is
the operating system's whole ``MemTotal``, of which the OS and CPU processes keep a
share. Its preset offers that total less an allowance for what the OS keeps (a
judgement from the free memory seen at start, GPUS.md), and says so in ``memory_source``.

At run time, prefer the device's own ``torch.cuda.mem_get_info()``; pass it as
``--gpu-memory``.

Names are matched as people write them (:func:`get_gpu`): case, spaces, ``-``/``_`` and
a leading ``NVIDIA`` (or ``GeForce``) do not matter, so ``RTX 3090``, ``rtx3090`` and
``NVIDIA GeForce RTX 3090`` are the same preset. A name is never completed to a longer
one (``RTX 5060`` is not the RTX 5060 Ti): a name that only begins a preset's name is
refused, with the presets it begins listed. ``A100`` is such a name (40 or 80 GB, SXM or
PCIe); ``H100``, ``H200`` and ``GH200`` are short names of the part with the memory of
its siblings or less (H100 SXM 80GB, not the 94 GB NVL; GH200 96GB, not 144GB).
"""

from __future__ import annotations

import csv
import difflib
import io
import re
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
    # unified memory: CUDA's total is the OS's MemTotal, 127600748 kB x 1024 (GPUS.md,
    # "Added rows (third collection)"); vLLM and torch print it as 121.69 GiB
    "NVIDIA GB10": 130663165952,
}

# Unified-memory parts: MiB of the CUDA total that the OS and CPU processes keep, taken
# off the preset (a judgement: 101.3-110.4 GiB of 121.69 GiB were free at start in the
# sources, so 21 GiB is kept off; GPUS.md).
_UNIFIED_OS_ALLOWANCE_MIB: dict[str, int] = {"NVIDIA GB10": 21 * 1024}

# Short preset names (case-insensitive) -> gpus.csv row name.
_SHORT_NAMES: dict[str, str] = {
    "h100": "NVIDIA H100 SXM 80GB",
    "h100-80gb": "NVIDIA H100 SXM 80GB",
    "h100-sxm": "NVIDIA H100 SXM 80GB",
    "h100-pcie": "NVIDIA H100 PCIe 80GB",
    "h100-nvl": "NVIDIA H100 NVL 94GB",
    "h200": "NVIDIA H200 SXM 141GB",
    "h200-sxm": "NVIDIA H200 SXM 141GB",
    "h200-141gb": "NVIDIA H200 SXM 141GB",
    "h200-nvl": "NVIDIA H200 NVL",
    "b200": "NVIDIA B200",
    "gb200": "NVIDIA GB200 (per GPU)",
    "b300": "NVIDIA B300",
    "gb300": "NVIDIA GB300 (per GPU)",
    "a100-40gb": "NVIDIA A100 SXM 40GB",
    "a100-80gb": "NVIDIA A100 SXM 80GB",
    "a100-pcie-80gb": "NVIDIA A100 PCIe 80GB",
    "l40s": "NVIDIA L40S",
    "l4": "NVIDIA L4",
    "a10g": "NVIDIA A10G",
    "rtx-4090": "NVIDIA GeForce RTX 4090",
    "rtx-5090": "NVIDIA GeForce RTX 5090",
    "rtx-6000-ada": "NVIDIA RTX 6000 Ada Generation",
    "rtx-pro-6000": "NVIDIA RTX PRO 6000 Blackwell",
    # the 300 W edition: the same memory as the others (the row's aliases; GPUS.md)
    "rtx-pro-6000-max-q": "NVIDIA RTX PRO 6000 Blackwell",
    # only the 16 GB part is a preset: "rtx-5060-ti" alone could be the 8 GB one
    "rtx-5060-ti-16gb": "NVIDIA GeForce RTX 5060 Ti 16GB",
    "gb10": "NVIDIA GB10",
    "dgx-spark": "NVIDIA GB10",
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

# More names get_gpu accepts, not listed by list_gpus: nvidia-smi names that differ from
# the gpus.csv name (the row's aliases column).
_ALIASES: dict[str, str] = {
    "rtx-pro-6000-blackwell-workstation-edition": "NVIDIA RTX PRO 6000 Blackwell",
    "rtx-pro-6000-blackwell-server-edition": "NVIDIA RTX PRO 6000 Blackwell",
    "rtx-pro-6000-blackwell-max-q": "NVIDIA RTX PRO 6000 Blackwell",
    "rtx-pro-6000-blackwell-max-q-workstation-edition": "NVIDIA RTX PRO 6000 Blackwell",
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
    if name in _UNIFIED_OS_ALLOWANCE_MIB:
        total = _MEASURED_CUDA_TOTAL_BYTES[name]
        kept = _UNIFIED_OS_ALLOWANCE_MIB[name]
        return total - kept * MIB, (
            f"unified memory: CUDA total {total} B (the OS's MemTotal) - {kept} MiB the OS "
            "and CPU processes keep (GPUS.md); vLLM sizes from the total: --gpu-memory "
            f"{total}"
        )
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
    """The preset for ``name``: a short name (``H200``, ``a100-80gb``) or a gpus.csv name,
    written as people write them (module docstring: ``RTX 3090``, ``nvidia-h100-sxm``).

    Raises InvalidArgumentError for an unknown GPU (naming close matches), a name that
    only begins several presets' names (naming them), or a GPU without a known memory
    total.
    """
    if not isinstance(name, str):
        raise InvalidArgumentError(f"gpu must be a GPU name such as 'H200', got {name!r}")
    rows = _rows()
    names = _names(rows)
    key = _normal(name)
    full = names.get(key)
    if full is None:
        raise InvalidArgumentError(_unknown(name, key, names))
    row = rows[full]
    found = _spec_bytes(full, row)
    if found is None:
        raise InvalidArgumentError(
            f"GPU {full!r} has no known memory total in gpus.csv; give --gpu-memory BYTES"
        )
    short = _short_of(full) or key
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


def _normal(name: str) -> str:
    """``name`` as matched: lower case, a leading ``nvidia`` and ``geforce`` dropped, only
    letters and digits kept (``NVIDIA GeForce RTX-3090`` -> ``rtx3090``)."""
    key = re.sub(r"[^0-9a-z]", "", name.lower())
    for prefix in ("nvidia", "geforce"):
        if key.startswith(prefix) and len(key) > len(prefix):
            key = key[len(prefix) :]
    return key


def _names(rows: dict[str, dict[str, str]]) -> dict[str, str]:
    """Matched form (:func:`_normal`) of every short name and gpus.csv name -> the row's
    name. A matched form never stands for two rows (tests check it)."""
    out = {_normal(row): row for row in rows}
    out.update({_normal(alias): full for alias, full in _ALIASES.items()})
    out.update({_normal(short): full for short, full in _SHORT_NAMES.items()})
    return out


def _short_of(full: str) -> str | None:
    """The first short name of the gpus.csv row ``full``, None when it has none."""
    return next((k for k, v in _SHORT_NAMES.items() if v == full), None)


def _unknown(name: str, key: str, names: dict[str, str]) -> str:
    """The message for a name no preset has: the presets whose names it begins (a name
    too short to tell them apart), else the closest names, and what to do instead."""
    begun = sorted({full for form, full in names.items() if key and form.startswith(key)})
    if len(begun) > 1:
        listed = ", ".join(f"{_short_of(f) or f} ({f})" for f in begun)
        return (
            f"GPU {name!r} matches {len(begun)} presets: {listed}; name one of them "
            "(kvbudget gpus lists all), or give --gpu-memory BYTES"
        )
    close = begun + [
        names[form] for form in difflib.get_close_matches(key, list(names), n=6, cutoff=0.6)
    ]
    shown = list(dict.fromkeys(_short_of(f) or f for f in close))[:4]
    hint = f"close matches: {', '.join(shown)}" if shown else "no preset is close"
    return (
        f"unknown GPU {name!r}; {hint} (kvbudget gpus lists all; or give --gpu-memory "
        "BYTES / --kv-budget BYTES)"
    )
