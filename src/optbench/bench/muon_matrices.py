"""Upstream Muon per matrix on one GPU, against the step model's price of the same matrix; fused AdamW beside it.

Why: the projection prices Muon's optimizer step matrix by matrix (:mod:`optbench.projection.work`): the
Newton-Schulz FLOPs at ``ns_gemm_efficiency`` of the bf16 peak, the element-wise bytes at the GPU's effective
HBM rate, and the eager ops at ``eager_op_overhead_s`` each where they outlast that GPU work. Those constants
are a-priori (:mod:`optbench.projection.assumptions`); this measures what they stand for.

For each distinct matrix Muon orthogonalizes in the three cluster recipes (unsharded: all three run TP1 and
ETP1), ``copies`` fp32 parameters of that shape with fp32 gradients are stepped by Emerging-Optimizers' own
``Muon`` (the class Megatron Core's ``TensorParallelMuon`` extends; Nesterov, 5 quintic steps, spectral scale,
``fp32_matmul_prec='medium'``: bf16 products, as the recipes' ``auto``), one parameter at a time as upstream
does. Times are the median of :data:`TRIALS` steps after a warm-up (CUDA events), divided by the copies; the
host's own time to issue a step (wall clock until ``step()`` returns) is recorded beside it. The same parameters
are then stepped by ``torch.optim.AdamW(fused=True)``, priced by the model at ``adam_bytes_per_element`` over
the effective HBM rate. A tiny shape (:data:`LAUNCH_SHAPE`) stepped many times over measures the host time per
eager op, the model's ``eager_op_overhead_s``, on this machine's CPU. The price and the fit of the small-Gram
slowdown are :mod:`optbench.bench.muon_matrices_price`; the page is :mod:`optbench.bench.muon_matrices_report`.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

NAME = "muon_matrices"
DESCRIPTION = (
    "upstream Muon and fused AdamW per matrix shape of the cluster recipes vs the step model's price; GPU only"
)
RECIPES = ("kimi_k2_muon", "qwen3_30b_a3b_muon", "deepseek_v3_muon")
TRIALS, WARMUP = 5, 1
STATE_BYTES = 12
"""Bytes per element the timed parameters hold: fp32 weight, gradient and momentum."""
BUDGET_BYTES = 6e9
"""Each shape gets as many copies as fit this many bytes of state (at least 1, at most :data:`MAX_COPIES`): a rank of
a real run steps hundreds to thousands of matrices per step, so the per-step cost of the optimizer's Python is
amortized over as many matrices as memory allows (with at most 16 copies the launch-bound shapes took 0.05-0.32 ms
more per matrix on an H200)."""
MAX_COPIES = 256
LAUNCH_SHAPE, LAUNCH_COPIES = (64, 64), 256
"""A shape whose kernels take less time than their launch: its step time is the host's, op by op."""
QUICK_SHAPES = {(48, 32): {"quick:expert": 2}, (16, 64): {"quick:attention": 1}}


def recipe_matrices() -> dict[tuple[int, int], dict[str, int]]:
    """Each matrix shape Muon orthogonalizes in :data:`RECIPES` -> {"model:kind": matrices in the whole model}."""
    from optbench.accounting.ns_flops import orthogonalized_matrices
    from optbench.accounting.params import model_parameters
    from optbench.compose.recipe import compose_run

    shapes: dict[tuple[int, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for recipe in RECIPES:
        run = compose_run(recipe, [])
        for spec in model_parameters(run.model, 1):
            for shape in orthogonalized_matrices(spec, run.model, run.optimizer.muon.split_qkv):
                shapes[shape][f"{run.model.name}:{spec.kind}"] += 1
    return {shape: dict(users) for shape, users in shapes.items()}


def copies_for(shape: tuple[int, int], quick: bool) -> int:
    if quick:
        return 2
    return max(1, min(MAX_COPIES, int(BUDGET_BYTES // (shape[0] * shape[1] * STATE_BYTES))))


def _parameters(shape: tuple[int, int], copies: int, device: str) -> list[torch.nn.Parameter]:
    generator = torch.Generator(device=device).manual_seed(0)
    params = []
    for _ in range(copies):
        p = torch.nn.Parameter(torch.randn(shape, device=device, generator=generator) * 0.02)
        p.grad = torch.randn(shape, device=device, generator=generator) * 1e-3
        params.append(p)
    return params


def time_steps(step, device: str) -> dict[str, float]:
    """Median seconds of one ``step()`` on the device and of the host's issuing it, after :data:`WARMUP` steps."""
    on_gpu = torch.device(device).type == "cuda"
    for _ in range(WARMUP):
        step()
    device_s, host_s = [], []
    for _ in range(TRIALS):
        if on_gpu:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        began = time.perf_counter()
        step()
        host_s.append(time.perf_counter() - began)
        if on_gpu:
            end.record()
            torch.cuda.synchronize()
            device_s.append(start.elapsed_time(end) / 1e3)
        else:
            device_s.append(host_s[-1])
    return {
        "seconds": statistics.median(device_s),
        "host_seconds": statistics.median(host_s),
        "spread": [min(device_s), max(device_s)],
    }


def upstream_muon(params, emerging):
    """Emerging-Optimizers' Muon as Megatron Core configures it for the recipes (no tensor parallelism)."""
    return emerging.orthogonalized_optimizers.Muon(
        params,
        lr=3e-4,
        momentum=0.95,
        weight_decay=0.033,
        nesterov=True,
        fp32_matmul_prec="medium",
        coefficient_type="quintic",
        num_ns_steps=5,
        scale_mode="spectral",
        extra_scale_factor=1.0,
    )


def _per_matrix(timed: dict[str, Any], copies: int) -> dict[str, Any]:
    """:func:`time_steps`'s figures for a step of ``copies`` matrices, per matrix."""
    return {
        "seconds": timed["seconds"] / copies,
        "host_seconds": timed["host_seconds"] / copies,
        "spread": [s / copies for s in timed["spread"]],
    }


def measure_shape(shape: tuple[int, int], copies: int, device: str, emerging) -> dict[str, Any]:
    """Muon and fused AdamW steps of ``copies`` parameters of ``shape``: seconds per matrix of each."""
    out: dict[str, Any] = {"copies": copies}
    try:
        muon_params = _parameters(shape, copies, device)
        out["muon"] = _per_matrix(time_steps(upstream_muon(muon_params, emerging).step, device), copies)
        del muon_params
        adam_params = _parameters(shape, copies, device)
        fused = torch.device(device).type == "cuda"
        adam = torch.optim.AdamW(adam_params, lr=3e-4, weight_decay=0.033, fused=fused)
        out["adamw"] = _per_matrix(time_steps(adam.step, device), copies)
    except (RuntimeError, torch.OutOfMemoryError) as exc:
        out["error"] = str(exc).strip().splitlines()[0][:200]
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return out


def _emerging():
    """Emerging-Optimizers 0.3.0 from ``make bridge-env``'s overlay, or a one-line reason it is missing."""
    from optbench.bench.upstream_optimizers import load, overlay_with_emerging_optimizers

    folder = overlay_with_emerging_optimizers()
    if folder is None:
        return None, "Emerging-Optimizers is not in .bridge-releases/ (make bridge-env installs it)"
    return load(folder), ""


def measure(device: str = "cuda", quick: bool = False) -> dict[str, Any]:
    """Every recipe matrix shape and the launch-bound shape, timed on ``device``, priced by the step model."""
    from optbench.bench.muon_matrices_price import model_prices
    from optbench.bench.sections import cpu_name, provenance
    from optbench.engine.local.runtime import detect_gpu_key

    emerging, reason = _emerging()
    if emerging is None:
        return {"measured": False, "reason": reason}
    on_gpu = torch.device(device).type == "cuda"
    name = torch.cuda.get_device_name(0) if on_gpu else str(device)
    key = detect_gpu_key(name, "auto") if on_gpu else "h100"  # a CPU run (tests) is priced as an H100
    shapes = QUICK_SHAPES if quick else recipe_matrices()
    cases = []
    for shape, users in sorted(shapes.items(), key=lambda kv: -kv[0][0] * kv[0][1]):
        cases.append(
            {"shape": list(shape), "users": users, **measure_shape(shape, copies_for(shape, quick), device, emerging)}
        )
    launch_shape = (8, 8) if quick else LAUNCH_SHAPE
    launch = {
        "shape": list(launch_shape),
        "users": {},
        **measure_shape(launch_shape, 4 if quick else LAUNCH_COPIES, device, emerging),
    }
    result = {
        "measured": True,
        **provenance(),
        "device": name,
        "gpu": key,
        "host_cpu": cpu_name(),
        "emerging_optimizers": getattr(emerging, "__version__", "0.3.0"),
        "cases": cases,
        "launch": launch,
    }
    return {**result, **model_prices(result)}


def run(out_dir: Path, quick: bool = False, gpu_only: bool = False) -> list[Path]:
    """Measure on the GPU (or keep the stored measurement on a machine without one) and write the results."""
    from optbench.bench.muon_matrices_report import markdown
    from optbench.bench.sections import run_gpu_only_benchmark

    return run_gpu_only_benchmark(out_dir, NAME, lambda: measure(quick=quick), markdown, gpu_only)
