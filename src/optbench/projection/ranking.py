"""Rank planned layouts by projected throughput (``make sweep ... dryrun=true``).

A point is (name, layout, the plan's projection section).
"""

from __future__ import annotations

from collections.abc import Sequence

from optbench.config.layout import Layout
from optbench.common.tables import console_table
from optbench.projection.bands import band_of
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
            tie = index > 1 and _tie(step.tflops_per_gpu, best, error, expected[0][1])
            ties += tie
            cells.append([index, name, _layout(lay), f"{step.step_time_s:.2f}", f"{step.tflops_per_gpu:.1f}",
                          f"{step.tflops_per_gpu_with_ns:.1f}", f"{100 * mfu:.1f} % of {key}", expected_error_cell(error),
                          "~" if tie else ""])
        lines += console_table(["#", "point", "layout", "step s", "model", "with NS", "MFU", "expected error", ""],
                               cells, ("right", "left", "left", "right", "right", "right", "left", "left", "left"))
        if ties:
            lines.append(f"  ~ ties      {ties} point{'' if ties == 1 else 's'} whose 80 % band overlaps the best's (or,"
                         " without a band, within either one's median error): the model does not resolve their order")
    crossing = [name for name, e in expected if e.measured is False and e.scheme not in CARRIED_SCHEMES]
    if crossing:
        lines.append(_first_guess(crossing, "across precision (expected error not measured, docs/projection.md section 6)"))
    moved = [(name, e) for name, e in expected if e.scheme in CARRIED_SCHEMES and name not in crossing]
    if moved:
        error = moved[0][1]
        how = (f"median {error.median_abs_error_percent:.1f} % over {error.rows} rows, {error.scheme}"
               if error.median_abs_error_percent is not None else "not measured")
        lines.append(_first_guess([name for name, _ in moved],
                                  f"from the carried table (expected error {how}; docs/projection.md section 7)"))
    for name, reason in missing:
        lines.append(f"   -  {name}: not ranked ({reason})")
    return lines


def _tie(tflops: float, best: float, error: ExpectedError, best_error: ExpectedError) -> bool:
    """Whether a point projecting ``tflops`` ties with the best: the published figures their 80 % bands allow overlap
    (each its own band: a sweep's points may fall in different classes); without bands, the gap is within the larger
    of the two median errors."""
    bands = [e.band.error_percent for e in (error, best_error) if e.band is not None and len(e.band.error_percent) == 2]
    if len(bands) == 2:
        own, of_best = (tuple(x / 100 for x in b) for b in bands)
        return band_of(tflops, own)[1] >= band_of(best, of_best)[0]
    known = [e.median_abs_error_percent for e in (error, best_error) if e.median_abs_error_percent is not None]
    return bool(known) and 100 * (1 - tflops / best) <= max(known)


def _first_guess(names: Sequence[str], how: str) -> str:
    """The note under a ranking for points whose efficiency was carried ``how``."""
    one = len(names) == 1
    return (f"  note: {', '.join(names)} {'carries' if one else 'carry'} the efficiency {how}: "
            f"{'its' if one else 'their'} place beside the others is a first guess")


def print_ranking(points: Sequence[Point]) -> None:
    """Print :func:`ranking_lines`."""
    for line in ranking_lines(points):
        print(line)
