"""How much a published figure moves from one release to the next, with and without a change of NVIDIA's preset.

Why the calibration prefers an anchor whose release ran the very configuration of the run's release
(:func:`optbench.projection.calibration.ranked_anchors`) over the nearest release: for each setup NVIDIA
publishes in consecutive releases (same source, model, GPU, GPU count, precision; AdamW), the relative change
of its model TFLOP/s/GPU, split by whether the executed preset of that setup (``presets-<bridge>.json``: layout,
settings, recipe values, job) is the same in both releases. Rows of a release without an executed preset are
left out (nothing says whether its configuration changed).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from optbench.accounting.plan_fields import PRECISION_ALIASES
from optbench.common.tables import markdown_table
from optbench.catalog.published import PublishedRow, release_order
from optbench.releases.presets import case_key, executed_configuration

T = TypeVar("T")


def preset_key(row: PublishedRow) -> str:
    """The key of a published AdamW row's setup in ``presets-<bridge>.json`` (NVIDIA names the optimizer adam)."""
    return case_key(row.model, row.gpu, PRECISION_ALIASES.get(row.precision, row.precision), "adam")


def same_configuration(row: PublishedRow, release: str) -> bool:
    """Whether NVIDIA's executed preset of the row's setup in ``release`` is the one of the row's own release."""
    if row.release == release:
        return True
    theirs = executed_configuration(f"nemo:{row.release}", preset_key(row))
    return theirs is not None and theirs == executed_configuration(f"nemo:{release}", preset_key(row))


def consecutive_releases(items: Iterable[T], row_of: Callable[[T], PublishedRow]) -> Iterator[tuple[T, T]]:
    """Every pair of neighbours in release order among the items of one setup and optimizer
    (:attr:`PublishedRow.setup`), setup by setup in the order they first appear; ``row_of`` gives an item's row."""
    series: dict[tuple, list[T]] = {}
    for item in items:
        row = row_of(item)
        series.setdefault((row.setup, row.optimizer), []).append(item)
    for entries in series.values():
        entries.sort(key=lambda item: release_order(row_of(item).release))
        yield from zip(entries, entries[1:])


def _steps(rows: list[PublishedRow]) -> list[dict[str, Any]]:
    adamw = [row for row in rows if row.optimizer == "adamw" and row.model_tflops_per_gpu]
    steps = []
    for before, after in consecutive_releases(adamw, lambda row: row):
        key = preset_key(before)
        if before.release == after.release or any(
            executed_configuration(f"nemo:{row.release}", key) is None for row in (before, after)
        ):
            continue
        steps.append(
            {
                "setup": f"{before.model} {before.gpu} x{before.num_gpus} {before.precision} ({before.source})",
                "from": before.release,
                "to": after.release,
                "tflops": [before.model_tflops_per_gpu, after.model_tflops_per_gpu],
                "change_percent": round(100 * (after.model_tflops_per_gpu / before.model_tflops_per_gpu - 1), 2),
                "same_preset": same_configuration(before, after.release),
            }
        )
    return steps


def release_drift(rows: list[PublishedRow]) -> dict[str, Any]:
    """Every consecutive-release step and, per kind (preset unchanged / changed), the count, median and largest
    |change|."""
    steps = _steps(rows)
    kinds = {}
    for name, same in (("preset_unchanged", True), ("preset_changed", False)):
        changes = [abs(step["change_percent"]) for step in steps if step["same_preset"] is same]
        kinds[name] = {
            "steps": len(changes),
            "median_abs_change_percent": round(statistics.median(changes), 2) if changes else None,
            "max_abs_change_percent": max(changes) if changes else None,
        }
    return {"summary": kinds, "steps": steps}


def drift_lines(drift: dict[str, Any]) -> list[str]:
    """The drift summary as markdown table lines."""
    cells = []
    for name, label in (("preset_unchanged", "unchanged"), ("preset_changed", "changed")):
        s = drift["summary"][name]
        if s["steps"]:
            cells.append(
                [label, s["steps"], f"{s['median_abs_change_percent']:.1f} %", f"{s['max_abs_change_percent']:.1f} %"]
            )
    lines = markdown_table(
        ["NVIDIA's executed preset between consecutive releases", "steps", "median abs. change", "largest abs. change"],
        cells,
    )
    return lines
