"""MFU denominators: the dense peak tensor throughput of a GPU at a precision, always named.

Peaks come from ``optbench/data/gpus.csv`` (datasheet or vendor figures, rack
NVL72 figures divided by 72, no sparsity). MFU = achieved TFLOP/s per GPU / peak TFLOP/s per GPU.
Under FP8 (current scaling) or MXFP8 a run is reported against the FP8 peak (as Megatron Bridge's
team quotes it) and against the BF16 peak, so that it can be set beside a BF16 run; under NVFP4, against the FP4
peak and the BF16 peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from optbench.config.schema import PrecisionConfig
from optbench.catalog.hardware import gpu_catalog


@dataclass(frozen=True)
class Peak:
    """One MFU denominator."""

    label: str
    """Readable name with value and source, e.g. 'gb300 bf16 dense 2500 TFLOP/s (NVIDIA GB300 NVL72 ...)'."""
    key: str
    """Short key used in metrics and plan.json, e.g. 'gb300_bf16'."""
    tflops: float
    """Peak dense TFLOP/s per GPU."""
    source: str
    """Where the figure comes from."""


def _peak(gpu: str, precision_key: str, shown_as: str) -> Peak:
    spec = gpu_catalog()[gpu]
    tflops = spec.peak(precision_key)
    return Peak(
        label=f"{gpu} {shown_as} dense {tflops:g} TFLOP/s ({spec.source}; {spec.confidence})",
        key=f"{gpu}_{precision_key}",
        tflops=tflops,
        source=spec.source,
    )


def peaks_for(gpu: str, precision: PrecisionConfig) -> list[Peak]:
    """The peaks an MFU of ``gpu`` at ``precision`` is reported against, the primary one first.

    FP8 / MXFP8 runs: the FP8 peak, then the BF16 peak; NVFP4 runs: the FP4 peak, then the BF16 peak. BF16 (and
    FP16) runs: the BF16 peak.
    ``precision.peak`` may ask for the other order. A GPU that is not in the catalog (``auto``,
    ``cpu``) has no published peak: the result is empty and the caller supplies its own (the local
    engine measures one).
    """
    if gpu not in gpu_catalog():
        return []
    spec = gpu_catalog()[gpu]
    bf16 = _peak(gpu, "bf16", "bf16")
    if precision.fp4 is not None and "fp4" in spec.peak_tflops:
        fp4 = _peak(gpu, "fp4", precision.fp4_recipe or "fp4")
        return [bf16, fp4] if precision.peak == "bf16" else [fp4, bf16]
    if precision.fp8 is None or "fp8" not in spec.peak_tflops:
        return [bf16]
    fp8 = _peak(gpu, "fp8", precision.fp8_recipe if precision.fp8_recipe == "mxfp8" else "fp8")
    return [bf16, fp8] if precision.peak == "bf16" else [fp8, bf16]


def mfu(achieved_tflops_per_gpu: float, peaks: list[Peak]) -> dict[str, float]:
    """Model FLOPs utilisation against every peak given: {peak.key: achieved / peak}."""
    return {peak.key: achieved_tflops_per_gpu / peak.tflops for peak in peaks}
