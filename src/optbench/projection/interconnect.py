"""Interconnect and memory bandwidth per GPU system, read from ``optbench/data/interconnect.csv``.

One row per GPU type (each GPU here ships in one system shape: HGX 8-GPU nodes, or GB200 / GB300
NVL72 racks). Every figure carries its source and a confidence; the achievable fractions
(``*_efficiency``) are stated assumptions, documented in docs/projection.md:

* NVLink: ring collectives reach about 80 % of the per-direction link bandwidth (8x H100 nccl-tests
  ring all-reduce bus bandwidth is commonly 360-390 GB/s of 450; NVLS can exceed it, not modelled);
* network: about 85 % of the NIC line rate (NDR 400 Gb/s = 50 GB/s gives 42-46 GB/s bus bandwidth);
* HBM: 75 % of the datasheet bandwidth for element-wise optimizer kernels (the same assumption as
  :class:`optbench.accounting.assignment.CostModel`).

``aligned_block_gpus`` is the block of consecutive ranks assumed to share one NVLink domain: a whole
HGX node, or for NVL72 racks the 16-tray (64-GPU) segment NVIDIA recommends scheduling large training
jobs in (Slurm topology/block, ``--segment=16``). Global rank r sits in block ``r // aligned_block_gpus``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from optbench.common.data_files import TEXT, number, read_table, whole

GB = 1e9


@dataclass(frozen=True)
class Interconnect:
    """Bandwidths of one GPU system, per GPU."""

    gpu: str
    """GPU type (a row of gpus.csv)."""
    system: str
    """The system the figures describe."""
    nvlink_generation: int
    """NVLink generation (4: Hopper, 5: Blackwell), which the measured all-to-all rates are keyed on."""
    nvlink_bytes_per_s: float
    """NVLink bandwidth per GPU per direction, bytes/s (datasheet)."""
    nvlink_domain_gpus: int
    """GPUs joined by one NVLink domain (8 for HGX, 72 for NVL72)."""
    aligned_block_gpus: int
    """Consecutive ranks assumed to lie in one NVLink domain (job placement)."""
    network_bytes_per_s: float
    """Inter-node (scale-out) bandwidth per GPU per direction, bytes/s (one NIC per GPU)."""
    hbm_bytes_per_s: float
    """HBM bandwidth per GPU, bytes/s (datasheet)."""
    nvlink_efficiency: float
    """Fraction of the NVLink bandwidth collectives achieve (assumption)."""
    network_efficiency: float
    """Fraction of the NIC line rate collectives achieve (assumption)."""
    hbm_efficiency: float
    """Fraction of the HBM bandwidth element-wise kernels achieve (assumption)."""
    nic: str
    """Network adapter per GPU."""
    sources: tuple[str, str, str]
    """Sources of the NVLink, network and HBM figures."""
    confidence: str
    """datasheet, vendor page or third-party."""

    @property
    def nvlink_effective(self) -> float:
        """Achievable NVLink bytes/s per GPU per direction."""
        return self.nvlink_bytes_per_s * self.nvlink_efficiency

    @property
    def network_effective(self) -> float:
        """Achievable network bytes/s per GPU per direction."""
        return self.network_bytes_per_s * self.network_efficiency

    @property
    def hbm_effective(self) -> float:
        """Achievable HBM bytes/s for element-wise kernels."""
        return self.hbm_bytes_per_s * self.hbm_efficiency

    def block_of(self, rank: int) -> int:
        """NVLink block (domain) of a global rank under contiguous placement."""
        return rank // self.aligned_block_gpus

    def as_dict(self) -> dict:
        return {
            "gpu": self.gpu,
            "system": self.system,
            "nvlink_gb_s_per_direction": self.nvlink_bytes_per_s / GB,
            "nvlink_domain_gpus": self.nvlink_domain_gpus,
            "aligned_block_gpus": self.aligned_block_gpus,
            "network_gb_s_per_gpu": self.network_bytes_per_s / GB,
            "hbm_tb_s": self.hbm_bytes_per_s / 1e12,
            "efficiency": {
                "nvlink": self.nvlink_efficiency,
                "network": self.network_efficiency,
                "hbm": self.hbm_efficiency,
            },
            "nic": self.nic,
            "sources": list(self.sources),
            "confidence": self.confidence,
        }


INTERCONNECT_COLUMNS = {
    "gpu": TEXT,
    "system": TEXT,
    "nvlink_generation": whole(1, 20),
    "nvlink_gb_s_per_direction": number(1, 100_000),
    "nvlink_domain_gpus": whole(1, 100_000),
    "aligned_block_gpus": whole(1, 100_000),
    "nic": TEXT,
    "network_gb_s_per_gpu": number(0.1, 100_000),
    "hbm_tb_s": number(0.1, 1000),
    "nvlink_efficiency": number(0.01, 1),
    "network_efficiency": number(0.01, 1),
    "hbm_efficiency": number(0.01, 1),
    "source_nvlink": TEXT,
    "source_network": TEXT,
    "source_hbm": TEXT,
    "confidence": TEXT,
}
"""data/interconnect.csv's columns and their domains."""


@lru_cache(maxsize=1)
def interconnect_catalog() -> dict[str, Interconnect]:
    """Every row of data/interconnect.csv, by GPU."""
    catalog = {}
    for row in read_table("interconnect.csv", INTERCONNECT_COLUMNS):
        catalog[row["gpu"]] = Interconnect(
            gpu=row["gpu"],
            system=row["system"],
            nvlink_generation=row["nvlink_generation"],
            nvlink_bytes_per_s=row["nvlink_gb_s_per_direction"] * GB,
            nvlink_domain_gpus=row["nvlink_domain_gpus"],
            aligned_block_gpus=row["aligned_block_gpus"],
            network_bytes_per_s=row["network_gb_s_per_gpu"] * GB,
            hbm_bytes_per_s=row["hbm_tb_s"] * 1e12,
            nvlink_efficiency=row["nvlink_efficiency"],
            network_efficiency=row["network_efficiency"],
            hbm_efficiency=row["hbm_efficiency"],
            nic=row["nic"],
            sources=(row["source_nvlink"], row["source_network"], row["source_hbm"]),
            confidence=row["confidence"],
        )
    return catalog


def system_family(gpu: str) -> str | None:
    """The system shape a GPU ships in: ``NVL72`` (a rack-scale NVLink domain) or ``8-GPU node`` (HGX/DGX); None for a
    GPU without interconnect figures. The validation's leave-one-system-family-out scheme holds out one."""
    spec = interconnect_catalog().get(gpu)
    if spec is None:
        return None
    return f"NVL{spec.nvlink_domain_gpus}" if spec.nvlink_domain_gpus > 8 else f"{spec.nvlink_domain_gpus}-GPU node"


def interconnect_for(gpu: str, nvlink_domain_gpus: int | None = None) -> Interconnect | None:
    """The system of ``gpu``; None when it is not in the catalog (``auto``, ``cpu``).

    ``nvlink_domain_gpus`` (the cluster preset's ``nvlink_domain_size``) overrides the catalog's
    domain; the aligned block never exceeds the domain.
    """
    spec = interconnect_catalog().get(gpu)
    if spec is None or nvlink_domain_gpus is None or nvlink_domain_gpus == spec.nvlink_domain_gpus:
        return spec
    return replace(
        spec,
        nvlink_domain_gpus=nvlink_domain_gpus,
        aligned_block_gpus=min(spec.aligned_block_gpus, nvlink_domain_gpus),
    )
