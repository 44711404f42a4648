"""The summary lines of plan.json's ``projection`` section (``make plan``; the section is
:func:`optbench.projection.project.project`)."""

from __future__ import annotations

from optbench.config.optimizers import entry
from optbench.config.schema import MATRIX_FLOPS_LABELS, OPTIMIZER_LABELS
from optbench.projection.expected_error import band_text, expected_error_text
from optbench.projection.section import (
    Projection,
    ProjectionSection,
    PublishedComparison,
    SiblingProjection,
    Unavailable,
)

SHORT_NAMES = {
    "compute": "GEMMs",
    "gemm_weight_bound": "weight-bound GEMMs",
    "bf16_attention": "BF16 attention",
    "small_expert_gemms": "small expert GEMMs",
    "dense_gemm_fixed": "GEMM calls",
    "activation_traffic": "element-wise HBM",
    "pipeline_bubble": "bubble",
    "moe_all_to_all": "MoE all-to-all",
    "tensor_parallel": "TP",
    "context_parallel": "CP",
    "pipeline_p2p": "PP p2p",
    "fsdp_exposed": "FSDP collectives",
    "dp_grad_reduce_exposed": "grad reduce",
    "optimizer": "optimizer",
    "param_gather_exposed": "param gather",
    "fp8_weight_cast": "FP8 cast",
}


def _ms_or_s(seconds: float) -> str:
    return f"{seconds:.2f} s" if abs(seconds) >= 1 else f"{1000 * seconds:.1f} ms"


def _mfu(mfu: dict[str, float]) -> str:
    return ", ".join(f"{100 * v:.1f} % of {k}" for k, v in mfu.items()) or "no peak for this GPU"


def _sibling_text(sibling: SiblingProjection) -> str:
    label = OPTIMIZER_LABELS[sibling.optimizer]
    if not sibling.available:
        return f"{label} refused ({sibling.reason})"
    return (
        f"{label} {sibling.tflops_per_gpu_change_percent:+.2f} % (optimizer state {sibling.optimizer_state_gb:.1f} GB"
        f", {sibling.memory_gb:.1f} GB in all)"
    )


def projection_summary_lines(p: Projection, name: str) -> list[str]:
    """Summary lines of a plan's projection section (``name``: the run's optimizer)."""
    if not isinstance(p, ProjectionSection):
        return [f"  projection  none: {p.reason}"]
    eff, step = p.efficiency, p.step
    flops = MATRIX_FLOPS_LABELS.get(name, "NS")
    ns = (
        f" + {step.ns_tflops_per_gpu:.1f} {flops} = {step.tflops_per_gpu_with_ns:.1f}"
        if p.adamw_twin is not None
        else ""
    )
    lines = [
        f"  projection  step {step.step_time_s:.2f} s: {step.tflops_per_gpu:.1f} model{ns} TFLOP/s/GPU; MFU "
        f"{_mfu(step.mfu)}",
        f"              GEMM efficiency {eff.value:.3f} of {eff.of_peak} ({eff.status} on {eff.calibrated_on})",
        f"              {expected_error_text(p.expected_error)}",
        *([f"              {band}"] if (band := band_text(p.expected_error)) else []),
        "  breakdown   " + ", ".join(f"{SHORT_NAMES[k]} {_ms_or_s(v)}" for k, v in p.breakdown_s.items() if v > 0),
    ]
    twin, overhead = p.twin, p.muon_overhead
    if twin is not None and overhead is not None:
        own = entry(name)  # an optimizer with its own count runs no Newton-Schulz: the part takes its words
        words = {"newton_schulz_compute": own.flops_words} if own.matrix_flops is not None else {}
        parts = ", ".join(f"{words.get(k, k.replace('_', ' '))} {_ms_or_s(v)}" for k, v in overhead.parts_s.items())
        lines.append(
            f"  vs AdamW    twin {twin.recipe}: step {twin.step.step_time_s:.2f} s, {twin.step.tflops_per_gpu:.1f} "
            f"TFLOP/s/GPU; {OPTIMIZER_LABELS[name]} {overhead.tflops_per_gpu_change_percent:+.2f} %, "
            f"+{_ms_or_s(overhead.total_s)} = {parts}"
        )
        if overhead.twin_differs_in:
            lines.append(
                f"              (the twin also differs in {', '.join(overhead.twin_differs_in)}: counted in 'other')"
            )
        measured = overhead.at_measured_op_overhead
        if measured:
            (low, high), (at_low, at_high) = measured.us_per_op, measured.tflops_per_gpu_change_percent
            lines.append(
                f"              launch-bound: at the {low:g}-{high:g} us per eager op measured for upstream Muon "
                f"({measured.measured_on.removeprefix('the ')}; assumed {measured.assumed_us_per_op:g} us) "
                f"it would be {at_low:+.2f} to {at_high:+.2f} %"
            )
    elif isinstance(p.adamw_twin, Unavailable):
        lines.append(f"  vs AdamW    {p.adamw_twin.reason}")
    if p.optimizers:
        lines.append(
            "  optimizers  model TFLOP/s/GPU vs the AdamW twin, each as its recipe configures it: "
            + "; ".join(_sibling_text(s) for s in p.optimizers)
        )
    for row in p.compared_with_published:
        lines.append(
            f"  published   {row.published}: {row.published_model_tflops_per_gpu:g} model TFLOP/s/GPU{_counted(row)};"
            f" projected {row.projected_tflops_per_gpu:.1f} ({row.error_percent:+.2f} %)"
        )
    if p.what_if:
        wins = ", ".join(f"{k.replace('_', ' ')} {v.win_percent:+.2f} %" for k, v in p.what_if.items())
        lines.append(f"  what-if     model TFLOP/s/GPU: {wins}")
    return lines


def _counted(row: PublishedComparison) -> str:
    tokens = row.published_tokens_per_s_per_gpu
    return "" if tokens is None else f" ({tokens:g} tokens/s/GPU in our FLOPs count)"
