"""One engine plan, read everywhere: the table, the JSON and ``--emit`` show the same
figures, for every engine model and the preset cases the engine tests build.

Each engine model returns its pools, capacity, settings and log once
(:class:`kvbudget.EnginePlan`); these tests check that no output recomputes or drops one.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import kvbudget
from kvbudget.cli import app
from kvbudget.engines import ENGINE_MODELS, emit, get_engine_model
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.model import list_presets, load_model
from kvbudget.plan_types import Plan
from kvbudget.report import render_plan

CASES: list[tuple[str, dict[str, Any]]] = [
    ("llama8b-eagle3", {"target": "meta-llama/Llama-3.1-8B-Instruct", "spec": "eagle3"}),
    ("llama8b-none-host", {"target": "meta-llama/Llama-3.1-8B-Instruct", "spec": "none",
                           "host_budget": "16GiB"}),
    ("gpt-oss-eagle3-host", {"target": "openai/gpt-oss-120b", "spec": "eagle3",
                             "host_budget": "64GiB"}),
    ("dsv3-mtp-tp8", {"target": "deepseek-ai/DeepSeek-V3", "spec": "mtp", "tp": 8}),
    ("qwen3-next-mtp", {"target": "Qwen/Qwen3-Next-80B-A3B-Instruct", "spec": "mtp",
                        "max_batch_size": 16}),
    ("gemma3-ngram", {"target": "google/gemma-3-27b-it", "spec": "ngram",
                      "max_batch_size": 16}),
    ("llama70b-draft-tp4-pp2", {"target": "meta-llama/Llama-3.1-70B-Instruct",
                                "draft": "meta-llama/Llama-3.2-1B-Instruct",
                                "spec": "draft-target", "tp": 4, "pp": 2}),
]  # fmt: skip
ENGINE_IDS = [m.id for m in ENGINE_MODELS]


def _plan(engine: str, case: dict[str, Any]) -> Plan | None:
    args: dict[str, Any] = {"kv_budget": "40GiB", "max_seq_len": 32768, "tokens_per_block": 16}
    args.update(case)
    try:
        return kvbudget.plan(engine=engine, **args)
    except InvalidArgumentError as exc:  # a deployment the engine model does not cover
        assert "model" in str(exc) and "--engine" in str(exc), exc
        return None


def _table(plan: Plan) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_plan(plan))
    return console.export_text()


def _row(text: str, label: str) -> str:
    (line,) = [line for line in text.splitlines() if label in line]
    return line


@pytest.mark.parametrize("engine", ENGINE_IDS)
@pytest.mark.parametrize(("name", "case"), CASES, ids=[c[0] for c in CASES])
def test_table_json_and_emit_show_one_figure(engine: str, name: str, case: dict[str, Any]) -> None:
    p = _plan(engine, case)
    if p is not None:
        _check_one_figure(p)


@pytest.mark.parametrize("engine", ENGINE_IDS)
@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_shows_one_figure(engine: str, preset: str) -> None:
    """Every preset with its default speculation, under every engine model."""
    if load_model(preset).is_head:
        return  # a draft head, not a target
    try:
        p = _plan(engine, {"target": preset, "max_seq_len": 8192, "max_batch_size": 32})
    except InfeasibleBudgetError:
        return  # the engine would refuse, or nothing fits: no figures to show
    if p is not None:
        _check_one_figure(p)


def _check_one_figure(p: Plan) -> None:
    """The JSON, the table and ``--emit`` of ``p`` show its engine plan's figures alike."""
    e = p.engine
    data = json.loads(p.to_json())
    # JSON: the plan's capacity is the engine's, and the engine object is the plan's
    assert data["capacity"] == data["engine"]["capacity"] == e.capacity.to_dict()
    assert data["engine"]["pools"] == [pool.to_dict() for pool in e.pools]
    assert data["engine"]["settings"] == json.loads(json.dumps(dict(e.settings)))
    assert data["engine"]["log"] == list(e.log)
    # what the emitted comments say about the settings is in the JSON too
    assert data["engine"]["notes"] == [n.removeprefix("# ") for n in e.notes]
    # the table: the capacity's figures and one row per pool, with its own figures
    table = _table(p)
    assert _row(table, "tokens on GPU (").split()[-2] == f"{e.capacity.tokens:,}"
    assert _row(table, "tokens on host").split()[-2] == f"{e.capacity.host_tokens:,}"
    assert f"{e.capacity.max_concurrency:,} of {e.capacity.max_batch_size:,}" in table
    flat = " ".join(table.split())  # notes wrap at the console's width
    for note in data["engine"]["notes"]:
        assert f"note: {' '.join(note.split())}" in flat
    rows = [line.split("│")[1:-1] for line in table.splitlines() if line.startswith("│")]
    pool_rows = [[c.strip() for c in r] for r in rows if len(r) == 7]
    expected = [[pool.role, pool.tier, f"{pool.blocks:,}", f"{pool.tokens:,}"] for pool in e.pools]
    assert [[r[0], r[2], r[4], r[5]] for r in pool_rows] == expected
    # --emit: the settings as the engine reads them, and the predicted lines
    if get_engine_model(e.id).render is None:
        with pytest.raises(InvalidArgumentError, match="no settings to emit"):
            emit(p)
        return
    text = emit(p)
    for line in e.log:
        assert f"#   {line}" in text
    for note in data["engine"]["notes"]:
        assert f"# {note}" in text
    body = " ".join(line for line in text.splitlines() if not line.startswith("#"))
    for key, value in e.settings.items():
        if key.startswith("env."):  # an environment variable: in the comments
            assert f"{key[4:]}={value}" in text
        elif key.startswith("--") and value is not True and not isinstance(value, dict):
            assert f"{key} {shlex.quote(str(value))}" in body
        elif "." in key and not key.startswith("--"):
            section, field = key.split(".", 1)
            assert f"{section}:" in text and f"  {field}: " in text


def test_the_issue_example_has_one_block_count() -> None:
    """gpt-oss-120b under vLLM: the table, the JSON and the engine's own figure agree.

    vLLM 0.33: 36 layers x 16 tokens x 2 x 8 heads x 64 x 2 B = 32,768 B per layer
    page x 18 layers of the widest group = 589,824 B a block (the fidelity harness's
    figure), and 5.38 GiB = 5,776,731,799 B // 589,824 = 9,793 blocks.
    """
    p = kvbudget.plan(
        "openai/gpt-oss-120b", spec="none", kv_budget="5.38GiB", tokens_per_block=16,
        engine="vllm",
    )  # fmt: skip
    (pool,) = p.engine.pools
    assert pool.blocks == p.capacity.gpu_blocks == p.engine.detail["num_gpu_blocks"] == 9_793
    assert p.engine.detail["bytes_per_block"] == 589_824
    assert pool.tokens == p.capacity.tokens == p.engine.detail["gpu_kv_cache_tokens"]
    table = _table(p)
    assert "9,784" not in table  # the ledger's own block count is not shown for vLLM
    assert f"{p.capacity.tokens:,}" in _row(table, "tokens on GPU")


def test_engines_are_registered_by_name_and_version() -> None:
    assert get_engine_model("vllm") is get_engine_model("vllm@0.33.0")
    assert get_engine_model(" VLLM ") is get_engine_model("vllm")
    assert get_engine_model("kvbudget").id == f"kvbudget@{kvbudget.__version__}"
    with pytest.raises(InvalidArgumentError, match=r"unknown engine 'vllm@0\.1'.*vllm@0\.33\.0"):
        get_engine_model("vllm@0.1")
    # one default per name
    for name in {m.name for m in ENGINE_MODELS}:
        assert sum(m.default for m in ENGINE_MODELS if m.name == name) == 1


def test_kvbudget_engines_lists_every_model_with_its_source() -> None:
    result = CliRunner().invoke(app, ["engines", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["engine"] for r in rows] == ENGINE_IDS
    for row, model in zip(rows, ENGINE_MODELS, strict=True):
        assert row["repository"] == model.source.repository and row["ref"] == model.source.ref
        assert row["files"] and row["default"] == model.default
    table = CliRunner().invoke(app, ["engines"])
    assert table.exit_code == 0 and "vllm@0.33.0" in table.stdout


def test_an_engine_refusal_is_an_error_that_carries_the_plan() -> None:
    """vLLM refuses when one request of max_model_len does not fit beside the null block:
    Llama-3.1-8B at 131,072 tokens needs 8,192 blocks of 16 x 131,072 B (16 GiB)."""
    with pytest.raises(kvbudget.EngineRefusedError, match=r"vLLM 0\.33\.0 would refuse") as info:
        kvbudget.plan(spec="none", kv_budget="8GiB", tokens_per_block=16, engine="vllm")
    refused = info.value.plan
    assert isinstance(refused, Plan) and refused.engine.refusals
    assert refused.engine.detail["refused"].startswith("To serve at least one request")
    args = "plan --spec none --kv-budget 8GiB --tokens-per-block 16 --engine vllm"
    result = CliRunner().invoke(app, args.split())
    # the deployment's own warnings (none here) would come first; not the engine's figures
    # for a pool it never builds (vLLM's "holds 0.50 requests" is in the plan's warnings)
    assert info.value.warnings == ()
    assert any("holds 0.50 requests" in w for w in refused.warnings)
    assert result.exit_code == 2 and result.stderr.startswith("error: vLLM 0.33.0 would refuse")


def test_vllms_refusal_names_the_longest_model_length_that_fits() -> None:
    """vLLM's _check_enough_kv_cache_memory (kv_cache_planning.py): Llama-3.1-8B at
    131,072 tokens needs 8,192 blocks of 16 x 131,072 B = 2 MiB (16.0 GiB); 8 GiB holds
    4,096 blocks, less the null block 4,095; the longest length whose cdiv(L, 16) blocks
    fit is 4,095 x 16 = 65,520 (vLLM's binary search)."""
    with pytest.raises(kvbudget.EngineRefusedError) as info:
        kvbudget.plan(spec="none", kv_budget="8GiB", tokens_per_block=16, engine="vllm")
    assert (
        "(16.0 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(8.0 GiB). Based on the available memory, the estimated maximum model length is "
        "65520." in str(info.value)
    )


def test_vllm_refuses_more_sequences_than_mamba_blocks() -> None:
    """CompilationConfig: with FULL decode CUDA graphs each decoding sequence of a hybrid
    model needs one block. Qwen3-Next MTP at TP 1: 576-token blocks, one attention page
    576 x 2,048 B = 1,179,648 B (the state pages padded to it); groups of 13 layers (12
    attention + the MTP layer; 3 x 12 GDN layers + 1 padding layer each), so a block is
    13 x 1,179,648 = 15,335,424 B and 1 GiB = 1,073,741,824 B holds 70 of them."""
    args = {"spec": "mtp", "kv_budget": "1GiB", "tokens_per_block": 16, "max_seq_len": 4096}
    fits = kvbudget.plan("Qwen/Qwen3-Next-80B-A3B-Instruct", engine="vllm", max_batch_size=70,
                         **args)  # fmt: skip
    assert fits.engine.detail["num_gpu_blocks"] == 70
    with pytest.raises(kvbudget.EngineRefusedError, match=r"max_num_seqs \(71\) exceeds "
                       r"available Mamba cache blocks \(70\)"):  # fmt: skip
        kvbudget.plan("Qwen/Qwen3-Next-80B-A3B-Instruct", engine="vllm", max_batch_size=71,
                      **args)  # fmt: skip


def test_each_engine_derives_the_budget_with_its_own_default_knob() -> None:
    """Llama-3.1-8B on an RTX 3090 with no budget and no knob. vLLM 0.33.0's own default is
    --gpu-memory-utilization 0.92 (CacheConfig.gpu_memory_utilization, vllm/config/cache.py:215);
    the README's deployer question names 0.9: 23.59 GiB CUDA-visible x 0.9 - 14.96 GiB of
    weights - 1.77 GiB of non-KV memory = 4.50 GiB, "GPU KV cache size: 36,864 tokens".
    kvbudget's own cache and TensorRT-LLM use free_gpu_memory_fraction 0.9 semantics, a
    larger budget (of what is free)."""
    args = {"gpu": "RTX 3090", "spec": "none", "max_seq_len": 8192, "tokens_per_block": 16}
    vllm = kvbudget.plan(engine="vllm", **args)  # type: ignore[arg-type]
    default = kvbudget.plan(engine="vllm", gpu_memory_utilization=0.92, **args)  # type: ignore[arg-type]
    assert vllm.budget.gpu_bytes == default.budget.gpu_bytes
    assert vllm.budget.memory_rule == "gpu_memory_utilization"
    assert "0.92 (the engine's default)" in vllm.budget.gpu_source
    named = kvbudget.plan(engine="vllm", gpu_memory_utilization=0.9, **args)  # type: ignore[arg-type]
    assert named.capacity.tokens == 36_864
    # the 3090 has 25,327,697,920 B CUDA-visible (gpus.csv): floor(0.92 x M) - floor(0.9 x M)
    # = 23,301,482,086 - 22,794,928,128 = 506,553,958 B more at 0.92
    assert vllm.budget.gpu_bytes - named.budget.gpu_bytes == 506_553_958
    own = kvbudget.plan(engine="kvbudget", **args)  # type: ignore[arg-type]
    trt = kvbudget.plan(engine="trtllm", **args)  # type: ignore[arg-type]
    assert own.budget.memory_rule == trt.budget.memory_rule == "memory_fraction"
    assert own.budget.gpu_bytes == trt.budget.gpu_bytes > vllm.budget.gpu_bytes
    # a knob the user names is kept under every engine
    given = kvbudget.plan(engine="vllm", memory_fraction=0.9, **args)  # type: ignore[arg-type]
    assert given.budget.memory_rule == "memory_fraction"
    assert given.budget.gpu_bytes == own.budget.gpu_bytes


def test_emit_carries_every_warning_to_stderr_and_into_the_text() -> None:
    """8 ranks x 300 GiB = 2,400 GiB = 2.34 TiB of pinned host KV on a 2 TiB node."""
    args = ["plan", "--target", "meta-llama/Llama-3.3-70B-Instruct", "--tp", "8",
            "--host-budget", "300GiB", "--gpus-per-node", "8", "--host-memory", "2TiB",
            "--emit", "trtllm"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    pin = "8 ranks per node pin 2.34 TiB of host KV cache (300.00 GiB per rank)"
    assert f"warning: {pin}" in result.stderr  # where a terminal user looks
    assert f"# warning: {pin}" in result.stdout  # and in the file the settings go to
    assert "warning" not in result.stdout.replace("# warning:", "")


def test_emit_without_a_draft_names_no_draft_pool() -> None:
    text = emit(kvbudget.plan(spec="none", kv_budget="40GiB", engine="sglang"))
    assert "draft" not in text.lower()


@pytest.mark.parametrize("k", [131_072, 1_000_000, 2**63])
def test_a_draft_length_past_the_sequence_is_refused(k: int) -> None:
    """Llama-3.1-8B's max_seq_len is its 131,072 positions: K draft tokens are verified
    inside the sequence, so K >= 131,072 is one error line, never an emitted setting."""
    result = CliRunner().invoke(app, ["plan", "--max-draft-len", str(k), "--emit", "vllm"])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: --max-draft-len {k} must be below --max-seq-len")
    assert result.stdout == ""
    assert kvbudget.plan(max_draft_len=131_071, kv_budget="40GiB").capacity.lookahead_tokens


def test_vllm_host_offload_is_its_one_region_in_rows_of_block_copies() -> None:
    """CPUOffloadingSpec (vllm/v1/kv_offload/cpu/spec.py): S GiB in rows of one GPU
    block's bytes per rank copy, each rounded up to 4 KiB; one CPU block a row.

    Llama-3.1-8B + EAGLE3 at block 16: 33 layers x 65,536 B = 2,162,688 B a block (the
    head's layer included); 64 GiB = 68,719,476,736 B // 2,162,688 = 31,775 CPU blocks,
    31,775 x 2,162,688 = 68,719,411,200 B pinned.
    gpt-oss-120b: 18 layers x 32,768 B = 589,824 B a block over two groups (sliding and
    full); 116,508 CPU blocks, each group's copy in its own: 116,508 // 2 x 16 = 932,064
    tokens.
    DeepSeek-V3 TP 8 + MTP (one MLA group, replicated on the 8 ranks of one node): one
    copy per row, 62 x 16 x 1,152 B = 1,142,784 B; --kv-offloading-size 512 (64 GiB per
    rank x 8) = 549,755,813,888 B // 1,142,784 = 481,067 CPU blocks, 8 x more than the
    8-copy rows would give.
    """
    args = {"kv_budget": "40GiB", "host_budget": "64GiB", "tokens_per_block": 16,
            "max_seq_len": 32768, "engine": "vllm"}  # fmt: skip
    llama = kvbudget.plan(spec="eagle3", **args)  # type: ignore[arg-type]
    (host,) = [p for p in llama.engine.pools if p.tier == "host"]
    assert (host.blocks, host.bytes, host.padding_bytes) == (31_775, 68_719_411_200, 0)
    assert llama.capacity.host_blocks == 31_775 and host.tokens == 31_775 * 16
    gpt = kvbudget.plan("openai/gpt-oss-120b", spec="none", **args)  # type: ignore[arg-type]
    (host,) = [p for p in gpt.engine.pools if p.tier == "host"]
    assert (host.blocks, host.bytes, host.tokens) == (116_508, 68_719_214_592, 932_064)
    assert gpt.capacity.host_tokens == 932_064
    dsv3 = kvbudget.plan("deepseek-ai/DeepSeek-V3", spec="mtp", tp=8, **args)  # type: ignore[arg-type]
    (host,) = [p for p in dsv3.engine.pools if p.tier == "host"]
    assert dsv3.engine.settings["--kv-offloading-size"] == "512"
    assert host.blocks == 549_755_813_888 // 1_142_784 == 481_067
    assert "replicated MLA layout" in emit(dsv3)


def test_the_plan_table_shows_a_folder_name_escaped(tmp_path: Path) -> None:
    """A model folder named with rich markup and an ESC sequence prints as text: the
    markup is not applied and the ESC byte is shown as \\x1b (issue 21 item 11)."""
    import shutil
    from importlib import resources

    folder = tmp_path / "[red]x\x1b[2J"
    folder.mkdir()
    preset = (
        resources.files("kvbudget") / "data" / "models" / "meta-llama--Llama-3.2-1B-Instruct.json"
    )
    shutil.copy(str(preset), folder / "config.json")
    p = kvbudget.plan(str(folder), spec="none", kv_budget="1GiB", max_seq_len=8192)
    table = _table(p)
    assert "\x1b" not in table and "\\x1b[2J" in table
    assert "[red]x" in table  # shown, not applied


def test_the_table_shows_the_engines_block_size() -> None:
    """TensorRT-LLM runs DeepSeek-V3's 576-wide MLA with FlashMLA on Hopper: 64-token
    blocks whatever --tokens-per-block asks; the title shows one block size, the engine's."""
    p = kvbudget.plan("deepseek-ai/DeepSeek-V3", spec="mtp", tp=8, kv_budget="40GiB",
                      max_seq_len=32768, engine="trtllm")  # fmt: skip
    assert p.capacity.tokens_per_block == 64 and p.tokens_per_block == 32
    title = _table(p).splitlines()[2]
    assert "64 tokens per block (trtllm's; --tokens-per-block 32 asked)" in title
    assert {pool.tokens_per_block for pool in p.engine.pools} == {64}
