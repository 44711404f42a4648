"""A recipe's merged config groups kept on disk, so that the next process skips Hydra's merge as well.

:mod:`optbench.compose.reuse` keeps each merge of ``(recipe, group choices)`` for the rest of the process. A
user plans a recipe, changes a value on the command line and plans it again; each ``make plan`` is a new process
that merges the same groups again (four merges of about 0.1 s on 2 cores for a Muon plan: the run, its AdamW twin
and its two sibling optimizers). So each merge is also written to ``.cache/compose/`` under the checkout, as
pickled bytes (a DictConfig loads from them in about a millisecond).

A kept merge is read only when everything it was merged from is unchanged: the (path, size, modification time)
of every file under ``conf/`` and ``recipes/`` (:func:`optbench.compose.reuse.config_files_stat`) and under the
optbench package (the schema that types the merge), the checkout's path, and the versions of Python, Hydra and
OmegaConf. Anything else (a missing, foreign, truncated or stale file) is a miss, never an error; the merge is
then composed and written again. A merge that holds a credential in plain text (an account in a ``conf/local/``
file, say) is never written, and ``OPTBENCH_COMPOSE_CACHE`` chooses the folder or turns the cache off.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

MAGIC = b"optbench-merged-config 1\n"
"""First line of every file this cache writes: a file without it is not ours and is never replaced."""
SETTING = "OPTBENCH_COMPOSE_CACHE"
"""Environment variable: ``off`` (or ``0``, ``no``, ``false``) turns the cache off; a path puts it there."""
OFF = ("off", "0", "no", "false")
DEFAULT_FOLDER = Path(".cache") / "compose"
"""Under the checkout (gitignored; ``make clean`` removes it)."""
MAX_ENTRIES = 256
"""Files kept at most (oldest first out): one per recipe and group choices ever planned (about 22 KB each)."""


def cache_folder(root: Path) -> Path | None:
    """Where merges are kept for the checkout at ``root``, or None when the cache is off."""
    setting = os.environ.get(SETTING, "").strip()
    if setting.lower() in OFF:
        return None
    return Path(setting) if setting else root / DEFAULT_FOLDER


@functools.lru_cache(maxsize=1)
def _source_stat() -> tuple:
    """(path, size, mtime) of the optbench package's modules: the schema and its domains type the merge."""
    package = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        found.append((str(path), stat.st_size, stat.st_mtime_ns))
    return tuple(found)


def fingerprint(root: Path, key: tuple) -> bytes:
    """Digest of everything a merge of ``key`` (recipe, group choices, config files' stat) is made from."""
    import hydra
    import omegaconf

    facts = (key, str(root.resolve()), _source_stat(), sys.version, hydra.__version__, omegaconf.__version__)
    return _digest(repr(facts).encode("utf-8"))


_DIGEST = 64
"""Length of a hex SHA-256: a file's second line is the merge's inputs' digest and its bytes' digest."""


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).hexdigest().encode("ascii")


def _entry(folder: Path, recipe: str, groups: tuple) -> Path:
    name = hashlib.sha256(repr((recipe, groups)).encode("utf-8")).hexdigest()[:24]
    return folder / f"{recipe}-{name}.merge"


def load(root: Path, key: tuple) -> bytes | None:
    """The pickled merge kept for ``key`` when it is current, else None."""
    folder = cache_folder(root)
    if folder is None or not _private(folder):
        return None
    try:
        data = _entry(folder, key[0], key[1]).read_bytes()
    except OSError:
        return None
    head = MAGIC + fingerprint(root, key) + b" "
    body = data[len(head) + _DIGEST + 1:]
    if not data.startswith(head) or data[len(head):len(head) + _DIGEST + 1] != _digest(body) + b"\n":
        return None  # stale, or cut short or damaged: a pickle is only ever loaded whole
    return body


def store(root: Path, key: tuple, merged: bytes, config: Any) -> None:
    """Keep ``merged`` (``config`` pickled) for the next process, unless it holds a credential in plain text."""
    from omegaconf import OmegaConf

    from optbench.io import atomic_write_bytes
    from optbench.redact import MIN_TEXT_SECRET, known_secrets, secret_values

    folder = cache_folder(root)
    if folder is None:
        return
    raw = OmegaConf.to_container(config, resolve=False)
    literal = [value for value in secret_values(raw, environ={}) if "${" not in value]
    if literal or any(secret.encode() in merged for secret in known_secrets() if len(secret) >= MIN_TEXT_SECRET):
        return
    target = _entry(folder, key[0], key[1])
    try:
        if not _ours_or_absent(folder) or not _ours_or_absent(target):
            return
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)  # private: see _private
        atomic_write_bytes(target, MAGIC + fingerprint(root, key) + b" " + _digest(merged) + b"\n" + merged)
        _evict(folder)
    except OSError:  # read-only checkout, full disk: the next process merges again
        return


def clear(root: Path) -> int:
    """Remove this cache's own files (``make clean``); anything else stays, the folder too (an empty folder named
    by OPTBENCH_COMPOSE_CACHE may be the user's, taken over but not created by us). Returns how many."""
    folder = cache_folder(root)
    if folder is None or not folder.is_dir() or folder.is_symlink():
        return 0
    removed = 0
    for path in [*folder.glob("*.merge"), *folder.glob(".*.merge.*.tmp")]:  # with a killed process's half-write
        if _is_ours(path):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def _private(folder: Path) -> bool:
    """Whether only this user can have written ``folder``'s files: a pickle runs code when loaded, so a folder
    another user may write to (a shared /tmp one, say) is never read."""
    try:
        stat = folder.lstat()
    except OSError:
        return False
    return stat.st_uid == os.getuid() and not stat.st_mode & 0o022 and not folder.is_symlink()


def _ours_or_absent(path: Path) -> bool:
    """A file is ours when it starts with :data:`MAGIC`; a folder when it is empty or holds only our files."""
    if not os.path.lexists(path):
        return True
    if path.is_symlink():
        return False
    if path.is_dir():
        return all(_is_ours(child) for child in path.iterdir())
    return _is_ours(path)


def _is_ours(path: Path) -> bool:
    if path.name.startswith(".") and ".merge." in path.name and path.name.endswith(".tmp"):  # a write in flight
        return True
    if path.is_symlink() or not path.is_file() or path.suffix != ".merge":
        return False
    try:
        with path.open("rb") as handle:
            return handle.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _evict(folder: Path) -> None:
    entries = sorted(folder.glob("*.merge"), key=lambda p: p.stat().st_mtime_ns)
    for path in entries[:max(0, len(entries) - MAX_ENTRIES)]:
        if _is_ours(path):
            path.unlink(missing_ok=True)
