"""Checkpoints of the local engine: crash-safe, per rank, resumable bit for bit on CPU.

Layout under the checkpoint directory (``train.checkpoint_dir``, default
``<results_dir>/checkpoints/<run_id>``)::

    step_000010/model.pt   model weights and buffers (written by rank 0: the replicas are identical)
    step_000010/rank0.pt   this rank's optimizer state, RNG states, step, samples consumed, world size
    step_000010/rank1.pt   ...
    latest                 "step_000010", replaced atomically once every rank's file is complete

Every file is written to a temporary name, fsynced and renamed, so a killed run leaves either the
previous checkpoint or the new one, never a torn file; ``latest`` only moves after a barrier. Under
the layer-wise distributed optimizer each rank holds the state of the parameters it owns, so a
checkpoint resumes only with the same number of processes. Older step directories are removed once
``latest`` points past them.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from optbench.config.schema import RunConfig
from optbench.errors import UserError
from optbench.io import atomic_write_text, atomic_write_with

LATEST = "latest"


def checkpoint_dir(run: RunConfig) -> Path:
    """Where this run's checkpoints go."""
    if run.train.checkpoint_dir:
        return Path(run.train.checkpoint_dir)
    return Path(run.results_dir) / "checkpoints" / str(run.run_id)


def _step_name(step: int) -> str:
    return f"step_{step:06d}"


def _atomic_torch_save(obj: Any, path: Path) -> None:
    atomic_write_with(path, lambda handle: torch.save(obj, handle))


def rng_state() -> dict[str, Any]:
    """Every random generator the training loop could touch."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass(frozen=True)
class Resumed:
    """What a loaded checkpoint says about the run."""

    step: int
    """Optimizer steps already done."""
    samples: int
    """Global samples consumed (step * gbs)."""


def _barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


def save_checkpoint(
    run: RunConfig, step: int, model: nn.Module, optimizer: Any, rank: int, world: int
) -> Path:
    """Write this rank's part of the checkpoint of ``step``; rank 0 moves ``latest`` once all are written."""
    root = checkpoint_dir(run)
    folder = root / _step_name(step)
    payload = {
        "step": step,
        "samples": step * run.train.gbs,
        "world": world,
        "optimizer": optimizer.state_dict(),
        "rng": rng_state(),
    }
    if rank == 0:
        _atomic_torch_save(model.state_dict(), folder / "model.pt")
    _atomic_torch_save(payload, folder / f"rank{rank}.pt")
    _barrier(world)
    if rank == 0:
        atomic_write_text(root / LATEST, _step_name(step) + "\n")
        for old in root.glob("step_*"):
            if old.name != folder.name:
                shutil.rmtree(old, ignore_errors=True)
    _barrier(world)
    return folder


def latest_step_dir(root: Path) -> Path | None:
    """The checkpoint ``latest`` points to, or None."""
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    folder = root / pointer.read_text().strip()
    return folder if folder.is_dir() else None


def load_checkpoint(run: RunConfig, model: nn.Module, optimizer: Any, rank: int, world: int) -> Resumed:
    """Restore model, optimizer and RNG states from the latest checkpoint of ``run.run_id``."""
    root = checkpoint_dir(run)
    folder = latest_step_dir(root)
    if folder is None:
        raise UserError(f"no checkpoint under {root} to resume from; run without resume=true", "resume")
    mine = torch.load(folder / f"rank{rank}.pt", map_location="cpu", weights_only=False)
    if mine["world"] != world:
        raise UserError(
            f"the checkpoint was written by {mine['world']} processes, this run has {world}; "
            f"resume with parallel.num_gpus={mine['world']}",
            "parallel.num_gpus",
        )
    model.load_state_dict(torch.load(folder / "model.pt", map_location="cpu", weights_only=True))
    optimizer.load_state_dict(mine["optimizer"])
    set_rng_state(mine["rng"])
    return Resumed(step=mine["step"], samples=mine["samples"])
