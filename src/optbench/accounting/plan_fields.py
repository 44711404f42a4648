"""The accounting part of plan.json and of the plan summary.

Fields: ``model_flops_per_token`` and ``model_flops_per_step`` (Bridge's rule),
``ns_flops_per_step_per_gpu`` (every TP mode, with and without SYRK; mean, busiest rank),
``memory_per_gpu_gb`` (worst GPU's breakdown, every pipeline stage's total, the capacity),
``peaks`` (MFU denominators with sources) and ``throughput_at``: the TFLOP/s (model-only and with
Newton-Schulz) and MFU implied by a step time. Step times come from ``step_time_s`` when the user
gives one, and from every published row (results/published/published.csv) that matches the run's
model, GPU, GPU count, precision, optimizer and stated layout: from its tokens/s, else from its
model-only TFLOP/s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

from optbench.accounting.flops import model_flops_per_step, model_flops_per_token
from optbench.accounting.memory import MemoryEstimate
from optbench.accounting.params import padded_vocab_size
from optbench.accounting.peaks import peaks_for
from optbench.accounting.plan_section import (
    AccountingSection,
    ImpliedThroughput,
    StepRecord,
    NsFlopsByMode,
    NsFlopsStats,
    PeakRecord,
)
from optbench.accounting.throughput import step_throughput, step_time_for_tflops, step_time_for_tokens
from optbench.config.layout import Layout, derive_layout
from optbench.config.optimizers import MATRIX_OPTIMIZERS, entry
from optbench.config.schema import MUON_TP_MODES, RunConfig
from optbench.common.errors import UserError

PRECISION_ALIASES = {"fp8": "fp8_cs"}
"""published.csv names Hopper FP8 current scaling 'fp8'."""


NsStats = Callable[[str, bool], dict[str, float]]
"""(TP mode, SYRK) -> Newton-Schulz FLOPs per step per GPU (max, mean, min, busiest rank, total)."""


def ns_by_tp_mode(run: RunConfig, ns_stats: NsStats) -> NsFlopsByMode:
    """Newton-Schulz FLOPs per step per GPU for every TP mode, without and with SYRK."""

    def stats(mode: str) -> NsFlopsStats:
        plain, syrk = ns_stats(mode, False), ns_stats(mode, True)
        return NsFlopsStats(**plain, syrk_max=syrk["max"], syrk_mean=syrk["mean"])

    return NsFlopsByMode(
        run.optimizer.muon.tp_mode if run.optimizer.muon else None, **{mode: stats(mode) for mode in MUON_TP_MODES}
    )


def layout_matches(run: RunConfig, layout: dict[str, int | None], lay: Layout | None = None) -> bool:
    """Whether the run has every layout and batch value a published row states (``lay``: the run's, if held)."""
    lay = lay or derive_layout(run)
    ours = {
        "gbs": run.train.gbs,
        "mbs": run.train.mbs,
        "seq_length": run.train.seq_length,
        "tp": lay.tp,
        "pp": lay.pp,
        "vpp": lay.vpp,
        "cp": lay.cp,
        "ep": lay.ep,
        "etp": lay.etp,
        "fsdp": lay.dp * lay.cp if run.parallel.megatron_fsdp else 0,  # the sharding group; 0: DDP
    }
    return all(value is None or ours[key] == value for key, value in layout.items())


def matching_published_rows(run: RunConfig, lay: Layout | None = None) -> list:
    """Published rows measured with this run's model, GPU, GPU count, precision, optimizer and layout."""
    from optbench.common.checkout import repo_root
    from optbench.catalog.published import default_published_dir, load_published

    try:
        rows = load_published(default_published_dir(repo_root() / "results"))
    except UserError:
        return []
    return [
        row
        for row in rows
        if row.model == run.model.name
        and row.gpu == run.cluster.gpu
        and row.num_gpus == run.parallel.num_gpus
        and PRECISION_ALIASES.get(row.precision, row.precision) == run.precision.name
        and row.optimizer == run.optimizer.name
        and layout_matches(run, row.layout, lay)
    ]


def _implied(run: RunConfig, ns_total: float, step_time_s: float, basis: str, **published: Any) -> ImpliedThroughput:
    return ImpliedThroughput(
        basis, StepRecord.of(step_throughput(run, step_time_s, ns_flops_total=ns_total)), **published
    )


def throughput_at(run: RunConfig, lay: Layout, ns_total: float) -> list[ImpliedThroughput]:
    """Implied throughput at the user's step time and at every matching published row's step time
    (``ns_total``: Newton-Schulz FLOPs of all ranks per step)."""
    implied = []
    if run.step_time_s:
        implied.append(_implied(run, ns_total, run.step_time_s, f"step_time_s={run.step_time_s:g}"))
    for row in matching_published_rows(run, lay):
        published = {
            "published": row.label,
            "published_tflops_per_gpu": row.tflops_per_gpu,
            "published_model_tflops_per_gpu": row.model_tflops_per_gpu,
            "published_ns_tflops_per_gpu": row.ns_tflops_per_gpu,
        }
        if row.tokens_per_s_per_gpu:
            step = step_time_for_tokens(run, row.tokens_per_s_per_gpu)
            basis = f"{row.label}: {row.tokens_per_s_per_gpu:g} tokens/s/GPU"
        elif row.model_tflops_per_gpu:
            step = step_time_for_tflops(run, row.model_tflops_per_gpu)
            basis = f"{row.label}: {row.model_tflops_per_gpu:g} model TFLOP/s/GPU"
        else:
            continue
        implied.append(_implied(run, ns_total, step, basis, **published))
    return implied


ACCOUNTING_KEYS = tuple(f.name for f in fields(AccountingSection))
"""The accounting fields, in plan.json's order (top-level keys of plan.json: see the module docstring)."""


def accounting_fields(
    run: RunConfig, lay: Layout, ns_stats: NsStats, ns_total: float, memory: MemoryEstimate
) -> AccountingSection:
    """The accounting fields of plan.json, from the run's resolved layout, Newton-Schulz counts (per mode, and
    the recipe mode's total over all ranks) and memory."""
    seq = run.train.seq_length
    return AccountingSection(
        model_flops_per_token=model_flops_per_token(run.model, seq, run.parallel.tp),
        model_flops_per_step=model_flops_per_step(run),
        padded_vocab_size=padded_vocab_size(run.model, run.parallel.tp),
        ns_flops_per_step_per_gpu=ns_by_tp_mode(run, ns_stats),
        memory_per_gpu_gb=memory.section(),
        peaks=tuple(PeakRecord(p.key, p.tflops, p.label, p.source) for p in peaks_for(run.cluster.gpu, run.precision)),
        throughput_at=tuple(throughput_at(run, lay, ns_total)),
    )


def _si(flops: float) -> str:
    """FLOPs with an SI prefix, e.g. 344.5 T or 71.2 G."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(flops) >= scale:
            return f"{flops / scale:.1f} {prefix}"
    return f"{flops:.3g} "


def _tflops(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def _percent(fractions: dict[str, float]) -> str:
    return ", ".join(f"{100 * v:.1f} % of {k}" for k, v in fractions.items()) or "no peak for this GPU"


def accounting_summary_lines(plan: AccountingSection, optimizer: str, executed_as: str = "") -> list[str]:
    """Summary lines for the accounting fields of a plan (``optimizer``: the run's optimizer name; ``executed_as``:
    the NVIDIA preset this very configuration is, whose run outweighs an estimate above HBM)."""
    lines = [
        f"  FLOPs       {plan.model_flops_per_token:.4g} per token (Bridge's rule, vocab padded to"
        f" {plan.padded_vocab_size}), {plan.model_flops_per_step:.4g} per step",
    ]
    ns = plan.ns_flops_per_step_per_gpu
    if ns.recipe_tp_mode:
        modes = ", ".join(
            f"{mode}{'*' if mode == ns.recipe_tp_mode else ''} {_si(ns.mode(mode).mean)}/{_si(ns.mode(mode).max)}"
            f" (SYRK {_si(ns.mode(mode).syrk_mean)}/{_si(ns.mode(mode).syrk_max)})"
            for mode in MUON_TP_MODES
        )
        lines.append(f"  NS FLOPs    per GPU per step, mean/busiest rank (* recipe's TP mode): {modes}")
    elif optimizer in MATRIX_OPTIMIZERS:  # an own count: one figure, no tensor-parallel modes
        own, e = ns.blockwise, entry(optimizer)
        lines.append(
            f"  {e.flops_label + ' FLOPs':<12}per GPU per step, mean/busiest rank: {_si(own.mean)}/"
            f"{_si(own.max)} ({e.flops_words} on each local shard)"
        )
    mem = plan.memory_per_gpu_gb
    parts = ", ".join(f"{k} {v:.1f}" for k, v in mem.breakdown.items() if v)
    capacity = f" of {mem.hbm:g} GB HBM" if mem.hbm else ""
    verdict = "" if mem.hbm is None else (" - fits" if mem.fits else " - DOES NOT FIT")
    lines.append(
        f"  memory      {mem.total:.1f} GB per GPU{capacity} (+-{100 * mem.expected_error:.0f} %, pipeline rank"
        f" {mem.worst_pipeline_rank}){verdict}: {parts}"
    )
    if executed_as and mem.hbm is not None and not mem.fits:
        lines.append(
            f"              not refused: NVIDIA ran this very configuration ({executed_as}), so the estimate"
            " is high here"
        )
    if plan.peaks:
        peaks = ", ".join(f"{p.key} {p.tflops:g}" for p in plan.peaks)
        lines.append(f"  peaks       {peaks} TFLOP/s dense ({plan.peaks[0].source})")
    with_ns = bool(ns.recipe_tp_mode)
    for implied in plan.throughput_at:
        published = ""
        if implied.published_ns_tflops_per_gpu is not None:
            published = (
                f" [published {implied.published_model_tflops_per_gpu:g} + {implied.published_ns_tflops_per_gpu:g} NS]"
            )
        elif implied.published_tflops_per_gpu is not None:
            published = f" [published {implied.published_tflops_per_gpu:g}]"
        step = implied.step
        flops = f"{_tflops(step.tflops_per_gpu)} model"
        if with_ns:
            flops += f" + {_tflops(step.ns_tflops_per_gpu)} NS = {_tflops(step.tflops_per_gpu_with_ns)}"
        lines.append(
            f"  at          {implied.basis} -> step {step.step_time_s:.2f} s: {flops} TFLOP/s/GPU{published};"
            f" MFU {_percent(dict(step.mfu))}"
        )
    return lines
