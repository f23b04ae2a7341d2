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


SIMPLE = "arrival_s,prompt_tokens,output_tokens"


def _message(path: Path) -> str:
    with pytest.raises(InvalidArgumentError) as info:
        list(read_trace(path, prefixes=NONE))
    return str(info.value)


def test_a_csv_field_over_csvs_limit_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    # 140,000 characters > csv's 131,072 (128 KiB) field limit
    path.write_text(f"{SIMPLE},prefix_group\n0,10,5,sys\n1,10,5,{'x' * 140_000}\n")
    assert _message(path) == (
        f"{path}: line 3: a CSV field is longer than 131,072 characters (csv's limit); a "
        "trace field is a number or a short prefix group name"
    )


def test_a_json_number_of_more_than_4300_digits_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    path.write_text(
        '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5}\n'
        '{"arrival_s": 0, "prompt_tokens": ' + "1" * 5000 + ', "output_tokens": 5}\n'
    )
    assert _message(path) == (
        f"{path}: line 2: a number of more than 4,300 digits; token counts and arrival "
        "seconds are short numbers"
    )


def test_deeply_nested_json_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    # 100,000 levels: far past the parser's recursion limit
    nested = "[" * 100_000 + "]" * 100_000
    path.write_text(f'{{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5, "x": {nested}}}\n')
    assert _message(path) == (
        f"{path}: line 1: JSON nested too deeply to read; a trace line is one flat object"
    )


def test_a_long_bad_value_is_quoted_short(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"{SIMPLE}\n0,{'9' * 5000},5\n")  # more digits than int() reads
    # repr is 5002 characters (quotes): the first 40 are shown
    assert _message(path) == (
        f"{path}: line 2: field 'prompt_tokens' must be a whole number of tokens, got "
        f"'{'9' * 39}... (5002 characters)"
    )


def test_a_prefix_group_name_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"{SIMPLE},prefix_group\n0,10,5,{'g' * 1025}\n")
    assert _message(path) == (
        f"{path}: line 2: prefix_group has 1025 characters, more than 1024; a group is a short name"
    )


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_leading_blank_lines_are_skipped(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"t.{suffix}"
    if suffix == "csv":
        path.write_text(f"\n  \n{SIMPLE}\n0,10,5\n\n1,12,6\n0,1,1\n")
    else:
        row = '{{"arrival_s": {}, "prompt_tokens": {}, "output_tokens": {}}}\n'
        path.write_text(
            "\n\n" + row.format(0, 10, 5) + "\n" + row.format(1, 12, 6) + row.format(0, 1, 1)
        )
    rows = read_trace(path, prefixes=NONE)
    assert [(r.prompt_tokens, r.output_tokens) for r in (next(rows), next(rows))] == [
        (10, 5),
        (12, 6),
    ]
    # the third row is on line 7 of the file (2 blank lines, the header, a blank line
    # for the CSV; 2 blank lines and a blank line for the JSONL, which has no header)
    line = 7 if suffix == "csv" else 6
    with pytest.raises(InvalidArgumentError) as info:
        next(rows)
    assert str(info.value).startswith(f"{path}: line {line}: arrival 0.0 s is before")


def test_an_empty_trace_says_so(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("\n\n  \n")
    assert (
        _message(path) == f"{path}: empty trace (no header, no rows); see kvbudget simulate --help"
    )


def test_a_stream_is_copied_once_and_a_file_is_not(tmp_path: Path) -> None:
    import os
    import threading

    from kvbudget.sim.trace import replayable_trace

    text = f"{SIMPLE}\n0,10,5\n1,12,6\n"
    regular = tmp_path / "t.csv"
    regular.write_text(text)
    with replayable_trace(regular) as path:
        assert path == regular
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=(text,), daemon=True)
    writer.start()
    with replayable_trace(fifo) as path:
        writer.join()
        assert path != fifo
        # read twice (the count, then each policy's replay): the same rows each time
        first = list(read_trace(path, prefixes=NONE, name=str(fifo)))
        assert first == list(read_trace(path, prefixes=NONE, name=str(fifo)))
        assert [r.prompt_tokens for r in first] == [10, 12]
    assert not path.exists()  # the copy is removed
