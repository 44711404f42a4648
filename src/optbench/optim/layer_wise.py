"""The layer-wise distributed optimizer's sharding: whole parameters owned by one data-parallel rank.

Megatron Core 0.16.1 ``LayerWiseDistributedOptimizer``: gradients are all-reduced in full, every
rank updates only the parameters it owns (Muon and AdamW sides alike, keeping optimizer state only
for those), then one all-gather per group copies each owner's updated parameters to every rank.

Megatron's all-gather is variable-size (each rank contributes its owned elements). torch's gloo
backend only gathers equal sizes, so each rank's owned parameters are flattened into a buffer
padded to the largest rank's element count: still one collective per step (per parameter dtype),
at the price of (world * max - total) padding elements on the wire. nccl takes the same path.

Locally there is no expert parallelism, so every parameter (HF expert stacks included, one 3-D
parameter each) is dealt over the one data-parallel group, as Megatron does when EP = 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from optbench.accounting.assignment import cost_aware_owners, pingpong_owners
from optbench.accounting.ns_flops import ns_flops
from optbench.optim.routing import ParamRoute, ns_matrix_shapes

ASSIGNMENTS = ("pingpong", "cost_aware")


@dataclass(frozen=True)
class ParamWork:
    """What the assignment policies weigh for one parameter."""

    name: str
    """Parameter name."""
    numel: int
    """Elements (Megatron's ping-pong sort key)."""
    ns_flops: float
    """Newton-Schulz FLOPs per step of its owner (0 on the AdamW side)."""


def param_work(routes: Sequence[ParamRoute], ns_steps: int, split_qkv: bool, syrk: bool = False) -> list[ParamWork]:
    """The work item of each routed parameter, in the given order."""
    return [
        ParamWork(
            r.name,
            r.param.numel(),
            sum(ns_flops(rows, cols, ns_steps, syrk) for rows, cols in ns_matrix_shapes(r, split_qkv)),
        )
        for r in routes
    ]


def assign_owners(work: Sequence[ParamWork], world: int, policy: str) -> list[int]:
    """Owner rank of each parameter under ``policy`` (pingpong: Megatron's; cost_aware: ours)."""
    if policy == "pingpong":
        return pingpong_owners([w.numel for w in work], world)
    if policy == "cost_aware":
        return cost_aware_owners(work, world)
    raise ValueError(f"unknown layer-wise assignment {policy!r}; choose one of {list(ASSIGNMENTS)}")


class LayerWiseSharding:
    """Owners of every parameter of a data-parallel group, and the all-gather of updated parameters."""

    def __init__(self, names: Sequence[str], params: Sequence[nn.Parameter], owners: Sequence[int], group) -> None:
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        if len(params) != len(owners) or any(not 0 <= o < self.world for o in owners):
            raise ValueError("every parameter needs one owner rank inside the data-parallel group")
        self.owner_of_name = dict(zip(names, owners))
        """Owner rank of each parameter name (saved with the optimizer state, checked on resume)."""
        self._owned_ids = {id(p) for p, o in zip(params, owners) if o == self.rank}
        self._buckets: list[tuple[list[list[nn.Parameter]], list[int]]] = []
        for dtype in dict.fromkeys(p.dtype for p in params):
            per_rank = [[p for p, o in zip(params, owners) if o == r and p.dtype == dtype] for r in range(self.world)]
            self._buckets.append((per_rank, [sum(p.numel() for p in ps) for ps in per_rank]))
        self._gather_buffers: dict[int, list[torch.Tensor]] = {}

    @classmethod
    def build(
        cls,
        routes: Sequence[ParamRoute],
        group,
        policy: str,
        *,
        ns_steps: int,
        split_qkv: bool,
        assign: Callable[[Sequence[ParamWork], int, str], list[int]] = assign_owners,
    ) -> LayerWiseSharding:
        """Shard ``routes`` (in Megatron's listing order, see ``routing.megatron_order``) over ``group``."""
        world = dist.get_world_size(group)
        owners = assign(param_work(routes, ns_steps, split_qkv), world, policy)
        return cls([r.name for r in routes], [r.param for r in routes], owners, group)

    def owns(self, param: nn.Parameter) -> bool:
        """Whether this rank updates ``param``."""
        return id(param) in self._owned_ids

    @torch.no_grad()
    def all_gather(self) -> None:
        """Copy every owner's updated parameters to all ranks: one padded all-gather per dtype."""
        for bucket_index, (per_rank, sizes) in enumerate(self._buckets):
            width = max(sizes)
            if width == 0:
                continue
            mine = per_rank[self.rank]
            reference = next(p for ps in per_rank for p in ps)
            local = torch.zeros(width, dtype=reference.dtype, device=reference.device)
            if mine:
                torch.cat([p.detach().reshape(-1) for p in mine], out=local[: sizes[self.rank]])
            gathered = self._gather_buffers.get(bucket_index)
            if gathered is None:
                gathered = [torch.empty_like(local) for _ in range(self.world)]
                self._gather_buffers[bucket_index] = gathered
            dist.all_gather(gathered, local, group=self.group)
            for rank, params in enumerate(per_rank):
                if rank == self.rank:
                    continue
                offset = 0
                for p in params:
                    p.copy_(gathered[rank][offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
