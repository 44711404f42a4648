"""The domain of every field of the schema: what values mean something, checked before any work.

The schema (:mod:`optbench.config.schema`) gives each field a type; OmegaConf enforces it while
composing. This module gives each field its *domain* on top of the type: the range of a size, a
finite float with its bounds, the words of an enumeration, the shape of a Slurm time or a wandb
name, a folder that can hold results. :data:`DOMAINS` is read from the schema, where each leaf field
declares its domain beside its type and docstring (:func:`~optbench.config.field_spec.setting`), and
:func:`check_domains` walks a composed run and yields one :class:`~optbench.common.errors.Problem` per value
outside its domain, each naming the field, the value and what to type instead.

Upper bounds are generous for real clusters and models (32,768 GPUs, 1024 layers, 4096 experts)
and exist so that no input can make planning or validation take unbounded time or memory: planning
grows with the world size and with the routed-expert tensors (layers x experts, bounded jointly by
:data:`MAX_EXPERT_LAYERS` in validation), and at these bounds a plan takes under 6 s on a 2-core CPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from optbench.config import schema
from optbench.config.domain_types import Choice, Folder, Integer, Real
from optbench.config.field_table import TABLE, value_at
from optbench.common.errors import Problem

__all__ = ["DOMAINS", "MAX_EXPERT_LAYERS", "Choice", "Folder", "Integer", "Real", "check_domains", "leaf_fields"]

MAX_EXPERT_LAYERS = 32768
"""Most routed-expert layers (num_layers x num_moe_experts; Kimi K2: 23,040) a plan enumerates."""

DOMAINS: dict[str, Any] = {key: TABLE[key].domain for key in sorted(TABLE, key=lambda key: "." in key)}
"""Leaf field -> its domain, as the schema declares it (:mod:`optbench.config.field_spec`); the run's own fields
first, so that a bad run_id or results_dir is reported before the sections' fields."""


def leaf_fields() -> list[str]:
    """Dotted names of every leaf field of the schema (nested dataclasses expanded)."""
    return list(TABLE)


def check_domains(run: schema.RunConfig) -> Iterable[Problem]:
    """One problem per field whose value lies outside its domain (null is fine where the schema allows it)."""
    for key, domain in DOMAINS.items():
        found, value = value_at(run, key)
        if found and value is not None:
            yield from domain.problems(key, value)
