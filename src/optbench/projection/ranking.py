"""Rank planned layouts by projected throughput (``make sweep ... dryrun=true``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _layout(plan: dict[str, Any]) -> str:
    lay = plan["layout"]
    return f"TP{lay['tp']} PP{lay['pp']} VPP{lay['vpp']} CP{lay['cp']} EP{lay['ep']} ETP{lay['etp']} DP{lay['dp']}"


def rank_by_projection(points: Sequence[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Points with a projection, best projected model TFLOP/s per GPU first (ties: faster step with NS)."""
    projected = [(name, plan) for name, plan in points if plan.get("projection", {}).get("available")]
    return sorted(
        projected,
        key=lambda pair: (-pair[1]["projection"]["tflops_per_gpu"], -pair[1]["projection"]["tflops_per_gpu_with_ns"]),
    )


def ranking_lines(points: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    """A ranked table of the valid points (name, plan): projected step, TFLOP/s (model, with NS), MFU."""
    ranked = rank_by_projection(points)
    missing = [(name, plan) for name, plan in points if not plan.get("projection", {}).get("available")]
    if not points:
        return []
    lines = ["Projected throughput (model-only TFLOP/s/GPU, best first; docs/projection.md):"]
    if ranked:
        width = max(len(name) for name, _ in ranked)
        lines.append(
            f"  {'#':>2}  {'point':<{width}}  {'layout':<34} {'step s':>7} {'model':>8} {'with NS':>8}  MFU"
        )
        for index, (name, plan) in enumerate(ranked, start=1):
            p = plan["projection"]
            key, mfu = next(iter(p["mfu"].items()), ("-", 0.0))
            lines.append(
                f"  {index:>2}  {name:<{width}}  {_layout(plan):<34} {p['step_time_s']:>7.2f}"
                f" {p['tflops_per_gpu']:>8.1f} {p['tflops_per_gpu_with_ns']:>8.1f}  {100 * mfu:.1f} % of {key}"
            )
    for name, plan in missing:
        reason = plan.get("projection", {}).get("reason", "no projection in the plan")
        lines.append(f"   -  {name}: not ranked ({reason})")
    return lines


def print_ranking(points: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Print :func:`ranking_lines`."""
    for line in ranking_lines(points):
        print(line)
