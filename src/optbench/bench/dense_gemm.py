"""Dense GEMMs and causal attention on one GPU at the shapes the cluster recipes take under tensor parallelism.

Why: the step model prices a rank's GEMMs at one calibrated rate, but a GEMM made thin by tensor parallelism or
short by a small microbatch runs further below the peak. Each dense GEMM of the recipes (attention projections,
the dense and shared-expert MLPs, the output head) is timed at TP 1/2/4/8 (a column-parallel GEMM splits its
output, a row-parallel one its input, a replicated one neither) for 1,024 to 32,768 tokens per GEMM: ``x @ w`` in bf16,
TF32 off, the median of :data:`TRIALS` CUDA-event timings after :data:`WARMUP` calls. The fit of ``time = FLOPs / R +
t0`` over every case (:func:`optbench.bench.dense_gemm_report.fit_fixed_cost`) gives the step model's per-GEMM fixed
cost ``Assumptions.dense_gemm_fixed_s`` (docs/projection.md section 1). Causal ``scaled_dot_product_attention`` at
sequence 4096 and MBS 1-8, heads divided by TP, is timed beside it (FLOPs: half the score matrix); the step
model does not use it yet.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

NAME = "dense_gemm"
DESCRIPTION = "dense GEMMs and causal attention at the recipes' shapes per TP and tokens (bf16); GPU only"
RECIPES = ("kimi_k2_muon", "qwen3_30b_a3b_muon", "deepseek_v3_muon")
"""Recipes whose models' dense GEMM shapes are timed (each keyed by its model's name)."""
TPS = (1, 2, 4, 8)
TOKENS = (1024, 2048, 4096, 8192, 16384, 32768)
"""Tokens per GEMM: MBS x sequence (sequence parallelism gathers the sequence before the GEMM)."""
ATTENTION_MBS = (1, 2, 4, 8)
SEQUENCE = 4096
TRIALS, WARMUP = 10, 3
"""One call per CUDA-event timing, as the committed H200 measurement was taken: a call's launch gap is in it."""
LAYER_PREFIX = re.compile(r"^(decoder\.layers\.\d+|mtp\.layers\.\d+\.transformer_layer)\.")
"""What makes one layer's weight name another's."""


def gemm_shapes(model: Any) -> list[tuple[str, int, int, str]]:
    """(GEMM, K, N, split) of a model's dense GEMMs, from its parameter inventory (one of each distinct layer weight:
    attention projections, dense and shared-expert MLPs; the output head): ``col`` divides N by TP, ``row`` K, and
    ``none`` (a weight TP replicates, as MLA's down-projections) divides neither."""
    from optbench.accounting.params import (
        ATTENTION,
        COLUMN,
        DENSE_MLP,
        OUTPUT,
        QKV,
        ROW,
        SHARED_EXPERT,
        model_parameters,
    )

    split = {COLUMN: "col", ROW: "row", None: "none"}
    found: dict[str, tuple[str, int, int, str]] = {}
    for spec in model_parameters(model):
        if len(spec.shape) == 2 and spec.kind in (QKV, ATTENTION, DENSE_MLP, SHARED_EXPERT, OUTPUT):
            name = LAYER_PREFIX.sub("", spec.name).removesuffix(".weight")
            found.setdefault(name, (name, spec.shape[1], spec.shape[0], split[spec.partition_dim]))
    return list(found.values())


def attention_shapes(model: Any) -> tuple[str, int, int, int]:
    """(label, heads, d_qk, d_v) of a model's attention core."""
    if model.multi_latent_attention:
        return "MLA", model.num_attention_heads, model.qk_head_dim + model.qk_pos_emb_head_dim, model.v_head_dim
    kv = model.kv_channels or model.hidden_size // model.num_attention_heads
    return f"GQA (kv {model.num_query_groups})", model.num_attention_heads, kv, kv


def measure(quick: bool = False) -> dict[str, Any]:
    """Every model's dense GEMMs x TP x tokens, and its attention core x TP x MBS, timed on the GPU."""
    import torch
    import torch.nn.functional as F

    from optbench.bench.grouped_gemm import time_call
    from optbench.bench.sections import provenance
    from optbench.compose.recipe import compose_run

    torch.backends.cuda.matmul.allow_tf32 = False
    gemms, attention = [], []
    for recipe in RECIPES:
        model = compose_run(recipe, []).model
        model_name = model.name
        for gemm, K, N, split in gemm_shapes(model):
            for tp in (1, 8) if quick else TPS:
                k, n = {"col": (K, N // tp), "row": (K // tp, N), "none": (K, N)}[split]
                for m in (1024,) if quick else TOKENS:
                    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                    w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
                    ms = 1e3 * time_call(partial(torch.matmul, x, w), "cuda", TRIALS, 1, WARMUP)
                    gemms.append(
                        {
                            "model": model_name,
                            "gemm": gemm,
                            "split": split,
                            "tp": tp,
                            "m": m,
                            "k": k,
                            "n": n,
                            "ms": round(ms, 4),
                            "tflops": round(2 * m * k * n / ms / 1e9, 1),
                        }
                    )
                    del x, w
        label, heads, dqk, dv = attention_shapes(model)
        for tp in (1, 8) if quick else TPS:
            for mbs in (1,) if quick else ATTENTION_MBS:
                q = torch.randn(mbs, heads // tp, SEQUENCE, dqk, device="cuda", dtype=torch.bfloat16)
                k_, v = (
                    torch.randn_like(q),
                    torch.randn(mbs, heads // tp, SEQUENCE, dv, device="cuda", dtype=torch.bfloat16),
                )
                ms = 1e3 * time_call(
                    partial(F.scaled_dot_product_attention, q, k_, v, is_causal=True), "cuda", TRIALS, 1, WARMUP
                )
                flops = 2 * mbs * (heads // tp) * SEQUENCE * SEQUENCE * (dqk + dv) / 2
                attention.append(
                    {
                        "model": model_name,
                        "attention": label,
                        "tp": tp,
                        "mbs": mbs,
                        "seq": SEQUENCE,
                        "heads": heads // tp,
                        "d_qk": dqk,
                        "d_v": dv,
                        "ms": round(ms, 4),
                        "tflops": round(flops / ms / 1e9, 1),
                    }
                )
                del q, k_, v
    return {
        "measured": True,
        **provenance(),
        "device": torch.cuda.get_device_name(0),
        "precision": "bf16",
        "gemms": gemms,
        "attention": attention,
    }


def run(out_dir: Path, quick: bool = False, gpu_only: bool = False) -> list[Path]:
    """Measure on the GPU (or keep the stored measurement on a machine without one) and write the results."""
    from optbench.bench.dense_gemm_report import markdown
    from optbench.bench.sections import run_gpu_only_benchmark

    return run_gpu_only_benchmark(out_dir, NAME, lambda: measure(quick=quick), markdown, gpu_only)
