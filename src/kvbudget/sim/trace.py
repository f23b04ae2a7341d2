"""Request traces: reading them as a stream, and the shared prefixes given to them.

Formats (:func:`read_trace` picks one by the header):

* **Azure LLM inference trace** CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``,
  timestamps ``YYYY-MM-DD HH:MM:SS[.fraction]`` (UTC); arrival seconds are counted from
  the first row.
* **simple** CSV or JSONL: ``arrival_s, prompt_tokens, output_tokens[, prefix_group]``
  (CSV with that header; JSONL one object per line with those keys). ``prefix_group``
  names requests that start with the same prefix (any string; empty or absent: none).

Rows are read one at a time (:func:`read_trace` is a generator) from one open stream,
the format sniffed from its first non-blank line (blank lines before it are skipped):
memory does not grow with the trace. Arrivals must not go backwards; a bad row raises
:class:`~kvbudget.errors.InvalidArgumentError` naming the file, the line and the field,
and so does a line no trace has: a CSV field over csv's 128 KiB limit, a JSON number of
more than 4,300 digits (Python's limit), JSON nested too deeply to parse, or a
``prefix_group`` name over :data:`MAX_PREFIX_GROUP_CHARS` characters.

``rate_scale`` (``--rate-scale``) divides arrival times and lies in
[:data:`MIN_RATE_SCALE`, :data:`MAX_RATE_SCALE`] = [10^-3, 10^6]. Arrival seconds are
floats that the replay's clock adds step times to: at 10^-3 a 12-day trace (10^6 s) ends
at 10^9 s, where a float still resolves 2^-23 s (0.12 us), finer than the roofline's
shortest step; at 10^-300 arrivals reach 10^303 s, a step added to them changes nothing,
and every TTFT came out 0. At 10^6 a day-long trace arrives within 0.09 s, all at once
as at any larger scale; infinity or NaN would print as invalid JSON.

A trace from a pipe (``-`` for standard input, ``/dev/stdin``, a FIFO, ``<(...)``) can be
read only once, but a simulation reads its trace once per policy:
:func:`replayable_trace` copies such a stream, read once, to a temporary file that lives
as long as the simulation.

Shared prefixes (:class:`PrefixSynthesis`): a trace without ``prefix_group`` gets them
synthesised, reproducibly from ``seed``: each request, in trace order, draws one uniform
number; with probability ``share`` it belongs to one of ``groups`` groups (uniform), and
group ``g`` is a prefix of ``base_tokens x (1 + g mod 4)`` tokens (256, 512, 768, 1024
with the defaults: system prompts and few-shot headers), cut to the prompt length less
one token. A trace's own ``prefix_group`` comes with no length: the group's prefix is
then ``base_tokens x (1 + hash mod 4)`` tokens, the hash a stable CRC-32 of its name.
"""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import stat
import sys
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from kvbudget.errors import InvalidArgumentError

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
SIMPLE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
STDIN = "-"  # the trace path that means standard input
MAX_PREFIX_GROUP_CHARS = 1024  # characters of a prefix_group name
_SHOWN_CHARS = 40  # characters of a bad value quoted in a message
_COPY_CHUNK_BYTES = 1 << 20  # bytes per read when a stream is copied
MIN_RATE_SCALE = 1e-3  # --rate-scale range (module docstring: why)
MAX_RATE_SCALE = 1e6


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace: when it arrives and how many tokens it reads and writes.

    ``index`` is its position in the trace (0-based); ``prefix_group`` the shared prefix
    it starts with (None: none) and ``prefix_tokens`` that prefix's length (0 with none;
    always less than ``prompt_tokens``).
    """

    index: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prefix_group: str | None = None
    prefix_tokens: int = 0


@dataclass(frozen=True, kw_only=True)
class PrefixSynthesis:
    """How shared prefixes are given to a trace that has none (module docstring).

    ``share`` of the requests (0 to 1) start with one of ``groups`` prefixes of
    ``base_tokens x (1 + g mod 4)`` tokens; ``seed`` makes the draw reproducible.
    """

    groups: int = 8
    share: float = 0.5
    base_tokens: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if type(self.groups) is not int or self.groups < 1:
            raise InvalidArgumentError(f"--prefix-groups must be an int >= 1, got {self.groups!r}")
        if not 0.0 <= self.share <= 1.0:
            raise InvalidArgumentError(f"--prefix-share must be in [0, 1], got {self.share!r}")
        if type(self.base_tokens) is not int or self.base_tokens < 1:
            raise InvalidArgumentError(
                f"--prefix-tokens must be an int >= 1, got {self.base_tokens!r}"
            )

    def group_tokens(self, group: int) -> int:
        """Tokens of synthetic group ``group``'s prefix (before the per-prompt cut)."""
        return self.base_tokens * (1 + group % 4)


def default_trace_path() -> Path:
    """The shipped Azure conversation trace (CC-BY 4.0; see ``data/traces/README.md``)."""
    return (
        Path(__file__).resolve().parents[1]
        / "data"
        / "traces"
        / "azure-llm-inference-2023-conv.csv"
    )


def read_trace(
    path: str | Path,
    *,
    prefixes: PrefixSynthesis | None = None,
    rate_scale: float = 1.0,
    limit: int | None = None,
    name: str | None = None,
) -> Iterator[TraceRequest]:
    """The requests of the trace at ``path``, one at a time, in arrival order.

    ``rate_scale`` divides every arrival time (2.0: twice the request rate); ``limit``
    stops after that many requests. Requests of a trace without prefix groups get them
    from ``prefixes`` (default :class:`PrefixSynthesis()`); pass
    ``PrefixSynthesis(share=0.0)`` for none. ``name`` is what messages call the trace
    (default: ``path``). The file is opened when iteration starts and read once.

    Raises:
        InvalidArgumentError: an unknown format, a bad row (file, line and field named),
            arrivals out of order, or a bad ``rate_scale``/``limit``.
        OSError: the file cannot be read.
    """
    require_rate_scale(rate_scale)
    if limit is not None and (type(limit) is not int or limit < 0):
        raise InvalidArgumentError(f"limit must be an int >= 0, got {limit!r} (--limit)")
    synth = prefixes if prefixes is not None else PrefixSynthesis()
    return _read(Path(path), name or str(path), synth, float(rate_scale), limit)


def require_rate_scale(value: object) -> float:
    """``value`` as a rate scale: a number in [:data:`MIN_RATE_SCALE`,
    :data:`MAX_RATE_SCALE`] (module docstring). Raises InvalidArgumentError."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not MIN_RATE_SCALE <= value <= MAX_RATE_SCALE
    ):
        raise InvalidArgumentError(
            f"rate_scale must be a number from {MIN_RATE_SCALE:g} to {MAX_RATE_SCALE:g}, got "
            f"{value!r} (--rate-scale): a smaller one stretches arrival times past what the "
            "replay's clock (float seconds) can add a step to; a larger one makes every "
            "request arrive at once anyway"
        )
    return float(value)


@contextmanager
def replayable_trace(path: str | Path) -> Iterator[Path]:
    """A path from which the trace at ``path`` can be read again and again: ``path``
    itself for a regular file; for :data:`STDIN` (``-``), a pipe, a FIFO, a device or a
    path under ``/dev`` or ``/proc``, a temporary copy of the stream, read once (in
    1 MiB chunks: memory stays flat, the disk holds the trace), removed on exit.

    Raises:
        InvalidArgumentError: ``-`` when standard input is a terminal.
        OSError: the trace cannot be opened or the copy not written.
    """
    if not _is_stream(path):
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="kvbudget-trace-") as tmp:
        copy = Path(tmp) / "trace"
        if str(path) == STDIN:
            if sys.stdin is None or sys.stdin.isatty():
                raise InvalidArgumentError(
                    "--trace -: standard input is a terminal; pipe a trace in "
                    "(kvbudget simulate --trace - < trace.csv)"
                )
            with copy.open("wb") as out:
                shutil.copyfileobj(sys.stdin.buffer, out, _COPY_CHUNK_BYTES)
        else:
            with Path(path).open("rb") as src, copy.open("wb") as out:
                shutil.copyfileobj(src, out, _COPY_CHUNK_BYTES)
        yield copy


def _is_stream(path: str | Path) -> bool:
    """Whether ``path`` names a trace that can be read only once (see
    :func:`replayable_trace`); False for a missing file (opening it says so)."""
    text = str(path)
    if text == STDIN or text.startswith(("/dev/", "/proc/")):
        return True
    try:
        return not stat.S_ISREG(os.stat(text).st_mode)
    except OSError:
        return False


def _read(
    path: Path, label: str, synth: PrefixSynthesis, rate_scale: float, limit: int | None
) -> Iterator[TraceRequest]:
    rng = random.Random(synth.seed)
    last = 0.0
    for count, (line, arrival, prompt, output, group) in enumerate(_rows(path, label)):
        if limit is not None and count >= limit:
            return
        if prompt < 1 or output < 1 or arrival < last:
            where = f"{label}: line {line}"
            if prompt < 1:
                raise InvalidArgumentError(f"{where}: prompt tokens must be >= 1, got {prompt}")
            if output < 1:
                raise InvalidArgumentError(f"{where}: output tokens must be >= 1, got {output}")
            raise InvalidArgumentError(
                f"{where}: arrival {arrival} s is before the previous row's {last} s; sort "
                "the trace by arrival"
            )
        if group is not None and len(group) > MAX_PREFIX_GROUP_CHARS:
            raise InvalidArgumentError(
                f"{label}: line {line}: prefix_group has {len(group)} characters, more than "
                f"{MAX_PREFIX_GROUP_CHARS}; a group is a short name"
            )
        last = arrival
        draw = rng.random()
        if group is None and draw < synth.share:
            g = rng.randrange(synth.groups)
            group, length = f"g{g}", synth.group_tokens(g)
        elif group is not None:
            length = synth.base_tokens * (1 + zlib.crc32(group.encode()) % 4)
        else:
            length = 0
        shared = min(length, prompt - 1)
        yield TraceRequest(
            index=count,
            arrival_s=arrival / rate_scale,
            prompt_tokens=prompt,
            output_tokens=output,
            prefix_group=group if shared > 0 else None,
            prefix_tokens=shared if shared > 0 else 0,
        )


Row = tuple[int, float, int, int, str | None]  # line, arrival_s, prompt, output, group


def _rows(path: Path, label: str) -> Iterator[Row]:
    try:
        yield from _decoded_rows(path, label)
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(
            f"{label}: not UTF-8 text (byte {exc.start}: {exc.reason}); a trace is a CSV or "
            "JSONL file, see kvbudget simulate --help"
        ) from None


def _decoded_rows(path: Path, label: str) -> Iterator[Row]:
    # utf-8-sig: a CSV saved by a spreadsheet starts with a byte-order mark
    with path.open(newline="", encoding="utf-8-sig") as f:
        # the format is sniffed from the first non-blank line; the rows follow it in
        # the same stream, which is read once
        line, first = next(((n, t) for n, t in enumerate(f, start=1) if t.strip()), (0, ""))
        if not first:
            raise InvalidArgumentError(
                f"{label}: empty trace (no header, no rows); see kvbudget simulate --help"
            )
        if first.lstrip().startswith("{"):
            yield from _jsonl_rows(label, line, first, f)
            return
        names = [h.strip() for h in _header(label, line, first)]
        if all(c in names for c in AZURE_COLUMNS):
            yield from _azure_rows(label, names, f, line + 1)
        elif all(c in names for c in SIMPLE_COLUMNS):
            yield from _simple_rows(label, names, f, line + 1)
        else:
            raise InvalidArgumentError(
                f"{label}: unknown trace format (header {_shown(first.strip())}); expected "
                f"the Azure columns {','.join(AZURE_COLUMNS)} or {','.join(SIMPLE_COLUMNS)}"
                "[,prefix_group] (CSV) or JSONL objects with those keys"
            )


def _header(label: str, line: int, first: str) -> list[str]:
    try:
        return next(csv.reader([first]), [])
    except csv.Error as exc:
        raise _csv_error(f"{label}: line {line}", exc) from None


def _csv_error(where: str, exc: csv.Error) -> InvalidArgumentError:
    """The typed error of a line the csv module cannot read."""
    if "field limit" in str(exc):
        return InvalidArgumentError(
            f"{where}: a CSV field is longer than {csv.field_size_limit():,} characters "
            "(csv's limit); a trace field is a number or a short prefix group name"
        )
    return InvalidArgumentError(f"{where}: not a CSV line ({exc})")


def _shown(value: object) -> str:
    """``repr(value)``, cut to :data:`_SHOWN_CHARS` characters for a message."""
    text = repr(value)
    if len(text) <= _SHOWN_CHARS:
        return text
    return f"{text[:_SHOWN_CHARS]}... ({len(text)} characters)"


def _int(value: object, where: str, field: str) -> int:
    try:
        text = str(value).strip()
        return int(text)
    except ValueError:  # also more digits than int() reads (4,300)
        raise InvalidArgumentError(
            f"{where}: field {field!r} must be a whole number of tokens, got {_shown(value)}"
        ) from None


def _float(value: object, where: str, field: str) -> float:
    try:
        out = float(str(value).strip())
    except ValueError:
        out = float("nan")
    if out != out or out < 0 or out == float("inf"):
        raise InvalidArgumentError(
            f"{where}: field {field!r} must be seconds >= 0, got {_shown(value)}"
        )
    return out


def _csv_rows(
    label: str, names: list[str], f: Iterator[str], start: int
) -> Iterator[tuple[int, list[str]]]:
    """The non-empty data rows after the header (on line ``start - 1``): line number,
    cells. Raises InvalidArgumentError for a row with fewer cells
    than the header, or one the csv module cannot read."""
    reader = csv.reader(f)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise _csv_error(f"{label}: line {start + reader.line_num - 1}", exc) from None
        if not row:
            continue
        line = start + reader.line_num - 1
        if len(row) < len(names):
            raise InvalidArgumentError(
                f"{label}: line {line}: expected {len(names)} columns, got {len(row)}"
            )
        yield line, row


def _azure_rows(label: str, names: list[str], f: Iterator[str], start: int) -> Iterator[Row]:
    ts, ctx, gen = (names.index(c) for c in AZURE_COLUMNS)
    begin: datetime | None = None
    for line, row in _csv_rows(label, names, f, start):
        try:
            stamp = _timestamp(row[ts])
        except ValueError:
            raise InvalidArgumentError(
                f"{label}: line {line}: field 'TIMESTAMP' must be "
                f"'YYYY-MM-DD HH:MM:SS[.fraction]', got {_shown(row[ts])}"
            ) from None
        try:  # int() reads what _int reads (surrounding blanks included)
            prompt, output = int(row[ctx]), int(row[gen])
        except ValueError:  # _int names the field
            where = f"{label}: line {line}"
            prompt = _int(row[ctx], where, AZURE_COLUMNS[1])
            output = _int(row[gen], where, AZURE_COLUMNS[2])
        if begin is None:
            begin = stamp
        yield line, (stamp - begin).total_seconds(), prompt, output, None


def _timestamp(text: str) -> datetime:
    """An Azure trace timestamp; its fraction has 7 digits, more than ``datetime`` reads."""
    head, _, frac = text.strip().partition(".")
    if len(head) != 19 or head[10] != " " or (frac and not frac.isdigit()):
        raise ValueError(text)
    # fromisoformat reads 6 fraction digits on every supported Python
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}")


def _simple_rows(label: str, names: list[str], f: Iterator[str], start: int) -> Iterator[Row]:
    cols = [names.index(c) for c in SIMPLE_COLUMNS]
    group_col = names.index("prefix_group") if "prefix_group" in names else None
    for line, row in _csv_rows(label, names, f, start):
        where = f"{label}: line {line}"
        arrival = _float(row[cols[0]], where, "arrival_s")
        group = row[group_col].strip() if group_col is not None else ""
        yield (
            line,
            arrival,
            _int(row[cols[1]], where, "prompt_tokens"),
            _int(row[cols[2]], where, "output_tokens"),
            group or None,
        )


def _jsonl_rows(label: str, start: int, first: str, f: Iterator[str]) -> Iterator[Row]:
    def lines() -> Iterator[tuple[int, str]]:
        yield start, first
        yield from enumerate(f, start=start + 1)

    for line, text in lines():
        if not text.strip():
            continue
        where = f"{label}: line {line}"
        obj = _json_object(text, where)
        missing = [c for c in SIMPLE_COLUMNS if c not in obj]
        if missing:
            raise InvalidArgumentError(f"{where}: missing {', '.join(missing)}")
        group = obj.get("prefix_group")
        yield (
            line,
            _float(obj["arrival_s"], where, "arrival_s"),
            _int(obj["prompt_tokens"], where, "prompt_tokens"),
            _int(obj["output_tokens"], where, "output_tokens"),
            None if group in (None, "") else str(group),
        )


def _json_object(text: str, where: str) -> dict[str, object]:
    """The JSON object on one trace line. Raises InvalidArgumentError for anything else,
    a number of more digits than Python reads, or nesting deeper than it parses."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"{where}: not a JSON object ({exc.msg})") from None
    except ValueError:  # int() refuses more than 4,300 digits
        raise InvalidArgumentError(
            f"{where}: a number of more than 4,300 digits; token counts and arrival seconds "
            "are short numbers"
        ) from None
    except RecursionError:
        raise InvalidArgumentError(
            f"{where}: JSON nested too deeply to read; a trace line is one flat object"
        ) from None
    if not isinstance(obj, dict):
        raise InvalidArgumentError(f"{where}: expected a JSON object per line")
    return obj
