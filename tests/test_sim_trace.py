"""Trace reading: the Azure and simple formats, streaming, errors, synthetic prefixes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.errors import InvalidArgumentError
from kvbudget.sim.trace import PrefixSynthesis, default_trace_path, read_trace

NONE = PrefixSynthesis(share=0.0)
AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:16:51.2224670,879,55
"""


def test_azure_rows_are_seconds_from_the_first(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(AZURE)
    rows = list(read_trace(path, prefixes=NONE))
    # 50.995169 - 46.680590 = 4.314579 s; 1 min 51.222467 - 46.680590 = 64.541877 s
    assert [r.arrival_s for r in rows] == pytest.approx([0.0, 4.314579, 64.541877], abs=1e-9)
    assert [(r.prompt_tokens, r.output_tokens) for r in rows] == [(374, 44), (396, 109), (879, 55)]
    assert [r.index for r in rows] == [0, 1, 2]
    assert all(r.prefix_group is None for r in rows)


def test_rate_scale_and_limit(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(AZURE)
    rows = list(read_trace(path, prefixes=NONE, rate_scale=2.0, limit=2))
    assert [r.arrival_s for r in rows] == pytest.approx([0.0, 4.314579 / 2])


def test_simple_csv_and_jsonl_agree(tmp_path: Path) -> None:
    csv_path = tmp_path / "t.csv"
    csv_path.write_text(
        "arrival_s,prompt_tokens,output_tokens,prefix_group\n0,10,5,sys\n1.5,20,6,\n"
    )
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(
        json.dumps({"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5, "prefix_group": "sys"})
        + "\n"
        + json.dumps({"arrival_s": 1.5, "prompt_tokens": 20, "output_tokens": 6})
        + "\n"
    )
    synth = PrefixSynthesis(share=0.0, base_tokens=4)
    a = list(read_trace(csv_path, prefixes=synth))
    b = list(read_trace(jsonl, prefixes=synth))
    assert a == b
    # crc32("sys") % 4 == 2: 4 x 3 = 12 tokens, cut to the prompt less one: 9
    assert (a[0].prefix_group, a[0].prefix_tokens) == ("sys", 9)
    assert (a[1].prefix_group, a[1].prefix_tokens) == (None, 0)


def test_the_trace_is_streamed(tmp_path: Path) -> None:
    # a bad last row is only met when iteration reaches it: rows are read one at a time
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n2,ten,5\n")
    rows = read_trace(path, prefixes=NONE)
    assert next(rows).index == 0
    assert next(rows).index == 1
    with pytest.raises(InvalidArgumentError, match=r"line 4: field 'prompt_tokens'"):
        next(rows)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b,c\n1,2,3\n", "unknown trace format"),
        ("arrival_s,prompt_tokens,output_tokens\n0,0,5\n", "line 2: prompt tokens must be >= 1"),
        ("arrival_s,prompt_tokens,output_tokens\n0,5,0\n", "line 2: output tokens must be >= 1"),
        (
            "arrival_s,prompt_tokens,output_tokens\n5,5,5\n1,5,5\n",
            "line 3: arrival 1.0 s is before",
        ),
        ("arrival_s,prompt_tokens,output_tokens\n-1,5,5\n", "'arrival_s' must be seconds >= 0"),
        ('{"arrival_s": 0, "prompt_tokens": 5}\n', "line 1: missing output_tokens"),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,abc,44\n",
            "line 2: field 'ContextTokens'",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,44\n",
            "line 2: field 'TIMESTAMP' must be",
        ),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,5\n", "expected 3 columns"),
    ],
)
def test_bad_traces_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InvalidArgumentError, match=message):
        list(read_trace(path, prefixes=NONE))


def test_byte_order_mark_is_read_and_binary_files_are_refused(tmp_path: Path) -> None:
    bom = tmp_path / "excel.csv"
    bom.write_bytes(b"\xef\xbb\xbfarrival_s,prompt_tokens,output_tokens\n0,5,5\n")
    assert [r.prompt_tokens for r in read_trace(bom, prefixes=NONE)] == [5]
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(InvalidArgumentError, match="not UTF-8 text"):
        list(read_trace(binary, prefixes=NONE))


def test_synthetic_prefixes_are_reproducible_and_bounded() -> None:
    synth = PrefixSynthesis(groups=8, share=0.5, base_tokens=256, seed=7)
    first = list(read_trace(default_trace_path(), prefixes=synth, limit=500))
    again = list(read_trace(default_trace_path(), prefixes=synth, limit=500))
    other = list(read_trace(default_trace_path(), prefixes=PrefixSynthesis(seed=8), limit=500))
    assert first == again
    assert first != other
    with_prefix = [r for r in first if r.prefix_group is not None]
    # about half of 500 (binomial: 250 +- 3 sigma = 34)
    assert 216 <= len(with_prefix) <= 284
    for r in with_prefix:
        g = int(r.prefix_group[1:])  # type: ignore[index]
        assert 0 <= g < 8
        assert r.prefix_tokens == min(256 * (1 + g % 4), r.prompt_tokens - 1)
        assert 0 < r.prefix_tokens < r.prompt_tokens


def test_the_shipped_trace_reads_whole() -> None:
    rows = read_trace(default_trace_path(), prefixes=NONE)
    count = sum(1 for _ in rows)
    assert count == 19366  # data/traces/README.md


@pytest.mark.parametrize("kwargs", [{"groups": 0}, {"share": 1.5}, {"base_tokens": 0}])
def test_bad_prefix_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidArgumentError):
        PrefixSynthesis(**kwargs)  # type: ignore[arg-type]
