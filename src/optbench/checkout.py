"""The checkout optbench runs from: the folder holding recipes/ and conf/."""

from __future__ import annotations

import os
from pathlib import Path

from optbench.errors import UserError


def is_checkout(folder: Path) -> bool:
    return (folder / "recipes").is_dir() and (folder / "conf").is_dir()


def repo_root() -> Path:
    """The checkout holding recipes/ and conf/: $OPTBENCH_ROOT, else the working directory, else the source tree.

    The working directory comes before the imported source tree: ``make`` runs in the checkout the user typed it in,
    and an interpreter (a venv shared between two checkouts, an installed wheel) may import another one's source;
    its recipes, configs and outputs are then the other checkout's, which the user never asked for."""
    candidates = []
    if os.environ.get("OPTBENCH_ROOT"):
        candidates.append(Path(os.environ["OPTBENCH_ROOT"]))
    candidates += [Path.cwd(), Path(__file__).resolve().parents[2]]
    for root in candidates:
        if is_checkout(root):
            return root.resolve()
    raise UserError("cannot find recipes/ and conf/; run from the repository root or set OPTBENCH_ROOT", "OPTBENCH_ROOT")
