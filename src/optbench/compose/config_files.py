"""Bounds on the YAML a composition reads: every file under conf/ (conf/local/ included) and recipes/.

Hydra loads a config file whole and OmegaConf expands every YAML alias into a copy: nine lines of anchors and
aliases (a "billion laughs") become 9^9 nodes and hang a plan for minutes. The files are scanned as YAML events
(no node is built) before Hydra reads them, and one with an alias or over :data:`MAX_CONFIG_FILE_BYTES` is refused
in one line naming it. The scan is kept per file version (size and modification time), so a plan's five
compositions scan once.
"""

from __future__ import annotations

import os
from pathlib import Path

from optbench.common.errors import Problem, UserError
from optbench.common.yaml_aliases import yaml_alias_used, yaml_error_place, yaml_error_text

MAX_CONFIG_FILE_BYTES = 1 << 20
"""A config file is a few KB: anything larger is refused before YAML reads it."""
CONFIG_FOLDERS = ("conf", "recipes")

_scanned: dict[tuple[str, int, int], tuple[str, str] | None] = {}
"""(path, size, mtime_ns) -> (where, why) the file is refused (None: it is not)."""


def _problem(path: Path, size: int) -> tuple[str, str] | None:
    """(where, why) the file is refused: ``where`` is its name, with ``:line:column`` for a YAML syntax error."""
    import yaml

    if size > MAX_CONFIG_FILE_BYTES:
        return "", f"is {size:,} bytes; a config file is at most {MAX_CONFIG_FILE_BYTES >> 20} MB"
    try:
        text = path.read_text(encoding="utf-8")
        if yaml_alias_used(text):
            return "", (
                "uses YAML aliases (&name / *name), which optbench refuses: a few lines of them expand to "
                "billions of values; write the values out"
            )
    except UnicodeDecodeError:
        return "", "is not UTF-8 text"
    except yaml.YAMLError as err:  # Hydra would raise it as a traceback when it reads the file
        return (
            yaml_error_place(err),
            f"YAML syntax error: {yaml_error_text(err)}; fix the file (a missing bracket, "
            "quote or colon, or a tab used for indentation)",
        )
    except OSError as err:
        return "", f"cannot be read ({err.strerror or type(err).__name__})"
    return None


def check_config_files(root: Path) -> None:
    """Refuse (one line naming the file) a YAML file under ``root``'s conf/ or recipes/ that could hang composition."""
    for folder in CONFIG_FOLDERS:
        for top, dirs, files in os.walk(root / folder):
            dirs.sort()
            for name in sorted(files):
                if not name.endswith((".yaml", ".yml")):
                    continue
                path = Path(top) / name
                try:
                    info = path.stat()
                except OSError:
                    continue
                key = (str(path), info.st_size, info.st_mtime_ns)
                if key not in _scanned:
                    _scanned[key] = _problem(path, info.st_size)
                if _scanned[key] is not None:
                    where, why = _scanned[key]
                    raise UserError(Problem(f"{path.relative_to(root)}{where}", f"{why}; nothing was composed"))
