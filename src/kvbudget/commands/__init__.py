"""Commands of the ``kvbudget`` CLI that live beside :mod:`kvbudget.cli`.

Each module defines one typer command function and imports its heavy dependencies
(torch, matplotlib) inside the function, so that ``kvbudget plan`` starts as fast as
before. :mod:`kvbudget.commands.terminal` makes outside text (paths, names, error
messages) safe to print.
"""
