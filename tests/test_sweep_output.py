"""The plans' warnings reach the user in the table as in --json: ``kvbudget sweep``
(the shown rows' warnings, each once) and ``kvbudget simulate`` (the plan's)."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from kvbudget.cli import app

RUNNER = CliRunner()
ENV = {"COLUMNS": "200", "NO_COLOR": "1", "HF_HUB_OFFLINE": "1"}


def run(*args: str) -> Any:
    result = RUNNER.invoke(app, list(args), env=ENV)
    assert result.exit_code == 0, result.output
    return result


def _flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long lines


def test_the_sweep_table_shows_the_warnings_its_json_rows_carry() -> None:
    args = ["sweep", "--engine", "kvbudget,trtllm", "--gpu-count", "1,2", "--top", "100"]
    doc = json.loads(run(*args, "--json").stdout)
    ranked = [r for r in doc["rows"] if r["status"] in ("ok", "slo")]
    warnings = {w for r in ranked for w in r["warnings"]}
    assert warnings  # the default target at 131,072 tokens: at least one per row
    table = _flat(run(*args).stdout)
    for w in warnings:
        assert _flat(w) in table, w
    # each warning once, with the ranks (the JSON's row order) it holds for
    first = ranked[0]["warnings"][0]
    ranks = [i for i, r in enumerate(ranked, 1) if first in r["warnings"]]
    assert table.count(_flat(first)) == 1
    assert f"warning (#{', #'.join(map(str, ranks))}): {_flat(first)}" in table


def test_the_simulate_table_shows_the_plans_warnings() -> None:
    args = ["simulate", "--limit", "5", "--policies", "kvbudget", "--jobs", "1"]
    doc = json.loads(run(*args, "--json").stdout)
    assert doc["plan"]["warnings"]
    table = _flat(run(*args).stdout)
    for w in doc["plan"]["warnings"]:
        assert f"warning: {_flat(w)}" in table, w
