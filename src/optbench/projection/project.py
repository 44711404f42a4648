"""The projection of one run: step time, TFLOP/s per GPU, MFU, breakdown, and for Muon its AdamW twin.

:func:`project` returns the ``projection`` section of plan.json. Every number comes from the
step-time model (:mod:`optbench.projection.step_model`) at the model's calibrated GEMM efficiency
(:mod:`optbench.projection.calibration`); a Muon run is compared with its AdamW twin evaluated at the
same efficiency, and with the published figures of its setup (never used to fit anything).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from dataclasses import replace
from pathlib import Path

from optbench.accounting.plan_fields import matching_published_rows
from optbench.accounting.plan_section import StepRecord
from optbench.accounting.throughput import step_throughput
from optbench.common.errors import UserError
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS, EAGER_OP_OVERHEAD_MEASURED_ON, Assumptions
from optbench.projection.calibration import NO_HOLDOUT, Calibration, Holdout, calibrate
from optbench.projection.counterparts import Counterparts
from optbench.projection.expected_error import (
    UNVERIFIED_CLASS,
    across_precision,
    error_case,
    expected_error,
    with_band_tflops,
)
from optbench.releases.versions import container_of
from optbench.releases.versions import runnable as runnable_containers
from optbench.projection.interconnect import interconnect_for
from optbench.projection.row_config import RowRuns, run_layout_key
from optbench.projection.row_solve import published_tflops_at
from optbench.projection.section import (
    ExpectedError,
    MatrixOverhead,
    OpOverheadRange,
    Projection,
    ProjectionSection,
    PublishedComparison,
    TwinProjection,
    Unavailable,
)
from optbench.projection.siblings import side_by_side
from optbench.projection.step_model import StepBreakdown, evaluate
from optbench.projection.twin import TwinMismatch, decompose, twin_recipe
from optbench.projection.whatif import what_ifs
from optbench.projection.work import build_inputs
from optbench.common.redact import recorded_overrides
from optbench.resolve import ResolvedRun

MODEL_DOC = "docs/projection.md"


def _step(resolved: ResolvedRun, breakdown: StepBreakdown) -> StepRecord:
    return StepRecord.of(step_throughput(resolved.run, breakdown.total_s, ns_flops_total=resolved.ns_flops_total))


def _compared(resolved: ResolvedRun, projected_tflops: float) -> tuple[PublishedComparison, ...]:
    """The run's published model-only figures of its own release beside the projection (compared, never fitted;
    a row of another release measured other software: ``make projection`` projects it at its own release)."""
    out = []
    release = resolved.run.cluster.container.split(":", 1)[1]
    for row in matching_published_rows(resolved.run, resolved.layout):
        if not row.model_tflops_per_gpu or row.release != release:
            continue
        published = published_tflops_at(resolved.run, row)  # a row with a figure has one
        out.append(
            PublishedComparison(
                row.label,
                round(published, 2),
                round(projected_tflops, 2),
                round(100 * (projected_tflops / published - 1), 2),
                row.tokens_per_s_per_gpu,
            )
        )
    return tuple(out)


def _differences(resolved: ResolvedRun, twin: ResolvedRun) -> list[str]:
    """Layout and batch fields where the twin differs from the run (their effect lands in 'other')."""
    run = resolved.run
    ours, theirs = resolved.layout.as_dict(), twin.layout.as_dict()
    out = [f"parallel.{k}" for k in ours if ours[k] != theirs[k]]
    out += [f"train.{k}" for k in ("gbs", "mbs", "seq_length") if getattr(run.train, k) != getattr(twin.run.train, k)]
    return out


def _twin_section(
    resolved: ResolvedRun,
    overrides: Sequence[str],
    net,
    a: Assumptions,
    calibration: Calibration,
    muon: StepBreakdown,
    counterparts: Counterparts,
) -> tuple[TwinProjection | Unavailable, MatrixOverhead | None]:
    run = resolved.run
    recipe, kept = twin_recipe(run, overrides)
    if (recipe, kept) == (calibration.anchor_recipe, calibration.anchor_overrides) and calibration.anchor_run:
        twin = calibration.anchor_run  # the very configuration the efficiency was calibrated on
    else:
        try:
            twin = counterparts.twin(recipe, kept, like=resolved)
        except TwinMismatch:
            raise
        except UserError as err:
            return Unavailable(reason=f"the AdamW twin does not compose: {err.lines()[0]}"), None
    twin_net = interconnect_for(twin.run.cluster.gpu, twin.run.cluster.nvlink_domain_size)
    if twin_net is None:
        return Unavailable(reason=f"no interconnect figures for the twin's gpu {twin.run.cluster.gpu!r}"), None
    adamw = evaluate(build_inputs(twin, twin_net, a), calibration.efficiency, a.backward_share)
    section = TwinProjection(
        recipe=" ".join([recipe, *recorded_overrides(kept)]),
        step=_step(twin, adamw),
        breakdown_s=adamw.as_dict()["parts_s"],
    )
    parts = decompose(muon, adamw)
    muon_tflops = step_throughput(run, muon.total_s, ns_flops_total=resolved.ns_flops_total).tflops_per_gpu
    twin_tflops = section.step.tflops_per_gpu
    total = muon.total_s - adamw.total_s
    launch_bound = total > 0 and parts.get("kernel_launch", 0.0) >= a.launch_bound_share * total
    return section, MatrixOverhead(
        twin_differs_in=tuple(_differences(resolved, twin)),
        total_s=round(total, 5),
        parts_s={k: round(v, 5) for k, v in parts.items()},
        tflops_per_gpu_change=round(muon_tflops - twin_tflops, 2),
        tflops_per_gpu_change_percent=round(100 * (muon_tflops / twin_tflops - 1), 2),
        at_measured_op_overhead=_at_measured_op_overhead(resolved, net, a, calibration, twin_tflops)
        if launch_bound
        else None,
    )


def _at_measured_op_overhead(
    resolved: ResolvedRun, net, a: Assumptions, calibration: Calibration, twin_tflops: float
) -> OpOverheadRange:
    """The run's change vs its twin at each end of the host time per eager op measured for upstream Muon: the
    a-priori constant is what a launch-bound projection rests on."""
    changes = []
    for seconds in a.eager_op_overhead_measured_s:
        at = replace(a, eager_op_overhead_s=seconds)
        step = evaluate(build_inputs(resolved, net, at), calibration.efficiency, at.backward_share).total_s
        tflops = step_throughput(resolved.run, step, ns_flops_total=resolved.ns_flops_total).tflops_per_gpu
        changes.append(round(100 * (tflops / twin_tflops - 1), 2))
    return OpOverheadRange(
        tuple(round(s * 1e6, 1) for s in a.eager_op_overhead_measured_s),
        EAGER_OP_OVERHEAD_MEASURED_ON,
        round(a.eager_op_overhead_s * 1e6, 1),
        tuple(changes),
    )


def _error_case(resolved: ResolvedRun, calibration: Calibration) -> str:
    """How far the run is from what calibrated it (:func:`optbench.projection.expected_error.error_case`)."""
    run = resolved.run
    if calibration.is_carried or not calibration.anchor_num_gpus:
        carried = dict(calibration.carried)
        return error_case(False, carried.get("model") == "fitted", False, False, False, gpu_term=carried.get("gpu", ""))
    return error_case(
        True,
        True,
        calibration.anchor_num_gpus == run.parallel.num_gpus,
        calibration.anchor_layout == run_layout_key(resolved),
        calibration.anchor_container == run.cluster.container,
        calibration.same_preset,
    )


def _unverified(resolved: ResolvedRun) -> str | None:
    """Why a run of a container newer than the newest checked one is untested (None for a checked container)."""
    container = container_of(resolved.run)
    return (
        f"{container.name} is a release we did not check, planned on {container.assumed_from}'s facts"
        if container.assumed_from
        else None
    )


def _expected_error(resolved: ResolvedRun, calibration: Calibration, gemm_peak_key: str) -> ExpectedError | None:
    """The expected error of the run's case: the precision note where its efficiency crosses precision; else its
    scheme's figure and band, untested where the container is unchecked (then in the class of software we did not
    check) or no published row changes what the run changes."""
    if calibration.across_precision(gemm_peak_key):
        ratio = calibration.precision_ratio
        return across_precision(len(ratio.pairs), ratio.label) if ratio else across_precision(0)
    run, case, unverified = resolved.run, _error_case(resolved, calibration), _unverified(resolved)
    expected = expected_error(
        case,
        untested=unverified or _untested(resolved, case),
        matrix_optimizer=run.optimizer.name if run.optimizer.matrix_optimizer else None,
    )
    if unverified and expected is not None and expected.band is not None:
        expected = replace(expected, band=replace(expected.band, case_class=UNVERIFIED_CLASS))
    return expected


def _untested(resolved: ResolvedRun, case: str) -> str | None:
    """Why no published row tests what the run changes (its band is then the widest tested one), or None: a TP or CP
    no published row runs, or another GPU count where no model x GPU was published at two counts."""
    tested = _tested_knobs()
    if tested is None:
        return None
    lay = resolved.layout
    for knob, value in (("TP", lay.tp), ("CP", lay.cp)):
        seen = tested[knob]
        if value not in seen:
            return f"no published row runs {knob} {value}; each runs {knob} {' or '.join(map(str, sorted(seen)))}"
    if case == "setup" and not tested["counts"]:
        return "no model and GPU is published at two GPU counts"
    return None


def _tested_knobs() -> dict[str, Any] | None:
    """What the published rows the projection scores vary: the TP and CP values they run, and whether any model x GPU is
    published at two GPU counts; parsed once per content of published.csv (every projection of a search asks), None
    without the file."""
    from optbench.catalog.models import model_registry
    from optbench.catalog.published import PUBLISHED_CSV, data_only_reason, default_published_dir, load_published
    from optbench.common.checkout import repo_root

    directory = default_published_dir(repo_root() / "results")
    try:
        key = (str(directory), hash((directory / PUBLISHED_CSV).read_bytes()))
        if key not in _knobs:
            runnable = {container.name for container in runnable_containers()}
            # Only rows the validation scores in its domain test a knob: a catalog model's rows are data, and a
            # release without an executed preset (25.11) is projected at its stated layout but outside the domain.
            rows = [
                row
                for row in load_published(directory)
                if row.model in model_registry() and data_only_reason(row) is None and f"nemo:{row.release}" in runnable
            ]
            counts: dict[tuple[str, str], set[int]] = {}
            for row in rows:
                counts.setdefault((row.model, row.gpu), set()).add(row.num_gpus)
            _knobs.clear()
            _knobs[key] = {knob: {row.layout.get(knob.lower()) for row in rows} - {None} for knob in ("TP", "CP")}
            _knobs[key]["counts"] = any(len(c) > 1 for c in counts.values())
    except (OSError, UserError):
        return None
    return _knobs[key]


_knobs: dict[tuple[str, int], dict[str, Any]] = {}
"""The last published.csv's knobs (:func:`_tested_knobs`), by (folder, hash of its bytes)."""


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
) -> Projection:
    """The projection section for a resolved run (``overrides`` as typed: the AdamW twin reuses them;
    ``holdout``: published rows the calibration may not use; ``counterparts``: where a matrix-optimizer run's AdamW
    twin and ``siblings`` come from (the planner's compositions), None for no twin, which a layout search projects
    itself at the same layout; ``siblings``: the other matrix optimizers to project beside the twin; ``row_runs``:
    the published rows' runs the calibration solves on where ``make projection`` committed no solution)."""
    run = resolved.run
    if run.engine == "local":
        return Unavailable(
            reason="engine=local runs small proxies on this machine and measures itself; no projection needed"
        )
    net = interconnect_for(run.cluster.gpu, run.cluster.nvlink_domain_size)
    if net is None:
        return Unavailable(
            reason=f"no interconnect figures for gpu {run.cluster.gpu!r} in optbench/data/interconnect.csv"
        )
    calibration = calibrate(run, assumptions, published_dir, holdout, row_runs=row_runs)
    if calibration is None:
        return Unavailable(
            reason=(
                f"not calibrated: no published AdamW figure of model {run.model.name!r} that a recipe reproduces"
                " (results/published/published.csv); the model has no efficiency to project with"
            )
        )
    if calibration.mxfp8_expert_rows is not None:  # evaluate at the M0 the carried table's efficiencies belong to
        assumptions = replace(assumptions, small_expert_gemm_rows_mxfp8=calibration.mxfp8_expert_rows)
    eff = calibration.efficiency
    inputs = build_inputs(resolved, net, assumptions)
    breakdown = evaluate(inputs, eff, assumptions.backward_share)
    detail = breakdown.as_dict()
    step = _step(resolved, breakdown)
    twin, overhead = (
        _twin_section(resolved, overrides, net, assumptions, calibration, breakdown, counterparts)
        if run.optimizer.matrix_optimizer and counterparts is not None
        else (None, None)
    )
    return ProjectionSection(
        model=f"first-principles step-time model, one calibrated GEMM efficiency ({MODEL_DOC})",
        step=step,
        breakdown_s=detail["parts_s"],
        efficiency=calibration.as_record(run.cluster.gpu, inputs.gemm_peak_key),
        slowest_pipeline_rank=detail["slowest_pipeline_rank"],
        optimizer_busiest_rank=detail["optimizer_busiest_rank"],
        optimizer_busiest_s=detail["optimizer_busiest_s"],
        optimizer_mean_s=detail["optimizer_mean_s"],
        interconnect=net.as_dict(),
        assumptions=assumptions.as_dict(),
        expected_error=with_band_tflops(
            _expected_error(resolved, calibration, inputs.gemm_peak_key), step.tflops_per_gpu
        ),
        compared_with_published=_compared(
            resolved, step_throughput(run, breakdown.total_s, ns_flops_total=resolved.ns_flops_total).tflops_per_gpu
        ),
        adamw_twin=twin,
        muon_overhead=overhead,
        optimizers=(
            side_by_side(
                resolved, overrides, net, assumptions, calibration, step, overhead, twin, siblings, counterparts
            )
            if overhead is not None and siblings
            else None
        ),
        # the what-ifs are Muon's (SYRK, NS-cost balancing)
        what_if=(
            what_ifs(resolved, net, assumptions, eff, inputs, breakdown.total_s)
            if twin is not None and with_what_ifs and run.optimizer.muon_family
            else None
        ),
    )
