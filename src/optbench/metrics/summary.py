"""summary.json: the headline numbers of a run, from its step records, with their provenance.

Throughput figures are medians over the *measured* steps: every step but the first
``warmup_steps_skipped(n)`` of the ``n`` recorded ones (``min(WARMUP_SKIP_STEPS, (n - 1) // 2)``),
which pay for allocator growth, lazy optimizer-state creation and kernel selection. The loss
figures are the first and last recorded steps'.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import statistics
import subprocess
import sys
from typing import Any

from optbench.config.schema import RunConfig

WARMUP_SKIP_STEPS = 3
"""Leading steps left out of the medians (fewer when a run is short; see the module docstring)."""
MEDIAN_FIELDS = (
    "step_time_s",
    "optimizer_time_s",
    "ns_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "tflops_per_gpu",
    "ns_tflops_per_gpu",
    "tflops_per_gpu_with_ns",
)
COMMAND_ENV = "OPTBENCH_COMMAND"
"""The command a run was launched with, handed from the launching process to the engine's processes."""


def warmup_steps_skipped(steps: int) -> int:
    """How many leading records the medians leave out."""
    return max(0, min(WARMUP_SKIP_STEPS, (steps - 1) // 2))


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def steady_state(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the throughput fields (and of each MFU) over the measured steps."""
    skip = warmup_steps_skipped(len(records))
    measured = records[skip:]
    result: dict[str, Any] = {field: _median([r.get(field) for r in measured]) for field in MEDIAN_FIELDS}
    for field in ("mfu", "mfu_with_ns"):  # {peak key: fraction} per record
        keys = list(dict.fromkeys(k for r in measured for k in (r.get(field) or {})))
        result[field] = {k: _median([(r.get(field) or {}).get(k) for r in measured]) for k in keys}
    shares = [
        r["optimizer_time_s"] / r["step_time_s"]
        for r in measured
        if r.get("step_time_s") and r.get("optimizer_time_s") is not None
    ]
    result["optimizer_share"] = _median(shares)
    result["warmup_steps_skipped"] = skip
    result["measured_steps"] = [measured[0]["step"], measured[-1]["step"]] if measured else []
    result["statistic"] = f"median over steps after the first {skip}"
    return result


def loss_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """First, last and lowest loss."""
    losses = [r["loss"] for r in records if r.get("loss") is not None]
    if not losses:
        return {"initial_loss": None, "final_loss": None, "min_loss": None}
    return {"initial_loss": losses[0], "final_loss": losses[-1], "min_loss": min(losses)}


def launch_command() -> str:
    """The command line that launched this run (the launcher's, when it handed it down)."""
    return os.environ.get(COMMAND_ENV) or shlex.join(getattr(sys, "orig_argv", sys.argv))


def git_commit() -> dict[str, Any] | None:
    """The checkout's commit and whether its code has uncommitted changes (None outside a git checkout). results/
    does not count: runs and make table rewrite the committed pages there, which changes no run."""
    from optbench.common.checkout import repo_root

    try:
        root = str(repo_root())
        commit = subprocess.run(
            ["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except Exception:  # no git binary, not a checkout, or no repo root: provenance says so with None
        return None
    return {"commit": commit, "dirty": bool(dirty)}


def software_versions(*packages: str) -> dict[str, str]:
    """Python and the named packages' installed versions."""
    from importlib import metadata  # here: about 16 ms to import, and only a run's summary asks

    versions = {"python": platform.python_version()}
    for name in ("optbench", *packages):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def provenance(run: RunConfig, **facts: Any) -> dict[str, Any]:
    """Who ran what where: recipe, run id, engine, model, optimizer, command, commit, plus ``facts``."""
    return {
        "recipe": run.recipe,
        "run_id": run.run_id,
        "engine": run.engine,
        # reproduce: NVIDIA's measured Bridge configuration; train: real routing, NaN checks, eval (not comparable).
        "intent": run.intent,
        "model": run.model.name,
        "optimizer": run.optimizer.name,
        **facts,
        "command": launch_command(),
        "git": git_commit(),
    }
