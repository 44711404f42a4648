"""Turn a parsed Megatron Bridge log into step records, with the run's config for what the log lacks.

Per logged interval, with :func:`optbench.accounting.throughput.step_throughput` (the rule Bridge prints
by, shared with the plan and the local engine) at the interval's step time:

* seconds per iteration: ``elapsed time per iteration (ms)`` (one decimal in ms), else the paired
  ``Step Time`` line (two decimals in s);
* model TFLOP/s per GPU: the log's own figure (the throughput field, else the paired ``Step Time``
  line), else the accounting rule over the step time (noted on the run);
* with Newton-Schulz (Muon): the model figure plus the accounting's Newton-Schulz FLOPs over the
  same step time (Bridge prints no optimizer FLOPs; the count is ours: textbook, recipe's TP mode);
* tokens per second per GPU: ``global batch size x seq_length / step time / world size``;
* tokens so far: ``consumed samples x seq_length``;
* MFU: model TFLOP/s over the primary peak of (GPU, precision).
"""

from __future__ import annotations

import math
import dataclasses
from pathlib import Path

from optbench.accounting.peaks import peaks_for
from optbench.accounting.throughput import step_throughput
from optbench.config.schema import RunConfig
from optbench.config.schema_optimizer import MATRIX_FLOPS_WORDS
from optbench.measured.megatron_log import MegatronLog, StepTimeRecord
from optbench.measured.runs import PeakInfo, StepRecord

CONSUMED_SAMPLES = "consumed samples"
GLOBAL_BATCH = "global batch size"


def log_peak(config: RunConfig) -> PeakInfo | None:
    """The primary peak of the run's GPU and precision (None for a GPU without a published peak)."""
    peaks = peaks_for(config.cluster.gpu, config.precision)
    if not peaks:
        return None
    return PeakInfo(peaks[0].key, peaks[0].label, peaks[0].tflops, peaks[0].source)


def _with_gbs(config: RunConfig, gbs: float | None) -> RunConfig:
    """The config at the global batch the log printed (batch-size ramp-up changes it)."""
    if gbs is None or int(gbs) == config.train.gbs:
        return config
    return dataclasses.replace(config, train=dataclasses.replace(config.train, gbs=int(gbs)))


def _record(
    step: int,
    step_time: float | None,
    logged_tflops: float | None,
    config: RunConfig | None,
    peak: PeakInfo | None,
    loss: float | None = None,
    tokens: float | None = None,
) -> tuple[StepRecord, bool]:
    """One record; the flag says the model TFLOP/s came from the accounting rule, not the log."""
    loss = loss if loss is not None and math.isfinite(loss) else None  # a logged nan or inf loss is not a value
    if config is None:  # a log alone: only what it states itself
        return StepRecord(step=step, loss=loss, step_time_s=step_time, tflops_per_gpu=logged_tflops), False
    if not step_time:
        mfu = logged_tflops / peak.tflops if peak is not None and logged_tflops is not None else None
        return StepRecord(step=step, loss=loss, tokens=tokens, tflops_per_gpu=logged_tflops, mfu=mfu), False
    rate = step_throughput(config, step_time, peaks=[])
    model = logged_tflops if logged_tflops is not None else rate.tflops_per_gpu
    record = StepRecord(
        step=step,
        loss=loss,
        step_time_s=step_time,
        tokens=tokens,
        tokens_per_s_per_gpu=rate.tokens_per_s_per_gpu,
        tflops_per_gpu=model,
        tflops_per_gpu_with_ns=model + rate.ns_tflops_per_gpu if config.optimizer.matrix_optimizer else None,
        mfu=model / peak.tflops if peak is not None else None,
    )
    return record, logged_tflops is None


def _steps_from_step_times(
    records: list[StepTimeRecord], config: RunConfig | None, peak: PeakInfo | None
) -> list[StepRecord]:
    """A log with Step Time lines only: consecutive numbering, no loss, no restart detection."""
    return [_record(i + 1, r.step_time_s, r.tflops_per_gpu, config, peak)[0] for i, r in enumerate(records)]


def steps_from_log(log: MegatronLog, config: RunConfig | None) -> tuple[list[StepRecord], PeakInfo | None, list[str]]:
    """Step records, the peak and caveats for one parsed log (``config`` None: a log with no run folder,
    read for what it states itself: step time, model TFLOP/s per GPU and loss; no MFU, no tokens)."""
    peak = log_peak(config) if config is not None else None
    notes: list[str] = []
    name = Path(log.path).name
    if config is None:
        notes.append(
            f"{name}: no config.yaml beside it, so model, GPU and precision are unknown; "
            "TFLOP/s as the log states them, no MFU or tokens/s"
        )
    if log.restarts:
        notes.append(f"{name}: {log.restarts} restart(s); warm-up skipped again after each")
    if log.duplicates:
        notes.append(f"{name}: {log.duplicates} duplicate iteration line(s) dropped")
    if not log.iterations:
        if log.step_times:
            notes.append(f"{name}: only Step Time lines; steps numbered in order, restarts not detectable")
        return _steps_from_step_times(log.step_times, config, peak), peak, notes
    paired = log.paired
    if log.step_times and not paired:
        notes.append(f"{name}: {len(log.step_times)} Step Time vs {len(log.iterations)} iteration lines; not paired")
    seq = config.train.seq_length if config is not None else None
    computed = 0
    steps = []
    for index, record in enumerate(log.iterations):
        partner = log.step_times[index] if paired else None
        step_time = record.elapsed_s or (partner.step_time_s if partner else None)
        logged = (
            record.tflops_per_gpu
            if record.tflops_per_gpu is not None
            else (partner.tflops_per_gpu if partner else None)
        )
        consumed = record.fields.get(CONSUMED_SAMPLES)
        step, from_rule = _record(
            record.iteration,
            step_time,
            logged,
            _with_gbs(config, record.fields.get(GLOBAL_BATCH)) if config is not None else None,
            peak,
            loss=record.loss,
            tokens=consumed * seq if consumed is not None and seq else None,
        )
        steps.append(step)
        computed += from_rule
    if computed:
        notes.append(f"{name}: TFLOP/s of {computed} interval(s) computed from elapsed time (accounting rule)")
    if config is not None and config.optimizer.matrix_optimizer:
        what = MATRIX_FLOPS_WORDS[config.optimizer.name]
        notes.append(f"{name}: 'with NS' adds our {what} FLOP count (textbook, no SYRK) over the logged step time")
    return steps, peak, notes
