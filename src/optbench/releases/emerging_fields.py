"""The optimizer's name in each container, the emerging optimizers' and Lion's fields, and what a container would run
instead.

What the releases do (read from the tagged sources; markers in ``optbench/data/bridge/fields-*.json``, written by
``tools/bridge_versions.py``):

* Megatron Bridge up to 0.6.0 sends every optimizer name containing "muon" or "soap" to Core's Muon builder. Up to
  Core 0.17 (nemo:26.04.01) that builder ignores the name: ``optimizer=soap`` or ``adaptive_muon`` trains Muon,
  silently. Core 0.18 (nemo:26.06) forwards the name to its emerging-optimizer registry, which has ``soap`` and
  ``adaptive_muon`` (marker ``emerging_soap`` / ``emerging_adaptive_muon``).
* ``muon_scalar_optimizer`` (Core >= 0.17) picks the optimizer of what Muon does not take. Core 0.17 routes it
  (marker ``muon_scalar_optimizer_routed``) but its Lion needs Emerging-Optimizers >= 0.2, and nemo:26.04/26.04.01
  ship 0.1.0 (Bridge's uv.lock): the run stops at the builder's assert. Core 0.18 ignores the field (Adam runs).
  Core 0.19 (NeMo 26.08) routes it again, with Emerging-Optimizers 0.2.0: the first container where Lion runs.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Iterable

from optbench.config.field_table import DEFAULTS, bridge_items, bridge_name, release_items, value_at
from optbench.config.optimizers import REGISTRY
from optbench.config.schema import RunConfig
from optbench.common.errors import Problem
from optbench.releases import versions

Item = tuple[str, Any]

LION_MIN_EMERGING_OPTIMIZERS = (0, 2)
"""Megatron Core asserts ``emerging_optimizers >= 0.2`` before it builds Lion."""


def has_optimizer(container: versions.Container, name: str) -> bool:
    """Whether the container's Megatron Core builds ``name`` (adam and muon: every container we run)."""
    marker = REGISTRY[name].bridge_marker if name in REGISTRY else ""
    return not marker or versions.behaviour(container, marker)


def runs_lion_for_scalars(container: versions.Container) -> bool:
    """Whether ``muon_scalar_optimizer=lion`` trains Lion in this container (routed, and its Lion importable)."""
    return (
        versions.behaviour(container, "muon_scalar_optimizer_routed")
        and versions.emerging_optimizers_line(container) >= LION_MIN_EMERGING_OPTIMIZERS
    )


def optimizer_name_items(run: RunConfig, container: versions.Container) -> list[Item]:
    """The optimizer name, and the layer-wise switch where the version has one (Core >= 0.18)."""
    o = run.optimizer
    name = bridge_name("optimizer.name")
    if o.name == "adamw":
        return [(name, "adam")]
    layer_wise = o.matrix_section.layer_wise
    switch = bridge_name("optimizer.muon.layer_wise")
    if versions.has_field(container, switch):
        return [(name, o.name), (switch, layer_wise)]
    return [(name, f"dist_{o.name}" if layer_wise else o.name)]


def own_items(run: RunConfig, container: versions.Container) -> list[Item]:
    """The matrix optimizer's own fields (its registry entry's ``bridge_fields`` and, when on, ``bridge_flags``) in
    the names of the container's release; a field that release lacks is left out (:func:`own_problems` refuses a
    value other than its default first)."""
    o = run.optimizer
    if not o.matrix_optimizer:
        return []
    own = REGISTRY[o.name]
    items, _ = release_items(run, own.bridge_fields, partial(versions.has_field, container))
    return items + [item for key in own.bridge_flags if value_at(run, key)[1] for item in bridge_items(run, key)]


def own_problems(run: RunConfig, container: versions.Container) -> Iterable[Problem]:
    """A field of the optimizer's entry that the container's release has no name for, set to other than its default:
    that Megatron Core would run the default, silently."""
    o = run.optimizer
    if not o.matrix_optimizer:
        return
    _, lacking = release_items(run, REGISTRY[o.name].bridge_fields, partial(versions.has_field, container))
    for key in lacking:
        value, default = value_at(run, key)[1], DEFAULTS[key]
        if value != default:
            field = bridge_name(key)
            name = field.partition(".")[2]
            yield Problem(
                key,
                f"{container.label()} has no {name}: its Megatron Core runs {key.rpartition('.')[2]}={default} "
                f"only; {name} arrives with "
                + _first(lambda c, n=field: versions.has_field(c, n))
                + f", or set {key}={default}",
                ("cluster.container",),
            )


def scalar_items(run: RunConfig) -> list[Item]:
    """Lion for the scalars, only where the run has it."""
    if run.optimizer.scalar_optimizer == "adam":  # every release's default; older ones have no such field
        return []
    return bridge_items(run, "optimizer.scalar_optimizer", "optimizer.lion_beta1", "optimizer.lion_beta2")


def _first(predicate) -> str:
    first = versions.first_with(predicate)
    return f"{first.label()}: set cluster.container={first.name}" if first else "no container we know"


def emerging_problems(run: RunConfig) -> Iterable[Problem]:
    """Optimizers, their fields and scalar optimizers the run's container lacks or would replace by another,
    silently."""
    o = run.optimizer
    container = versions.container_of(run)
    yield from own_problems(run, container)
    if not has_optimizer(container, o.name):
        yield Problem(
            "optimizer.name",
            f"{container.label()} has no {o.name}: its Megatron Bridge sends any name containing 'muon' or 'soap' to "
            f"Megatron Core's Muon builder, which ignores the name and trains Muon; {o.name} arrives with "
            + _first(lambda c: has_optimizer(c, o.name)),
            ("cluster.container",),
        )
    if o.scalar_optimizer == "lion" and not runs_lion_for_scalars(container):
        if not versions.has_field(container, bridge_name("optimizer.scalar_optimizer")):
            why = "has no muon_scalar_optimizer (Adam takes what Muon does not)"
        elif versions.behaviour(container, "muon_scalar_optimizer_routed"):
            why = (
                "routes muon_scalar_optimizer to Lion, which its Emerging-Optimizers "
                f"{'.'.join(map(str, versions.emerging_optimizers_line(container)))} lacks (Megatron asserts >= 0.2)"
            )
        else:
            why = "reads muon_scalar_optimizer but never passes it on: Adam would run"
        yield Problem(
            "optimizer.scalar_optimizer",
            f"{container.label()} {why}; Lion for the scalars arrives with "
            + _first(runs_lion_for_scalars)
            + ", or set optimizer.scalar_optimizer=adam",
            ("cluster.container",),
        )
