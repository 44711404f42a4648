"""How far the projection is from every published row, in sample and out of sample (``make projection``).

Each row is projected at its own configuration (:mod:`optbench.projection.row_config`, the path ``make plan``
takes) four times, with the calibration allowed to use:

* ``in_sample``: every AdamW row (an AdamW row is then usually its own anchor: error ~0 by construction);
* ``leave_one_row_out``: every AdamW row but this one;
* ``leave_one_release_out``: no row of this row's release (what a user planning on a new container gets);
* ``leave_one_gpu_out``: no row of this row's GPU, so the efficiency is carried from another GPU's anchor (what
  a user planning on a GPU nobody published for this model gets; ``make plan`` prints this figure when its
  calibration is transferred from another GPU).

The model fits one number per projection, the GEMM efficiency of its model solved on one anchor row; the
rest are a-priori constants (docs/projection.md). Muon rows are never used for fitting, so their
figures differ only through the AdamW anchor. The summary counts the rows of the validated domain: a release
whose NVIDIA preset we executed, a model-only figure, and a row the model can describe and its own setup's other
releases do not contradict (:mod:`optbench.projection.consistency`). The others are listed with the reason, never
fitted and never hidden.
"""

from __future__ import annotations

import statistics
from typing import Any

from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS
from optbench.projection.calibration import Holdout, row_id, solve_on
from optbench.projection.expected_error import SCHEME_LABELS
from optbench.projection.published_rows import projection_error
from optbench.projection.release_drift import release_drift
from optbench.projection.row_config import release_order, row_config
from optbench.checkout import repo_root
from optbench.published import PublishedRow, default_published_dir, load_inconsistent

SCHEMES = tuple(SCHEME_LABELS)
WITHIN = (3.0, 5.0, 10.0)
"""|error| thresholds the summary counts (percent)."""


def _holdout(scheme: str, row: PublishedRow) -> Holdout:
    if scheme == "leave_one_row_out":
        return Holdout(rows=frozenset({row_id(row)}))
    if scheme == "leave_one_release_out":
        return Holdout(releases=frozenset({row.release}))
    if scheme == "leave_one_gpu_out":
        return Holdout(gpus=frozenset({row.gpu}))
    return Holdout()


def _outside(row: PublishedRow, in_sample: dict[str, Any], inconsistent: dict[str, str]) -> str | None:
    """Why a row is outside the validated domain, or None."""
    if "reason" in in_sample:
        return in_sample["reason"]
    if not in_sample["in_domain"]:
        return f"release {row.release}: no NVIDIA preset of it was executed (its full layout is unknown)"
    if row_id(row) in inconsistent:
        return inconsistent[row_id(row)]
    if row.optimizer == "adamw":
        solved = solve_on(row, DEFAULT_ASSUMPTIONS)
        if isinstance(solved, str):
            return solved
    return None


def validate_rows(rows: list[PublishedRow], inconsistent: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One record per published row: its configuration, and per scheme the projection and error (or why none).
    ``inconsistent``: rows their own setup contradicts (default: the committed list the calibration reads)."""
    if inconsistent is None:
        inconsistent = load_inconsistent(default_published_dir(repo_root() / "results"))
    out = []
    for row in rows:
        config = row_config(row)
        record: dict[str, Any] = {
            "row": row_id(row),
            "release": row.release,
            "model": row.model,
            "gpu": row.gpu,
            "num_gpus": row.num_gpus,
            "precision": row.precision,
            "optimizer": row.optimizer,
            "published_model_tflops_per_gpu": row.model_tflops_per_gpu,
            "command": None if isinstance(config, str) else config.command,
            "typed_from_row": [] if isinstance(config, str) else list(config.typed),
        }
        for scheme in SCHEMES:
            record[scheme] = projection_error(row, _holdout(scheme, row))
        record["outside_domain"] = _outside(row, record["in_sample"], inconsistent)
        out.append(record)
    return out


def summary(records: list[dict[str, Any]], scheme: str, optimizer: str | None = None) -> dict[str, Any]:
    """Median |error|, share within each threshold and the worst rows of ``scheme`` over the validated domain."""
    chosen = [
        r for r in records
        if r["outside_domain"] is None and "error_percent" in r[scheme] and optimizer in (None, r["optimizer"])
    ]
    errors = [abs(r[scheme]["error_percent"]) for r in chosen]
    if not errors:
        return {"rows": 0}
    worst = sorted(chosen, key=lambda r: -abs(r[scheme]["error_percent"]))[:3]
    anchors = {r[scheme]["anchor"] for r in chosen}
    return {
        "rows": len(errors),
        "median_abs_error_percent": round(statistics.median(errors), 2),
        **{f"within_{t:g}_percent": round(sum(e <= t for e in errors) / len(errors), 3) for t in WITHIN},
        "worst": [{"row": r["row"], "error_percent": r[scheme]["error_percent"]} for r in worst],
        "fitted_parameters": len(anchors),
        "fitted_parameters_note": "one GEMM efficiency per distinct anchor row used (each projection uses one)",
    }


def report(rows: list[PublishedRow]) -> dict[str, Any]:
    """Every row's record and the summaries (all rows, AdamW rows, Muon rows) per scheme."""
    records = validate_rows(rows)
    summaries = {
        scheme: {label: summary(records, scheme, opt) for label, opt in (("all", None), ("adamw", "adamw"), ("muon", "muon"))}
        for scheme in SCHEMES
    }
    releases = sorted({r["release"] for r in records}, key=release_order)
    return {
        "schemes": list(SCHEMES), "summary": summaries, "releases": releases, "rows": records,
        "release_drift": release_drift(rows),
    }
