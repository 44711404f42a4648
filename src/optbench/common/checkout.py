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
    """The checkout holding recipes/ and conf/: $OPTBENCH_ROOT (any folder with both), else the working directory,
    else the imported source tree (each only where it is a checkout: :func:`is_checkout`).

    The working directory comes before the imported source tree: ``make`` runs in the checkout the user typed it in,
    and an interpreter (a venv shared between two checkouts, an installed wheel) may import another one's source;
    its recipes, configs and outputs are then the other checkout's, which the user never asked for."""
    named = os.environ.get("OPTBENCH_ROOT")
    if named and (Path(named) / "recipes").is_dir() and (Path(named) / "conf").is_dir():
        return Path(named).resolve()
    for root in (Path.cwd(), Path(__file__).resolve().parents[3]):
        if is_checkout(root):
            return root.resolve()
    raise UserError("cannot find recipes/ and conf/; run from the repository root or set OPTBENCH_ROOT", "OPTBENCH_ROOT")
