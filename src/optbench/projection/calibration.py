"""One GEMM efficiency per model, calibrated on a published AdamW figure, never on a Muon one.

The step-time model has one free number: the fraction ``eff`` of the GEMM peak (FP8 under FP8
recipes) at which the model's forward and backward GEMMs run, which absorbs everything the model
does not price (attention and element-wise kernels, router, quantization, dispatcher overheads).
It is solved so that the projected AdamW step equals a published AdamW step
(:func:`optbench.projection.step_model.solve_efficiency`), and the same value is then used for every
other projection of that model: Muon, other layouts, other GPUs ("transferred").

Anchor choice, among the AdamW rows of ``results/published/published.csv`` for the run's model
(Muon rows are never read here) that a :class:`Holdout` does not hold out and that their own setup's other
releases do not contradict (``results/published/inconsistent.csv``, :mod:`optbench.projection.consistency`),
best first:

1. measured on the run's GPU, then in the run's precision;
2. measured with the run's container release, or with a release whose NVIDIA preset of the anchor's setup
   (model, GPU, precision: the layout, settings, kernels and job its launcher executes) is the very one of the
   run's release: at an unchanged configuration releases differ by drift only (median 0.6 %, at most 1.8 %:
   the release-drift table of ``make projection``), while a changed preset moves throughput a lot (Qwen3
   30B-A3B GB200 MXFP8, 26.04.01 -> 26.06: 599 -> 936 TFLOP/s/GPU);
3. else the nearest release (earlier before later on a tie): the nearest release changed least;
4. from a source that also publishes the Muon figure of the same setup (a paired comparison:
   NVIDIA's blog Table 1, Kimi K2 1051 and Qwen3 30B-A3B 713 on GB300);
5. file order.

An anchor is composed exactly as the table projects its row (:mod:`optbench.plan.row_runs`: the row's release,
NVIDIA's executed preset of it, the row's stated values), by the :class:`~optbench.projection.row_config.RowRuns`
the caller hands down (the projection composes nothing): the efficiency solved on it reproduces the row's figure at
that configuration. A model without such a row is "not calibrated".
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from optbench.accounting.plan_fields import PRECISION_ALIASES
from optbench.common.checkout import repo_root
from optbench.config.schema import RunConfig
from optbench.common.errors import UserError
from optbench.projection.anchors import committed_anchors, committed_gemm_rates, committed_unsolved
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS, Assumptions
from optbench.projection.carried import GemmShape, committed_table, fitted_without, gemm_shape, setup_of
from optbench.projection.expert_rates import ExpertRates, expert_rates
from optbench.projection.precision_ratio import (
    RUNGS,
    PrecisionRatio,
    chained,
    gemm_precision,
    live_rate,
    precision_ratio,
)
from optbench.projection.row_solve import solve_at
from optbench.projection.section import EfficiencyRecord
from optbench.projection.work import gemm_peak
from optbench.projection.release_drift import same_configuration
from optbench.projection.row_config import RowRuns, run_layout_key
from optbench.catalog.published import (
    PublishedRow,
    default_published_dir,
    load_inconsistent,
    load_published,
    release_order,
    row_id,
)
from optbench.resolve import ResolvedRun


@dataclass(frozen=True)
class Holdout:
    """Published rows a calibration may not use (out-of-sample validation: :mod:`optbench.projection.validation`)."""

    rows: frozenset[str] = frozenset()
    """Rows held out, by :func:`row_id`."""
    releases: frozenset[str] = frozenset()
    """Releases whose every row is held out."""
    gpus: frozenset[str] = frozenset()
    """GPUs whose every row is held out (the efficiency then comes from the carried table, as for a GPU nobody
    published)."""
    setups: frozenset[tuple] = frozenset()
    """Setups (model, GPU, GPU count, precision: :func:`optbench.projection.carried.setup_of`) held out whole."""
    models: frozenset[str] = frozenset()
    """Models whose every row is held out."""

    def keeps(self, row: PublishedRow) -> bool:
        return (
            row_id(row) not in self.rows
            and row.release not in self.releases
            and row.gpu not in self.gpus
            and setup_of(row) not in self.setups
            and row.model not in self.models
        )


NO_HOLDOUT = Holdout()


@dataclass(frozen=True)
class Calibration:
    """The calibrated GEMM efficiency of one model and where it comes from."""

    efficiency: float
    """Fraction of the anchor's GEMM peak the model's GEMMs run at."""
    peak_key: str
    """The peak it is a fraction of, e.g. gb300_fp8."""
    anchor: str
    """Published row it was solved on: '<source> <release> <model> <gpu> x<num_gpus> adamw <figure>'."""
    anchor_step_time_s: float
    """Step time the published figure implies on the anchor configuration."""
    anchor_recipe: str
    """Recipe that reproduces the anchor."""
    anchor_overrides: tuple[str, ...]
    """Overrides applied to it."""
    anchor_gpu: str
    """GPU of the anchor."""
    anchor_row: str = ""
    """The anchor's :func:`row_id`."""
    anchor_run: ResolvedRun | None = field(default=None, compare=False, repr=False)
    """The anchor configuration, resolved when it was solved here (a Muon run's AdamW twin is often this very
    configuration); None when it was read from results/projection/anchors.json (:mod:`optbench.projection.anchors`)."""
    anchor_num_gpus: int = 0
    """The anchor configuration's GPU count."""
    anchor_layout: tuple = ()
    """Its layout (:func:`optbench.projection.row_config.run_layout_key`)."""
    anchor_container: str = ""
    """Its container (``nemo:<release>``)."""
    crossed_from: str = ""
    """The anchor's GEMM peak when the efficiency was carried to another precision's (:mod:`precision_ratio`)."""
    precision_ratio: PrecisionRatio | None = None
    """The rate ratio (BF16/FP8, FP8/FP4 or both) it was carried at (None: carried as the same fraction of peak,
    unmeasured)."""
    carried: tuple[tuple[str, str], ...] = ()
    """From the carried table (:mod:`optbench.projection.carried`): how its GPU, model and release terms were found;
    empty when solved on an anchor row of the run's own model and GPU."""
    mxfp8_expert_rows: float | None = None
    """``M0`` of MXFP8 grouped GEMMs the efficiency belongs to (the table's): the projection evaluates at it."""
    same_preset: bool = False
    """The anchor row's release ran NVIDIA's very preset of its setup that the run's release runs (drift only)."""

    def across_precision(self, run_peak: str) -> bool:
        """Whether the efficiency serves GEMMs at another precision than its anchor's (``run_peak``: e.g.
        gb300_bf16)."""
        return bool(self.crossed_from) or gemm_precision(run_peak) != gemm_precision(self.peak_key)

    def across_gpu(self, run_gpu: str) -> bool:
        """Whether the efficiency was solved on another GPU than ``run_gpu`` (transferred)."""
        return run_gpu != self.anchor_gpu

    @property
    def is_carried(self) -> bool:
        """Whether the efficiency comes from the carried table rather than an anchor row of the run's model and GPU."""
        return bool(self.carried)

    def as_record(self, run_gpu: str, run_peak: str | None = None) -> EfficiencyRecord:
        """plan.json's ``efficiency`` for a run on ``run_gpu`` at GEMM peak ``run_peak``."""
        if self.crossed_from:  # the anchor's peak names its GPU as well
            ratio = self.precision_ratio
            moves = [f"from {self.crossed_from} at {ratio.label} rate ratio {ratio.value:.3f}"]
        else:
            moves = [f"from {self.anchor_gpu}"] if self.across_gpu(run_gpu) else []
            if run_peak is not None and self.across_precision(run_peak):
                moves.append(f"to {run_peak}")
        if self.carried:
            status = "carried: " + ", ".join(f"{kind} {how}" for kind, how in self.carried)
            moves = [m for m in moves if not m.startswith("from ") or self.crossed_from]
            status += f"; {' '.join(moves)}" if moves else ""
        else:
            status = f"transferred {' '.join(moves)}" if moves else "calibrated"
        return EfficiencyRecord(
            value=round(self.efficiency, 6),
            of_peak=self.peak_key,
            precision_ratio=self.precision_ratio.as_record() if self.precision_ratio else None,
            status=status,
            calibrated_on=self.anchor,
            anchor_row=self.anchor_row,
            anchor_step_time_s=round(self.anchor_step_time_s, 4),
            anchor_config=" ".join([self.anchor_recipe, *self.anchor_overrides]),
            fitted_to_muon=False,
        )


def _release_of(run: RunConfig) -> str | None:
    return run.cluster.container.split(":", 1)[1]


def anchor_config(row: PublishedRow, row_runs: RowRuns) -> tuple[str, tuple[str, ...], ResolvedRun] | None:
    """(recipe, overrides, resolved run) that reproduces an AdamW row, or None: the row's own configuration,
    of a release whose NVIDIA preset we executed (a 25.11 row's layout is only partly known)."""
    config, resolved = row_runs.config(row), row_runs.run(row)
    if isinstance(config, str) or isinstance(resolved, str) or not config.in_domain:
        return None
    return config.recipe, config.overrides, resolved


def _paired(row: PublishedRow, rows: list[PublishedRow]) -> bool:
    return any(
        other.optimizer == "muon"
        and (other.source, other.release, other.model, other.gpu, other.num_gpus)
        == (row.source, row.release, row.model, row.gpu, row.num_gpus)
        for other in rows
    )


def _release_distance(row: PublishedRow, release: str | None, order: list[str]) -> tuple[int, bool]:
    if release is None or release not in order:
        return (0, False)
    distance = order.index(row.release) - order.index(release)
    return (abs(distance), distance > 0)


def ranked_anchors(
    model: str,
    gpu: str,
    release: str | None,
    rows: list[PublishedRow],
    holdout: Holdout = NO_HOLDOUT,
    precision: str | None = None,
    inconsistent: Collection[str] = (),
) -> list[PublishedRow]:
    """The model's AdamW rows that ``holdout`` keeps, best anchor first (see the module docstring); never a row
    its own setup's other releases contradict (``inconsistent``: row ids, :mod:`optbench.projection.consistency`)."""
    order = sorted({row.release for row in rows} | ({release} if release else set()), key=release_order)
    adamw = [
        (i, row)
        for i, row in enumerate(rows)
        if row.model == model and row.optimizer == "adamw" and holdout.keeps(row) and row_id(row) not in inconsistent
    ]
    adamw.sort(
        key=lambda pair: (
            pair[1].gpu != gpu,
            precision is not None and PRECISION_ALIASES.get(pair[1].precision, pair[1].precision) != precision,
            release is None or not same_configuration(pair[1], release),
            _release_distance(pair[1], release, order),
            not _paired(pair[1], rows),
            pair[0],
        )
    )
    return [row for _, row in adamw]


def _label(row: PublishedRow) -> str:
    figure = (
        f"{row.tokens_per_s_per_gpu:g} tokens/s/GPU"
        if row.tokens_per_s_per_gpu
        else f"{row.model_tflops_per_gpu:g} TFLOP/s/GPU"
    )
    return f"{row.label} {row.model} {row.gpu} x{row.num_gpus} adamw {figure}"


def solve_on(row: PublishedRow, assumptions: Assumptions, row_runs: RowRuns) -> Calibration | str:
    """The efficiency solved on ``row`` at its own configuration, or why the row cannot anchor anything: it has
    no configuration we compose, no release preset we executed, no figure, or the model cannot reach it."""
    found = anchor_config(row, row_runs)
    if found is None:
        return "no configuration of a release whose NVIDIA preset we executed"
    recipe, overrides, anchor_run = found
    solved = solve_at(anchor_run, row, assumptions)
    if isinstance(solved, str):
        return solved
    efficiency, step = solved
    return Calibration(
        efficiency=efficiency,
        peak_key=gemm_peak(anchor_run.run)[1],
        anchor=_label(row),
        anchor_step_time_s=step,
        anchor_recipe=recipe,
        anchor_overrides=overrides,
        anchor_gpu=row.gpu,
        anchor_row=row_id(row),
        anchor_run=anchor_run,
        anchor_num_gpus=anchor_run.run.parallel.num_gpus,
        anchor_layout=run_layout_key(anchor_run),
        anchor_container=anchor_run.run.cluster.container,
    )


def _plans_from_committed(published: str, holdout: Holdout) -> bool:
    """Whether a calibration may read what ``make projection`` committed (the carried table, the solved anchors): a
    plan's, on the repository's published rows with nothing held out; a validation scheme refits without its rows."""
    return holdout == NO_HOLDOUT and Path(published) == default_published_dir(repo_root() / "results")


def _reads_committed_solutions(published: str, holdout: Holdout, assumptions: Assumptions) -> bool:
    """Whether a calibration may read the rows ``make projection`` solved (anchors.json: the anchors, the BF16/FP8
    pairs' rates): a plan's, as :func:`_plans_from_committed`, at the assumptions they were solved at."""
    return _plans_from_committed(published, holdout) and assumptions == DEFAULT_ASSUMPTIONS


@lru_cache(maxsize=512)
def _calibrate(
    model: str,
    gpu: str,
    precision: str,
    release: str | None,
    published: str,
    assumptions: Assumptions,
    holdout: Holdout,
    shape: GemmShape | None,
    expert: ExpertRates | None,
    row_runs: RowRuns,
) -> Calibration | None:
    """Solved on the best anchor row of the model on its own GPU; without one, from the carried table."""
    rows = load_published(published)
    committed = _reads_committed_solutions(published, holdout, assumptions)
    stored, unsolved = (committed_anchors(), committed_unsolved()) if committed else ({}, {})
    for row in ranked_anchors(model, gpu, release, rows, holdout, precision, load_inconsistent(published)):
        if row.gpu != gpu:
            break  # the model has no usable row on this GPU: the table carries what every other setup measured
        fields = stored.get(row_id(row))
        solved = Calibration(**fields) if fields else unsolved.get(row_id(row)) or _solved(row, assumptions, row_runs)
        if not isinstance(solved, str):
            return replace(solved, same_preset=release is not None and same_configuration(row, release))
    return _carried(model, gpu, release, published, holdout, shape, expert, row_runs, assumptions)


def _carried(
    model: str,
    gpu: str,
    release: str | None,
    published: str,
    holdout: Holdout,
    shape: GemmShape | None,
    expert: ExpertRates | None,
    row_runs: RowRuns,
    assumptions: Assumptions = DEFAULT_ASSUMPTIONS,
) -> Calibration | None:
    """The efficiency of the carried table (:mod:`optbench.projection.carried`): the committed one for a plan, one
    refitted without the held-out rows for a validation scheme, or at step-model switches other than the default (a
    term's selection, :mod:`optbench.projection.term_selection`)."""
    committed = _plans_from_committed(published, holdout) and assumptions.switches() == DEFAULT_ASSUMPTIONS.switches()
    table = (committed_table() if committed else None) or fitted_without(published, holdout, row_runs, assumptions)
    if table is None or release is None:
        return None
    efficiency, how = table.efficiency(model, gpu, release, shape, expert)
    return Calibration(
        efficiency=efficiency,
        peak_key=f"{gpu}_fp8",
        anchor=f"the carried table ({len(table.rows)} AdamW rows, {table.parameter_count} parameters; "
        "results/projection/calibration.json)",
        anchor_step_time_s=0.0,
        anchor_recipe="",
        anchor_overrides=(),
        anchor_gpu=gpu,
        carried=tuple(how.items()),
        mxfp8_expert_rows=table.mxfp8_expert_rows,
    )


@lru_cache(maxsize=256)
def _solved(row: PublishedRow, assumptions: Assumptions, row_runs: RowRuns) -> Calibration | str:
    """:func:`solve_on` a row (a row is solved once however many calibrations and folders rank it)."""
    return solve_on(row, assumptions, row_runs)


def calibrate(
    run: RunConfig,
    assumptions: Assumptions,
    published_dir: str | Path | None = None,
    holdout: Holdout = NO_HOLDOUT,
    *,
    row_runs: RowRuns,
) -> Calibration | None:
    """The calibrated GEMM efficiency for ``run``'s model (cached), or None when no AdamW anchor fits; ``row_runs``: the
    published rows' runs to solve on where ``make projection`` committed no solution."""
    directory = Path(published_dir) if published_dir else default_published_dir(repo_root() / "results")
    run_peak = gemm_peak(run)[1]
    try:
        calibration = _calibrate(
            run.model.name,
            run.cluster.gpu,
            run.precision.name,
            _release_of(run),
            str(directory),
            assumptions,
            holdout,
            gemm_shape(run.model),
            expert_rates(run.model, run.train.seq_length, gemm_precision(run_peak)),
            row_runs,
        )
    except UserError:
        return None
    if calibration is None or not calibration.across_precision(run_peak):
        return calibration
    ratio = _crossing(
        str(directory), assumptions, holdout, row_runs, gemm_precision(calibration.peak_key), gemm_precision(run_peak)
    )
    if ratio is None:
        return calibration
    return replace(
        calibration,
        efficiency=ratio.efficiency_at(calibration.efficiency, run_peak),
        peak_key=run_peak,
        crossed_from=calibration.peak_key,
        precision_ratio=ratio,
    )


def _crossing(
    published: str, assumptions: Assumptions, holdout: Holdout, row_runs: RowRuns, anchor: str, run: str
) -> PrecisionRatio | None:
    """The ratio between the anchor's and the run's GEMM precisions: one rung's, or two chained (BF16 <-> FP4);
    None where a rung has no pair."""
    low, high = sorted((anchor, run), key=RUNGS.index)
    steps = RUNGS[RUNGS.index(low) : RUNGS.index(high) + 1]
    ratios = [_precision_ratio(published, assumptions, holdout, row_runs, a, b) for a, b in zip(steps, steps[1:])]
    if not ratios or any(r is None for r in ratios):
        return None
    return ratios[0] if len(ratios) == 1 else chained(ratios[0], ratios[1])


@lru_cache(maxsize=64)
def _precision_ratio(
    published: str,
    assumptions: Assumptions,
    holdout: Holdout,
    row_runs: RowRuns,
    lower: str = "bf16",
    higher: str = "fp8",
) -> PrecisionRatio | None:
    """The ``lower``/``higher`` ratio over the pairs ``holdout`` keeps: a plan's from the rates ``make projection``
    committed, a validation scheme's (and any other assumptions' or folder's) solved live."""
    stored = committed_gemm_rates() if _reads_committed_solutions(published, holdout, assumptions) else {}

    def rate(row: PublishedRow) -> float | None:
        name = row_id(row)
        return stored[name] if name in stored else live_rate(row, assumptions, row_runs)

    return precision_ratio(load_published(published), row_id, holdout.keeps, rate, lower, higher)
