"""results/bench/grouped_gemm.md: the grouped expert GEMMs per EP at equal work, one table per model and precision."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from optbench.bench.sections import section_notes
from optbench.common.tables import markdown_table


def totals(cases: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """(model, precision, routed tokens, EP) -> both GEMMs' three passes summed: seconds, FLOPs, the model's
    floor, per-pass TFLOP/s, and the shape; cases that failed or were skipped carry their reason instead."""
    out: dict[tuple, dict[str, Any]] = {}
    per_pass: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    for c in cases:
        key = (c["model"], c["precision"], c["routed_tokens"], c["ep"])
        row = out.setdefault(
            key, {"groups": c["groups"], "rows": c["rows"], "seconds": 0.0, "flops": 0.0, "floor_s": 0.0}
        )
        if c.get("skipped"):
            row["problem"] = f"skipped: {c['skipped']}"
            continue
        if c.get("errors"):
            row["problem"] = "; ".join(f"{p}: {e}" for p, e in c["errors"].items())
        for name, seconds in c["seconds"].items():
            row["seconds"] += seconds
            row["flops"] += c["flops_per_pass"]
            row["floor_s"] += c["model_floor_s"][name]
            per_pass[key][name][0] += c["flops_per_pass"]
            per_pass[key][name][1] += seconds
    for key, row in out.items():
        row["tflops_per_pass"] = {p: f / s / 1e12 for p, (f, s) in per_pass[key].items() if s > 0}
    return out


def relative_to_largest_ep(rows: dict[tuple, dict[str, Any]]) -> dict[tuple, float]:
    """Each row's time over the time at the largest measured EP of its model, precision and routed tokens (equal
    FLOPs: ``G x M`` is fixed, up to the row rounding, so the ratio is taken on time per FLOP)."""
    best: dict[tuple, tuple[int, float]] = {}
    for (model, precision, routed, ep), row in rows.items():
        if "problem" in row or not row["flops"]:
            continue
        group = (model, precision, routed)
        if group not in best or ep > best[group][0]:
            best[group] = (ep, row["seconds"] / row["flops"])
    return {
        key: (row["seconds"] / row["flops"]) / best[key[:3]][1]
        for key, row in rows.items()
        if "problem" not in row and row["flops"] and key[:3] in best
    }


FIT_BASE_ROWS = 2048
"""Rows per expert from which a GEMM counts as large: each point is set against the median of these."""


def slowdown_points(data: dict[str, Any], precision: str = "bf16") -> list[tuple[int, float]]:
    """(rows per expert, time per FLOP over the median at rows >= :data:`FIT_BASE_ROWS` of the same model and
    routed tokens) for every measured row of ``precision``: what ``Assumptions.small_expert_gemm_*`` is fitted to."""
    rows = {k: v for k, v in totals(data["cases"]).items() if k[1] == precision and "problem" not in v and v["flops"]}
    base: dict[tuple, list[float]] = defaultdict(list)
    for (model, _, routed, _), row in rows.items():
        if row["rows"] >= FIT_BASE_ROWS:
            base[(model, routed)].append(row["seconds"] / row["flops"])
    return [
        (row["rows"], row["seconds"] / row["flops"] / statistics.median(base[(model, routed)]))
        for (model, _, routed, _), row in rows.items()
        if base.get((model, routed))
    ]


def fit_slowdown(points: list[tuple[int, float]], m0_grid: range = range(20, 400, 5)) -> tuple[float, float]:
    """``(M0, p)`` of ``s(M) = 1 + (M0 / M) ** p`` minimizing the squared log error over ``points`` (a point
    below 1 counts as 1: ``s`` is a slowdown), on ``m0_grid`` and a grid of 0.1 in ``p``."""

    def error(m0: float, p: float) -> float:
        return sum((math.log1p((m0 / rows) ** p) - math.log(max(ratio, 1.0))) ** 2 for rows, ratio in points)

    return min(((m0, p10 / 10) for m0 in m0_grid for p10 in range(3, 30)), key=lambda mp: error(*mp))


def markdown(data: dict[str, Any]) -> str:
    lines = ["# Grouped expert GEMMs per EP at equal work per GPU", ""]
    if not data.get("measured"):
        return "\n".join(
            [
                *lines,
                f"Not measured: {data['reason']}; run `make bench` on a GPU machine (or "
                "`python -m optbench bench --only grouped_gemm --gpu-only`).",
                "",
            ]
        )
    peaks = ", ".join(f"{p} {v:,.0f} TFLOP/s" for p, v in data["peak_tflops"].items())
    lines += [
        f"Device: {data['device']}; datasheet dense peaks {peaks}; HBM {data['hbm_tb_s']:.2f} TB/s (data/gpus.csv, "
        "data/interconnect.csv).",
        *section_notes(data),
        "",
        "A GPU of an EP group holds `G = experts / EP` experts with `M = T x top-k x EP / experts` routed tokens each: "
        "the same FLOPs at every EP, in more and smaller GEMMs as EP falls. Each row sums both expert GEMMs (gated "
        "fc1, fc2) over forward, data gradient and weight gradient, each the median of CUDA-event timings "
        "(bf16: `torch._grouped_mm`; fp8: `torch._scaled_grouped_mm`, e4m3 row-wise scales, casts not timed). "
        f"*x floor* = measured time / the step model's floor `max(FLOPs / ({data['gemm_kernel_efficiency']:.2f} x "
        "peak), bytes / HBM)`; *vs largest EP* = time per FLOP over that at the largest EP measured.",
        "",
    ]
    points = slowdown_points(data)
    if points:
        m0, p = fit_slowdown(points)
        lines += [
            f"Fit of the bf16 rows (time per FLOP over the median at >= {FIT_BASE_ROWS} rows per expert of the same "
            f"model and routed tokens, {len(points)} points): `s(M) = 1 + ({m0:g} / M) ^ {p:g}`; the step model's "
            "`Assumptions.small_expert_gemm_rows` and `small_expert_gemm_power` (docs/projection.md section 1).",
            "",
        ]
    rows = totals(data["cases"])
    relative = relative_to_largest_ep(rows)
    for model in dict.fromkeys(k[0] for k in rows):
        for precision in dict.fromkeys(k[1] for k in rows if k[0] == model):
            cells = []
            for key, row in rows.items():
                if key[:2] != (model, precision):
                    continue
                head = [f"{key[2]:,}", key[3], row["groups"], f"{row['rows']:,}"]
                passes = " / ".join(
                    f"{row['tflops_per_pass'][p]:,.0f}" if p in row["tflops_per_pass"] else "-"
                    for p in ("forward", "dgrad", "wgrad")
                )
                if "problem" in row:
                    cells.append([*head, passes, f"not measured: {row['problem']}"])
                    continue
                share = row["flops"] / row["seconds"] / (data["peak_tflops"][precision] * 1e12)
                cells.append(
                    [
                        *head,
                        passes,
                        f"{row['seconds'] * 1e3:.2f}",
                        f"{share:.0%}",
                        f"{row['seconds'] / row['floor_s']:.2f}",
                        f"{relative[key]:.2f}x",
                    ]
                )
            lines += [
                f"## {model}, {precision}",
                "",
                *markdown_table(
                    [
                        "T x top-k",
                        "EP",
                        "experts per GPU",
                        "rows per expert",
                        "TFLOP/s fwd / dgrad / wgrad",
                        "total ms",
                        "% of peak",
                        "x floor",
                        "vs largest EP",
                    ],
                    cells,
                ),
            ]
            lines.append("")
    return "\n".join(lines)
