"""One writer per run folder: an exclusive lock held while a process writes a run.

It sits below the run folders (``optbench.runs``) and the metrics writer alike: the writer takes the lock, the
local engine checks it before it starts a run.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from optbench.common.errors import UserError


def lock_run_dir(directory: Path) -> int | None:
    """Hold an exclusive lock on a run folder for as long as this process writes it; returns its handle.

    A second process writing the same run (the same run_id started twice) gets a one-line error
    instead of interleaving its steps into metrics.jsonl. File systems without locks (some Lustre
    mounts) return None: the run goes on unlocked.
    """
    directory.mkdir(parents=True, exist_ok=True)
    handle = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(handle)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise UserError(
                f"{directory} is being written by another process (the same run_id started twice); "
                "wait for it to end, or pick a new run_id",
                "run_id",
            ) from None
        return None
    return handle


def unlock_run_dir(handle: int | None) -> None:
    """Release a lock taken by :func:`lock_run_dir`."""
    if handle is not None:
        os.close(handle)


def check_run_dir_free(directory: Path) -> None:
    """Refuse now if another process holds the run folder's lock (nothing is created)."""
    if directory.is_dir():
        unlock_run_dir(lock_run_dir(directory))
