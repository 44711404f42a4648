"""Grouped expert GEMMs on one GPU at equal work per rank: how fast a rank's MoE GEMMs run as EP changes.

Why: a GPU of an expert-parallel group of size EP holds ``G = experts / EP`` experts, and each gets
``M = T x top-k / G`` of its ``T`` tokens' routed copies on average, so ``G x M = T x top-k`` whatever EP is:
a lower EP gives the rank the same FLOPs in more, smaller GEMMs. The step-time model prices them at one
calibrated rate, bounded below by weight traffic over HBM with the kernel at ``gemm_kernel_efficiency`` of
the peak (:mod:`optbench.projection.step_model`); what small GEMMs cost beyond that is measured here.

For each model with routed experts (its recipe's shapes: hidden ``h``, expert FFN ``f``, gated ``fc1``
``[M, h] x [h, 2f]`` and ``fc2`` ``[M, f] x [f, h]``), each ``T x top-k`` and each EP, the three passes of both
GEMMs: forward ``X W``, data gradient ``dY W^T`` and weight gradient ``X^T dY`` (one per expert), through
``torch._grouped_mm`` (bf16) and ``torch._scaled_grouped_mm`` (FP8 e4m3, row-wise scales; operands laid out
as the kernel needs them, the casts not timed). Times are the median of :data:`TRIALS` CUDA-event timings of
:data:`REPEATS` calls each. Each case is reported as TFLOP/s, as a share of the datasheet dense peak of its
precision, and against the model's own floor ``max(FLOPs / (gemm_kernel_efficiency x peak), bytes / HBM)``
(bytes: every operand read and the output written once).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch


NAME = "grouped_gemm"
DESCRIPTION = "MoE expert GEMMs per EP at equal work per GPU (bf16, FP8), against the step model's floor; GPU only"
RECIPES = ("qwen3_30b_a3b_muon", "deepseek_v3_muon", "kimi_k2_muon")
"""Recipes whose models' expert shapes are timed (each keyed by its model's name)."""
ROUTED_TOKENS = (32_768, 131_072)
"""``T x top-k`` per GPU per microbatch: 4096 tokens (MBS 1, sequence 4096) and 16384 (MBS 4) at top-8."""
EPS = (1, 2, 4, 8, 16, 32, 64)
ROW_ALIGNMENT = 16
"""Rows per expert are rounded to a multiple of this (the grouped kernels' offset alignment)."""
TRIALS, REPEATS, WARMUP = 5, 5, 3
MEMORY_SHARE = 0.6
"""Cases whose operands (all precisions together) exceed this share of the GPU's memory are skipped."""
PASSES = ("forward", "dgrad", "wgrad")


def expert_shapes() -> dict[str, dict[str, int]]:
    """Each timed model's routed-expert shape, from its recipe (the one source of model facts)."""
    from optbench.compose.recipe import compose_run

    shapes = {}
    for recipe in RECIPES:
        m = compose_run(recipe, []).model
        shapes[m.name] = {
            "experts": m.num_moe_experts,
            "hidden": m.hidden_size,
            "ffn": m.moe_ffn_hidden_size,
            "topk": m.moe_router_topk,
        }
    return shapes


def gemm_problems(hidden: int, ffn: int, groups: int, rows: int) -> dict[str, tuple[int, int, int, int]]:
    """GEMM name -> (groups, rows per group, K, N) of one pass-free problem: fc1 is gated (N = 2 x ffn)."""
    return {"fc1": (groups, rows, hidden, 2 * ffn), "fc2": (groups, rows, ffn, hidden)}


def pass_bytes(groups: int, rows: int, k: int, n: int, element: float, out_element: float = 2.0) -> dict[str, float]:
    """Bytes each pass moves at least: its two operands read and its output written once."""
    x, w, y = groups * rows * k, groups * k * n, groups * rows * n
    return {
        "forward": (x + w) * element + y * out_element,
        "dgrad": (y + w) * element + x * out_element,
        "wgrad": (x + y) * element + w * out_element,
    }


def model_floor_s(
    flops: float, nbytes: float, peak_flops: float, hbm_bytes_per_s: float, kernel_efficiency: float
) -> float:
    """The step model's floor for one GEMM pass: its FLOPs at the kernel efficiency, or its bytes over HBM."""
    return max(flops / (kernel_efficiency * peak_flops), nbytes / hbm_bytes_per_s)


def _offsets(groups: int, rows: int, device) -> torch.Tensor:
    return torch.arange(rows, groups * rows + 1, rows, dtype=torch.int32, device=device)


def _bf16_calls(groups: int, rows: int, k: int, n: int, device) -> dict[str, Any]:
    x = torch.randn(groups * rows, k, device=device, dtype=torch.bfloat16)
    w = torch.randn(groups, n, k, device=device, dtype=torch.bfloat16)  # [out, in] as nn.Linear stores it
    dy = torch.randn(groups * rows, n, device=device, dtype=torch.bfloat16)
    offs = _offsets(groups, rows, device)
    return {
        "forward": lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs),
        "dgrad": lambda: torch._grouped_mm(dy, w, offs=offs),
        "wgrad": lambda: torch._grouped_mm(dy.t(), x, offs=offs),
    }


def _fp8(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise e4m3 quantization of the last dimension: the tensor and its fp32 scale per row."""
    scale = t.abs().amax(dim=-1).float().clamp(min=1e-12) / torch.finfo(torch.float8_e4m3fn).max
    return (t / scale.unsqueeze(-1)).to(torch.float8_e4m3fn), scale


def _fp8_calls(groups: int, rows: int, k: int, n: int, device) -> dict[str, Any]:
    """Each pass with both operands K-major (Hopper's FP8 tensor cores take no other layout)."""
    offs = _offsets(groups, rows, device)
    x, sx = _fp8(torch.randn(groups * rows, k, device=device, dtype=torch.bfloat16))
    w, sw = _fp8(torch.randn(groups, n, k, device=device, dtype=torch.bfloat16))
    dy, sdy = _fp8(torch.randn(groups * rows, n, device=device, dtype=torch.bfloat16))
    wt, swt = _fp8(torch.randn(groups, k, n, device=device, dtype=torch.bfloat16))
    xt, sxt = _fp8(torch.randn(k, groups * rows, device=device, dtype=torch.bfloat16))
    dyt, sdyt = _fp8(torch.randn(n, groups * rows, device=device, dtype=torch.bfloat16))
    out = torch.bfloat16

    def call(a, b, sa, sb):
        return lambda: torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=out)

    return {
        "forward": call(x, w.transpose(-2, -1), sx, sw),
        "dgrad": call(dy, wt.transpose(-2, -1), sdy, swt),
        "wgrad": call(dyt, xt.t(), sdyt.repeat(groups), sxt.repeat(groups)),
    }


def time_call(call, device, trials: int = TRIALS, repeats: int = REPEATS, warmup: int = WARMUP) -> float:
    """Median seconds of one call: ``trials`` timings of ``repeats`` calls after ``warmup`` calls (CUDA events
    on a GPU; the wall clock on a CPU, where only the tests run it)."""
    for _ in range(warmup):
        call()
    on_gpu = torch.device(device).type == "cuda"
    times = []
    for _ in range(trials):
        if not on_gpu:
            began = time.perf_counter()
            for _ in range(repeats):
                call()
            times.append((time.perf_counter() - began) / repeats)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            call()
        end.record()
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(end) / 1e3 / repeats)
    return statistics.median(times)


def rows_per_expert(routed: int, ep: int, experts: int) -> int:
    """``T x top-k x EP / experts`` rounded to :data:`ROW_ALIGNMENT` (at least one block)."""
    return max(ROW_ALIGNMENT, ROW_ALIGNMENT * round(routed * ep / experts / ROW_ALIGNMENT))


def _case(calls_for, groups, rows, k, n, device) -> dict[str, Any]:
    """Seconds per pass; a pass whose kernel this torch or GPU lacks gets its error's first line instead."""
    result: dict[str, Any] = {"seconds": {}}
    try:
        calls = calls_for(groups, rows, k, n, device)
        for p in PASSES:
            try:
                result["seconds"][p] = time_call(calls[p], device)
            except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
                result.setdefault("errors", {})[p] = str(exc).strip().splitlines()[0][:200]
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
        result["errors"] = {"setup": str(exc).strip().splitlines()[0][:200]}
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return result


QUICK_SHAPE = {"experts": 8, "hidden": 64, "ffn": 32, "topk": 2}
"""The shape ``quick`` times instead of the recipes' (tests run it on a CPU)."""


def measure(device: str = "cuda", quick: bool = False, gpu: str | None = None) -> dict[str, Any]:
    """Every model x routed tokens x EP x precision, timed on ``device``; ``gpu`` names the catalog entry whose
    peaks and HBM set the floor (default: the device's own)."""
    from optbench.bench.sections import provenance
    from optbench.engine.local.runtime import detect_gpu_key
    from optbench.catalog.hardware import gpu_catalog
    from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS
    from optbench.projection.interconnect import interconnect_for

    on_gpu = torch.device(device).type == "cuda"
    name = torch.cuda.get_device_name(0) if on_gpu else str(device)
    key = gpu or detect_gpu_key(name, "auto")
    spec, link = gpu_catalog().get(key), interconnect_for(key)
    if spec is None or link is None:
        return {"measured": False, "reason": f"{name} is not in data/gpus.csv and data/interconnect.csv"}
    memory = torch.cuda.get_device_properties(0).total_memory if on_gpu else 1e9
    efficiency = DEFAULT_ASSUMPTIONS.gemm_kernel_efficiency
    precisions = {"bf16": (_bf16_calls, 2.0), "fp8": (_fp8_calls, 1.0)}
    cases = []
    shapes = {"quick": QUICK_SHAPE} if quick else expert_shapes()
    for model, shape in shapes.items():
        for routed in (64,) if quick else ROUTED_TOKENS:
            for ep in EPS:
                if shape["experts"] % ep:
                    continue
                groups, rows = shape["experts"] // ep, rows_per_expert(routed, ep, shape["experts"])
                for gemm, (g, m, k, n) in gemm_problems(shape["hidden"], shape["ffn"], groups, rows).items():
                    footprint = 5 * (g * m * (k + n) + g * k * n)  # bf16 operands + both FP8 layouts
                    for precision, (calls_for, element) in precisions.items():
                        case = {
                            "model": model,
                            "routed_tokens": routed,
                            "ep": ep,
                            "groups": g,
                            "rows": m,
                            "gemm": gemm,
                            "k": k,
                            "n": n,
                            "precision": precision,
                        }
                        if footprint > MEMORY_SHARE * memory:
                            cases.append({**case, "skipped": f"operands {footprint / 1e9:.0f} GB"})
                            continue
                        flops = 2.0 * g * m * k * n
                        peak = spec.peak(precision) * 1e12
                        floors = {
                            p: model_floor_s(flops, b, peak, link.hbm_bytes_per_s, efficiency)
                            for p, b in pass_bytes(g, m, k, n, element).items()
                        }
                        cases.append(
                            {
                                **case,
                                **_case(calls_for, g, m, k, n, device),
                                "flops_per_pass": flops,
                                "model_floor_s": floors,
                            }
                        )
    return {
        "measured": True,
        **provenance(),
        "device": name,
        "gpu": key,
        "peak_tflops": {p: spec.peak(p) for p in precisions},
        "hbm_tb_s": link.hbm_bytes_per_s / 1e12,
        "gemm_kernel_efficiency": efficiency,
        "cases": cases,
    }


def run(out_dir: Path, quick: bool = False, gpu_only: bool = False) -> list[Path]:
    """Measure on the GPU (or keep the stored measurement on a machine without one) and write the results."""
    from optbench.bench.grouped_gemm_report import markdown
    from optbench.bench.sections import run_gpu_only_benchmark

    return run_gpu_only_benchmark(out_dir, NAME, lambda: measure(quick=quick), markdown, gpu_only)
