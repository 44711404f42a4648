"""``make pretrain``: compose, validate, plan, then hand the run to the executor its cluster names.

* cluster executor ``local``, engine ``local``: the local engine on this machine (``launch_local``).
* cluster executor ``local``, engine ``megatron_bridge``: Bridge under torchrun on this machine, which
  must be the NeMo container with enough GPUs.
* cluster executor ``slurm``: a NeMo-Run SlurmExecutor job, submitted with sbatch, or with
  ``dryrun=true`` only rendered into ``results/plans/<recipe>/`` (plan.json, config.yaml, sbatch.sh).

NeMo-Run and torch are imported only on the paths that need them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Sequence

from launch.jobs import JobSpec, job_command, job_env, job_mounts, require_slurm, slurm_resources
from optbench.config.compose import compose_run
from optbench.config.schema import RunConfig
from optbench.errors import Problem, UserError
from optbench.io import atomic_write_json
from optbench.plan import build_plan, format_launch_lines, format_summary, plan_path, write_plan
from optbench.runs import resolve_run_id, run_dir, save_resolved_config
from optbench.validate import validate


def shown(path: Path | str) -> str:
    """A path as a user reads it: relative to the working directory when under it."""
    path = Path(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def prepare_for_job(run: RunConfig) -> None:
    """A job reads its config elsewhere (a container, a compute node): absolute results_dir, fixed run id."""
    run.results_dir = str(Path(run.results_dir).resolve())
    resolve_run_id(run)


def plan_folder(run: RunConfig) -> Path:
    return plan_path(run).parent


def compose_and_plan(recipe: str, overrides: Sequence[str]) -> tuple[RunConfig, dict[str, Any]]:
    """Compose, validate, plan; print the plan; return both."""
    run = compose_run(recipe, overrides)
    validate(run)
    if run.engine == "megatron_bridge":
        prepare_for_job(run)
    plan = build_plan(run, overrides)
    path = write_plan(run, plan)
    print(format_summary(plan))
    print(f"  plan.json   {shown(path)}")
    return run, plan


def pretrain(recipe: str, overrides: Sequence[str]) -> int:
    run, plan = compose_and_plan(recipe, overrides)
    if run.cluster.executor == "slurm":
        return launch_slurm(run, plan)
    if run.engine == "local":
        return launch_local_engine(run)
    return launch_bridge_local(run, plan)


def _record_launch(run: RunConfig, plan: dict[str, Any], launch: dict[str, Any], *copies: Path) -> None:
    """Add the launch section to plan.json (and to copies of it), then print its lines."""
    plan["launch"] = launch
    write_plan(run, plan)
    for copy in copies:
        atomic_write_json(copy, plan)
    for line in format_launch_lines(plan):
        print(line)


def slurm_launch_section(job: JobSpec, dryrun: bool) -> dict[str, Any]:
    """Everything the job asks Slurm for, as plan.json records it (no secrets)."""
    resources = slurm_resources(job.run)
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
        "container_mounts": job_mounts(job.run),
        "env": job_env(job.run),
        "command": job_command(job.config_path),
        "config": str(job.config_path),
        "log_dir": str(job.log_dir),
    }


def launch_slurm(run: RunConfig, plan: dict[str, Any]) -> int:
    """Render (dryrun) or submit one Slurm job for the run."""
    from launch import slurm

    require_slurm(run, run.dryrun)
    if run.dryrun:
        folder = plan_folder(run)
    else:
        folder = run_dir(run)
        if (folder / "sbatch.sh").exists() and not run.resume:
            raise UserError(Problem("run_id", f"{run.run_id} was already submitted ({shown(folder)}); pick a new run_id or add resume=true"))
    job = JobSpec(name=str(run.run_id), run=run, folder=folder)
    launch = slurm_launch_section(job, run.dryrun)
    save_resolved_config(run, job.config_path)
    base = folder / "nemo_run"
    if run.dryrun:
        slurm.clear_experiments(base)
    [rendered] = slurm.render([job], base, title=run.recipe, submit=not run.dryrun)
    launch["job_script"] = shown(rendered.script)
    launch["nemo_run_script"] = shown(rendered.nemo_run_script)
    if rendered.job_id:
        launch["job_ids"] = [rendered.job_id]
        launch["summary"] += f" as Slurm job {rendered.job_id}"
    _record_launch(run, plan, launch, *(() if run.dryrun else (folder / "plan.json",)))
    return 0


def launch_local_engine(run: RunConfig) -> int:
    """The local engine on this machine (nothing runs with dryrun=true)."""
    if run.dryrun:
        print("  launch      local engine on this machine; dry run, nothing launched")
        return 0
    from optbench.engine.local import launch_local

    launch_local(run)
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


def launch_bridge_local(run: RunConfig, plan: dict[str, Any]) -> int:
    """Megatron Bridge on this machine: torchrun with one process per GPU, in the foreground."""
    folder = plan_folder(run) if run.dryrun else run_dir(run)
    config_path = folder / "config.yaml"
    argv = job_command(config_path)
    command = ["torchrun", f"--nproc-per-node={run.parallel.num_gpus}", *argv[1:]]
    launch = {
        "executor": "local",
        "dryrun": run.dryrun,
        "summary": f"torchrun on this machine, {run.parallel.num_gpus} processes" + ("; dry run, nothing launched" if run.dryrun else ""),
        "command": command,
        "env": job_env(run),
        "config": str(config_path),
    }
    if not run.dryrun:
        problem = bridge_local_problem(run.parallel.num_gpus)
        if problem is not None:
            raise UserError(problem)
    save_resolved_config(run, config_path)
    _record_launch(run, plan, launch)
    print(f"  command     {' '.join(command)}")
    if run.dryrun:
        return 0
    return subprocess.run(command, env={**os.environ, **launch["env"]}, check=False).returncode

