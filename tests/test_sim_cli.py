"""``kvbudget simulate`` on the command line: shared plan options, the JSON schema,
reports, one-line errors."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import kvbudget
from kvbudget.cli import _PLAN_OUTPUT_OPTIONS, app, plan_command
from kvbudget.sim.simulation import SIM_SCHEMA_VERSION

RUNNER = CliRunner()
SMALL = ["--kv-budget", "4GiB", "--host-budget", "8GiB", "--max-seq-len", "16384"]


def run(*args: str) -> Any:
    return RUNNER.invoke(app, list(args), env={"COLUMNS": "160", "NO_COLOR": "1"})


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    result = run("simulate", *SMALL, "--limit", "40", "--rate-scale", "20", "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def shape(value: Any) -> Any:
    """Keys and value kinds, recursively (lists by their first item)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


POLICY_SHAPE = {
    "completed": "int",
    "gpu_blocks": "int",
    "gpu_overcommit_bytes": "int",
    "hit_tokens": "int",
    "hit_tokens_by_tier": {"gpu": "int", "host": "int"},
    "host_blocks": "int",
    "host_budget_bytes": "int",
    "host_offloaded_bytes": "int",
    "host_onboarded_bytes": "int",
    "host_traffic_bytes": "int",
    "makespan_s": "float",
    "max_running": "int",
    "max_waiting": "int",
    "node_host_memory_bytes": "NoneType",
    "node_pinned_host_bytes": "int",
    "not_finished": {},
    "notes": [],
    "output_tokens": "int",
    "output_tokens_per_s": "float",
    "pinned_host_bytes": "int",
    "policy": "str",
    "preempted_requests": "int",
    "preemptions": "int",
    "prompt_tokens": "int",
    "recomputed": "int",
    "requests": "int",
    "series": {
        "time_s": ["float"],
        **{
            name: ["int"]  # counts stay exact integers
            for name in (
                "gpu_cached_blocks",
                "gpu_used_blocks",
                "host_cached_blocks",
                "host_used_blocks",
                "running",
                "swapped",
                "waiting",
            )
        },
    },
    "steps": "int",
    "swapped_out": "int",
    "tpot_s": {k: "float" for k in ("mean", "p50", "p90", "p99")} | {"count": "int"},
    "truncated_outputs": "int",
    "ttft_s": {k: "float" for k in ("mean", "p50", "p90", "p99")} | {"count": "int"},
}


def test_json_schema_snapshot(doc: dict[str, Any]) -> None:
    assert doc["schema"] == SIM_SCHEMA_VERSION == 1
    assert sorted(doc) == [
        "engine_flags",
        "kind",
        "plan",
        "policies",
        "replay_wall_s",
        "roofline",
        "schema",
        "settings",
        "trace",
    ]
    assert shape(doc["trace"]) == {
        "limit": "int",
        "path": "str",
        "prefixes": {"base_tokens": "int", "groups": "int", "seed": "int", "share": "float"},
        "rate_scale": "float",
        "requests": "int",
    }
    assert shape(doc["settings"]) == {
        "acceptance": ["float"],
        "draft_len": "int",
        "expected_accepted_per_step": "float",
        "max_num_batched_tokens": "int",
        "preempt": "str",
        "sample_steps": "int",
        "seed": "int",
    }
    assert sorted(doc["roofline"]) == [
        "draft_flops_per_token",
        "draft_kv_bytes_per_token",
        "draft_weights_bytes",
        "gpu",
        "hbm_bytes_per_s",
        "host_link_bytes_per_s",
        "peak_flops_per_s",
        "source",
        "target_flops_per_token",
        "target_kv_bytes_per_token",
        "target_weights_bytes",
    ]
    assert [p["policy"] for p in doc["policies"]] == [
        "kvbudget",
        "doubled-host",
        "equal-split",
        "target-geometry-draft",
        "no-host",
    ]
    no_notes = {**shape(doc["policies"][0]), "notes": []}
    assert no_notes == POLICY_SHAPE
    assert sorted(doc["engine_flags"]) == ["sglang", "trtllm", "vllm"]
    assert sorted(doc["replay_wall_s"]) == sorted(p["policy"] for p in doc["policies"])


def test_the_json_plan_is_the_plan(doc: dict[str, Any]) -> None:
    plan = kvbudget.plan(kv_budget="4GiB", host_budget="8GiB", max_seq_len=16384)
    assert doc["plan"] == json.loads(plan.to_json())


def test_the_json_engine_flags_are_plan_emit_settings(doc: dict[str, Any]) -> None:
    vllm = kvbudget.plan(kv_budget="4GiB", host_budget="8GiB", max_seq_len=16384, engine="vllm")
    assert vllm.engine is not None
    assert doc["engine_flags"]["vllm"] == json.loads(json.dumps(dict(vllm.engine.settings)))


def test_doubled_host_in_the_json(doc: dict[str, Any]) -> None:
    by = {p["policy"]: p for p in doc["policies"]}
    host = 8 * 2**30
    assert by["kvbudget"]["pinned_host_bytes"] == host
    assert by["doubled-host"]["pinned_host_bytes"] == 2 * host
    assert by["no-host"]["pinned_host_bytes"] == 0
    for p in doc["policies"]:
        assert p["completed"] + sum(p["not_finished"].values()) == p["requests"] == 40


def test_simulate_takes_every_plan_option() -> None:
    plan_opts = {
        n for n in inspect.signature(plan_command).parameters if n not in _PLAN_OUTPUT_OPTIONS
    }
    result = run("simulate", "--help")
    assert result.exit_code == 0
    for name in plan_opts:
        flag = "--" + name.replace("_", "-")
        assert flag in result.output, flag
    assert "--emit" not in result.output
    for flag in (
        "--engine",
        "--trace",
        "--acceptance",
        "--rate-scale",
        "--policies",
        "--html",
        "--json",
    ):
        assert flag in result.output


def test_summary_table(tmp_path: Path) -> None:
    result = run("simulate", *SMALL, "--limit", "30", "--policies", "kvbudget,no-host")
    assert result.exit_code == 0, result.output
    assert "kvbudget" in result.stdout and "no-host" in result.stdout
    assert "TTFT p50 / p90 / p99 (ms)" in result.stdout
    assert "30 / 30" in result.stdout  # completed / requests


def test_html_and_plots(tmp_path: Path) -> None:
    page = tmp_path / "out" / "report.html"
    result = run(
        "simulate", *SMALL, "--limit", "30", "--html", str(page), "--plots", str(tmp_path / "p")
    )
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert text.count('src="data:image/png;base64,') == 5
    assert 'id="summary"' in text and 'id="plan"' in text and 'id="engine-flags"' in text
    assert "<script" not in text and "http://" not in text and "https://" not in text
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        "concurrency.png",
        "gpu_blocks.png",
        "host.png",
        "latency.png",
        "overview.png",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policies", "kvbudget,nope"], "error: unknown policy 'nope'"),
        (["--acceptance", "2"], "error: acceptance rates must be numbers in [0, 1]"),
        (["--trace", "/nonexistent/trace.csv"], "error: No such file or directory"),
        (["--rate-scale", "0"], "error: rate_scale must be a number from 0.001 to 1e+06"),
        (["--preempt", "later"], "error: preempt must be auto, swap or recompute"),
        (["--tp", "0"], "error: --tp must be >= 1"),
        (["--policies", ","], "error: --policies needs distinct policy names"),
        (["--policies", "no-host,no-host"], "error: --policies needs distinct policy names"),
        (["--plots", __file__], "is not a directory"),
        (["--html", "/"], "is a directory; give a file name"),
    ],
)
def test_user_mistakes_are_one_line(args: list[str], message: str) -> None:
    result = run("simulate", *SMALL, "--limit", "3", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_worker_processes_give_the_same_results() -> None:
    from kvbudget.sim import simulate

    plan = kvbudget.plan(kv_budget="4GiB", host_budget="8GiB", max_seq_len=16384)
    one = simulate(plan, limit=40, rate_scale=20.0, jobs=1)
    two = simulate(plan, limit=40, rate_scale=20.0, jobs=2)
    assert one.policies == two.policies
    with pytest.raises(kvbudget.InvalidArgumentError, match="--jobs"):
        simulate(plan, limit=1, jobs=0)


def test_step_by_step_gives_the_defaults_metrics() -> None:
    """--step-by-step replays through the engine's cache one step at a time (the
    reference); the default (fast path, counted cache for the host-less policy) gives
    the same metrics, field by field."""
    args = ["simulate", "--kv-budget", "4GiB", "--max-seq-len", "16384", "--limit", "300"]
    fast = run(*args, "--rate-scale", "4", "--json")
    slow = run(*args, "--rate-scale", "4", "--json", "--step-by-step")
    assert fast.exit_code == 0 and slow.exit_code == 0, fast.output + slow.output
    fast_rows = json.loads(fast.stdout)["policies"]
    assert fast_rows == json.loads(slow.stdout)["policies"]
    assert sum(row["hit_tokens"] for row in fast_rows) > 0  # the caches had hits to agree on


def test_a_trace_on_standard_input_is_read_once() -> None:
    text = "arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,200,20\n1,300,5\n"
    args = [*SMALL, "--policies", "kvbudget,no-host", "--jobs", "1", "--json"]
    result = RUNNER.invoke(app, ["simulate", *args, "--trace", "-"], input=text)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    # counted, then replayed by each of the 2 policies: all 3 requests every time
    assert data["trace"]["path"] == "-" and data["trace"]["requests"] == 3
    assert [p["completed"] for p in data["policies"]] == [3, 3]


RATE_RANGE = (
    "(--rate-scale): a smaller one stretches arrival times past what the replay's clock "
    "(float seconds) can add a step to; a larger one makes every request arrive at once "
    "anyway"
)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate-scale", "inf"], "--rate-scale must be a finite number, got inf"),
        (["--rate-scale", "nan"], "--rate-scale must be a finite number, got nan"),
        (["--peak-tflops", "inf"], "--peak-tflops must be a finite number, got inf"),
        (["--peak-tflops", "nan"], "--peak-tflops must be a finite number, got nan"),
        (["--prefix-share", "-inf"], "--prefix-share must be a finite number, got -inf"),
        # 10^-300 stretched arrivals to 10^303 s: every step vanished, TTFT 0
        (
            ["--rate-scale", "1e-300"],
            f"rate_scale must be a number from 0.001 to 1e+06, got 1e-300 {RATE_RANGE}",
        ),
        (
            ["--rate-scale", "2e6"],
            f"rate_scale must be a number from 0.001 to 1e+06, got 2000000.0 {RATE_RANGE}",
        ),
    ],
    ids=["rate inf", "rate nan", "tflops inf", "tflops nan", "share -inf", "1e-300", "2e6"],
)
def test_numbers_json_cannot_hold_are_refused(args: list[str], message: str) -> None:
    result = run("simulate", *SMALL, "--limit", "3", "--json", *args)
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {message}\n"
    assert result.stdout == ""


def test_the_json_is_strict() -> None:
    from kvbudget.commands.simulate import _strict_json
    from kvbudget.errors import InvalidArgumentError

    assert _strict_json({"x": 1.5}) == '{\n  "x": 1.5\n}'
    with pytest.raises(InvalidArgumentError, match="would hold a NaN or an infinity"):
        _strict_json({"x": float("inf")})


def test_the_library_refuses_such_numbers_before_any_replay() -> None:
    from kvbudget.sim import simulate
    from kvbudget.sim.roofline import gpu_rates

    plan = kvbudget.plan(kv_budget="4GiB", max_seq_len=16384)
    for scale in (float("inf"), float("nan"), 1e-300, 0.0009):
        with pytest.raises(kvbudget.InvalidArgumentError, match="rate_scale must be a number"):
            simulate(plan, rate_scale=scale, limit=3)
    # the range's ends are allowed: 10^-3 and 10^6
    assert simulate(plan, rate_scale=1e-3, limit=2, policies=("kvbudget",)).rate_scale == 1e-3
    assert simulate(plan, rate_scale=1e6, limit=2, policies=("kvbudget",)).rate_scale == 1e6
    with pytest.raises(kvbudget.InvalidArgumentError, match="must be a finite number > 0"):
        gpu_rates("H200", peak_tflops=float("inf"))
