"""results/bench/muon_matrices.md: upstream Muon and fused AdamW per matrix shape against the step model's price."""

from __future__ import annotations

from typing import Any

from optbench.bench.grouped_gemm_report import fit_slowdown
from optbench.bench.muon_matrices_price import GRAM_GRID, HOST_BOUND, gram_slowdown_points
from optbench.bench.sections import section_notes
from optbench.common.tables import markdown_table


def _users(users: dict[str, int]) -> str:
    return ", ".join(f"{u} x{n:,}" for u, n in users.items()) or "(launch-bound probe)"


def _row(case: dict[str, Any]) -> list[str]:
    shape = " x ".join(f"{d:,}" for d in case["shape"])
    if "error" in case:
        return [shape, _users(case["users"]), case["copies"], case["error"]]
    muon, adamw, price = case["muon"], case["adamw"], case["price"]
    model = f"{price['ns_gemm_s'] * 1e3:.3f} / {price['elementwise_s'] * 1e3:.3f} / {price['launch_s'] * 1e3:.3f}"
    return [
        shape,
        _users(case["users"]),
        case["copies"],
        f"{muon['seconds'] * 1e3:.3f} ({muon['host_seconds'] * 1e3:.3f})",
        f"{case['ns_tflops']:.0f}",
        model,
        f"{muon['seconds'] / price['muon_s']:.2f}",
        f"{adamw['seconds'] * 1e6:.1f} / {price['adamw_s'] * 1e6:.1f}",
        f"{adamw['seconds'] / price['adamw_s']:.2f}",
    ]


def markdown(data: dict[str, Any]) -> str:
    lines = ["# Muon and AdamW per matrix on one GPU, against the step model's price", ""]
    if not data.get("measured"):
        return "\n".join([*lines, f"Not measured: {data.get('reason', 'no GPU')}.", ""])
    lines += [
        f"Device: {data['device']}; host CPU: {data['host_cpu']}; Emerging-Optimizers {data['emerging_optimizers']}.",
        *section_notes(data),
        "",
    ]
    if not data.get("priced"):
        return "\n".join([*lines, f"Not priced: {data['price_reason']}.", ""])
    a = data["assumptions"]
    lines += [
        "Each matrix shape Muon orthogonalizes in kimi_k2_muon, qwen3_30b_a3b_muon and deepseek_v3_muon (unsharded: "
        "the recipes run TP1 and ETP1), stepped by Emerging-Optimizers' `Muon` as Megatron Core configures it "
        "(Nesterov, 5 quintic steps, spectral scale, bf16 products) and by `torch.optim.AdamW(fused=True)`, fp32 "
        "weights and gradients; median of 5 steps after one, per matrix. *Model*: the projection's price of one such "
        f"matrix at {data['peak_bf16_tflops']:.0f} TFLOP/s bf16 x ns_gemm_efficiency {a['ns_gemm_efficiency']} and "
        f"{data['hbm_effective_tb_s']:.2f} TB/s effective HBM, Newton-Schulz slowed by `s(g)` below: NS GEMMs / "
        f"element-wise ({a['muon_bytes_per_element']:.0f} B per element) / launches beyond both "
        f"({a['eager_op_overhead_s'] * 1e6:.0f} us per eager op); AdamW at {a['adam_bytes_per_element']:.0f} B per "
        "element.",
        "",
        *markdown_table(
            [
                "matrix",
                "in (model:kind x matrices)",
                "copies",
                "Muon ms (host issue ms)",
                "NS TFLOP/s",
                "model ms: NS / element-wise / launch",
                "measured / model",
                "AdamW us: measured / model",
                "measured / model",
            ],
            [_row(c) for c in data["cases"]],
        ),
        "",
    ]
    per_op, launch = data.get("per_op"), data["launch"]
    if per_op:
        shape = " x ".join(str(d) for d in launch["shape"])
        lines.append(
            f"Launch-bound probe: {launch['copies']} matrices of {shape}, {launch['price']['ops']} eager ops "
            f"each by the model's count: **{per_op['device_s'] * 1e6:.1f} us per op** on the device "
            f"({per_op['host_s'] * 1e6:.1f} us of host time to issue it); the model assumes "
            f"{a['eager_op_overhead_s'] * 1e6:.0f} us."
        )
        if per_op.get("recipe_shapes_s"):
            low, high = per_op["recipe_shapes_s"]
            lines[-1] += (
                f" The recipes' launch-bound shapes (host issue time at least {HOST_BOUND:.0%} of the device "
                f"time): {low * 1e6:.1f}-{high * 1e6:.1f} us per op."
            )
    points = gram_slowdown_points(data)
    if points:
        g0, p = fit_slowdown(points, GRAM_GRID)
        lines += [
            "",
            f"Fit of the GPU-bound shapes (host issue time under {HOST_BOUND:.0%} of the device time, "
            f"{len(points)} points; Newton-Schulz time = Muon time less the model's element-wise time, over its "
            f"FLOP time at {a['ns_gemm_efficiency']} of the peak): `s(g) = 1 + ({g0:g} / g) ^ {p:g}`, g the Gram "
            "size (the smaller side); the step model's `Assumptions.ns_small_gram_rows` and "
            f"`ns_small_gram_power` (priced above at {a['ns_small_gram_rows']:g} and {a['ns_small_gram_power']:g}).",
        ]
    lines += [
        "",
        "Weighted by every matrix of the model (measured over the model's price, all of its matrices on one GPU):",
        "",
    ]
    lines += [
        f"- {model}: Muon {w['muon']:.2f}x, AdamW {w['adamw']:.2f}x, Muon minus AdamW {w['muon_minus_adamw']:.2f}x"
        for model, w in data["weighted"].items()
    ]
    return "\n".join([*lines, ""])
