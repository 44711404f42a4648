"""Run metrics shared by every engine: step records to metrics.jsonl and wandb, summary.json, live progress.

Formats are documented in docs/local_engine.md ("Metrics files").
"""

from optbench.metrics.jsonl import read_metrics, repair_metrics
from optbench.metrics.progress import Progress
from optbench.metrics.summary import loss_summary, provenance, steady_state, warmup_steps_skipped
from optbench.metrics.wandb_run import offline_run_dirs, read_offline_run
from optbench.metrics.writer import METRICS_FILE, STEP_FIELDS, SUMMARY_FIELDS, SUMMARY_FILE, MetricsWriter

__all__ = [
    "METRICS_FILE",
    "STEP_FIELDS",
    "SUMMARY_FIELDS",
    "SUMMARY_FILE",
    "MetricsWriter",
    "Progress",
    "loss_summary",
    "offline_run_dirs",
    "provenance",
    "read_metrics",
    "read_offline_run",
    "repair_metrics",
    "steady_state",
    "warmup_steps_skipped",
]
