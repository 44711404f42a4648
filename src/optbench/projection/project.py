"""The projection of one run: step time, TFLOP/s per GPU, MFU, breakdown, and for Muon its AdamW twin.

:func:`project` returns the ``projection`` section of plan.json. Every number comes from the
step-time model (:mod:`optbench.projection.step_model`) at the model's calibrated GEMM efficiency
(:mod:`optbench.projection.calibration`); a Muon run is compared with its AdamW twin evaluated at the
same efficiency, and with the published figures of its setup (never used to fit anything).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from optbench.accounting.plan_fields import matching_published_rows
from optbench.accounting.throughput import step_throughput
from optbench.common.errors import UserError
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS, EAGER_OP_OVERHEAD_MEASURED_ON, Assumptions
from optbench.projection.calibration import NO_HOLDOUT, Calibration, Holdout, calibrate
from optbench.projection.counterparts import Counterparts
from optbench.projection.expected_error import across_precision, error_case, expected_error
from optbench.projection.interconnect import interconnect_for
from optbench.projection.row_config import RowRuns, run_layout_key
from optbench.projection.siblings import side_by_side
from optbench.projection.step_model import StepBreakdown, evaluate
from optbench.projection.twin import decompose, twin_recipe
from optbench.projection.whatif import what_ifs
from optbench.projection.work import build_inputs
from optbench.common.redact import recorded_overrides
from optbench.resolve import ResolvedRun

MODEL_DOC = "docs/projection.md"


def unavailable(reason: str) -> dict[str, Any]:
    """The projection section of a run the model does not project."""
    return {"available": False, "reason": reason}


def _throughput(resolved: ResolvedRun, breakdown: StepBreakdown) -> dict[str, Any]:
    return step_throughput(resolved.run, breakdown.total_s, ns_flops_total=resolved.ns_flops_total).as_record(rounded=True)


def _compared(resolved: ResolvedRun, projected_tflops: float) -> list[dict[str, Any]]:
    """The run's published model-only figures of its own release beside the projection (compared, never fitted;
    a row of another release measured other software: ``make projection`` projects it at its own release)."""
    out = []
    release = resolved.run.cluster.container.split(":", 1)[1]
    for row in matching_published_rows(resolved.run, resolved.layout):
        if not row.model_tflops_per_gpu or row.release != release:
            continue
        out.append(
            {
                "published": row.label,
                "published_model_tflops_per_gpu": row.model_tflops_per_gpu,
                "projected_tflops_per_gpu": round(projected_tflops, 2),
                "error_percent": round(100 * (projected_tflops / row.model_tflops_per_gpu - 1), 2),
            }
        )
    return out


def _differences(resolved: ResolvedRun, twin: ResolvedRun) -> list[str]:
    """Layout and batch fields where the twin differs from the run (their effect lands in 'other')."""
    run = resolved.run
    ours, theirs = resolved.layout.as_dict(), twin.layout.as_dict()
    out = [f"parallel.{k}" for k in ours if ours[k] != theirs[k]]
    out += [f"train.{k}" for k in ("gbs", "mbs", "seq_length") if getattr(run.train, k) != getattr(twin.run.train, k)]
    return out


def _twin_section(
    resolved: ResolvedRun, overrides: Sequence[str], net, a: Assumptions, calibration: Calibration, muon: StepBreakdown,
    counterparts: Counterparts,
) -> tuple[dict[str, Any], dict[str, Any]]:
    run = resolved.run
    recipe, kept = twin_recipe(run, overrides)
    if (recipe, kept) == (calibration.anchor_recipe, calibration.anchor_overrides) and calibration.anchor_run:
        twin = calibration.anchor_run  # the very configuration the efficiency was calibrated on
    else:
        try:
            twin = counterparts.twin(recipe, kept, like=resolved)
        except UserError as err:
            return unavailable(f"the AdamW twin does not compose: {err.lines()[0]}"), {}
    twin_net = interconnect_for(twin.run.cluster.gpu, twin.run.cluster.nvlink_domain_size)
    if twin_net is None:
        return unavailable(f"no interconnect figures for the twin's gpu {twin.run.cluster.gpu!r}"), {}
    adamw = evaluate(build_inputs(twin, twin_net, a), calibration.efficiency, a.backward_share)
    section = {
        "recipe": " ".join([recipe, *recorded_overrides(kept)]),
        **_throughput(twin, adamw),
        "breakdown_s": adamw.as_dict()["parts_s"],
    }
    parts = decompose(muon, adamw)
    muon_tflops = step_throughput(run, muon.total_s, ns_flops_total=resolved.ns_flops_total).tflops_per_gpu
    overhead = {
        "twin_differs_in": _differences(resolved, twin),
        "total_s": round(muon.total_s - adamw.total_s, 5),
        "parts_s": {k: round(v, 5) for k, v in parts.items()},
        "tflops_per_gpu_change": round(muon_tflops - section["tflops_per_gpu"], 2),
        "tflops_per_gpu_change_percent": round(100 * (muon_tflops / section["tflops_per_gpu"] - 1), 2),
    }
    total = muon.total_s - adamw.total_s
    if total > 0 and parts.get("kernel_launch", 0.0) >= a.launch_bound_share * total:
        overhead["at_measured_op_overhead"] = _at_measured_op_overhead(resolved, net, a, calibration, section)
    return section, overhead


def _at_measured_op_overhead(resolved: ResolvedRun, net, a: Assumptions, calibration: Calibration,
                             twin: dict[str, Any]) -> dict[str, Any]:
    """The run's change vs its twin at each end of the host time per eager op measured for upstream Muon: the
    a-priori constant is what a launch-bound projection rests on."""
    changes = []
    for seconds in a.eager_op_overhead_measured_s:
        at = replace(a, eager_op_overhead_s=seconds)
        step = evaluate(build_inputs(resolved, net, at), calibration.efficiency, at.backward_share).total_s
        tflops = step_throughput(resolved.run, step, ns_flops_total=resolved.ns_flops_total).tflops_per_gpu
        changes.append(round(100 * (tflops / twin["tflops_per_gpu"] - 1), 2))
    return {"us_per_op": [round(s * 1e6, 1) for s in a.eager_op_overhead_measured_s],
            "measured_on": EAGER_OP_OVERHEAD_MEASURED_ON, "assumed_us_per_op": round(a.eager_op_overhead_s * 1e6, 1),
            "tflops_per_gpu_change_percent": changes}


def _error_case(resolved: ResolvedRun, calibration: Calibration) -> str:
    """How far the run is from what calibrated it (:func:`optbench.projection.expected_error.error_case`)."""
    run = resolved.run
    if calibration.is_carried or not calibration.anchor_num_gpus:
        return error_case(False, dict(calibration.carried).get("model") == "fitted", False, False, False)
    return error_case(True, True, calibration.anchor_num_gpus == run.parallel.num_gpus,
                      calibration.anchor_layout == run_layout_key(resolved), calibration.anchor_container == run.cluster.container,
                      calibration.same_preset)


def project(
    resolved: ResolvedRun,
    overrides: Sequence[str] = (),
    assumptions: Assumptions = DEFAULT_ASSUMPTIONS,
    published_dir: str | Path | None = None,
    with_what_ifs: bool = True,
    holdout: Holdout = NO_HOLDOUT,
    counterparts: Counterparts | None = None,
    siblings: Sequence[str] = (),
    *,
    row_runs: RowRuns,
) -> dict[str, Any]:
    """The projection section for a resolved run (``overrides`` as typed: the AdamW twin reuses them;
    ``holdout``: published rows the calibration may not use; ``counterparts``: where a matrix-optimizer run's AdamW
    twin and ``siblings`` come from (the planner's compositions), None for no twin, which a layout search projects
    itself at the same layout; ``siblings``: the other matrix optimizers to project beside the twin; ``row_runs``:
    the published rows' runs the calibration solves on where ``make projection`` committed no solution)."""
    run = resolved.run
    if run.engine == "local":
        return unavailable("engine=local runs small proxies on this machine and measures itself; no projection needed")
    net = interconnect_for(run.cluster.gpu, run.cluster.nvlink_domain_size)
    if net is None:
        return unavailable(f"no interconnect figures for gpu {run.cluster.gpu!r} in optbench/data/interconnect.csv")
    calibration = calibrate(run, assumptions, published_dir, holdout, row_runs=row_runs)
    if calibration is None:
        return unavailable(
            f"not calibrated: no published AdamW figure of model {run.model.name!r} that a recipe reproduces"
            " (results/published/published.csv); the model has no efficiency to project with"
        )
    if calibration.mxfp8_expert_rows is not None:  # evaluate at the M0 the carried table's efficiencies belong to
        assumptions = replace(assumptions, small_expert_gemm_rows_mxfp8=calibration.mxfp8_expert_rows)
    eff = calibration.efficiency
    inputs = build_inputs(resolved, net, assumptions)
    breakdown = evaluate(inputs, eff, assumptions.backward_share)
    detail = breakdown.as_dict()
    section: dict[str, Any] = {
        "available": True,
        "model": f"first-principles step-time model, one calibrated GEMM efficiency ({MODEL_DOC})",
        **_throughput(resolved, breakdown),
        "breakdown_s": detail["parts_s"],
        "efficiency": calibration.as_dict(run.cluster.gpu, inputs.gemm_peak_key),
        "slowest_pipeline_rank": detail["slowest_pipeline_rank"],
        "optimizer_busiest_rank": detail["optimizer_busiest_rank"],
        "optimizer_busiest_s": detail["optimizer_busiest_s"],
        "optimizer_mean_s": detail["optimizer_mean_s"],
        "interconnect": net.as_dict(),
        "assumptions": assumptions.as_dict(),
        "expected_error": (across_precision(len(calibration.precision_ratio.pairs) if calibration.precision_ratio else 0)
                           if calibration.across_precision(inputs.gemm_peak_key)
                           else expected_error(_error_case(resolved, calibration),
                                               matrix_optimizer=run.optimizer.name if run.optimizer.matrix_optimizer else None)),
        "compared_with_published": _compared(resolved, step_throughput(run, breakdown.total_s, ns_flops_total=resolved.ns_flops_total).tflops_per_gpu),
    }
    if run.optimizer.matrix_optimizer and counterparts is not None:
        section["adamw_twin"], section["muon_overhead"] = _twin_section(
            resolved, overrides, net, assumptions, calibration, breakdown, counterparts
        )
        if section["muon_overhead"] and siblings:
            own = {"step_time_s": section["step_time_s"], "tflops_per_gpu": section["tflops_per_gpu"],
                   "tflops_per_gpu_change_percent": section["muon_overhead"]["tflops_per_gpu_change_percent"]}
            section["optimizers"] = side_by_side(resolved, overrides, net, assumptions, calibration, own,
                                                 section["adamw_twin"], siblings, counterparts)
        if with_what_ifs and run.optimizer.muon_family:  # the what-ifs are Muon's (SYRK, NS-cost balancing)
            section["what_if"] = what_ifs(resolved, net, assumptions, eff, inputs, breakdown.total_s)
    return section
