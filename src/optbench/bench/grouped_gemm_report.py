"""results/bench/grouped_gemm.md: the grouped expert GEMMs per EP at equal work, one table per model and precision."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from optbench.bench.sections import kept_line, provenance_line


def totals(cases: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """(model, precision, routed tokens, EP) -> both GEMMs' three passes summed: seconds, FLOPs, the model's
    floor, per-pass TFLOP/s, and the shape; cases that failed or were skipped carry their reason instead."""
    out: dict[tuple, dict[str, Any]] = {}
    per_pass: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    for c in cases:
        key = (c["model"], c["precision"], c["routed_tokens"], c["ep"])
        row = out.setdefault(key, {"groups": c["groups"], "rows": c["rows"], "seconds": 0.0, "flops": 0.0, "floor_s": 0.0})
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
    return {key: (row["seconds"] / row["flops"]) / best[key[:3]][1]
            for key, row in rows.items() if "problem" not in row and row["flops"] and key[:3] in best}


def markdown(data: dict[str, Any]) -> str:
    lines = ["# Grouped expert GEMMs per EP at equal work per GPU", ""]
    if not data.get("measured"):
        return "\n".join([*lines, f"Not measured: {data['reason']}; run `make bench` on a GPU machine (or "
                                   "`python -m optbench.bench --only grouped_gemm --gpu-only`).", ""])
    peaks = ", ".join(f"{p} {v:,.0f} TFLOP/s" for p, v in data["peak_tflops"].items())
    lines += [
        f"Device: {data['device']}; datasheet dense peaks {peaks}; HBM {data['hbm_tb_s']:.2f} TB/s (data/gpus.csv, "
        "data/interconnect.csv).",
        *(line for line in (provenance_line(data), kept_line(data)) if line),
        "",
        "A GPU of an EP group holds `G = experts / EP` experts with `M = T x top-k x EP / experts` routed tokens each: "
        "the same FLOPs at every EP, in more and smaller GEMMs as EP falls. Each row sums both expert GEMMs (gated "
        "fc1, fc2) over forward, data gradient and weight gradient, each the median of CUDA-event timings "
        "(bf16: `torch._grouped_mm`; fp8: `torch._scaled_grouped_mm`, e4m3 row-wise scales, casts not timed). "
        f"*x floor* = measured time / the step model's floor `max(FLOPs / ({data['gemm_kernel_efficiency']:.2f} x "
        "peak), bytes / HBM)`; *vs largest EP* = time per FLOP over that at the largest EP measured.",
        "",
    ]
    rows = totals(data["cases"])
    relative = relative_to_largest_ep(rows)
    for model in dict.fromkeys(k[0] for k in rows):
        for precision in dict.fromkeys(k[1] for k in rows if k[0] == model):
            lines += [f"## {model}, {precision}", "",
                      "| T x top-k | EP | experts per GPU | rows per expert | TFLOP/s fwd / dgrad / wgrad | total ms "
                      "| % of peak | x floor | vs largest EP |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for key, row in rows.items():
                if key[:2] != (model, precision):
                    continue
                head = f"| {key[2]:,} | {key[3]} | {row['groups']} | {row['rows']:,} |"
                passes = " / ".join(f"{row['tflops_per_pass'][p]:,.0f}" if p in row["tflops_per_pass"] else "-"
                                    for p in ("forward", "dgrad", "wgrad"))
                if "problem" in row:
                    lines.append(f"{head} {passes} | not measured: {row['problem']} | | | |")
                    continue
                passes = " / ".join(f"{row['tflops_per_pass'].get(p, 0):,.0f}" for p in ("forward", "dgrad", "wgrad"))
                share = row["flops"] / row["seconds"] / (data["peak_tflops"][precision] * 1e12)
                lines.append(f"{head} {passes} | {row['seconds'] * 1e3:.2f} | {share:.0%} | "
                             f"{row['seconds'] / row['floor_s']:.2f} | {relative[key]:.2f}x |")
            lines.append("")
    return "\n".join(lines)
