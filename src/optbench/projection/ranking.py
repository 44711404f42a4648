"""Rank planned layouts by projected throughput (``make sweep ... dryrun=true``).

A point is (name, layout, the plan's projection section).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optbench.config.layout import Layout
from optbench.common.tables import console_table
from optbench.projection.expected_error import CARRIED_SCHEMES

Point = tuple[str, Layout, Mapping[str, Any]]
"""A planned point: its name, its layout and its plan's projection section."""


def _layout(lay: Layout) -> str:
    return f"TP{lay.tp} PP{lay.pp} VPP{lay.vpp} CP{lay.cp} EP{lay.ep} ETP{lay.etp} DP{lay.dp}"


def rank_by_projection(points: Sequence[Point]) -> list[Point]:
    """Points with a projection, best projected model TFLOP/s per GPU first (ties: faster step with NS)."""
    projected = [point for point in points if point[2].get("available")]
    return sorted(projected, key=lambda point: (-point[2]["tflops_per_gpu"], -point[2]["tflops_per_gpu_with_ns"]))


def ranking_lines(points: Sequence[Point]) -> list[str]:
    """A ranked table of the valid points: projected step, TFLOP/s (model, with NS), MFU."""
    ranked = rank_by_projection(points)
    missing = [(name, p) for name, _, p in points if not p.get("available")]
    if not points:
        return []
    lines = ["Projected throughput (model-only TFLOP/s/GPU, best first; docs/projection.md):"]
    if ranked:
        cells = []
        for index, (name, lay, p) in enumerate(ranked, start=1):
            key, mfu = next(iter(p["mfu"].items()), ("-", 0.0))
            cells.append([index, name, _layout(lay), f"{p['step_time_s']:.2f}", f"{p['tflops_per_gpu']:.1f}",
                          f"{p['tflops_per_gpu_with_ns']:.1f}", f"{100 * mfu:.1f} % of {key}"])
        lines += console_table(["#", "point", "layout", "step s", "model", "with NS", "MFU"], cells,
                               ("right", "left", "left", "right", "right", "right", "left"))
    expected = [(name, p.get("expected_error") or {}) for name, _, p in ranked]
    crossing = [name for name, e in expected if e.get("measured") is False and e.get("scheme") not in CARRIED_SCHEMES]
    if crossing:
        lines.append(_first_guess(crossing, "across precision (expected error not measured, docs/projection.md section 6)"))
    moved = [(name, e) for name, e in expected if e.get("scheme") in CARRIED_SCHEMES and name not in crossing]
    if moved:
        error = moved[0][1]
        how = (f"median {error['median_abs_error_percent']:.1f} % over {error['rows']} rows, {error['scheme']}"
               if "median_abs_error_percent" in error else "not measured")
        lines.append(_first_guess([name for name, _ in moved],
                                  f"from the carried table (expected error {how}; docs/projection.md section 7)"))
    for name, p in missing:
        reason = p.get("reason", "no projection in the plan")
        lines.append(f"   -  {name}: not ranked ({reason})")
    return lines


def _first_guess(names: Sequence[str], how: str) -> str:
    """The note under a ranking for points whose efficiency was carried ``how``."""
    one = len(names) == 1
    return (f"  note: {', '.join(names)} {'carries' if one else 'carry'} the efficiency {how}: "
            f"{'its' if one else 'their'} place beside the others is a first guess")


def print_ranking(points: Sequence[Point]) -> None:
    """Print :func:`ranking_lines`."""
    for line in ranking_lines(points):
        print(line)
