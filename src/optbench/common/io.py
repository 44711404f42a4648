"""Crash-safe file output: a file is either its old content or its complete new content, never half-written."""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from optbench.common.redact import redact_known


class NotOurFileError(OSError):
    """The path to write holds something that is not a regular file (a folder, link, device): never replaced."""


def _default_file_mode() -> int:
    # mkstemp creates 0600 files; a plain open() would give 0666 minus the umask, which is what users expect.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def check_replaceable(target: Path) -> None:
    """Raise NotOurFileError when ``target`` exists and is not a plain file (a rename would replace a folder,
    a link or a device such as /dev/null)."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise NotOurFileError(0, "not a regular file", str(target))


def atomic_write_with(path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> Path:
    """Let ``write`` fill a temporary file beside ``path``, fsync it, then rename it over ``path``.

    Only a missing path or a regular file is ever replaced (:func:`check_replaceable`)."""
    target = Path(path)
    check_replaceable(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _default_file_mode())
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if err.filename is None:  # a failed write(): name the file, so that the one-line error names its field
            raise OSError(err.errno, err.strerror, str(target)) from err
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Atomically replace ``path`` with ``data``."""
    return atomic_write_with(path, lambda handle: handle.write(data))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Atomically replace ``path`` with ``text`` (UTF-8), every known secret redacted (optbench.common.redact)."""
    return atomic_write_bytes(path, redact_known(text).encode("utf-8"))


def strict_json_value(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, +-Infinity, which strict JSON cannot hold) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: strict_json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json_value(item) for item in value]
    return value


def _json_default(value: Any) -> Any:
    # numpy and torch scalars become Python numbers (and are then checked like them); anything else its text.
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return strict_json_value(item())
        except (TypeError, ValueError):
            pass
    return str(value)


def dumps_strict(data: Any, indent: int | None = None) -> str:
    """JSON text that every strict reader accepts: non-finite floats written as null, never NaN or Infinity."""
    return json.dumps(strict_json_value(data), indent=indent, default=_json_default, allow_nan=False)


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """Atomically write ``data`` as indented strict JSON with a trailing newline."""
    return atomic_write_text(path, dumps_strict(data, indent=2) + "\n")


def remove_path(path: Path) -> None:
    """Remove a file, link or folder tree if it exists (callers pass only paths of their own outputs)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
