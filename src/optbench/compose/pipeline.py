"""A recipe's pipeline layout follows ``parallel.pp`` / ``parallel.vpp`` typed on the command line.

A published layout (``conf/parallel/kimi_k2/gb300_256.yaml``) lists one entry per virtual stage,
so it is valid only for the pp * vpp it was written for. Megatron Bridge's Kimi K2 recipe keeps a
table of layouts keyed by (pp, vpp) for the same reason. When a user changes pp or vpp and does not
give a layout, the recipe's layout is replaced by a balanced one for the new stage count, so that
``make plan RECIPE=kimi_k2_muon parallel.pp=8 parallel.ep=32`` plans what it says. A layout the
user types (``parallel.pipeline_layout=...``) or a ``parallel=<name>`` group choice is kept as given
and validated as it is.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from optbench.accounting.flops import flop_terms
from optbench.config.layout import vpp_size
from optbench.config.overrides import typed_keys
from optbench.config.schema import RunConfig

STAGE_KEYS = ("parallel.pp", "parallel.vpp")


def _override_keys(overrides: Sequence[str]) -> set[str]:
    return set(typed_keys(overrides))


def layout_follows_overrides(overrides: Sequence[str]) -> bool:
    """Whether the typed overrides change the stage count without choosing a layout."""
    keys = _override_keys(overrides)
    chooses_layout = any(key.startswith("parallel.pipeline_layout") or key == "parallel" for key in keys)
    return bool(keys & set(STAGE_KEYS)) and not chooses_layout


def last_stage_weight(run: RunConfig) -> float:
    """The last stage's extra work in average decoder layers: output layer(s), MTP layers and projections.

    From Bridge's FLOP terms (:mod:`optbench.accounting.flops`); the embedding lookup has no GEMM FLOPs.
    Kimi K2 at seq 4096: the 163,840-word output layer weighs about 2 decoder layers, which is why
    Bridge gives its last stage a single decoder layer.
    """
    m = run.model
    terms = flop_terms(m, run.train.seq_length)
    per_layer = (terms.mlp + terms.attention) / (m.num_layers + m.mtp_num_layers)
    return (terms.logits + terms.mtp) / per_layer + m.mtp_num_layers


def _fill(slots: list[int], load: dict[int, float], units: int, edge: set[int]) -> dict[int, int]:
    """Hand ``units`` layers one by one to the least loaded slot (ties: not an edge slot, then the lowest)."""
    given = dict.fromkeys(slots, 0)
    for _ in range(units):
        slot = min(slots, key=lambda s: (load[s], s in edge, s))
        given[slot] += 1
        load[slot] += 1.0
    return given


def balanced_pipeline_layout(
    num_layers: int, pp: int, vpp: int = 1, mtp_layers: int = 0, last_weight: float = 0.0
) -> list[list[str]]:
    """``num_layers`` decoder layers over ``pp * vpp`` virtual stages, embedding first, MTP and loss last.

    First each pipeline rank gets its share so that the ranks' work (decoder layers, plus
    ``last_weight`` on the last rank, which holds the last virtual stage) is as even as whole layers
    allow: the slowest rank sets the step time. Then each rank spreads its share over its virtual
    stages ``r, r + pp, ...`` the same way. Ties go to middle ranks and stages, because the first
    also holds the embedding.
    """
    stages = pp * vpp
    rank_load = {r: 0.0 for r in range(pp)}
    rank_load[pp - 1] = last_weight
    per_rank = _fill(list(range(pp)), rank_load, num_layers, {0, pp - 1})
    counts = [0] * stages
    for rank, layers in per_rank.items():
        own = list(range(rank, stages, pp))
        stage_load = {s: (last_weight if s == stages - 1 else 0.0) for s in own}
        for stage, given in _fill(own, stage_load, layers, {0, stages - 1}).items():
            counts[stage] = given
    layout = [["decoder"] * count for count in counts]
    layout[0].insert(0, "embedding")
    layout[-1] += ["mtp"] * mtp_layers + ["loss"]
    return layout


def balanced_layout_for(run: RunConfig) -> list[list[str]]:
    """:func:`balanced_pipeline_layout` for ``run``'s model, pp and vpp."""
    m, p = run.model, run.parallel
    return balanced_pipeline_layout(m.num_layers, p.pp, vpp_size(run), m.mtp_num_layers, last_stage_weight(run))


def max_virtual_stages(run: RunConfig) -> int:
    """Most virtual stages that can each hold something: one per decoder and MTP layer, plus an
    embedding-only first and a loss-only last stage."""
    return run.model.num_layers + run.model.mtp_num_layers + 2


def follow_stage_overrides(run: RunConfig, overrides: Sequence[str]) -> RunConfig:
    """``run`` with its pipeline layout rebalanced when the overrides changed pp or vpp and the stage count with it.

    A stage count above :func:`max_virtual_stages` is left for validation to refuse.
    """
    p = run.parallel
    stages = p.pp * vpp_size(run)
    if stages > max_virtual_stages(run):
        return run
    if p.pipeline_layout and len(p.pipeline_layout) != stages and layout_follows_overrides(overrides):
        layout = None if stages == 1 else balanced_layout_for(run)
        return dataclasses.replace(run, parallel=dataclasses.replace(p, pipeline_layout=layout))
    return run
