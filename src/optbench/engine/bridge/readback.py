"""Read an override back from the ConfigContainer Megatron Bridge built: did it land, with our value?"""

from __future__ import annotations

from typing import Any

from optbench.releases.presets import normalised


def lookup(config: Any, key: str) -> Any:
    """The value at a dotted key of a ConfigContainer (dataclass attributes, dicts inside)."""
    node = config
    for part in key.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


def comparable(value: Any) -> Any:
    """A value as our presets compare values (enums by their value; anything else unknown as text)."""
    if hasattr(value, "value") and not isinstance(value, (int, float, str)):  # enums
        value = value.value
    try:
        return normalised(value)
    except TypeError:
        return str(value)


def read_back(config: Any, items: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Every (key, value) that did not land: a key the container lacks, or another value there."""
    missing = []
    for key, value in items:
        try:
            actual = lookup(config, key)
        except (AttributeError, KeyError) as err:
            missing.append({"field": key, "expected": comparable(value), "error": f"no such field ({err})"})
            continue
        if comparable(actual) != comparable(value):
            missing.append({"field": key, "expected": comparable(value), "actual": comparable(actual)})
    return missing
