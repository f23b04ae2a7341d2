"""Command line: ``kvbudget``."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=False)


@app.callback(invoke_without_command=True)
def _root() -> None:
    """KV-cache budgets for speculative decoding."""


def main() -> None:
    """Entry point of the ``kvbudget`` script."""
    app()
