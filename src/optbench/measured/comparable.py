"""Whether two measured runs may be set side by side (a Muon/AdamW ratio), and why not.

A ratio of two runs says something about the optimizers only when everything else was the same: the model, the
data, the precision, the tokens per step (sequence x batch) and the machine (device, processes, threads). The
table, its plots and ``make compare`` pair runs only on an equal :func:`setup_of`; otherwise they say which field
differs. Seconds taken while other processes held the CPU are flagged (:func:`load_flag`), not hidden.
"""

from __future__ import annotations

from typing import Any

from optbench.common.machine_load import QUIET_SHARE
from optbench.measured.runs import MeasuredRun

UNKNOWN = "not recorded"


def _data(summary: dict[str, Any]) -> str:
    data = summary.get("data")
    if not isinstance(data, dict):
        return UNKNOWN
    return " ".join(str(data[k]) for k in ("kind", "description") if data.get(k)) or UNKNOWN


def setup_of(run: MeasuredRun) -> dict[str, str]:
    """The fields two runs must share to be compared, as text (a field a run did not record reads 'not recorded')."""
    summary = run.extra
    device = summary.get("device") or run.gpu
    return {
        "model": run.model,
        "data": _data(summary),
        "precision": run.precision,
        "tokens per step": str(summary.get("tokens_per_step") or UNKNOWN),
        "machine": f"{device}, {run.world_size or '?'} process(es), {summary.get('threads_per_process') or '?'} "
        "thread(s)",
        "engine": run.engine or UNKNOWN,
    }


def why_not_comparable(muon: MeasuredRun, adamw: MeasuredRun) -> str | None:
    """The first field in which the two runs differ, in one phrase; None when they may be compared."""
    mine, theirs = setup_of(muon), setup_of(adamw)
    for field, value in mine.items():
        if value != theirs[field]:
            return f"not comparable: {field} differs (muon: {value[:70]}; adamw: {theirs[field][:70]})"
    return None


def others_share(run: MeasuredRun) -> float | None:
    """The share of the machine other processes held while the run trained (None: not measured)."""
    load = run.extra.get("machine_load")
    share = load.get("others_cpu_share") if isinstance(load, dict) else None
    return share if isinstance(share, (int, float)) else None


def load_flag(*runs: MeasuredRun) -> str | None:
    """A flag when any run's seconds were taken while other processes held more than QUIET_SHARE of the machine."""
    busy = [(run.optimizer, share) for run in runs if (share := others_share(run)) is not None and share > QUIET_SHARE]
    if not busy:
        return None
    return "shared machine: " + ", ".join(
        f"other processes held {share:.0%} of the CPU during the {name} run" for name, share in busy
    )
