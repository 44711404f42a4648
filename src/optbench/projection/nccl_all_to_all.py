"""NCCL's all-to-all over NVLink as published measurements give it (``optbench/data/nccl_all_to_all.csv``).

An all-to-all of the ``alltoall`` MoE dispatcher is NCCL's: one send and one receive per peer, grouped. Over NVLink it
reaches far less of the link than a ring collective does, and less the more peers share the switch: rapidsmpf's
nccl-tests runs on one 8-GPU NVLink 5 node (1 GiB per GPU, about a MoE dispatch of Kimi K2 or Qwen3 at NVIDIA's
microbatch) give a bus bandwidth of 629, 446 and 383 GB/s over 2, 4 and 8 GPUs, 0.70, 0.50 and 0.43 of the 900 GB/s
per direction, where the ring collectives' assumed 0.80 (``interconnect.csv``) would price 720. Across nodes the same
runs (75 and 58 GB/s over 2 and 4 nodes) agree with the network price :func:`optbench.projection.comm.all_to_all_s`
already gives (one NIC per GPU at 0.85 of 50 GB/s: 80 and 55 GB/s), so only the NVLink share reads the table.

What the table covers: NVLink 5 (B200, B300, and, by the same links and switches, GB200 and GB300 NVL72: not measured
there), groups of up to 8 GPUs in a domain; a larger group inside an NVL72 block takes the 8-GPU figure (the
measurements flatten from 4 to 8). NVLink 4 (H100, H200) has no row and keeps the ring assumption. The flex
dispatcher (HybridEP, DeepEP: NVIDIA's presets from nemo:26.02) is not NCCL and keeps it too.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from optbench.common.data_files import TEXT, number, read_table, whole
from optbench.projection.interconnect import GB, Interconnect


class Measured(NamedTuple):
    """One published NCCL all-to-all run."""

    nvlink_generation: int
    nvlink_bytes_per_s: float
    """The measured system's NVLink per GPU and direction, as its source states it."""
    network_bytes_per_s: float
    """Its network per GPU, as its source states it."""
    nodes: int
    gpus: int
    bytes_per_gpu: int
    busbw_bytes_per_s: float
    """nccl-tests' bus bandwidth: bytes each GPU sends to the others, over the time, per direction."""
    source: str


@lru_cache(maxsize=1)
def measurements() -> tuple[Measured, ...]:
    """Every row of data/nccl_all_to_all.csv."""
    columns = {
        "nvlink_generation": whole(1, 20),
        "nvlink_gb_s_per_direction": number(1, 100_000),
        "network_gb_s_per_gpu": number(0.1, 100_000),
        "nodes": whole(1, 100_000),
        "gpus": whole(2, 1_000_000),
        "bytes_per_gpu": whole(1, 2**50),
        "busbw_gb_s": number(0.1, 100_000),
        "source": TEXT,
    }
    return tuple(
        Measured(
            r["nvlink_generation"],
            r["nvlink_gb_s_per_direction"] * GB,
            r["network_gb_s_per_gpu"] * GB,
            r["nodes"],
            r["gpus"],
            r["bytes_per_gpu"],
            r["busbw_gb_s"] * GB,
            r["source"],
        )
        for r in read_table("nccl_all_to_all.csv", columns)
    )


def measured_on(net: Interconnect) -> bool:
    """Whether a one-node measurement of ``net``'s NVLink generation is published (data/nccl_all_to_all.csv)."""
    return any(m.nodes == 1 and m.nvlink_generation == net.nvlink_generation for m in measurements())


def nvlink_rate(net: Interconnect, members: int) -> float:
    """Bytes/s per GPU an NCCL all-to-all moves over NVLink among ``members`` GPUs of one domain: the one-node
    measurement of the largest group not above ``members``, else the ring collectives' achievable rate."""
    measured = [
        m for m in measurements() if m.nodes == 1 and m.nvlink_generation == net.nvlink_generation and m.gpus <= members
    ]
    if not measured:
        return net.nvlink_effective
    return max(measured, key=lambda m: m.gpus).busbw_bytes_per_s
