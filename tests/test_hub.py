"""Hugging Face Hub ids against a Hub played on 127.0.0.1 (tests/hub_server.py), through
the real huggingface_hub client, in fresh processes (huggingface_hub reads HF_ENDPOINT
and HF_HUB_OFFLINE once, at import): a model absent from the presets plans with the
bytes of its safetensors headers, then from the cache with the server stopped; offline,
gated, missing and rate-limited repositories are one ``error:`` line each; planning a
preset makes no request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hub_server import TINY_CONFIG, FakeHub, header_sum, sharded, tiny_files, tiny_shards

# what tests/test_checkpoint.py derives by hand: 32,768 + 2 x 74,240 + 256 + 32,768
TINY_HEADER_BYTES = 214_272
PLAN = ("--max-seq-len", "4096", "--max-batch-size", "4")


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    server = FakeHub().start()
    yield server
    server.stop()


def env(tmp_path: Path, hub: FakeHub | None, **extra: str) -> dict[str, str]:
    """The environment of a kvbudget process: this Hub, an empty cache of ``tmp_path``."""
    out = dict(os.environ)
    out.update(
        HF_ENDPOINT=hub.url if hub else "http://127.0.0.1:9",
        HF_HUB_OFFLINE="0",
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_CACHE=str(tmp_path / "hf-cache"),
        COLUMNS="200",
        NO_COLOR="1",
    )
    out.update(extra)
    return out


def kvbudget(environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvbudget", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )


def plan_json(environ: dict[str, str], *args: str) -> dict[str, Any]:
    done = kvbudget(environ, "plan", "--json", *args, *PLAN)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert done.stdout == ""
    return lines[0]


def test_a_model_absent_from_the_presets_plans_from_the_hub(tmp_path: Path, hub: FakeHub) -> None:
    sha = hub.add("acme/tiny-llama", tiny_files())
    data = plan_json(env(tmp_path, hub), "--target", "acme/tiny-llama")
    # byte for byte the sum of product(shape) x dtype width over both shards' headers
    assert data["budget"]["weights_bytes"] == header_sum(tiny_shards()) == TINY_HEADER_BYTES
    assert data["weights_source"] == {"target": "safetensors headers"}
    assert data["target"] == "acme/tiny-llama" and data["target_revision"] == sha
    assert data["target_path"] is None  # engines load it by its id
    paths = {path for _, path, _ in hub.requests}
    assert f"/acme/tiny-llama/resolve/{sha}/model.safetensors.index.json" in paths
    shard_gets = [(m, r) for m, p, r in hub.requests if p.endswith("-of-00002.safetensors")]
    # each shard's header read by a range request; no shard is downloaded
    assert len(shard_gets) == 2 and all(
        m == "GET" and r.startswith("bytes=0-") for m, r in shard_gets
    )


def test_a_second_run_uses_the_cache_with_the_server_stopped(tmp_path: Path, hub: FakeHub) -> None:
    sha = hub.add("acme/tiny-llama", tiny_files())
    first = plan_json(env(tmp_path, hub), "--target", "acme/tiny-llama")
    cache = tmp_path / "hf-cache" / "models--acme--tiny-llama" / ".kvbudget"
    assert (cache / "safetensors-headers" / f"{sha}.json").is_file()
    hub.stop()
    for offline in ("0", "1"):  # the server gone; then offline mode too
        again = plan_json(env(tmp_path, hub, HF_HUB_OFFLINE=offline), "--target", "acme/tiny-llama")
        assert again["budget"]["weights_bytes"] == TINY_HEADER_BYTES
        assert again["target_revision"] == sha and again == first


def test_offline_without_a_cached_copy_is_one_error_line(tmp_path: Path, hub: FakeHub) -> None:
    hub.add("acme/tiny-llama", tiny_files())
    done = kvbudget(env(tmp_path, hub, HF_HUB_OFFLINE="1"), "plan", "--target", "acme/tiny-llama")
    line = one_error_line(done)
    assert "HF_HUB_OFFLINE=1" in line and "not in the Hugging Face cache" in line
    assert "pass a local folder" in line and "kvbudget models" in line
    assert hub.requests == []


@pytest.mark.parametrize(
    ("repo", "needles"),
    [
        ("acme/gated", ("is a gated model", "HTTP 401", "hf auth login", "HF_TOKEN")),
        ("acme/nope", ("no model acme/nope", "HTTP 404", "hf auth login", "kvbudget models")),
    ],
)
def test_gated_and_missing_repositories_are_one_error_line(
    tmp_path: Path, hub: FakeHub, repo: str, needles: tuple[str, ...]
) -> None:
    hub.add("acme/gated", tiny_files(), gated=True)
    line = one_error_line(kvbudget(env(tmp_path, hub), "plan", "--target", repo))
    for needle in needles:
        assert needle in line, line


def test_a_missing_revision_and_a_missing_config(tmp_path: Path, hub: FakeHub) -> None:
    hub.add("acme/no-config", {"README.md": b"hi"})
    hub.add("acme/tiny-llama", tiny_files())
    line = one_error_line(kvbudget(env(tmp_path, hub), "plan", "--target", "acme/tiny-llama@v9"))
    assert "has no revision 'v9'" in line
    line = one_error_line(kvbudget(env(tmp_path, hub), "plan", "--target", "acme/no-config"))
    assert "has no config.json" in line and "pass a local folder" in line


def test_a_rate_limit_is_one_error_line(tmp_path: Path, hub: FakeHub) -> None:
    hub.add("acme/tiny-llama", tiny_files())
    hub.rate_limited = True  # huggingface_hub retries 429 five times (Retry-After: 0)
    line = one_error_line(kvbudget(env(tmp_path, hub), "plan", "--target", "acme/tiny-llama"))
    assert "rate-limiting" in line and "HTTP 429" in line and "hf auth login" in line


def test_headers_refused_leave_the_inventory_figure_with_a_warning(
    tmp_path: Path, hub: FakeHub
) -> None:
    hub.add("acme/tiny-llama", tiny_files(), status={"model-00002-of-00002.safetensors": 429})
    data = plan_json(env(tmp_path, hub), "--target", "acme/tiny-llama")
    # the inventory's count: the norms in bf16, 5 x 64 x 2 B less than the headers
    assert data["budget"]["weights_bytes"] == TINY_HEADER_BYTES - 640
    assert data["weights_source"] == {"target": "inventory"}
    (note,) = [w for w in data["warnings"] if "weights counted from config.json" in w]
    assert "model-00002-of-00002.safetensors" in note and "HTTP 429" in note


def test_a_revision_and_the_table_say_where_the_figures_come_from(
    tmp_path: Path, hub: FakeHub
) -> None:
    hub.add("acme/tiny-llama", tiny_files())
    one_layer = {**TINY_CONFIG, "num_hidden_layers": 1}
    shards = tiny_shards()
    del shards["model-00002-of-00002.safetensors"]
    files = {"config.json": json.dumps(one_layer).encode(), **sharded(shards)}
    v1 = hub.add("acme/tiny-llama", files, ref="v1")
    script = (
        "import sys, kvbudget; p = kvbudget.plan('acme/tiny-llama@v1', max_seq_len=4096, "
        "max_batch_size=4); print(p.target_revision, p.budget.weights_bytes, "
        "p.manager('target').num_layers)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env(tmp_path, hub)
    )
    assert done.returncode == 0, done.stderr
    # embeddings 32,768 + layer 0 74,240: the v1 commit's one shard
    assert done.stdout.split() == [v1, str(32_768 + 74_240), "1"]
    table = kvbudget(env(tmp_path, hub), "plan", "--target", "acme/tiny-llama@v1", *PLAN)
    assert table.returncode == 0, table.stderr
    assert f"target revision {v1}" in table.stdout
    assert "weights from target: safetensors headers" in table.stdout


def test_emitted_settings_pin_the_commits_the_plan_was_made_from(
    tmp_path: Path, hub: FakeHub
) -> None:
    target = hub.add("acme/tiny-llama", tiny_files(), ref="v1")
    draft = hub.add("acme/tiny-draft", tiny_files())
    args = ("--target", "acme/tiny-llama@v1", "--draft", "acme/tiny-draft")
    args += ("--spec", "draft-target", *PLAN)
    done = kvbudget(env(tmp_path, hub), "plan", *args, "--emit", "vllm")
    assert done.returncode == 0, done.stderr
    # vLLM: EngineArgs.revision and SpeculativeConfig.revision (vllm 0.33.0,
    # vllm/engine/arg_utils.py, vllm/config/speculative.py)
    assert f"--revision {target}" in done.stdout
    assert f'"revision": "{draft}"' in done.stdout
    done = kvbudget(env(tmp_path, hub), "plan", *args, "--emit", "sglang")
    assert done.returncode == 0, done.stderr
    # SGLang 0.5.23: ServerArgs.revision and .speculative_draft_model_revision, flags
    # named from the fields (srt/arg_groups/arg_utils.py, field_order.py)
    assert f"--revision {target}" in done.stdout
    assert f"--speculative-draft-model-revision {draft}" in done.stdout
    done = kvbudget(env(tmp_path, hub), "plan", *args, "--emit", "trtllm")
    assert done.returncode == 0, done.stderr
    # TensorRT-LLM: BaseLlmArgs.revision (tensorrt_llm/llmapi/llm_args.py); its
    # speculative_config has no revision, so the draft's commit is a warning
    assert f"revision: {target}" in done.stdout.splitlines()
    (warning,) = [w for w in done.stderr.splitlines() if "no revision setting" in w]
    assert f"--revision {draft}" in warning and "--draft DIR" in warning


def test_from_hub_reads_a_preset_id_from_the_hub(tmp_path: Path, hub: FakeHub) -> None:
    name = "meta-llama/Llama-3.2-1B"  # a preset; the Hub here serves the tiny Llama under it
    sha = hub.add(name, tiny_files())
    preset = plan_json(env(tmp_path, hub), "--target", name)
    assert preset["target_revision"] is None and hub.requests == []
    hub_plan = plan_json(env(tmp_path, hub), "--target", name, "--from-hub")
    assert hub_plan["target_revision"] == sha
    assert hub_plan["budget"]["weights_bytes"] == TINY_HEADER_BYTES


def test_planning_a_preset_makes_no_request_and_imports_no_hub_client(
    tmp_path: Path, hub: FakeHub
) -> None:
    hub.add("acme/tiny-llama", tiny_files())
    data = plan_json(env(tmp_path, hub), "--kv-budget", "40GiB")
    assert data["target"] == "meta-llama/Llama-3.1-8B-Instruct" and data["target_revision"] is None
    assert hub.requests == []  # HF_ENDPOINT pointed here, online: nothing asked
    script = (
        "import sys, kvbudget; kvbudget.plan(kv_budget='40GiB'); "
        "kvbudget.load_model('./' + sys.argv[1]); print('huggingface_hub' in sys.modules)"
    )
    folder = tmp_path / "local"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    done = subprocess.run(
        [sys.executable, "-c", script, "local"],
        capture_output=True,
        text=True,
        env=env(tmp_path, hub),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False" and hub.requests == []


def test_models_says_any_hub_id_works() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kvbudget", "models"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    assert "Any Hugging Face id also works: --target org/name[@revision]" in done.stdout
    listed = subprocess.run(
        [sys.executable, "-m", "kvbudget", "models", "--json"], capture_output=True, text=True
    )
    assert isinstance(json.loads(listed.stdout), list)  # the list shape consumers read


@pytest.mark.parametrize(
    ("text", "hub_id"),
    [
        ("org/name", True),
        ("org/name@v1.0", True),
        ("org/name@refs/pr/1", True),
        ("Qwen/Qwen3-30B-A3B", True),
        ("zzz", False),  # no org: a preset's short name or nothing
        ("a/b/c", False),
        ("org/na--me", False),  # the Hub refuses "--" and ".." in ids
        ("org/..x", False),
        ("-org/x", False),
        ("org/name@", False),
        ("org/name.", False),
    ],
)
def test_what_reads_as_a_hub_id(text: str, hub_id: bool) -> None:
    from kvbudget.hub import is_hub_id

    assert is_hub_id(text) is hub_id


def test_offline_by_default_in_tests_and_from_hub_checked() -> None:
    import kvbudget
    from kvbudget.errors import InvalidArgumentError, UnknownModelError

    # tests/conftest.py: HF_HUB_OFFLINE=1, an empty cache: a typed error, no request
    with pytest.raises(UnknownModelError, match="HF_HUB_OFFLINE=1 forbids downloading it"):
        kvbudget.load_model("acme/absent")
    with pytest.raises(InvalidArgumentError, match="from_hub must be True or False"):
        kvbudget.plan("acme/absent", from_hub="yes")  # type: ignore[arg-type]


def test_from_hub_on_a_preset_id_offline_does_not_call_it_no_preset() -> None:
    import kvbudget
    from kvbudget.errors import UnknownModelError

    assert "Qwen/Qwen3-8B" in kvbudget.list_presets()
    with pytest.raises(UnknownModelError) as caught:
        kvbudget.load_model("Qwen/Qwen3-8B", from_hub=True)  # conftest: offline, empty cache
    assert "no preset" not in str(caught.value)
    assert str(caught.value).startswith("Qwen/Qwen3-8B: its config.json is not in the")
