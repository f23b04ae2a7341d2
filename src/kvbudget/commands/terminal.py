"""Text from outside (paths, model names, error messages) made safe to print.

A folder name may hold terminal control sequences (``ESC [2J`` clears the screen) or rich
markup (``[red]``); printed raw, either rewrites what the user sees. :func:`printable`
shows every non-printable character as a Python escape (``\\x1b``, ``\\n``, ``\\u202e``),
so an error stays one visible line; :func:`markup_safe` also escapes rich markup, for
strings rich interprets (titles, cells, ``Console.print``).
"""

from __future__ import annotations

from rich.markup import escape


def _escaped(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with each character that is not printable (``str.isprintable``: control
    and format characters, line and paragraph separators, spaces other than ' ') written
    as its escape. Pure."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


def markup_safe(text: str) -> str:
    """:func:`printable` ``text`` with rich markup escaped (``[red]`` shown, not applied).
    Pure."""
    return escape(printable(text))
