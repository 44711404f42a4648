"""Muon's settings against the run's release: what its Megatron Core cannot run, and what runs on the local engine only.

What changed by release (read from the tagged sources, ``optbench/data/bridge/fields-*.json``; the field names each
release takes are Muon's registry entry, :mod:`optbench.config.optimizers.muon`):

* Core 0.16 (nemo:26.02, 26.02.01): ``optimizer=dist_muon`` is the layer-wise optimizer; it gathers updated
  parameters inside the step (no overlap) and has one Newton-Schulz coefficient set (quintic).
* Core 0.17 (nemo:26.04, 26.04.01): ``muon_coefficient_type`` and ``muon_scalar_optimizer``; the layer-wise
  optimizer can defer its parameter all-gather into the next forward (``overlap_param_gather``).
* Core 0.18 / 0.19 (nemo:26.06, 26.06.01, 26.08): ``muon_use_nesterov`` is renamed ``muon_nesterov``;
  ``dist_muon`` is deprecated for ``optimizer=muon`` + ``use_layer_wise_distributed_optimizer``. The
  size-balanced layer-wise layout that routes non-Muon parameters through the regular distributed optimizer
  is built by Megatron-LM's own training loop only (``megatron/training/training.py``); Megatron Bridge up to
  0.6.0 does not build it, so with Bridge the element-wise distributed optimizer stays off (the legacy
  layer-wise path, as ``dist_muon`` gives).
* Megatron Core main after 0.19.0 (in no NeMo container up to 26.08): ``muon_use_syrk``, shards balanced by
  Newton-Schulz cost, ``muon_tp_mode`` defaulting to ``duplicated``.
"""

from __future__ import annotations

from typing import Iterable

from optbench.common.errors import Problem
from optbench.config.schema import RunConfig
from optbench.releases import versions


def _newest_label() -> str:
    return versions.runnable()[0].name


def _core_main() -> str:
    main = versions.core_main()
    return f"Megatron Core main ({main['commit'][:9]}, {main['date']})"


def _arrives_with(what: str, predicate, instead: str) -> str:
    """'<what> arrives with <oldest container that has it>: set cluster.container=<it> or <instead>'."""
    first = versions.first_with(predicate)
    if first is None:
        return f"no container we know has {what}; {instead}"
    return f"{what} arrives with {first.label()}: set cluster.container={first.name} or {instead}"


def muon_release_problems(run: RunConfig) -> Iterable[Problem]:
    """Muon options the run's container cannot express, each naming the containers (or Core) that can; a field its
    release has no name for is the registry's rule (:func:`optbench.releases.emerging_fields.own_problems`)."""
    muon = run.optimizer.muon
    if not run.optimizer.muon_family:
        return
    container = versions.container_of(run)
    if muon.coefficients == "cubic5" and versions.emerging_optimizers_line(container) < (0, 4):
        yield Problem(
            "optimizer.muon.coefficients",
            f"cubic5 arrives with Emerging-Optimizers 0.4.0; {container.label()} ships "
            f"{versions.emerging_optimizers(container)} (no container we checked ships 0.4); use quintic, or "
            "engine=local, whose Muon runs it",
            ("cluster.container",),
        )
    if muon.overlap_param_gather:
        if not muon.layer_wise:
            yield Problem(
                "optimizer.muon.overlap_param_gather",
                "overlaps the layer-wise optimizer's all-gather; set optimizer.muon.layer_wise=true or drop it",
                ("optimizer.muon.layer_wise",),
            )
        elif not versions.behaviour(container, "layer_wise_overlap_param_gather"):
            yield Problem(
                "optimizer.muon.overlap_param_gather",
                f"{container.label()} gathers layer-wise parameters inside the step; "
                + _arrives_with(
                    "the overlapped all-gather",
                    lambda c: versions.behaviour(c, "layer_wise_overlap_param_gather"),
                    "drop it",
                ),
                ("cluster.container",),
            )
    if muon.syrk and not any(versions.has_field(c, "optimizer.muon_use_syrk") for c in versions.runnable()):
        yield Problem(
            "optimizer.muon.syrk",
            f"no NeMo container up to {_newest_label()} has a SYRK Newton-Schulz kernel ({_core_main()} adds "
            "muon_use_syrk); syrk=true runs on engine=local",
            ("engine", "cluster.container"),
        )
    if muon.assignment != "pingpong":
        yield Problem(
            "optimizer.muon.assignment",
            f"Megatron Bridge up to {_newest_label()} assigns layer-wise shards by ping-pong only ({_core_main()} "
            "balances them by Newton-Schulz cost, in Megatron-LM's own training loop); cost_aware runs on engine=local",
            ("engine", "cluster.container"),
        )
