"""Owner assignment for the layer-wise optimizer: Megatron's ping-pong and our cost-aware policy."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import pytest

from optbench.accounting.assignment import CostModel, cost_aware_owners, max_load_lower_bound, pingpong_owners


@dataclass(frozen=True)
class Item:
    numel: int
    ns_flops: float


def _max_flops(items, owners, group_size) -> float:
    loads = [0.0] * group_size
    for item, owner in zip(items, owners):
        loads[owner] += item.ns_flops
    return max(loads)


def _matrix(rows: int, cols: int) -> Item:
    s, n = min(rows, cols), max(rows, cols)
    return Item(rows * cols, 5 * (4.0 * s * s * n + 2.0 * s**3))


def test_pingpong_matches_megatrons_docstring_example():
    """10 parameters p0..p9 (already in ascending size) over 4 ranks: [[p0,p7,p8],[p1,p6,p9],[p2,p5],[p3,p4]]."""
    owners = pingpong_owners(list(range(1, 11)), 4)
    ranks = [[f"p{i}" for i, o in enumerate(owners) if o == r] for r in range(4)]
    assert ranks == [["p0", "p7", "p8"], ["p1", "p6", "p9"], ["p2", "p5"], ["p3", "p4"]]


def test_cost_aware_balances_what_pingpong_does_not():
    """Similar-numel matrices of very different NS cost (s^2 l): ping-pong's 0, 1, 1, 0 puts both squares on
    rank 1; the cost-aware policy gives each rank one."""
    items = [_matrix(16, 60000), _matrix(980, 980), _matrix(990, 990), _matrix(16, 64000)]
    pingpong = pingpong_owners([i.numel for i in items], 2)
    assert pingpong == [0, 1, 1, 0]
    ours = cost_aware_owners(items, 2)
    assert ours[1] != ours[2]
    assert _max_flops(items, ours, 2) < 0.6 * _max_flops(items, pingpong, 2)


@pytest.mark.parametrize("seed", range(30))
def test_cost_aware_never_worse_than_pingpong(seed):
    rng = random.Random(seed)
    group = rng.choice([2, 3, 4, 8])
    items = [_matrix(rng.choice([32, 64, 256, 1024]), rng.choice([64, 512, 2048])) for _ in range(rng.randint(1, 40))]
    items += [Item(rng.choice([64, 1 << 20]), 0.0) for _ in range(rng.randint(0, 6))]
    owners = cost_aware_owners(items, group)
    assert all(0 <= o < group for o in owners)
    assert owners == cost_aware_owners(items, group), "deterministic: every rank computes the same owners"
    pingpong = pingpong_owners([i.numel for i in items], group)
    assert _max_flops(items, owners, group) <= _max_flops(items, pingpong, group)


def test_adamw_items_go_where_modelled_time_is_lowest():
    model = CostModel()
    items = [_matrix(1024, 1024), Item(10_000_000, 0.0), Item(10_000_000, 0.0)]
    # Modelled: the matrix ~39 us (32 us NS + 7 us bytes), each AdamW item 50 us. The first AdamW item
    # goes to the empty rank, the second to the matrix's rank (39 < 50).
    assert cost_aware_owners(items, 2, model) == [0, 1, 0]
    assert model.seconds(Item(1000, 0.0)) == pytest.approx(1000 * 30.0 / 6.0e12)


@pytest.mark.parametrize("seed", range(20))
def test_lower_bound_never_exceeds_the_optimum(seed):
    rng = random.Random(seed)
    ranks = rng.randint(1, 3)
    costs = [rng.uniform(0, 10) for _ in range(rng.randint(0, 6))]
    fixed = [rng.uniform(0, 5) for _ in range(ranks)]
    best = float("inf")
    for owners in itertools.product(range(ranks), repeat=len(costs)):
        loads = list(fixed)
        for cost, owner in zip(costs, owners):
            loads[owner] += cost
        best = min(best, max(loads))
    assert max_load_lower_bound(costs, fixed) <= best + 1e-9


def test_bad_group_sizes():
    with pytest.raises(ValueError):
        pingpong_owners([1, 2], 0)
    with pytest.raises(ValueError):
        cost_aware_owners([Item(1, 1.0)], 0)
