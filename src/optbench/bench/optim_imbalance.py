"""Newton-Schulz load imbalance of the layer-wise optimizer at published layouts: computed from shapes, no run.

Per global rank: the NS FLOPs per step of every matrix it owns (its experts included), from
:func:`optbench.accounting.ns_flops.rank_ns_flops` with an owner policy. Imbalance = max over ranks
divided by the mean over ranks (the mean does not depend on the assignment).

Lower bound over every whole-matrix assignment, per data-parallel group that deals parameters out
(:func:`optbench.accounting.assignment.max_load_lower_bound`): a rank's load is what singleton groups
(e.g. expert-data-parallel groups of size 1, which fix every expert on its EP rank) give it plus
what its multi-rank groups deal it; for a dealing group the busiest of its ranks carries at least
the group's average, at least its largest item on top of the least fixed load, and at least two of
its size+1 largest items together. Work from other multi-rank groups is bounded below by 0, so the
bound is valid for any layout and exact when each rank belongs to one dealing group (both layouts here).
"""

from __future__ import annotations

from optbench.accounting.ns_flops import dp_group_work, pingpong_by_numel, rank_ns_flops
from optbench.compose.recipe import compose_run
from optbench.config.layout import derive_layout
from optbench.config.schema import RunConfig
from optbench.accounting.assignment import cost_aware_owners, max_load_lower_bound

RECIPES = ("kimi_k2_muon", "qwen3_30b_a3b_muon")
"""Recipes whose (published GB300) layouts are measured, each keyed by its model's name."""


def _dealt_loads(groups, world: int, owners_fn) -> list[float]:
    """Per-rank NS FLOPs from multi-rank groups only (the part an assignment policy decides)."""
    loads = [0.0] * world
    for group in groups:
        if len(group.ranks) < 2:
            continue
        for item, owner in zip(group.items, owners_fn(group.items, len(group.ranks))):
            loads[group.ranks[owner]] += item.ns_flops
    return loads


def imbalance(run: RunConfig) -> dict:
    """Max/mean NS FLOPs over ranks for ping-pong, cost-aware and the lower bound, at the run's layout."""
    layout = derive_layout(run)
    world = run.parallel.num_gpus
    groups = dp_group_work(run)
    pingpong = rank_ns_flops(run, owners_fn=pingpong_by_numel)
    cost_aware = rank_ns_flops(run, owners_fn=cost_aware_owners)
    mean = sum(pingpong) / world
    fixed = [0.0] * world
    for group in groups:
        if len(group.ranks) == 1:
            fixed[group.ranks[0]] += sum(item.ns_flops for item in group.items)
    bound = max(fixed)
    dealt_bound = 0.0
    for group in groups:
        if len(group.ranks) > 1:
            costs = [item.ns_flops for item in group.items]
            bound = max(bound, max_load_lower_bound(costs, [fixed[r] for r in group.ranks]))
            dealt_bound = max(dealt_bound, max_load_lower_bound(costs, [0.0] * len(group.ranks)))
    dealt = {
        name: _dealt_loads(groups, world, fn)
        for name, fn in (("pingpong", pingpong_by_numel), ("cost_aware", cost_aware_owners))
    }
    dealt_mean = sum(dealt["pingpong"]) / world
    return {
        "recipe": run.recipe,
        "layout": {
            "gpus": world,
            "tp": layout.tp,
            "pp": layout.pp,
            "vpp": layout.vpp,
            "ep": layout.ep,
            "etp": layout.etp,
            "dp": layout.dp,
            "edp": layout.edp,
        },
        "ns_steps": run.optimizer.muon.ns_steps,
        "tp_mode": run.optimizer.muon.tp_mode,
        "pingpong": max(pingpong) / mean,
        "cost_aware": max(cost_aware) / mean,
        "lower_bound": bound / mean,
        "mean_ns_flops_per_rank": mean,
        "max_ns_flops_per_rank": {"pingpong": max(pingpong), "cost_aware": max(cost_aware)},
        "dealt_part_only": {
            "what": "the same ratio over only the NS FLOPs that multi-rank groups deal out (dense parameters here)",
            "pingpong": max(dealt["pingpong"]) / dealt_mean if dealt_mean else 1.0,
            "cost_aware": max(dealt["cost_aware"]) / dealt_mean if dealt_mean else 1.0,
            "lower_bound": dealt_bound / dealt_mean if dealt_mean else 1.0,
        },
    }


def imbalance_section() -> dict:
    """Every recipe in :data:`RECIPES`, keyed by its model's name."""
    runs = [compose_run(recipe, []) for recipe in RECIPES]
    return {run.model.name: imbalance(run) for run in runs}
