"""Whether each optional term of the step model earns its place, decided inside the training folds (issue 79 item 3).

The step model has switches (:class:`~optbench.projection.assumptions.Assumptions`): terms that add time no fitted
number absorbs. Each was kept after its held-out figure had been seen, so the validation's figures carry that choice.
Here the choice is re-made inside every outer fold from the fold's own rows only, by an inner cross-validation: the
training groups are held out one at a time, each projected with the term and without it from the other training
groups (the carried table refitted each time), and the fold keeps the term when the inner median error is smaller
with it. The outer fold's held-out rows are then projected with the fold's choice (**nested**). Beside it: the term
always on, always off, and how many folds kept it. Two schemes: leave one setup out (the headline) and leave one
model out (where a term must carry to a model it never saw).

A term stays only if it improves the nested held-out error: the nested median, averaged over the two schemes, below
the always-off one. ``python -m optbench term-selection`` writes the verdicts (results/projection/term_selection.json
and .md); the choice ledger of docs/projection.md quotes them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from optbench.catalog.published import PublishedRow
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS, Assumptions
from optbench.projection.calibration import Holdout
from optbench.projection.carried import refitted, setup_of
from optbench.projection.published_rows import projection_error
from optbench.projection.row_config import RowRuns

TERMS = ("activation_traffic", "weight_roofline", "small_expert_gemms")
"""The switches re-decided per fold: the element-wise kernels' HBM traffic, the GEMMs' weight-traffic bound, the
small-expert-GEMM slowdown (each False: the model before it)."""
SCHEMES: dict[str, tuple[Callable[[PublishedRow], Any], Callable[[frozenset], Holdout]]] = {
    "leave_one_setup_out": (setup_of, lambda groups: Holdout(setups=groups)),
    "leave_one_model_out": (lambda row: row.model, lambda groups: Holdout(models=groups)),
}
"""Scheme -> (a row's group, the holdout of a set of groups)."""


def _errors(
    rows: list[PublishedRow], holdout: Holdout, published: str, row_runs: RowRuns, base: Assumptions
) -> list[float]:
    """The errors in % of ``rows`` projected with the carried table refitted on what ``holdout`` keeps, at ``base``."""
    _, assumptions = refitted(published, holdout, row_runs, base)
    results = (projection_error(row, row_runs, holdout, assumptions) for row in rows)
    return [r["error_percent"] for r in results if "error_percent" in r]


def _median_abs(errors: list[float]) -> float | None:
    return round(statistics.median(abs(e) for e in errors), 2) if errors else None


def _scheme(term: str, scheme: str, scored: list[PublishedRow], published: str, row_runs: RowRuns) -> dict[str, Any]:
    group_of, holdout_of = SCHEMES[scheme]
    groups: dict[Any, list[PublishedRow]] = {}
    for row in scored:
        groups.setdefault(group_of(row), []).append(row)
    variants = {name: replace(DEFAULT_ASSUMPTIONS, **{term: name == "on"}) for name in ("on", "off")}
    errors: dict[str, list[float]] = {"on": [], "off": [], "nested": []}
    kept = 0
    for group, rows in groups.items():
        outer = {
            name: _errors(rows, holdout_of(frozenset({group})), published, row_runs, b) for name, b in variants.items()
        }
        inner = {
            name: _median_abs(
                [
                    e
                    for other, other_rows in groups.items()
                    if other != group
                    for e in _errors(other_rows, holdout_of(frozenset({group, other})), published, row_runs, b)
                ]
            )
            for name, b in variants.items()
        }
        keep = inner["on"] is not None and (inner["off"] is None or inner["on"] <= inner["off"])
        kept += keep
        for name in ("on", "off"):
            errors[name].extend(outer[name])
        errors["nested"].extend(outer["on" if keep else "off"])
    medians = {name: _median_abs(errs) for name, errs in errors.items()}
    return {
        "median_abs_error_percent": medians,
        "rows": len(errors["nested"]),
        "folds": len(groups),
        "folds_keeping_it": kept,
    }


def select_terms(scored: list[PublishedRow], published: str, row_runs: RowRuns) -> dict[str, Any]:
    """Per term of :data:`TERMS` and scheme of :data:`SCHEMES`: the held-out median error with the term on, off and
    nested over ``scored`` (the validation's scored AdamW rows), the folds that kept it, and whether it stays."""
    terms: dict[str, Any] = {}
    for term in TERMS:
        schemes = {scheme: _scheme(term, scheme, scored, published, row_runs) for scheme in SCHEMES}
        gains = [
            s["median_abs_error_percent"]["off"] - s["median_abs_error_percent"]["nested"] for s in schemes.values()
        ]
        terms[term] = {**schemes, "stays": statistics.mean(gains) > 0, "default": getattr(DEFAULT_ASSUMPTIONS, term)}
    return {
        "about": "each optional step-model term re-decided inside every outer fold by an inner cross-validation on the "
        "fold's own rows (optbench.projection.term_selection)",
        "rows": len(scored),
        "terms": terms,
    }
