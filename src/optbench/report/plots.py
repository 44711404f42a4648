"""PNG plots: throughput per model family (measured bars, published markers) and loss curves.

matplotlib runs with the Agg backend (no display); every figure is written atomically.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

from optbench.io import atomic_write_bytes  # noqa: E402
from optbench.report.runs import MeasuredRun, loss_curve, training_seconds  # noqa: E402
from optbench.report.table import ADAMW, MUON, Table  # noqa: E402

COLORS = {ADAMW: "tab:blue", MUON: "tab:orange"}
SHORT = {"nvidia_blog_table1": "NVIDIA blog T1", "bridge_perf_summary": "Bridge perf"}
"""Short tick labels for the sources of results/published/sources.csv."""


def _save(figure, path: Path) -> Path:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return atomic_write_bytes(path, buffer.getvalue())


def _groups(table: Table, family: str) -> list[dict]:
    """Configurations of one family: published ones per (source, release), measured ones per key."""
    groups: dict[tuple, dict] = {}
    for row in table.rows:
        if row.family != family:
            continue
        if row.published is not None:
            pub = row.published
            key = ("published", row.model, row.gpu, row.precision, pub.source, pub.release)
            group = groups.setdefault(key, {"label": f"{row.model}\n{row.gpu} {row.precision}\n{SHORT.get(pub.source, pub.source)}\n{pub.release}",
                                            "published": {}, "measured": {}})
            group["published"][row.optimizer] = pub
        if row.throughput is not None and row.throughput.tflops_per_gpu is not None:
            key = ("measured", row.model, row.gpu, row.precision)
            group = groups.setdefault(key, {"label": f"{row.model}\n{row.gpu} {row.precision}\nmeasured",
                                            "published": {}, "measured": {}})
            group["measured"][row.optimizer] = row.throughput
    return list(groups.values())


def _bar(axis, x: float, throughput, optimizer: str) -> None:
    model = throughput.tflops_per_gpu
    error = [[model.median - model.q1], [model.q3 - model.median]]
    axis.bar(x, model.median, width=0.35, color=COLORS[optimizer], yerr=error, capsize=3)
    with_ns = throughput.tflops_per_gpu_with_ns
    if optimizer == MUON and with_ns is not None and with_ns.median > model.median:
        axis.bar(x, with_ns.median - model.median, bottom=model.median, width=0.35, color=COLORS[MUON],
                 alpha=0.45, hatch="//")


def plot_throughput(table: Table, family: str, path: str | Path) -> Path:
    """TFLOP/s per GPU (log scale) and Muon/AdamW per configuration of one family."""
    groups = _groups(table, family)
    figure, (left, right) = plt.subplots(1, 2, figsize=(max(8, 1.5 * len(groups) + 4), 4.8),
                                         gridspec_kw={"width_ratios": [2, 1]})
    ratio_labels, ratio_measured, ratio_published, values = [], [], [], []
    for index, group in enumerate(groups):
        for offset, optimizer in ((-0.2, ADAMW), (0.2, MUON)):
            if optimizer in group["measured"]:
                _bar(left, index + offset, group["measured"][optimizer], optimizer)
                values.append(group["measured"][optimizer].tflops_per_gpu.median)
            pub = group["published"].get(optimizer)
            if pub is not None:
                left.plot(index + offset, pub.tflops_per_gpu, marker="D", markerfacecolor=COLORS[optimizer],
                          markeredgecolor="black", markersize=8, linestyle="")
                values.append(pub.tflops_per_gpu)
                if pub.flops_counted == "model+newton_schulz" and pub.model_tflops_per_gpu is not None:
                    left.plot(index + offset, pub.model_tflops_per_gpu, marker="_", color="black", markersize=16,
                              markeredgewidth=2, linestyle="")
        measured, published = group["measured"], group["published"]
        if MUON in measured and ADAMW in measured:
            base = measured[ADAMW].tflops_per_gpu.median
            with_ns = measured[MUON].tflops_per_gpu_with_ns
            ratio_labels.append(group["label"])
            ratio_measured.append((measured[MUON].tflops_per_gpu.median / base, with_ns.median / base if with_ns else None))
            ratio_published.append(None)
        if MUON in published and ADAMW in published:
            base = published[ADAMW].tflops_per_gpu
            ratio_labels.append(group["label"])
            ratio_measured.append(None)
            ratio_published.append(((published[MUON].model_tflops_per_gpu or 0) / base, published[MUON].tflops_per_gpu / base))
    # Measured CPU proxies (GFLOP/s) and published GB300 figures (~1000 TFLOP/s) share an axis only on a log scale.
    wide = bool(values) and max(values) / min(values) > 20
    if wide:
        left.set_yscale("log")
        left.set_ylim(min(values) / 4, max(values) * 2)  # bars start at the axis bottom: leave them some height
    left.set_xticks(range(len(groups)), [g["label"] for g in groups], fontsize=7)
    left.set_xlim(-0.6, len(groups) - 0.4)
    left.set_ylabel("TFLOP/s per GPU" + (" (log scale)" if wide else ""))
    left.set_title(f"{family}: bars measured (hatched: Newton-Schulz), diamonds published\n"
                   "(bar = model FLOPs; dash = published model-only part)", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[o]) for o in (ADAMW, MUON)]
    handles += [plt.Line2D([], [], marker="D", color="grey", markeredgecolor="black", linestyle=""),
                plt.Line2D([], [], marker="_", color="black", markersize=14, markeredgewidth=2, linestyle="")]
    left.legend(handles, [f"{ADAMW} measured", f"{MUON} measured", "published", "published model-only"],
                fontsize=7, loc="best")
    for index, (measured, published) in enumerate(zip(ratio_measured, ratio_published)):
        if measured is not None:
            right.bar(index - 0.15, measured[0], width=0.3, color=COLORS[MUON], label="measured, model" if index == 0 else None)
            if measured[1] is not None:
                right.bar(index + 0.15, measured[1], width=0.3, color=COLORS[MUON], alpha=0.45, hatch="//",
                          label="measured, with NS")
        if published is not None:
            right.plot(index - 0.15, published[0], marker="_", color="black", markersize=16, markeredgewidth=2, linestyle="")
            right.plot(index + 0.15, published[1], marker="D", color="black", linestyle="")
    right.axhline(1.0, color="grey", linewidth=0.8)
    right.set_xticks(range(len(ratio_labels)), ratio_labels, fontsize=7)
    right.set_xlim(-0.6, max(len(ratio_labels), 1) - 0.4)
    right.set_ylabel("Muon / AdamW TFLOP/s")
    right.set_title("Muon / AdamW (left: model FLOPs, right: with NS)", fontsize=9)
    if not ratio_labels:
        right.text(0.5, 0.5, "no configuration\nwith both optimizers", ha="center", va="center", transform=right.transAxes)
    else:
        values = [v for pair in ratio_measured + ratio_published if pair for v in pair if v]
        right.set_ylim(0 if min(values) < 0.8 else 0.8, max(1.2, max(values) + 0.05))
    figure.tight_layout()
    return _save(figure, Path(path))


def plot_loss(
    runs: Sequence[MeasuredRun],
    path: str | Path,
    title: str,
    target: float | None = None,
    labels: Sequence[str] | None = None,
) -> Path:
    """Loss vs tokens and loss vs training seconds, one line per run, coloured by optimizer."""
    figure, (by_tokens, by_time) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    seen_labels: set[str] = set()
    for index, run in enumerate(runs):
        curve = [r for r in loss_curve(run.steps) if r.loss is not None]
        if not curve:
            continue
        label = labels[index] if labels else f"{run.optimizer} ({run.run_id})"
        shown = label if label not in seen_labels else None
        seen_labels.add(label)
        color = COLORS.get(run.optimizer, "tab:grey")
        losses = [r.loss for r in curve]
        tokens = [r.tokens for r in curve]
        if all(t is not None for t in tokens):
            by_tokens.plot(tokens, losses, color=color, alpha=0.8, linewidth=1.2, label=shown)
        seconds = training_seconds(curve)
        if all(s is not None for s in seconds):
            by_time.plot(seconds, losses, color=color, alpha=0.8, linewidth=1.2, label=shown)
    for axis, xlabel in ((by_tokens, "tokens"), (by_time, "training seconds (sum of step times)")):
        if target is not None:
            axis.axhline(target, color="black", linestyle="--", linewidth=0.8, label="target")
        axis.set_xlabel(xlabel)
        axis.grid(alpha=0.3)
    by_tokens.set_ylabel("training loss")
    if by_tokens.get_legend_handles_labels()[0]:  # runs without token counts (a bare log) draw no line here
        by_tokens.legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    return _save(figure, Path(path))
