"""The projection's out-of-sample error, as the last ``make projection`` measured it (what ``make plan`` prints)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from optbench.checkout import repo_root

VALIDATION = Path("projection") / "validation.json"
"""Where ``make projection`` writes its validation, under a results folder."""

SCHEME_LABELS = {
    "in_sample": "in sample",
    "leave_one_row_out": "leave one row out",
    "leave_one_release_out": "leave one release out",
    "leave_one_gpu_out": "leave one GPU out",
}
"""The validation's schemes (:mod:`optbench.projection.validation`), in order, with the name a reader sees."""

GPU_SCHEME = SCHEME_LABELS["leave_one_gpu_out"]
"""The scheme a plan's expected error names when its efficiency was carried from another GPU."""


def expected_error(results_dir: str | Path | None = None, across_gpu: bool = False) -> dict[str, Any] | None:
    """The out-of-sample summary over every validated row that fits the plan's calibration, or None before any
    ``make projection``: leave one release out for an efficiency solved on the run's own GPU, leave one GPU out for
    one transferred from another GPU (``across_gpu``; a same-GPU figure would promise what a transfer never showed)."""
    scheme = "leave_one_gpu_out" if across_gpu else "leave_one_release_out"
    name = SCHEME_LABELS[scheme]
    path = Path(results_dir or repo_root() / "results") / VALIDATION
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))["summary"][scheme]["all"]
        if not summary.get("rows"):
            return {"measured": False, "scheme": name, "reason": f"no published row is validated by {name} yet"}
        keys = ("rows", "median_abs_error_percent", "within_5_percent", "within_10_percent")
        return {**{key: summary[key] for key in keys}, "scheme": name, "source": f"results/{VALIDATION}"}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def across_precision(pairs: int) -> dict[str, Any]:
    """What a plan says instead of the out-of-sample error when its efficiency crosses precision (a BF16 run on an
    FP8 anchor), carried at a rate ratio from ``pairs`` published BF16/FP8 pairs (0: as the same fraction of peak):
    no row the out-of-sample figures cover is of that kind."""
    how = (f"at a BF16/FP8 rate ratio from {pairs} published pair{'' if pairs == 1 else 's'} outside the validated domain"
           if pairs else "as the same fraction of peak")
    return {"measured": False, "reason": f"the efficiency crosses precision {how}; no published row of a release we run "
                                         "measures that (docs/projection.md section 6)"}


def expected_error_text(expected: dict[str, Any] | None) -> str:
    """One line: median |error|, share within 10 %, over how many rows and by which scheme."""
    if not expected:
        return "expected error unknown (run make projection)"
    if expected.get("measured") is False:
        return f"expected error not measured: {expected['reason']}"
    return (
        f"expected error: median {expected['median_abs_error_percent']:.1f} %, {100 * expected['within_10_percent']:.0f} %"
        f" of rows within 10 % ({expected['scheme']}, {expected['rows']} published rows; make projection)"
    )
