"""The matrix optimizers side by side, as ``make plan`` projected them: a section of ``make table``.

NVIDIA publishes no throughput for the emerging optimizers but Muon and this machine measures no cluster run, so the
only numbers to put beside each other are projections. ``make plan`` writes them into each plan.json
(``projection.optimizers``: each matrix optimizer against one AdamW twin); ``make table`` collects the
plans under ``<results>/plans/<recipe>/plan.json`` and shows one row per plan. Nothing is recomputed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from optbench.config.schema import MATRIX_OPTIMIZERS
from optbench.plan.types import Plan
from optbench.projection.section import ProjectionSection, SiblingProjection


@dataclass(frozen=True)
class PlannedRow:
    """One plan's side-by-side projection."""

    command: str
    """The plan's recipe and overrides."""
    container: str
    gpus: str
    """e.g. 8 x gb300, mxfp8."""
    adamw_tflops: float
    """The AdamW twin's model TFLOP/s/GPU."""
    cells: dict[str, str]
    """Optimizer -> its change vs the twin and optimizer state, or why it has no number."""


def _cell(sibling: SiblingProjection) -> str:
    if not sibling.available:
        return "refused: " + str(sibling.reason or "")[:140]
    return f"{sibling.tflops_per_gpu_change_percent:+.2f} % ({sibling.optimizer_state_gb:.1f} GB state)"


def planned_rows(results: Path) -> tuple[list[PlannedRow], list[tuple[str, str]]]:
    """Rows from every plan that has the side-by-side section, and (path, reason) of plans that could not be read."""
    rows, skipped = [], []
    for path in sorted(results.glob("plans/*/plan.json")):
        try:
            plan = Plan.from_json(json.loads(path.read_text(encoding="utf-8")))
            projection = plan.projection
            siblings = (
                {s.optimizer: s for s in projection.optimizers or ()}
                if isinstance(projection, ProjectionSection)
                else {}
            )
            if not siblings or projection.twin is None:
                continue
            rows.append(
                PlannedRow(
                    command=" ".join([plan.recipe, *plan.overrides]),
                    container=str(plan.config["cluster"]["container"]),
                    gpus=f"{plan.layout.world_size} x {plan.gpu}, {plan.precision}",
                    adamw_tflops=projection.twin.step.tflops_per_gpu,
                    cells={name: _cell(siblings[name]) if name in siblings else "-" for name in MATRIX_OPTIMIZERS},
                )
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            skipped.append((str(path), f"not a plan.json this version writes ({type(err).__name__}: {err})"[:200]))
    return rows, skipped
