"""The matrix optimizers side by side: each one's projected overhead over the same AdamW twin.

A user choosing between the matrix optimizers wants them at one layout, against one AdamW baseline; the plan projects
the ones the user names (``make plan ... COMPARE=<name>,<name>``), each one more composition (by the planner:
:mod:`optbench.projection.counterparts`). A
sibling is the run with another matrix optimizer, as that optimizer's recipe configures it: the
model's ``<model>_<optimizer>`` recipe when there is one (so an optimizer with more state gets its own micro batch), else the
run's recipe with ``optimizer=<name>``; the user's non-optimizer overrides are kept. Each sibling is
validated like any run, so one the container lacks or that does not fit is shown with its one-line
reason instead of a number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optbench.accounting.throughput import step_throughput
from optbench.config.schema import MATRIX_OPTIMIZERS
from optbench.common.errors import UserError
from optbench.projection.assumptions import Assumptions
from optbench.projection.calibration import Calibration
from optbench.projection.counterparts import Counterparts
from optbench.projection.step_model import evaluate
from optbench.projection.twin import recipe_with_optimizer
from optbench.projection.work import build_inputs
from optbench.common.redact import recorded_overrides
from optbench.resolve import ResolvedRun


def _sibling(resolved: ResolvedRun, name: str, overrides: Sequence[str], net, a: Assumptions,
             calibration: Calibration, adamw_tflops: float, counterparts: Counterparts) -> dict[str, Any]:
    recipe, kept = recipe_with_optimizer(resolved.run, name, overrides, counterparts.recipes())
    entry: dict[str, Any] = {"optimizer": name, "recipe": " ".join([recipe, *recorded_overrides(kept)])}
    try:
        sibling = counterparts.sibling(recipe, kept, like=resolved)
    except UserError as err:
        return {**entry, "available": False, "reason": err.lines()[0].removeprefix("error: ")}
    breakdown = evaluate(build_inputs(sibling, net, a), calibration.efficiency, a.backward_share)
    tflops = step_throughput(sibling.run, breakdown.total_s, ns_flops_total=sibling.ns_flops_total).tflops_per_gpu
    return {
        **entry,
        "available": True,
        "step_time_s": round(breakdown.total_s, 4),
        "tflops_per_gpu": round(tflops, 2),
        "tflops_per_gpu_change_percent": round(100 * (tflops / adamw_tflops - 1), 2),
        "optimizer_state_gb": round(sibling.memory.breakdown_gb.get("optimizer_state", 0.0), 2),
        "memory_gb": round(sibling.memory.total_gb, 2),
    }


def side_by_side(resolved: ResolvedRun, overrides: Sequence[str], net, a: Assumptions, calibration: Calibration,
                 own: dict[str, Any], twin: dict[str, Any], names: Sequence[str],
                 counterparts: Counterparts) -> list[dict[str, Any]]:
    """The run and each matrix optimizer of ``names`` projected beside the AdamW twin (``own``: the run's own
    numbers, reused; the others composed by ``counterparts``), in :data:`MATRIX_OPTIMIZERS`' order."""
    out = []
    for name in MATRIX_OPTIMIZERS:
        if name != resolved.run.optimizer.name and name not in names:
            continue
        if name == resolved.run.optimizer.name:
            memory = resolved.memory
            out.append({"optimizer": name, "recipe": "this run", "available": True, **own,
                        "optimizer_state_gb": round(memory.breakdown_gb.get("optimizer_state", 0.0), 2),
                        "memory_gb": round(memory.total_gb, 2)})
        else:
            out.append(_sibling(resolved, name, overrides, net, a, calibration, twin["tflops_per_gpu"], counterparts))
    return out
