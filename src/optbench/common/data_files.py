"""The one reader of the package's data files (``src/optbench/data``): each CSV is checked against its columns,
types and ranges, and each JSON against its top-level shape, before anything uses a value.

A data file is committed, never the user's input: one that cannot be read, lacks a column or a row, holds a value
out of its range (a ``nan`` bandwidth, a negative peak) or was cut short is a damaged checkout, said in one line
that names the file and how to restore it, never blamed on the field the user typed.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from optbench.common.errors import Problem, UserError

PACKAGE = "optbench.data"
MAX_DATA_BYTES = 32 << 20
"""The largest data file is a few MB (a release's presets): anything larger is not one of ours."""


@dataclass(frozen=True)
class Column:
    """What one CSV column holds."""

    kind: str = "text"
    """text, int, float or bool (``true`` / ``false``)."""
    low: float | None = None
    high: float | None = None
    """The range of a number (both ends included)."""
    optional: bool = False
    """Whether the cell may be empty (read as None)."""
    choices: tuple[str, ...] = ()
    """The words a text column may hold (empty: any one line of text)."""


TEXT = Column()


def whole(low: float, high: float, optional: bool = False) -> Column:
    return Column("int", low, high, optional)


def number(low: float, high: float, optional: bool = False) -> Column:
    return Column("float", low, high, optional)


def listed(cell: str, value: str) -> bool:
    """Whether a cell that lists ids (space-separated, or ``*`` for every one) names ``value``."""
    return cell == "*" or value in cell.split()


class DamagedData(UserError):
    """A package data file that is not as committed."""


def data_path(name: str) -> Path:
    """Where the package's data file ``name`` (``gpus.csv``, ``bridge/containers.json``) lies."""
    return Path(str(resources.files(PACKAGE).joinpath(name)))


def damaged(name: str, what: str) -> DamagedData:
    """The one-line error for the package data file ``name``: what is wrong, and how to restore it."""
    from optbench.common.checkout import is_checkout

    path = data_path(name)
    checkout = path.parents[len(Path(name).parts) + 2]  # <checkout>/src/optbench/data/<name>
    if is_checkout(checkout):
        shown = path.relative_to(checkout)
        fix = f"this checkout is damaged: restore the file with git checkout -- {shown}"
    else:
        shown, fix = path, "this installation is damaged: reinstall optbench"
    return DamagedData(Problem(str(shown), f"{what}; {fix}"))


def _text(name: str) -> str:
    path = data_path(name)
    try:
        if not path.is_file():
            raise damaged(name, "is missing or not a file")
        if path.stat().st_size > MAX_DATA_BYTES:
            raise damaged(name, f"is over {MAX_DATA_BYTES >> 20} MB")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise damaged(name, "is not UTF-8 text") from None
    except OSError as err:
        raise damaged(name, f"cannot be read ({err.strerror or type(err).__name__})") from None
    if not text.strip():
        raise damaged(name, "is empty")
    if "\x00" in text:
        raise damaged(name, "holds NUL bytes (binary, not text)")
    if not text.endswith("\n"):
        raise damaged(name, "does not end in a line break: it was cut short")
    return text


def _cell(text: str, column: Column) -> Any:
    """The typed value of one cell; ValueError says why it is not one."""
    text = text.strip()
    if not text:
        if column.optional:
            return None
        raise ValueError("is empty")
    if column.kind == "text":
        if column.choices and text not in column.choices:
            raise ValueError(f"is not one of {', '.join(column.choices)}")
        return text
    if column.kind == "bool":
        if text not in ("true", "false"):
            raise ValueError("is not true or false")
        return text == "true"
    try:
        value: float = int(text) if column.kind == "int" else float(text)
    except ValueError:
        raise ValueError(f"is not {'a whole number' if column.kind == 'int' else 'a number'}") from None
    if (
        not math.isfinite(value)
        or (column.low is not None and value < column.low)
        or (column.high is not None and value > column.high)
    ):
        raise ValueError(f"is not a finite number from {column.low:g} to {column.high:g}")
    return value


def read_table(name: str, columns: Mapping[str, Column]) -> tuple[dict[str, Any], ...]:
    """Every row of the package's CSV ``name`` with each of ``columns`` typed (other columns are kept as text); a
    damaged file (unreadable, cut short, no rows, a column missing, a value out of its domain) is one line."""
    return _read_table(name, tuple(columns.items()))


@lru_cache(maxsize=None)
def _read_table(name: str, columns: tuple[tuple[str, Column], ...]) -> tuple[dict[str, Any], ...]:
    try:
        reader = csv.DictReader(io.StringIO(_text(name), newline=""))
        missing = [c for c, _ in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise damaged(name, f"lacks the column(s) {', '.join(missing)}")
        rows = []
        for row in reader:
            if None in row or None in row.values():
                raise damaged(
                    name, f"line {reader.line_num} has {'more' if None in row else 'fewer'} cells than the header"
                )
            typed = dict(row)
            for column, spec in columns:
                try:
                    typed[column] = _cell(row[column], spec)
                except ValueError as err:
                    raise damaged(name, f"line {reader.line_num}, {column}: {row[column][:40]!r} {err}") from None
            rows.append(typed)
    except csv.Error as err:
        raise damaged(name, f"is not a readable CSV file ({err})") from None
    if not rows:
        raise damaged(name, "holds no rows (only a header, or nothing)")
    return tuple(rows)


@lru_cache(maxsize=None)
def read_json(name: str, keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """The package's JSON file ``name`` (an object holding ``keys``); a damaged one is one line."""
    try:
        data = json.loads(_text(name))
    except (ValueError, RecursionError) as err:
        raise damaged(name, f"is not JSON ({' '.join(str(err).split())[:80]})") from None
    if not isinstance(data, dict):
        raise damaged(name, f"holds a {type(data).__name__}, not the object it was written as")
    missing = [key for key in keys if key not in data]
    if missing:
        raise damaged(name, f"lacks {', '.join(missing)}")
    return data
