"""The field table: every leaf field of the schema with its spec, and the views derived from it.

The schema (:mod:`optbench.config.schema`) declares each field once, with :func:`~optbench.config.field_spec.setting`.
This module reads those declarations back and gives the rest of the code what it needs from them:

* :data:`TABLE`: dotted name -> :class:`~optbench.config.field_spec.FieldSpec`, in schema order;
* :func:`spec_of`: the spec of a typed key (``cluster.env.FOO`` is ``cluster.env``'s);
* :func:`bridge_name`, :func:`bridge_items`: our value as Megatron Bridge overrides (names and transforms);
* :func:`preset_fields`: the Bridge field a release's NVIDIA preset is read from -> our field.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, Field, fields, is_dataclass
from types import MappingProxyType
from typing import Any, Callable, Optional

from optbench.config.data_path import dataset_blend
from optbench.config.field_spec import FieldSpec
from optbench.config.schema import RunConfig

Item = tuple[str, Any]

NS_PRECISION_ON_GPU = "medium"
"""optimizer.muon.fp32_matmul_prec=auto on a GPU: bf16 Newton-Schulz products, Bridge's default."""


def _leaves(node: type, prefix: str = "") -> Iterator[tuple[str, Field]]:
    """(dotted name, dataclass field) of every leaf field of a schema section, in the schema's order."""
    hints = typing.get_type_hints(node)
    for f in fields(node):
        candidates = typing.get_args(hints[f.name]) or (hints[f.name],)
        nested = next((c for c in candidates if is_dataclass(c)), None)
        if nested is not None:
            yield from _leaves(nested, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", f


_LEAVES = list(_leaves(RunConfig))

TABLE: dict[str, FieldSpec] = {name: f.metadata["spec"] for name, f in _LEAVES}
"""Every leaf field (dotted) -> its spec, in the schema's order."""

DEFAULTS: Mapping[str, Any] = MappingProxyType({name: f.default for name, f in _LEAVES if f.default is not MISSING})
"""Every leaf field with a plain default (dotted) -> that default, as the schema declares it."""


def spec_of(key: str) -> Optional[FieldSpec]:
    """The spec of a typed key: a leaf field, or an entry of a mapping field (``cluster.env.NAME``); None for a
    group."""
    while key:
        if key in TABLE:
            return TABLE[key]
        key = key.rpartition(".")[0]
    return None


def value_at(run: Any, key: str) -> tuple[bool, Any]:
    """(found, value) of a dotted field of a run; not found when a parent section is null."""
    node = run
    for part in key.split("."):
        if node is None:
            return False, None
        node = getattr(node, part)
    return True, node


TRANSFORM: dict[str, Callable[[Any], Any]] = {
    "same": lambda value: value,
    "list": lambda value: list(value) if value is not None else None,
    "lists": lambda value: [list(entry) for entry in value] if value else None,
    "none_if_zero": lambda value: value or None,
    "ns_precision": lambda value: NS_PRECISION_ON_GPU if value == "auto" else value,
    "blend": dataset_blend,
}
"""How a value is written into Bridge, by the name a field's spec gives (FieldSpec.transform)."""


def bridge_name(key: str, has_field: Optional[Callable[[str], bool]] = None) -> str:
    """The first Bridge name of our field; with ``has_field`` (the container's), the name that container knows."""
    spec = TABLE[key]
    name = spec.bridge[0]
    if has_field is not None and spec.renamed_from is not None and not has_field(name):
        return spec.renamed_from
    return name


def release_items(
    run: RunConfig, keys: tuple[str, ...], has_field: Callable[[str], bool]
) -> tuple[list[Item], list[str]]:
    """Fields as one release's Bridge names (the older name where that release has only it), and the keys the
    release has no field for at all: those are left out, and a caller refuses a value other than the default."""
    items, lacking = [], []
    for key in keys:
        name = bridge_name(key, has_field)
        if has_field(name):
            items.append((name, TRANSFORM[TABLE[key].transform](value_at(run, key)[1])))
        else:
            lacking.append(key)
    return items, lacking


def bridge_items(run: RunConfig, *keys: str, section: str = "") -> list[Item]:
    """Our fields as Bridge overrides: every Bridge name of each field (those of one Bridge ``section`` if given)."""
    items = []
    for key in keys:
        spec = TABLE[key]
        value = TRANSFORM[spec.transform](value_at(run, key)[1])
        items += [(name, value) for name in spec.bridge if not section or name.startswith(f"{section}.")]
    return items


def _supplied(scopes: tuple[str, ...]) -> Mapping[str, str]:
    return MappingProxyType({spec.bridge[0]: key for key, spec in TABLE.items() if spec.preset in scopes})


_PRESET_FIELDS = {"train": _supplied(("every",)), "reproduce": _supplied(("every", "reproduce"))}


def preset_fields(intent: str) -> Mapping[str, str]:
    """Bridge field a later release's NVIDIA preset is read from -> our field it supplies, for this intent
    (read-only)."""
    return _PRESET_FIELDS[intent]
