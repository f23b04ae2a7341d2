"""Prices per GPU-hour, from a CSV file the user writes (kvbudget ships none: prices
are the user's, in the user's currency).

Format: a header ``gpu,price_per_gpu_hour``, then one row per GPU preset::

    gpu,price_per_gpu_hour
    H200,3.50
    H100,2.20

GPU names are matched as ``--gpu`` matches them (:func:`kvbudget.get_gpu`) and keyed by
the preset's short name. Blank lines and lines starting with ``#`` are skipped. A bad
row (an unknown GPU, a price that is not a finite number > 0, a GPU given twice, a row
of the wrong width) raises InvalidArgumentError naming the file and line.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from kvbudget.errors import InvalidArgumentError
from kvbudget.gpus import get_gpu

PRICE_COLUMNS = ("gpu", "price_per_gpu_hour")


def read_prices(path: str | Path) -> dict[str, float]:
    """Price per GPU-hour by GPU preset short name (module docstring). Raises
    InvalidArgumentError for a bad file or row, OSError when it cannot be read."""
    label = str(path)
    try:
        # utf-8-sig: a CSV saved by a spreadsheet starts with a byte-order mark
        with Path(path).open(encoding="utf-8-sig", newline="") as f:
            lines = [
                (n, line)
                for n, line in enumerate(f, 1)
                if line.strip() and not line.startswith("#")
            ]
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(
            f"--prices {label}: not UTF-8 text (byte {exc.start}: {exc.reason}); write a "
            f"CSV with the header {','.join(PRICE_COLUMNS)}"
        ) from None
    if not lines:
        raise InvalidArgumentError(f"--prices {label}: empty; write {','.join(PRICE_COLUMNS)}")
    rows = list(csv.reader(line for _, line in lines))
    header = [c.strip().lower() for c in rows[0]]
    if tuple(header) != PRICE_COLUMNS:
        raise InvalidArgumentError(
            f"--prices {label} line {lines[0][0]}: header must be "
            f"{','.join(PRICE_COLUMNS)}, got {','.join(rows[0])}"
        )
    prices: dict[str, float] = {}
    for (number, _), cells in zip(lines[1:], rows[1:], strict=True):
        where = f"--prices {label} line {number}"
        if len(cells) != len(PRICE_COLUMNS):
            raise InvalidArgumentError(f"{where}: {len(cells)} fields, expected 2 (gpu,price)")
        try:
            gpu = get_gpu(cells[0].strip()).short_name
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{where}: {exc}") from None
        try:
            price = float(cells[1])
        except ValueError:
            price = math.nan
        if not (math.isfinite(price) and price > 0):
            raise InvalidArgumentError(
                f"{where}: price {cells[1].strip()!r} must be a number > 0 (per GPU-hour)"
            )
        if gpu in prices:
            raise InvalidArgumentError(f"{where}: {gpu} has a price already")
        prices[gpu] = price
    if not prices:
        raise InvalidArgumentError(f"--prices {label}: a header and no price rows")
    return prices


__all__ = ["PRICE_COLUMNS", "read_prices"]
