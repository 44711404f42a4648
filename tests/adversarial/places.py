"""The paths of one adversarial case, and writing a file with its folders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Places:
    """The paths of one case."""

    results: Path
    """A copy of the world's baseline results folder."""
    scratch: Path
    """An empty folder of the case's own (new outputs may go here)."""
    corpus: Path
    """A copy of an earlier ``make data`` output."""


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return path
