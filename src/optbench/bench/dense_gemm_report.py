"""results/bench/dense_gemm.md: dense GEMMs per TP and tokens, and the per-GEMM fixed cost the step model
takes from them."""

from __future__ import annotations

import statistics
from typing import Any

from optbench.bench.sections import section_notes
from optbench.common.tables import markdown_table

HOW = "`make bench-gpu` (or `python -m optbench bench --only dense_gemm --gpu-only`) on a GPU machine"


def fit_fixed_cost(data: dict[str, Any]) -> tuple[float, float]:
    """(R in FLOP/s, t0 in seconds) of ``time = FLOPs / R + t0`` over every measured GEMM, least squares on the
    relative error (each case weighs alike, whatever its size)."""
    import numpy as np

    flops = np.array([2.0 * c["m"] * c["k"] * c["n"] for c in data["gemms"]])
    seconds = np.array([c["ms"] / 1e3 for c in data["gemms"]])
    design = np.stack([flops, np.ones_like(flops)], axis=1) / seconds[:, None]
    (inverse_rate, fixed), *_ = np.linalg.lstsq(design, np.ones_like(seconds), rcond=None)
    return float(1.0 / inverse_rate), float(fixed)


def fit_error(data: dict[str, Any], rate: float, fixed: float) -> dict[str, float]:
    """How far the fit lands from each case: median and largest |predicted / measured - 1|."""
    errors = [abs((2.0 * c["m"] * c["k"] * c["n"] / rate + fixed) / (c["ms"] / 1e3) - 1) for c in data["gemms"]]
    return {"median": statistics.median(errors), "max": max(errors)}


def markdown(data: dict[str, Any]) -> str:
    lines = ["# Dense GEMMs and causal attention per TP and tokens", ""]
    if not data.get("measured"):
        return "\n".join([*lines, f"Not measured: {data.get('reason', 'no GPU')}. Run it with {HOW}.", ""])
    rate, fixed = fit_fixed_cost(data)
    err = fit_error(data, rate, fixed)
    lines += [
        f"Device: {data['device']}, {data['precision']} (TF32 off); {len(data['gemms'])} GEMMs, "
        f"{len(data['attention'])} attention cases.",
        *section_notes(data),
        "",
        "Each dense GEMM of the recipes (`x @ w`, `[m, k] x [k, n]`) at TP 1/2/4/8 (col: N / TP, row: K / TP) "
        "and m = 1,024-32,768 tokens; median of CUDA-event timings (src/optbench/bench/dense_gemm.py).",
        "",
        f"Fit over every GEMM, `time = FLOPs / R + t0`: **R = {rate / 1e12:,.0f} TFLOP/s, t0 = {fixed * 1e6:.1f} us** "
        f"per GEMM (median error {100 * err['median']:.1f} %, largest {100 * err['max']:.0f} %). The step model "
        "takes `t0` as `Assumptions.dense_gemm_fixed_s`: what a GEMM costs beyond its FLOPs at the calibrated "
        "rate, paid per GEMM call (forward, data and weight gradient) of every dense weight, so thin (high TP) "
        "and short (small MBS) GEMMs cost more per FLOP (docs/projection.md section 1). R is not carried: the "
        "calibration sets each GPU's rate.",
        "",
    ]
    for model in dict.fromkeys(c["model"] for c in data["gemms"]):
        cases = [c for c in data["gemms"] if c["model"] == model]
        tokens = sorted({c["m"] for c in cases})
        cells = [
            [
                c0["gemm"],
                c0["split"],
                c0["tp"],
                f"{c0['k']:,} x {c0['n']:,}",
                *(
                    next(
                        (
                            f"{c['tflops']:,.0f}"
                            for c in cases
                            if (c["gemm"], c["tp"], c["m"]) == (c0["gemm"], c0["tp"], m)
                        ),
                        "-",
                    )
                    for m in tokens
                ),
            ]
            for c0 in cases
            if c0["m"] == tokens[0]
        ]
        lines += [
            f"## {model}: TFLOP/s per GEMM",
            "",
            *markdown_table(["GEMM", "split", "TP", "k x n", *(f"m = {m:,}" for m in tokens)], cells),
            "",
        ]
    if data["attention"]:
        cells = [
            [a["model"], a["attention"], a["tp"], a["mbs"], a["heads"], f"{a['ms']:.3f}", f"{a['tflops']:,.0f}"]
            for a in data["attention"]
        ]
        lines += [
            "## Causal attention (`scaled_dot_product_attention`, sequence 4,096; FLOPs: half the score matrix)",
            "",
            "Not used by the step model yet: its attention FLOPs run at the calibrated rate.",
            "",
            *markdown_table(["model", "attention", "TP", "MBS", "heads per GPU", "ms", "TFLOP/s"], cells),
            "",
        ]
    return "\n".join(lines)
