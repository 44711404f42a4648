"""Schema sections that cannot change once built: a typed run is read, never edited.

A frozen ``dataclass`` would do this, but OmegaConf makes a frozen dataclass's nodes read-only, and Hydra merges
every recipe file and override into those nodes (an optional section such as ``optimizer.muon`` is built from its
type in the middle of a merge). So the schema's dataclasses stay plain for OmegaConf and refuse assignment once
their ``__init__`` has run: a change is a new run, made with ``dataclasses.replace``.
"""

from __future__ import annotations

import dataclasses
from typing import Any


class Frozen:
    """Base of every schema dataclass: assignment after ``__init__`` raises ``dataclasses.FrozenInstanceError``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_built", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_built", False):
            raise dataclasses.FrozenInstanceError(
                f"cannot assign to {type(self).__name__}.{name}: a typed run is never changed; use dataclasses.replace"
            )
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete {type(self).__name__}.{name}")
