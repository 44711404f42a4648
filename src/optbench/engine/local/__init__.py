"""The local engine: small proxies of the cluster models, trained with our optimizers on this machine.

:func:`launch_local` is what ``make pretrain`` calls for ``engine: local`` recipes. It checks what can
be checked before any process starts (model expressible in transformers, data, memory, resume),
writes ``<results_dir>/runs/<run_id>/config.yaml`` and trains: in this process for one process, or
under ``torchrun --standalone --nproc_per_node=N -m optbench.engine.local <config.yaml>`` for N. See
docs/local_engine.md. Importing this package does not import torch.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from optbench.config.serialize import run_config_to_dict
from optbench.config.schema import RunConfig
from optbench.engine.local.resume_keys import RESUME_MUST_MATCH
from optbench.common.errors import Problem, UserError
from optbench.metrics.summary import COMMAND_ENV
from optbench.common.outputs import check_writable, claim
from optbench.common.run_lock import check_run_dir_free
from optbench.runs import load_config_yaml, run_dir, save_resolved_config, with_run_id

CONFIG_FILE = "config.yaml"
BYTES_PER_PARAM = 16
"""fp32 weight + gradient + two optimizer-state words: the most either optimizer keeps per parameter."""


def torchrun_command(config_path: Path, processes: int) -> list[str]:
    """The command that runs ``processes`` data-parallel ranks of the local engine on this machine."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        "-m",
        "optbench.engine.local",
        str(config_path),
    ]


def _available_memory_gb(processes: int) -> tuple[float, str]:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory / 1e9, "per GPU"
    pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return pages * page_size / 1e9 / processes, f"per process ({processes} on this machine's RAM)"


def _check_fits(run: RunConfig) -> None:
    """Refuse a model whose weights, gradients and optimizer state alone exceed this machine's memory."""
    from optbench.accounting.params import parameter_counts

    need = parameter_counts(run.model).total * BYTES_PER_PARAM / 1e9
    have, where = _available_memory_gb(run.parallel.num_gpus)
    if need > have:
        raise UserError(
            f"{run.model.name} needs ~{need:,.0f} GB for weights, gradients and optimizer state, this machine has "
            f"{have:,.0f} GB {where}; pick a *_tiny recipe, or engine=megatron_bridge with a cluster (cluster=...)",
            "model",
        )


def _preflight(run: RunConfig) -> None:
    """Problems the engine would hit in every process, raised once here instead."""
    from optbench.engine.local.data import build_stream
    from optbench.engine.local.model import hf_config
    from optbench.engine.local.runtime import check_device

    hf_config(run.model)
    check_device(run, run.parallel.num_gpus)
    build_stream(run.data, run.model, run.train)
    _check_fits(run)


def _select(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _check_resume(run: RunConfig, directory: Path) -> None:
    saved_path = directory / CONFIG_FILE
    if not saved_path.is_file():
        raise UserError(f"no run to resume at {directory}; give the run_id of an earlier run", "run_id")
    loaded = load_config_yaml(saved_path, "resume")
    try:
        saved = OmegaConf.to_container(loaded, resolve=True)
    except Exception as err:  # noqa: BLE001 - a broken interpolation
        raise UserError(
            f"{saved_path} is not a readable config.yaml ({type(err).__name__}); give the run_id of a "
            "complete earlier run",
            "resume",
        ) from err
    if not isinstance(saved, dict):
        raise UserError(f"{saved_path} holds no config mapping; give the run_id of a complete earlier run", "resume")
    current = run_config_to_dict(run)
    changed = [key for key in RESUME_MUST_MATCH if _select(saved, key) != _select(current, key)]
    if changed:
        raise UserError(
            [
                Problem(key, f"differs from the run being resumed ({saved_path}); resume with the same value")
                for key in changed
            ]
        )


def check_local_launch(run: RunConfig) -> RunConfig:
    """Every refusal the local engine can know of before it starts, with nothing written; returns the run with its
    run id fixed (:func:`optbench.runs.with_run_id`)."""
    from optbench.engine.local.threads import prepare_openmp

    prepare_openmp()  # before _preflight imports torch
    run = with_run_id(run)
    directory = run_dir(run)
    check_run_dir_free(directory)
    if run.resume:
        _check_resume(run, directory)
    elif (directory / "metrics.jsonl").is_file():
        raise UserError(f"{directory} already holds a run; add resume=true or pick a new run_id", "run_id")
    _preflight(run)
    from optbench.engine.local.checkpoint import checkpoint_dir, choose_checkpoint  # torch is loaded by now

    if run.resume:  # a checkpoint that cannot be resumed is refused before config.yaml or the plan is rewritten
        choose_checkpoint(run, run.parallel.num_gpus)
    check_writable(directory, "results_dir")
    check_writable(checkpoint_dir(run), "train.checkpoint_dir" if run.train.checkpoint_dir else "results_dir")
    return run


def launch_local(run: RunConfig, checked: bool = False) -> Path:
    """Run the local engine on this machine with ``run.parallel.num_gpus`` processes; returns the run directory.

    ``checked``: :func:`check_local_launch` already ran for this run (the launcher runs it before it
    writes the plan, so that a refused run leaves every earlier file as it was).
    """
    run = run if checked else check_local_launch(run)
    directory = run_dir(run)
    claim(run.results_dir, "results_dir", "results")
    if run.train.checkpoint_dir:
        claim(run.train.checkpoint_dir, "train.checkpoint_dir", "checkpoints")
    config_path = save_resolved_config(run, directory / CONFIG_FILE)
    os.environ.setdefault(COMMAND_ENV, shlex.join(getattr(sys, "orig_argv", sys.argv)))
    processes = run.parallel.num_gpus
    if processes == 1:
        from optbench.engine.local.trainer import train

        train(run, directory)
        return directory
    from optbench.engine.local.runtime import threads_per_process

    env = {**os.environ, "OMP_NUM_THREADS": str(threads_per_process(processes))}
    result = subprocess.run(torchrun_command(config_path, processes), env=env)
    if result.returncode == 2:  # the engine already printed its one-line error
        raise SystemExit(2)
    if result.returncode != 0:
        raise UserError(
            f"the local engine's processes failed (exit code {result.returncode}); see the output above", "pretrain"
        )
    return directory
