"""MetricsWriter: the one place a run's metrics are written, whatever the engine.

The local engine and the Megatron Bridge callback both hand it engine-agnostic step records
(fields in :data:`STEP_FIELDS`) and, at the end, a summary dict. It writes

* ``<run_dir>/metrics.jsonl``: one record per step, appended and flushed (see :mod:`.jsonl`);
* ``<run_dir>/summary.json``: atomically, secrets redacted;
* the same to wandb (offline by default; see :mod:`.wandb_run`).

Only the writing process (``is_writer``: rank 0 on the local engine, the last rank on Bridge)
touches files; on every other rank each method is a no-op.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from optbench.config.serialize import run_config_to_dict
from optbench.config.schema import RunConfig
from optbench.common.errors import UserError
from optbench.common.io import atomic_write_text, dumps_strict
from optbench.metrics.jsonl import JsonlAppender, read_metrics, repair_metrics
from optbench.metrics.wandb_run import flatten, start_wandb
from optbench.common.redact import redact_config, redact_text, secret_values
from optbench.common.run_lock import lock_run_dir, unlock_run_dir

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"

STEP_FIELDS = (
    "step",
    "loss",
    "grad_norm",
    "lr",
    "step_time_s",
    "optimizer_time_s",
    "ns_time_s",
    "tokens",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "tflops_per_gpu",
    "ns_tflops_per_gpu",
    "tflops_per_gpu_with_ns",
    "mfu",
    "peak_memory_gb",
    "wall_s",
    "timestamp",
)
"""Fields of every step record (docs/local_engine.md gives their units and meaning)."""

SUMMARY_FIELDS = (
    "final_loss",
    "tokens_per_s",
    "tflops_per_gpu",
    "tflops_per_gpu_with_ns",
    "mfu",
    "peak",
    "steps",
    "wall_s",
    "step_time_s",
    "optimizer_time_s",
    "optimizer_share",
    "warmup_steps_skipped",
    "peak_memory_gb",
    "recipe",
    "run_id",
    "engine",
    "model",
    "optimizer",
    "device",
    "gpu",
    "precision",
    "world_size",
    "command",
    "git",
    "versions",
    "started",
    "finished",
)
"""Fields every summary.json has, whatever the engine (docs/local_engine.md)."""


class MetricsWriter:
    """Step records to metrics.jsonl (+ wandb), the summary to summary.json (+ wandb summary)."""

    def __init__(
        self,
        run: RunConfig,
        run_dir: str | Path,
        *,
        is_writer: bool = True,
        resume_step: int | None = None,
        gpu: str | None = None,
        precision: str | None = None,
    ) -> None:
        """``resume_step``: the checkpoint step a resumed run continues from (later records are dropped);
        ``gpu`` / ``precision``: what the run actually uses, for the wandb group and tags (default: the config's)."""
        self.run = run
        self.run_dir = Path(run_dir)
        self.is_writer = is_writer
        self.metrics_path = self.run_dir / METRICS_FILE
        self.summary_path = self.run_dir / SUMMARY_FILE
        self.previous: list[dict[str, Any]] = []
        """Records kept from before a resume."""
        self._appender: JsonlAppender | None = None
        self._wandb = None
        self._lock: int | None = None
        if not is_writer:
            return
        self._lock = lock_run_dir(self.run_dir)
        try:
            config = redact_config(run_config_to_dict(run))
            self._secrets = secret_values(run_config_to_dict(run))
            try:
                if resume_step is None and read_metrics(self.metrics_path):
                    raise UserError(
                        f"{self.metrics_path} already holds metrics; add resume=true or pick a new run_id", "run_id"
                    )
                self.previous = repair_metrics(self.metrics_path, resume_step) if resume_step is not None else []
            except ValueError as err:  # corruption before the last line: not ours to repair silently
                raise UserError(f"{err}; move the file aside to continue, or pick a new run_id", "resume") from err
            self._appender = JsonlAppender(self.metrics_path)
            self._wandb = start_wandb(
                run, config, gpu or run.cluster.gpu, precision or run.precision.name, resume=resume_step is not None
            )
        except BaseException:
            self.close()
            raise

    @property
    def wandb_dir(self) -> Path | None:
        """The wandb run directory (None when wandb is disabled)."""
        return Path(self._wandb.dir).parent if self._wandb is not None else None

    def log_step(self, record: dict[str, Any]) -> None:
        """Append one step record to metrics.jsonl (flushed) and to wandb."""
        if not self.is_writer or self._appender is None:
            return
        self._appender.append(record)
        if self._wandb is not None:
            # commit now: an uncommitted last row would land after, and overwrite, the summary written at the end.
            row = flatten({k: v for k, v in record.items() if k not in ("step", "timestamp")})
            self._wandb.log(row, step=record["step"], commit=True)

    def records(self) -> list[dict[str, Any]]:
        """Every step record written so far (from the file: the previous session's included)."""
        return read_metrics(self.metrics_path) if self.is_writer else []

    def write_summary(self, summary: dict[str, Any]) -> Path:
        """Write summary.json atomically (secrets redacted) and set the wandb run summary."""
        if not self.is_writer:
            return self.summary_path
        text = redact_text(dumps_strict(summary, indent=2) + "\n", self._secrets)
        atomic_write_text(self.summary_path, text)
        if self._wandb is not None:
            self._wandb.summary.update(flatten(json.loads(text)))
        return self.summary_path

    def close(self) -> None:
        """Close the file and finish the wandb run."""
        if self._appender is not None:
            self._appender.close()
            self._appender = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
        unlock_run_dir(self._lock)
        self._lock = None
