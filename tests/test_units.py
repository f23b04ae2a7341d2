"""Byte sizes as people write them, and the GPU presets built from gpus.csv."""

from __future__ import annotations

import pytest

from kvbudget import InvalidArgumentError, format_bytes, get_gpu, list_gpus, parse_bytes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("123B", 123),
        ("1_000 B", 1000),
        ("1048576", 1024**2),  # a unitless string is bytes from 1 MiB = 2^20 up
        ("0.0", 0),
        ("10GiB", 10 * 1024**3),  # 10 x 2^30 = 10737418240
        ("64GB", 64 * 10**9),  # decimal: 64000000000
        ("512MiB", 512 * 1024**2),  # 536870912
        ("1.5GiB", 1610612736),  # 1.5 x 2^30
        ("2 TiB", 2 * 1024**4),
        ("7kb", 7000),
        (4096, 4096),
    ],
)
def test_parse_bytes(text: str | int, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["-1", "-3GiB", "lots", "12 parsecs", True, -5])
def test_parse_bytes_rejects(bad: str | int) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_bytes(bad)


UNITS = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"


def test_a_size_without_a_unit_below_one_mib_is_refused() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_bytes("64", name="host_budget")
    assert str(info.value) == (
        "host_budget 64 has no unit: 64 bytes is surely not meant; write 64GiB or 64GB, "
        f"or 64B for bytes (units: {UNITS})"
    )


@pytest.mark.parametrize("text", ["1", " 64 ", "1_000", "1048575", "0.5"])
def test_small_unitless_strings_are_refused(text: str) -> None:
    # 1048575 = 2^20 - 1, the largest refused; 0.5 would round down to 0 bytes
    with pytest.raises(InvalidArgumentError) as info:
        parse_bytes(text, name="kv_budget")
    assert str(info.value).startswith(f"kv_budget {text.strip()} has no unit: ")


def test_ints_and_explicit_bytes_stay_bytes() -> None:
    # the Python API passes ints: 64 is 64 bytes; "64B" says bytes on purpose
    assert parse_bytes(64) == 64
    assert parse_bytes("64B") == 64
    assert parse_bytes("64 b") == 64


@pytest.mark.parametrize(
    ("text", "unit"), [("5XB", "XB"), ("10 PiB", "PiB"), ("1EiB", "EiB"), ("3 gigs", "gigs")]
)
def test_an_unknown_unit_names_the_accepted_ones(text: str, unit: str) -> None:
    from kvbudget.units import rounding_note

    expected = f"host_budget: unknown unit {unit!r} in {text!r}; the units are {UNITS}"
    with pytest.raises(InvalidArgumentError) as info:
        parse_bytes(text, name="host_budget")
    assert str(info.value) == expected
    # asked for the rounding note first (as the planner does), the same typed error,
    # not a KeyError
    with pytest.raises(InvalidArgumentError) as info:
        rounding_note(text, name="host_budget")
    assert str(info.value) == expected


def test_gpu_presets_named_by_the_issue_exist() -> None:
    for name in (
        "H100-80GB",
        "H200",
        "B200",
        "A100-40GB",
        "A100-80GB",
        "L40S",
        "RTX-4090",
        "MI300X",
    ):
        assert name.lower() in list_gpus()


def test_gpu_bytes_follow_the_gpus_md_rule() -> None:
    # measured CUDA-visible total (GPUS.md table, driver 550.90.12)
    assert get_gpu("H200").memory_bytes == 150021734400
    # no measured total: (183359 MiB - 1024 MiB) x 2^20 = 182335 x 1048576 = 191192104960
    assert get_gpu("B200").memory_bytes == 191192104960
    # AMD: the driver total with no reservation: 196592 x 1048576 = 206141652992
    assert get_gpu("mi300x").memory_bytes == 206141652992
    # the full csv name works too
    assert get_gpu("NVIDIA H200 SXM 141GB").memory_bytes == 150021734400


def test_unknown_gpu() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown GPU"):
        get_gpu("H900")


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("10000000000000000000000000001", "more than 16 EiB"),  # exact, not rounded
        ("1" * 400, "too long to be a byte size"),
        (10**400, "more than 16 EiB"),
        (10**5000, "more than 16 EiB"),  # past Python's int-to-string limit
        (1.5e9, "an int, or a string"),  # floats print differently by size: refused
        (1e16, "an int, or a string"),
    ],
    ids=["29 digits", "400 digits", "10**400", "10**5000", "1.5e9", "1e16"],
)
def test_sizes_are_exact_and_bounded(value: object, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        parse_bytes(value)  # type: ignore[arg-type]


def test_huge_sizes_format_without_overflow() -> None:
    assert format_bytes(2**64) == "16,777,216 TiB"  # 2^64 / 2^40
    assert parse_bytes("16TiB") == 16 * 1024**4


def test_sizes_copied_from_logs_round_down_and_say_so() -> None:
    from kvbudget.units import rounding_note

    # 3.81 x 2^30 = 4090956349.44 -> 4090956349
    assert parse_bytes("3.81GiB") == 4090956349
    assert rounding_note("3.81GiB", name="kv_budget") == (
        "kv_budget '3.81GiB' is 4,090,956,349.44 bytes; rounded down to 4,090,956,349 (whole bytes)"
    )
    # 23.58 x 2^30 = 25318832209.92 -> 25318832209 (a space before the unit, as vLLM logs)
    assert parse_bytes("23.58 GiB") == 25318832209
    # exact values need no note: 0.5 x 10^12, 1.5 x 2^30
    assert parse_bytes("0.5TB") == 500000000000 and rounding_note("0.5TB", name="x") is None
    assert rounding_note("1.5GiB", name="x") is None and rounding_note(7, name="x") is None
    # 28 decimals: exact arithmetic, 2^30 + 2^30 x 10^-28 rounds down to 2^30
    assert parse_bytes("1.0000000000000000000000000001GiB") == 1073741824


def test_consumer_and_inference_gpus_are_presets() -> None:
    # deviceQuery CUDA total (GPUS.md, GLS capture, driver 560.35.03)
    assert get_gpu("rtx-3090").memory_bytes == 25327697920
    # no measured CUDA total: (46068 MiB - 1024 MiB) x 2^20 = 45044 x 1048576 (ECC on)
    assert get_gpu("l20").memory_bytes == 47232057344
    # (12288 - 1024) x 1048576 = 11811160064
    assert get_gpu("rtx-3060").memory_bytes == 11811160064
    for name in ("a10", "a40", "rtx-a6000", "h20", "gh200", "gh200-144gb", "a100-pcie-40gb"):
        assert name in list_gpus()


@pytest.mark.parametrize(
    ("name", "row"),
    [
        ("RTX 3090", "NVIDIA GeForce RTX 3090"),
        ("rtx3090", "NVIDIA GeForce RTX 3090"),
        ("GeForce RTX 3090", "NVIDIA GeForce RTX 3090"),
        ("H100 SXM", "NVIDIA H100 SXM 80GB"),
        ("nvidia-h100-sxm", "NVIDIA H100 SXM 80GB"),
        ("NVIDIA H200", "NVIDIA H200 SXM 141GB"),
        ("h200_sxm", "NVIDIA H200 SXM 141GB"),
        ("  H200  ", "NVIDIA H200 SXM 141GB"),
        ("nvidia h100 pcie", "NVIDIA H100 PCIe 80GB"),
        ("A100 40GB", "NVIDIA A100 SXM 40GB"),
        ("RTX 5060 Ti 16GB", "NVIDIA GeForce RTX 5060 Ti 16GB"),
        ("NVIDIA GeForce RTX 5060 Ti 16GB", "NVIDIA GeForce RTX 5060 Ti 16GB"),
        ("RTX PRO 6000 Max-Q", "NVIDIA RTX PRO 6000 Blackwell"),
        (
            "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
            "NVIDIA RTX PRO 6000 Blackwell",
        ),
        ("GB10", "NVIDIA GB10"),
        ("NVIDIA GB10", "NVIDIA GB10"),
        ("DGX Spark", "NVIDIA GB10"),
    ],
)
def test_gpus_resolve_as_users_name_them(name: str, row: str) -> None:
    assert get_gpu(name).name == row


def test_every_spelling_names_one_row() -> None:
    from kvbudget.gpus import _ALIASES, _SHORT_NAMES, _normal, _rows

    rows: dict[str, set[str]] = {}
    for spelling, full in [*_SHORT_NAMES.items(), *_ALIASES.items(), *((r, r) for r in _rows())]:
        rows.setdefault(_normal(spelling), set()).add(full)
    assert {form: names for form, names in rows.items() if len(names) > 1} == {}


def test_new_presets_follow_the_gpus_md_rule() -> None:
    # no CUDA total: (16311 MiB - 1024 MiB) x 2^20 = 15287 x 1048576 = 16029581312
    assert get_gpu("rtx-5060-ti-16gb").memory_bytes == 16029581312
    # the same row as the other editions: (97887 - 1024) x 1048576 = 101568217088
    assert get_gpu("rtx-pro-6000-max-q").memory_bytes == 101568217088
    gb10 = get_gpu("gb10")
    # unified: CUDA total = MemTotal 127600748 kB x 1024 = 130663165952 B, less the
    # 21 GiB the OS keeps: 130663165952 - 21 x 1073741824 = 108114587648 (100.69 GiB)
    assert gb10.memory_bytes == 108114587648
    assert gb10.driver_total_mib is None  # nvidia-smi: "Not Supported"
    assert gb10.memory_source.startswith("unified memory: CUDA total 130663165952 B")
    assert gb10.hbm_bandwidth_tb_s == 0.273 and gb10.host_link_gb_s is None
    assert get_gpu("rtx-5060-ti-16gb").host_link_gb_s == 32  # PCIe Gen5 x8


def test_a_name_that_begins_several_presets_names_them() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        get_gpu("A100")
    # 40 or 80 GB, SXM or PCIe: no default for a size that differs twofold (by row name)
    assert str(info.value) == (
        "GPU 'A100' matches 4 presets: a100-pcie-40gb (NVIDIA A100 PCIe 40GB), "
        "a100-pcie-80gb (NVIDIA A100 PCIe 80GB), a100-40gb (NVIDIA A100 SXM 40GB), "
        "a100-80gb (NVIDIA A100 SXM 80GB); name one of them (kvbudget gpus lists all), or "
        "give --gpu-memory BYTES"
    )


@pytest.mark.parametrize(
    ("name", "close"),
    [
        ("H900", "h200, h100, gh200"),
        # never completed to the Ti (an 8 GB RTX 5060 Ti has the same nvidia-smi name too)
        ("RTX 5060 Ti", "rtx-5060-ti-16gb, rtx-5090, rtx-3060, rtx-4090"),
        ("rtx 6000", "rtx-6000-ada, rtx-a6000, rtx-pro-6000, rtx-5090"),
    ],
)
def test_an_unknown_gpu_lists_close_matches(name: str, close: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        get_gpu(name)
    assert str(info.value) == (
        f"unknown GPU {name!r}; close matches: {close} (kvbudget gpus lists all; or give "
        "--gpu-memory BYTES / --kv-budget BYTES)"
    )
