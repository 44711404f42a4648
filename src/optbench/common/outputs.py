"""Where a command may write, and how it replaces what it wrote before without ever losing anything else.

Three rules, shared by every command that writes (plan, pretrain and its checkpoints, sweep, table,
bench, study, compare, ``make data``):

1. **An output folder is new, or one optbench made.** A folder optbench creates as an output root
   holds a marker file ``.optbench-<kind>`` (``results``, ``corpus``, ``checkpoints``). An existing
   folder without the marker of its kind is refused, unless it is empty (then it is taken over). The
   checkout, any folder above it or above the working directory, the checkout's own source and config
   folders, the input of the command, files, devices, links, ``/proc``, ``/sys`` and ``/dev`` are never
   output folders. Each refusal is one line naming the field, the path and the fix.
2. **What is replaced is replaced as a whole, recoverably** (:mod:`optbench.common.replace`).
3. **Nothing outside the new output is deleted**: the only things ever removed are the set-aside
   copies of our own earlier outputs and what the failing command itself created.

Writes that fail for reasons of the file system (read-only, full, permission) end in one line naming
the output root's field (:func:`field_for_path`).
"""

from __future__ import annotations

import datetime as _dt
import errno
import os
import re
from typing import Any
from collections.abc import Callable, Sequence
from pathlib import Path

from optbench.common.checkout import repo_root
from optbench.common.errors import Problem, UserError
from optbench.common.io import NotOurFileError, atomic_write_text
from optbench.common.redact import secret_in_path

MARKER_PREFIX = ".optbench-"
KINDS = {
    "results": "results folder (plans, runs, tables)",
    "corpus": "corpus built by make data",
    "checkpoints": "checkpoint folder",
}
"""The kinds of output root and what each holds."""
SYSTEM_TREES = ("/proc", "/sys", "/dev")
"""Pseudo file systems that can never hold results."""
MAX_PATH = 1024
"""Longest output path we accept (Linux allows 4096; runs append their own sub-folders to it)."""
MAX_NAME_BYTES = 255
"""Longest single path component on Linux file systems."""
CHECKOUT_SOURCES = (
    ".git",
    ".ci",
    "conf",
    "recipes",
    "src",
    "launch",
    "tests",
    "tools",
    "docs",
    ".venv",
    ".venv-bridge",
)
"""Folders of the checkout that hold its code, configs and environments: never outputs, nor anything inside them."""

_claimed: dict[Path, str] = {}
"""Output roots claimed by this process and the field that named each (for one-line file-system errors)."""


def marker_path(folder: Path, kind: str) -> Path:
    return Path(folder) / f"{MARKER_PREFIX}{kind}"


def owned_kinds(folder: Path) -> list[str]:
    """The optbench kinds whose marker ``folder`` holds."""
    return [kind for kind in KINDS if marker_path(folder, kind).is_file()]


def _checkouts() -> list[Path]:
    """The checkout whose code runs, and the one in the working directory (make's), resolved."""
    found = []
    try:
        found.append(repo_root().resolve())
    except UserError:
        pass
    cwd = Path.cwd().resolve()
    if (cwd / "recipes").is_dir() and (cwd / "conf").is_dir():
        found.append(cwd)
    return list(dict.fromkeys(found))


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def short_path(path: Path | str, limit: int = 80) -> str:
    """A path cut to ``limit`` characters for a one-line message."""
    text = str(path)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _place_problem(path: Path, inputs: Sequence[Path]) -> str | None:
    """Why ``path`` can never be an output folder (whatever it holds), or None."""
    absolute = Path(os.path.abspath(path))
    resolved = absolute.resolve()
    for candidate in (absolute, resolved):
        tree = next((t for t in SYSTEM_TREES if _within(candidate, Path(t))), None)
        if tree is not None:
            return f"{short_path(path)} is under {tree}, which cannot hold outputs"
    if resolved == Path(resolved.anchor):
        return f"{short_path(path)} is the root of the file system"
    checkouts = _checkouts()
    for name, guarded in (("the working directory", Path.cwd().resolve()), *(("the checkout", c) for c in checkouts)):
        if _within(guarded, resolved):
            return f"{short_path(path)} is {name}" + (
                "" if guarded == resolved else f" or a folder above it ({guarded})"
            )
    for checkout in checkouts:
        for name in CHECKOUT_SOURCES:
            if _within(resolved, checkout / name):
                return f"{short_path(path)} is inside the checkout's {name}/ folder, which holds code or configs"
    for source in inputs:
        source = Path(os.path.abspath(source)).resolve()
        if _within(resolved, source) or _within(source, resolved):
            relation = "is" if resolved == source else ("is inside" if _within(resolved, source) else "holds")
            return f"{short_path(path)} {relation} the input {short_path(source)}"
    if absolute.is_symlink():
        return f"{short_path(path)} is a symbolic link; give the folder it points to"
    if absolute.exists() and not absolute.is_dir():
        what = "a file" if absolute.is_file() else "a device or special file"
        return f"{short_path(path)} is {what}, not a folder"
    existing = absolute
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{short_path(path)} lies under {short_path(existing)}, which is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{short_path(existing)} is not writable"
    return None


def _text_problem(text: str) -> str | None:
    if not text or any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        return "must be a folder path on one line"
    if len(text) > MAX_PATH or any(
        len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES for part in Path(text).parts
    ):
        return f"path too long ({len(text):,} characters); use at most {MAX_PATH} and {MAX_NAME_BYTES} per folder name"
    return None


def is_earlier_checkpoints(folder: Path) -> bool:
    """Whether ``folder`` holds only the step folders (each with its manifest) and pointer of an earlier local run."""
    entries = list(folder.iterdir())
    steps = [p for p in entries if re.fullmatch(r"step_\d{6,12}", p.name)]
    return bool(steps) and all(
        (p in steps and p.is_dir() and not p.is_symlink() and (p / "manifest.json").is_file())
        or (p.name == "latest" and p.is_file() and not p.is_symlink())
        or re.fullmatch(r"\.latest\..+\.tmp", p.name)
        for p in entries
    )


EARLIER = {"checkpoints": is_earlier_checkpoints}
"""Per kind: how to recognise a folder an earlier optbench wrote before it marked its folders."""


def output_problem(
    path: str | Path, kind: str, inputs: Sequence[str | Path] = (), earlier: Callable[[Path], bool] | None = None
) -> str | None:
    """Why ``path`` cannot be used as an output root of ``kind`` (None when it can), without touching it.

    ``earlier``: recognises an unmarked folder that an earlier optbench wrote as this kind (default
    :data:`EARLIER`); such a folder is accepted and marked when claimed."""
    problem = _text_problem(str(path)) if isinstance(path, str) else None
    if problem is not None:
        return problem
    source = secret_in_path(str(path))
    if source is not None:
        return (
            f"holds the value of {source}, a secret: every file and printed line hides it, so the path they name "
            "would not exist; choose a path without it"
        )
    folder = Path(path).expanduser()
    problem = _place_problem(folder, [Path(i) for i in inputs])
    if problem is not None:
        return problem
    if not folder.is_dir():
        return None  # new: created by the command
    kinds = owned_kinds(folder)
    if kind in kinds:
        return None
    if kinds:
        return f"{short_path(path)} holds optbench's {KINDS[kinds[0]]}, not a {KINDS[kind]}"
    earlier = earlier or EARLIER.get(kind)
    try:
        with os.scandir(folder) as entries:
            empty = next(entries, None) is None
        if empty or (earlier is not None and earlier(folder)):
            return None
    except OSError as err:
        return f"{short_path(path)} cannot be read ({err.strerror})"
    return (
        f"{short_path(path)} exists and optbench did not create it (no {marker_path(Path('.'), kind).name} marker): "
        f"its files would be at risk; give a new or empty folder (an earlier optbench {kind} folder: add the marker "
        f"with `touch {short_path(marker_path(folder, kind), 200)}`)"
    )


def check_output(
    path: str | Path,
    field: str,
    kind: str,
    inputs: Sequence[str | Path] = (),
    earlier: Callable[[Path], bool] | None = None,
) -> Path:
    """Raise a one-line UserError on ``field`` when ``path`` cannot be an output root of ``kind``."""
    problem = output_problem(path, kind, inputs, earlier)
    if problem is not None:
        raise UserError(Problem(field, f"{problem}; nothing was written"))
    remember(Path(path).expanduser(), field)
    return Path(path).expanduser()


def claim(
    path: str | Path,
    field: str,
    kind: str,
    inputs: Sequence[str | Path] = (),
    earlier: Callable[[Path], bool] | None = None,
) -> Path:
    """Check ``path`` (:func:`check_output`), create it if missing and mark it as an optbench output of ``kind``."""
    folder = check_output(path, field, kind, inputs, earlier)
    folder.mkdir(parents=True, exist_ok=True)
    marker = marker_path(folder, kind)
    if not marker.is_file():
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        atomic_write_text(
            marker, f"created by optbench as a {KINDS[kind]} on {stamp}; optbench writes only in folders marked so\n"
        )
    remember(folder, field)
    return folder


def check_writable(path: str | Path, field: str) -> None:
    """Refuse now (one line, nothing written) when the folder ``path`` would be made in cannot be written."""
    existing = Path(os.path.abspath(path))
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(
            Problem(
                field,
                f"{short_path(existing)} is a file, not a folder, so {short_path(path)} cannot be "
                "written; nothing was written",
            )
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(
            Problem(
                field,
                f"{short_path(existing)} is not writable (read-only, or not yours), so "
                f"{short_path(path)} cannot be written; nothing was written",
            )
        )


def remember(folder: str | Path, field: str) -> None:
    """Name ``field`` in a file-system error under ``folder`` (see :func:`field_for_path`)."""
    _claimed[Path(os.path.abspath(folder))] = field


def field_for_path(path: str | Path | None) -> str:
    """The field that named the output root holding ``path`` ("path" when none does: an input, say)."""
    if path is None:
        return "path"
    target = Path(os.path.abspath(path))
    roots = sorted((root for root in _claimed if _within(target, root)), key=lambda r: len(r.parts), reverse=True)
    return _claimed[roots[0]] if roots else "path"


FILESYSTEM_ERRNOS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.ENAMETOOLONG: "name too long",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "is a folder",
    errno.EXDEV: "crosses file systems",
    errno.EBUSY: "busy (a mount point?)",
    errno.ELOOP: "too many symbolic links",
    errno.EIO: "input/output error",
    errno.EEXIST: "already exists (a file where a folder is needed?)",
}
"""File-system failures a user can fix (and their plain words), reported in one line instead of a traceback."""


def filesystem_problem(err: OSError) -> Problem | None:
    """The one-line problem for a file-system failure a user can fix, or None for anything else."""
    name = err.filename if isinstance(err.filename, (str, bytes, os.PathLike)) else None
    where = short_path(os.fsdecode(name), 160) if name is not None else "a file"
    if isinstance(err, NotOurFileError):
        return Problem(
            field_for_path(os.fsdecode(name) if name is not None else None),
            f"{where} is not a file optbench wrote (a folder, link or device): it is never replaced; move it away "
            "or choose another folder",
        )
    if err.errno not in FILESYSTEM_ERRNOS:
        return None
    return Problem(
        field_for_path(os.fsdecode(name) if name is not None else None),
        f"cannot write or read {where}: {FILESYSTEM_ERRNOS[err.errno]}; make it writable, free space, or choose "
        "another folder (earlier outputs are kept)",
    )


def run_in_results_dir(args: Any) -> int:
    """Run ``args.func(args)`` for a command that writes under ``args.results_dir`` (make table, compare, study): the
    folder is checked before any run or table is computed."""
    check_output(str(args.results_dir), "results_dir", "results")
    return args.func(args)
