"""Newton-Schulz FLOPs: per matrix, per tensor-parallel mode, and per rank under the layer-wise optimizer.

Convention (FACTS.md section 5). Muon transposes a matrix so that it is s x l with s <= l; one
Newton-Schulz iteration computes A = X X^T (s x l times l x s: 2*s^2*l FLOPs), B = b*A + c*A A
(s x s times s x s: 2*s^3) and X' = a*X + B X (s x s times s x l: 2*s^2*l), so

    flops_per_iteration = 4 * s^2 * l + 2 * s^3.

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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from optbench.accounting.params import EXPERT, QKV, ROUTER, ParamSpec
from optbench.accounting.placement import (
    LocalParam,
    dense_dp_groups,
    expert_dp_groups,
    layout_key,
    pipeline_rank_params,
)
from optbench.config.layout import derive_layout
from optbench.config.schema import MUON_TP_MODES, ModelConfig, RunConfig
from optbench.optim.assignment import pingpong_owners


def ns_gram_iteration_flops(gram: int, contraction: int, syrk: bool = False) -> float:
    """One Newton-Schulz iteration with X of shape gram x contraction (orientation given, not chosen)."""
    r, c = float(gram), float(contraction)
    if syrk:
        return 3.0 * r * r * c + r**3
    return 4.0 * r * r * c + 2.0 * r**3


def ns_iteration_flops(rows: int, cols: int, syrk: bool = False) -> float:
    """FLOPs of one Newton-Schulz iteration on a rows x cols matrix."""
    return ns_gram_iteration_flops(min(rows, cols), max(rows, cols), syrk)


def ns_flops(rows: int, cols: int, steps: int, syrk: bool = False) -> float:
    """FLOPs of a full orthogonalization (``steps`` iterations) of a rows x cols matrix."""
    return steps * ns_iteration_flops(rows, cols, syrk)


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
def rank_matrix_ns_flops(
    local_shape: tuple[int, int], partition_dim: int | None, group_size: int, tp_mode: str, steps: int, syrk: bool
) -> float:
    """Newton-Schulz FLOPs one rank spends on one matrix whose local shard is ``local_shape``."""
    if tp_mode not in MUON_TP_MODES:
        raise ValueError(f"unknown tp_mode {tp_mode!r}; choose one of {list(MUON_TP_MODES)}")
    rows, cols = local_shape
    if tp_mode == "blockwise" or partition_dim is None:
        return ns_flops(rows, cols, steps, syrk)
    if tp_mode == "duplicated":
        gathered = (rows * group_size, cols) if partition_dim == 0 else (rows, cols * group_size)
        return ns_flops(*gathered, steps, syrk)
    gram, contraction = (cols, rows) if partition_dim == 0 else (rows, cols)
    return steps * ns_gram_iteration_flops(gram, contraction, syrk)


def local_param_ns_flops(
    param: LocalParam, model: ModelConfig, run: RunConfig, tp_mode: str, syrk: bool = False
) -> float:
    """Newton-Schulz FLOPs per step one holder of ``param`` spends on it (0 for Adam-side parameters)."""
    muon, spec, p = run.optimizer.muon, param.spec, run.parallel
    if muon is None or not spec.is_muon:
        return 0.0
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
    return sum(rank_matrix_ns_flops(b, dim, group, tp_mode, muon.ns_steps, syrk) for b in blocks)


@dataclass(frozen=True)
class OwnedItem:
    """One parameter whose optimizer update is owned by one rank of a data-parallel group."""

    name: str
    """Megatron parameter name."""
    numel: int
    """Elements this rank holds (TP/ETP shard): Megatron's ping-pong sort key; also the AdamW state size."""
    ns_flops: float
    """Newton-Schulz FLOPs per step the owning rank spends on it (0.0 for AdamW-side parameters)."""
    is_expert: bool
    """Routed-expert parameter (dealt over the expert-data-parallel group)."""


@dataclass(frozen=True)
class DpGroupWork:
    """The parameters one data-parallel group deals out among its ranks."""

    ranks: tuple[int, ...]
    """Global ranks of this data-parallel (dense: DP x CP) or expert-data-parallel group."""
    items: tuple[OwnedItem, ...]
    """Parameters dealt among these ranks (the same for every rank of the group), Muon's first."""


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
    has_muon = run.optimizer.muon is not None
    muon, adam = [], []
    for param in params:
        (muon if has_muon and param.spec.is_muon else adam).append(param)
    items = []
    for param in muon + adam:
        spec = param.spec
        # Thousands of experts share a handful of shapes: cost each shape once.
        shape_key = (spec.kind, spec.shape, spec.partition_dim, param.local_shape, param.shards)
        if shape_key not in memo:
            memo[shape_key] = local_param_ns_flops(param, run.model, run, tp_mode, syrk)
        items.append(OwnedItem(spec.name, param.numel, memo[shape_key], spec.kind == EXPERT))
    return tuple(items)


def _resolve_mode(run: RunConfig, tp_mode: str | None) -> str:
    if tp_mode is not None:
        return tp_mode
    return run.optimizer.muon.tp_mode if run.optimizer.muon is not None else "blockwise"


def _run_key(run: RunConfig, tp_mode: str, syrk: bool) -> tuple:
    muon = run.optimizer.muon
    muon_key = None if muon is None else (muon.ns_steps, muon.split_qkv, muon.layer_wise)
    return (layout_key(run), run.parallel.num_gpus, run.parallel.cp, muon_key, tp_mode, syrk)


_GROUPS: dict[tuple, list[DpGroupWork]] = {}
_RANKS: dict[tuple, list[float]] = {}


def dp_group_work(run: RunConfig, tp_mode: str | None = None, syrk: bool = False) -> list[DpGroupWork]:
    """Every dense (DP x CP) and expert-data-parallel group with the parameters it deals out; cached."""
    mode = _resolve_mode(run, tp_mode)
    key = _run_key(run, mode, syrk)
    if key not in _GROUPS:
        if len(_GROUPS) >= 64:
            _GROUPS.clear()
        layout = derive_layout(run)
        per_rank = [pipeline_rank_params(run, r) for r in range(layout.pp)]
        memo: dict[tuple, float] = {}
        dense = [_items(params.dense, run, mode, syrk, memo) for params in per_rank]
        experts = [[_items(e, run, mode, syrk, memo) for e in params.experts] for params in per_rank]
        groups = [DpGroupWork(g.ranks, dense[g.pp_rank]) for g in dense_dp_groups(layout)]
        if run.model.num_moe_experts:
            groups += [
                DpGroupWork(g.ranks, experts[g.pp_rank][g.expert_rank or 0]) for g in expert_dp_groups(layout)
            ]
        _GROUPS[key] = groups
    return _GROUPS[key]


def rank_ns_flops(
    run: RunConfig, tp_mode: str | None = None, syrk: bool = False, owners_fn: OwnersFn = pingpong_by_numel
) -> list[float]:
    """Newton-Schulz FLOPs per step of every global rank (index = rank); zeros for AdamW."""
    mode = _resolve_mode(run, tp_mode)
    key = (*_run_key(run, mode, syrk), owners_fn)
    if key in _RANKS:
        return list(_RANKS[key])
    world = run.parallel.num_gpus
    flops = [0.0] * world
    muon = run.optimizer.muon
    if muon is not None:
        groups = dp_group_work(run, mode, syrk)
        layout = derive_layout(run)
        # Megatron skips sharding altogether when DP x CP is 1 (every rank owns all it holds).
        shared = muon.layer_wise and layout.dp * layout.cp > 1
        for group in groups:
            if not shared:
                total = sum(item.ns_flops for item in group.items)
                for rank in group.ranks:
                    flops[rank] += total
                continue
            owners = owners_fn(group.items, len(group.ranks))
            for item, owner in zip(group.items, owners):
                flops[group.ranks[owner]] += item.ns_flops
    if len(_RANKS) >= 64:
        _RANKS.clear()
    _RANKS[key] = flops
    return list(flops)


def ns_flops_per_step_per_gpu(run: RunConfig, tp_mode: str | None = None, syrk: bool = False) -> dict[str, float]:
    """Newton-Schulz FLOPs per step per GPU: max and mean over ranks, the busiest rank, and the total."""
    flops = rank_ns_flops(run, tp_mode, syrk)
    busiest = max(range(len(flops)), key=flops.__getitem__)
    return {
        "max": flops[busiest],
        "mean": sum(flops) / len(flops),
        "min": min(flops),
        "busiest_rank": busiest,
        "total": sum(flops),
    }
