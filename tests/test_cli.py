"""CLI tests: JSON per spec mode, exit codes, one-line errors, golden snapshots.

Golden files live in tests/golden/; regenerate them after an intended change with
``KVBUDGET_UPDATE_GOLDEN=1 python -m pytest tests/test_cli.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli import app

GOLDEN = Path(__file__).parent / "golden"
RUNNER = CliRunner()
FIXED = ["--kv-budget", "40GiB", "--max-seq-len", "8192"]


def run(*args: str) -> Any:
    return RUNNER.invoke(app, list(args), env={"COLUMNS": "100", "NO_COLOR": "1"})


def plan_json(*args: str) -> dict[str, Any]:
    result = run("plan", "--json", *args)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("KVBUDGET_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; see the module docstring to update"


@pytest.mark.parametrize(
    ("args", "roles"),
    [
        ((), ["target", "draft"]),
        (("--spec", "ngram"), ["target"]),
        (("--spec", "none"), ["target"]),
        (("--target", "deepseek-ai/DeepSeek-V3", "--spec", "mtp", "--tp", "8"), ["target"]),
        (
            (
                "--target",
                "deepseek-ai/DeepSeek-V3",
                "--spec",
                "mtp",
                "--tp",
                "8",
                "--separate-draft-cache",
            ),
            ["target", "draft"],
        ),
        (
            ("--spec", "draft-target", "--draft", "meta-llama/Llama-3.2-1B-Instruct"),
            ["target", "draft"],
        ),
        (("--tp", "2", "--pp", "2"), ["target", "draft"]),
    ],
)
def test_json_for_every_spec_mode(args: tuple[str, ...], roles: list[str]) -> None:
    data = plan_json(*FIXED, "--host-budget", "64GiB", *args)
    assert data["schema"] == 3
    assert [m["role"] for m in data["managers"]] == roles
    # the GPU budget is split exactly: 40 GiB = 42949672960 bytes
    assert sum(m["gpu_bytes"] for m in data["managers"]) == 42949672960
    # the host budget (64 GiB = 68719476736 bytes) too
    assert sum(m["host_bytes"] for m in data["managers"]) == 68719476736
    # lockstep: every role's GPU pool of growing blocks holds the same tokens, and the
    # capacity is that count
    kv = [p for p in data["engine"]["pools"] if p["kind"] == "kv" and p["tier"] == "gpu"]
    assert [p["role"] for p in kv] == roles
    assert {p["tokens"] for p in kv} == {data["capacity"]["tokens"]}


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp8", "nvfp4"])
def test_kv_dtype_scales_the_slope(dtype: str) -> None:
    data = plan_json(*FIXED, "--kv-dtype", dtype, "--spec", "none")
    # Llama-3.1-8B: 32 layers x 2 x 8 x 128 = 65536 values per token; fp32 4 B, bf16 2 B,
    # fp8 1 B, nvfp4 per 1024-value K or V: 512 + 64 = 576 B -> 32 x 2 x 576 = 36864
    expected = {"fp32": 262144, "bf16": 131072, "fp8": 65536, "nvfp4": 36864}[dtype]
    assert data["managers"][0]["slope_bytes_per_token"] == expected


@pytest.mark.parametrize(
    "model",
    [
        "openai/gpt-oss-120b",
        "google/gemma-3-27b-it",
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "nvidia/Nemotron-H-8B-Base-8K",
    ],
)
def test_fixed_cost_models(model: str) -> None:
    spec = ["--spec", "eagle3"] if model == "openai/gpt-oss-120b" else ["--spec", "ngram"]
    data = plan_json(
        "--target",
        model,
        *spec,
        "--kv-budget",
        "60GiB",
        "--max-batch-size",
        "8",
        "--max-seq-len",
        "8192",
    )
    managers = data["managers"]
    target = managers[0]
    assert target["fixed_bytes"] > 0
    # window pools + 8 running state slots + the cached states (8 by default: one per
    # sequence of --max-batch-size, for prefix reuse; 0 for a model without state)
    cached = target["cached_states"] * target["state_bytes_per_checkpoint"]
    assert target["cached_states"] == (8 if target["state_bytes_per_seq"] else 0)
    assert target["fixed_bytes"] == (
        target["window_bytes"] + 8 * target["state_bytes_per_seq"] + cached
    )
    # the fixed costs come off first; the common blocks are what the tightest manager's
    # remainder holds in whole blocks, and no manager is handed less than its blocks need
    room = [(m["gpu_bytes"] - m["fixed_bytes"]) // m["block_bytes"] for m in managers]
    assert data["capacity"]["tokens"] == min(room) * 32
    kv = [p for p in data["engine"]["pools"] if p["kind"] == "kv" and p["tier"] == "gpu"]
    assert len(kv) == len(managers)
    for m, pool in zip(managers, kv, strict=True):
        assert pool["role"] == m["role"]
        assert pool["blocks"] == min(room)
        # the pool is the role's share less its fixed pools; no block is left out
        assert pool["bytes"] == m["gpu_bytes"] - m["fixed_bytes"]
        assert pool["bytes"] - pool["blocks"] * m["block_bytes"] == pool["padding_bytes"] >= 0


def test_infeasible_plan_exits_nonzero_with_one_line() -> None:
    result = run(
        "plan", "--target", "google/gemma-3-27b-it", "--spec", "ngram", "--kv-budget", "20GiB"
    )
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "fixed cost" in lines[0] and "Traceback" not in result.output


def test_an_engine_refusal_keeps_the_plans_other_warnings() -> None:
    # Llama-3.1-70B at 40 GiB and max_seq_len 131,072: exactly one sequence, which vLLM
    # refuses (its null block; tests/test_engines.py). The plan also warns that 40 GiB +
    # 131.42 GiB of weights exceed the H200: the user fixing the refusal needs that too.
    result = run(
        "plan", "--engine", "vllm", "--target", "meta-llama/Llama-3.1-70B-Instruct",
        "--spec", "none", "--kv-budget", "40GiB", "--max-seq-len", "131072",
    )  # fmt: skip
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: vLLM 0.33.0 would refuse to start")
    assert [line.split(" ")[0] for line in lines[:-1]] == ["warning:"] * (len(lines) - 1)
    assert any("is more than the 139.72 GiB of NVIDIA H200" in line for line in lines[:-1])


@pytest.mark.parametrize(
    "args",
    [
        ("--tp", "0"),
        ("--kv-budget", "-3GiB"),
        ("--kv-budget", "12 parsecs"),
        ("--target", "no/such-model"),
        ("--gpu", "H900"),
        ("--kv-dtype", "fp6"),
        ("--spec", "draft-target", "--draft", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"),
        ("--emit", "tgi"),
        ("--target", "/no/such/config.json"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(args: tuple[str, ...]) -> None:
    result = run("plan", "--kv-budget", "40GiB", *args)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


SIZE_UNITS = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"


@pytest.mark.parametrize("command", ["plan", "simulate", "run"])
@pytest.mark.parametrize(
    ("size", "message"),
    [
        ("5XB", f"--host-budget: unknown unit 'XB' in '5XB'; the units are {SIZE_UNITS}"),
        ("10 PiB", f"--host-budget: unknown unit 'PiB' in '10 PiB'; the units are {SIZE_UNITS}"),
        (
            "64",
            "--host-budget 64 has no unit: 64 bytes is surely not meant; write 64GiB or 64GB, "
            f"or 64B for bytes (units: {SIZE_UNITS})",
        ),
    ],
    ids=["unknown unit", "PiB", "no unit"],
)
def test_a_bad_size_is_one_error_line_in_every_command(
    command: str, size: str, message: str
) -> None:
    result = run(command, "--host-budget", size)
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {message}\n"
    assert result.stdout == ""


def test_a_draft_of_another_family_plans_with_a_warning() -> None:
    data = plan_json(
        "--kv-budget", "40GiB", "--spec", "draft-target", "--target", "Qwen/Qwen3-8B",
        "--draft", "meta-llama/Llama-3.2-1B-Instruct", "--max-seq-len", "8192",
    )  # fmt: skip
    assert any("vocab_size 128,256" in w and "151,936" in w for w in data["warnings"])


def test_malformed_config_file_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", ')
    result = run("plan", "--kv-budget", "40GiB", "--target", str(tmp_path), "--spec", "none")
    assert result.exit_code == 2
    assert str(bad) in result.stderr and "not valid JSON" in result.stderr


def test_golden_table() -> None:
    result = run("plan", *FIXED, "--host-budget", "64GiB")
    assert result.exit_code == 0, result.output
    check_golden("plan_eagle3_40GiB.txt", result.stdout)


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "sglang"])
def test_golden_engine_settings(engine: str) -> None:
    result = run(
        "plan", *FIXED, "--tp", "2", "--host-budget", "64GiB", "--kv-dtype", "fp8", "--emit", engine
    )
    assert result.exit_code == 0, result.output
    check_golden(f"emit_{engine}.txt", result.stdout)


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "sglang"])
def test_golden_engine_settings_sliding_window_eagle3(engine: str) -> None:
    # gpt-oss-120b + its EAGLE3 head: 18 sliding (128) + 18 full layers, the engines' own
    # pools (the arithmetic is in tests/test_engines.py)
    result = run(
        "plan",
        "--target",
        "openai/gpt-oss-120b",
        "--kv-budget",
        "40GiB",
        "--host-budget",
        "64GiB",
        "--max-seq-len",
        "32768",
        "--max-batch-size",
        "64",
        "--emit",
        engine,
    )
    assert result.exit_code == 0, result.output
    check_golden(f"emit_{engine}_gpt_oss_eagle3.txt", result.stdout)


def test_vllm_offloading_size_is_total_gib_across_tp() -> None:
    result = run("plan", *FIXED, "--tp", "4", "--host-budget", "16GiB", "--emit", "vllm")
    # 16 GiB per rank x 4 ranks = 64 GiB total
    assert "--kv-offloading-size 64 " in result.stdout + " "


def test_sglang_hicache_size_is_decimal_gb_per_rank() -> None:
    result = run("plan", *FIXED, "--tp", "4", "--host-budget", "16GiB", "--emit", "sglang")
    # SGLang's --hicache-size sizes the target's host pool only (the draft's comes on top):
    # target share = 17179869184 - floor(17179869184 / 33) = 16659267087 B -> 16 GB (floor)
    assert "--hicache-size 16 " in result.stdout + " "


def test_default_command_plans_the_embedded_default() -> None:
    data = plan_json()
    assert data["target"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert data["draft"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert data["budget"]["gpu_name"] == "NVIDIA H200 SXM 141GB"
    assert data["budget"]["host_bytes"] == 0  # no engine offloads unless asked
    b = data["budget"]
    # derived: floor((GPU memory - weights - reserve) x 0.9)
    assert (
        b["gpu_bytes"]
        == (b["gpu_memory_bytes"] - b["weights_bytes"] - b["reserve_bytes"]) * 9 // 10
    )
    table = run("plan")
    assert table.exit_code == 0 and "Capacity" in table.stdout
    # the README's main command passes the host budget, so the split shows
    data = plan_json("--host-budget", "64GiB")
    assert data["budget"]["host_bytes"] == 64 * 1024**3


def test_narrow_tables_wrap_model_ids_instead_of_cutting_them() -> None:
    from kvbudget.model import list_presets

    narrow = CliRunner().invoke(app, ["models"], env={"COLUMNS": "60"}, terminal_width=60)
    assert narrow.exit_code == 0
    assert "…" not in narrow.stdout
    # the first column, its wrapped pieces rejoined in order, holds every id whole
    first = "".join(
        line.split("│")[1].strip() for line in narrow.stdout.splitlines() if "│" in line
    )
    for preset in list_presets():
        assert preset in first, preset


def test_models_and_gpus_list() -> None:
    models = run("models")
    assert models.exit_code == 0 and "deepseek-ai/DeepSeek-V3" in models.stdout
    gpus = run("gpus")
    assert gpus.exit_code == 0 and "h200" in gpus.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--memory-fraction", "abc"), "--memory-fraction"),
        (("--max-seq-len", "long"), "--max-seq-len"),
        (("--tpp", "2"), "No such option: --tpp"),
        (("--tp",), "--tp"),
    ],
)
def test_command_line_mistakes_are_one_error_line(args: tuple[str, ...], needle: str) -> None:
    result = run("plan", "--kv-budget", "40GiB", *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert result.stdout == ""


def test_unknown_command_is_one_error_line() -> None:
    result = run("plann")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: No such command 'plann'")
    assert len(result.stderr.strip().splitlines()) == 1


def test_help_names_units_and_mirrors_plan_keywords() -> None:
    import inspect

    from kvbudget.planner import plan

    result = run("plan", "--help")
    assert result.exit_code == 0
    flags = {"enable_prefix_caching": "--prefix-caching"}  # --prefix-caching/--no-...
    for name in inspect.signature(plan).parameters:
        assert flags.get(name, f"--{name.replace('_', '-')}") in result.stdout, name
    assert "BYTES" in result.stdout and "--no-separate-draft-cache" not in result.stdout


def test_table_shows_concurrency_against_the_batch() -> None:
    result = run("plan", *FIXED, "--spec", "none", "--max-batch-size", "16", "--host-budget", "0")
    assert result.exit_code == 0, result.output
    # 10240 blocks // 256 per 8192-token sequence = 40 fit; 16 run at once
    assert "16 of 16" in result.stdout
    assert "hold 40 sequences" in result.stdout


def test_plan_is_the_default_command() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "kvbudget", "--kv-budget", "40GiB", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # 40 GiB = 42949672960 bytes, the given budget
    assert json.loads(done.stdout)["budget"]["gpu_bytes"] == 42949672960


def test_models_and_gpus_as_json() -> None:
    models = json.loads(run("models", "--json").stdout)
    by_name = {m["preset"]: m for m in models}
    llama = by_name["meta-llama/Llama-3.1-8B-Instruct"]
    assert (llama["default_spec"], llama["default_draft"]) == (
        "eagle3",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    )
    assert by_name["deepseek-ai/DeepSeek-V3"]["default_spec"] == "mtp"
    assert by_name["yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"]["eagle3_head"] is True
    gpus = json.loads(run("gpus", "--json").stdout)
    h200 = next(g for g in gpus if g["preset"].lower() == "h200")
    assert isinstance(h200["memory_bytes"], int) and h200["memory_bytes"] > 140 * 10**9


def test_short_help_and_an_empty_target() -> None:
    assert run("plan", "-h").exit_code == 0
    empty = run("plan", "--target", "")
    assert empty.exit_code == 2 and empty.stderr.startswith("error: the model name is empty")


def test_a_preset_id_wins_over_a_same_named_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "meta-llama" / "Llama-3.1-8B-Instruct").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    base = ("--kv-budget", "40GiB", "--max-seq-len", "8192", "--json")
    preset = run("plan", "--target", "meta-llama/Llama-3.1-8B-Instruct", *base)
    assert preset.exit_code == 0 and json.loads(preset.stdout)["target"].startswith("meta")
    folder = run("plan", "--target", "./meta-llama/Llama-3.1-8B-Instruct", *base)
    assert folder.exit_code == 2 and "holds no config.json" in folder.stderr


def test_json_with_emit_carries_the_engine_settings() -> None:
    result = run(
        "plan", "--kv-budget", "40GiB", "--max-seq-len", "8192", "--json", "--emit", "vllm"
    )
    assert result.exit_code == 0, result.output
    engine = json.loads(result.stdout)["engine"]
    assert engine["name"] == "vllm"
    assert engine["settings"]["--kv-cache-memory-bytes"] == 40 * 1024**3


def test_library_messages_name_the_flags() -> None:
    for args, flag in (
        (("--dp", "0"), "error: --dp must be >= 1"),
        (("--cached-states", "-1"), "error: --cached-states must be >= 0"),
        (("--memory-fraction", "x"), "error: --memory-fraction must be a number"),
    ):
        result = run("plan", *args)
        assert result.exit_code == 2 and result.stderr.startswith(flag), result.stderr
