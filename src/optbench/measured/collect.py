"""Collect measured runs: ``results/runs/<run_id>/`` directories and raw Megatron Bridge logs.

A run directory is read in this order of preference:

1. ``metrics.jsonl`` (one JSON object per optimizer step; the local engine and our Bridge callback
   write it through :mod:`optbench.metrics`) with ``summary.json`` and ``config.yaml`` for identity
   and provenance. A last line cut short by a killed run is skipped (:func:`read_metrics`).
2. Otherwise raw Megatron Bridge logs in the directory (``*.log``, ``*.out``, ``*.txt``, searched
   recursively, as NeMo-Run leaves them) parsed by :mod:`optbench.measured.megatron_log`; identity
   comes from ``config.yaml`` (the resolved config the launcher wrote), and FLOPs per token from
   :mod:`optbench.accounting` when the log lacks the throughput field.

A directory that cannot be read is reported with the reason and skipped; it never stops a table.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optbench.config.schema import RunConfig
from optbench.common.errors import UserError
from optbench.common.redact import clipped
from optbench.metrics.jsonl import read_metrics
from optbench.measured.megatron_log import MegatronLog, parse_megatron_log
from optbench.measured.runs import KIND_BRIDGE, KIND_LOCAL, KIND_LOG, MeasuredRun, PeakInfo, StepRecord
from optbench.runs import CONFORMANCE_FILE, load_resolved_config

METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
CONFIG = "config.yaml"
LOG_PATTERNS = ("*.log", "*.out", "*.txt")


@dataclass
class Collection:
    """Every run found, and every directory or file skipped with why."""

    runs: list[MeasuredRun] = field(default_factory=list)
    """Runs with at least one step."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(path, reason) for inputs that gave no run."""


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError, OSError):  # broken, binary, a number over Python's digit limit, too deep
        return {}
    return data if isinstance(data, dict) else {}


def _first(mapping: dict[str, Any], *names: str, default: Any = None) -> Any:
    """The first of the named fields that is present and not empty."""
    for name in names:
        if mapping.get(name) not in (None, ""):
            return mapping[name]
    return default


def _peak(summary: dict[str, Any]) -> PeakInfo | None:
    raw = summary.get("peak")
    if not isinstance(raw, dict) or _finite(raw.get("tflops")) is None or not raw.get("key"):
        return None
    return PeakInfo(
        str(raw["key"]), str(raw.get("label", raw["key"])), float(raw["tflops"]), str(raw.get("source", ""))
    )


def _step_mfu(row: dict[str, Any], peak: PeakInfo | None, tflops: float | None) -> float | None:
    """The step's MFU for the run's primary peak: the logged value, else TFLOP/s / peak."""
    logged = row.get("mfu")
    if isinstance(logged, dict) and peak is not None and _finite(logged.get(peak.key)) is not None:
        return float(logged[peak.key])
    if _finite(logged) is not None:
        return float(logged)
    return tflops / peak.tflops if peak is not None and tflops is not None else None


def steps_from_metrics(rows: list[dict[str, Any]], peak: PeakInfo | None) -> list[StepRecord]:
    """StepRecords from metrics.jsonl objects (rows without a step number are ignored)."""
    steps, total_tokens = [], 0.0
    for row in rows:
        step = row.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            continue
        tokens = None  # the writer logs each step's tokens; curves need the running total
        if _finite(row.get("tokens")) is not None:
            total_tokens += float(row["tokens"])
            tokens = total_tokens
        tflops = _finite(row.get("tflops_per_gpu"))
        steps.append(
            StepRecord(
                step=step,
                loss=_finite(row.get("loss")),
                step_time_s=_finite(row.get("step_time_s")),
                tokens=tokens,
                tokens_per_s_per_gpu=_finite(row.get("tokens_per_s_per_gpu")),
                tflops_per_gpu=tflops,
                tflops_per_gpu_with_ns=_finite(row.get("tflops_per_gpu_with_ns")),
                mfu=_step_mfu(row, peak, tflops),
                wall_s=_finite(row.get("wall_s")),
                ns_time_s=_finite(row.get("ns_time_s")),
            )
        )
    return steps


def _load_config(directory: Path, notes: list[str]) -> RunConfig | None:
    """The run's resolved config.yaml, or None (with a note) when it is missing or no longer loads."""
    if not (directory / CONFIG).is_file():
        return None
    try:
        return load_resolved_config(directory / CONFIG)
    except UserError as err:  # written by an older schema: identity falls back to summary.json
        notes.append(f"{CONFIG} does not load with this version ({err})")
        return None


def _git_text(value: Any) -> str:
    """``<commit>`` or ``<commit>+dirty`` from a string or the metrics writer's {commit, dirty}."""
    if isinstance(value, dict):
        commit = str(value.get("commit") or "")
        return commit + ("+dirty" if commit and value.get("dirty") else "")
    return str(value or "")


def _identity(run_id: str, config: RunConfig | None, summary: dict[str, Any]) -> dict[str, Any]:
    """Model, family, GPU, precision, optimizer and provenance from summary.json, else config.yaml."""
    model = _first(summary, "model", default=config.model.name if config else None)
    if isinstance(model, dict):
        model = model.get("name")
    optimizer = _first(summary, "optimizer", default=config.optimizer.name if config else None)
    if isinstance(optimizer, dict):
        optimizer = optimizer.get("name")
    proxy_of = config.model.proxy_of if config else None
    gpu = _first(summary, "gpu", default=config.cluster.gpu if config else None)
    engine = str(_first(summary, "engine", default=config.engine if config else ""))
    return {
        "run_id": str(_first(summary, "run_id", default=run_id)),
        "model": str(model or "unknown"),
        "family": str(_first(summary, "proxy_of", default=proxy_of) or model or "unknown"),
        "gpu": str(gpu or "unknown"),
        # the local engine records the compute precision it used ("fp32" on a CPU, "bf16 autocast (...)"
        # on a GPU): its first word keys the row, the recipe's precision is the fallback
        "precision": str(_first(summary, "precision", default=config.precision.name if config else "unknown")).split()[
            0
        ],
        "optimizer": str(optimizer or "unknown"),
        "recipe": str(_first(summary, "recipe", default=config.recipe if config else "")),
        "engine": engine,
        "intent": str(_first(summary, "intent", default=config.intent if config else "")),
        "world_size": _first(summary, "world_size", default=config.parallel.num_gpus if config else None),
        "command": str(_first(summary, "command", default="")),
        **(_container(config, summary) if engine == "megatron_bridge" else {}),
        "date": str(_first(summary, "started", default="")),
        "git_commit": _git_text(summary.get("git")),
        "versions": dict(summary.get("versions") or {}),
    }


def _container(config: RunConfig | None, summary: dict[str, Any]) -> dict[str, Any]:
    """A Bridge run's container, and whether it was one we never checked (summary.json, else config.yaml)."""
    container = _first(summary, "container", default=config.cluster.container if config else "")
    unverified = _first(
        summary, "unverified_container", default=config.cluster.unverified_container if config else False
    )
    return {"container": str(container or ""), "unverified_container": bool(unverified)}


def conformance_status(directory: Path) -> str:
    """conformance.json's status in a run folder, with what differed and, where the job rebuilt NVIDIA's preset, how
    many fields the plan sets otherwise ("" without the file)."""
    found = _read_json(directory / CONFORMANCE_FILE)
    status = str(found.get("status") or "")
    counted = [
        f"{len(found[key])} {label}"
        for key, label in (("kind_differs", "of another kind"), ("values_not_landed", "not landed"))
        if isinstance(found.get(key), list) and found[key]
    ]
    text = f"{status} ({', '.join(counted)})" if status == "differs" and counted else status
    nvidia = found.get("nvidia_preset") if isinstance(found.get("nvidia_preset"), dict) else {}
    if nvidia.get("status") == "rebuilt" and isinstance(nvidia.get("differs"), list):
        unexplained = nvidia.get("differs_unexplained", 0)
        text += f"; NVIDIA's preset: {len(nvidia['differs'])} fields differ, {unexplained} unexplained"
    return text


def read_metrics_run(directory: Path) -> MeasuredRun:
    """A run written by the local engine or our Bridge callback."""
    summary = _read_json(directory / SUMMARY)
    notes: list[str] = []
    config = _load_config(directory, notes)
    identity = _identity(directory.name, config, summary)
    peak = _peak(summary)
    try:
        rows = read_metrics(directory / METRICS)
    except ValueError as err:  # a broken line before the last: corruption, not a killed writer
        raise UserError(str(err), "metrics") from None
    kind = KIND_BRIDGE if identity["engine"] == "megatron_bridge" else KIND_LOCAL
    run = MeasuredRun(
        kind=kind,
        path=str(directory),
        peak=peak,
        steps=steps_from_metrics(rows, peak),
        conformance=conformance_status(directory),
        **identity,
    )
    run.extra = {k: v for k, v in summary.items() if k not in ("peak",)}
    run.notes += notes
    if not summary:
        run.notes.append(f"no {SUMMARY}: run unfinished or killed; identity from {CONFIG}")
    return run


def log_files(directory: Path) -> list[Path]:
    """Raw log files under a run directory, sorted by name."""
    found = {p for pattern in LOG_PATTERNS for p in directory.rglob(pattern) if p.is_file()}
    return sorted(found)


def read_log_run(log_paths: list[Path], directory: Path, run_id: str) -> MeasuredRun:
    """A Bridge run known only from its raw log(s), identified by the config.yaml beside them."""
    from optbench.measured.log_throughput import steps_from_log  # accounting is only needed for raw logs

    notes: list[str] = []
    config = _load_config(directory, notes)
    identity = _identity(run_id, config, {})
    run = MeasuredRun(
        kind=KIND_LOG,
        path=", ".join(str(p) for p in log_paths),
        notes=notes,
        conformance=conformance_status(directory),
        **identity,
    )
    for path in log_paths:
        log: MegatronLog = parse_megatron_log(path)
        steps, peak, notes = steps_from_log(log, config)
        run.steps += steps
        run.peak = run.peak or peak
        run.notes += notes
        stamps = [r.timestamp for r in log.iterations if r.timestamp]
        run.date = run.date or (stamps[0] if stamps else "")
    return run


def read_run_dir(directory: Path) -> MeasuredRun:
    """One results/runs/<run_id>/ directory (metrics.jsonl preferred over raw logs)."""
    if (directory / METRICS).is_file():
        return read_metrics_run(directory)
    logs = log_files(directory)
    if logs:
        return read_log_run(logs, directory, directory.name)
    raise UserError(f"no {METRICS} and no log file (*.log, *.out, *.txt)", "run")


def read_log_path(path: Path) -> MeasuredRun:
    """A log file named on the command line: its run is the nearest directory holding a config.yaml."""
    text = str(path)
    if len(text) > 4096 or any(len(part.encode("utf-8", "surrogateescape")) > 255 for part in path.parts):
        raise UserError(f"{clipped(text, 80)}... is not a path (at most 4,096 characters, 255 per name)", "log")
    if not path.is_file():  # a folder, a device or a FIFO (which would block) is not a log file
        raise UserError(f"no log file at {clipped(text, 200)} (a regular file is needed)", "log")
    for directory in [path.parent, *path.parent.parents][:4]:
        if (directory / CONFIG).is_file():
            return read_log_run([path], directory, directory.name)
    return read_log_run([path], path.parent, path.stem)


def collect_runs(results_dir: str | Path, extra_logs: Sequence[str | Path] = ()) -> Collection:
    """Every run under ``<results_dir>/runs`` (unreadable ones skipped with the reason) plus the named
    log files (an unreadable named log is an error: the user asked for it)."""
    collection = Collection()
    runs_root = Path(results_dir) / "runs"
    directories = (
        sorted(d for d in runs_root.iterdir() if d.is_dir() and not d.name.startswith("."))
        if runs_root.is_dir()
        else []
    )
    for directory in directories:
        try:
            run = read_run_dir(directory)
        except UserError as err:
            collection.skipped.append((str(directory), "; ".join(p.message for p in err.problems)))
            continue
        except Exception as err:  # a folder of anything at all: never stops the table
            collection.skipped.append(
                (str(directory), f"unreadable ({type(err).__name__}: {' '.join(str(err).split())[:160]})")
            )
            continue
        if run.steps:
            collection.runs.append(run)
        else:
            collection.skipped.append((str(directory), "no step records"))
    for path in extra_logs:
        run = read_log_path(Path(path))
        if not any(s.step_time_s is not None or s.tflops_per_gpu is not None or s.loss is not None for s in run.steps):
            raise UserError(
                f"{clipped(str(path), 200)} has no Megatron iteration or Step Time line with a usable time, "
                "throughput or loss (positive and finite)",
                "log",
            )
        collection.runs.append(run)
    return collection
