"""Our projection at every published row's configuration, and its error against the published figure.

Each row is projected at its own configuration (:class:`optbench.projection.row_config.RowRuns`), by the code path
``make plan`` takes for that configuration, so the table and the plan print the same number. The calibration
(one AdamW row per model, never a Muon row: :mod:`optbench.projection.calibration`) may be told to hold rows
out: the row itself, or its whole release (:mod:`optbench.projection.validation`).
"""

from __future__ import annotations

from typing import Any

from optbench.common.errors import UserError
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS, Assumptions
from optbench.projection.calibration import NO_HOLDOUT, Holdout, row_id
from optbench.projection.project import project
from optbench.projection.row_config import RowRuns
from optbench.projection.row_solve import published_tflops_at
from optbench.projection.section import ProjectionSection
from optbench.catalog.published import PublishedRow


def projection_error(
    row: PublishedRow,
    row_runs: RowRuns,
    holdout: Holdout = NO_HOLDOUT,
    assumptions: Assumptions = DEFAULT_ASSUMPTIONS,
    with_expected_error: bool = False,
) -> dict[str, Any]:
    """{'tflops', 'error_percent', 'anchor', 'anchor_itself', 'command', 'in_domain'} or {'reason'} for one
    published row (model-only FLOPs both sides, the published one by its speed in our count:
    :func:`~optbench.projection.row_solve.published_tflops_at`); ``with_expected_error`` adds 'expected_error', the
    :class:`~optbench.projection.section.ExpectedError` its ``make plan`` states."""
    if not row.model_tflops_per_gpu:
        return {"reason": "no model-only figure"}
    config, resolved = row_runs.config(row), row_runs.run(row)
    if isinstance(config, str) or isinstance(resolved, str):
        return {"reason": str(config if isinstance(config, str) else resolved)}
    try:
        section = project(
            resolved, config.overrides, assumptions, with_what_ifs=False, holdout=holdout, row_runs=row_runs
        )
    except UserError as err:
        return {"reason": err.lines()[0].removeprefix("error: ")}
    if not isinstance(section, ProjectionSection):
        return {"reason": section.reason}
    tflops = section.step.tflops_per_gpu
    published = published_tflops_at(resolved.run, row)  # a row with a figure has one
    anchor = section.efficiency.calibrated_on
    return {
        "tflops": tflops,
        "error_percent": round(100 * (tflops / published - 1), 2),
        "anchor": anchor,
        "anchor_itself": section.efficiency.anchor_row == row_id(row),
        "precision_ratios": _ratios(section.efficiency.precision_ratio),
        "command": config.command,
        "typed": list(config.typed),
        "in_domain": config.in_domain,
        **({"expected_error": section.expected_error} if with_expected_error else {}),
    }


def _ratios(ratio) -> int:
    """How many fitted rate ratios an efficiency crossed precision at: 0, 1 (BF16/FP8 or FP8/FP4) or 2 (BF16/FP4)."""
    if ratio is None:
        return 0
    return 2 if ratio.precisions == "BF16/FP4" else 1
