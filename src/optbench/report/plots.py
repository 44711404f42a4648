"""PNG plots: throughput per model family (measured bars, published markers).

Loss curves are :mod:`optbench.measured.loss_plot`'s.

matplotlib runs with the Agg backend (no display); every figure is written atomically (``save_png``).
"""

from __future__ import annotations

from pathlib import Path

from optbench.measured.loss_plot import COLORS, save_png  # first: it chooses matplotlib's Agg backend
import matplotlib.pyplot as plt  # noqa: E402,I001 - after the backend is chosen

from optbench.catalog.published import release_order  # noqa: E402
from optbench.report.table import ADAMW, MUON, Table  # noqa: E402

SHORT = {"nvidia_blog_table1": "NVIDIA blog T1", "bridge_perf_summary": "Bridge perf"}
"""Short tick labels for the sources of results/published/sources.csv."""


ROW_INCHES = 0.42
"""Height of one configuration's row: the plots grow downwards with the rows, never sideways."""
WIDTH_INCHES = 12.0
"""Figure width: 12 in at 110 dpi is about 1,300 px (the bound is 2,400), however many configurations a family has."""


def _groups(table: Table, family: str) -> list[dict]:
    """Configurations of one family: published ones per (source, release), measured ones per key; each says whether
    it ran on a cluster (published, or measured by Megatron Bridge) or on this project's local engine."""
    groups: dict[tuple, dict] = {}
    for row in table.rows:
        if row.family != family:
            continue
        if row.published is not None:
            pub = row.published
            key = ("published", row.model, row.gpu, row.precision, pub.source, pub.release)
            group = groups.setdefault(
                key,
                {
                    "label": f"{row.model} {row.gpu} x{pub.num_gpus} {row.precision}, "
                    f"{SHORT.get(pub.source, pub.source)} {pub.release}",
                    "published": {},
                    "measured": {},
                    "local": False,
                    "setup": (pub.source, row.model, row.gpu, pub.num_gpus, row.precision),
                    "release": release_order(pub.release),
                },
            )
            group["published"][row.optimizer] = pub
        if row.throughput is not None and row.throughput.tflops_per_gpu is not None:
            local = row.run is not None and row.run.engine == "local"
            key = ("measured", row.model, row.gpu, row.precision, local)
            group = groups.setdefault(
                key,
                {
                    "label": f"{row.model} {row.gpu} {row.precision}, measured",
                    "published": {},
                    "measured": {},
                    "local": local,
                },
            )
            group["measured"][row.optimizer] = row.throughput
            if row.optimizer == MUON:
                group["ratio_note"] = row.ratio_note
    return list(groups.values())


def newest_per_setup(groups: list[dict]) -> tuple[list[dict], int]:
    """The groups a plot draws, and how many published ones it leaves out: every pair of Muon and AdamW (the answer),
    every measured configuration, and of the published rows with one optimizer only the newest release per setup
    (source, model, GPU, count, precision), so that a model's 30 AdamW releases do not swamp its one Muon pair.
    results/throughput.md lists every release."""
    newest: dict[tuple, tuple] = {}
    for group in groups:
        if "setup" in group and len(group["published"]) == 1:
            newest[group["setup"]] = max(newest.get(group["setup"], ()), group["release"])
    kept = [g for g in groups if "setup" not in g or len(g["published"]) > 1 or g["release"] == newest[g["setup"]]]
    return kept, len(groups) - len(kept)


def _cluster_title(family: str, groups: list[dict], left_out: int) -> str:
    """What the cluster panel draws, in its words: published by NVIDIA, and measured here only where it was."""
    drawn = []
    if any(g["published"] for g in groups):
        older = f"; {left_out} older release(s) in results/throughput.md" if left_out else ""
        drawn.append(f"published by NVIDIA (black edge; one-optimizer rows: newest release per setup{older})")
    if any(g["measured"] for g in groups):
        drawn.append("measured here by Megatron Bridge")
    return f"{family} on GPUs: " + (" and ".join(drawn) or "no figure")


def _figures(group: dict, optimizer: str) -> tuple[float, float | None, bool] | None:
    """(model TFLOP/s, with Newton-Schulz or None, published) of one optimizer in a group; None if absent."""
    if optimizer in group["measured"]:
        throughput = group["measured"][optimizer]
        with_ns = throughput.tflops_per_gpu_with_ns
        return throughput.tflops_per_gpu.median, with_ns.median if with_ns else None, False
    pub = group["published"].get(optimizer)
    if pub is None:
        return None
    if pub.flops_counted == "model+newton_schulz" and pub.model_tflops_per_gpu is not None:
        return pub.model_tflops_per_gpu, pub.tflops_per_gpu, True
    return pub.tflops_per_gpu, None, True


def _throughput_panel(axis, groups: list[dict], unit: str, scale: float) -> None:
    """Horizontal bars, a pair per configuration (AdamW above Muon): solid = model FLOPs, hatched = Newton-Schulz."""
    for index, group in enumerate(groups):
        for offset, optimizer in ((-0.2, ADAMW), (0.2, MUON)):
            figures = _figures(group, optimizer)
            if figures is None:
                continue
            model, with_ns, published = figures
            edge = "black" if published else "none"
            axis.barh(index + offset, model * scale, height=0.38, color=COLORS[optimizer], edgecolor=edge)
            if with_ns is not None and with_ns > model:
                axis.barh(
                    index + offset,
                    (with_ns - model) * scale,
                    left=model * scale,
                    height=0.38,
                    color=COLORS[optimizer],
                    alpha=0.45,
                    hatch="//",
                    edgecolor=edge,
                )
    axis.set_yticks(range(len(groups)), [g["label"] for g in groups], fontsize=7)
    axis.set_ylim(max(len(groups), 1) - 0.5, -0.5)
    axis.set_xlabel(unit)
    axis.grid(axis="x", alpha=0.3)


def _ratio_panel(axis, groups: list[dict]) -> None:
    """Muon / AdamW of each configuration that has both (model FLOPs; hatched: with Newton-Schulz), 1.0 marked."""
    shown = []
    for index, group in enumerate(groups):
        adamw, muon = _figures(group, ADAMW), _figures(group, MUON)
        if adamw is None or muon is None:
            continue
        if group.get("ratio_note", "").startswith("not comparable"):  # unlike runs: no ratio, and why
            axis.text(
                0.02, index, group["ratio_note"][:60], va="center", fontsize=6, transform=axis.get_yaxis_transform()
            )
            continue
        base = adamw[0]
        axis.barh(index, muon[0] / base, height=0.5, color=COLORS[MUON])
        shown.append(muon[0] / base)
        if muon[1] is not None:
            axis.plot(muon[1] / base, index, marker="|", color="black", markersize=12, markeredgewidth=2)
            shown.append(muon[1] / base)
    axis.axvline(1.0, color="grey", linewidth=0.8)
    axis.set_ylim(max(len(groups), 1) - 0.5, -0.5)
    axis.set_yticks(range(len(groups)), [""] * len(groups))
    axis.set_xlabel("Muon / AdamW (bar: model FLOPs, |: with NS)")
    axis.grid(axis="x", alpha=0.3)
    if shown:
        axis.set_xlim(0 if min(shown) < 0.8 else 0.8, max(1.2, max(shown) + 0.05))
    else:
        axis.text(
            0.5, 0.5, "no configuration\nwith both optimizers", ha="center", va="center", transform=axis.transAxes
        )


def plot_throughput(table: Table, family: str, path: str | Path) -> Path:
    """TFLOP/s per GPU and Muon/AdamW per configuration of one family: the cluster's rows (published, and measured by
    Megatron Bridge) and the local engine's runs on axes of their own, each linear (a laptop's GFLOP/s beside a
    GB300's 1,000 TFLOP/s would need a log axis nobody reads at a glance); one row per configuration."""
    groups, left_out = newest_per_setup(_groups(table, family))
    cluster = [g for g in groups if not g["local"]]
    local = [g for g in groups if g["local"]]
    stand_ins = ", ".join(dict.fromkeys(g["label"].removesuffix(", measured") for g in local))
    sections = [
        (_cluster_title(family, cluster, left_out), cluster, "TFLOP/s per GPU", 1.0),
        (
            f"{family}'s small stand-ins ({stand_ins}) measured here by the local engine: their own axis, "
            "not the full model's speed",
            local,
            "GFLOP/s per device",
            1e3,
        ),
    ]
    sections = [section for section in sections if section[1]] or sections[:1]  # nothing with a figure: one empty panel
    heights = [max(2.0, ROW_INCHES * len(section[1]) + 1.0) for section in sections]
    figure, axes = plt.subplots(
        len(sections),
        2,
        figsize=(WIDTH_INCHES, sum(heights)),
        squeeze=False,
        gridspec_kw={"width_ratios": [2, 1], "height_ratios": heights},
    )
    for (title, members, unit, scale), (values, ratios) in zip(sections, axes):
        _throughput_panel(values, members, unit, scale)
        values.set_title(title, fontsize=9)
        _ratio_panel(ratios, members)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[o]) for o in (ADAMW, MUON)]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="black", hatch="//"))
    figure.legend(handles, [ADAMW, MUON, "Newton-Schulz FLOPs (Muon)"], fontsize=8, ncol=3, loc="upper center")
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.4 / sum(heights)))  # the legend's line above the panels
    return save_png(figure, Path(path))
