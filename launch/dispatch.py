"""``make pretrain``: compose, validate, plan, then hand the run to the executor its cluster names.

* cluster executor ``local``, engine ``local``: the local engine on this machine (``launch_local``).
* cluster executor ``local``, engine ``megatron_bridge``: Bridge under torchrun on this machine, which
  must be the NeMo container with enough GPUs.
* cluster executor ``slurm``: a NeMo-Run SlurmExecutor job, submitted with sbatch, or with
  ``dryrun=true`` only rendered into ``results/plans/<recipe>/`` (plan.json, config.yaml, sbatch.sh).

Every refusal the launcher can know of (no sbatch, no account, a bad job variable, a run that
exists, a resume that does not match) is raised before anything is written, and what a launch
writes over (the dry-run job files, a new run folder) is put back as it was if the launch fails.
NeMo-Run and torch are imported only on the paths that need them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from launch.jobs import (
    JobParts,
    JobSpec,
    check_path,
    job_command,
    job_env,
    job_parts,
    require_slurm,
)
from launch.preflight import cluster_notes
from optbench.compose.recipe import compose_run
from optbench.config.schema import RunConfig
from optbench.common.errors import Problem, UserError
from optbench.common.io import atomic_write_json
from optbench.plan.types import Plan
from optbench.plan import (
    build_plan,
    claim_results,
    format_launch_lines,
    format_summary,
    plan_path,
    replaced_plan_note,
    write_plan,
)
from optbench.common.replace import Folder, replacing
from optbench.resolve import ResolvedRun
from optbench.runs import run_dir, save_resolved_config
from optbench.validate import validate


def shown(path: Path | str) -> str:
    """A path as a user reads it: relative to the working directory when under it."""
    path = Path(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def plan_folder(run: RunConfig) -> Path:
    return plan_path(run).parent


def plan_run(recipe: str, overrides: Sequence[str], compare: Sequence[str] = ()) -> tuple[ResolvedRun, Plan]:
    """Compose, validate (which resolves the run once) and plan, writing nothing; returns the resolved run (its
    config a Bridge job's with its absolute results_dir and run id) and the plan (``compare``: COMPARE)."""
    resolved = validate(compose_run(recipe, overrides))
    return resolved, build_plan(resolved, overrides, compare=compare)


def compose_and_plan(
    recipe: str, overrides: Sequence[str], check: bool = False, compare: Sequence[str] = ()
) -> tuple[RunConfig, Plan]:
    """Compose, validate, plan and print the plan; ``check``: through its container's real Bridge (CHECK=bridge);
    ``compare``: the matrix optimizers projected beside the AdamW twin (COMPARE); then write it (a refused check
    writes nothing); return both."""
    resolved, plan = plan_run(recipe, overrides, compare)
    run = resolved.run
    print(format_summary(plan))
    if check:
        from launch.bridge_check import check_with_bridge

        check_with_bridge(run, plan)
    print(_written_plan_line(run, plan))
    return run, plan


def job_folder(run: RunConfig) -> Path:
    """Where a Slurm job's files go: the plan folder for a dry run, else the run's own folder."""
    return plan_folder(run) if run.dryrun else run_dir(run)


def check_launch(resolved: ResolvedRun) -> tuple[RunConfig, tuple[str, ...], JobParts | None]:
    """Every refusal the launcher can know of before it writes anything (raises UserError); returns the run to
    launch (a local-engine run with its run id fixed), the notes for the user (printed once by the caller: a sweep's
    points share them) and, for Slurm, the job's parts, derived here once for every later step."""
    run = resolved.run
    notes: tuple[str, ...] = ()
    parts = None
    if run.cluster.executor == "slurm":
        notes = require_slurm(run, run.dryrun)
        folder = job_folder(run)
        if not run.dryrun and (folder / "sbatch.sh").exists() and not run.resume:
            raise UserError(
                Problem(
                    "run_id",
                    f"{run.run_id} was already submitted ({shown(folder)}); pick a new run_id or add resume=true",
                )
            )
        parts = job_parts(resolved)
        check_path("results_dir", JobSpec(str(run.run_id), run, folder, parts).log_dir)
    elif run.engine == "local":
        if not run.dryrun:
            missing = [name for name in LOCAL_ENGINE_NEEDS if not _importable(name)]
            if missing:
                raise UserError(
                    Problem(
                        "engine",
                        f"the local engine needs {' and '.join(missing)}, which this "
                        "environment lacks (make setup-submit installs planning and submission only); "
                        "run `make setup`, or plan and submit a cluster recipe (RECIPE=kimi_k2_muon)",
                    )
                )
            from optbench.engine.local import check_local_launch

            run = check_local_launch(run)
    elif not run.dryrun:
        problem = bridge_local_problem(run.parallel.num_gpus)
        if problem is not None:
            raise UserError(problem)
    return run, notes, parts


LOCAL_ENGINE_NEEDS = ("torch", "transformers")
"""What the local engine imports that ``make setup-submit``'s environment (the ``launch`` extra alone) does not hold."""


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def print_preflight(jobs: Sequence[tuple[RunConfig, JobParts]]) -> None:
    """What the cluster may lack for these Slurm jobs (launch/preflight.py), once each, with the plan on stdout:
    advice beside the plan, never mixed into a refusal's one line on stderr."""
    found = (note for run, parts in jobs for note in cluster_notes(run, parts.env, parts.mounts, parts.segment))
    for note in dict.fromkeys(found):
        print(f"  {note}")


def print_notes(notes: Sequence[str]) -> None:
    """Each note once, on stderr, in the order first given."""
    for note in dict.fromkeys(notes):
        print(note, file=sys.stderr)


def warn_missing_data(run: RunConfig, plan: Plan) -> None:
    """A cluster job reads its data where it runs: a prefix missing here is a warning, not an error."""
    missing = plan.data.missing_prefixes
    if missing and run.engine == "megatron_bridge":
        print(
            f"warning: data.path: {', '.join(missing)} not found on this machine (.bin/.idx); the job fails at start "
            "unless it exists on the cluster's file system at that path",
            file=sys.stderr,
        )


def pretrain(recipe: str, overrides: Sequence[str], check: bool = False, compare: Sequence[str] = ()) -> int:
    """Plan and launch; ``check``: the plan goes through its container's real Bridge first (CHECK=bridge)."""
    resolved, plan = plan_run(recipe, overrides, compare)
    print(format_summary(plan))
    warn_missing_data(resolved.run, plan)
    run, notes, parts = check_launch(resolved)
    print_notes(notes)
    if check:
        from launch.bridge_check import check_with_bridge

        check_with_bridge(run, plan)
    claim_results(run)
    if parts is not None:
        return launch_slurm(run, plan, parts)
    print(_written_plan_line(run, plan))
    if run.engine == "local":
        return launch_local_engine(run, checked=True)
    return launch_bridge_local(run, plan)


def _written_plan_line(run: RunConfig, plan: Plan) -> str:
    """Write plan.json; its printed line, saying which earlier plan of the recipe it replaced."""
    note = replaced_plan_note(run, plan)
    return f"  plan.json   {shown(write_plan(run, plan))}{note}"


def _record_launch(run: RunConfig, plan: Plan, launch: dict[str, Any], *copies: Path) -> None:
    """Write plan.json (and copies of it) with the launch section, then print its lines."""
    plan = plan.with_launch(launch)
    write_plan(run, plan)
    for copy in copies:
        atomic_write_json(copy, plan.to_json())
    for line in format_launch_lines(plan):
        print(line)


def slurm_launch_section(job: JobSpec, dryrun: bool) -> dict[str, Any]:
    """Everything the job asks Slurm for, as plan.json records it (no secrets)."""
    resources = job.parts.resources
    state = "dry run, not submitted" if dryrun else "submitted"
    summary = (
        f"slurm: {resources['nodes']} nodes x {resources['ntasks_per_node']} tasks (one per GPU), "
        f"{resources['container_image']}, partition {resources['partition'] or '(default)'}, "
        f"time {resources['time']}; {state}"
    )
    return {
        "executor": "slurm",
        "dryrun": dryrun,
        "summary": summary,
        **resources,
        "account": "from SBATCH_ACCOUNT in sbatch's environment; never written to a file",
        "container_mounts": job.parts.mounts,
        "env": job.parts.env,
        "command": job_command(job.config_path),
        "config": str(job.config_path),
        "log_dir": str(job.log_dir),
    }


JOB_FILES = ("plan.json", "config.yaml", "sbatch.sh")
JOB_WORK = "nemo_run"
"""What rendering a job writes into its folder: these files and NeMo-Run's experiment folder (a dry run's plan
folder, or the run folder; the sweep/ folder beside them, Slurm's logs/ and a resumed run's metrics and
checkpoints are not touched)."""


def launch_slurm(run: RunConfig, plan: Plan, parts: JobParts) -> int:
    """Render (dryrun) or submit one Slurm job for the run with the parts check_launch derived."""
    from launch import slurm

    folder = job_folder(run)
    job = JobSpec(name=str(run.run_id), run=run, folder=folder, parts=parts)
    print_preflight([(run, parts)])
    replaced = replaced_plan_note(run, plan)
    with replacing(files=[*(folder / name for name in JOB_FILES), plan_path(run)], folders=[Folder(folder / JOB_WORK)]):
        launch = slurm_launch_section(job, run.dryrun)
        save_resolved_config(run, job.config_path)
        [rendered] = slurm.render([job], folder / "nemo_run", title=run.recipe, submit=not run.dryrun)
        launch["job_script"] = shown(rendered.script)
        launch["nemo_run_script"] = shown(rendered.nemo_run_script)
        if rendered.job_id:
            launch["job_ids"] = [rendered.job_id]
            launch["summary"] += f" as Slurm job {rendered.job_id}"
        _record_launch(run, plan, launch, *(() if run.dryrun else (folder / "plan.json",)))
    print(f"  plan.json   {shown(plan_path(run))}{replaced}")
    return 0


def launch_local_engine(run: RunConfig, checked: bool = False) -> int:
    """The local engine on this machine (nothing runs with dryrun=true)."""
    if run.dryrun:
        print("  launch      local engine on this machine; dry run, nothing launched")
        return 0
    from optbench.engine.local import launch_local

    launch_local(run, checked=checked)
    return 0


def bridge_local_problem(num_gpus: int) -> Problem | None:
    """Why this machine cannot run Megatron Bridge under torchrun (None when it can)."""
    missing = [name for name in ("megatron.bridge", "transformer_engine") if importlib.util.find_spec(name) is None]
    if shutil.which("torchrun") is None:
        missing.append("torchrun")
    if not missing:
        import torch

        if torch.cuda.device_count() < num_gpus:
            missing.append(f"{num_gpus} GPUs (found {torch.cuda.device_count()})")
    if not missing:
        return None
    return Problem(
        "cluster",
        f"engine=megatron_bridge on cluster=local needs the NeMo container with GPUs; missing: {', '.join(missing)}; "
        "pick a Slurm cluster (e.g. cluster=gb300_nvl72), add dryrun=true, or use engine=local",
    )


def launch_bridge_local(run: RunConfig, plan: Plan) -> int:
    """Megatron Bridge on this machine: torchrun with one process per GPU, in the foreground."""
    folder = plan_folder(run) if run.dryrun else run_dir(run)
    config_path = folder / "config.yaml"
    argv = job_command(config_path)
    command = ["torchrun", f"--nproc-per-node={run.parallel.num_gpus}", *argv[1:]]
    launch = {
        "executor": "local",
        "dryrun": run.dryrun,
        "summary": f"torchrun on this machine, {run.parallel.num_gpus} processes"
        + ("; dry run, nothing launched" if run.dryrun else ""),
        "command": command,
        "env": job_env(run),
        "config": str(config_path),
    }
    save_resolved_config(run, config_path)
    # The job applies the plan beside its config.yaml (optbench.runs.plan_file); a dry run's folder is the plan's own.
    _record_launch(run, plan, launch, *(() if run.dryrun else (folder / "plan.json",)))
    print(f"  command     {' '.join(command)}")
    if run.dryrun:
        return 0
    return subprocess.run(command, env={**os.environ, **launch["env"]}, check=False).returncode
