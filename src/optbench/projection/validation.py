"""How far the projection is from every published row, under seven schemes, each beside copying (``make projection``).

Each row is projected at its own configuration (the :class:`~optbench.projection.row_config.RowRuns` handed down:
the path ``make plan`` takes), with the calibration allowed to use only the rows the scheme keeps, and the carried table
and its MXFP8 ``M0`` refitted on those rows alone (:mod:`optbench.projection.carried`: nested, the held-out rows never
fit anything):

* ``leave_one_setup_out``: no row of the row's model x GPU x GPU count x precision (every release held out at
  once): what a user planning a setup nobody published gets. Each model x GPU here has one GPU count, so the
  efficiency comes from the carried table of the other setups.
* ``leave_one_model_out``: no row of the row's model (a model the user brings).
* ``leave_one_architecture_out``: no row of a GPU of the row's architecture (Hopper, Blackwell, Blackwell Ultra).
* ``leave_one_family_out``: no row of a GPU of the row's system family (NVL72 racks, or 8-GPU nodes).
* ``leave_one_gpu_out``: no row of the row's GPU, any model.
* ``leave_one_layout_out``: rows of the same model and GPU whose layout differs from the row's (TP, PP, VPP, CP,
  EP, ETP, MBS, GBS); a row without such a sibling is not projected in this scheme.
* ``leave_one_release_out``: no row of the row's release (a new container).
* ``leave_one_row_out``: every row but this one (mostly its own setup at another release: NVIDIA's drift).
* ``in_sample``: every AdamW row.

Each scheme's summary also has its 80 % band's coverage on rows of groups the band never saw, the band's median
half width, and a bootstrap 90 % interval over setups of its median and within-5 % share
(:mod:`optbench.projection.bands`).

Beside each scheme, the copy baseline (:mod:`optbench.projection.copy_baseline`) predicts the row with the nearest
published row the scheme keeps, with no model at all. Muon rows are never fitted. The summary counts the rows of
the validated domain: a release whose NVIDIA preset we executed, a model-only figure, and a row the model can
describe and its own setup's other releases do not contradict (:mod:`optbench.projection.consistency`). The
others are listed with the reason, never fitted and never hidden.
"""

from __future__ import annotations

import statistics
from typing import Any


from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS
from optbench.projection.calibration import Holdout, row_id, solve_on
from optbench.projection.bands import RESAMPLES, bootstrap, error_band, held_out_coverage
from optbench.projection.carried import refitted, setup_of
from optbench.projection.interconnect import system_family
from optbench.catalog.hardware import gpu_catalog
from optbench.projection.copy_baseline import copied, figure
from optbench.projection.expected_error import SCHEME_LABELS
from optbench.projection.published_rows import projection_error
from optbench.projection.release_drift import release_drift
from optbench.projection.row_config import RowRuns, layout_key
from optbench.common.checkout import repo_root
from optbench.catalog.published import PublishedRow, default_published_dir, load_inconsistent, release_order

SCHEMES = tuple(SCHEME_LABELS)
WITHIN = (3.0, 5.0, 10.0)
"""|error| thresholds the summary counts (percent)."""


def gpu_group(scheme: str, gpu: str) -> str | None:
    """The group of GPUs ``scheme`` holds out with ``gpu``: its architecture or its system family (None: another
    scheme)."""
    if scheme == "leave_one_architecture_out":
        spec = gpu_catalog().get(gpu)
        return spec.arch if spec else gpu
    if scheme == "leave_one_family_out":
        return system_family(gpu) or gpu
    return None


def holdout_for(scheme: str, row: PublishedRow, rows: list[PublishedRow], row_runs: RowRuns) -> Holdout:
    """The rows ``scheme`` holds out when it projects ``row`` (one of ``rows``)."""
    own = frozenset({row_id(row)})
    group = gpu_group(scheme, row.gpu)
    if group is not None:
        return Holdout(gpus=frozenset(r.gpu for r in rows if gpu_group(scheme, r.gpu) == group))
    if scheme == "leave_one_layout_out":  # every row of the row's model and GPU at its layout
        layout = layout_key(row, row_runs)
        return Holdout(
            rows=own
            | frozenset(
                row_id(r)
                for r in rows
                if (r.model, r.gpu) == (row.model, row.gpu) and layout_key(r, row_runs) == layout
            )
        )
    return {
        "in_sample": Holdout(),
        "leave_one_row_out": Holdout(rows=own),
        "leave_one_release_out": Holdout(releases=frozenset({row.release})),
        "leave_one_setup_out": Holdout(setups=frozenset({setup_of(row)})),
        "leave_one_gpu_out": Holdout(gpus=frozenset({row.gpu})),
        "leave_one_model_out": Holdout(models=frozenset({row.model})),
    }[scheme]


def _projected(
    scheme: str, row: PublishedRow, rows: list[PublishedRow], published: str, row_runs: RowRuns
) -> dict[str, Any]:
    """The row projected under ``scheme``, with its copy baseline and the parameters the projection used."""
    holdout = holdout_for(scheme, row, rows, row_runs)
    if scheme == "leave_one_layout_out" and not any(
        r.model == row.model and r.gpu == row.gpu and r.optimizer == "adamw" and holdout.keeps(r) for r in rows
    ):
        return {"reason": "no AdamW row of this model and GPU at another layout"}
    table, assumptions = refitted(published, holdout, row_runs)
    result = projection_error(row, row_runs, holdout, assumptions)
    if "error_percent" in result:
        carried = result["anchor"].startswith("the carried table")
        fitted = (table.parameter_count if carried else 2) if table else 1
        result["parameters"] = fitted + result.pop("precision_ratios")
    result["copy"] = copied(row, rows, holdout.keeps, row_runs)
    return result


def _outside(
    row: PublishedRow, in_sample: dict[str, Any], inconsistent: dict[str, str], row_runs: RowRuns
) -> str | None:
    """Why a row is outside the validated domain, or None."""
    if "reason" in in_sample:
        return in_sample["reason"]
    if not in_sample["in_domain"]:
        return f"release {row.release}: no NVIDIA preset of it was executed (its full layout is unknown)"
    if row_id(row) in inconsistent:
        return inconsistent[row_id(row)]
    if row.optimizer == "adamw":
        solved = solve_on(row, DEFAULT_ASSUMPTIONS, row_runs)
        if isinstance(solved, str):
            return solved
    return None


def validate_rows(
    rows: list[PublishedRow], row_runs: RowRuns, inconsistent: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """One record per published row: its configuration, and per scheme the projection and error (or why none).
    ``row_runs``: the rows' composed runs; ``inconsistent``: rows their own setup contradicts (default: the committed
    list the calibration reads)."""
    directory = default_published_dir(repo_root() / "results")
    if inconsistent is None:
        inconsistent = load_inconsistent(directory)
    out = []
    for row in rows:
        config = row_runs.config(row)
        record: dict[str, Any] = {
            "row": row_id(row),
            "release": row.release,
            "model": row.model,
            "gpu": row.gpu,
            "num_gpus": row.num_gpus,
            "precision": row.precision,
            "optimizer": row.optimizer,
            "published_model_tflops_per_gpu": row.model_tflops_per_gpu,
            "published_tflops_per_gpu_our_count": figure(row, row_runs),
            "command": None if isinstance(config, str) else config.command,
            "typed_from_row": [] if isinstance(config, str) else list(config.typed),
            "setup": list(setup_of(row)),
            "layout": None if layout_key(row, row_runs) is None else list(layout_key(row, row_runs)),
        }
        for scheme in SCHEMES:
            record[scheme] = _projected(scheme, row, rows, str(directory), row_runs)
        record["outside_domain"] = _outside(row, record["in_sample"], inconsistent, row_runs)
        out.append(record)
    return out


def _scores(errors: list[float]) -> dict[str, Any]:
    return {
        "rows": len(errors),
        "median_abs_error_percent": round(statistics.median(errors), 2),
        **{f"within_{t:g}_percent": round(sum(e <= t for e in errors) / len(errors), 3) for t in WITHIN},
    }


def held_out_group(scheme: str, record: dict[str, Any]) -> Any:
    """What ``scheme`` holds out with the record's row: the unit a band is never made from when it is tested on it."""
    group = gpu_group(scheme, record["gpu"])
    if group is not None:
        return group
    return {
        "leave_one_setup_out": tuple(record["setup"]),
        "leave_one_model_out": record["model"],
        "leave_one_gpu_out": record["gpu"],
        "leave_one_layout_out": (record["model"], record["gpu"], str(record["layout"])),
        "leave_one_release_out": record["release"],
    }.get(scheme, record["row"])


def _band_figures(chosen: list[dict[str, Any]], scheme: str) -> dict[str, Any]:
    """The band of ``scheme`` (from all its rows), its coverage on held-out groups, and the bootstrap over setups."""
    errors = [r[scheme]["error_percent"] / 100 for r in chosen]
    setups = [tuple(r["setup"]) for r in chosen]
    groups = [held_out_group(scheme, r) for r in chosen]
    low, high = error_band(errors, groups)
    return {
        "band_80_error_percent": [round(100 * low, 2), round(100 * high, 2)],
        "band_80_groups": len(set(groups)),
        **held_out_coverage(errors, groups),
        "bootstrap_90": {
            "unit": "setup",
            "setups": len(set(setups)),
            "resamples": RESAMPLES,
            "median_abs_error_percent": [round(100 * v, 2) for v in bootstrap(errors, setups, statistics.median)],
            "within_5_percent": [
                round(v, 3) for v in bootstrap(errors, setups, lambda s: sum(e <= 0.05 for e in s) / len(s))
            ],
        },
    }


def scored(records: list[dict[str, Any]], scheme: str, optimizer: str | None = None) -> list[dict[str, Any]]:
    """The records ``scheme`` scores: rows of the validated domain it projected (of ``optimizer``; None: every one)."""
    return [
        r
        for r in records
        if r["outside_domain"] is None and "error_percent" in r[scheme] and optimizer in (None, r["optimizer"])
    ]


def summary(records: list[dict[str, Any]], scheme: str, optimizer: str | None = None) -> dict[str, Any]:
    """Median |error|, share within each threshold and the worst rows of ``scheme`` over the validated domain, and
    the copy baseline's scores over the same rows (``copy_baseline``)."""
    chosen = scored(records, scheme, optimizer)
    if not chosen:
        return {"rows": 0}
    worst = sorted(chosen, key=lambda r: -abs(r[scheme]["error_percent"]))[:3]
    copies = [abs(r[scheme]["copy"]["error_percent"]) for r in chosen if "error_percent" in r[scheme]["copy"]]
    return {
        **_scores([abs(r[scheme]["error_percent"]) for r in chosen]),
        "worst": [{"row": r["row"], "error_percent": r[scheme]["error_percent"]} for r in worst],
        "fitted_parameters": max(r[scheme]["parameters"] for r in chosen),
        "fitted_parameters_note": "the most fitted numbers one projection uses: an anchor row's efficiency and the "
        "MXFP8 M0 (2), or the carried table's GPU, model and release terms and M0; plus the rate ratio (or two) an "
        "efficiency carried across precision used",
        "distinct_anchors": len({r[scheme]["anchor"] for r in chosen}),
        "copy_baseline": {**_scores(copies), "fitted_parameters": 0} if copies else {"rows": 0},
        **_band_figures(chosen, scheme),
    }


def report(rows: list[PublishedRow], row_runs: RowRuns) -> dict[str, Any]:
    """Every row's record and the summaries (all rows, AdamW rows, Muon rows) per scheme."""
    records = validate_rows(rows, row_runs)
    summaries = {
        scheme: {
            label: summary(records, scheme, opt) for label, opt in (("all", None), ("adamw", "adamw"), ("muon", "muon"))
        }
        for scheme in SCHEMES
    }
    releases = sorted({r["release"] for r in records}, key=release_order)
    return {
        "schemes": list(SCHEMES),
        "summary": summaries,
        "releases": releases,
        "rows": records,
        "release_drift": release_drift(rows),
    }
