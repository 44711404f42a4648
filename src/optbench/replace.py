"""Replace earlier outputs as a whole, so that an error, Ctrl-C or a kill at any instant loses nothing.

:func:`replacing` writes a journal (``.optbench-journal-<pid>.json`` beside the first path) before it
sets anything aside (``.<name>.previous-<pid>``); the block's own failure restores the earlier outputs
at once, and a process killed at any instant leaves a journal that the next :func:`replacing` (or
:func:`recover`) of the same paths reads: before the commit it restores the earlier outputs (removing
what the killed block had written), after it it only removes the set-aside copies. The only things ever
removed are those copies and what the replacing block itself created.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from optbench.errors import Problem, UserError
from optbench.io import atomic_write_json, remove_path
from optbench.outputs import short_path

JOURNAL_PREFIX = ".optbench-journal-"
ASIDE_INFIX = ".previous-"


# ---------------------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_journal(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not isinstance(data.get("pid"), int) or data.get("state") not in ("started", "committed"):
        return None
    good = all(
        isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("aside"), str)
        and isinstance(e.get("existed"), bool) and Path(e["aside"]).name.startswith(f".{Path(e['path']).name}{ASIDE_INFIX}")
        for e in entries
    )
    return data if good else None


def _restore(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        path, aside = Path(entry["path"]), Path(entry["aside"])
        if entry["existed"]:
            if aside.exists() or aside.is_symlink():
                remove_path(path)
                os.rename(aside, path)
        else:
            remove_path(path)


def _drop_asides(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        remove_path(Path(entry["aside"]))


def recover(folder: Path, paths: Sequence[Path] = ()) -> list[str]:
    """Finish what a killed command left in ``folder``: restore its set-aside outputs, or drop them when it had committed.

    Returns one line per recovered journal. A journal of a process still running that touches one of
    ``paths`` is a one-line refusal (the same output written twice at once).
    """
    notes: list[str] = []
    if not folder.is_dir():
        return notes
    wanted = {str(Path(os.path.abspath(p))) for p in paths}
    for journal in sorted(folder.glob(f"{JOURNAL_PREFIX}*.json")):
        data = _read_journal(journal)
        if data is None or data.get("host") != socket.gethostname():
            continue  # not ours to judge (unreadable, or written on another machine)
        touched = sorted(wanted & {e["path"] for e in data["entries"]})
        if data["pid"] != os.getpid() and _alive(data["pid"]):
            if touched:
                raise UserError(
                    Problem("output", f"{short_path(touched[0])} is being written by process {data['pid']}; wait for it to end")
                )
            continue
        if data["state"] == "committed":
            _drop_asides(data["entries"])
        else:
            _restore(data["entries"])
            notes.append(f"note: restored {', '.join(short_path(e['path']) for e in data['entries'] if e['existed'])} "
                         f"as it was before an interrupted command (process {data['pid']})")
        journal.unlink(missing_ok=True)
    return notes


@contextlib.contextmanager
def replacing(paths: Sequence[str | Path]) -> Iterator[None]:
    """Let a block replace ``paths`` (files or folders) as a whole: kept only if the block ends normally.

    A journal (``.optbench-journal-<pid>.json`` beside the first path) is written before anything is
    set aside (``.<name>.previous-<pid>``), so that an error, Ctrl-C or a kill at any instant leaves
    either the earlier outputs or the new ones: the block's own failure restores them at once, a kill
    is repaired by the next :func:`replacing` (or :func:`recover`) of the same paths.
    """
    targets = list(dict.fromkeys(Path(os.path.abspath(p)) for p in paths))
    for folder in dict.fromkeys(p.parent for p in targets):
        for note in recover(folder, targets):
            print(note, flush=True)
    home = targets[0].parent
    home.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    entries = [
        {"path": str(p), "aside": str(p.with_name(f".{p.name}{ASIDE_INFIX}{pid}")), "existed": p.exists() or p.is_symlink()}
        for p in targets
    ]
    journal = home / f"{JOURNAL_PREFIX}{pid}.json"
    record = {"pid": pid, "host": socket.gethostname(), "state": "started", "entries": entries}
    atomic_write_json(journal, record)
    try:
        for entry in entries:
            if entry["existed"]:
                remove_path(Path(entry["aside"]))  # a stale copy of our own from a reused pid
                os.rename(entry["path"], entry["aside"])
        yield
    except BaseException:
        _restore(entries)
        journal.unlink(missing_ok=True)
        raise
    atomic_write_json(journal, {**record, "state": "committed"})
    _drop_asides(entries)
    journal.unlink(missing_ok=True)
