"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(BLOCKS[index], f"README.md example {index}", "exec"), {})


def _deployer_commands() -> list[list[str]]:
    """The commands of the README's "Three deployer questions" block, as argv lists."""
    text = README.read_text()
    section = text.split("### Three deployer questions, answered", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert block is not None
    joined = block.group(1).replace("\\\n", " ")
    return [line.split()[1:] for line in joined.splitlines() if line.startswith("kvbudget ")]


def test_the_deployer_answers_hold() -> None:
    import json

    from typer.testing import CliRunner

    from kvbudget.cli import app

    answers = []
    for argv in _deployer_commands():
        result = CliRunner().invoke(app, [*argv, "--json"])
        assert result.exit_code == 0, result.output
        answers.append(json.loads(result.stdout))
    rtx, draft_tp1, deepseek = answers
    # the figures the README prints beside each command
    assert rtx["capacity"]["tokens"] == 36864
    assert rtx["engine"]["log"][0].startswith("GPU KV cache size: 36,864 tokens")
    assert draft_tp1["capacity"]["tokens"] == 128864
    assert [(s["tp_ranks"], s["blocks"]) for s in draft_tp1["stages"]] == [
        ("0", 4027),
        ("1-3", 15985),
    ]
    assert (deepseek["capacity"]["tokens"], deepseek["capacity"]["total_tokens"]) == (
        633248,
        5065984,
    )
