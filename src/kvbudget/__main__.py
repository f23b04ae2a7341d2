"""``python -m kvbudget``: the ``kvbudget`` command."""

from kvbudget.cli import main

main()
