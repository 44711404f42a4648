"""metrics.jsonl: one JSON object per optimizer step, appended and flushed as each step ends.

A process killed while appending can leave at most one incomplete last line (no trailing newline).
:func:`read_metrics` skips exactly that line and nothing else: a broken line anywhere before the last
is corruption and raises. :func:`repair_metrics` rewrites the file atomically without the partial
line and, when resuming, without the steps after the checkpoint (they are recomputed), so that a
resumed run appends without duplicating steps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from optbench.common.io import atomic_write_text, dumps_strict


def _parse(text: str, path: Path) -> tuple[list[dict[str, Any]], bool]:
    """Records of a metrics text and whether a partial last line was dropped."""
    lines = text.split("\n")
    partial = lines[-1] != ""  # text not ending in a newline: the last write was cut short
    records = []
    for number, line in enumerate(lines[:-1], start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as err:  # broken JSON, a number over Python's digit limit, too deep
            raise ValueError(
                f"{path}:{number}: corrupt metrics line ({getattr(err, 'msg', type(err).__name__)})"
            ) from err
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: a metrics line must be a JSON object, got a {type(record).__name__}")
        records.append(record)
    if partial:
        try:  # a complete record that only lacks its newline is kept
            record = json.loads(lines[-1])
        except (ValueError, RecursionError):
            record = None
        if isinstance(record, dict):
            records.append(record)
            partial = False
    return records, partial


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a metrics file (bytes that are not UTF-8 text at offset {err.start})") from err


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Every complete step record of a metrics.jsonl (an incomplete last line is ignored)."""
    source = Path(path)
    if not source.is_file():
        return []
    return _parse(_text(source), source)[0]


def repair_metrics(path: str | Path, keep_through_step: int | None = None) -> list[dict[str, Any]]:
    """Drop a partial last line and, if given, every record after ``keep_through_step``; returns what is kept."""
    target = Path(path)
    if not target.is_file():
        return []
    text = _text(target)
    records, partial = _parse(text, target)
    kept = [r for r in records if keep_through_step is None or int(r.get("step", 0)) <= keep_through_step]
    if partial or len(kept) != len(records) or (text and not text.endswith("\n")):
        atomic_write_text(target, "".join(dumps_strict(r) + "\n" for r in kept))
    return kept


class JsonlAppender:
    """Appends one record per line and flushes it to the OS, so a killed process loses no finished step."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a", encoding="utf-8")

    def append(self, record: dict[str, Any]) -> None:
        # One write call per line: the only possible tear is a missing tail of the last line.
        self._handle.write(dumps_strict(record) + "\n")
        self._handle.flush()

    def close(self) -> None:
        if not self._handle.closed:
            self._handle.close()
