"""Rank planned layouts by projected throughput (``make sweep ... dryrun=true``).

A point is (name, layout, the plan's projection section).
"""

from __future__ import annotations

from collections.abc import Sequence

from optbench.config.layout import Layout
from optbench.common.tables import console_table
from optbench.projection.bands import bands_overlap
from optbench.projection.expected_error import CARRIED_SCHEMES, expected_error_cell
from optbench.projection.section import ExpectedError, Projection, ProjectionSection

Point = tuple[str, Layout, Projection]
"""A planned point: its name, its layout and its plan's projection section."""


def _layout(lay: Layout) -> str:
    return f"TP{lay.tp} PP{lay.pp} VPP{lay.vpp} CP{lay.cp} EP{lay.ep} ETP{lay.etp} DP{lay.dp}"


def rank_by_projection(points: Sequence[Point]) -> list[Point]:
    """Points with a projection, best projected model TFLOP/s per GPU first (ties: faster step with NS)."""
    projected = [point for point in points if isinstance(point[2], ProjectionSection)]
    return sorted(projected, key=lambda point: (-point[2].step.tflops_per_gpu, -point[2].step.tflops_per_gpu_with_ns))


def ranking_lines(points: Sequence[Point]) -> list[str]:
    """A ranked table of the valid points: projected step, TFLOP/s (model, with NS), MFU."""
    ranked = rank_by_projection(points)
    missing = [(name, p.reason) for name, _, p in points if not isinstance(p, ProjectionSection)]
    if not points:
        return []
    lines = ["Projected throughput (model-only TFLOP/s/GPU, best first; docs/projection.md):"]
    expected = [(name, p.expected_error or ExpectedError()) for name, _, p in ranked]
    if ranked:
        cells = []
        best = ranked[0][2].step.tflops_per_gpu
        ties = 0
        for index, ((name, lay, p), (_, error)) in enumerate(zip(ranked, expected), start=1):
            step = p.step
            key, mfu = next(iter(step.mfu.items()), ("-", 0.0))
            tie = index > 1 and ties_with_best(step.tflops_per_gpu, best, error, expected[0][1])
            ties += tie
            cells.append(
                [
                    index,
                    name,
                    _layout(lay),
                    f"{step.step_time_s:.2f}",
                    f"{step.tflops_per_gpu:.1f}",
                    f"{step.tflops_per_gpu_with_ns:.1f}",
                    f"{100 * mfu:.1f} % of {key}",
                    expected_error_cell(error),
                    "~" if tie else "",
                ]
            )
        lines += console_table(
            ["#", "point", "layout", "step s", "model", "with NS", "MFU", "expected error", ""],
            cells,
            ("right", "left", "left", "right", "right", "right", "left", "left", "left"),
        )
        if ties:
            lines.append(
                f"  ~ ties      {ties} point{'' if ties == 1 else 's'} whose 80 % band overlaps the best's (or,"
                " without a band, within either one's median error): the model does not resolve their order"
            )
    crossing = [name for name, e in expected if e.measured is False and e.scheme not in CARRIED_SCHEMES]
    if crossing:
        lines.append(
            _first_guess(crossing, "across precision (expected error not measured, docs/projection.md section 6)")
        )
    moved = [(name, e) for name, e in expected if e.scheme in CARRIED_SCHEMES and name not in crossing]
    if moved:
        error = moved[0][1]
        how = (
            f"median {error.median_abs_error_percent:.1f} % over {error.rows} rows, {error.scheme}"
            if error.median_abs_error_percent is not None
            else "not measured"
        )
        lines.append(
            _first_guess(
                [name for name, _ in moved],
                f"from the carried table (expected error {how}; docs/projection.md section 7)",
            )
        )
    for name, reason in missing:
        lines.append(f"   -  {name}: not ranked ({reason})")
    return lines


def error_band_of(expected: ExpectedError | None) -> tuple[float, ...] | None:
    """The (low, high) signed error band of an expected error, fractions; None where it has none."""
    if expected is None or expected.band is None or len(expected.band.error_percent) != 2:
        return None
    return tuple(e / 100 for e in expected.band.error_percent)


def ties_with_best(
    tflops: float, best: float, error: ExpectedError | None, best_error: ExpectedError | None = None
) -> bool:
    """Whether a point projecting ``tflops`` ties with the best (``~``): their 80 % bands overlap (each its own band,
    ``best_error``'s else ``error``'s: a sweep's points may fall in different classes,
    :func:`~optbench.projection.bands.bands_overlap`); without both bands, the gap is within the larger of the two
    median errors."""
    best_error = best_error or error
    own, of_best = error_band_of(error), error_band_of(best_error)
    if own is not None and of_best is not None:
        return bands_overlap(tflops, best, own, of_best)
    known = [
        e.median_abs_error_percent
        for e in (error, best_error)
        if e is not None and e.median_abs_error_percent is not None
    ]
    return bool(known) and 100 * (1 - tflops / best) <= max(known)


def _first_guess(names: Sequence[str], how: str) -> str:
    """The note under a ranking for points whose efficiency was carried ``how``."""
    one = len(names) == 1
    return (
        f"  note: {', '.join(names)} {'carries' if one else 'carry'} the efficiency {how}: "
        f"{'its' if one else 'their'} place beside the others is a first guess"
    )


def print_ranking(points: Sequence[Point]) -> None:
    """Print :func:`ranking_lines`."""
    for line in ranking_lines(points):
        print(line)
