"""Collective communication times on a cluster, from volumes and cited bandwidths.

Bandwidth-only (alpha-beta without the alpha) ring formulas, per GPU, for a group of ``n`` ranks
and a buffer of ``B`` bytes (Thakur, Rabenseifner and Gropp, "Optimization of Collective
Communication Operations in MPICH", 2005; the bus-bandwidth convention of NVIDIA's nccl-tests):

* all-reduce: ``2 (n-1)/n * B / bw``; reduce-scatter and all-gather of a B-byte result:
  ``(n-1)/n * B / bw``, with ``bw`` the achievable NVLink bandwidth when the whole group sits in one
  NVLink domain (block of consecutive ranks, :mod:`optbench.projection.interconnect`);
* a group spread over ``k > 1`` domains with ``g`` members in each runs hierarchically (reduce-scatter
  inside the domain over NVLink, the cross-domain step on ``B / g`` bytes over every member's own NIC,
  all-gather inside the domain; Jia et al., "Highly Scalable Deep Learning Training System with
  Mixed-Precision", 2018, section 3.3): all-reduce ``2 (g-1)/g * B / nvlink + 2 (k-1)/k * B / g / network``,
  reduce-scatter and all-gather half of each term;
* all-to-all where every rank sends ``V`` bytes spread evenly over the group: the share for peers in
  its domain goes over NVLink, the rest over the network at the same time, so
  ``max(V * local/n / nvlink, V * remote/n / network)``, its NVLink rate NCCL's measured all-to-all rate for
  the domain's group size where one is published (:mod:`optbench.projection.nccl_all_to_all`);
* point-to-point: ``B / bw`` of the link between the two ranks.

Point-to-point transfers (the pipeline's hops, the context-parallel ring) and NCCL's all-to-all (its sends to
every peer, grouped and run at once over its channels) pay one step of that latency: ``8.4 us`` and ``3.4 us``
over NVLink or ``9.6 us`` across the network, the slowest peer's for the all-to-all; NCCL's tuning model prices no
point-to-point operation, so this is its one-ring-step figure, a lower bound. The flex dispatcher's all-to-all
(HybridEP, DeepEP: not NCCL) has no latency term.

Every ring collective also pays NCCL's own latency model for its ring / Simple protocol (``src/graph/tuning.cc`` of
NVIDIA/nccl: ``baseLat`` 8.4 us, then per ring step 3.4 us over NVLink and 9.6 us over the network;
``passes x (n - 1)`` steps of which ``passes x (k - 1)`` cross domains): a collective over a group of ``n`` ranks
costs at least ``8.4 + 3.4 x intra steps + 9.6 x inter steps`` us, which is what grows as a data-parallel group
grows (:data:`RING_BASE_S`, :data:`RING_NVLINK_STEP_S`, :data:`RING_NETWORK_STEP_S`).

Not modelled: NVLS / SHARP in-network reductions, tree algorithms, fabric oversubscription.
"""

from __future__ import annotations

import math

from collections.abc import Sequence

from optbench.projection.interconnect import Interconnect
from optbench.projection.nccl_all_to_all import nvlink_rate


RING_BASE_S = 8.4e-6
"""NCCL's base latency of a ring collective, Simple protocol (``baseLat``, src/graph/tuning.cc)."""
RING_NVLINK_STEP_S = 3.4e-6
"""NCCL's per-step latency of a ring over NVLink, Simple protocol (``hwLat[NVLINK][RING][SIMPLE]``)."""
RING_NETWORK_STEP_S = 9.6e-6
"""NCCL's per-step latency of a ring step across the network, Simple protocol (``hwLat[NET][RING][SIMPLE]``)."""


def ring_latency_s(ranks: Sequence[int], net: Interconnect, passes: float) -> float:
    """The latency part of one ring collective over ``ranks`` (``passes``: 1 reduce-scatter or all-gather, 2
    all-reduce), as NCCL's tuning model prices it."""
    n = len(ranks)
    if n <= 1:
        return 0.0
    _, k = _levels(ranks, net)
    steps, inter = passes * (n - 1), passes * (k - 1)
    return RING_BASE_S + (steps - inter) * RING_NVLINK_STEP_S + inter * RING_NETWORK_STEP_S


def step_latency_s(across_domains: bool) -> float:
    """One ring step of NCCL's latency model: the base and one hop over NVLink or across the network."""
    return RING_BASE_S + (RING_NETWORK_STEP_S if across_domains else RING_NVLINK_STEP_S)


def group_bandwidth(ranks: Sequence[int], net: Interconnect) -> float:
    """Achievable bytes/s per GPU of a point-to-point or flat collective over ``ranks``."""
    blocks = {net.block_of(rank) for rank in ranks}
    return net.nvlink_effective if len(blocks) <= 1 else net.network_effective


def _levels(ranks: Sequence[int], net: Interconnect) -> tuple[int, int]:
    """(members per NVLink domain, domains) of a group (the most crowded domain counts)."""
    counts: dict[int, int] = {}
    for rank in ranks:
        counts[net.block_of(rank)] = counts.get(net.block_of(rank), 0) + 1
    return max(counts.values()), len(counts)


def _ring_s(nbytes: float, ranks: Sequence[int], net: Interconnect, passes: float) -> float:
    """``passes`` = 1 for reduce-scatter / all-gather, 2 for all-reduce; hierarchical across domains."""
    if len(ranks) <= 1:
        return 0.0
    g, k = _levels(ranks, net)
    inside = passes * (g - 1) / g * nbytes / net.nvlink_effective
    across = passes * (k - 1) / k * nbytes / g / net.network_effective
    return inside + across + ring_latency_s(ranks, net, passes)


def all_reduce_s(nbytes: float, ranks: Sequence[int], net: Interconnect) -> float:
    """All-reduce of ``nbytes`` over ``ranks``."""
    return _ring_s(nbytes, ranks, net, 2.0)


def reduce_scatter_s(nbytes: float, ranks: Sequence[int], net: Interconnect) -> float:
    """Reduce-scatter of an ``nbytes`` buffer over ``ranks`` (all-gather costs the same)."""
    return _ring_s(nbytes, ranks, net, 1.0)


all_gather_s = reduce_scatter_s


def all_to_all_s(send_bytes: float, ranks: Sequence[int], net: Interconnect) -> float:
    """All-to-all where each rank sends ``send_bytes`` spread evenly over the group (slowest member)."""
    n = len(ranks)
    if n <= 1:
        return 0.0
    members: dict[int, int] = {}
    for rank in ranks:
        block = net.block_of(rank)
        members[block] = members.get(block, 0) + 1
    worst = 0.0
    for count in members.values():  # every member of a domain sees the same split
        local = count - 1
        remote = n - 1 - local
        nvlink = send_bytes * local / n / nvlink_rate(net, count) if local else 0.0
        network = send_bytes * remote / n / net.network_effective
        worst = max(worst, nvlink, network)
    return worst + step_latency_s(len(members) > 1)


def flex_all_to_all_s(copy_bytes: float, topk: int, experts: int, ranks: Sequence[int], net: Interconnect) -> float:
    """All-to-all of the flex dispatcher (HybridEP, DeepEP): each token goes once to every rank holding one of
    its ``topk`` experts (not once per expert), and across the network once to every other NVLink domain
    holding one, where that domain's GPUs share it over NVLink (the forwarding runs beside the network
    transfer and is not counted). Routing is taken as uniform over the ``experts`` (dealt evenly over
    ``ranks``), as NVIDIA's throughput presets force it (``moe_router_force_load_balancing``)."""
    n = len(ranks)
    if n <= 1:
        return 0.0
    per_rank = experts // n
    miss_all = math.comb(experts, topk)

    def hit(members: int) -> float:
        """Probability that a token's top-k experts include one held by ``members`` ranks."""
        return 1.0 - math.comb(experts - members * per_rank, topk) / miss_all

    members: dict[int, int] = {}
    for rank in ranks:
        block = net.block_of(rank)
        members[block] = members.get(block, 0) + 1
    worst = 0.0
    for block, count in members.items():
        nvlink = copy_bytes * (count - 1) * hit(1) / net.nvlink_effective
        network = copy_bytes * sum(hit(c) for other, c in members.items() if other != block) / net.network_effective
        worst = max(worst, nvlink, network)
    return worst


def p2p_s(nbytes: float, src: int, dst: int, net: Interconnect) -> float:
    """One point-to-point transfer: its bytes over the link, and one step of NCCL's latency."""
    return nbytes / group_bandwidth((src, dst), net) + step_latency_s(net.block_of(src) != net.block_of(dst))


def expert_parallel_groups(tp: int, cp: int, dp: int, pp: int, ep: int, etp: int) -> list[tuple[int, ...]]:
    """Every expert-parallel group (Megatron's expert rank order etp-ep-edp-pp, first fastest)."""
    edp = tp * cp * dp // (ep * etp)
    groups = []
    for pp_r in range(pp):
        for edp_r in range(edp):
            for etp_r in range(etp):
                groups.append(tuple(etp_r + etp * (ep_r + ep * (edp_r + edp * pp_r)) for ep_r in range(ep)))
    return groups


def tensor_parallel_groups(tp: int, world: int) -> list[tuple[int, ...]]:
    """Every tensor-parallel group (tp varies fastest: consecutive ranks)."""
    return [tuple(range(start, start + tp)) for start in range(0, world, tp)]


def context_parallel_groups(tp: int, cp: int, world: int) -> list[tuple[int, ...]]:
    """Every context-parallel group (order tp-cp-...: stride tp)."""
    groups = []
    for base in range(0, world, tp * cp):
        for tp_r in range(tp):
            groups.append(tuple(base + tp_r + tp * cp_r for cp_r in range(cp)))
    return groups
