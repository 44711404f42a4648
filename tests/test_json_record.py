"""Typed records that are one JSON object: the JSON they write reads back to the same record."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional, Union

import pytest

from optbench.common.json_record import JsonRecord, inline, omitted_when_null


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
    data = {
        "name": "x",
        "inner": {"key": "a", "value": 1.0},
        "maybe": {"key": "m", "value": 0.0},
        "many": [],
        "shares": {},
    }
    assert _Outer.from_json(data).labels == () and _Outer.from_json(data).maybe == _Inner("m", 0.0)
    with pytest.raises(KeyError, match="inner"):
        _Outer.from_json({k: v for k, v in data.items() if k != "inner"})


@dataclass(frozen=True)
class _Other(JsonRecord):
    reason: str


@dataclass(frozen=True, kw_only=True)
class _Flat(JsonRecord):
    first: bool = True
    inner: _Inner = inline()
    note: Optional[str] = omitted_when_null()
    either: Union[_Inner, _Other, None] = omitted_when_null()


def test_an_inline_record_sits_in_its_parents_object_and_a_null_marked_field_is_left_out():
    record = _Flat(inner=_Inner("a", 1.0))
    assert record.to_json() == {"first": True, "key": "a", "value": 1.0}
    assert _Flat.from_json(record.to_json()) == record
    full = _Flat(inner=_Inner("a", 1.0), note="n", either=_Other("why"))
    assert list(full.to_json()) == ["first", "key", "value", "note", "either"]
    assert _Flat.from_json(json.loads(json.dumps(full.to_json()))) == full  # the union reads the record that fits
    assert _Flat.from_json({**record.to_json(), "either": {"key": "b", "value": 2.0}}).either == _Inner("b", 2.0)
    with pytest.raises(KeyError, match="value"):
        _Flat.from_json({"first": True, "key": "a"})
