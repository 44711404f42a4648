"""plan.json as a contract: its format version, and reading it back where the job runs.

The plan is written once, on the machine that plans (:mod:`optbench.plan`); the job in the NeMo container
applies the Bridge recipe call and overrides that plan.json recorded (:mod:`optbench.engine.bridge.entry`)
instead of computing them again, so what `make plan` showed is what runs. A plan of another format is
refused in one line rather than half-read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from optbench.common.errors import Problem, UserError

PLAN_VERSION = 1
"""The format of plan.json. Raise it when a field the job reads changes meaning or place."""

PLAN_FILE = "plan.json"


def read_plan(folder: Path) -> dict[str, Any]:
    """The plan.json a job folder holds (beside its config.yaml), checked for its format version."""
    path = folder / PLAN_FILE
    if not path.is_file():
        raise UserError(
            Problem(
                "plan",
                f"no {PLAN_FILE} in {folder}: the job applies what its plan recorded; "
                "launch it with make pretrain or make sweep",
            )
        )
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(
            Problem("plan", f"{path} is not a readable plan ({type(err).__name__}); plan again with make pretrain")
        ) from None
    version = plan.get("plan_version") if isinstance(plan, dict) else None
    if version != PLAN_VERSION:
        raise UserError(
            Problem(
                "plan",
                f"{path} is plan format {version!r}, this checkout reads format {PLAN_VERSION}; "
                "plan again with this checkout (make pretrain)",
            )
        )
    if not isinstance(plan.get("bridge"), dict):
        raise UserError(
            Problem(
                "plan", f"{path} has no bridge section: it plans engine={plan.get('engine')!r}, not megatron_bridge"
            )
        )
    return plan
