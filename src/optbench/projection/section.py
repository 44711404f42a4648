"""plan.json's ``projection`` section, typed: what :func:`optbench.projection.project.project` returns.

Each record writes exactly the JSON plan.json holds under these keys (format ``plan_version``,
:data:`optbench.runs.plan_file.PLAN_VERSION`) and reads it back (:class:`~optbench.common.json_record.JsonRecord`).
A run the model does not project gets :class:`Unavailable` instead of a :class:`ProjectionSection`; both say
``available``. docs/projection.md section 5 describes every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

from optbench.accounting.plan_section import StepRecord
from optbench.common.json_record import JsonRecord, inline, omitted_when_null


@dataclass(frozen=True, kw_only=True)
class Unavailable(JsonRecord):
    """What the model does not project (a local-engine run, a GPU without interconnect figures, a model nothing
    calibrates, a twin that does not compose), and why."""

    available: bool = False
    reason: str


@dataclass(frozen=True)
class RatePair(JsonRecord):
    """One published pair (the lower and the higher GEMM precision's row) and its GEMM-rate ratio."""

    lower: str
    higher: str
    ratio: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "RatePair":
        """Plans written before NVFP4 named the rows by their precision (bf16, fp8): run folders keep such plans."""
        if "lower" not in data and "bf16" in data:
            data = {"lower": data["bf16"], "higher": data["fp8"], "ratio": data["ratio"]}
        return super().from_json(data)


@dataclass(frozen=True)
class RateRatio(JsonRecord):
    """The rate ratio an efficiency crossed precision at (:mod:`optbench.projection.precision_ratio`)."""

    value: float
    pairs: tuple[RatePair, ...]
    precisions: str = "BF16/FP8"
    """Which rate over which: BF16/FP8, FP8/FP4 or BF16/FP4 (plans written before NVFP4 lack it: BF16/FP8)."""


@dataclass(frozen=True, kw_only=True)
class EfficiencyRecord(JsonRecord):
    """The calibrated GEMM efficiency and where it came from (:class:`~optbench.projection.calibration.Calibration`)."""

    value: float
    """Fraction of ``of_peak``."""
    of_peak: str
    precision_ratio: Optional[RateRatio] = omitted_when_null()
    """Present when the efficiency crossed precision at a measured ratio."""
    status: str
    """calibrated, transferred ..., or carried: how the carried table's terms were found."""
    calibrated_on: str
    anchor_row: str
    anchor_step_time_s: float
    anchor_config: str
    fitted_to_muon: bool
    """Always false: no Muon figure is ever fitted."""


@dataclass(frozen=True, kw_only=True)
class MuonRowsError(JsonRecord):
    """The same scheme's figure over the published Muon rows alone."""

    rows: int
    median_abs_error_percent: float
    within_5_percent: float
    within_10_percent: float
    run_optimizer: str
    """The plan's matrix optimizer (the rows are Muon's whatever it is)."""


@dataclass(frozen=True, kw_only=True)
class BandRecord(JsonRecord):
    """The 80 % band a plan prints (:mod:`optbench.projection.bands`): the class of its case, the scheme whose held-out
    errors make it, and how often such bands held on held-out groups."""

    case_class: str
    """The class of the projection, in increasing distance from what calibrated it."""
    scheme: str
    error_percent: tuple[float, ...]
    """The held-out errors (projected / published - 1) bounding the central 80 %: (low, high)."""
    coverage: Optional[float] = omitted_when_null()
    """The share of that scheme's held-out rows inside bands made without their group."""
    untested: Optional[str] = omitted_when_null()
    """Why no held-out row tests the class (it then takes the widest tested band)."""
    tflops_per_gpu: tuple[float, ...] = ()
    """The band of the projected model TFLOP/s per GPU: (low, high)."""


@dataclass(frozen=True, kw_only=True)
class ExpectedError(JsonRecord):
    """The out-of-sample error of the scheme that matches the projection's case
    (:func:`optbench.projection.expected_error.expected_error`): measured (rows, median, shares, scheme, source), the
    release drift (rows, median, largest, scheme, source) or not measured (``measured`` false and the reason)."""

    measured: Optional[bool] = omitted_when_null()
    """False when no validated row measures the case; absent otherwise."""
    rows: Optional[int] = omitted_when_null()
    median_abs_error_percent: Optional[float] = omitted_when_null()
    max_abs_error_percent: Optional[float] = omitted_when_null()
    """The release drift's largest step."""
    within_5_percent: Optional[float] = omitted_when_null()
    within_10_percent: Optional[float] = omitted_when_null()
    scheme: Optional[str] = omitted_when_null()
    reason: Optional[str] = omitted_when_null()
    source: Optional[str] = omitted_when_null()
    muon_rows: Optional[MuonRowsError] = omitted_when_null()
    band: Optional[BandRecord] = omitted_when_null()


@dataclass(frozen=True)
class PublishedComparison(JsonRecord):
    """A published figure of the run's own setup and release beside the projection (never fitted): its speed as model
    TFLOP/s/GPU in our FLOPs count (:func:`optbench.projection.row_solve.published_tflops_at`)."""

    published: str
    published_model_tflops_per_gpu: float
    projected_tflops_per_gpu: float
    error_percent: float
    published_tokens_per_s_per_gpu: float | None = None
    """The tokens/s the figure counts (None where the source gives TFLOP/s only)."""


@dataclass(frozen=True, kw_only=True)
class TwinProjection(JsonRecord):
    """A matrix-optimizer run's AdamW twin, projected at the same efficiency."""

    recipe: str
    """The twin's recipe and overrides, as typed."""
    step: StepRecord = inline()
    breakdown_s: Mapping[str, float]


@dataclass(frozen=True)
class OpOverheadRange(JsonRecord):
    """A launch-bound overhead at each end of the host time per eager op measured for upstream Muon."""

    us_per_op: tuple[float, ...]
    measured_on: str
    assumed_us_per_op: float
    tflops_per_gpu_change_percent: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class MatrixOverhead(JsonRecord):
    """The run against its AdamW twin, by cause (plan.json ``muon_overhead``, whatever the matrix optimizer)."""

    twin_differs_in: tuple[str, ...]
    """Layout and batch fields the twin differs in (their effect lands in 'other')."""
    total_s: float
    parts_s: Mapping[str, float]
    tflops_per_gpu_change: float
    tflops_per_gpu_change_percent: float
    at_measured_op_overhead: Optional[OpOverheadRange] = omitted_when_null()
    """Present when the overhead is launch-bound."""


@dataclass(frozen=True, kw_only=True)
class SiblingProjection(JsonRecord):
    """One matrix optimizer beside the AdamW twin, as its recipe configures it (COMPARE)."""

    optimizer: str
    recipe: str
    available: bool
    reason: Optional[str] = omitted_when_null()
    """Why it was refused (validation's one line)."""
    step_time_s: Optional[float] = omitted_when_null()
    tflops_per_gpu: Optional[float] = omitted_when_null()
    tflops_per_gpu_change_percent: Optional[float] = omitted_when_null()
    """Against the AdamW twin."""
    optimizer_state_gb: Optional[float] = omitted_when_null()
    memory_gb: Optional[float] = omitted_when_null()


@dataclass(frozen=True)
class WhatIf(JsonRecord):
    """One technique's projected win (:mod:`optbench.projection.whatif`)."""

    what: str
    step_time_s: float
    tflops_per_gpu: float
    win_s: float
    win_percent: float


@dataclass(frozen=True, kw_only=True)
class ProjectionSection(JsonRecord):
    """A projected run: step, throughput, MFU, breakdown, calibration, expected error; for a matrix optimizer its
    AdamW twin, its overhead by cause, the siblings asked for and the what-ifs."""

    available: bool = True
    model: str
    """What projected it (docs/projection.md)."""
    step: StepRecord = inline()
    breakdown_s: Mapping[str, float]
    """The slowest pipeline rank's step, by term (seconds)."""
    efficiency: EfficiencyRecord
    slowest_pipeline_rank: int
    optimizer_busiest_rank: int
    optimizer_busiest_s: Mapping[str, float]
    optimizer_mean_s: Mapping[str, float]
    interconnect: Mapping[str, Any]
    """The GPU's row of data/interconnect.csv (:class:`~optbench.projection.interconnect.Interconnect`)."""
    assumptions: Mapping[str, Any]
    """The a-priori constants (:class:`~optbench.projection.assumptions.Assumptions`)."""
    expected_error: Optional[ExpectedError]
    """Null before any ``make projection``."""
    compared_with_published: tuple[PublishedComparison, ...]
    adamw_twin: Union[TwinProjection, Unavailable, None] = omitted_when_null()
    muon_overhead: Optional[MatrixOverhead] = omitted_when_null()
    optimizers: Optional[tuple[SiblingProjection, ...]] = omitted_when_null()
    what_if: Optional[Mapping[str, WhatIf]] = omitted_when_null()

    @property
    def twin(self) -> TwinProjection | None:
        """The AdamW twin when it was projected."""
        return self.adamw_twin if isinstance(self.adamw_twin, TwinProjection) else None


Projection = Union[ProjectionSection, Unavailable]
"""What plan.json's ``projection`` holds."""


def projection_from_json(data: Mapping[str, Any]) -> Projection:
    """plan.json's ``projection`` read back (one written before this record wrote ``"muon_overhead": {}`` beside a
    twin that did not compose: read as no overhead)."""
    if not data.get("available"):
        return Unavailable.from_json(data)
    if data.get("muon_overhead") == {}:
        data = {key: value for key, value in data.items() if key != "muon_overhead"}
    return ProjectionSection.from_json(data)
