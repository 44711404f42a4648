"""Typed records that are one JSON object: the JSON they write reads back to the same record."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import pytest

from optbench.common.json_record import JsonRecord


@dataclass(frozen=True)
class _Inner(JsonRecord):
    key: str
    value: float


@dataclass(frozen=True)
class _Outer(JsonRecord):
    name: str
    inner: _Inner
    maybe: Optional[_Inner]
    many: tuple[_Inner, ...]
    shares: Mapping[str, float]
    labels: tuple[str, ...] = ()


def test_a_record_writes_its_fields_in_order_and_reads_back_to_itself():
    record = _Outer("x", _Inner("a", 1.5), None, (_Inner("b", 2.0), _Inner("c", 3.0)), {"fp8": 0.25}, ("l",))
    written = json.loads(json.dumps(record.to_json()))
    assert list(written) == ["name", "inner", "maybe", "many", "shares", "labels"]
    assert written["many"] == [{"key": "b", "value": 2.0}, {"key": "c", "value": 3.0}] and written["maybe"] is None
    assert _Outer.from_json(written) == record


def test_a_field_with_a_default_may_be_absent_and_one_without_may_not():
    data = {"name": "x", "inner": {"key": "a", "value": 1.0}, "maybe": {"key": "m", "value": 0.0}, "many": [],
            "shares": {}}
    assert _Outer.from_json(data).labels == () and _Outer.from_json(data).maybe == _Inner("m", 0.0)
    with pytest.raises(KeyError, match="inner"):
        _Outer.from_json({k: v for k, v in data.items() if k != "inner"})
