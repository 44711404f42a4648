"""Per-step metrics of a Megatron Bridge run, from our accounting: the same records as the local engine.

Registered on Bridge's ``CallbackManager`` by the entry point. The last rank (the one Bridge logs
from, in the last pipeline stage where the loss lives) measures wall time only where Bridge itself
waits for the device: every ``logger.log_interval`` steps, when Bridge's training log reads its
``interval-time`` timer with a barrier and a CUDA synchronize, right after ``on_train_step_end``.
The callback synchronizes at that same point (the device is drained a moment later anyway), so it
adds no device synchronisation NVIDIA's runs do not have; its step time is the interval's wall time
over its steps. It reads Megatron's optimizer timer without creating it (a timer created by a
callback would take the default log level and collide with Bridge's own ``log_level=1`` creation),
and turns the times into model TFLOP/s, Newton-Schulz TFLOP/s, MFU against the named peaks and
tokens/s with :func:`optbench.accounting.throughput.step_throughput`. Records go to
``<run_dir>/metrics.jsonl`` (through :class:`optbench.metrics.writer.MetricsWriter`) and to the wandb
run Bridge opened (keys ``optbench/...``); the summary goes to summary.json and the wandb summary.

Every torch call goes through a :class:`DeviceProbe`, so the logic is tested on a CPU with a fake.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Optional

from optbench.accounting.peaks import peaks_for
from optbench.accounting.throughput import step_throughput
from optbench.config.schema import RunConfig
from optbench.metrics.summary import loss_summary, provenance, software_versions, steady_state, utc_now
from optbench.metrics.wandb_run import flatten
from optbench.metrics.writer import MetricsWriter
from optbench.runs import run_dir

EVENTS = ("on_train_start", "on_train_step_end", "on_train_end")
WANDB_PREFIX = "optbench/"
"""Our keys in Bridge's wandb run, apart from Bridge's own ("lm loss", "learning-rate", ...)."""
LOSS_KEY = "lm loss"


class DeviceProbe:
    """The torch calls the callback makes (rank, synchronize, memory); a fake replaces it in tests."""

    def rank_and_world(self) -> tuple[int, int]:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def peak_memory_gb(self) -> float:
        import torch

        return torch.cuda.max_memory_allocated() / 1e9

    def max_over_ranks(self, value: float) -> float:
        """The largest ``value`` of all ranks (a collective: every rank must call it)."""
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device="cuda")
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return float(tensor.item())

    def device_name(self) -> str:
        import torch

        return torch.cuda.get_device_name()


def scalar_loss(loss_dict: Optional[dict[str, Any]]) -> Optional[float]:
    """The language-model loss from Bridge's reduced loss dict (a scalar, or a (sum, count) pair)."""
    if not loss_dict or LOSS_KEY not in loss_dict:
        return None
    value = loss_dict[LOSS_KEY]
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return float(value[0]) / float(value[1])
    numel = getattr(value, "numel", None)
    if numel is not None and numel() == 2:
        return float(value[0]) / float(value[1])
    return float(value)


def learning_rate(optimizer: Any) -> Optional[float]:
    """The (non-decoupled) learning rate, as Bridge's training log reads it."""
    for group in getattr(optimizer, "param_groups", None) or []:
        if group and not group.get("is_decoupled_lr", False):
            return float(group["lr"])
    return None


def optimizer_seconds(timers: Any) -> Optional[float]:
    """Cumulative seconds of Megatron's "optimizer" timer; None while Bridge has not created it (or at timing level 0).

    Looked up, never created: ``timers("optimizer")`` would register it at the default level and Bridge's
    later ``timers("optimizer", log_level=1)`` would fail Megatron's level check.
    """
    timer = (getattr(timers, "_timers", None) or {}).get("optimizer")
    if timer is None:
        return None
    try:
        return float(timer.active_time())
    except Exception:  # not a Megatron timer
        return None


class MetricsCallback:
    """Step records and summary of a Bridge run, written by the last rank."""

    def __init__(
        self, run: RunConfig, probe: Optional[DeviceProbe] = None, clock: Callable[[], float] = time.perf_counter
    ):
        self.run = run
        self.probe = probe or DeviceProbe()
        self.clock = clock
        self.world = 1
        self.is_writer = False
        self.writer: Optional[MetricsWriter] = None
        self.records: list[dict[str, Any]] = []
        self._last_end: Optional[float] = None
        self._last_step = 0
        self._first_start: Optional[float] = None
        self._optimizer_before: Optional[float] = None
        self.interval = max(1, int(run.train.log_interval))
        self._started = utc_now()
        self._start_step = 0

    def register(self, manager: Any) -> None:
        """Register on a Bridge CallbackManager (``manager.register(event, fn)``)."""
        for event in EVENTS:
            manager.register(event, getattr(self, event))

    # ---- events -------------------------------------------------------------------------------

    def on_train_start(self, context: Any) -> None:
        rank, self.world = self.probe.rank_and_world()
        self.is_writer = rank == self.world - 1
        self._start_step = int(context.state.train_state.step)
        # Bridge owns the wandb run (opened on this same last rank): the writer only writes files.
        files_only = dataclasses.replace(self.run, logger=dataclasses.replace(self.run.logger, wandb_mode="disabled"))
        self.writer = MetricsWriter(
            files_only,
            run_dir(self.run),
            is_writer=self.is_writer,
            resume_step=self._start_step if self.run.resume else None,
            gpu=self.run.cluster.gpu,
            precision=self.run.precision.name,
        )
        self._last_step = self._start_step
        if self.is_writer:
            self.probe.synchronize()  # before the first step: Bridge's interval timer starts with one too
            self._last_end = self._first_start = self.clock()
            self._optimizer_before = optimizer_seconds(context.state.timers)

    def on_train_step_end(self, context: Any) -> None:
        step = int(context.state.train_state.step) + 1  # Bridge increments the counter after this event
        if not self.is_writer or self._last_end is None or step % self.interval:
            return
        self.probe.synchronize()
        now = self.clock()
        steps = max(1, step - self._last_step)
        step_time, self._last_end, self._last_step = (now - self._last_end) / steps, now, step
        optimizer_after = optimizer_seconds(context.state.timers)
        # Bridge creates the timer inside the first step: its time before that is 0.
        optimizer_time = (
            (optimizer_after - (self._optimizer_before or 0.0)) / steps if optimizer_after is not None else None
        )
        self._optimizer_before = optimizer_after
        record = self.step_record(step, step_time, optimizer_time, context)
        record["steps_in_interval"] = steps
        record["wall_s"] = now - self._first_start
        record["timestamp"] = time.time()
        self.records.append(record)
        self.writer.log_step(record)
        logger = getattr(context.state, "wandb_logger", None)
        if logger is not None:
            body = {k: v for k, v in record.items() if k not in ("step", "timestamp")}
            logger.log(flatten(body, WANDB_PREFIX), step=step)

    def on_train_end(self, context: Any) -> None:
        peak_all = self.probe.max_over_ranks(self.probe.peak_memory_gb())  # collective: every rank
        if self.writer is None:
            return
        try:
            if self.is_writer:
                summary = self.summary(peak_all)
                self.writer.write_summary(summary)
                logger = getattr(context.state, "wandb_logger", None)
                if logger is not None and getattr(logger, "run", None) is not None:
                    logger.run.summary.update(flatten(summary_numbers(summary), WANDB_PREFIX))
        finally:
            self.writer.close()

    # ---- records ------------------------------------------------------------------------------

    def step_record(self, step: int, step_time: float, optimizer_time: Optional[float], context: Any) -> dict[str, Any]:
        """One step's record, with the fields the local engine writes."""
        throughput = step_throughput(self.run, step_time, world_size=self.world)
        return {
            "step": step,
            "loss": scalar_loss(context.loss_dict),
            "grad_norm": float(context.grad_norm) if context.grad_norm is not None else None,
            "lr": learning_rate(context.optimizer),
            "optimizer_time_s": optimizer_time,
            "tokens": self.run.train.gbs * self.run.train.seq_length,
            **throughput.as_record(),
            "peak_memory_gb": self.probe.peak_memory_gb(),
            "skipped_iter": bool(context.skipped_iter),
        }

    def summary(self, peak_memory_all_ranks_gb: float) -> dict[str, Any]:
        """summary.json: steady-state medians, losses, peaks and provenance."""
        records = self.records
        steady = steady_state(records)
        peaks = peaks_for(self.run.cluster.gpu, self.run.precision)
        return {
            **loss_summary(records),
            **steady,
            "peak": dataclasses.asdict(peaks[0]) if peaks else None,
            "peaks": [dataclasses.asdict(p) for p in peaks],
            "steps": records[-1]["step"] if records else self._start_step,
            "wall_s": records[-1]["wall_s"] if records else 0.0,
            "peak_memory_gb": max((r["peak_memory_gb"] for r in records), default=None),
            "peak_memory_gb_all_ranks": peak_memory_all_ranks_gb,
            "peak_memory_note": "peak_memory_gb: the last rank (torch max_memory_allocated); _all_ranks: max "
            "over ranks",
            "tokens_per_step": self.run.train.gbs * self.run.train.seq_length,
            "step_time_source": "last rank: wall time over each log interval (synchronized where Bridge's "
            "interval timer synchronizes) divided by its steps",
            **provenance(
                self.run,
                device=self.probe.device_name(),
                gpu=self.run.cluster.gpu,
                precision=self.run.precision.name,
                world_size=self.world,
                resumed_from_step=self._start_step if self.run.resume else None,
            ),
            "versions": software_versions("torch", "megatron-core", "megatron-bridge", "transformer-engine", "wandb"),
            "started": self._started,
            "finished": utc_now(),
        }


def summary_numbers(summary: dict[str, Any]) -> dict[str, Any]:
    """The numeric headline fields of a summary, for the wandb run summary."""
    keys = (
        "tokens_per_s",
        "tokens_per_s_per_gpu",
        "tflops_per_gpu",
        "ns_tflops_per_gpu",
        "tflops_per_gpu_with_ns",
        "mfu",
        "step_time_s",
        "optimizer_time_s",
        "optimizer_share",
        "peak_memory_gb",
        "peak_memory_gb_all_ranks",
        "initial_loss",
        "final_loss",
        "steps",
    )
    return {key: summary[key] for key in keys if key in summary}


__all__ = ["DeviceProbe", "MetricsCallback", "learning_rate", "optimizer_seconds", "scalar_loss", "summary_numbers"]
