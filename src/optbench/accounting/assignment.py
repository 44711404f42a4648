"""Which data-parallel rank owns (updates) each whole parameter under the layer-wise distributed optimizer.

Megatron Core 0.16.1 (``LayerWiseDistributedOptimizer.shard_params``): all parameters of all
groups (Muon and Adam alike) are sorted by ascending numel (a stable sort) and dealt to the ranks
of their data-parallel group in ping-pong order 0, 1, ..., D-1, D-1, ..., 0, 0, 1, ...; dense
parameters over the DP x CP group and expert parameters over the expert-data-parallel group, each
with its own counter.

``cost_aware_owners`` is ours (NVIDIA lists cost-based load balancing as upcoming): it balances a
modelled per-rank time of Newton-Schulz FLOPs plus element-wise optimizer bytes, because NS cost
grows as s^2 * l while ping-pong balances s * l.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


def pingpong_owners(sizes: Sequence[int], world: int) -> list[int]:
    """Owner rank of each parameter (in input order) under Megatron's size ping-pong assignment."""
    if world < 1:
        raise ValueError(f"world must be at least 1, got {world}")
    loop = list(range(world)) + list(range(world))[::-1]
    owners = [0] * len(sizes)
    for position, index in enumerate(sorted(range(len(sizes)), key=lambda i: sizes[i])):
        owners[index] = loop[position % len(loop)]
    return owners


class OwnedWork(Protocol):
    """Anything with the two numbers the cost-aware policy needs (e.g. accounting's OwnedItem)."""

    @property
    def numel(self) -> int:
        """Elements of the parameter (its optimizer state and element-wise traffic scale with it)."""

    @property
    def ns_flops(self) -> float:
        """Newton-Schulz FLOPs per step of its owner (0 for an AdamW-side parameter)."""


@dataclass(frozen=True)
class CostModel:
    """Seconds one rank spends on one owned parameter per step: NS FLOPs / rate + element-wise bytes / bandwidth.

    The defaults are stated assumptions for a GB300 (not measurements): Newton-Schulz GEMMs
    sustain 40 % of the 2.5 PFLOP/s dense bf16 peak, element-wise kernels 75 % of 8 TB/s HBM3e.
    Only ratios matter for the assignment, i.e. how many NS FLOPs one AdamW element is worth.
    """

    flops_per_s: float = 1.0e15
    """Sustained Newton-Schulz matmul throughput."""
    bytes_per_s: float = 6.0e12
    """Sustained memory bandwidth of the element-wise optimizer kernels."""
    adam_bytes_per_element: float = 30.0
    """AdamW: read grad (4), read+write fp32 master, exp_avg, exp_avg_sq (24), write the bf16 weight (2)."""
    muon_bytes_per_element: float = 42.0
    """Muon outside the GEMMs: grad (4), momentum r/w (8), Nesterov out (4), NS in/out (8), scale r/w (8),
    fp32 master r/w (8), bf16 weight (2)."""

    def seconds(self, item: OwnedWork) -> float:
        """Modelled time of one parameter's update on its owner."""
        per_element = self.muon_bytes_per_element if item.ns_flops > 0 else self.adam_bytes_per_element
        return item.ns_flops / self.flops_per_s + item.numel * per_element / self.bytes_per_s


DEFAULT_COST_MODEL = CostModel()


def cost_aware_owners(
    items: Sequence[OwnedWork], group_size: int, cost_model: CostModel = DEFAULT_COST_MODEL
) -> list[int]:
    """Owner index of each item: Newton-Schulz FLOPs balanced first, element-wise bytes second.

    1. Muon items (ns_flops > 0): longest-processing-time first on NS FLOPs (largest to the
       least-loaded rank, ties to the lower rank), then a bounded local search that moves or swaps
       items off the busiest rank while its load drops. If Megatron's ping-pong happens to give a
       lower maximum for these items, its placement of them is kept instead, so the policy is
       never worse than ping-pong on NS FLOPs.
    2. AdamW items: largest modelled time first onto the rank with the least modelled time so far
       (``cost_model``: the Muon items' NS time plus their element-wise bytes).

    Deterministic: every rank computes the same owners.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be at least 1, got {group_size}")
    muon = [i for i, item in enumerate(items) if item.ns_flops > 0]
    adam = [i for i, item in enumerate(items) if item.ns_flops <= 0]
    flops = [items[i].ns_flops for i in muon]
    ours = _improve(_longest_first(flops, [0.0] * group_size), flops, group_size)
    pingpong = pingpong_owners([item.numel for item in items], group_size)
    theirs = [pingpong[i] for i in muon]
    if _max_load(theirs, flops, group_size) < _max_load(ours, flops, group_size):
        ours = theirs
    owners = [0] * len(items)
    loads = [0.0] * group_size
    for index, owner in zip(muon, ours):
        owners[index] = owner
        loads[owner] += cost_model.seconds(items[index])
    adam_owners = _longest_first([cost_model.seconds(items[i]) for i in adam], loads)
    for index, owner in zip(adam, adam_owners):
        owners[index] = owner
    return owners


def _longest_first(costs: Sequence[float], initial_loads: Sequence[float]) -> list[int]:
    """Greedy LPT: each item, largest first (ties by index), to the least-loaded rank (ties: lowest rank)."""
    heap = [(load, rank) for rank, load in enumerate(initial_loads)]
    heapq.heapify(heap)
    owners = [0] * len(costs)
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        load, rank = heapq.heappop(heap)
        owners[index] = rank
        heapq.heappush(heap, (load + costs[index], rank))
    return owners


def _max_load(owners: Sequence[int], costs: Sequence[float], group_size: int) -> float:
    loads = [0.0] * group_size
    for owner, cost in zip(owners, costs):
        loads[owner] += cost
    return max(loads)


def _improve(owners: list[int], costs: Sequence[float], group_size: int, rounds: int = 200) -> list[int]:
    """Move or swap single items between the busiest rank and any other while the maximum load drops."""
    if group_size == 1:
        return owners
    loads = [0.0] * group_size
    held: list[list[int]] = [[] for _ in range(group_size)]
    for index, (owner, cost) in enumerate(zip(owners, costs)):
        loads[owner] += cost
        held[owner].append(index)
    for _ in range(rounds):
        busiest = max(range(group_size), key=lambda r: (loads[r], -r))
        best_max, best_move = loads[busiest] * (1.0 - 1e-12), None
        for i in held[busiest]:
            for other in range(group_size):
                if other == busiest:
                    continue
                candidates = [(None, costs[i])] + [(j, costs[i] - costs[j]) for j in held[other] if costs[j] < costs[i]]
                for j, delta in candidates:
                    new_max = max(loads[busiest] - delta, loads[other] + delta)
                    if new_max < best_max:
                        best_max, best_move = new_max, (i, j, other)
        if best_move is None:
            break
        i, j, other = best_move
        _transfer(i, busiest, other, owners, loads, held, costs)
        if j is not None:
            _transfer(j, other, busiest, owners, loads, held, costs)
    return owners


def _transfer(index, source, target, owners, loads, held, costs) -> None:
    owners[index] = target
    loads[source] -= costs[index]
    loads[target] += costs[index]
    held[source].remove(index)
    held[target].append(index)


def max_load_lower_bound(costs: Sequence[float], fixed: Sequence[float]) -> float:
    """A lower bound on max_r (fixed[r] + load assigned to r) over every whole-item assignment.

    ``fixed[r]`` is work rank r has whatever the assignment. Three bounds, the largest wins: the
    average (sum of costs and fixed loads over the ranks); the largest item on the least-fixed
    rank; and, with more items than ranks, two of the len(fixed)+1 largest items sharing a rank.
    """
    ranks = len(fixed)
    if ranks < 1:
        raise ValueError("fixed must name at least one rank")
    bound = max(max(fixed), (sum(costs) + sum(fixed)) / ranks)
    ordered = sorted(costs, reverse=True)
    if ordered:
        bound = max(bound, ordered[0] + min(fixed))
    if len(ordered) > ranks:
        bound = max(bound, ordered[ranks - 1] + ordered[ranks] + min(fixed))
    return bound
