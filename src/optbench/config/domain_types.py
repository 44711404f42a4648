"""The kinds of domain a config field can have: ranges, finite numbers, words, text, lists, folders.

Each kind has ``problems(key, value)``, yielding one :class:`~optbench.common.errors.Problem` per way the value
falls outside it (wrong type included), each naming the field, the value and what is allowed.
:mod:`optbench.config.domains` gives every field of the schema one of these.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from optbench.common.errors import Problem
from optbench.common.outputs import output_problem

MAX_TEXT = 1024
"""Longest free-text value (descriptions, names) that is printed or written."""


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def has_control_characters(text: str) -> bool:
    return any(ord(ch) < 32 or ord(ch) == 127 for ch in text)


@dataclass(frozen=True)
class Integer:
    """A whole number in [low, high]."""

    low: int
    high: int

    def problems(self, key: str, value: Any) -> Iterable[Problem]:
        if isinstance(value, bool) or not isinstance(value, int):
            yield Problem(key, f"expected a whole number, got {_shown(value)}")
        elif not self.low <= value <= self.high:
            yield Problem(key, f"must be a whole number from {self.low:,} to {self.high:,}, got {_shown(value)}")


@dataclass(frozen=True)
class Real:
    """A finite number between low and high (each bound open or closed, None for none)."""

    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False

    def text(self) -> str:
        left = "(" if self.low_open or self.low is None else "["
        right = ")" if self.high_open or self.high is None else "]"
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        return f"{left}{low}, {high}{right}"

    def problems(self, key: str, value: Any) -> Iterable[Problem]:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            yield Problem(key, f"expected a number, got {_shown(value)}")
            return
        value = float(value)
        below = self.low is not None and (value < self.low or (self.low_open and value == self.low))
        above = self.high is not None and (value > self.high or (self.high_open and value == self.high))
        if not math.isfinite(value) or below or above:
            yield Problem(key, f"must be a finite number in {self.text()}, got {_shown(value)}")


@dataclass(frozen=True)
class Choice:
    """One word of an enumeration (``options`` may be a function, for catalogs read from data files)."""

    options: Union[tuple[str, ...], Callable[[], Sequence[str]]]

    def words(self) -> tuple[str, ...]:
        return tuple(self.options() if callable(self.options) else self.options)

    def problems(self, key: str, value: Any) -> Iterable[Problem]:
        words = self.words()
        if not isinstance(value, str) or value not in words:
            yield Problem(key, f"{_shown(value)} is not one of {', '.join(words)}")


@dataclass(frozen=True)
class Flag:
    """true or false (typed overrides are also held to those two words, see overrides.py)."""

    def problems(self, key: str, value: Any) -> Iterable[Problem]:
        if not isinstance(value, bool):
            yield Problem(key, f"expected true or false, got {_shown(value)}")


@dataclass(frozen=True)
class Text:
    """One line of text: no control characters, at most ``max_len`` characters, optionally a pattern."""

    max_len: int = MAX_TEXT
    pattern: Optional[str] = None
    hint: str = ""
    """What the pattern allows, in words."""
    min_len: int = 0
    secret: bool = False
    """Never show the value in a message (the Slurm account)."""

    def problems(self, key: str, value: Any) -> Iterable[Problem]:
        if not isinstance(value, str):
            yield Problem(key, f"expected text, got {_shown(value)}")
            return
        text = value
        if has_control_characters(text):
            yield Problem(key, "must be one line without control characters (it is printed and written to files)")
        elif not self.min_len <= len(text) <= self.max_len:
            yield Problem(key, f"must be {self.min_len} to {self.max_len:,} characters long, got {len(text):,}")
        elif self.pattern is not None and not re.fullmatch(self.pattern, text):
            shown = "the value given" if self.secret else _shown(text)
            yield Problem(key, f"{shown} is not {self.hint}")


@dataclass(frozen=True)
class Items:
    """A list of at most ``max_items`` values, each in the ``item`` domain."""

    item: Any
    max_items: int

    def problems(self, key: str, value: Any) -> Iterable[Problem]:
        if not isinstance(value, list):
            yield Problem(key, f"expected a list such as [a,b], got {_shown(value)}")
            return
        if len(value) > self.max_items:
            yield Problem(key, f"may hold at most {self.max_items:,} entries, got {len(value):,}")
            return
        for index, entry in enumerate(value):
            yield from self.item.problems(f"{key}.{index}", entry)


@dataclass(frozen=True)
class Table:
    """A mapping of names to values: at most ``max_items`` entries, names matching ``key_pattern``."""

    value: Any
    max_items: int
    key_pattern: str
    key_hint: str

    def problems(self, key: str, value: Any) -> Iterable[Problem]:
        if not isinstance(value, dict):
            yield Problem(key, f"expected a mapping such as {{NAME: value}}, got {_shown(value)}")
            return
        if len(value) > self.max_items:
            yield Problem(key, f"may hold at most {self.max_items} entries, got {len(value)}")
            return
        for name, entry in value.items():
            if not re.fullmatch(self.key_pattern, str(name)):
                yield Problem(f"{key}.{name}", f"is not {self.key_hint}")
            else:
                yield from self.value.problems(f"{key}.{name}", entry)


@dataclass(frozen=True)
class Folder:
    """An output folder of one optbench kind: new, empty, or marked as ours (:mod:`optbench.common.outputs`)."""

    kind: str = "results"

    def problems(self, key: str, value: Any) -> Iterable[Problem]:
        text = value if isinstance(value, str) else ""
        problem = output_problem(text, self.kind)
        if problem is not None:
            yield Problem(key, problem)
