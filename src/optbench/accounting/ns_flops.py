"""Newton-Schulz FLOPs: per matrix, per tensor-parallel mode, and per rank under the layer-wise optimizer.

Convention (Megatron Core 0.16.1 with Emerging-Optimizers 0.1.0: docs/optimizer.md, Semantics). Muon transposes a matrix
so that it is s x l with s <= l; one Newton-Schulz iteration computes A = X X^T (s x l times l x s: 2*s^2*l FLOPs), B =
b*A + c*A A (s x s times s x s: 2*s^3) and X' = a*X + B X (s x s times s x l: 2*s^2*l), so

    flops_per_iteration = 4 * s^2 * l + 2 * s^3.

Emerging-Optimizers 0.4.0's ``cubic5`` has c = 0 at every step and skips A A (X' = a*X + b*A X): 4 * s^2 * l, two
thirds of the quintic count for a square matrix (SYRK: 3 * s^2 * l).

X X^T and A A are symmetric: a SYRK-style kernel computes one triangle, ideally halving them:

    flops_per_iteration_syrk = 3 * s^2 * l + s^3.

The Frobenius normalisation, the a*X and b*A axpys and the scale are O(s*l) and not counted. A
FLOP is a FLOP whatever the precision the products run in (``fp32_matmul_prec``).

Tensor-parallel modes (Megatron Core 0.16.1 ``TensorParallelMuon`` + Emerging-Optimizers
``newton_schulz_tp``), for a weight whose local shard is sharded t ways along ``partition_dim`` d:

* blockwise: Megatron passes no partition_dim, so every rank orthogonalizes its local shard as a
  matrix of its own (natural orientation).
* duplicated: all-gather the shards along d, every rank orthogonalizes the gathered matrix
  (t-fold redundant: each of the t ranks pays the full count).
* distributed: the orientation is forced by d (d = 0 transposes), so the Gram matrix is r x r with r
  the unsharded dimension and the contraction runs over the local c/t of the sharded one; per rank
  ``4 * r^2 * (c/t) + 2 * r^3`` per iteration (SYRK: ``3 r^2 c/t + r^3``), whichever of r, c is smaller.
  With t = 1 the forced orientation still applies.
* A parameter with no partition_dim (the router) is orthogonalized whole on every rank in any mode.

``partition_dim`` is the attribute the optimizer reads, as Transformer Engine sets it (see
:func:`megatron_partition_dim`), not always the dimension that is really sharded.

Per rank (``rank_ns_flops``): each rank holds its pipeline stages, its EP slice of experts and its
TP/ETP shard (:mod:`optbench.accounting.placement`). With the layer-wise optimizer
(``optimizer.muon.layer_wise``, Bridge's ``dist_muon``) every parameter of a data-parallel group is
owned by one rank of it (Megatron: sorted by numel, dealt ping-pong; dense parameters over DP x CP,
expert parameters over expert-DP; everything owned by everyone when DP x CP is 1), and only the
owner runs its Newton-Schulz. Without it (Bridge's ``muon``) every rank runs all of its local matrices.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import NamedTuple

from optbench.accounting.params import EXPERT, QKV, ROUTER, ParamSpec
from optbench.accounting.placement import (
    LocalParam,
    Placement,
    dense_dp_groups,
    expert_dp_groups,
    place,
)
from optbench.config.layout import Layout, derive_layout
from optbench.config.optimizers import entry
from optbench.config.schema import MUON_TP_MODES, ModelConfig, RunConfig
from optbench.accounting.assignment import pingpong_owners


def ns_gram_iteration_flops(gram: int, contraction: int, syrk: bool = False, cubic: bool = False) -> float:
    """One Newton-Schulz iteration with X of shape gram x contraction (orientation given, not chosen). ``cubic``: the
    c = 0 step of Emerging-Optimizers 0.4.0's cubic5 (X' = a X + b A X: no A A product, 4 r^2 c; SYRK 3 r^2 c)."""
    r, c = float(gram), float(contraction)
    if cubic:
        return (3.0 if syrk else 4.0) * r * r * c
    if syrk:
        return 3.0 * r * r * c + r**3
    return 4.0 * r * r * c + 2.0 * r**3


def ns_iteration_flops(rows: int, cols: int, syrk: bool = False, cubic: bool = False) -> float:
    """FLOPs of one Newton-Schulz iteration on a rows x cols matrix."""
    return ns_gram_iteration_flops(min(rows, cols), max(rows, cols), syrk, cubic)


def ns_flops(rows: int, cols: int, steps: int, syrk: bool = False, cubic: bool = False) -> float:
    """FLOPs of a full orthogonalization (``steps`` iterations) of a rows x cols matrix."""
    return steps * ns_iteration_flops(rows, cols, syrk, cubic)


def orthogonalized_matrices(spec: ParamSpec, model: ModelConfig, split_qkv: bool = True) -> list[tuple[int, int]]:
    """Unsharded shapes of the matrices Muon orthogonalizes for one parameter (empty if not a Muon parameter).

    Megatron Core 0.16.1 (``TensorParallelMuon.orthogonalize``): a fused ``linear_qkv`` weight with
    ``muon_split_qkv`` is viewed as [groups, q_per_group*kv + kv + kv, h], split into its Q, K and V
    blocks, and each block, gathered over all groups, is orthogonalized as one matrix:
    Q [heads*kv, h], K [groups*kv, h], V [groups*kv, h]. Every other 2-D weight (MLA projections,
    the router, each expert's fused [gate; up] fc1 and its fc2) is orthogonalized whole.
    """
    if not spec.is_muon:
        return []
    if spec.kind == QKV and split_qkv:
        kv = model.kv_channels or model.hidden_size // model.num_attention_heads
        groups = model.num_query_groups or model.num_attention_heads
        hidden = spec.shape[1]
        return [(model.num_attention_heads * kv, hidden), (groups * kv, hidden), (groups * kv, hidden)]
    return [(spec.shape[0], spec.shape[1])]


def megatron_partition_dim(spec: ParamSpec, ep: int, etp: int) -> int | None:
    """The ``partition_dim`` attribute Megatron's Muon reads for a parameter.

    Transformer Engine tags every linear weight it creates with ``dim = 1 if parallel_mode == "row"
    else 0``, also when Megatron hands it no parallel mode: the MLA down-projections (``TELinear`` in
    duplicated mode) and routed experts whose communication Megatron does itself (EP > 1 or ETP > 1,
    ``TEGroupedLinear`` with parallel_mode None) therefore read 0, fc2 included. The router is a plain
    parameter without the attribute (None). Everything else reads its column (0) / row (1) dimension.
    """
    if spec.kind == ROUTER:
        return None
    if spec.is_expert and (ep > 1 or etp > 1):
        return 0
    return 0 if spec.partition_dim is None else spec.partition_dim


@lru_cache(maxsize=4096)
def rank_matrix_ns_work(
    local_shape: tuple[int, int],
    partition_dim: int | None,
    group_size: int,
    tp_mode: str,
    steps: int,
    syrk: bool,
    cubic: bool = False,
) -> tuple[int, float]:
    """(Gram size, Newton-Schulz FLOPs) of one rank's orthogonalization of a matrix whose local shard is
    ``local_shape``: the Gram matrix ``X X^T`` is what the iteration's GEMMs produce, and its size is what makes
    them small or large."""
    if tp_mode not in MUON_TP_MODES:
        raise ValueError(f"unknown tp_mode {tp_mode!r}; choose one of {list(MUON_TP_MODES)}")
    rows, cols = local_shape
    if tp_mode == "blockwise" or partition_dim is None:
        return min(rows, cols), ns_flops(rows, cols, steps, syrk, cubic)
    if tp_mode == "duplicated":
        gathered = (rows * group_size, cols) if partition_dim == 0 else (rows, cols * group_size)
        return min(gathered), ns_flops(*gathered, steps, syrk, cubic)
    gram, contraction = (cols, rows) if partition_dim == 0 else (rows, cols)
    return gram, steps * ns_gram_iteration_flops(gram, contraction, syrk, cubic)


def local_param_ns_flops(
    param: LocalParam, model: ModelConfig, run: RunConfig, tp_mode: str, syrk: bool = False
) -> float:
    """Matrix-optimizer FLOPs per step one holder of ``param`` spends on it, as its registry entry counts them: per
    tensor-parallel mode (``matrix_calls``: :func:`newton_schulz_calls` for the Muon family) or on the local shard
    (``matrix_flops``); 0 for Adam-side parameters."""
    spec, o = param.spec, run.optimizer
    if not spec.is_muon or not o.matrix_optimizer:
        return 0.0
    own = entry(o.name)
    if own.matrix_flops is not None:  # not tensor-parallel aware: every shard is a matrix of its own, in every TP mode
        return own.matrix_flops(o.matrix_section, *param.local_shape).total
    return sum(flops for _, flops in own.calls()(param, model, run, tp_mode, syrk))


def newton_schulz_calls(
    param: LocalParam, model: ModelConfig, run: RunConfig, tp_mode: str, syrk: bool = False
) -> tuple[tuple[int, float], ...]:
    """(Gram size, FLOPs) of each Newton-Schulz call one holder of a Muon or AdaMuon ``param`` makes per step (a
    split QKV makes three)."""
    muon, spec, p = run.optimizer.muon, param.spec, run.parallel
    dim = megatron_partition_dim(spec, p.ep, p.etp)
    group = p.etp if spec.is_expert else p.tp
    rows, cols = param.local_shape
    if spec.kind == QKV and muon.split_qkv:
        kv = model.kv_channels or model.hidden_size // model.num_attention_heads
        groups = (model.num_query_groups or model.num_attention_heads) // param.shards
        q_rows = rows - 2 * groups * kv
        blocks = [(q_rows, cols), (groups * kv, cols), (groups * kv, cols)]
    else:
        blocks = [(rows, cols)]
    cubic = muon.coefficients == "cubic5"
    return tuple(rank_matrix_ns_work(b, dim, group, tp_mode, muon.ns_steps, syrk, cubic) for b in blocks)


class OwnedItem(NamedTuple):
    """One parameter whose optimizer update is owned by one rank of a data-parallel group (a named tuple:
    a Kimi K2 layout deals some 50,000 of them per TP mode, and a frozen dataclass is slow to build)."""

    name: str
    """Megatron parameter name."""
    numel: int
    """Elements this rank holds (TP/ETP shard): Megatron's ping-pong sort key; also the AdamW state size."""
    ns_flops: float
    """Newton-Schulz FLOPs per step the owning rank spends on it (0.0 for AdamW-side parameters)."""
    is_expert: bool
    """Routed-expert parameter (dealt over the expert-data-parallel group)."""
    param: LocalParam
    """The shard itself (its counts in another TP mode come from it: :func:`recounted_rank_ns_flops`)."""


class _DealtItems:
    """The items of one held parameter list, built on first use (a group whose shape class was priced already
    need never build its own: Kimi K2 on EP64 holds some 50,000 expert shards per mode)."""

    def __init__(self, params: Sequence[LocalParam], run: RunConfig, tp_mode: str, syrk: bool, memo: dict) -> None:
        self._args = (params, run, tp_mode, syrk, memo)

    @cached_property
    def items(self) -> tuple[OwnedItem, ...]:
        return _items(*self._args)


@dataclass(frozen=True, eq=False)
class DpGroupWork:
    """The parameters one data-parallel group deals out among its ranks."""

    ranks: tuple[int, ...]
    """Global ranks of this data-parallel (dense: DP x CP) or expert-data-parallel group."""
    shape_class: tuple[str, int]
    """("dense" or "experts", pipeline rank). Groups of one class deal items of the same sizes, counts and
    order: every TP rank of a pipeline rank holds the same dense parameters, and every EP rank the same number
    of experts of each of its layers, each expert shaped alike (only the expert numbers differ). So a cost, an
    ownership or a byte count computed item by item for one group of a class holds for all of them."""
    dealt: _DealtItems
    """Where :attr:`items` comes from (shared by the TP ranks of a pipeline rank)."""

    @property
    def items(self) -> tuple[OwnedItem, ...]:
        """Parameters dealt among these ranks (the same for every rank of the group), Muon's first."""
        return self.dealt.items


OwnersFn = Callable[[Sequence[OwnedItem], int], list[int]]
"""(items, group size) -> owner index within the group for each item."""


def pingpong_by_numel(items: Sequence[OwnedItem], group_size: int) -> list[int]:
    """Megatron's layer-wise assignment: stable sort by numel, dealt ping-pong."""
    return pingpong_owners([item.numel for item in items], group_size)


def _items(
    params: Sequence[LocalParam], run: RunConfig, tp_mode: str, syrk: bool, memo: dict[tuple, float]
) -> tuple[OwnedItem, ...]:
    # Megatron chains the Muon optimizer's groups before Adam's, each in model order; the stable
    # sort by numel keeps that order among equal sizes.
    has_muon = run.optimizer.matrix_optimizer
    muon, adam = [], []
    for param in params:
        (muon if has_muon and param.spec.is_muon else adam).append(param)
    items = []
    for param in muon + adam:
        spec = param.spec
        shape_key = _shape_key(param)
        if shape_key not in memo:
            memo[shape_key] = local_param_ns_flops(param, run.model, run, tp_mode, syrk)
        items.append(OwnedItem(spec.name, param.numel, memo[shape_key], spec.kind == EXPERT, param))
    return tuple(items)


def _shape_key(param: LocalParam) -> tuple:
    """Everything of a shard its Newton-Schulz count depends on (thousands of experts share a handful)."""
    spec = param.spec
    return (spec.kind, spec.shape, spec.partition_dim, param.local_shape, param.shards)


def recipe_tp_mode(run: RunConfig) -> str:
    """The run's Newton-Schulz TP mode (blockwise for an optimizer without one: its counts are the same in every
    mode, zero for AdamW)."""
    return getattr(run.optimizer.matrix_section, "tp_mode", "blockwise")


def dp_group_work(
    run: RunConfig,
    tp_mode: str | None = None,
    syrk: bool = False,
    placement: Placement | None = None,
    layout: Layout | None = None,
) -> list[DpGroupWork]:
    """Every dense (DP x CP) and expert-data-parallel group with the parameters it deals out.

    ``placement`` and ``layout``: the run's, when the caller holds them already (a resolved run does).
    """
    mode = tp_mode or recipe_tp_mode(run)
    layout = layout or derive_layout(run)
    placement = placement or place(run)
    memo: dict[tuple, float] = {}
    dense = [_DealtItems(held.dense, run, mode, syrk, memo) for held in placement.ranks]
    experts = [[_DealtItems(e, run, mode, syrk, memo) for e in held.experts] for held in placement.ranks]
    groups = [DpGroupWork(g.ranks, ("dense", g.pp_rank), dense[g.pp_rank]) for g in dense_dp_groups(layout)]
    if run.model.num_moe_experts:
        groups += [
            DpGroupWork(g.ranks, ("experts", g.pp_rank), experts[g.pp_rank][g.expert_rank or 0])
            for g in expert_dp_groups(layout)
        ]
    return groups


def rank_ns_flops(
    run: RunConfig, tp_mode: str | None = None, syrk: bool = False, owners_fn: OwnersFn = pingpong_by_numel
) -> list[float]:
    """Newton-Schulz FLOPs per step of every global rank (index = rank); zeros for AdamW."""
    key = (tp_mode or recipe_tp_mode(run), syrk)
    return recounted_rank_ns_flops(run, dp_group_work(run, *key), [key], owners_fn=owners_fn)[key]


def recounted_rank_ns_flops(
    run: RunConfig,
    groups: Sequence[DpGroupWork],
    keys: Sequence[tuple[str, bool]],
    layout: Layout | None = None,
    owners_fn: OwnersFn = pingpong_by_numel,
) -> dict[tuple[str, bool], list[float]]:
    """Newton-Schulz FLOPs per step of every global rank for every (TP mode, SYRK) in ``keys``, from the
    groups dealt in any one mode.

    Which rank owns which parameter depends only on the parameters' sizes (Megatron's ping-pong by
    numel), so the groups of one mode serve every mode: each group is dealt once and only each shape's
    count is redone per mode. (``owners_fn`` may deal by cost instead: it reads the groups' own counts,
    so give it only the groups' own mode.)
    """
    world = run.parallel.num_gpus
    out = {key: [0.0] * world for key in keys}
    if not run.optimizer.matrix_optimizer:
        return out
    layout = layout or derive_layout(run)
    shared = run.optimizer.layer_wise and layout.dp * layout.cp > 1
    counts: dict[tuple[str, bool], dict[tuple, float]] = {key: {} for key in keys}
    dealt: dict[tuple, tuple[dict, list[int] | None]] = {}  # per shape class: each mode's costs, the owners
    for group in groups:
        if group.shape_class not in dealt:
            shapes = [_shape_key(item.param) for item in group.items]
            for shape, item in zip(shapes, group.items):
                if shape not in counts[keys[0]]:
                    for key in keys:
                        counts[key][shape] = local_param_ns_flops(item.param, run.model, run, *key)
            owners = owners_fn(group.items, len(group.ranks)) if shared else None
            dealt[group.shape_class] = {
                key: costs_by_owner(list(map(counts[key].__getitem__, shapes)), owners) for key in keys
            }
        by_key = dealt[group.shape_class]
        for key in keys:
            add_to_ranks(out[key], group.ranks, by_key[key])
    return out


def costs_by_owner(costs: list[float], owners: list[int] | None) -> float | int | list[list[float]]:
    """A group's costs, each owner's in model order; their sum when every rank of the group does every item."""
    if owners is None:
        return sum(costs)
    by_owner: list[list[float]] = [[] for _ in range(max(owners, default=-1) + 1)]
    for cost, owner in zip(costs, owners):
        by_owner[owner].append(cost)
    return by_owner


def add_to_ranks(values: list[float], ranks: Sequence[int], by_owner: float | int | list[list[float]]) -> None:
    """Add a group's :func:`costs_by_owner` to its ranks' entries of ``values``: the sum to every rank, or each
    owner's costs item by item in model order (reduce), so that every sum is the same to the last bit."""
    if not isinstance(by_owner, list):
        for rank in ranks:
            values[rank] += by_owner
        return
    for rank, costs in zip(ranks, by_owner):
        values[rank] = functools.reduce(operator.add, costs, values[rank])


def ns_flops_stats(flops: Sequence[float]) -> dict[str, float]:
    """Newton-Schulz FLOPs per step per GPU from every rank's: max and mean over ranks, the busiest rank, the total."""
    busiest = max(range(len(flops)), key=flops.__getitem__)
    return {
        "max": flops[busiest],
        "mean": sum(flops) / len(flops),
        "min": min(flops),
        "busiest_rank": busiest,
        "total": sum(flops),
    }


def ns_flops_per_step_per_gpu(run: RunConfig, tp_mode: str | None = None, syrk: bool = False) -> dict[str, float]:
    """:func:`ns_flops_stats` of :func:`rank_ns_flops`."""
    return ns_flops_stats(rank_ns_flops(run, tp_mode, syrk))
