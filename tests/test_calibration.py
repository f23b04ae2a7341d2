"""The non-KV estimate against the logged start-up figures of benchmarks/calibrate_memory.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "calibrate_memory.py"


def _calibration() -> ModuleType:
    spec = importlib.util.spec_from_file_location("calibrate_memory", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


CAL = _calibration()


def _errors(labels: str) -> dict[tuple[str, str], int]:
    """Rounded % error of every logged part of the rows whose label starts with one of
    ``labels``."""
    out = {}
    for p in CAL.POINTS:
        if p.label[0] in labels:
            for part, measured, estimate in CAL.rows(p):
                if measured is not None:
                    out[(p.label, part)] = round(CAL.error(measured, estimate) * 100)
    return out


def test_no_hybrid_row_is_under_estimated() -> None:
    # tolerance 0%: an estimate below a logged figure is an OOM once --emit vllm pins
    # --kv-cache-memory-bytes, so no hybrid row (H*, G*) may sit under its log
    errors = _errors("HG")
    assert len(errors) == 12
    assert min(errors.values()) >= 0, errors


def test_the_hybrid_rows_errors() -> None:
    assert _errors("HG") == {
        ("H1", "activation"): 39,
        ("H1", "cuda graphs"): 57,
        ("H2", "activation"): 25,
        ("H2", "cuda graphs"): 168,
        ("H3", "activation"): 21,
        ("H3", "cuda graphs"): 168,
        ("H4", "activation"): 16,
        ("H4", "cuda graphs"): 168,
        ("G1", "cuda graphs"): 37,
        ("G2", "cuda graphs"): 5,
        ("G3", "cuda graphs"): 13,
        ("G4", "cuda graphs"): 52,
    }


@pytest.mark.parametrize(
    ("row", "part", "error"),
    [
        ("V1", "activation", -11),
        ("V6", "activation", 3),
        ("V6", "cuda graphs", -22),
        ("V6", "runtime", 257),
        ("V8", "activation", 3),
        ("V8", "cuda graphs", 73),
        ("V8", "runtime", -4),
        ("V9", "activation", -13),
        ("V9", "cuda graphs", 6),
        ("V9", "runtime", -55),
        ("V7", "runtime", 5),
        ("V3", "runtime", 2),
        ("T1", "activation", 18),
        ("S4", "cuda graphs", -72),
    ],
)
def test_the_dense_rows_keep_their_errors(row: str, part: str, error: int) -> None:
    # the rows before the hybrid terms, as the README printed them: unchanged
    assert _errors("VTS")[(row, part)] == error
