"""Layout search: every valid layout of a run's model at its GPU count and GPU, ranked by projection.

``make search RECIPE=<recipe> [overrides]`` composes the recipe once, then enumerates every combination of

* TP in the powers of two up to 8 and the GPUs per node that divide the attention heads (and query groups);
* CP 1, and 2 from sequences of 8192 tokens;
* PP among the powers of two up to 16 that leave at least one decoder layer per stage;
* VPP in {1, 2, 4} where PP > 1 and every virtual stage holds a layer (the pipeline layout is balanced
  for each (PP, VPP) as on the command line: :func:`optbench.compose.pipeline.balanced_layout_for`);
* EP among the powers of two that divide the routed experts and the ranks of a pipeline stage (ETP 1);
* MBS in {1, 2, 4} that divide the global batch over the data-parallel ranks;

and the composed run's own value of each (so its layout is always a point), with everything else (GBS, sequence,
precision, recompute, dispatcher, kernels) as composed. A dimension the user fixes
(``make search ... FIX=ep,mbs``) takes only the composed run's value. Each point is
validated as ``make plan`` validates it (a layout that does not split, or whose memory estimate exceeds the
GPU's HBM, or the share of it ``HBM=`` allows, is dropped and counted; the run's own layout is kept and ranked whatever
its estimate), projected at the model's calibrated efficiency, and ranked by projected
model TFLOP/s per GPU. The top points are also projected with AdamW at the same layout (the Muon-vs-AdamW gap).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from optbench.accounting.params import ParamCounts, parameter_counts
from optbench.compose.pipeline import balanced_layout_for, max_virtual_stages
from optbench.config.layout import derive_layout
from optbench.config.schema import RunConfig
from optbench.common.errors import Problem, UserError
from optbench.common.redact import clipped
from optbench.catalog.hardware import gpu_catalog
from optbench.projection.bands import top_stability
from optbench.projection.ranking import error_band_of, ties_with_best
from optbench.projection.expected_error import CARRIED_SCHEMES, expected_error
from optbench.releases.hydra_values import format_override
from optbench.plan.row_runs import COMPOSED_ROWS
from optbench.projection.project import project
from optbench.projection.section import ExpectedError, ProjectionSection
from optbench.resolve import ResolvedRun, resolve
from optbench.validate import validate

TP_MAX = 8
"""Largest TP tried (and never more than the GPUs of one node: TP traffic stays on NVLink)."""
PP_CHOICES = (1, 2, 4, 8, 16)
VPP_CHOICES = (1, 2, 4)
CP_MIN_SEQUENCE = 8192
"""CP 2 is tried from this sequence length (shorter sequences do not need it, and the model prices its ring
as hidden behind attention, so it would tie with CP 1 everywhere)."""
MBS_CHOICES = (1, 2, 4)
DIMENSIONS = ("tp", "pp", "vpp", "cp", "ep", "mbs")
"""The dimensions of the search, by the names ``FIX=`` takes (each a field of :class:`Point`)."""
AT_ITS_EP = frozenset({"ep"})
"""A layout is also ranked among the layouts of its own EP (what ``make search FIX=ep`` ranks): the all-to-all a
lower EP saves is priced from bandwidths, for the flex dispatcher of NVIDIA's presets above HybridEP's published
kernel rate (docs/projection.md section 8), and that rank leaves it out."""


@dataclass(frozen=True)
class Point:
    """One layout of the search (ETP 1; the pipeline layout follows from PP and VPP)."""

    tp: int
    """Tensor-parallel size."""
    pp: int
    """Pipeline-parallel size."""
    vpp: int
    """Virtual stages per pipeline rank (1: no interleaving)."""
    cp: int
    """Context-parallel size."""
    ep: int
    """Expert-parallel size."""
    mbs: int
    """Micro-batch size."""

    @property
    def label(self) -> str:
        return f"TP{self.tp} PP{self.pp} VPP{self.vpp} CP{self.cp} EP{self.ep} MBS{self.mbs}"

    def overrides(self) -> list[str]:
        """The same layout as ``make plan`` overrides (sequence parallelism as :func:`at` sets it: Megatron requires
        it for MoE with TP)."""
        vpp = "null" if self.vpp == 1 else str(self.vpp)
        return [
            f"parallel.tp={self.tp}",
            f"parallel.pp={self.pp}",
            f"parallel.vpp={vpp}",
            f"parallel.cp={self.cp}",
            f"parallel.ep={self.ep}",
            "parallel.etp=1",
            f"parallel.sequence_parallel={str(self.tp > 1).lower()}",
            f"train.mbs={self.mbs}",
        ]


def _powers(limit: int) -> list[int]:
    out, value = [], 1
    while value <= limit:
        out.append(value)
        value *= 2
    return out


def fixed_dimensions(text: str) -> frozenset[str]:
    """The dimensions named in ``FIX=`` (comma-separated, any case); an unknown name is a one-line error."""
    typed = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in typed if name.lower() not in DIMENSIONS]
    if unknown:  # shown as typed (its secrets hidden), never lower-cased: a lower-cased secret would pass redaction
        raise UserError(
            Problem(
                "FIX",
                f"no search dimension '{clipped(unknown[0], 40)}'; fix any of "
                f"{', '.join(DIMENSIONS)}, comma-separated (e.g. FIX=ep,mbs): each keeps the composed run's value",
            )
        )
    return frozenset(name.lower() for name in typed)


def hbm_share(text: str) -> float | None:
    """``HBM=``: the largest share of the GPU's memory a kept layout's estimate may take (None: all of it). The
    estimate is good to about +-20 %, so HBM=0.9 or 0.8 keeps only layouts with room for its error."""
    text = text.strip()
    if not text:
        return None
    try:
        share = float(text)
    except ValueError:
        share = float("nan")
    if not 0 < share <= 1:  # also refuses nan and inf
        raise UserError(
            Problem(
                "HBM",
                f"'{clipped(text, 40)}' is not a share of the GPU's memory; give a fraction above 0 and "
                "at most 1, e.g. HBM=0.9 keeps layouts whose memory estimate is at most 90 % of HBM",
            )
        )
    return share


def over_share_reason(share: float) -> str:
    """Why a layout was dropped under ``HBM=share`` (the key of its count in a search's ``dropped``)."""
    return f"over {100 * share:g} % of HBM by the memory estimate (HBM={share:g})"


def points(run: RunConfig, fixed: frozenset[str] = frozenset()) -> Iterator[Point]:
    """Every combination of the search space that divides evenly (see the module docstring); the composed
    run's own values are always among the choices, so its layout is a point of the search. A dimension in
    ``fixed`` takes only the run's own value."""
    m, p, world, gbs = run.model, run.parallel, run.parallel.num_gpus, run.train.gbs
    spec = gpu_catalog().get(run.cluster.gpu)
    tp_max = min(TP_MAX, spec.gpus_per_node if spec is not None else TP_MAX)
    heads, groups = m.num_attention_heads, (m.num_query_groups or m.num_attention_heads)
    experts = m.num_moe_experts or 0

    def choices(name: str, own: int, candidates) -> list[int]:
        return [own] if name in fixed else sorted({*candidates, own})

    own_vpp = p.vpp or 1
    cps = choices("cp", p.cp, (1, *((2,) if run.train.seq_length >= CP_MIN_SEQUENCE else ())))
    for tp in choices("tp", p.tp, _powers(tp_max)):
        if heads % tp or (not m.multi_latent_attention and groups % tp):
            continue
        for cp in cps:
            if run.train.seq_length % (2 * cp):
                continue
            for pp in choices("pp", p.pp, PP_CHOICES):
                if world % (tp * cp * pp) or pp > m.num_layers:
                    continue
                dp = world // (tp * cp * pp)
                for vpp in choices("vpp", own_vpp, VPP_CHOICES):
                    if (pp == 1 and vpp > 1) or pp * vpp > max_virtual_stages(run) - 2:
                        continue
                    for ep in choices("ep", p.ep, _powers(experts) if experts else [1]):
                        if experts and (experts % ep or (tp * cp * dp) % ep):
                            continue
                        for mbs in choices("mbs", run.train.mbs, MBS_CHOICES):
                            if gbs % (mbs * dp) == 0:
                                yield Point(tp, pp, vpp, cp, ep, mbs)


PARAM_AND_GRAD_BYTES = 4
"""bf16 weights and gradients: bytes per parameter a GPU holds that the memory estimate counts at least."""


def parameter_floor_gb(run: RunConfig, point: Point, counts: ParamCounts) -> float:
    """A floor under the memory estimate of the point's busiest GPU: the average pipeline rank's weights and
    gradients (embedding and output layer left out), so a point above HBM is dropped without placing it."""
    dense = counts.total - counts.experts - counts.embedding
    per_gpu = dense / (point.tp * point.pp) + counts.experts / (point.ep * point.pp)
    return PARAM_AND_GRAD_BYTES * per_gpu / 1e9


def plan_overrides(point: Point, run: RunConfig) -> list[str]:
    """The ``make plan`` overrides of a searched point: its layout, and the pipeline layout :func:`at` balanced for it
    (``parallel.pp`` typed alone composes another, Megatron's even split)."""
    layout = run.parallel.pipeline_layout
    return [*point.overrides(), *([format_override("parallel.pipeline_layout", layout)] if layout else [])]


def at(run: RunConfig, point: Point) -> RunConfig:
    """``run`` with the point's layout: its own pipeline layout at its own stage count (as compose keeps it),
    else one balanced for the point's (PP, VPP)."""
    p = run.parallel
    same_stages = (point.pp, point.vpp) == (p.pp, p.vpp or 1)
    parallel = dataclasses.replace(
        p,
        tp=point.tp,
        pp=point.pp,
        vpp=None if point.vpp == 1 else point.vpp,
        cp=point.cp,
        ep=point.ep,
        etp=1,
        pipeline_layout=p.pipeline_layout if same_stages else None,
        sequence_parallel=point.tp > 1,  # Megatron requires it for MoE with TP; it costs nothing here
    )
    moved = dataclasses.replace(run, parallel=parallel, train=dataclasses.replace(run.train, mbs=point.mbs))
    if not same_stages and point.pp * point.vpp > 1:
        moved = dataclasses.replace(
            moved, parallel=dataclasses.replace(parallel, pipeline_layout=balanced_layout_for(moved))
        )
    return moved


class Ranked(NamedTuple):
    """One valid point of a search, in rank order."""

    rank: int
    """1 = best; points the model prices alike share a rank."""
    point: Point
    """The layout."""
    tflops_per_gpu: float
    """Its projected model TFLOP/s per GPU."""
    memory_share: float | None
    """Its memory estimate over the GPU's HBM (None when the GPU's HBM is not known)."""


@dataclass(frozen=True)
class Scored:
    """A valid point with its resolved run and projection."""

    point: Point
    """The layout."""
    resolved: ResolvedRun
    """The run at that layout, validated and resolved."""
    projection: ProjectionSection
    """Its projection section (no twin, no what-ifs)."""


def search(
    run: RunConfig,
    adamw: RunConfig | None = None,
    top: int = 10,
    fixed: frozenset[str] = frozenset(),
    max_hbm: float | None = None,
) -> dict[str, Any]:
    """Every point of ``run``'s space (``fixed``: dimensions held at the run's value) validated and projected; the
    best ``top`` with their AdamW gap. ``max_hbm``: the largest share of HBM a point's memory estimate may take
    (:func:`hbm_share`; None: all of it)."""
    start = time.perf_counter()
    dropped: Counter[str] = Counter()
    first_problems: dict[str, Problem] = {}  # per reason of an invalid point, the first point's problem
    scored: list[Scored] = []
    candidates = list(points(run, fixed))
    counts = parameter_counts(run.model)
    spec = gpu_catalog().get(run.cluster.gpu)
    if max_hbm is not None and spec is None:
        raise UserError(
            Problem("HBM", f"GPU '{run.cluster.gpu}' has no memory size in the GPU registry; leave HBM out")
        )
    own = point_of_run(run)
    forced = dataclasses.replace(run, force=True)  # memory is checked here, so that the run's own layout stays
    previous: ResolvedRun | None = None  # the points come MBS innermost: neighbours place their parameters alike
    own_problem: Problem | None = None  # why the run's own layout is not a valid point, if it is not
    if own not in candidates:  # a layout that does not divide: validation says how, as make plan would
        try:
            validate(at(forced, own))
        except UserError as err:
            own_problem = err.problems[0]
    for point in candidates:
        floor = parameter_floor_gb(run, point, counts)
        if spec is not None and point != own and floor > spec.hbm_gb:
            dropped["does not fit in memory (weights and gradients alone)"] += 1
            continue
        try:
            resolved = previous = validate(at(forced, point), like=previous)
        except UserError as err:
            own_problem = err.problems[0] if point == own else own_problem
            reason = f"invalid: {err.problems[0].field}"
            dropped[reason] += 1
            first_problems.setdefault(reason, err.problems[0])
            continue
        if point != own and not resolved.memory.fits:
            dropped["does not fit in memory"] += 1
            continue
        if point != own and max_hbm is not None and resolved.memory.total_gb > max_hbm * spec.hbm_gb:
            dropped[over_share_reason(max_hbm)] += 1
            continue
        section = project(resolved, with_what_ifs=False, row_runs=COMPOSED_ROWS)
        if not isinstance(section, ProjectionSection):
            dropped[f"not projected: {section.reason[:60]}"] += 1
            continue
        scored.append(Scored(point, resolved, section))
    scored.sort(key=lambda s: (-s.projection.step.tflops_per_gpu, s.projection.step.step_time_s))
    ranks = _tied_ranks([s.projection.step.tflops_per_gpu for s in scored])
    rows = []
    for rank, s in zip(ranks[:top], scored[:top]):
        row = {
            "rank": rank,
            "layout": s.point.label,
            "overrides": plan_overrides(s.point, s.resolved.run),
            "step_time_s": s.projection.step.step_time_s,
            "tflops_per_gpu": s.projection.step.tflops_per_gpu,
            "memory_gb": round(s.resolved.memory.total_gb, 1),
        }
        if adamw is not None:
            try:
                twin = project(
                    resolve(at(adamw, s.point), like=s.resolved), with_what_ifs=False, row_runs=COMPOSED_ROWS
                )
                if isinstance(twin, ProjectionSection):
                    row["adamw_tflops_per_gpu"] = twin.step.tflops_per_gpu
                    row["muon_vs_adamw_percent"] = round(
                        100 * (row["tflops_per_gpu"] / twin.step.tflops_per_gpu - 1), 2
                    )
            except UserError:
                pass
        rows.append(row)
    matrix = run.optimizer.name if run.optimizer.matrix_optimizer else None
    expected = search_expected_error(scored[0].projection.expected_error, matrix) if scored else None
    best = scored[0].projection.step.tflops_per_gpu if scored else 0.0
    for row in rows:
        row["hbm_percent"] = round(100 * row["memory_gb"] / spec.hbm_gb, 1) if spec is not None else None
        row["within_expected_error_of_best"] = within_expected_error(row["tflops_per_gpu"], best, expected)
    own_values = dataclasses.asdict(own)
    return {
        "fixed": {name: own_values[name] for name in DIMENSIONS if name in fixed},
        "max_hbm_share": max_hbm,
        "candidates": len(candidates),
        "space": frozenset(candidates),
        "valid": len(scored),
        "dropped": dict(dropped),
        "first_problems": first_problems,
        "own_problem": own_problem,
        "top": rows,
        # Every point is projected at the same calibrated efficiency: the absolute figures share its expected error.
        "efficiency": scored[0].projection.efficiency if scored else None,
        "expected_error": expected,
        "within_expected_error_of_best": sum(
            within_expected_error(s.projection.step.tflops_per_gpu, best, expected) for s in scored
        ),
        "top_stability": top_stability([s.projection.step.tflops_per_gpu for s in scored], error_band_of(expected)),
        "ranked": [
            Ranked(
                rank,
                s.point,
                s.projection.step.tflops_per_gpu,
                s.resolved.memory.total_gb / spec.hbm_gb if spec is not None else None,
            )
            for rank, s in zip(ranks, scored)
        ],
        "seconds": round(time.perf_counter() - start, 1),
    }


def within_expected_error(tflops: float, best: float, expected: ExpectedError | None) -> bool:
    """Whether a layout projecting ``tflops`` ties with the best (``~``): every layout of a search shares one expected
    error, so their 80 % bands are one band (:func:`~optbench.projection.ranking.ties_with_best`)."""
    return ties_with_best(tflops, best, expected)


def search_expected_error(of_best: ExpectedError | None, matrix_optimizer: str | None = None) -> ExpectedError | None:
    """The expected error of a search's projections: the layouts it ranks are, but for the recipe's own, layouts
    nobody published, so the figure of leaving one layout out (the carried table's figure where the efficiency
    comes from it, or the precision note where it crosses precision)."""
    if of_best is None or of_best.measured is False or of_best.scheme in CARRIED_SCHEMES:
        return of_best
    return expected_error("layout", matrix_optimizer=matrix_optimizer) or of_best


def nothing_valid(run: RunConfig, result: dict[str, Any]) -> Problem:
    """Why a search found no valid layout, as one problem: no layout splits the batch over the GPUs, none fits
    in memory, or what the most common invalid point says (a precision the GPU lacks holds at every layout)."""
    n = run.parallel.num_gpus
    if not result["candidates"]:
        return Problem(
            "parallel.num_gpus",
            f"no layout of the search splits train.gbs={run.train.gbs} over {n} GPUs: the "
            "data-parallel size, num_gpus / (TP x CP x PP) with each a power of two, must divide the global "
            "batch (docs/projection.md section 8); use another GPU count or train.gbs",
        )
    dropped = result["dropped"]
    memory = sum(count for reason, count in dropped.items() if "memory" in reason)
    invalid = {reason: count for reason, count in dropped.items() if reason in result["first_problems"]}
    share = result.get("max_hbm_share")
    # A share the user set that dropped layouts is the cause to name, however many others were invalid.
    over_share = share is not None and over_share_reason(share) in dropped
    if memory >= sum(invalid.values()) or over_share:
        spec = gpu_catalog().get(run.cluster.gpu)
        hbm = f" ({spec.hbm_gb:g} GB each)" if spec is not None else ""
        count = result["candidates"]
        limit = "that" if over_share else "it"
        which = (
            f"all {count} layouts that split exceed {limit}"
            if memory == count
            else f"{memory} of the {count} layouts exceed {limit}, the other {count - memory} are invalid"
        )
        if over_share:
            return Problem(
                "HBM",
                f"no layout of {run.model.name} on {n} {run.cluster.gpu}{hbm} stays within HBM={share:g} of "
                f"its memory: {which}; allow a larger share or use more GPUs",
            )
        return Problem(
            "parallel.num_gpus",
            f"no layout of {run.model.name} fits in memory on {n} {run.cluster.gpu}{hbm}: {which}; use more GPUs",
        )
    return result["first_problems"][max(invalid, key=lambda reason: invalid[reason])]


def _tied_ranks(tflops: list[float]) -> list[int]:
    """1 + the number of points strictly better (to 0.01 TFLOP/s/GPU): points the model prices alike share a rank."""
    ranks, rank = [], 0
    for index, value in enumerate(tflops):
        if index == 0 or round(value, 2) < round(tflops[index - 1], 2):
            rank = index + 1
        ranks.append(rank)
    return ranks


def point_of_run(run: RunConfig) -> Point:
    """The search point of a run's layout."""
    lay = derive_layout(run)
    return Point(lay.tp, lay.pp, lay.vpp, lay.cp, lay.ep, run.train.mbs)
