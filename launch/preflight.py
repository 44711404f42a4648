"""What a first cluster run would find missing, said before it is submitted: one note line each.

Each check reads this machine (the login node a job is rendered or submitted from) and the run's cluster settings;
none refuses, because a login node may see less than the compute nodes do (docs/cluster.md section 1 lists each
prerequisite and how to check it by hand). A check that cannot tell says nothing.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from functools import lru_cache
from pathlib import Path

from optbench.config.schema import RunConfig

HF_CACHE_VARIABLES = ("HF_HOME", "HF_HUB_CACHE")
"""The variables that point Hugging Face at a cache (HF_HUB_CACHE wins over HF_HOME/hub where both are set)."""
CREDENTIALS_GUIDE = "docs/cluster.md section 1"


def cluster_notes(run: RunConfig, env: dict[str, str], mounts: list[str], segment: int | None) -> tuple[str, ...]:
    """The notes for a Slurm job with environment ``env``, container ``mounts`` (host:container) and
    ``#SBATCH --segment`` (None: not asked for)."""
    found = [
        _hub_cache_note(run, env, mounts),
        _enroot_credentials_note(run.cluster.container_image),
        _pyxis_note(),
        _segment_note(segment),
    ]
    return tuple(note for note in found if note)


def _hub_cache_note(run: RunConfig, env: dict[str, str], mounts: list[str]) -> str | None:
    if run.engine != "megatron_bridge":
        return None
    from optbench.engine.bridge.adapter import bridge_recipe

    hub = bridge_recipe(run).hf_config
    if not hub:
        return None
    offline = (
        " (the job sets TRANSFORMERS_OFFLINE=1, as NVIDIA's launcher does)"
        if env.get("TRANSFORMERS_OFFLINE") == "1"
        else ""
    )
    variable = next((name for name in HF_CACHE_VARIABLES if env.get(name)), None)
    if variable is None:
        return (
            f"note: hub config: Bridge reads {hub}'s config.json when it builds the model and the job names no "
            f"Hugging Face cache{offline}; download it once and mount it (cluster.env.HF_HOME and "
            "cluster.container_mounts: docs/cluster.md, 'The Hugging Face configs the recipes read')"
        )
    cache = Path(env[variable])
    inside = [mount.split(":")[1] if ":" in mount else mount for mount in mounts]
    if not any(cache == Path(path) or Path(path) in cache.parents for path in inside):
        return (
            f"note: hub config: cluster.env.{variable}={cache} is inside no container mount, so the job cannot "
            f"read {hub}'s config.json from it{offline}; add the folder to cluster.container_mounts"
        )
    return None


def _enroot_credentials_note(image: str | None) -> str | None:
    """pyxis pulls the image with enroot, which reads registry logins from $ENROOT_CONFIG_PATH/.credentials
    (default ~/.config/enroot); nvcr.io needs one. Only whether a machine line for the registry exists is read:
    the file holds a secret and nothing of it is printed."""
    registry = (image or "").split("/", 1)[0]
    if registry != "nvcr.io":
        return None
    folder = Path(os.environ.get("ENROOT_CONFIG_PATH") or Path.home() / ".config" / "enroot")
    credentials = folder / ".credentials"
    text = _credentials_text(credentials)
    if text is None:
        return (
            (
                f"note: enroot: {credentials} is not a regular file optbench can read; pyxis pulls {image} with the "
                f"logins enroot reads from it ({CREDENTIALS_GUIDE})"
            )
            if os.path.lexists(credentials)
            else (
                f"note: enroot: no {credentials}; pyxis pulls {image} with the logins enroot reads from it: add the "
                f"line 'machine {registry} login $oauthtoken password <your NGC API key>' ({CREDENTIALS_GUIDE})"
            )
        )
    if any(line.split()[:2] == ["machine", registry] for line in text.splitlines()):
        return None
    return (
        f"note: enroot: no login for {registry} in {credentials}; pyxis pulls {image} with it: add the line "
        f"'machine {registry} login $oauthtoken password <your NGC API key>' ({CREDENTIALS_GUIDE})"
    )


MAX_CREDENTIALS_BYTES = 1 << 20
"""A netrc-style file of logins is a few hundred bytes; only this much of it is read."""


def _credentials_text(path: Path) -> str | None:
    """The first :data:`MAX_CREDENTIALS_BYTES` of a regular file at ``path`` (links followed), None when there is none.
    Opened without blocking and checked after opening: a FIFO or a device there never stalls a login node."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None
        return os.read(handle, MAX_CREDENTIALS_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(handle)


def _help_text(program: str) -> str | None:
    """``<program> --help`` where it is on PATH (None when it is not, or does not answer in 10 s)."""
    path = shutil.which(program)
    return None if path is None else _help_of(path)


@lru_cache(maxsize=8)
def _help_of(path: str) -> str | None:
    """``<path> --help``, asked once per command: a sweep's points share the login node's srun and sbatch."""
    try:
        done = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout + done.stderr


def _pyxis_note() -> str | None:
    """pyxis adds --container-image to srun; the job's srun line uses it."""
    text = _help_text("srun")
    if text is None or "--container-image" in text:
        return None
    return (
        "note: pyxis: this machine's srun has no --container-image, which the job's srun line uses to run the NeMo "
        f"container; ask the cluster's admins for pyxis and enroot ({CREDENTIALS_GUIDE})"
    )


def _segment_note(segment: int | None) -> str | None:
    """--segment (Slurm 23.11+, the topology/block plugin) keeps a job's nodes in whole NVLink domains."""
    if segment is None:
        return None
    text = _help_text("sbatch")
    if text is None or "--segment" in text:
        return None
    return (
        f"note: slurm: this machine's sbatch has no --segment (Slurm before 23.11), and the job asks for "
        f"--segment={segment} to keep its nodes in whole NVLink domains; sbatch will refuse the script "
        "(docs/cluster.md section 1)"
    )
