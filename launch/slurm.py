"""Render and submit Slurm jobs with NeMo-Run: one Experiment, one SlurmExecutor per job.

NeMo-Run writes each job's sbatch script into its experiment folder (``<base>/experiments/<title>/<id>/``)
and, on submission, runs ``sbatch`` on it through a LocalTunnel (we submit from a login node). The
script is rendered without the Slurm account; sbatch takes the account from ``SBATCH_ACCOUNT`` in
its environment. A copy of each script, secrets redacted, is kept beside the job's config.yaml.

NeMo-Run 0.11.1 writes the task's argv, the srun arguments, the container image and mounts, and
``export NAME=value`` lines without quoting (its ``noquote`` marker is an alias of ``str``, so its
``isinstance(arg, noquote)`` test passes for every argument). Every one of those values is passed
through :func:`shlex.quote` here first; the paths it must leave unquoted (Slurm log files with
``%j`` and ``${SLURM_RESTART_COUNT:-0}``) are checked to hold plain characters only.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from launch.jobs import JobSpec, check_path, job_command
from optbench.common.errors import Problem, UserError
from optbench.common.io import atomic_write_bytes, atomic_write_text
from optbench.common.redact import REDACTED, redact_text, run_secrets

TASK_TEMPLATE = """
set -euo pipefail

{{ pre_cmds }} {{ command }}
"""
"""Each task's script: NVIDIA's launcher template (executors.py) without its ``bash -c '...'`` wrapper, whose
single quotes a shell-quoted argument could close; the NUMA binding then the command, run per task by srun."""

JOB_NAME_PREFIX = "optbench-"
"""Slurm job names are ``optbench-<job>`` (NeMo-Run would otherwise prefix them with the account)."""


@dataclass(frozen=True)
class RenderedJob:
    """A job whose script exists, and its Slurm job id once submitted."""

    name: str
    script: Path
    """The kept copy of the job script (secrets redacted), beside config.yaml."""
    nemo_run_script: Path
    """The script NeMo-Run rendered and sbatch reads."""
    job_id: Optional[str] = None


def _executor(job: JobSpec, experiments_dir: Path):
    import nemo_run as run
    from nemo_run.core.execution.launcher import SlurmTemplate
    from nemo_run.core.execution.slurm import SlurmJobDetails
    from nemo_run.core.tunnel.client import LocalTunnel

    resources, env, numa = job.parts.resources, job.parts.env, job.parts.numa
    launcher = SlurmTemplate(template_inline=TASK_TEMPLATE, template_vars={"pre_cmds": numa}) if numa else None
    return run.SlurmExecutor(
        segment=job.parts.segment,
        launcher=launcher,
        account=None,  # never rendered: sbatch reads SBATCH_ACCOUNT from its environment
        job_name_prefix=JOB_NAME_PREFIX,
        partition=resources["partition"],
        nodes=resources["nodes"],
        ntasks_per_node=resources["ntasks_per_node"],
        gpus_per_node=resources["gpus_per_node"],
        time=resources["time"],
        mem=resources["mem"],
        exclusive=resources["exclusive"],
        container_image=shlex.quote(resources["container_image"]),
        # Quoted one by one: NeMo-Run joins them with bare commas, which bash keeps inside one word.
        container_mounts=[shlex.quote(mount) for mount in job.parts.mounts],
        # Our variables win over same-named ones baked into the image (pyxis --container-env).
        container_env=sorted(env),
        srun_args=[shlex.quote(arg) for arg in resources["srun_args"]],
        env_vars={name: shlex.quote(value) for name, value in env.items()},
        packager=run.Packager(),  # the checkout is mounted, nothing is packaged
        tunnel=LocalTunnel(job_dir=str(experiments_dir)),
        job_details=SlurmJobDetails(folder=str(check_path("results_dir", job.log_dir))),
        poll_estimated_start_time=False,
    )


def _task(job: JobSpec):
    import nemo_run as run

    argv = job_command(job.config_path)
    return run.Script(
        path=shlex.quote(argv[1]),
        args=[shlex.quote(arg) for arg in argv[2:]],
        entrypoint=argv[0],
    )


def _keep_copy(job: JobSpec, script: Path) -> Path:
    """Copy NeMo-Run's script beside config.yaml with every known secret replaced."""
    text = redact_text(script.read_text(), run_secrets(job.run))
    atomic_write_text(job.script_path, text)
    job.script_path.chmod(0o755)
    return job.script_path


def _redact_tree(root: Path, secrets: list[str]) -> None:
    """Rewrite every file NeMo-Run left under ``root`` (scripts, executor and experiment files) without secrets."""
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            clean = redact_text(data.decode("utf-8", errors="surrogateescape"), secrets).encode(
                "utf-8", "surrogateescape"
            )
            if clean != data:
                mode = path.stat().st_mode
                atomic_write_bytes(path, clean)
                path.chmod(mode)


@contextlib.contextmanager
def _stdin_from_devnull() -> Iterator[None]:
    """NeMo-Run runs mkdir and sbatch through invoke, which forwards our stdin to them: give it nothing."""
    previous = sys.stdin
    with open(os.devnull) as devnull:
        sys.stdin = devnull
        try:
            yield
        finally:
            sys.stdin = previous


def render(jobs: list[JobSpec], base_dir: Path, title: str, submit: bool) -> list[RenderedJob]:
    """Render every job into one NeMo-Run experiment under ``base_dir``; submit them too when ``submit``."""
    for job in jobs:
        job.log_dir.mkdir(parents=True, exist_ok=True)  # Slurm does not create its --output folder
    with _stdin_from_devnull():
        return _render(jobs, base_dir, title, submit)


def _render(jobs: list[JobSpec], base_dir: Path, title: str, submit: bool) -> list[RenderedJob]:
    import nemo_run as run

    experiments_dir = base_dir / "experiments"
    with run.Experiment(
        title,
        base_dir=str(base_dir),
        log_level="ERROR",
        clean_mode=True,
        enable_goodbye_message=False,
        skip_status_at_exit=True,
    ) as experiment:
        for job in jobs:
            experiment.add(_task(job), executor=_executor(job, experiments_dir), name=job.name)
        if submit:
            _submit(experiment, jobs)
        else:
            experiment.dryrun(log=False, exist_ok=True, delete_exp_dir=False)
        rendered = []
        for job, nemo_job in zip(jobs, experiment.jobs):
            executor = nemo_job.executor
            script = Path(executor.experiment_dir) / f"{executor.job_name}_sbatch.sh"
            handle = getattr(nemo_job, "handle", None) if submit else None
            job_id = str(handle).rstrip("/").rsplit("/", 1)[-1] if handle else None
            rendered.append(RenderedJob(job.name, _keep_copy(job, script), script, job_id))
    _redact_tree(base_dir, sorted({s for job in jobs for s in run_secrets(job.run)}, key=len, reverse=True))
    return rendered


def _submit(experiment, jobs: list[JobSpec]) -> None:
    """sbatch every job; the account reaches sbatch through SBATCH_ACCOUNT in its environment only."""
    accounts = {job.run.cluster.account for job in jobs}
    if len(accounts) != 1:
        raise UserError(Problem("cluster.account", "every job of one submission must use the same Slurm account"))
    account = str(accounts.pop())
    previous = os.environ.get("SBATCH_ACCOUNT")
    os.environ["SBATCH_ACCOUNT"] = account
    try:
        experiment.run(detach=True)
    except Exception as err:  # invoke's UnexpectedExit carries sbatch's stderr
        detail = " ".join(str(err).replace(account, REDACTED).split())[:300]
        raise UserError(Problem("sbatch", f"submission failed: {detail}")) from err
    finally:
        if previous is None:
            os.environ.pop("SBATCH_ACCOUNT", None)
        else:
            os.environ["SBATCH_ACCOUNT"] = previous
