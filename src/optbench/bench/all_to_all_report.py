"""results/bench/all_to_all.md: the MoE all-to-all over one node's GPUs against the step model's price."""

from __future__ import annotations

import statistics
from typing import Any

from optbench.bench.sections import section_notes
from optbench.common.tables import markdown_table

HOW = (
    "`make bench-gpu` on a node with 2 or more GPUs (an 8-GPU HGX node is EP8 over NVLink, as NVIDIA's Qwen3 "
    "30B-A3B and DeepSeek-V3 B200/B300 layouts run it)"
)


def _size(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:,.1f} KiB"


def _row(case: dict[str, Any]) -> list[str]:
    if "skipped" in case:
        return [case["case"], _size(case["send_bytes"]), f"skipped: {case['skipped']}"]
    low, high = case["spread"]
    measured = f"{case['seconds'] * 1e3:.3f} ({low * 1e3:.3f}-{high * 1e3:.3f})"
    arrived = "" if case["arrived"] else " **data did not arrive as sent**"
    if "model_s" not in case:
        return [case["case"], _size(case["sent_bytes"]), f"{measured}{arrived}"]
    return [
        case["case"],
        _size(case["sent_bytes"]),
        f"{measured}{arrived}",
        f"{case['model_s'] * 1e3:.3f}",
        f"{case['measured_over_model']:.2f}",
        f"{case['achieved_gb_s']:.0f}",
        f"{case['nvlink_efficiency_measured']:.2f}",
    ]


def summary(data: dict[str, Any]) -> dict[str, float] | None:
    """Median and range of measured / model over the recipes' cases (the sweep aside); None if none was priced."""
    ratios = [c["measured_over_model"] for c in data.get("cases", []) if c.get("model") and "model_s" in c]
    if not ratios:
        return None
    return {"median": statistics.median(ratios), "low": min(ratios), "high": max(ratios), "cases": len(ratios)}


def markdown(data: dict[str, Any]) -> str:
    lines = ["# MoE all-to-all over one node's GPUs, against the step model's price", ""]
    if not data.get("measured"):
        return "\n".join([*lines, f"Not measured: {data.get('reason', 'no GPU')}. Run it with {HOW}.", ""])
    lines += [
        f"Device: {data['device']} x {data['ranks']} ({data['backend']}"
        + (f", NCCL {data['nccl']}" if data.get("nccl") else "")
        + f"); host CPU: {data['host_cpu']}.",
        *section_notes(data),
        "",
    ]
    lines += [
        "One `torch.distributed.all_to_all_single` per case, the bytes each rank sends split evenly over the ranks (as "
        "Megatron Core's alltoall dispatcher sends `topk` copies of its microbatch tokens, bf16, under forced load "
        "balance); the slowest rank's time, median of the trials after a warm-up (range in brackets).",
        "",
    ]
    if data.get("gpu") is None:
        lines += ["Not priced: a CPU run checks the harness, its times say nothing about an interconnect.", ""]
    else:
        lines += [
            f"*Model*: `comm.all_to_all_s` of the same bytes over {data['ranks']} ranks of one {data['gpu']} NVLink "
            f"block at {data['nvlink_gb_s_per_direction']:.0f} GB/s per direction x "
            f"{data['assumed_nvlink_efficiency']:.2f} (NCCL's published all-to-all rate for that many GPUs where "
            "data/nccl_all_to_all.csv has one, else nvlink_efficiency of data/interconnect.csv). *Achieved*: bytes "
            "leaving each rank (all but its own share) per second; *efficiency*: that over the datasheet rate, the "
            "measured counterpart of the model's.",
            "",
        ]
    lines += [
        *markdown_table(
            ["case", "sent per rank", "measured ms", "model ms", "measured / model", "achieved GB/s", "efficiency"],
            [_row(c) for c in data["cases"]],
        ),
        "",
    ]
    overall = summary(data)
    if overall:
        lines += [
            f"Over the recipes' {overall['cases']} cases the all-to-all took **{overall['median']:.2f}x** the "
            f"model's price (median; {overall['low']:.2f}-{overall['high']:.2f}x). Above 1 the model underprices "
            "the all-to-all a higher EP pays and the layout search leans further to low EP than it should; "
            "below 1 it overprices it. Not measured: the flex dispatcher (HybridEP, DeepEP), an EP group "
            "across nodes, overlap with computation.",
            "",
        ]
    return "\n".join(lines)
