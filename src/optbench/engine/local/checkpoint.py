"""Checkpoints of the local engine: crash-safe, per rank, resumable bit for bit on CPU.

Layout under the checkpoint directory (``train.checkpoint_dir``, default
``<results_dir>/checkpoints/<run_id>``)::

    step_000010/model.pt        model weights and buffers (written by rank 0: the replicas are identical)
    step_000010/rank0.pt        this rank's optimizer state, RNG states, step, samples consumed, world size
    step_000010/rank1.pt        ... step_000010/manifest.json   written last, by rank 0: step, world size, and every
    file's size and SHA-256 latest                      "step_000010", replaced atomically once the manifest is written

Every file is written to a temporary name, fsynced and renamed, so a killed run leaves either the
previous checkpoint or the new one, never a torn file; ``latest`` only moves after a barrier. Under
the layer-wise distributed optimizer each rank holds the state of the parameters it owns, so a
checkpoint resumes only with the same number of processes. The last :data:`KEEP` complete step
directories are kept.

A checkpoint is *complete* when its manifest reads and every file it lists has the size and hash
recorded. Resuming loads the one ``latest`` names (or ``train.resume_step``); if that one is not
complete (a truncated, emptied, missing or altered file, a garbage or escaping ``latest``) or does
not fit the model, the error names it in one line and offers the last complete checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from optbench.config.schema import RunConfig
from optbench.engine.local.resume_keys import RESUME_MUST_MATCH
from optbench.common.errors import UserError
from optbench.common.io import atomic_write_text, atomic_write_with

LATEST = "latest"
MANIFEST = "manifest.json"
KEEP = 2
"""Complete checkpoints kept: the newest, and the one before it to fall back to."""
STEP_DIR = re.compile(r"step_(\d{6,12})")


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


def _digest(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


def _write_manifest(folder: Path, step: int, world: int, fingerprint: dict[str, Any]) -> None:
    files = ["model.pt", *(f"rank{r}.pt" for r in range(world))]
    manifest = {
        "step": step,
        "world": world,
        "run": fingerprint,
        "files": {name: {"bytes": (folder / name).stat().st_size, "sha256": _digest(folder / name)} for name in files},
    }
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=2) + "\n")


def save_checkpoint(run: RunConfig, step: int, model: nn.Module, optimizer: Any, rank: int, world: int) -> Path:
    """Write this rank's part of the checkpoint of ``step``; rank 0 seals it and moves ``latest``."""
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
        _write_manifest(folder, step, world, run_fingerprint(run))
        atomic_write_text(root / LATEST, _step_name(step) + "\n")
        for old in sorted(_step_dirs(root))[:-KEEP]:
            shutil.rmtree(old[1], ignore_errors=True)
    _barrier(world)
    return folder


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every step directory under ``root``."""
    if not root.is_dir():
        return []
    return sorted((int(m[1]), p) for p in root.iterdir() if (m := STEP_DIR.fullmatch(p.name)) and p.is_dir())


MAX_MANIFEST_BYTES = 1 << 20
"""A manifest lists a few files: anything larger was not written by us."""
SHA256 = re.compile(r"[0-9a-f]{64}")
FILE_NAME = re.compile(r"model\.pt|rank\d{1,6}\.pt")


def run_fingerprint(run: RunConfig) -> dict[str, Any]:
    """The settings a checkpoint is only valid for (RESUME_MUST_MATCH), as plain JSON values."""
    from optbench.config.serialize import run_config_to_dict

    config = run_config_to_dict(run)
    found: dict[str, Any] = {}
    for key in RESUME_MUST_MATCH:
        node: Any = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        found[key] = node
    return json.loads(json.dumps(found, default=str))


def _manifest(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The manifest of ``folder`` when it has the shape we write, else (None, why)."""
    path = folder / MANIFEST
    if not path.exists() and not path.is_symlink():
        return None, f"no {MANIFEST} (the save did not finish)"
    try:
        if not path.is_file() or path.stat().st_size > MAX_MANIFEST_BYTES:
            return None, f"{MANIFEST} is not a manifest file we wrote"
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as err:
        return None, f"unreadable {MANIFEST} ({type(err).__name__})"
    files = data.get("files") if isinstance(data, dict) else None
    shaped = (
        isinstance(data, dict)
        and type(data.get("step")) is int
        and data["step"] >= 0
        and type(data.get("world")) is int
        and data["world"] >= 1
        and isinstance(files, dict)
        and bool(files)
        and all(
            isinstance(name, str)
            and FILE_NAME.fullmatch(name)
            and isinstance(entry, dict)
            and type(entry.get("bytes")) is int
            and entry["bytes"] >= 0
            and isinstance(entry.get("sha256"), str)
            and SHA256.fullmatch(entry["sha256"])
            for name, entry in files.items()
        )
    )
    if not shaped:
        return None, f"{MANIFEST} does not have the shape optbench writes (step, world, files with bytes and sha256)"
    return data, None


def checkpoint_problem(folder: Path, world: int | None = None, fingerprint: dict[str, Any] | None = None) -> str | None:
    """Why ``folder`` is not a complete checkpoint (None when it is); with ``fingerprint``, also one of another run."""
    if not folder.is_dir() or folder.is_symlink():
        return f"{folder.name} is not a checkpoint folder"
    manifest, problem = _manifest(folder)
    if manifest is None:
        return problem
    files, step, written_by = manifest["files"], manifest["step"], manifest["world"]
    if world is not None and written_by != world:
        return f"written by {written_by} processes, this run has {world}; resume with parallel.num_gpus={written_by}"
    if folder.name != _step_name(step):
        return f"{MANIFEST} says step {step}"
    saved = manifest.get("run")
    if fingerprint is not None and isinstance(saved, dict):
        changed = [key for key, value in fingerprint.items() if key in saved and saved[key] != value]
        if changed:
            return f"it was written by a run with another {changed[0]} (a checkpoint of another run)"
    for name, expected in files.items():
        path = folder / name
        if not path.is_file() or path.is_symlink():
            return f"{name} is missing"
        if path.stat().st_size != expected["bytes"]:
            return (
                f"{name} has {path.stat().st_size:,} bytes, {expected['bytes']:,} were written (truncated or replaced)"
            )
        if _digest(path) != expected["sha256"]:
            return f"{name} does not match the hash written with it (altered or corrupt)"
    return None


def complete_steps(root: Path, world: int | None = None, fingerprint: dict[str, Any] | None = None) -> list[int]:
    """Steps of the complete checkpoints under ``root`` (of the run with ``fingerprint``), oldest first."""
    return [step for step, folder in _step_dirs(root) if checkpoint_problem(folder, world, fingerprint) is None]


def _pointer(root: Path) -> tuple[Path | None, str | None]:
    """The step folder ``latest`` names, or why the pointer is unusable (None, None: no pointer)."""
    pointer = root / LATEST
    if not pointer.exists() and not pointer.is_symlink():
        return None, None
    if not pointer.is_file() or pointer.is_symlink() or pointer.stat().st_size > 64:
        return None, f"{pointer} is not a pointer optbench wrote (a short text file naming a step folder)"
    try:
        name = pointer.read_bytes()[:256].decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None, f"{pointer} is not text"
    if not STEP_DIR.fullmatch(name):
        return None, f"{pointer} names {name[:40]!r}, not a step folder of {root}"
    return root / name, None


def latest_step_dir(root: Path) -> Path | None:
    """The checkpoint ``latest`` points to, or None (no checkpoint or an unusable pointer)."""
    folder, _ = _pointer(root)
    return folder if folder is not None and folder.is_dir() else None


def has_checkpoint(root: Path) -> bool:
    """Whether a run wrote any checkpoint (complete or not) under ``root``."""
    return (root / LATEST).exists() or bool(_step_dirs(root))


RANK_FIELDS = frozenset({"step", "samples", "world", "optimizer", "rng"})
"""What every rank file holds (:func:`save_checkpoint`)."""


def fit_problem(run: RunConfig, folder: Path, world: int) -> str | None:
    """Why the complete checkpoint in ``folder`` cannot be loaded into this run (None when it can): model.pt's
    tensors by name and shape against the run's model (built on the meta device, no memory), every rank file's
    fields and step. Loads the files (the local engine's proxies are small): the launcher calls it before it
    writes anything, so that a checkpoint of another model, or a rank file that is not one, is refused then."""
    from optbench.engine.local.model import build_model

    step = int(folder.name.removeprefix("step_"))
    try:
        with torch.device("meta"):
            expected = {
                k: tuple(v.shape) for k, v in build_model(run.model, run.train.seed, "meta").state_dict().items()
            }
        saved = torch.load(folder / "model.pt", map_location="cpu", weights_only=True)
        if not isinstance(saved, dict):
            return "model.pt holds no model weights"
        shapes = {k: tuple(v.shape) for k, v in saved.items() if isinstance(v, torch.Tensor)}
        differ = sorted(k for k in expected.keys() | shapes.keys() if expected.get(k) != shapes.get(k))
        if differ:
            name = differ[0]
            return (
                f"model.pt holds another model ({name}: {list(shapes[name]) if name in shapes else 'absent'} there, "
                f"{list(expected[name]) if name in expected else 'absent'} in this run's)"
            )
        for rank in range(world):
            payload = torch.load(folder / f"rank{rank}.pt", map_location="cpu", weights_only=False)
            if (
                not isinstance(payload, dict)
                or not RANK_FIELDS <= payload.keys()
                or payload["step"] != step
                or not isinstance(payload["optimizer"], dict)
            ):
                return (
                    f"rank{rank}.pt is not a rank file of step {step} (its fields or step differ from what a "
                    "save writes)"
                )
    except Exception as err:  # noqa: BLE001 - any unpickling failure of a file is the file's problem, said in one line
        return f"its files cannot be loaded ({type(err).__name__}: {' '.join(str(err).split())[:120]})"
    return None


def _offer(
    root: Path,
    world: int,
    bad: str,
    fingerprint: dict[str, Any] | None = None,
    run: RunConfig | None = None,
    refused: Path | None = None,
) -> UserError:
    """One line naming the bad checkpoint and the last complete one to resume from (never ``refused``; with ``run``,
    the newest one that also fits it)."""
    complete = [step for step in complete_steps(root, world, fingerprint) if root / _step_name(step) != refused]
    if run is not None:
        complete = next(([s] for s in reversed(complete) if fit_problem(run, root / _step_name(s), world) is None), [])
    fix = (
        f"the last complete checkpoint is step {complete[-1]}: add train.resume_step={complete[-1]} to continue from it"
        if complete
        else "no complete checkpoint is left: start over with a new run_id (or delete the folder)"
    )
    return UserError(f"{bad}; {fix}", "resume")


def choose_checkpoint(run: RunConfig, world: int, check_fit: bool = True) -> Path | None:
    """The complete checkpoint to resume from: train.resume_step, else ``latest``; None if the run saved none.

    Checks manifests, hashes and the fit of the files to the run's model: the launcher calls it before it writes
    anything."""
    root = checkpoint_dir(run)
    mine = run_fingerprint(run)
    if root.exists() and not root.is_dir():
        raise _offer(root, world, f"{root} is not a folder of checkpoints")
    if run.train.resume_step is not None:
        folder = root / _step_name(run.train.resume_step)
        if not folder.is_dir():
            raise _offer(root, world, f"no checkpoint of step {run.train.resume_step} under {root}", mine)
    else:
        if not has_checkpoint(root):
            return None
        folder, pointer_problem = _pointer(root)
        if pointer_problem is not None:
            raise _offer(root, world, f"checkpoint pointer {pointer_problem}", mine)
        if folder is None or not folder.is_dir():
            raise _offer(root, world, f"{root / LATEST} names a step folder that does not exist", mine)
    problem = checkpoint_problem(folder, world, mine) or (fit_problem(run, folder, world) if check_fit else None)
    if problem is not None:
        raise _offer(root, world, f"checkpoint {folder} is not usable: {problem}", mine, run, refused=folder)
    return folder


def load_checkpoint(run: RunConfig, model: nn.Module, optimizer: Any, rank: int, world: int) -> Resumed | None:
    """Restore model, optimizer and RNG states from the chosen checkpoint; None when the run saved none yet."""
    folder = choose_checkpoint(run, world, check_fit=False)  # the launcher checked the fit; this loads the files
    if folder is None:
        return None
    try:
        mine = torch.load(folder / f"rank{rank}.pt", map_location="cpu", weights_only=False)
        model.load_state_dict(torch.load(folder / "model.pt", map_location="cpu", weights_only=True))
        optimizer.load_state_dict(mine["optimizer"])
        set_rng_state(mine["rng"])
        return Resumed(step=int(mine["step"]), samples=int(mine["samples"]))
    except Exception as err:  # a checkpoint written for another model or optimizer setup
        reason = " ".join(str(err).split())[:200]
        raise _offer(
            checkpoint_dir(run),
            world,
            f"checkpoint {folder} does not fit this run ({reason})",
            run_fingerprint(run),
            refused=folder,
        ) from err
