"""Replace earlier outputs as a whole, so that an error, Ctrl-C or a kill at any instant loses nothing.

:func:`replacing` checks every target first (a file where a file goes, a folder holding only what the
command writes where a folder goes), then writes a journal beside them
(``.optbench-journal-<pid>-<token>.json``) before it sets anything aside (``.<name>.previous-<token>``: a folder
moved, a file copied). The block's own failure restores the earlier outputs at once; a process killed at any instant
leaves a journal that the next :func:`replacing` (or :func:`recover`) of the same folder reads: before the
commit it restores the earlier outputs (removing what the killed block had written), after it it only
removes the set-aside copies.

A journal is acted on only where it was written: its folder's path and identity (device, inode) and
its host are recorded, its entries are names under that folder, and its set-aside copies carry its
random token. A journal copied with its folder, moved, forged or left by another version is never acted
on: it is reported in one line and left where it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from optbench.common.errors import Problem, UserError
from optbench.common.io import atomic_write_json, remove_path
from optbench.common.outputs import field_for_path, short_path

JOURNAL_PREFIX = ".optbench-journal-"
ASIDE_INFIX = ".previous-"
JOURNAL_FORMAT = 2
"""Format 1 (before 2026-11-27) named absolute paths and no token: such journals are reported, never acted on."""
_JOURNAL_NAME = re.compile(rf"{re.escape(JOURNAL_PREFIX)}(\d+)-([0-9a-f]{{32}})\.json")
MAX_JOURNAL_BYTES = 1 << 20


@dataclass(frozen=True)
class Folder:
    """A folder replaced as a whole."""

    path: str | Path
    holds: Callable[[Path], bool] | None = None
    """Whether an entry of the earlier folder is one this command writes (an earlier folder holding anything else is
    refused: its files would be lost); None: the folder is a tool's own work area (NeMo-Run's), all of it replaced."""


def _process_start(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot, /proc), so that a reused pid is not taken for the writer."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return started is None or _process_start(pid) in (None, started)


def _folder_id(folder: Path) -> list[int]:
    info = os.stat(folder)
    return [info.st_dev, info.st_ino]


def _entry_name(name: Any) -> bool:
    """A journal entry names a path under the journal's folder: relative, normalised, no '..'."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\x00" in name:
        return False
    parts = PurePosixPath(name).parts
    return str(PurePosixPath(*parts)) == name and not any(part in (".", "..") for part in parts)


def _aside(path: Path, token: str) -> Path:
    return path.with_name(f".{path.name}{ASIDE_INFIX}{token}")


def _ours(journal: Path) -> dict[str, Any] | None:
    """The journal's record when this checkout's optbench wrote it here, on this host; else None."""
    match = _JOURNAL_NAME.fullmatch(journal.name)
    try:
        if match is None or journal.is_symlink() or journal.stat().st_size > MAX_JOURNAL_BYTES:
            return None
        data = json.loads(journal.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != JOURNAL_FORMAT:
        return None
    entries = data.get("entries")
    folder = journal.parent
    good = (
        data.get("pid") == int(match[1])
        and data.get("token") == match[2]
        and data.get("host") == socket.gethostname()
        and data.get("folder") == os.path.realpath(folder)
        and data.get("folder_id") == _folder_id(folder)
        and data.get("state") in ("started", "committed")
        and isinstance(entries, list)
        and entries
        and all(
            isinstance(e, dict)
            and _entry_name(e.get("name"))
            and isinstance(e.get("existed"), bool)
            and e.get("kind") in ("file", "folder")
            for e in entries
        )
    )
    return data if good else None


def _kind_matches(path: Path, kind: str) -> bool:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(mode) if kind == "folder" else stat.S_ISREG(mode)


def _restore(folder: Path, token: str, entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        path = folder / entry["name"]
        aside = _aside(path, token)
        if entry["existed"]:
            if aside.exists() or aside.is_symlink():
                if entry["kind"] == "folder" and _kind_matches(path, "folder"):
                    remove_path(path)
                os.replace(aside, path)
        elif _kind_matches(path, entry["kind"]):
            remove_path(path)  # what the interrupted block created where nothing was


def _drop_asides(folder: Path, token: str, entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        remove_path(_aside(folder / entry["name"], token))


_reported: set[Path] = set()
"""Journals not ours already reported by this process (one line each)."""


def recover(folder: Path, paths: Sequence[Path] = ()) -> list[str]:
    """Finish what a killed optbench command left in ``folder``: restore its set-aside outputs, or drop them once it
    had committed. Returns one line per journal recovered or left alone.

    A journal of a process still running that touches one of ``paths`` is a one-line refusal (the same output
    written twice at once)."""
    notes: list[str] = []
    if not folder.is_dir() or folder.is_symlink():
        return notes
    wanted = {os.path.abspath(p) for p in paths}
    for journal in sorted(folder.glob(f"{JOURNAL_PREFIX}*")):
        data = _ours(journal)
        if data is None:
            if journal not in _reported:
                _reported.add(journal)
                notes.append(
                    f"note: left alone {short_path(journal, 120)}: not a journal this optbench wrote in this "
                    "folder (copied, moved, or from another version); nothing it names was touched; remove it "
                    "once you have checked the .previous copies beside it"
                )
            continue
        entries, token = data["entries"], data["token"]
        touched = sorted(wanted & {os.path.abspath(folder / e["name"]) for e in entries})
        if data["pid"] != os.getpid() and _alive(data["pid"], data.get("started")):
            if touched:
                raise UserError(
                    Problem(
                        field_for_path(touched[0]),
                        f"{short_path(touched[0])} is being written by process {data['pid']}; wait for it to end",
                    )
                )
            continue
        if data["state"] == "committed":
            _drop_asides(folder, token, entries)
        else:
            _restore(folder, token, entries)
            restored = ", ".join(e["name"] for e in entries if e["existed"]) or "nothing earlier"
            notes.append(
                f"note: in {short_path(folder)}: restored {restored} as it was before an interrupted command "
                f"(process {data['pid']})"
            )
        journal.unlink(missing_ok=True)
    return notes


def recover_beside(paths: Sequence[str | Path]) -> None:
    """:func:`recover` the folders that would hold ``paths``, printing its notes: before a command checks or writes
    them."""
    targets = [Path(os.path.abspath(p)) for p in paths]
    for folder in dict.fromkeys(p.parent for p in targets):
        for note in recover(folder, targets):
            print(note, flush=True)


def _refuse(path: Path, why: str) -> UserError:
    return UserError(Problem(field_for_path(path), f"{short_path(path, 200)} {why}; nothing was written"))


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _check_target(path: Path, folder: Folder | None) -> None:
    """Refuse a target that cannot be replaced: one of another kind, a folder that holds what the command does not
    write, a read-only place or a mount point (found before anything is written, so that a refusal writes nothing)."""
    holder = path.parent
    while not holder.exists() and holder != holder.parent:
        holder = holder.parent
    if not holder.is_dir() or not os.access(holder, os.W_OK | os.X_OK) or _read_only(holder):
        raise _refuse(holder, "is read-only, not a folder, or not yours, so nothing in it can be written")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if os.path.ismount(path) or _read_only(path):
        raise _refuse(path, "is a mount point or read-only, so it cannot be replaced")
    if folder is None and not stat.S_ISREG(mode):
        what = "a folder" if stat.S_ISDIR(mode) else "a link or special file"
        raise _refuse(path, f"is {what} where a file is written: move it away or choose another folder")
    if folder is not None:
        if not stat.S_ISDIR(mode):
            raise _refuse(path, "is a file, link or special file where a folder is written: move it away")
        if folder.holds is not None:
            strange = sorted(p.name for p in path.iterdir() if not folder.holds(p))
            if strange:
                raise _refuse(
                    path,
                    f"holds {strange[0]!r}"
                    + (f" and {len(strange) - 1} more" if len(strange) > 1 else "")
                    + ", which this command did not write, and the folder is replaced as a whole: move it out",
                )


def _set_aside(path: Path, aside: Path, kind: str) -> None:
    """Keep the earlier output as ``aside``: a folder is moved; a file is copied, so that it stays in place, readable,
    until the block writes its new content (a copy, not a link: a block that rewrote the file in place would change
    a link's content too)."""
    if kind == "folder":
        os.rename(path, aside)
    else:
        shutil.copy2(path, aside)


def _home(targets: list[Path]) -> Path:
    return Path(os.path.commonpath([str(p.parent) for p in targets]))


@contextlib.contextmanager
def replacing(files: Sequence[str | Path] = (), folders: Sequence[Folder] = ()) -> Iterator[None]:
    """Let a block replace ``files`` and ``folders`` as a whole: kept only if the block ends normally.

    Each target is checked before anything is written (:func:`_check_target`). A journal (beside the targets,
    in their common folder) is written before anything is set aside, so that an error, Ctrl-C or a kill at any
    instant leaves either the earlier outputs or the new ones."""
    kinds: dict[Path, Folder | None] = {Path(os.path.abspath(p)): None for p in files}
    kinds.update({Path(os.path.abspath(f.path)): f for f in folders})
    targets = list(kinds)
    recover_beside(targets)
    for path, folder in kinds.items():
        _check_target(path, folder)
    home = _home(targets)
    home.mkdir(parents=True, exist_ok=True)
    pid, token = os.getpid(), secrets.token_hex(16)
    entries = [
        {
            "name": str(p.relative_to(home)),
            "kind": "file" if kinds[p] is None else "folder",
            "existed": p.exists() or p.is_symlink(),
        }
        for p in targets
    ]
    journal = home / f"{JOURNAL_PREFIX}{pid}-{token}.json"
    record = {
        "format": JOURNAL_FORMAT,
        "command": Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python",
        "pid": pid,
        "started": _process_start(pid),
        "token": token,
        "host": socket.gethostname(),
        "folder": os.path.realpath(home),
        "folder_id": _folder_id(home),
        "state": "started",
        "entries": entries,
    }
    atomic_write_json(journal, record)
    try:
        for entry in entries:
            if entry["existed"]:
                path = home / entry["name"]
                _set_aside(path, _aside(path, token), entry["kind"])
        yield
    except BaseException:
        _restore(home, token, entries)
        journal.unlink(missing_ok=True)
        raise
    atomic_write_json(journal, {**record, "state": "committed"})
    _drop_asides(home, token, entries)
    journal.unlink(missing_ok=True)
