"""``kvbudget sweep``: the space and its valid layouts, rows equal to the plans their
commands print, the Pareto front, identical results over 1 and N processes, one-line
errors."""

from __future__ import annotations

import json
import shlex
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import kvbudget
from kvbudget.cli import app
from kvbudget.search import (
    Slo,
    SweepConfig,
    SweepRow,
    SweepSettings,
    SweepSpace,
    TrafficSettings,
    sweep,
)
from kvbudget.search.prices import read_prices
from kvbudget.search.rank import dimensions, pareto_front, ranked
from kvbudget.search.space import enumerate_configs, layouts
from kvbudget.search.task import evaluate, shards

RUNNER = CliRunner()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def run(*args: str) -> Any:
    return RUNNER.invoke(app, list(args), env=ENV)


def test_layouts_are_every_factorisation_in_the_lists() -> None:
    """4 GPUs, tp and dp any, pp 1: tp x dp = 4 -> (1,4), (2,2), (4,1); with pp 1,2 also
    tp x pp x dp = 1x2x2 and 2x2x1 (pp 4 is not in the list)."""
    space = SweepSpace(gpu_counts=(4,))
    off = False
    assert list(layouts(space, 4)) == [(1, 1, 4, 1, off), (2, 1, 2, 1, off), (4, 1, 1, 1, off)]
    two = SweepSpace(gpu_counts=(4,), pp=(1, 2))
    assert sorted(layouts(two, 4)) == [
        (1, 1, 4, 1, off),
        (1, 2, 2, 1, off),
        (2, 1, 2, 1, off),
        (2, 2, 1, 1, off),
        (4, 1, 1, 1, off),
    ]


def test_dp_attention_layouts_split_the_tp_ranks() -> None:
    """With dp_attention the dp groups are inside tp: 4 GPUs are tp x pp = 4, and dp any
    divisor of tp above 1 (tp 4: dp 2, 4; tp 2 pp 2: dp 2; tp 1: none)."""
    space = SweepSpace(gpu_counts=(4,), pp=(1, 2), dp_attention=(True,))
    assert sorted(layouts(space, 4)) == [(2, 2, 2, 1, True), (4, 1, 2, 1, True), (4, 1, 4, 1, True)]
    listed = SweepSpace(gpu_counts=(4,), tp=(4,), dp=(3,), dp_attention=(True,))
    assert list(layouts(listed, 4)) == [(4, 1, 3, 1, True)]  # listed: the reason follows


@given(
    count=st.integers(1, 16),
    pp=st.sets(st.integers(1, 4), min_size=1),
    dp_attention=st.sets(st.booleans(), min_size=1),
)
@settings(max_examples=60, deadline=None)
def test_every_layout_uses_the_gpu_count(count: int, pp: set[int], dp_attention: set[bool]) -> None:
    """A layout's GPUs (``SweepConfig.gpus``, ``Parallelism.ranks``) are the count: tp x pp
    x dp, or tp x pp under dp_attention with dp > 1 dividing tp; no layout twice."""
    space = SweepSpace(gpu_counts=(count,), pp=tuple(sorted(pp)), dp_attention=tuple(dp_attention))
    found = list(layouts(space, count))
    assert len(found) == len(set(found))
    for tp, p, dp, _, dpa in found:
        assert p in pp and dpa in dp_attention
        assert tp * p * (1 if dpa else dp) == count
        assert not dpa or (dp > 1 and tp % dp == 0)


def test_dp_attention_is_listed_with_the_reason_where_it_does_not_apply() -> None:
    """A dense target takes no dp_attention; on an MoE target dp must divide tp
    (Parallelism.checked), and TensorRT-LLM makes every rank its own attention group
    (engines/trtllm.py check: dp == tp), so tp 8 dp 2 is a setting it does not take. A dp-attention
    deployment is tp x pp GPUs: 8, not 16."""
    dense = enumerate_configs(SweepSpace(gpu_counts=(2,), tp=(2,), dp_attention=(True,)))
    assert [c.problem for c in dense] == [
        "dp_attention: meta-llama/Llama-3.1-8B-Instruct has no routed experts (data-parallel "
        "attention is swept for MoE targets; use plain --dp replicas)"
    ]
    moe = SweepSpace(
        target="deepseek-ai/DeepSeek-V3",
        gpu_counts=(8,),
        tp=(8,),
        dp=(1, 2, 3, 8),
        dp_attention=(False, True),
        specs=("none",),
        engines=("sglang", "trtllm"),
        max_seq_len=32768,
    )
    configs = enumerate_configs(moe)
    problems = {(c.dp, c.dp_attention): c.problem for c in configs}
    assert problems[(1, False)] is None and problems[(2, True)] is None
    assert (
        problems[(3, True)] is not None and "dp=3 must be > 1 and divide tp" in problems[(3, True)]
    )
    assert {c.gpus for c in configs} == {8}
    result = sweep(moe)
    rows = {(r.config.engine.split("@")[0], r.config.dp): r for r in result.rows}
    refused = rows[("trtllm", 2)]
    assert refused.status == "invalid" and refused.reason is not None
    assert "use --dp 8" in refused.reason
    assert rows[("sglang", 2)].status == "ok" and rows[("trtllm", 8)].status == "ok"
    assert "--dp-attention" in shlex.split(rows[("sglang", 8)].command)


def test_layouts_the_model_cannot_run_carry_the_reason() -> None:
    """Llama-3.1-8B has 32 attention heads (tp 3 does not divide them) and no routed
    experts (ep 2 applies to none)."""
    configs = enumerate_configs(SweepSpace(gpu_counts=(3,), ep=(1, 2), specs=("none",)))
    problems = {(c.tp, c.dp, c.ep): c.problem for c in configs}
    assert problems[(3, 1, 1)] == "tp=3 does not divide the target's 32 attention heads"
    assert problems[(1, 3, 1)] is None
    assert problems[(1, 3, 2)] == "ep=2: meta-llama/Llama-3.1-8B-Instruct has no routed experts"


def test_an_engine_refusal_is_listed_with_the_engines_reason() -> None:
    """A10 (23,595,909,120 B): vLLM 0.33.0 refuses Llama-3.1-8B at 131,072 tokens, whose
    one request needs 16 GiB of KV (tests/test_engine_plan.py has the arithmetic); SGLang's
    own default --mem-fraction-static there (0.414, tests/test_sglang_mem_default.py:
    round(1 - 13,488 / 23,028 MiB, 3)) holds not even the weights. On an RTX 5090 (its
    default 0.586: round(1 - 13,488 / 32,607, 3)) SGLang starts with a pool that holds no
    such request."""
    result = sweep(gpus=("a10",), specs=("none",), engines=("vllm", "sglang"))
    by_engine = {r.config.engine: r for r in result.rows}
    refused = by_engine["vllm@0.33.0"]
    assert refused.status == "infeasible"
    assert refused.reason is not None and "vLLM 0.33.0 would refuse to start" in refused.reason
    # the refused deployment's own warnings travel with the row, as `kvbudget plan` prints
    # them before the refusal: with the EAGLE3 head, that it was trained on 2,048 positions
    head = sweep(gpus=("a10",), specs=("eagle3",), engines=("vllm",)).rows[0]
    assert head.status == "infeasible" and len(head.warnings) == 1
    assert head.warnings[0].startswith(
        "draft yuhuili/EAGLE3-LLaMA3.1-Instruct-8B was trained on 2,048 positions"
    )
    assert refused.warnings == ()  # vLLM's "holds 0.19 requests": a pool it never builds
    sglang = kvbudget.get_engine_model("sglang").id
    small = by_engine[sglang]
    assert small.status == "infeasible" and small.reason is not None
    assert "under mem_fraction_static=0.414" in small.reason
    # SGLang starts, but its pool holds no whole sequence of 131,072 tokens: listed too
    larger = sweep(gpus=("rtx-5090",), specs=("none",), engines=("sglang",))
    empty = larger.rows[0]
    assert empty.config.engine == sglang
    assert empty.status == "infeasible" and empty.seqs_total == 0
    assert empty.reason is not None and "no whole sequence of 131072 tokens" in empty.reason


SAMPLE_SPACE = SweepSpace(
    gpus=("h200", "a10"),
    gpu_counts=(1, 2),
    kv_dtypes=("auto", "fp8"),
    engines=("kvbudget", "vllm", "sglang", "trtllm"),
    max_seq_len=32768,
)


@pytest.fixture(scope="module")
def capacity_doc() -> dict[str, Any]:
    result = run(
        "sweep",
        "--gpu",
        "h200,a10",
        "--gpu-count",
        "1,2",
        "--kv-dtype",
        "auto,fp8",
        "--engine",
        "kvbudget,vllm,sglang,trtllm",
        "--max-seq-len",
        "32768",
        "--jobs",
        "1",
        "--json",
    )
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_sampled_rows_equal_the_plan_their_command_prints(capacity_doc: dict[str, Any]) -> None:
    rows = capacity_doc["rows"]
    assert len(rows) == 2 * 2 * 2 * 4 + 2 * 2 * 4  # 1 GPU: one layout; 2 GPUs: tp2, dp2
    for row in rows[::5]:
        args = shlex.split(row["command"])
        assert args[:2] == ["kvbudget", "plan"]
        out = run(*args[1:], "--json")
        if row["exact"]["capacity"] is None:  # refused: the plan says so, in one line
            assert row["status"] in ("infeasible", "invalid")
            *warned, error = out.stderr.strip().splitlines()
            assert out.exit_code == 2 and error.startswith("error: ")
            # after the warnings the row carries (an engine's refusal keeps its plan's)
            assert warned == [f"warning: {w}" for w in row["warnings"]]
            continue
        assert out.exit_code == 0, out.output
        plan = json.loads(out.stdout)
        assert plan["engine"]["capacity"] == row["exact"]["capacity"]
        assert plan["budget"]["gpu_bytes"] == row["exact"]["gpu_kv_bytes_per_rank"]
        assert f"{plan['engine']['name']}@{plan['engine']['version']}" == row["config"]["engine"]
        total = plan["engine"]["capacity"]["total_concurrency"]
        assert row["exact"]["seqs_total"] == total
        assert row["exact"]["seqs_per_gpu"] == total / row["config"]["gpus"]


def test_the_json_says_which_columns_are_exact(capacity_doc: dict[str, Any]) -> None:
    assert capacity_doc["kind"] == "kvbudget-sweep"
    assert "seqs_per_gpu" in capacity_doc["columns"]["exact"]
    assert "ttft_s" in capacity_doc["columns"]["modelled"]
    assert "lower bound" in capacity_doc["columns"]["note"]
    ranks = [r["rank"] for r in capacity_doc["rows"]]
    assert ranks == list(range(1, len(ranks) + 1))
    assert any(r["front"] for r in capacity_doc["rows"])


def _row(index: int, gpus: int, seqs: int, status: str = "ok") -> SweepRow:
    config = SweepConfig(
        index=index,
        target="t",
        draft=None,
        spec="none",
        gpu="h200",
        tp=gpus,
        pp=1,
        dp=1,
        ep=1,
        kv_dtype="auto",
        engine="kvbudget",
        max_batch_size=256,
    )
    capacity = {"max_concurrency": seqs, "total_concurrency": seqs}
    return SweepRow(config=config, command="", status=status, capacity=capacity, gpus=gpus)  # type: ignore[arg-type]


CAPACITY = SweepSettings(space=SweepSpace())


def test_the_front_by_hand() -> None:
    """Sequences per GPU against GPUs: (1 GPU, 6/GPU) and (2 GPUs, 7/GPU) are on the
    front; (2 GPUs, 6/GPU) is dominated by (1, 6); (4 GPUs, 7/GPU) by (2, 7); a refused
    row is never on it."""
    rows = [_row(0, 1, 6), _row(1, 2, 14), _row(2, 2, 12), _row(3, 4, 28), _row(4, 1, 99, "slo")]
    assert pareto_front(rows, CAPACITY) == {0, 1}
    order = [r.config.index for r in ranked(rows, CAPACITY)]
    assert order == [1, 3, 0, 2, 4]  # 7/GPU (2 GPUs before 4), then 6/GPU, then the slo row


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(0, 400)), min_size=1, max_size=12))
def test_no_front_row_is_dominated_and_every_other_row_is(points: list[tuple[int, int]]) -> None:
    rows = [_row(i, g, s) for i, (g, s) in enumerate(points)]
    front = pareto_front(rows, CAPACITY)
    dims = {r.config.index: dimensions(r, CAPACITY) for r in rows}

    def dominated(i: int) -> bool:
        a = dims[i]
        assert a is not None
        return any(
            all(x >= y for x, y in zip(b, a, strict=True)) and b != a
            for j, b in dims.items()
            if j != i and b is not None
        )

    assert front
    for i in dims:
        assert (i in front) == (not dominated(i))


@pytest.mark.parametrize("router", ["round-robin", "least-loaded"])
def test_one_process_and_two_give_the_same_rows(router: str) -> None:
    """The traffic objective (a seeded replay per configuration x DP replica) over 1 and
    2 processes; the dp=2 layout is two tasks whose replicas' requests add up to the
    trace's 60."""
    space = SweepSpace(gpu_counts=(1, 2), max_seq_len=16384)
    traffic = TrafficSettings(limit=60, rate_scale=4.0, dp_router=router)
    one = sweep(space, objective="traffic", traffic=traffic, jobs=1)
    two = sweep(space, objective="traffic", traffic=traffic, jobs=2)
    assert one.rows == two.rows and one.front == two.front
    assert all(r.traffic is not None and r.traffic.requests == 60 for r in one.rows)
    settings_ = SweepSettings(space=space, objective="traffic", traffic=traffic).checked()
    configs = enumerate_configs(settings_.space)
    assert [len(shards(settings_, c)) for c in configs] == [1, 2, 1]  # 1 GPU; dp2; tp2
    (dp2,) = [r for r in one.rows if r.config.dp == 2]
    assert dp2.traffic is not None and (dp2.traffic.replicas, dp2.traffic.router) == (2, router)


@pytest.fixture(scope="module")
def traffic_doc() -> dict[str, Any]:
    args = ["sweep", "--gpu-count", "1,2", "--engine", "kvbudget,vllm", "--max-seq-len"]
    args += ["16384", "--objective", "traffic", "--limit", "80", "--rate-scale", "4"]
    result = run(*args, "--dp-router", "least-loaded", "--jobs", "1", "--json")
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_sampled_traffic_rows_equal_what_their_simulate_command_prints(
    traffic_doc: dict[str, Any],
) -> None:
    """Every traffic row carries ``kvbudget simulate ...``; its policy's metrics are the
    row's modelled columns (DP rows included: the same replicas, routed alike)."""
    rows = traffic_doc["rows"]
    assert len(rows) == 2 * 3 and all(r["simulate_command"] for r in rows)
    dp_rows = [r for r in rows if r["config"]["dp"] == 2]
    assert len(dp_rows) == 2
    for row in [rows[0], *dp_rows, rows[-1]]:
        args = shlex.split(row["simulate_command"])
        assert args[:2] == ["kvbudget", "simulate"] and "--dp-router" in args
        out = run(*args[1:], "--json")
        assert out.exit_code == 0, out.output
        sim = json.loads(out.stdout)
        (policy,) = sim["policies"]
        modelled = row["modelled"]
        assert modelled["replicas"] == sim["plan"]["engine"]["capacity"]["kv_groups"]
        for key in ("policy", "requests", "completed", "output_tokens_per_s"):
            assert modelled[key] == policy[key], key
        for key in ("ttft_s", "tpot_s"):
            assert modelled[key] == {p: policy[key][p] for p in ("p50", "p90", "p99", "mean")}
        per_gpu = policy["output_tokens_per_s"] / row["config"]["gpus"]
        assert modelled["output_tokens_per_s_per_gpu"] == per_gpu


def test_traffic_rows_meet_or_miss_the_slo() -> None:
    """A TTFT limit of 1 ns no replay meets: every row that runs is ``slo``, with the
    percentile that missed."""
    result = sweep(
        SweepSpace(max_seq_len=16384),
        objective="traffic",
        traffic=TrafficSettings(limit=30),
        slo=Slo(percentile="p90", ttft_s=1e-9),
    )
    (row,) = result.rows
    assert row.status == "slo" and row.reason is not None and "p90 TTFT" in row.reason
    assert result.winner is None and result.front == frozenset()


def test_a_task_is_a_pure_function_of_its_settings() -> None:
    settings_ = SweepSettings(space=SAMPLE_SPACE).checked()
    config = enumerate_configs(settings_.space)[3]
    assert evaluate(settings_, config) == evaluate(settings_, config)


def test_prices_give_the_price_per_sequence_hour(tmp_path: Path) -> None:
    """2.5 per GPU-hour x 2 GPUs = 5.0 an hour, over the row's sequences."""
    path = tmp_path / "prices.csv"
    path.write_text("gpu,price_per_gpu_hour\nH200,2.5\n# a comment\n\nA10,0.75\n")
    assert read_prices(path) == {"h200": 2.5, "a10": 0.75}
    result = sweep(gpu_counts=(2,), tp=(2,), max_seq_len=32768, prices=path)
    (row,) = result.rows
    assert row.price_per_hour == 5.0
    assert row.seqs_total and row.price_per_seq_hour == 5.0 / row.seqs_total


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu,price_per_gpu_hour\nH200,free\n", "line 2: price 'free' must be a number > 0"),
        ("gpu,price_per_gpu_hour\nH200,-1\n", "line 2: price '-1' must be a number > 0"),
        ("gpu,price_per_gpu_hour\nH9000,1\n", "line 2: unknown GPU"),
        ("gpu,price_per_gpu_hour\nH200,1\nh200,2\n", "line 3: h200 has a price already"),
        ("gpu,price_per_gpu_hour\nH200,1,2\n", "line 2: 3 fields, expected 2"),
        ("gpu,cost\nH200,1\n", "line 1: header must be gpu,price_per_gpu_hour"),
        ("gpu,price_per_gpu_hour\nA10,1\n", "no price for h200"),
    ],
)
def test_a_bad_price_file_is_one_error_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "prices.csv"
    path.write_text(text)
    result = run("sweep", "--prices", str(path), "--max-seq-len", "4096")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


def test_a_price_file_saved_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    """A spreadsheet's CSV starts with U+FEFF; the header still matches."""
    path = tmp_path / "prices.csv"
    path.write_bytes("\ufeffgpu,price_per_gpu_hour\nH200,2.5\n".encode())
    assert read_prices(path) == {"h200": 2.5}


def test_a_price_file_that_is_not_text_is_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    path.write_bytes(b"\xff\xfe\x00gpu")
    result = run("sweep", "--prices", str(path), "--max-seq-len", "4096")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "not UTF-8" in lines[0], lines


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed when the block ends: nothing listens


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu-count", "3", "--tp", "2"], "the sweep space holds no configuration"),
        (["--gpu-count", "3", "--dp", "1"], "no configuration the target can run: tp=3"),
        (["--gpu", "H9000"], "unknown GPU"),
        (["--engine", "vllm,nonsense"], "unknown engine 'nonsense'"),
        (["--gpu-count", "0"], "--gpu-count: '0' is not a range"),
        (["--tp", "two"], "--tp takes integers and ranges"),
        (["--objective", "speed"], "--objective must be one of capacity, traffic"),
        (["--objective", "traffic", "--policy", "nope"], "unknown policies"),
        (["--objective", "traffic", "--dp-router", "random"], "--dp-router must be one of"),
        (["--dp-router", "random"], "--dp-router must be one of"),
        (["--top", "-1"], "--top must be an integer >= 0, got -1"),
        (["--gpu", " , "], "--gpu needs at least one value"),
        (["--host-budget", "bogus"], "--host-budget: cannot read 'bogus' as a byte size"),
        (["--max-seq-len", "0"], "--max-seq-len must be >= 1, got 0"),
        (["--tokens-per-block", "0"], "--tokens-per-block must be >= 1, got 0"),
        (["--max-draft-len", "-1"], "--max-draft-len must be >= 0, got -1"),
        (["--gpus-per-node", "0"], "--gpus-per-node must be >= 1, got 0"),
        (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens must be >= 1, got 0"),
        (["--prices", "/nonexistent/prices.csv"], "No such file or directory"),
        (["--dp-attention", "maybe"], "--dp-attention takes off, on or off,on"),
        (["--slo-ttft", "-1"], "--slo-ttft must be a number of seconds > 0"),
        (["--target", "no/such-model-anywhere"], ""),
    ],
)
def test_bad_input_is_one_error_line(args: list[str], message: str) -> None:
    env = {**ENV, "HF_HUB_OFFLINE": "1"}
    result = RUNNER.invoke(app, ["sweep", "--max-seq-len", "4096", *args], env=env)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


def test_a_ray_address_that_does_not_answer_is_one_error_line() -> None:
    pytest.importorskip("ray")
    address = f"127.0.0.1:{_closed_port()}"
    result = run("sweep", "--ray-address", address, "--max-seq-len", "4096")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --ray-address {address}: nothing")


def test_the_html_report_has_the_plot_the_front_and_the_winners_policies(
    tmp_path: Path,
) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "sweep.html"
    result = run(
        "sweep", "--gpu-count", "1,2", "--max-seq-len", "16384", "--objective", "traffic",
        "--limit", "40", "--jobs", "1", "--html", str(out), "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)  # --json keeps stdout to the document
    page = out.read_text()
    assert 'id="pareto"' in page and "data:image/png;base64," in page
    assert 'id="front"' in page and "kvbudget plan --target" in page
    for policy in kvbudget.sim.POLICIES:
        assert f"<th>{policy}</th>" in page
    # the default EAGLE3 head was trained on 2,048 positions, fewer than 16,384: the
    # front's plans warn so (kvbudget.deployment.draft_warnings), and the page says it
    assert 'id="warnings"' in page and "was trained on 2,048 positions" in page


def test_drafts_pair_with_the_specs_that_take_one() -> None:
    """--spec none,draft-target --draft Qwen3-0.6B: none runs without a draft, draft-target
    with it; each is a plan of its own."""
    space = SweepSpace(
        target="Qwen/Qwen3-8B",
        drafts=("Qwen/Qwen3-0.6B",),
        specs=("none", "draft-target"),
        max_seq_len=8192,
    )
    configs = enumerate_configs(space)
    assert [(c.spec, c.draft) for c in configs] == [
        ("none", None),
        ("draft-target", "Qwen/Qwen3-0.6B"),
    ]
    rows = {r.config.spec: r for r in sweep(space).rows}
    assert rows["draft-target"].status == "ok" and "--draft Qwen/Qwen3-0.6B" in (
        rows["draft-target"].command
    )
    # the draft's KV shares the budget: fewer sequences than without speculation
    assert (rows["draft-target"].seqs_total or 0) < (rows["none"].seqs_total or 0)


def test_a_trace_on_standard_input_is_read_once_for_every_task(tmp_path: Path) -> None:
    """``--trace -``: the stream is copied once (kvbudget.sim.trace.replayable_trace) and
    every task, in two worker processes, replays the copy; the rows equal a sweep of the
    same trace from a file, and their commands still name ``-``."""
    text = "arrival_s,prompt_tokens,output_tokens\n" + "".join(
        f"{i * 0.25},{300 + 37 * i},{20 + i}\n" for i in range(24)
    )
    file = tmp_path / "trace.csv"
    file.write_text(text)
    args = ["sweep", "--gpu-count", "1,2", "--max-seq-len", "8192", "--objective", "traffic"]
    args += ["--jobs", "2", "--json"]
    piped = RUNNER.invoke(app, [*args, "--trace", "-"], input=text)
    assert piped.exit_code == 0, piped.output
    from_file = run(*args, "--trace", str(file))
    assert from_file.exit_code == 0, from_file.output
    a, b = json.loads(piped.stdout), json.loads(from_file.stdout)
    assert a["traffic"]["trace"] == "-" and "read_path" not in a["traffic"]
    assert [r["modelled"] for r in a["rows"]] == [r["modelled"] for r in b["rows"]]
    assert all(r["modelled"]["completed"] == 24 for r in a["rows"])
    for row in a["rows"]:
        assert shlex.split(row["simulate_command"]).count("-") == 1
