"""Frozen dataclasses that are one JSON object each: typed in the code, the same JSON on disk.

A record writes its fields in declaration order (tuples as lists, nested records as objects, mappings as they
are) and reads the same JSON back into the same record (the field types say how: ``Optional[X]``,
``tuple[X, ...]``, nested records, mappings, a union of records (the first that reads); a field with a default
may be absent). Two field markers keep a JSON shape that predates its record: :func:`inline` (a nested record whose
keys sit in this record's own object) and :func:`omitted_when_null` (a key written only when it has a value). A
record whose JSON needs more overrides :meth:`JsonRecord.to_json`.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

R = TypeVar("R", bound="JsonRecord")

_INLINE = "json_inline"
_OMITTED_WHEN_NULL = "json_omitted_when_null"


def inline() -> Any:
    """A nested record field whose keys are written into, and read from, the enclosing record's own object."""
    return dataclasses.field(metadata={_INLINE: True})


def omitted_when_null() -> Any:
    """An optional field (default None) whose key is left out of the JSON while it is None, and read as None when
    absent."""
    return dataclasses.field(default=None, metadata={_OMITTED_WHEN_NULL: True})


def _to_json(value: Any) -> Any:
    if isinstance(value, JsonRecord):
        return value.to_json()
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _to_json(v) for k, v in value.items()}
    return value


def _from_json(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:  # Optional[X]
            return _from_json(options[0], value)
        for option in options[:-1]:  # a union of records: the first whose fields the JSON holds
            try:
                return _from_json(option, value)
            except KeyError:
                continue
        return _from_json(options[-1], value)
    if isinstance(hint, type) and issubclass(hint, JsonRecord):
        return hint.from_json(value)
    if origin is tuple:
        return tuple(_from_json(args[0], v) for v in value)
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        inner = args[1] if len(args) == 2 else Any
        return {k: _from_json(inner, v) for k, v in value.items()}
    return value


class JsonRecord:
    """Mixin of a frozen dataclass that is one JSON object (see the module docstring)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.metadata.get(_INLINE):
                out.update(value.to_json())
            elif value is not None or not f.metadata.get(_OMITTED_WHEN_NULL):
                out[f.name] = _to_json(value)
        return out

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, Any]) -> R:
        """The record ``data`` holds (KeyError for a field it lacks that has no default)."""
        hints = typing.get_type_hints(cls)
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.metadata.get(_INLINE):
                values[f.name] = hints[f.name].from_json(data)
            elif f.name in data:
                values[f.name] = _from_json(hints[f.name], data[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise KeyError(f.name)
        return cls(**values)
