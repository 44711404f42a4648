"""The accounting section of plan.json, typed: FLOPs, Newton-Schulz FLOPs per TP mode, memory per GPU, the peaks
MFU divides by, and the throughput implied by known step times.

Each record writes exactly the JSON plan.json has always held under these keys (format ``plan_version``,
:data:`optbench.runs.plan_file.PLAN_VERSION`, which a change of this JSON bumps) and reads it back
(:class:`~optbench.common.json_record.JsonRecord`). :mod:`optbench.accounting.plan_fields` computes them and
prints them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from optbench.accounting.throughput import StepThroughput
from optbench.common.json_record import JsonRecord, inline

PUBLISHED_KEYS = (
    "published",
    "published_tflops_per_gpu",
    "published_model_tflops_per_gpu",
    "published_ns_tflops_per_gpu",
)


@dataclass(frozen=True)
class NsFlopsStats(JsonRecord):
    """Matrix-optimizer FLOPs per step per GPU in one tensor-parallel mode."""

    max: float
    mean: float
    min: float
    busiest_rank: int
    total: float
    """Over all ranks."""
    syrk_max: float
    """The same with SYRK kernels (symmetric products one triangle at a time)."""
    syrk_mean: float


@dataclass(frozen=True)
class NsFlopsByMode(JsonRecord):
    """Newton-Schulz FLOPs for every tensor-parallel mode (an optimizer with its own count: ``blockwise`` holds it)."""

    recipe_tp_mode: Optional[str]
    """The Muon family's configured mode; null for the other optimizers."""
    blockwise: NsFlopsStats
    duplicated: NsFlopsStats
    distributed: NsFlopsStats

    def mode(self, name: str) -> NsFlopsStats:
        return getattr(self, name)


@dataclass(frozen=True)
class MemorySection(JsonRecord):
    """Memory per GPU before launch (:mod:`optbench.accounting.memory`), GB."""

    total: float
    """The worst GPU's total."""
    hbm: Optional[float]
    """The GPU's HBM; null when the GPU is decided where the job runs."""
    fits: Optional[bool]
    largest_term: str
    worst_pipeline_rank: int
    breakdown: Mapping[str, float]
    """The worst GPU's terms (weights, gradients, optimizer_state, activations, ...)."""
    stage_totals: tuple[float, ...]
    """Every pipeline rank's total."""
    expected_error: float
    """Relative error the estimate is held to (0.2: +-20 %)."""
    omissions: tuple[str, ...]
    """What the estimate leaves out."""


@dataclass(frozen=True)
class PeakRecord(JsonRecord):
    """A peak MFU divides by."""

    key: str
    """``<gpu>_<precision>``, e.g. gb300_fp8."""
    tflops: float
    """Dense TFLOP/s."""
    label: str
    source: str


@dataclass(frozen=True)
class StepRecord(JsonRecord):
    """A step time and what it implies, as plan.json writes it (:class:`~optbench.accounting.throughput.StepThroughput`,
    rounded): the accounting's implied throughputs and the projection's projected steps."""

    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    """Model TFLOP/s per GPU (Bridge's rule)."""
    ns_tflops_per_gpu: float
    """The matrix optimizer's own TFLOP/s per GPU (0 for AdamW)."""
    tflops_per_gpu_with_ns: float
    mfu: Mapping[str, float]
    """Model-only MFU per peak (``<gpu>_<precision>``: fraction)."""
    mfu_with_ns: Mapping[str, float]

    @classmethod
    def of(cls, throughput: StepThroughput) -> StepRecord:
        return cls(**throughput.as_record(rounded=True))  # type: ignore[arg-type]


@dataclass(frozen=True)
class ImpliedThroughput(JsonRecord):
    """TFLOP/s and MFU a known step time implies: the user's ``step_time_s``, or a published row's."""

    basis: str
    step: StepRecord = inline()
    published: Optional[str] = None
    """The published row's label; null (and absent, with the three figures) for the user's step time."""
    published_tflops_per_gpu: Optional[float] = None
    published_model_tflops_per_gpu: Optional[float] = None
    published_ns_tflops_per_gpu: Optional[float] = None

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        return out if self.published is not None else {k: v for k, v in out.items() if k not in PUBLISHED_KEYS}


@dataclass(frozen=True)
class AccountingSection(JsonRecord):
    """The accounting fields, top-level keys of plan.json in this order."""

    model_flops_per_token: float
    """Bridge's rule, vocabulary padded."""
    model_flops_per_step: float
    padded_vocab_size: int
    ns_flops_per_step_per_gpu: NsFlopsByMode
    memory_per_gpu_gb: MemorySection
    peaks: tuple[PeakRecord, ...]
    """Primary first."""
    throughput_at: tuple[ImpliedThroughput, ...]
