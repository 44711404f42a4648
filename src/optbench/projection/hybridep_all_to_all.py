"""The flex dispatcher's all-to-all over NVLink as HybridEP's published measurements give it
(``optbench/data/hybridep_all_to_all.csv``), beside the rate the step model prices it at.

NVIDIA's presets dispatch MoE tokens with the flex dispatcher, HybridEP (DeepEP on one B200 preset), not NCCL. Its
published benchmark (DeepEP's hybrid-ep branch, ``docs/README_Hybrid-EP.md``: 4,096 tokens of hidden 7,168 per rank,
top-8 of 8 local experts per rank, a uniform random router, as DeepSeek-V3's and Kimi K2's layers send) gives its
algorithm bandwidth: the tokens a rank receives, its own included, times 2 bytes per element, over the time. The
step model's :func:`optbench.projection.comm.flex_all_to_all_s` counts the bytes a rank sends to the ``n - 1``
others, so the rate per GPU that measurement implies is the algorithm bandwidth times ``(n - 1) / n``. Kernel time,
not the torch API's (which adds a device-to-device copy and bookkeeping that the element-wise passes of
:mod:`optbench.projection.activation_traffic` stand for); BF16 dispatch and combine averaged (a layer runs one of
each per direction); 16 SMs, Megatron Core's default for HybridEP (``moe_hybridep_num_sms``, nemo:26.04).

The step model does not read it: it prices the flex dispatcher at the ring collectives' achievable NVLink rate
(``nvlink_efficiency`` of ``interconnect.csv``: 720 GB/s per GPU on NVLink 5), 16 % above the 622 GB/s these
measurements imply among 8 GPUs and 28 % above the 562 among 36. Priced at the measurements, every out-of-sample
check and ``make search-ranks`` got worse (docs/projection.md section 8): the published rows say training exposes less
of the dispatch than the model does with the kernel's own time. So the rate is shown, not used: ``make search``'s
caveat quotes it.
"""

from __future__ import annotations

import statistics
from functools import lru_cache
from typing import NamedTuple

from optbench.common.data_files import TEXT, number, read_table, whole
from optbench.projection.interconnect import GB, Interconnect

DEFAULT_SMS = 16
"""Megatron Core's default SM count for HybridEP's dispatch and combine (``moe_hybridep_num_sms``)."""


class Measured(NamedTuple):
    """One published HybridEP run over NVLink."""

    nvlink_generation: int
    system: str
    ranks: int
    sms: int
    algorithm_bytes_per_s: float
    """Kernel-time algorithm bandwidth, BF16 dispatch and combine averaged."""
    source: str

    @property
    def per_gpu_bytes_per_s(self) -> float:
        """The bytes/s per GPU the step model's count of a rank's bytes to the others would divide by."""
        return self.algorithm_bytes_per_s * (self.ranks - 1) / self.ranks


@lru_cache(maxsize=1)
def measurements() -> tuple[Measured, ...]:
    """Every row of data/hybridep_all_to_all.csv."""
    columns = {
        "nvlink_generation": whole(1, 20),
        "system": TEXT,
        "ranks": whole(2, 100_000),
        "sms": whole(1, 1024),
        "dispatch_bf16_kernel_gb_s": number(0.1, 100_000),
        "combine_kernel_gb_s": number(0.1, 100_000),
        "source": TEXT,
    }
    return tuple(
        Measured(
            r["nvlink_generation"],
            r["system"],
            r["ranks"],
            r["sms"],
            (r["dispatch_bf16_kernel_gb_s"] + r["combine_kernel_gb_s"]) / 2 * GB,
            r["source"],
        )
        for r in read_table("hybridep_all_to_all.csv", columns)
    )


def measured_rates(net: Interconnect) -> dict[int, float]:
    """{GPUs in the group: bytes/s per GPU} measured on ``net``'s NVLink generation at the default SM count (the mean
    where several systems were measured at one size); empty where none was."""
    rows = [m for m in measurements() if m.nvlink_generation == net.nvlink_generation and m.sms == DEFAULT_SMS]
    sizes = sorted({m.ranks for m in rows})
    return {size: statistics.fmean(m.per_gpu_bytes_per_s for m in rows if m.ranks == size) for size in sizes}


def price_against_measurement(net: Interconnect) -> str:
    """How the step model's flex price on ``net`` stands against HybridEP's published kernel rate, in words."""
    priced = f"the ring collectives' {net.nvlink_effective / GB:.0f} GB/s per GPU over NVLink"
    rates = measured_rates(net)
    if not rates:
        return f"{priced} (HybridEP not measured on NVLink {net.nvlink_generation})"
    (few, at_few), (most, at_most) = min(rates.items()), max(rates.items())
    return (
        f"{priced}, above HybridEP's published kernel rate ({at_few / GB:.0f} GB/s among {few} GPUs, {at_most / GB:.0f}"
        f" among {most}: src/optbench/data/hybridep_all_to_all.csv), which fits the published rows worse"
        " (docs/projection.md section 8)"
    )
