"""``kvbudget run``: the demo end to end, its JSON and table, and one-line errors."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli import app
from kvbudget.commands.run import _prompts

pytest.importorskip("torch")
pytest.importorskip("safetensors")

RUNNER = CliRunner()
SMALL = ["--requests", "4", "--prompt-len", "10", "--shared-prefix", "8", "--max-new-tokens", "6"]


def run(*args: str) -> Any:
    return RUNNER.invoke(app, ["run", *args], env={"COLUMNS": "120", "NO_COLOR": "1"})


@pytest.mark.parametrize("spec", ["draft-target", "eagle3", "none"])
def test_json_reports_the_run(spec: str) -> None:
    result = run("--json", "--spec", spec, *SMALL)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    stats = data["stats"]
    assert data["spec"] == spec
    assert stats["requests"] == 4 and stats["generated_tokens"] == 4 * 6
    assert [len(o) for o in data["outputs"]] == [6] * 4
    # 4 prompts share 8 tokens = 2 blocks of 4: the three admitted after the first reuse
    # them; an EAGLE3 head's K/V at a position depends on the next token, so the cache
    # hashes each block with the token after it (policy drop_last_block): block 1 hits
    # only where token 8, each prompt's own, matches. With seed 0 (vocabulary 256) the
    # 2nd and 3rd prompts both have token 8 = 71: 4 + 8 + 4 tokens
    assert [p[8] for p in _prompts(4, 10, 8, 256, 0)] == [183, 71, 71, 128]
    assert stats["prefix_hit_tokens"] == (4 + 8 + 4 if spec == "eagle3" else 3 * 8)
    for tiers in stats["storage"].values():
        for b in tiers.values():
            assert b["bytes"] + b["padding_bytes"] == b["plan_bytes"]
    assert (stats["proposed_tokens"] > 0) == (spec != "none")


def test_table_and_pressure() -> None:
    # 96 KiB: 98_304 / 2048 B per token (target + same-size draft) = 48 tokens = 12 blocks
    # of 4; sequences of 10 + 24 tokens need 9 blocks each, so requests preempt each other
    result = run(
        *SMALL[:6], "--max-new-tokens", "24", "--kv-budget", "96KiB", "--max-seq-len", "48"
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    data = json.loads(
        run("--json", *SMALL[:6], "--max-new-tokens", "24", "--kv-budget", "96KiB",
            "--max-seq-len", "48").stdout
    )  # fmt: skip
    assert data["stats"]["preemptions_swap"] > 0
    assert data["capacity"]["gpu_blocks"] == 12
    # the table shows the same run (same seed) as the JSON: 4 requests x 24 tokens
    stats = data["stats"]
    assert re.search(r"generated tokens\s*│\s*96\s*│", out)
    assert stats["generated_tokens"] == 96
    preempted = stats["preemptions_swap"] + stats["preemptions_recompute"]
    assert re.search(rf"preemptions\s*│\s*{preempted} \(swap {stats['preemptions_swap']}", out)
    # bytes per role and tier: 12 blocks x 4 tokens x 1024 B = 49,152 B on the GPU
    assert re.search(r"target\s*│\s*gpu\s*│\s*49,152\s*│\s*49,152", out)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--spec", "ngram"], "--spec must be one of"),
        (["--draft", "x"], "--draft needs --target"),
        (["--target", "/nonexistent", "--spec", "none"], "no config file"),
        (["--kv-budget", "1KiB"], "GPU budget"),
        (["--preempt", "drop"], "--preempt must be"),
        (["--device", "tpu"], "--device must be cpu or cuda"),
        (["--requests", "0"], "--requests"),
    ],
)
def test_mistakes_are_one_line_errors(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert result.output.startswith("error:") and message in result.output


def test_missing_torch_says_to_install_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    result = run(*SMALL)
    assert result.exit_code == 2
    assert "install the torch extra" in result.output and "Traceback" not in result.output


def test_the_cli_starts_without_importing_torch() -> None:
    import subprocess

    code = (
        "import sys, kvbudget.cli; print('torch' in sys.modules, 'kvbudget.engine' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_given_checkpoints_are_loaded(tmp_path: Any) -> None:
    from kvbudget.engine import write_demo_models

    models = write_demo_models(tmp_path, seed=3)
    args = ["--json", "--target", models.target, "--draft", models.small_draft, *SMALL]
    result = run(*args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["target"] == models.target and data["draft"] == models.small_draft
    assert data["stats"]["generated_tokens"] == 24


def test_error_lines_show_control_characters_escaped(tmp_path: Any) -> None:
    # issue #21: a folder named "[red]x<ESC>[2J" (ESC [2J clears the screen) whose index
    # names a shard outside it; the error line names the folder with ESC as \x1b
    from kvbudget.engine import write_demo_models

    models = write_demo_models(tmp_path, seed=0)
    weird = tmp_path / "[red]x\x1b[2J"
    Path(models.target).rename(weird)
    index = {"weight_map": {"model.embed_tokens.weight": "../x.safetensors"}}
    (weird / "model.safetensors.index.json").write_text(json.dumps(index))
    args = ["run", "--target", str(weird), "--spec", "none", *SMALL]
    result = RUNNER.invoke(app, args, env={"COLUMNS": "120"}, color=True)  # keeps ESC
    assert result.exit_code == 2
    assert "\x1b" not in result.output
    line = result.output.strip()
    assert line.startswith("error: ") and "\n" not in line
    assert "[red]x\\x1b[2J/model.safetensors.index.json" in line
    assert "'../x.safetensors', outside the checkpoint directory" in line


def test_terminal_text_is_escaped() -> None:
    from kvbudget.commands.terminal import markup_safe, printable

    assert printable("/tmp/[red]x\x1b[2J\n\u202e\x9b\U000e0001 é") == (
        "/tmp/[red]x\\x1b[2J\\x0a\\u202e\\x9b\\U000e0001 é"
    )
    assert printable("plain text") == "plain text"
    assert markup_safe("/tmp/[red]x\x1b") == "/tmp/\\[red]x\\x1b"
    from rich.console import Console

    console = Console(record=True, width=80, color_system=None)
    console.print(markup_safe("[red]x\x1b[2J"))
    assert console.export_text() == "[red]x\\x1b[2J\n"  # shown as typed, nothing applied
