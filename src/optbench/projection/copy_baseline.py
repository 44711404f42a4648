"""What copying a published figure would score: the baseline every validation scheme sets its model beside.

For a held-out row, the copy baseline predicts the model-only TFLOP/s/GPU (each row's speed in our FLOPs count, as
the model is scored) of the **nearest** published row the scheme keeps, with no step model at all. Nearest, in this
order: the same optimizer, the same model, the same precision, the same GPU (else one in the same system shape, NVL72
or 8-GPU node, then of the same architecture), the same GPU count, the same layout, the nearest release (earlier
before later), then file order. A scheme that keeps no row of the model copies another model's figure; one that keeps
nothing copies nothing (the row then has no baseline).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from optbench.catalog.hardware import gpu_catalog
from optbench.projection.carried import precision_class
from optbench.projection.interconnect import system_family
from optbench.projection.row_config import RowRuns, layout_key
from optbench.projection.row_solve import published_tflops_at
from optbench.catalog.published import PublishedRow, release_order, row_id


def _gpu_distance(a: str, b: str) -> tuple[bool, bool, bool]:
    """(another GPU, in another system shape: NVLink domain size, of another architecture)."""
    if a == b:
        return False, False, False
    catalog = gpu_catalog()
    families = system_family(a), system_family(b)
    return (
        True,
        None in families or families[0] != families[1],
        a not in catalog or b not in catalog or catalog[a].arch != catalog[b].arch,
    )


def nearest(
    row: PublishedRow, rows: Sequence[PublishedRow], keeps: Callable[[PublishedRow], bool], row_runs: RowRuns
) -> PublishedRow | None:
    """The kept row nearest ``row`` (see the module docstring), or None."""
    candidates = [(i, r) for i, r in enumerate(rows) if r is not row and r.model_tflops_per_gpu and keeps(r)]
    if not candidates:
        return None
    own = layout_key(row, row_runs)

    def distance(pair: tuple[int, PublishedRow]) -> tuple:
        index, other = pair
        gap = release_order(other.release), release_order(row.release)
        return (
            other.optimizer != row.optimizer,
            other.model != row.model,
            precision_class(other) != precision_class(row),
            _gpu_distance(row.gpu, other.gpu),
            other.num_gpus != row.num_gpus,
            layout_key(other, row_runs) != own,
            abs(
                len(
                    [
                        x
                        for x in sorted({r.release for r in rows}, key=release_order)
                        if min(gap) < release_order(x) <= max(gap)
                    ]
                )
            ),
            gap[0] > gap[1],
            index,
        )

    return min(candidates, key=distance)[1]


def copied(
    row: PublishedRow, rows: Sequence[PublishedRow], keeps: Callable[[PublishedRow], bool], row_runs: RowRuns
) -> dict[str, Any]:
    """{'tflops', 'error_percent', 'copied_from'} for ``row``, or {'reason'} when the scheme keeps nothing to copy."""
    source = nearest(row, rows, keeps, row_runs)
    if source is None or not row.model_tflops_per_gpu:
        return {"reason": "no row kept to copy"}
    copy, truth = figure(source, row_runs), figure(row, row_runs)
    return {
        "tflops": copy,
        "error_percent": round(100 * (copy / truth - 1), 2),
        "copied_from": row_id(source),
    }


def figure(row: PublishedRow, row_runs: RowRuns) -> float | None:
    """The row's figure as the model is scored on it (TFLOP/s/GPU, 2 decimals): its speed in our FLOPs count at its
    own run where it has one, else its published model-only figure (None without one)."""
    resolved = row_runs.run(row)
    at_run = None if isinstance(resolved, str) else published_tflops_at(resolved.run, row)
    value = at_run or row.model_tflops_per_gpu
    return None if value is None else round(value, 2)
