"""The checkout optbench runs from: the folder holding recipes/ and conf/."""

from __future__ import annotations

import os
from pathlib import Path

from optbench.errors import UserError


def repo_root() -> Path:
    """The checkout holding recipes/ and conf/: $OPTBENCH_ROOT, else the source tree, else the working directory."""
    candidates = []
    if os.environ.get("OPTBENCH_ROOT"):
        candidates.append(Path(os.environ["OPTBENCH_ROOT"]))
    candidates += [Path(__file__).resolve().parents[2], Path.cwd()]
    for root in candidates:
        if (root / "recipes").is_dir() and (root / "conf").is_dir():
            return root
    raise UserError("cannot find recipes/ and conf/; run from the repository root or set OPTBENCH_ROOT", "OPTBENCH_ROOT")
