"""Loss curves of measured runs (``make compare``, ``make table``), and how every PNG of ours is written.

matplotlib runs with the Agg backend (no display); every figure is written atomically.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

from optbench.common.io import atomic_write_bytes  # noqa: E402
from optbench.measured.runs import MeasuredRun, loss_curve, training_seconds  # noqa: E402

COLORS = {"adamw": "tab:blue", "muon": "tab:orange"}
"""One colour per optimizer in every plot (report.table's ADAMW and MUON rows)."""


def save_png(figure, path: Path) -> Path:
    """Write ``figure`` as a PNG at ``path`` atomically (never a half-written file), and close it."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return atomic_write_bytes(path, buffer.getvalue())


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
    return save_png(figure, Path(path))
