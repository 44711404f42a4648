"""The projection's out-of-sample error, as the last ``make projection`` measured it (what ``make plan`` prints)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from optbench.common.checkout import repo_root
from optbench.projection.bands import band_of
from optbench.projection.section import BandRecord, ExpectedError, MuonRowsError

VALIDATION = Path("projection") / "validation.json"
"""Where ``make projection`` writes its validation, under a results folder."""

SCHEME_LABELS = {
    "leave_one_setup_out": "leave one setup out",
    "leave_one_model_out": "leave one model out",
    "leave_one_architecture_out": "leave one GPU architecture out",
    "leave_one_family_out": "leave one system family out",
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
    "gpu": "leave_one_gpu_out",
    "family": "leave_one_architecture_out",
    "model": "leave_one_model_out",
}
"""How far a projection is from what calibrated it -> the scheme that measured such a distance:
``row``: the run is its anchor row's own configuration; ``release``: the same layout at another release whose
preset changed; ``layout``: its model, GPU and GPU count have a row at another layout; ``setup``: another GPU count (the
carried table where its model has no row on the GPU: ``gpu`` when the
GPU's architecture has rows, ``family`` when it has none); ``model``: a model without any row. ``drift`` (an identical
executed preset at another release) reads the release drift."""
CARRIED_SCHEMES = {SCHEME_LABELS[CASE_SCHEMES[case]] for case in ("setup", "gpu", "family", "model")}
"""What a plan's expected error names when its efficiency came from the carried table."""


def error_case(
    same_model_gpu: bool,
    model_has_rows: bool,
    same_count: bool,
    same_layout: bool,
    same_release: bool,
    same_preset: bool = False,
    gpu_term: str = "",
) -> str:
    """The case of a projection (:data:`CASE_SCHEMES`, or ``drift``) from how it relates to its anchor (``gpu_term``:
    how the carried table found the GPU's term, for a run whose model has no row on its GPU)."""
    if not model_has_rows:
        return "model"
    if not same_model_gpu:
        return "family" if gpu_term.startswith("mean") else "gpu" if gpu_term else "setup"
    if not same_count:
        return "setup"
    if not same_layout:
        return "layout"
    if same_release:
        return "row"
    return "drift" if same_preset else "release"


BAND_CLASSES = {
    "row": ("its own published setup and release", ("leave_one_row_out",)),
    "drift": ("an identical executed preset at another release", ("leave_one_row_out",)),
    "release": ("the same setup at another release", ("leave_one_release_out",)),
    "layout": ("the same model x GPU x GPU count, another layout", ("leave_one_layout_out",)),
    "setup": ("another GPU count or TP/CP", ("leave_one_setup_out",)),
    "gpu": ("another GPU of a published family", ("leave_one_gpu_out",)),
    "family": ("another GPU architecture or system family", ("leave_one_architecture_out", "leave_one_family_out")),
    "model": ("another model", ("leave_one_model_out",)),
}
"""A case's band class, in increasing distance from what calibrated the projection, and the schemes whose held-out
errors make its band (the widest where there are two). A run that changes what no published row changes (a TP or
CP none runs, another GPU count where none was published at two) keeps its class, marked untested, and takes the
widest band any scheme measured; so does a run whose efficiency crosses precision (:data:`UNTESTED_CLASS`)."""
UNTESTED_CLASS = "settings NVIDIA never ran"
UNVERIFIED_CLASS = "software NVIDIA ran that we did not check"
"""The class of a run of a container newer than the newest checked one (cluster.unverified_container=true)."""


def _width(band: list[float]) -> float:
    low, high = band_of(1.0, (band[0] / 100, band[1] / 100))
    return high - low


def band_record(data: dict, case: str, untested: str | None = None) -> BandRecord | None:
    """The band of ``case`` from validation.json's ``data``; with ``untested`` (why no held-out row tests the run),
    the widest band of any out-of-sample scheme under :data:`UNTESTED_CLASS`."""
    label, schemes = BAND_CLASSES[case]
    if untested:
        schemes = tuple(s for s in SCHEME_LABELS if s != "in_sample")
    found = [(s, data["summary"][s]["all"]) for s in schemes if data["summary"].get(s, {}).get("all", {}).get("rows")]
    found = [(s, summary) for s, summary in found if summary.get("band_80_error_percent")]
    if not found:
        return None
    scheme, summary = max(found, key=lambda pair: _width(pair[1]["band_80_error_percent"]))
    return BandRecord(
        case_class=label,
        scheme=SCHEME_LABELS[scheme],
        error_percent=tuple(summary["band_80_error_percent"]),
        coverage=summary.get("band_80_coverage"),
        untested=untested,
    )


def with_band_tflops(expected: ExpectedError | None, tflops: float) -> ExpectedError | None:
    """``expected`` with its band's model TFLOP/s per GPU for a projection of ``tflops``."""
    if expected is None or expected.band is None:
        return expected
    low, high = band_of(tflops, (expected.band.error_percent[0] / 100, expected.band.error_percent[1] / 100))
    return replace(expected, band=replace(expected.band, tflops_per_gpu=(round(low, 1), round(high, 1))))


KEYS = ("rows", "median_abs_error_percent", "within_5_percent", "within_10_percent")
"""What a plan carries of a scheme's summary."""


def expected_error(
    case: str, results_dir: str | Path | None = None, matrix_optimizer: str | None = None, untested: str | None = None
) -> ExpectedError | None:
    """The out-of-sample figure of the scheme that matches ``case`` (see :data:`CASE_SCHEMES`), or None before any
    ``make projection``. For a run of a matrix optimizer (``matrix_optimizer``: its name), also the same scheme's
    figure over the Muon rows alone (``muon_rows``): the efficiency is calibrated on AdamW rows, and what predicting
    a matrix optimizer's figure adds to that error only the published Muon rows measure (no other one is published)."""
    try:
        data = _validation(results_dir)
        if case == "drift":
            drift = data["release_drift"]["summary"]["preset_unchanged"]
            return ExpectedError(
                scheme="release drift of an unchanged preset",
                rows=drift["steps"],
                median_abs_error_percent=drift["median_abs_change_percent"],
                max_abs_error_percent=drift["max_abs_change_percent"],
                source=f"results/{VALIDATION}",
                band=band_record(data, case, untested),
            )
        scheme = CASE_SCHEMES[case]
        name = SCHEME_LABELS[scheme]
        summary = data["summary"][scheme]["all"]
        if not summary.get("rows"):
            return ExpectedError(
                measured=False,
                scheme=name,
                reason=f"no published row is validated by {name} yet",
                band=band_record(data, case, f"no published row is validated by {name}"),
            )
        muon = data["summary"][scheme].get("muon", {})
        muon_rows = (
            MuonRowsError(**{key: muon[key] for key in KEYS}, run_optimizer=matrix_optimizer)
            if matrix_optimizer and muon.get("rows")
            else None
        )
        return ExpectedError(
            **{key: summary[key] for key in KEYS},
            scheme=name,
            source=f"results/{VALIDATION}",
            muon_rows=muon_rows,
            band=band_record(data, case, untested),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _validation(results_dir: str | Path | None = None) -> dict:
    """validation.json, parsed once per content of the file (a search projects hundreds of layouts, each reading it:
    parsing its ~9,000 lines each time took 2 s of a 24 s kimi_k2_muon search). Callers only read it."""
    path = Path(results_dir or repo_root() / "results") / VALIDATION
    data = path.read_bytes()
    key = (str(path), hash(data))  # the bytes themselves: a file rewritten within a clock tick is read again
    if key not in _parsed:
        _parsed.clear()
        _parsed[key] = json.loads(data.decode("utf-8"))
    return _parsed[key]


_parsed: dict[tuple[str, int], dict] = {}
"""The last validation.json parsed, by (path, hash of its bytes)."""


def across_precision(pairs: int, ratio: str = "BF16/FP8") -> ExpectedError:
    """What a plan says instead of the out-of-sample error when its efficiency crosses precision (a BF16 run on an
    FP8 anchor), carried at a ``ratio`` rate ratio from ``pairs`` published pairs (0: as the same fraction of peak):
    no row the out-of-sample figures cover is of that kind."""
    plural = "" if pairs == 1 else "s"
    if not pairs:
        how = "as the same fraction of peak; no published row of a release we run measures that"
    elif "FP4" in ratio:  # NVIDIA's NVFP4 rows and their FP8 pairs are all of releases we run
        how = (
            f"at a {ratio} rate ratio from {pairs} published pair{plural}; make projection scores NVIDIA's NVFP4 rows "
            "held out across it (validation.json), but no scheme's figure is of this case alone"
        )
    else:  # the BF16/FP8 pairs are 25.11's
        how = (
            f"at a {ratio} rate ratio from {pairs} published pair{plural} outside the validated domain; no published "
            "row of a release we run measures that"
        )
    try:
        band = band_record(_validation(), "model", "the efficiency crosses precision")
        band = replace(band, case_class=UNTESTED_CLASS) if band else None
    except (OSError, ValueError, KeyError, TypeError):
        band = None
    return ExpectedError(
        measured=False,
        reason=f"the efficiency crosses precision {how} (docs/projection.md section 6)",
        band=band,
    )


def expected_error_cell(expected: ExpectedError | None) -> str:
    """The expected error in a table cell: its median and scheme, and its Muon rows' median where it has them."""
    if not expected or expected.median_abs_error_percent is None:
        return "not measured" if expected and expected.measured is False else "-"
    muon = f"; Muon rows {expected.muon_rows.median_abs_error_percent:.1f} %" if expected.muon_rows else ""
    return f"{expected.median_abs_error_percent:.1f} % ({expected.scheme}{muon})"


def band_text(expected: ExpectedError | None) -> str | None:
    """One line: the 80 % band of the projected model TFLOP/s per GPU, its class, and how often such bands held."""
    band = expected.band if expected else None
    if band is None or not band.tflops_per_gpu:
        return None
    held = f", which held on {100 * band.coverage:.0f} % of its held-out rows" if band.coverage is not None else ""
    why = f"untested: {band.untested}; the widest held-out band, " if band.untested else ""
    return (
        f"80 % band [{band.tflops_per_gpu[0]:.1f}, {band.tflops_per_gpu[1]:.1f}] model TFLOP/s/GPU (class: "
        f"{band.case_class}; {why}{band.scheme}, errors {band.error_percent[0]:+.1f} to {band.error_percent[1]:+.1f} %"
        f"{held})"
    )


def expected_error_text(expected: ExpectedError | None) -> str:
    """One line: median |error|, share within 10 % (or the largest, for the release drift), over how many rows and by
    which scheme."""
    if not expected:
        return "expected error unknown (run make projection)"
    if expected.measured is False:
        return f"expected error not measured: {expected.reason}"
    if expected.band is not None and expected.band.untested:
        return (
            f"expected error untested ({expected.band.untested}): rows that keep it measure median "
            f"{expected.median_abs_error_percent:.1f} % ({expected.scheme}); the band below is the widest measured"
        )
    if expected.max_abs_error_percent is not None:
        return (
            f"expected error: median {expected.median_abs_error_percent:.1f} %, at most "
            f"{expected.max_abs_error_percent:.1f} % ({expected.scheme}, {expected.rows} release steps; "
            "make projection)"
        )
    muon = expected.muon_rows
    of_muon = ""
    if muon:
        whose = "its" if muon.run_optimizer == "muon" else f"no published {muon.run_optimizer} row; the"
        of_muon = (
            f"; {whose} {muon.rows} Muon row{'' if muon.rows == 1 else 's'}: median "
            f"{muon.median_abs_error_percent:.1f} %, {100 * muon.within_10_percent:.0f} % within 10 %"
        )
    return (
        f"expected error: median {expected.median_abs_error_percent:.1f} %, {100 * expected.within_10_percent:.0f} %"
        f" of rows within 10 % ({expected.scheme}, {expected.rows} published rows{of_muon}; make projection)"
    )
