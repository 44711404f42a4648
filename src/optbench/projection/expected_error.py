"""The projection's out-of-sample error, as the last ``make projection`` measured it (what ``make plan`` prints)."""

from __future__ import annotations

import json
from pathlib import Path
from optbench.common.checkout import repo_root
from optbench.projection.section import ExpectedError, MuonRowsError

VALIDATION = Path("projection") / "validation.json"
"""Where ``make projection`` writes its validation, under a results folder."""

SCHEME_LABELS = {
    "leave_one_setup_out": "leave one setup out",
    "leave_one_model_out": "leave one model out",
    "leave_one_gpu_out": "leave one GPU out",
    "leave_one_layout_out": "leave one layout out",
    "leave_one_release_out": "leave one release out",
    "leave_one_row_out": "leave one row out",
    "in_sample": "in sample",
}
"""The validation's schemes (:mod:`optbench.projection.validation`), hardest first, with the name a reader sees."""

CASE_SCHEMES = {
    "row": "leave_one_row_out",
    "release": "leave_one_release_out",
    "layout": "leave_one_layout_out",
    "setup": "leave_one_setup_out",
    "model": "leave_one_model_out",
}
"""How far a projection is from what calibrated it -> the scheme that measured such a distance:
``row``: the run is its anchor row's own configuration; ``release``: the same layout at another release whose
preset changed; ``layout``: its model, GPU and GPU count have a row at another layout; ``setup``: another GPU count, or a GPU its model has no row on (the carried table); ``model``: a
model without any row. ``drift`` (an identical executed preset at another release) reads the release drift."""
CARRIED_SCHEMES = {SCHEME_LABELS[CASE_SCHEMES[case]] for case in ("setup", "model")}
"""What a plan's expected error names when its efficiency came from the carried table."""


def error_case(same_model_gpu: bool, model_has_rows: bool, same_count: bool, same_layout: bool, same_release: bool,
               same_preset: bool = False) -> str:
    """The case of a projection (:data:`CASE_SCHEMES`, or ``drift``) from how it relates to its anchor."""
    if not model_has_rows:
        return "model"
    if not same_model_gpu or not same_count:
        return "setup"
    if not same_layout:
        return "layout"
    if same_release:
        return "row"
    return "drift" if same_preset else "release"


KEYS = ("rows", "median_abs_error_percent", "within_5_percent", "within_10_percent")
"""What a plan carries of a scheme's summary."""


def expected_error(
    case: str, results_dir: str | Path | None = None, matrix_optimizer: str | None = None
) -> ExpectedError | None:
    """The out-of-sample figure of the scheme that matches ``case`` (see :data:`CASE_SCHEMES`), or None before any
    ``make projection``. For a run of a matrix optimizer (``matrix_optimizer``: its name), also the same scheme's
    figure over the Muon rows alone (``muon_rows``): the efficiency is calibrated on AdamW rows, and what predicting
    a matrix optimizer's figure adds to that error only the published Muon rows measure (no other one is published)."""
    path = Path(results_dir or repo_root() / "results") / VALIDATION
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if case == "drift":
            drift = data["release_drift"]["summary"]["preset_unchanged"]
            return ExpectedError(scheme="release drift of an unchanged preset", rows=drift["steps"],
                                 median_abs_error_percent=drift["median_abs_change_percent"],
                                 max_abs_error_percent=drift["max_abs_change_percent"], source=f"results/{VALIDATION}")
        scheme = CASE_SCHEMES[case]
        name = SCHEME_LABELS[scheme]
        summary = data["summary"][scheme]["all"]
        if not summary.get("rows"):
            return ExpectedError(measured=False, scheme=name, reason=f"no published row is validated by {name} yet")
        muon = data["summary"][scheme].get("muon", {})
        muon_rows = (MuonRowsError(**{key: muon[key] for key in KEYS}, run_optimizer=matrix_optimizer)
                     if matrix_optimizer and muon.get("rows") else None)
        return ExpectedError(**{key: summary[key] for key in KEYS}, scheme=name, source=f"results/{VALIDATION}",
                             muon_rows=muon_rows)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def across_precision(pairs: int) -> ExpectedError:
    """What a plan says instead of the out-of-sample error when its efficiency crosses precision (a BF16 run on an
    FP8 anchor), carried at a rate ratio from ``pairs`` published BF16/FP8 pairs (0: as the same fraction of peak):
    no row the out-of-sample figures cover is of that kind."""
    how = (f"at a BF16/FP8 rate ratio from {pairs} published pair{'' if pairs == 1 else 's'} outside the validated domain"
           if pairs else "as the same fraction of peak")
    return ExpectedError(measured=False, reason=f"the efficiency crosses precision {how}; no published row of a release "
                                                "we run measures that (docs/projection.md section 6)")


def expected_error_cell(expected: ExpectedError | None) -> str:
    """The expected error in a table cell: its median and scheme, and its Muon rows' median where it has them."""
    if not expected or expected.median_abs_error_percent is None:
        return "not measured" if expected and expected.measured is False else "-"
    muon = f"; Muon rows {expected.muon_rows.median_abs_error_percent:.1f} %" if expected.muon_rows else ""
    return f"{expected.median_abs_error_percent:.1f} % ({expected.scheme}{muon})"


def expected_error_text(expected: ExpectedError | None) -> str:
    """One line: median |error|, share within 10 % (or the largest, for the release drift), over how many rows and by
    which scheme."""
    if not expected:
        return "expected error unknown (run make projection)"
    if expected.measured is False:
        return f"expected error not measured: {expected.reason}"
    if expected.max_abs_error_percent is not None:
        return (f"expected error: median {expected.median_abs_error_percent:.1f} %, at most "
                f"{expected.max_abs_error_percent:.1f} % ({expected.scheme}, {expected.rows} release steps; "
                "make projection)")
    muon = expected.muon_rows
    of_muon = ""
    if muon:
        whose = "its" if muon.run_optimizer == "muon" else f"no published {muon.run_optimizer} row; the"
        of_muon = (f"; {whose} {muon.rows} Muon row{'' if muon.rows == 1 else 's'}: median "
                   f"{muon.median_abs_error_percent:.1f} %, {100 * muon.within_10_percent:.0f} % within 10 %")
    return (
        f"expected error: median {expected.median_abs_error_percent:.1f} %, {100 * expected.within_10_percent:.0f} %"
        f" of rows within 10 % ({expected.scheme}, {expected.rows} published rows{of_muon}; make projection)"
    )
