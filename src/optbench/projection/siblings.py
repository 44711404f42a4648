"""The matrix optimizers side by side: each one's projected overhead over the same AdamW twin.

A user choosing between the matrix optimizers wants them at one layout, against one AdamW baseline; the plan projects
the ones the user names (``make plan ... COMPARE=<name>,<name>``), each one more composition (by the planner:
:mod:`optbench.projection.counterparts`). A
sibling is the run with another matrix optimizer, as that optimizer's recipe configures it: the
model's ``<model>_<optimizer>`` recipe when there is one (so an optimizer with more state gets its own micro batch),
else the run's recipe with ``optimizer=<name>``; the user's non-optimizer overrides are kept. Each sibling is
validated like any run, so one the container lacks or that does not fit is shown with its one-line
reason instead of a number.
"""

from __future__ import annotations

from collections.abc import Sequence

from optbench.accounting.plan_section import StepRecord
from optbench.accounting.throughput import step_throughput
from optbench.config.schema import MATRIX_OPTIMIZERS
from optbench.common.errors import UserError
from optbench.projection.assumptions import Assumptions
from optbench.projection.calibration import Calibration
from optbench.projection.counterparts import Counterparts
from optbench.projection.section import MatrixOverhead, SiblingProjection, TwinProjection
from optbench.projection.step_model import evaluate
from optbench.projection.twin import recipe_with_optimizer
from optbench.projection.work import build_inputs
from optbench.common.redact import recorded_overrides
from optbench.resolve import ResolvedRun


def _sibling(
    resolved: ResolvedRun,
    name: str,
    overrides: Sequence[str],
    net,
    a: Assumptions,
    calibration: Calibration,
    adamw_tflops: float,
    counterparts: Counterparts,
) -> SiblingProjection:
    recipe, kept = recipe_with_optimizer(resolved.run, name, overrides, counterparts.recipes())
    shown = " ".join([recipe, *recorded_overrides(kept)])
    try:
        sibling = counterparts.sibling(recipe, kept, like=resolved)
    except UserError as err:
        return SiblingProjection(
            optimizer=name, recipe=shown, available=False, reason=err.lines()[0].removeprefix("error: ")
        )
    breakdown = evaluate(build_inputs(sibling, net, a), calibration.efficiency, a.backward_share)
    tflops = step_throughput(sibling.run, breakdown.total_s, ns_flops_total=sibling.ns_flops_total).tflops_per_gpu
    return _available(
        name, shown, sibling, round(breakdown.total_s, 4), round(tflops, 2), round(100 * (tflops / adamw_tflops - 1), 2)
    )


def _available(
    name: str, recipe: str, resolved: ResolvedRun, step_time_s: float, tflops_per_gpu: float, change_percent: float
) -> SiblingProjection:
    memory = resolved.memory
    return SiblingProjection(
        optimizer=name,
        recipe=recipe,
        available=True,
        step_time_s=step_time_s,
        tflops_per_gpu=tflops_per_gpu,
        tflops_per_gpu_change_percent=change_percent,
        optimizer_state_gb=round(memory.breakdown_gb.get("optimizer_state", 0.0), 2),
        memory_gb=round(memory.total_gb, 2),
    )


def side_by_side(
    resolved: ResolvedRun,
    overrides: Sequence[str],
    net,
    a: Assumptions,
    calibration: Calibration,
    own: StepRecord,
    overhead: MatrixOverhead,
    twin: TwinProjection,
    names: Sequence[str],
    counterparts: Counterparts,
) -> tuple[SiblingProjection, ...]:
    """The run and each matrix optimizer of ``names`` projected beside the AdamW twin (``own`` and ``overhead``: the
    run's own numbers, reused; the others composed by ``counterparts``), in :data:`MATRIX_OPTIMIZERS`' order."""
    out = []
    for name in MATRIX_OPTIMIZERS:
        if name != resolved.run.optimizer.name and name not in names:
            continue
        if name == resolved.run.optimizer.name:
            out.append(
                _available(
                    name,
                    "this run",
                    resolved,
                    own.step_time_s,
                    own.tflops_per_gpu,
                    overhead.tflops_per_gpu_change_percent,
                )
            )
        else:
            out.append(_sibling(resolved, name, overrides, net, a, calibration, twin.step.tflops_per_gpu, counterparts))
    return tuple(out)
