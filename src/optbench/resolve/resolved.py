"""The resolved run: a composed, validated run and everything derived from it, computed one time.

Validation resolves a run once its config checks pass (:func:`optbench.validate.validate` returns the
:class:`ResolvedRun`); the memory check, the plan, the accounting, the projection, the AdamW twin, the
Bridge adapter, the job rendering and the sweep read it. Nothing here is computed again elsewhere and
nothing changes after :func:`resolve` returns: the run inside is a copy, and every derived value is a
frozen dataclass, a tuple or a read-only mapping. The parts only a plan needs (SYRK counts, the counts
of every TP mode, memory) are computed on first use and kept.

What a Bridge job needs fixed before it leaves this machine (an absolute results_dir, a run id that
names its folder, its W&B run and its checkpoints) is fixed here, so that the plan, config.yaml and the
job script all show the same values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType

from optbench.accounting.memory import MemoryEstimate, estimate_memory, optimizer_bytes_per_rank
from optbench.accounting.ns_flops import (
    DpGroupWork,
    dp_group_work,
    ns_flops_stats,
    recipe_tp_mode,
    recounted_rank_ns_flops,
)
from optbench.accounting.params import model_shape
from optbench.accounting.placement import Placement, place
from optbench.config.layout import Layout, derive_layout, stage_decoder_layers
from optbench.config.schema import MUON_TP_MODES, RunConfig
from optbench.releases import presets
from optbench.runs import checked_run_id, new_run_id

WorkKey = tuple[str, bool]
"""(TP mode, SYRK) of a Newton-Schulz count."""


@dataclass(frozen=True, eq=False)
class ResolvedRun:
    """A validated run with its derived layout, placement, optimizer work and memory (see the module docstring)."""

    run: RunConfig
    """The composed, validated config (a copy; for a Bridge job with an absolute results_dir and a fixed run id)."""
    layout: Layout
    """Every size of the parallel layout, derived ones included."""
    stage_layers: tuple[int, ...]
    """Decoder layers held by each virtual pipeline stage, in Megatron's stage order."""
    placement: Placement
    """Where every parameter shard lives."""
    groups_plain: tuple[DpGroupWork, ...]
    """Each data-parallel group's parameters with their Newton-Schulz FLOPs in the recipe's TP mode."""
    work_of: ResolvedRun | None = field(default=None, repr=False)
    """A resolved run with the same placement, parallel sizes, model and optimizer (a layout search's neighbour
    at another micro-batch), whose optimizer work and state this one reads instead of counting them again."""

    # Computed on first use and kept (the instance never changes): a published row's projection needs none
    # of them, a plan needs all.
    @cached_property
    def groups_syrk(self) -> tuple[DpGroupWork, ...]:
        """The same groups counted with SYRK kernels (the what-ifs); the plain ones for the others."""
        if self.work_of is not None:
            return self.work_of.groups_syrk
        if not self.run.optimizer.muon_family:
            return self.groups_plain
        return tuple(dp_group_work(self.run, None, True, self.placement, self.layout))

    @cached_property
    def rank_ns(self) -> Mapping[WorkKey, tuple[float, ...]]:
        """Newton-Schulz FLOPs per step of every global rank: for Muon every TP mode with and without SYRK, for
        AdamW one entry, zeros (layer-wise ownership dealt ping-pong by numel, as Megatron deals it)."""
        if self.work_of is not None:
            return self.work_of.rank_ns
        muon = self.run.optimizer.muon_family
        keys = [(m, syrk) for m in MUON_TP_MODES for syrk in (False, True)] if muon else [("blockwise", False)]
        counted = recounted_rank_ns_flops(self.run, self.groups_plain, keys, self.layout)
        return MappingProxyType({key: tuple(flops) for key, flops in counted.items()})

    @cached_property
    def optimizer_state_bytes(self) -> tuple[float, ...]:
        """Optimizer-state bytes of every global rank."""
        if self.work_of is not None:
            return self.work_of.optimizer_state_bytes
        return tuple(
            optimizer_bytes_per_rank(self.run, self.layout, self.groups_plain, presets.adam_moment_bytes(self.run))
        )

    @cached_property
    def memory(self) -> MemoryEstimate:
        """Per-GPU memory estimate of the busiest GPU of every pipeline rank."""
        return estimate_memory(self.run, self.layout, self.placement, optimizer_bytes=self.optimizer_state_bytes)

    @property
    def tp_mode(self) -> str:
        """The recipe's Muon TP mode (blockwise for AdamW: the counts are zero in every mode)."""
        return recipe_tp_mode(self.run)

    def _key(self, tp_mode: str | None, syrk: bool) -> WorkKey:
        if not self.run.optimizer.muon_family:
            return ("blockwise", False)
        return (tp_mode or self.tp_mode, syrk)

    def groups(self, syrk: bool = False) -> tuple[DpGroupWork, ...]:
        """The data-parallel groups' work in the recipe's TP mode, with or without SYRK."""
        return self.groups_syrk if syrk else self.groups_plain

    def rank_ns_flops(self, tp_mode: str | None = None, syrk: bool = False) -> tuple[float, ...]:
        """Newton-Schulz FLOPs per step of every global rank (index = rank)."""
        return self.rank_ns[self._key(tp_mode, syrk)]

    def ns_stats(self, tp_mode: str | None = None, syrk: bool = False) -> dict[str, float]:
        """Max, mean, min, busiest rank and total of :meth:`rank_ns_flops`."""
        return ns_flops_stats(self.rank_ns_flops(tp_mode, syrk))

    @property
    def ns_flops_total(self) -> float:
        """Newton-Schulz FLOPs all ranks execute in one step (the recipe's TP mode, no SYRK)."""
        return sum(self.rank_ns_flops())


def _job_ready(run: RunConfig, run_id: str | None) -> RunConfig:
    """A copy of ``run`` (its sections are shared: nothing changes a run's sections after composition); a
    Bridge job reads its config elsewhere (a container, a compute node), so its copy gets an absolute
    results_dir and a fixed run id."""
    run_id = run_id if run_id is not None else run.run_id
    results_dir = run.results_dir
    if run.engine == "megatron_bridge":
        results_dir = str(Path(results_dir).resolve())
        run_id = run_id or new_run_id(run)
    if run_id is not None:
        checked_run_id(run_id)
    return dataclasses.replace(run, run_id=run_id, results_dir=results_dir)


def _same_placement(run: RunConfig, other: RunConfig) -> bool:
    """Whether two runs place their parameters alike (same model shape, same TP/PP/VPP/EP/ETP and pipeline layout)."""
    p, q = run.parallel, other.parallel
    return model_shape(run.model) == model_shape(other.model) and (
        p.tp,
        p.pp,
        p.vpp,
        p.ep,
        p.etp,
        p.pipeline_layout,
    ) == (q.tp, q.pp, q.vpp, q.ep, q.etp, q.pipeline_layout)


def resolve(run: RunConfig, run_id: str | None = None, like: ResolvedRun | None = None) -> ResolvedRun:
    """Derive everything once from a run whose config checks passed.

    ``run_id``: the id to give it (a sweep point's); a Bridge job without one gets a new one. ``like``: a
    resolved run whose parameter placement this one shares when both place alike (a Muon run's AdamW twin),
    and whose optimizer work too when the layout, model and optimizer are also the same (a layout search's
    points that differ in their micro-batch only).
    """
    run = _job_ready(run, run_id)
    layout = derive_layout(run)
    alike = like is not None and _same_placement(run, like.run)
    placement = like.placement if alike else place(run)
    same_work = (
        alike
        and layout.as_dict() == like.layout.as_dict()
        and (run.model, run.optimizer) == (like.run.model, like.run.optimizer)
    )
    return ResolvedRun(
        run=run,
        layout=layout,
        stage_layers=tuple(stage_decoder_layers(run)),
        placement=placement,
        groups_plain=like.groups_plain if same_work else tuple(dp_group_work(run, None, False, placement, layout)),
        work_of=(like.work_of or like) if same_work else None,
    )
