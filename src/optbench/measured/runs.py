"""Measured runs as the report sees them: per-step records, identity, peak and provenance.

Three kinds of input become the same :class:`MeasuredRun` (see :mod:`optbench.measured.collect`):
local-engine runs and Bridge runs (our metrics callback) write ``metrics.jsonl`` + ``summary.json``;
raw Megatron Bridge logs are parsed line by line. Warm-up steps are skipped per segment: a segment
starts at the beginning of a run and again at every restart (the step counter does not increase),
because a resumed job warms up again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optbench.measured.stats import Spread, spread

KIND_LOCAL = "local engine"
KIND_BRIDGE = "bridge callback"
KIND_LOG = "megatron log"


@dataclass(frozen=True)
class StepRecord:
    """One optimizer step (or one logged interval of a raw log)."""

    step: int
    """Step / iteration counter as the run logged it."""
    loss: float | None = None
    """Training loss of the step."""
    step_time_s: float | None = None
    """Seconds for the step (a raw log: mean over its log interval)."""
    tokens: float | None = None
    """Tokens trained since the start of the run, this step included."""
    tokens_per_s_per_gpu: float | None = None
    """Training tokens per second per GPU."""
    tflops_per_gpu: float | None = None
    """Model TFLOP/s per GPU (Megatron's model-FLOPs rule, no optimizer FLOPs)."""
    tflops_per_gpu_with_ns: float | None = None
    """Model plus Newton-Schulz TFLOP/s per GPU (Muon only; None when not measured)."""
    mfu: float | None = None
    """Model-only TFLOP/s over the run's primary peak (None without a peak)."""
    wall_s: float | None = None
    """Seconds since the run started, at the end of this step."""
    ns_time_s: float | None = None
    """Seconds spent in Newton-Schulz during the step (Muon, local engine)."""


@dataclass(frozen=True)
class PeakInfo:
    """The MFU denominator a run used."""

    key: str
    """Short key, e.g. gb300_bf16 or cpu_fp32_probe."""
    label: str
    """Readable name with its value and source."""
    tflops: float
    """Peak TFLOP/s per GPU."""
    source: str = ""
    """Where the figure comes from (a datasheet, or a measured probe)."""


@dataclass
class MeasuredRun:
    """One run's identity, steps and provenance."""

    run_id: str
    """Directory name under results/runs (or the log file's stem)."""
    kind: str
    """KIND_LOCAL, KIND_BRIDGE or KIND_LOG."""
    path: str
    """Where it was read from."""
    model: str
    """Model id (kimi_k2_tiny, kimi_k2, ...)."""
    family: str
    """The full-size model it stands for (proxy_of, else model): rows of one family are shown together."""
    gpu: str
    """GPU id (or cpu) the run measured on."""
    precision: str
    """Precision id of the run."""
    optimizer: str
    """adamw or muon."""
    steps: list[StepRecord] = field(default_factory=list)
    """Every step read, in order (restarts included)."""
    recipe: str = ""
    """Recipe name."""
    engine: str = ""
    """local or megatron_bridge."""
    intent: str = ""
    """Bridge runs: reproduce (NVIDIA's measured configuration) or train (real routing, NaN checks, eval); ""
    unknown."""
    world_size: int | None = None
    """GPUs (processes)."""
    peak: PeakInfo | None = None
    """Primary MFU peak."""
    command: str = ""
    """Command line that launched the run."""
    container: str = ""
    """Bridge runs: the NeMo container it ran in (cluster.container); "" for the local engine."""
    unverified_container: bool = False
    """Bridge runs: the container is newer than any we checked (cluster.unverified_container=true): its plan assumed
    the newest checked release's facts."""
    conformance: str = ""
    """Bridge runs: what the job's check of its container found before step 1 (conformance.json's status: ok,
    differs, stopped); "" where the run folder holds none (the local engine, or a run older than the check)."""
    date: str = ""
    """When it ran (start timestamp, UTC where known)."""
    git_commit: str = ""
    """optbench commit of the run."""
    versions: dict[str, str] = field(default_factory=dict)
    """Software versions (torch, transformers, megatron ...)."""
    notes: list[str] = field(default_factory=list)
    """Caveats found while reading (restarts, missing summary, unpaired lines ...)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else from summary.json, kept for the JSON output."""

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(model, gpu, precision, optimizer): one table row."""
        return (self.model, self.gpu, self.precision, self.optimizer)


def segments(steps: list[StepRecord]) -> list[list[StepRecord]]:
    """Split at every restart: a step counter that does not increase starts a new segment."""
    parts: list[list[StepRecord]] = []
    for record in steps:
        if not parts or record.step <= parts[-1][-1].step:
            parts.append([])
        parts[-1].append(record)
    return parts


def post_warmup(steps: list[StepRecord], warmup: int) -> list[StepRecord]:
    """Per segment, drop the records less than ``warmup`` iterations after its first logged step, but
    never more than ``(n - 1) // 2`` of its ``n`` records (summary.json's rule, so a short run keeps
    its later half; :func:`optbench.metrics.summary.warmup_steps_skipped`)."""
    kept = []
    for part in segments(steps):
        first = part[0].step
        warm = sum(1 for r in part if r.step - first < warmup)
        kept += part[min(warm, (len(part) - 1) // 2) :]
    return kept


def loss_curve(steps: list[StepRecord]) -> list[StepRecord]:
    """One record per step counter, the latest segment's value winning (what the resumed run trained)."""
    latest: dict[int, StepRecord] = {}
    for record in steps:
        latest[record.step] = record
    return [latest[s] for s in sorted(latest)]


@dataclass(frozen=True)
class RunThroughput:
    """Median and spread of a run's post-warm-up steps."""

    tflops_per_gpu: Spread | None
    """Model-only TFLOP/s per GPU."""
    tflops_per_gpu_with_ns: Spread | None
    """Model + Newton-Schulz TFLOP/s per GPU."""
    tokens_per_s_per_gpu: Spread | None
    """Tokens per second per GPU."""
    mfu: Spread | None
    """Model-only MFU against the run's primary peak (a fraction)."""
    step_time_s: Spread | None
    """Seconds per step."""
    steps_used: int
    """Post-warm-up steps the medians are taken over."""
    steps_total: int
    """Steps read."""


def run_throughput(run: MeasuredRun, warmup: int) -> RunThroughput:
    """Medians over the post-warm-up steps of every segment (a restart warms up again)."""
    kept = post_warmup(run.steps, warmup)
    return RunThroughput(
        tflops_per_gpu=spread(r.tflops_per_gpu for r in kept),
        tflops_per_gpu_with_ns=spread(r.tflops_per_gpu_with_ns for r in kept),
        tokens_per_s_per_gpu=spread(r.tokens_per_s_per_gpu for r in kept),
        mfu=spread(r.mfu for r in kept),
        step_time_s=spread(r.step_time_s for r in kept),
        steps_used=len(kept),
        steps_total=len(run.steps),
    )


def training_seconds(steps: list[StepRecord]) -> list[float | None]:
    """Training time at the end of each step: the running sum of step times (optimizer and Newton-Schulz
    included, start-up and logging excluded), or the logged wall clock when a step time is missing."""
    if steps and all(r.step_time_s is not None for r in steps):
        total, out = 0.0, []
        for record in steps:
            total += record.step_time_s
            out.append(total)
        return out
    return [r.wall_s for r in steps]
