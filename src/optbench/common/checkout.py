"""The checkout optbench runs from: the folder holding recipes/ and conf/."""

from __future__ import annotations

import os
from pathlib import Path

from optbench.common.errors import UserError


def is_checkout(folder: Path) -> bool:
    """An optbench checkout: recipes/ and conf/ beside optbench's own source (a project of the user's with a
    recipes/ and a conf/ of its own is not one: its configs are not ours)."""
    return all((folder / part).is_dir() for part in ("recipes", "conf", "src/optbench"))


def repo_root() -> Path:
    """The checkout holding recipes/ and conf/: $OPTBENCH_ROOT, else the working directory, else the imported source
    tree (each only where it is a checkout: :func:`is_checkout`). An $OPTBENCH_ROOT that names no checkout (a file, a
    missing folder, a folder without recipes/, conf/ and src/optbench/) is refused, never passed over for another.

    The working directory comes before the imported source tree: ``make`` runs in the checkout the user typed it in,
    and an interpreter (a venv shared between two checkouts, an installed wheel) may import another one's source;
    its recipes, configs and outputs are then the other checkout's, which the user never asked for."""
    named = os.environ.get("OPTBENCH_ROOT")
    if named:
        return _named_root(Path(named))
    for root in (Path.cwd(), Path(__file__).resolve().parents[3]):
        if is_checkout(root):
            return root.resolve()
    raise UserError(
        "cannot find recipes/ and conf/; run from the repository root or set OPTBENCH_ROOT", "OPTBENCH_ROOT"
    )


def _named_root(named: Path) -> Path:
    if not named.is_dir():
        what = "a file" if named.exists() else "no folder"
        raise UserError(
            f"'{named}' is {what}; point it at an optbench checkout (the folder holding recipes/, conf/ and "
            "src/optbench/) or unset it",
            "OPTBENCH_ROOT",
        )
    if not is_checkout(named):
        missing = ", ".join(part for part in ("recipes", "conf", "src/optbench") if not (named / part).is_dir())
        raise UserError(
            f"'{named}' is not an optbench checkout (it has no {missing}/); point it at the folder holding "
            "recipes/, conf/ and src/optbench/, or unset it",
            "OPTBENCH_ROOT",
        )
    return named.resolve()
