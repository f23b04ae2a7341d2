"""``kvbudget run``: the reference speculative-decoding engine on tiny models."""

from __future__ import annotations

import typer


def run_command() -> None:
    """Generate with the reference engine (not built yet)."""
    typer.echo("kvbudget run: the reference engine is not built yet", err=True)
    raise typer.Exit(2)
