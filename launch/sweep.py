"""``make sweep``: expand Hydra sweep overrides, validate every point, plan and launch the valid ones.

``make sweep RECIPE=kimi_k2_muon parallel.ep=32,64 parallel.pp=4,8`` is the cartesian product of
the swept values, as Hydra's basic sweeper builds it (``a=1,2``, ``choice(...)``, ``range(...)``).
Each point is composed and validated on its own; invalid points are listed with their one-line
reason; the valid ones are planned and, on a Slurm cluster, rendered (``dryrun=true``) or submitted
as ONE NeMo-Run experiment. On the local executor the valid points run one after another.

Files: ``results/plans/<recipe>/sweep/`` holds ``sweep.json`` and, for a dry run, one folder per
point (plan.json, config.yaml, sbatch.sh). Submitted points get their own run folder
``results/runs/<run_id>/`` whose run id is ``<sweep id>-<point>``.

:func:`plan_sweep` returns the planned points (each with its plan dict) before anything is
rendered, so that a ranking (e.g. by projected throughput) can be inserted between planning and
launching.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from launch.dispatch import (
    JOB_FILES,
    JOB_WORK,
    check_launch,
    launch_local_engine,
    print_notes,
    print_preflight,
    shown,
    slurm_launch_section,
)
from launch.jobs import JobParts, JobSpec
from optbench.compose.recipe import check_typed_overrides, compose_run
from optbench.config.overrides import split_override, typed_keys
from optbench.config.schema import RunConfig
from optbench.common.errors import Problem, UserError
from optbench.common.io import atomic_write_json
from optbench.plan import build_plan, claim_results
from optbench.plan.types import Plan
from optbench.projection.ranking import print_ranking
from optbench.common.redact import SecretProblem, clipped, is_secret_name, recorded_overrides
from optbench.common.replace import Folder, replacing
from optbench.resolve import ResolvedRun
from optbench.runs import new_run_id, run_dir, save_resolved_config
from optbench.validate import validate


@dataclass
class SweepPoint:
    """One combination of swept values."""

    name: str
    """Readable, path-safe name from the swept values, e.g. ep32-pp4."""
    swept: list[str]
    """The swept overrides of this point, e.g. ['parallel.ep=32', 'parallel.pp=4']."""
    overrides: list[str]
    """Every override of the point: the fixed ones, then the swept ones."""
    resolved: Optional[ResolvedRun] = None
    """The composed, validated run, resolved once (None when invalid)."""
    plan: Optional[Plan] = None
    """Its plan (None when invalid)."""
    parts: Optional[JobParts] = None
    """Its Slurm job's parts, derived once by check_launch (None off Slurm)."""
    problems: list[str] = field(default_factory=list)
    """One line per problem when the point is invalid."""
    job_script: Optional[str] = None
    job_id: Optional[str] = None

    @property
    def run(self) -> Optional[RunConfig]:
        return self.resolved.run if self.resolved else None

    @property
    def valid(self) -> bool:
        return self.plan is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "swept": recorded_overrides(self.swept),
            "overrides": recorded_overrides(self.overrides),
            "valid": self.valid,
            "problems": self.problems,
            "run_id": self.run.run_id if self.run else None,
            "layout": self.plan.layout.as_dict() if self.plan else None,
            "job_script": self.job_script,
            "job_id": self.job_id,
        }


MAX_POINTS = 64
"""Most points one sweep may have: each is composed, validated and planned (0.1-0.3 s each for the
published layouts, so a full sweep plans in seconds)."""


def expand_overrides(overrides: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """(fixed overrides, one list of swept overrides per point), with Hydra's override grammar.

    Refuses more than :data:`MAX_POINTS` points before listing them (a ``range(0, 10**9)`` is never expanded).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    check_typed_overrides(overrides, sweeping=True)
    parser = OverridesParser.create()
    fixed: list[str] = []
    axes: list[list[str]] = []
    points = 1
    for text in overrides:
        [override] = parser.parse_overrides([text])
        if not override.is_sweep_override():
            fixed.append(text)
            continue
        key = override.get_key_element()
        if is_secret_name(key.lstrip("+~")):
            raise UserError(
                Problem(
                    key.lstrip("+~"),
                    "is a secret and cannot be swept: its values would name the sweep's "
                    "points, folders and job files; set one value and sweep other keys",
                )
            )
        try:
            values = list(itertools.islice(override.sweep_string_iterator(), MAX_POINTS + 1))
        except HydraException as err:
            raise UserError(Problem(key, f"cannot expand '{clipped(text, 60)}': {str(err).splitlines()[0]}")) from err
        points *= len(values)
        if points > MAX_POINTS:
            raise UserError(
                Problem(
                    key,
                    f"the sweep has more than {MAX_POINTS} points; sweep fewer values or split it into several sweeps",
                )
            )
        axes.append([f"{key}={value}" for value in values])
    if not axes:
        raise UserError(Problem("overrides", "nothing to sweep; give comma-separated values, e.g. parallel.ep=32,64"))
    return fixed, [list(point) for point in itertools.product(*axes)]


def point_name(swept: Sequence[str]) -> str:
    """ep32-pp4 from parallel.ep=32 parallel.pp=4 (letters, digits, '.', '_', '-' only)."""
    parts = []
    for text in swept:
        key, value = split_override(text)
        short = key.split(".")[-1]
        joined = f"{short}{value}" if re.fullmatch(r"[0-9.]+", value) else f"{short}-{value}"
        parts.append(re.sub(r"[^A-Za-z0-9._-]+", "_", joined))
    return "-".join(parts)


def plan_sweep(recipe: str, overrides: Sequence[str]) -> list[SweepPoint]:
    """Compose, validate and plan every point; invalid points keep their problems instead of a plan."""
    fixed, combos = expand_overrides(overrides)
    points: list[SweepPoint] = []
    used: set[str] = set()
    sweep_id: Optional[str] = None
    for number, swept in enumerate(combos, 1):
        # A point takes about a second to compose, validate and price: say where the sweep is, in ten lines at most.
        if len(combos) > 1 and (number == 1 or number % -(-len(combos) // 10) == 0):
            print(f"  planning point {number} of {len(combos)}", flush=True)
        name = point_name(swept)
        if name in used:
            name = f"{name}-{len(points)}"
        used.add(name)
        point = SweepPoint(name=name, swept=swept, overrides=[*fixed, *swept])
        try:
            composed = compose_run(recipe, point.overrides)
            sweep_id = sweep_id or new_run_id(composed)
            # Every point is its own run: <run_id or sweep id>-<point>.
            resolved = validate(composed, run_id=f"{composed.run_id or sweep_id}-{name}")
            point.resolved = resolved
            point.plan = build_plan(resolved, point.overrides)  # priced against its twin
        except UserError as err:
            secret = next((p for p in err.problems if isinstance(p, SecretProblem)), None)
            if secret is not None:  # the sweep is refused as a whole: its other points are no answer to what was typed
                raise UserError(Problem(secret.field, f"in point {name}: {secret.message}; nothing was run")) from None
            point.resolved, point.plan = None, None
            point.problems = err.focused(typed_keys(point.swept)).lines()
        points.append(point)
    return points


def _layout_text(plan: Plan) -> str:
    lay = plan.layout
    return (
        f"TP{lay.tp} PP{lay.pp} VPP{lay.vpp} CP{lay.cp} EP{lay.ep} ETP{lay.etp} | DP{lay.dp}"
        f", GBS {plan.gbs} MBS {plan.mbs}, {lay.world_size} GPUs"
    )


def print_points(recipe: str, points: list[SweepPoint]) -> None:
    valid = [p for p in points if p.valid]
    print(f"Sweep: {recipe}, {len(points)} points, {len(valid)} valid")
    width = max(len(p.name) for p in points)
    for point in points:
        if point.valid:
            print(f"  ok       {point.name:<{width}}  {_layout_text(point.plan)}")
        else:
            for line in point.problems:
                print(f"  invalid  {point.name:<{width}}  {line}")


def sweep_folder(run: RunConfig) -> Path:
    return Path(run.results_dir) / "plans" / run.recipe / "sweep"


def _sweep_entry(path: Path) -> bool:
    """Whether ``path``, in a sweep folder, is one a sweep wrote: sweep.json, NeMo-Run's folder, a dry-run point's
    job folder (its job files and Slurm's empty logs/ folder)."""
    if path.is_symlink():
        return False
    if path.name in ("sweep.json", JOB_WORK) or re.fullmatch(r"\..+\.tmp", path.name):
        return True
    return path.is_dir() and all(
        (p.name in JOB_FILES and p.is_file()) or (p.name == "logs" and p.is_dir() and not any(p.iterdir()))
        for p in path.iterdir()
    )


def _point_jobs(points: list[SweepPoint], folder: Path, dryrun: bool) -> list[JobSpec]:
    """Each valid point's job folder, with its plan.json and config.yaml written."""
    jobs = []
    for point in points:
        run = point.run
        target = folder / point.name if dryrun else run_dir(run)
        job = JobSpec(name=str(run.run_id), run=run, folder=target, parts=point.parts)
        point.plan = point.plan.with_launch(slurm_launch_section(job, dryrun))
        save_resolved_config(run, job.config_path)
        atomic_write_json(target / "plan.json", point.plan.to_json())
        jobs.append(job)
    return jobs


def launch_slurm_points(recipe: str, points: list[SweepPoint], folder: Path, dryrun: bool) -> None:
    from launch import slurm

    jobs = _point_jobs(points, folder, dryrun)
    base = (
        folder / "nemo_run"
        if dryrun
        else Path(points[0].run.results_dir) / "sweeps" / str(jobs[0].run.run_id) / "nemo_run"
    )
    rendered = slurm.render(jobs, base, title=f"{recipe}-sweep", submit=not dryrun)
    for point, job, result in zip(points, jobs, rendered):
        point.job_script = shown(result.script)
        point.job_id = result.job_id
        launch = {**point.plan.launch, "job_script": point.job_script, "nemo_run_script": shown(result.nemo_run_script)}
        if result.job_id:
            launch["job_ids"] = [result.job_id]
        point.plan = point.plan.with_launch(launch)
        atomic_write_json(job.folder / "plan.json", point.plan.to_json())
    state = (
        "rendered as one NeMo-Run experiment (dry run, not submitted)"
        if dryrun
        else "submitted as one NeMo-Run experiment"
    )
    print(f"  {len(jobs)} job scripts {state}:")
    for point in points:
        print(f"    {point.name}: {point.job_script}" + (f" (Slurm job {point.job_id})" if point.job_id else ""))


def check_points(points: list[SweepPoint]) -> None:
    """``CHECK=bridge``: every valid point's plan through its container's real Bridge (one process per container);
    a point Bridge refuses becomes invalid with Bridge's one line, so it is neither ranked nor launched."""
    from launch.bridge_check import check_plans, checked_lines, refusal

    valid = [p for p in points if p.valid]
    if not valid:
        return
    reports = check_plans([(p.run, p.plan) for p in valid])
    for line in checked_lines([p.name for p in valid], reports, "point"):
        print(line)
    for point, report in zip(valid, reports):
        problem = refusal(report)
        if problem:
            point.problems = UserError(Problem("bridge", problem)).lines()
            point.resolved, point.plan = None, None


def sweep(recipe: str, overrides: Sequence[str], check: bool = False) -> int:
    points = plan_sweep(recipe, overrides)
    if check:
        check_points(points)
    print_points(recipe, points)
    valid = [p for p in points if p.valid]
    print_ranking([(p.name, p.plan.layout, p.plan.projection) for p in valid])  # projected throughput, best first
    if not valid:
        reasons = {tuple(p.problems) for p in points}
        if len(reasons) == 1:  # every point fails the same way: a fixed override, not the swept values
            field, _, message = next(iter(reasons))[0].removeprefix("error: ").partition(": ")
            raise UserError(Problem(field, message))
        raise UserError(Problem("sweep", f"none of the {len(points)} points is valid; see the reasons above"))
    first = valid[0].run
    folder = sweep_folder(first)
    dryrun = first.dryrun
    slurm = first.cluster.executor == "slurm"
    if slurm:
        notes = []
        for point in valid:
            _, point_notes, point.parts = check_launch(point.resolved)
            notes += point_notes
        print_notes(notes)
        print_preflight([(point.run, point.parts) for point in valid])
    # The previous sweep's folder is replaced only when this one is complete (put back if it fails or is killed).
    claim_results(first)
    with replacing(folders=[Folder(folder, holds=_sweep_entry)]):
        if slurm:
            launch_slurm_points(recipe, valid, folder, dryrun)
        summary = {
            "recipe": recipe,
            "overrides": recorded_overrides(overrides),
            "dryrun": dryrun,
            "points": [p.as_dict() for p in points],
        }
        path = atomic_write_json(folder / "sweep.json", summary)
    if not slurm and dryrun:
        print(f"  {len(valid)} points planned; dry run, nothing launched")
    elif not slurm:
        for point in valid:
            print(f"  running {point.name} on the local engine")
            launch_local_engine(point.run)
    print(f"  sweep.json  {shown(path)}")
    return 0
