"""GPU catalog: architecture, HBM, peak dense tensor throughput and the system it ships in, read from data/gpus.csv.

The one registry of GPU facts: src, tools (NVIDIA's system names, GPUs per node) and tests (the cluster preset of
each GPU, the device properties the CPU stand-ins fake) read it; the network figures are in interconnect.csv.

The peaks are the MFU denominators (each row names its source): dense (no sparsity) tensor-core
TFLOP/s per GPU, each row with its source and how sure that source is. Rack-level
NVL72 figures are divided by 72.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from optbench.common.data_files import TEXT, Column, damaged, number, read_table, whole


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type."""

    gpu: str
    """Short name used by cluster presets (cluster.gpu)."""
    arch: str
    """hopper, blackwell or blackwell_ultra."""
    compute_capability: float
    """CUDA SM version; MXFP8 needs 10.x."""
    hbm_gb: float
    """HBM capacity in GB (10^9 bytes)."""
    peak_tflops: dict[str, float]
    """Dense peak TFLOP/s per precision: bf16, fp8 and, where published, fp4."""
    mxfp8: bool
    """Hardware MXFP8 (block-scaled FP8) support."""
    gpus_per_node: int
    """GPUs per node (tray) of the system NVIDIA measures on (NVL72: 4; HGX/DGX: 8)."""
    cluster_preset: str
    """Our cluster preset for it (conf/cluster/<name>.yaml)."""
    nvidia_system: str
    """NVIDIA's system name in Bridge's performance tables (DGX-GB300, ...)."""
    device_name: str
    """What torch.cuda.get_device_name reports."""
    sm_count: int
    """Streaming multiprocessors (torch's multi_processor_count)."""
    source: str
    """Where the peak figures come from."""
    confidence: str
    """datasheet, vendor page or third-party."""

    def peak(self, precision: str) -> float:
        """Peak TFLOP/s for bf16, fp8 or fp4; raises KeyError when the GPU has none published."""
        return self.peak_tflops[precision]


GPU_COLUMNS = {
    "gpu": TEXT,
    "arch": TEXT,
    "compute_capability": number(1, 20),
    "hbm_gb": number(1, 10_000),
    "peak_bf16_tflops": number(1, 100_000),
    "peak_fp8_tflops": number(1, 100_000, optional=True),
    "peak_fp4_tflops": number(1, 100_000, optional=True),
    "mxfp8": Column("bool"),
    "gpus_per_node": whole(1, 1024),
    "cluster_preset": TEXT,
    "nvidia_system": TEXT,
    "device_name": TEXT,
    "sm_count": whole(1, 10_000),
    "source": TEXT,
    "confidence": TEXT,
}
"""data/gpus.csv's columns and their domains."""


@lru_cache(maxsize=1)
def gpu_catalog() -> dict[str, GpuSpec]:
    """Every GPU in data/gpus.csv, by name."""
    catalog = {}
    for row in read_table("gpus.csv", GPU_COLUMNS):
        peaks = {key: row[f"peak_{key}_tflops"] for key in ("bf16", "fp8", "fp4") if row[f"peak_{key}_tflops"]}
        catalog[row["gpu"]] = GpuSpec(
            gpu=row["gpu"],
            arch=row["arch"],
            compute_capability=row["compute_capability"],
            hbm_gb=row["hbm_gb"],
            peak_tflops=peaks,
            mxfp8=row["mxfp8"],
            gpus_per_node=row["gpus_per_node"],
            cluster_preset=row["cluster_preset"],
            nvidia_system=row["nvidia_system"],
            device_name=row["device_name"],
            sm_count=row["sm_count"],
            source=row["source"],
            confidence=row["confidence"],
        )
    _check_rows(set(catalog))
    return catalog


def _check_rows(gpus: set[str]) -> None:
    """gpus.csv and interconnect.csv list the same GPUs: a file cut at a line break reads as well-formed, and its lost
    rows would otherwise be blamed on the GPU the user chose."""
    listed = {row["gpu"] for row in read_table("interconnect.csv", {"gpu": TEXT})}
    for name, other, missing in (
        ("gpus.csv", "interconnect.csv", listed - gpus),
        ("interconnect.csv", "gpus.csv", gpus - listed),
    ):
        if missing:
            raise damaged(name, f"lacks {', '.join(sorted(missing))}, which {other} lists: rows were lost")


def gpu_spec(name: str) -> GpuSpec:
    """Spec of one GPU type; KeyError when it is not in the catalog."""
    return gpu_catalog()[name]
