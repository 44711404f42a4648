"""What a cluster job needs, decided on the submitting machine: checks, environment, mounts, command.

Nothing here imports NeMo-Run (that happens in :mod:`launch.slurm`, only when a job is rendered), so
``make pretrain`` on the local engine pays nothing for it.

Secrets: the Slurm account is never written to any file. sbatch reads it from ``SBATCH_ACCOUNT`` in
its own environment (:func:`launch.slurm.submit` sets it for the sbatch child when the account came
from ``conf/local/<cluster>.yaml``). ``WANDB_API_KEY`` and other credentials travel the same way: sbatch
passes the submitting environment to the job, so they are never rendered into the job script.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from optbench.releases.presets import find_preset
from optbench.releases.versions import container_of
from optbench.common.checkout import repo_root
from optbench.config.layout import Layout
from optbench.config.schema import RunConfig
from optbench.common.errors import Problem, UserError
from optbench.metrics.wandb_run import JOB_TYPE, wandb_group, wandb_tags
from optbench.common.redact import is_secret_name
from optbench.resolve import ResolvedRun

ENTRY_SCRIPT = Path("src") / "optbench" / "engine" / "bridge" / "entry.py"
"""The in-container entry point, run by path so that the container needs no install of optbench."""

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SAFE_PATH = re.compile(r"^[A-Za-z0-9._/+@=,-]+$")
"""Characters allowed in paths NeMo-Run writes into the script unquoted (the Slurm log paths)."""


@dataclass(frozen=True)
class JobParts:
    """What a Slurm job asks for, derived once from the resolved run (:func:`job_parts`) and read by the checks,
    the preflight notes, plan.json's launch section and the rendered script alike."""

    env: dict[str, str]
    """The job's environment (values unquoted; the renderer quotes them), no secret among them."""
    mounts: list[str]
    """host:container mounts."""
    resources: dict[str, object]
    """Nodes, tasks, partition, time, memory, image and srun arguments (:func:`slurm_resources`)."""
    segment: Optional[int]
    """Slurm's --segment: nodes per NVLink domain, None off multi-node NVLink."""
    numa: Optional[str]
    """Each task's NUMA binding command, None without one."""


def job_parts(resolved: ResolvedRun) -> JobParts:
    """Every part of the run's Slurm job, from the layout resolve derived; a bad value is a UserError here,
    before anything is written."""
    run, layout = resolved.run, resolved.layout
    return JobParts(
        env=job_env(run),
        mounts=job_mounts(run),
        resources=slurm_resources(run, layout),
        segment=segment_size(run, layout.nodes),
        numa=numa_binding(run),
    )


@dataclass(frozen=True)
class JobSpec:
    """One Slurm job: the run it executes, the folder that holds its files and what it asks Slurm for."""

    name: str
    """Job and task name (letters, digits, '.', '_', '-')."""
    run: RunConfig
    """The validated run, run id fixed and results_dir absolute."""
    folder: Path
    """Holds config.yaml (what the job reads), sbatch.sh (the kept job script) and logs/."""
    parts: JobParts
    """Environment, mounts and resources, derived once (:func:`job_parts`)."""

    @property
    def config_path(self) -> Path:
        return self.folder / "config.yaml"

    @property
    def log_dir(self) -> Path:
        return self.folder / "logs"

    @property
    def script_path(self) -> Path:
        return self.folder / "sbatch.sh"


def check_text(field: str, value: str) -> str:
    """A value rendered into the job script: no control characters (a newline would end a #SBATCH comment)."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise UserError(Problem(field, "must not contain newlines or control characters (it goes into the job script)"))
    return value


def check_path(field: str, path: Path) -> Path:
    """A path NeMo-Run writes unquoted (Slurm's --output): only plain characters."""
    if not SAFE_PATH.match(str(path)):
        raise UserError(
            Problem(
                field, f"'{path}' has characters a job script cannot carry unquoted; use letters, digits, . _ - / only"
            )
        )
    return path


def require_slurm(run: RunConfig, dryrun: bool) -> tuple[str, ...]:
    """Launch-time checks that depend on this machine and the cluster preset; the first failure is raised.
    Returns the notes to print once (a sweep's points share them)."""
    cluster = run.cluster
    if not cluster.container_image:
        raise UserError(
            Problem(
                "cluster.container_image",
                f"cluster {cluster.name} names no container image; set "
                "cluster.container_image=nvcr.io/nvidia/nemo:26.02 "
                f"(or container_image: in conf/local/{cluster.name}.yaml)",
            )
        )
    if not cluster.gpus_per_node:
        raise UserError(
            Problem("cluster.gpus_per_node", f"cluster {cluster.name} runs on Slurm and needs gpus_per_node")
        )
    if not dryrun and shutil.which("sbatch") is None:
        raise UserError(
            Problem(
                "cluster",
                f"no sbatch on PATH: this machine cannot submit to {cluster.name}; run from a login node of that "
                "cluster, or add dryrun=true to only render the job script (recipes *_tiny_* run on this machine)",
            )
        )
    if not cluster.account and dryrun:
        # The rendered script never holds the account (sbatch gets it from SBATCH_ACCOUNT at submission).
        return (
            f"note: cluster.account: not set; submitting to {cluster.name} will need SBATCH_ACCOUNT or "
            f"account: in conf/local/{cluster.name}.yaml",
        )
    if not cluster.account:
        raise UserError(
            Problem(
                "cluster.account",
                f"no Slurm account for {cluster.name}; export SBATCH_ACCOUNT=<account> or put account: in "
                f"conf/local/{cluster.name}.yaml (it is never written to any file)",
            )
        )
    return ()


def hybrid_ep_ranks_per_domain(ep: int, domain: int) -> int:
    """Expert-parallel ranks that share one NVLink domain: ep itself, or the largest divisor of ep that fits."""
    return max(d for d in range(1, min(ep, domain) + 1) if ep % d == 0)


SM100_OR_NEWER = ("b300", "b200", "gb200", "gb300")
"""GPUs NVIDIA's PerfEnvPlugin gives 32 CUDA device connections whatever the layout (perf_plugins.py, Bridge 0.3.1)."""


def nvidia_performance_env(run: RunConfig, preset_env: dict[str, str]) -> dict[str, str]:
    """NVIDIA's job environment for the run: the preset's, with its layout-dependent values recomputed.

    ``preset_env`` is what NVIDIA's launcher rendered for the preset's own layout (data file). Two values
    depend on the layout, so a command-line layout change recomputes them with NVIDIA's rules
    (scripts/performance/perf_plugins.py): CUDA_DEVICE_MAX_CONNECTIONS and the hybrid-EP ranks per
    NVLink domain.
    """
    parallel, gpu = run.parallel, run.cluster.gpu
    env = dict(preset_env)
    # NVIDIA's plugin reads its workload config's backend whatever the dispatcher type (Bridge 0.3.1's Qwen3 235B-A22B
    # H100 preset: alltoall with deepep, 32). We hold one backend, the recipe's and the workload's merged, so where a
    # recipe sets one its workload config leaves unset the rule says 32 and NVIDIA 8: 0.3.0's two Qwen3 235B-A22B H100
    # presets, of the 444 every release holds.
    connections = 32 if parallel.moe_flex_dispatcher_backend in ("deepep", "hybridep") else 8
    if gpu in SM100_OR_NEWER:
        connections = 32
    elif (parallel.tp > 1 or parallel.cp > 1) and not parallel.ep_comm_overlap:  # NVIDIA's moe_a2a_overlap keeps it
        connections = 1  # Hopper: kernel queue order = execution order, so TP/CP communication overlaps its GEMM
    env["CUDA_DEVICE_MAX_CONNECTIONS"] = str(connections)
    if "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN" in env:
        domain = int(env.get("NVLINK_DOMAIN_SIZE", run.cluster.nvlink_domain_size))
        env["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] = str(min(parallel.ep, domain))
    return env


def segment_size(run: RunConfig, nodes: int) -> Optional[int]:
    """``#SBATCH --segment``: nodes that must share one NVLink domain (multi-node NVLink only).

    NVIDIA's rule for NVL72 (scripts/performance/utils/executors.py): all nodes when they fit in one rack
    (18 trays of 4 GPUs), else the largest divisor of the node count that fits.
    """
    cluster = run.cluster
    per_node = cluster.gpus_per_node or 0
    if not per_node or cluster.nvlink_domain_size <= per_node:
        return None
    trays = cluster.nvlink_domain_size // per_node
    return nodes if nodes <= trays else max(d for d in range(1, trays + 1) if nodes % d == 0)


def numa_rule(run: RunConfig) -> Optional[str]:
    """NVIDIA's per-task NUMA binding rule of Bridge 0.3 (executors.py): 2 GPUs per NUMA node on GB200/GB300, 4
    elsewhere, and on B300 two pinned cores per task (-C); from 0.4 the -C pinning depends on the model
    (setup_experiment)."""
    gpu = run.cluster.gpu
    if run.cluster.executor != "slurm" or gpu not in ("gb300", "gb200", "b300", "b200", "h100", "h200"):
        return None
    divisor = 2 if gpu in ("gb200", "gb300") else 4
    command = f"numactl --cpunodebind=$((SLURM_LOCALID/{divisor})) --membind=$((SLURM_LOCALID/{divisor}))"
    if gpu == "b300" and container_of(run).bridge_minor < (0, 4):
        command += " -C $((SLURM_LOCALID * 16)),$((SLURM_LOCALID * 16 + 1))"
    return command


def numa_binding(run: RunConfig) -> Optional[str]:
    """The binding NVIDIA's launcher of the run's release rendered for its preset; without a preset,
    :func:`numa_rule`."""
    preset = find_preset(run) if run.engine == "megatron_bridge" and run.cluster.executor == "slurm" else None
    command = ((preset.job.get("numa") or {}).get("command")) if preset else None
    return command or numa_rule(run)


def srun_args(run: RunConfig) -> list[str]:
    """The cluster's srun arguments, then any NVIDIA's launcher of the run's release adds (0.4+:
    --container-writable)."""
    ours = [check_text("cluster.srun_args", str(arg)) for arg in run.cluster.srun_args]
    preset = find_preset(run) if run.engine == "megatron_bridge" else None
    nvidia = (preset.job.get("srun_args") or []) if preset else []
    return ours + [arg for arg in nvidia if arg not in ours]


def job_env(run: RunConfig) -> dict[str, str]:
    """The job's environment (values unquoted; the renderer quotes them). No secret is ever included."""
    cluster, parallel, logger = run.cluster, run.parallel, run.logger
    preset = find_preset(run) if run.engine == "megatron_bridge" else None
    # NVIDIA's rendered job environment of the release (its launcher, executed); runs without a preset: our rules.
    nvidia_env = preset.job.get("env") if preset else None
    env: dict[str, str] = nvidia_performance_env(run, nvidia_env) if nvidia_env is not None else {}
    per_node = cluster.gpus_per_node or parallel.num_gpus
    if (
        nvidia_env is None
        and parallel.moe_flex_dispatcher_backend == "hybridep"
        and cluster.nvlink_domain_size > per_node
    ):
        # Multi-node NVLink (GB200/GB300 NVL72): hybrid EP runs its all-to-all over the whole domain.
        env["NVLINK_DOMAIN_SIZE"] = str(cluster.nvlink_domain_size)
        env["USE_MNNVL"] = "1"
        env["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] = str(
            hybrid_ep_ranks_per_domain(parallel.ep, cluster.nvlink_domain_size)
        )
    env["WANDB_MODE"] = logger.wandb_mode
    if logger.wandb_mode != "disabled":
        # Bridge's LoggerConfig has no group, tags or job type; wandb.init reads them from here.
        env["WANDB_RUN_GROUP"] = wandb_group(run, cluster.gpu, run.precision.name)
        env["WANDB_TAGS"] = ",".join(wandb_tags(run, cluster.gpu, run.precision.name))
        env["WANDB_JOB_TYPE"] = JOB_TYPE
        env["WANDB_RUN_ID"] = str(run.run_id)
        if run.resume:
            env["WANDB_RESUME"] = "allow"
    for name, value in cluster.env.items():
        if not ENV_NAME.match(name):
            raise UserError(Problem(f"cluster.env.{name}", "is not a valid environment variable name"))
        if is_secret_name(name):
            raise UserError(
                Problem(
                    f"cluster.env.{name}",
                    "looks like a credential and would be written into the job script; export it in your shell "
                    "instead (sbatch passes your environment to the job)",
                )
            )
        env[name] = str(value)
    for name, value in env.items():
        check_text(f"job environment {name}", value)
    return env


def job_mounts(run: RunConfig) -> list[str]:
    """host:container mounts: the checkout and the results folder at the same paths, then the cluster's own."""
    root = repo_root().resolve()
    results = Path(run.results_dir).resolve()
    mounts = [f"{root}:{root}"]
    if root not in results.parents and results != root:
        mounts.append(f"{results}:{results}")
    for mount in run.cluster.container_mounts:
        mounts.append(check_text("cluster.container_mounts", str(mount)))
    return mounts


def job_command(config_path: Path) -> list[str]:
    """argv of each task: the container's python runs our entry point on the resolved config."""
    return ["python", str(repo_root().resolve() / ENTRY_SCRIPT), str(config_path)]


def slurm_resources(run: RunConfig, layout: Layout) -> dict[str, object]:
    """Nodes and tasks: one task per GPU, Bridge reads rank and world size from SLURM_* (no torchrun)."""
    cluster = run.cluster
    return {
        "nodes": layout.nodes,
        "ntasks_per_node": layout.gpus_per_node,
        "gpus_per_node": layout.gpus_per_node,
        "partition": check_text("cluster.partition", cluster.partition) if cluster.partition else None,
        "time": check_text("cluster.time", cluster.time),
        "mem": check_text("cluster.mem", cluster.mem) if cluster.mem else None,
        "exclusive": True if cluster.exclusive else None,
        "container_image": check_text("cluster.container_image", str(cluster.container_image)),
        "srun_args": srun_args(run),
    }
