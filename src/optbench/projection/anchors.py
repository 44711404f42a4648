"""Every published AdamW row's solved efficiency, written once by ``make projection`` for plans to read.

A plan calibrated on an anchor row (:mod:`optbench.projection.calibration`) needs only what solving the row gave:
the efficiency, the peak it is a fraction of, the step time the row's figure implies, and the anchor's
configuration (recipe, overrides, GPU count, layout, container); a plan whose precision no anchor of its model
shares needs the BF16/FP8 pairs' effective GEMM rates too. Solving means composing the row's run at its release's
NVIDIA preset, which is a composition per plan that the plan does not otherwise need. ``make projection`` solves
every AdamW row once (and every pair row's rate) and writes ``results/projection/anchors.json``; a plan with the
default assumptions, no held-out rows and the repository's published rows reads it and composes only the run and
its AdamW twin. Anything else (a validation scheme, a what-if, another published folder) solves live, as does a
row the file lacks. A test holds the file to live solving.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from optbench.common.checkout import repo_root
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS

ANCHORS = Path("projection") / "anchors.json"
"""Where ``make projection`` writes the solved anchors, under a results folder."""
FIELDS = (
    "efficiency",
    "peak_key",
    "anchor",
    "anchor_step_time_s",
    "anchor_recipe",
    "anchor_overrides",
    "anchor_gpu",
    "anchor_row",
    "anchor_num_gpus",
    "anchor_layout",
    "anchor_container",
)
"""The :class:`~optbench.projection.calibration.Calibration` fields a stored anchor carries."""


def anchor_record(calibration: Any) -> dict[str, Any]:
    """One solved anchor as anchors.json keeps it (tuples as lists)."""
    return {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in ((n, getattr(calibration, n)) for n in FIELDS)
    }


def anchors_document(solved: dict[str, Any], gemm_rates: dict[str, float | None]) -> dict[str, Any]:
    """What ``make projection`` writes: every AdamW row solved (row id -> :func:`anchor_record`) or why it cannot
    anchor (row id -> reason), the effective GEMM rate of every row of a BF16/FP8 or FP8/FP4 pair (row id ->
    FLOP/s, null when it has none: :mod:`optbench.projection.precision_ratio`), and the assumptions they were solved
    at (a plan at other assumptions solves live)."""
    return {
        "about": "every published AdamW row's efficiency, solved at its executed configuration "
        "(optbench.projection.anchors): what make plan reads instead of composing its anchor",
        "command": "make projection",
        "assumptions": DEFAULT_ASSUMPTIONS.as_dict(),
        "anchors": {row: anchor_record(c) for row, c in sorted(solved.items()) if not isinstance(c, str)},
        "unsolved": {row: reason for row, reason in sorted(solved.items()) if isinstance(reason, str)},
        "gemm_rates": dict(sorted(gemm_rates.items())),
    }


def _document(results_dir: str | None) -> dict[str, Any]:
    """anchors.json when it was solved at today's default assumptions, else {} (a stale file is never used)."""
    path = Path(results_dir or repo_root() / "results") / ANCHORS
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if document["assumptions"] != json.loads(json.dumps(DEFAULT_ASSUMPTIONS.as_dict())):
            return {}
        return document if isinstance(document["anchors"], dict) and isinstance(document["unsolved"], dict) else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def committed_anchors(results_dir: str | None = None) -> dict[str, dict[str, Any]]:
    """The anchors ``make projection`` wrote (row id -> Calibration fields), or {} before the first one, for one
    this version cannot read, or for one solved at other assumptions than today's defaults."""
    anchors = _document(results_dir).get("anchors", {})
    return {
        row: {name: tuple(v) if isinstance(v, list) else v for name, v in fields.items()}
        for row, fields in anchors.items()
        if isinstance(fields, dict) and set(fields) == set(FIELDS)
    }


def committed_unsolved(results_dir: str | None = None) -> dict[str, str]:
    """Rows ``make projection`` found cannot anchor anything (row id -> why)."""
    return {row: str(why) for row, why in _document(results_dir).get("unsolved", {}).items()}


def committed_gemm_rates(results_dir: str | None = None) -> dict[str, float | None]:
    """The BF16/FP8 and FP8/FP4 pair rows' effective GEMM rates ``make projection`` wrote (row id -> FLOP/s or None),
    or {}."""
    rates = _document(results_dir).get("gemm_rates", {})
    if not isinstance(rates, dict):
        return {}
    return {str(row): float(rate) if isinstance(rate, (int, float)) else None for row, rate in rates.items()}
