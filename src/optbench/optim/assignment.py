"""Which data-parallel rank owns (updates) each whole parameter under the layer-wise distributed optimizer.

Megatron Core 0.16.1 (``LayerWiseDistributedOptimizer.shard_params``): all parameters of all
groups (Muon and Adam alike) are sorted by ascending numel (a stable sort) and dealt to the ranks
of their data-parallel group in ping-pong order 0, 1, ..., D-1, D-1, ..., 0, 0, 1, ...; dense
parameters over the DP x CP group and expert parameters over the expert-data-parallel group, each
with its own counter.
"""

from __future__ import annotations

from collections.abc import Sequence


def pingpong_owners(sizes: Sequence[int], world: int) -> list[int]:
    """Owner rank of each parameter (in input order) under Megatron's size ping-pong assignment."""
    if world < 1:
        raise ValueError(f"world must be at least 1, got {world}")
    loop = list(range(world)) + list(range(world))[::-1]
    owners = [0] * len(sizes)
    for position, index in enumerate(sorted(range(len(sizes)), key=lambda i: sizes[i])):
        owners[index] = loop[position % len(loop)]
    return owners
