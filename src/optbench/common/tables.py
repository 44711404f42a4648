"""Tables: every table a generated page (markdown) or a command (console) prints goes through ``tabulate``.

Cells are written exactly as given: numbers are formatted by the caller, with their units, and never re-parsed
(``disable_numparse``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

INDENT = "  "
"""A console table sits under the line that introduces it."""


def markdown_table(headers: Sequence[object], rows: Iterable[Sequence[object]]) -> list[str]:
    """A markdown table's lines (GitHub's pipe format): header, rule, one line per row. A row shorter than the
    header is padded with empty cells; a longer one is a caller's error."""
    cells = _cells(headers, rows, escape=True)
    return _tabulate(cells, [_text(h, escape=True) for h in headers], "github", None)


def console_table(headers: Sequence[object], rows: Iterable[Sequence[object]], align: Sequence[str]) -> list[str]:
    """A table for a terminal: columns aligned as ``align`` says (``left`` / ``right`` per column), indented."""
    if len(align) != len(headers):
        raise ValueError(f"{len(align)} alignments for {len(headers)} columns")
    lines = _tabulate(_cells(headers, rows, escape=False), [_text(h, escape=False) for h in headers], "plain", align)
    return [INDENT + line.rstrip() for line in lines]


def _tabulate(cells: list[list[str]], headers: list[str], fmt: str, align: Sequence[str] | None) -> list[str]:
    from tabulate import tabulate  # imported here: the NeMo container's job never prints a table

    return tabulate(
        cells, headers=headers, tablefmt=fmt, disable_numparse=True, colalign=tuple(align) if align else None
    ).splitlines()


def _cells(headers: Sequence[object], rows: Iterable[Sequence[object]], escape: bool) -> list[list[str]]:
    width = len(headers)
    out = []
    for row in rows:
        if len(row) > width:
            raise ValueError(f"a row of {len(row)} cells under a header of {width}: {list(row)[:3]}...")
        out.append([_text(c, escape) for c in row] + [""] * (width - len(row)))
    return out


def _text(value: object, escape: bool) -> str:
    """One cell's text. In markdown a pipe would end the cell, so it is escaped; a line break (a carriage return too)
    ends a row anywhere, and any other control character is a space."""
    text = one_line(str(value))
    return text.replace("|", "\\|") if escape else text


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_MARKDOWN_ACTIVE = re.compile(r"([\\`\[\]<>])")
"""What would make text a link, HTML, an autolink or code (a table's pipe is escaped by the table itself); emphasis
marks are left as they are, so that a reason reads as written (``*.log``)."""


def one_line(text: str) -> str:
    """``text`` with every control character (line breaks, carriage returns, escapes) replaced by a space."""
    return _CONTROL.sub(" ", text)


def code(text: object) -> str:
    """An identifier read from a run or a file (a run id, a recipe, a command, a path) as an inline code span on one
    line: nothing in it renders as a link, HTML or emphasis, and a backtick in it cannot end the span."""
    text = one_line(str(text))
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def escaped(text: object) -> str:
    """Text read from a run or a file, on one line, with every character markdown or HTML would act on escaped."""
    return _MARKDOWN_ACTIVE.sub(r"\\\1", one_line(str(text))).replace("&", "&amp;")
