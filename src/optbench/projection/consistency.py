"""Published rows that their own setup's other releases contradict: listed with the reason, never an anchor.

NVIDIA's tables are not all consistent with themselves. A **setup** is one source, model, GPU, GPU count and
precision, published once per release. Each AdamW row of a release whose preset we executed is projected
from every other such row of its setup, each alone as the anchor (its release's own preset and layout on both
sides, as ``make plan`` projects them). A row is **inconsistent** when at least two other releases project it
and every one of them misses it by more than :data:`MISS` in the same direction: no single GEMM efficiency
reconciles it with the rest of its setup, and an efficiency solved on it would carry its error to every run
anchored there.

On the committed rows this flags Qwen3 30B-A3B 26.02 on B200 (223 TFLOP/s/GPU: the three later releases project
it +156 to +160 %) and on H100 (118: the four later releases +91 to +95 %); every other row is projected within
18 % by each other release of its setup (those two anchoring nothing), so any threshold from 18 to 90 % gives the
same list. Two releases that only contradict each other flag neither: nothing says which one is wrong. The check
reads the listed rows as anchors of nothing, so it is run to a fixed point: run again, it writes the same file.

``make projection`` writes ``results/published/inconsistent.csv``; the calibration and the validation read it
(:func:`optbench.catalog.published.load_inconsistent`), and ``tests/test_projection_rows.py`` holds the committed file
to this check.
"""

from __future__ import annotations

import csv
import io

from optbench.projection.calibration import Holdout, row_id
from optbench.projection.published_rows import projection_error
from optbench.projection.row_config import RowRuns
from optbench.catalog.published import PublishedRow

MISS = 50.0
"""|error| in percent beyond which another release's projection contradicts a row."""

MIN_WITNESSES = 2
"""Other releases that must all contradict a row (one alone cannot say which of the two is wrong)."""


def _executed(row: PublishedRow, row_runs: RowRuns) -> bool:
    """An AdamW row with a model figure of a release whose NVIDIA preset we executed."""
    config = row_runs.config(row)
    return (
        row.optimizer == "adamw" and bool(row.model_tflops_per_gpu) and not isinstance(config, str) and config.in_domain
    )


def cross_release_errors(rows: list[PublishedRow], row_runs: RowRuns) -> dict[str, list[tuple[str, float]]]:
    """Per executed AdamW row: (release, error %) of its projection from each other release of its setup alone."""
    executed = [row for row in rows if _executed(row, row_runs)]
    every = frozenset(row_id(row) for row in rows)
    out: dict[str, list[tuple[str, float]]] = {}
    for row in executed:
        errors = []
        for other in executed:
            if other is row or other.setup != row.setup or other.release == row.release:
                continue
            result = projection_error(
                row, row_runs, Holdout(rows=every - {row_id(other)})
            )  # ``other``: the one anchor left
            if "error_percent" in result:
                errors.append((other.release, result["error_percent"]))
        out[row_id(row)] = errors
    return out


def inconsistent_rows(rows: list[PublishedRow], row_runs: RowRuns) -> dict[str, str]:
    """Row id -> reason, for every row its own setup's other releases contradict (see the module docstring)."""
    flagged = {}
    for row, errors in cross_release_errors(rows, row_runs).items():
        values = [error for _, error in errors]
        if len(values) >= MIN_WITNESSES and (min(values) > MISS or max(values) < -MISS):
            flagged[row] = (
                f"its setup's other releases ({', '.join(release for release, _ in errors)}) each project it "
                f"{min(values):+.0f} to {max(values):+.0f} % off: inconsistent with its own setup, never an anchor"
            )
    return flagged


def csv_text(flagged: dict[str, str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["row", "reason"])
    for row in sorted(flagged):
        writer.writerow([row, flagged[row]])
    return buffer.getvalue()
