"""Render a :class:`~optbench.report.table.Table` as results/throughput.md and results/throughput.csv.

The markdown is for people (one section per model family, a Muon/AdamW section, provenance of every
run); the CSV is for tools (one line per row, medians with quartiles, every provenance field).
A missing measurement is written as "not measured" (markdown) or an empty cell (CSV), never filled in.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from optbench.config.optimizers import matrix_labels
from optbench.config.schema import MATRIX_OPTIMIZERS, OPTIMIZER_LABELS
from optbench.common.checkout import repo_root
from optbench.common.tables import code, escaped, markdown_table
from optbench.catalog.published import PublishedRow, Source, default_published_dir, load_inconsistent
from optbench.report.beside_plan import BesidePlan
from optbench.report.beside_plan import section as beside_plan_section
from optbench.report.planned import PlannedRow
from optbench.measured.runs import PeakInfo, RunThroughput, run_throughput
from optbench.measured.stats import format_number, format_spread
from optbench.report.table import Table, TableRow

NOT_MEASURED = "not measured"
NONE_PUBLISHED = "none published"


def format_tflops(tflops: float) -> str:
    """A peak or rate in TFLOP/s, or GFLOP/s below 1 TFLOP/s (CPUs)."""
    if tflops < 1:
        return f"{format_number(tflops * 1000)} GFLOP/s"
    return f"{format_number(tflops, 4)} TFLOP/s"


def peak_text(peak: PeakInfo) -> str:
    """``<key> <value>``, e.g. ``gb300_bf16 2,500 TFLOP/s`` or ``cpu_fp32_probe 85.0 GFLOP/s``."""
    return f"{peak.key} {format_tflops(peak.tflops)}"


def mfu_text(throughput: RunThroughput | None, peak: PeakInfo | None) -> str:
    """``31.2 % of <peak>``: an MFU always names its denominator."""
    if throughput is None or throughput.mfu is None:
        return NOT_MEASURED
    if peak is None:
        return "no peak known"
    return f"{throughput.mfu.median * 100:.1f} % of {peak_text(peak)}"


def as_published(value: float) -> str:
    """A published figure as printed by its source (no digits added)."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,g}"


def published_text(pub: PublishedRow | None) -> str:
    if pub is None:
        return NONE_PUBLISHED
    text = as_published(pub.tflops_per_gpu)
    if pub.flops_counted == "model+newton_schulz" and pub.model_tflops_per_gpu is not None:
        text += f" = {as_published(pub.model_tflops_per_gpu)} model + {as_published(pub.ns_tflops_per_gpu or 0)} NS"
    return text


def _signed_percent(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f} %"


def _ratio_text(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def delta_text(row: TableRow) -> str:
    if (
        row.delta is None
        and row.run is not None
        and row.published is not None
        and row.run.engine == "megatron_bridge"
        and row.run.intent == "train"
    ):
        return "not comparable: intent=train (routing not forced to balance, NaN checks and eval on)"
    if row.delta is None:
        return "-" if row.published is None or row.throughput is None else "no comparable figure"
    basis = "with NS" if row.delta_basis == "model+newton_schulz" else "model"
    return f"{_signed_percent(row.delta)} ({basis})"


def versions_text(versions: dict[str, str]) -> str:
    return ", ".join(f"{name} {version}" for name, version in sorted(versions.items()))


def measured_sentence(table: Table) -> str:
    """What was measured where, and what is only published."""
    measured = {(r.kind, r.gpu) for r in table.runs}
    published_gpus = sorted({r.gpu for r in table.rows if r.published is not None} - {g for _, g in measured})
    published_part = (
        f"{', '.join(g.upper() for g in published_gpus)} rows are published figures, not measured here."
        if published_gpus
        else ""
    )
    if not table.runs:
        return (
            "Nothing was measured: no run with step records was found under results/runs (run `make pretrain` "
            f"or `make compare`, then `make table`). Every figure below is published. {published_part}"
        ).strip()
    where = "; ".join(f"{engine} on {gpu}" for engine, gpu in sorted(measured))
    return f"Measured here: {where} ({len(table.runs)} run(s)). {published_part}".strip()


def _row_cells(row: TableRow) -> list[str]:
    t = row.throughput
    source = f"{row.published.source} {row.published.release}" if row.published else "-"
    if row.optimizer != "muon":
        measured_ns = "-"  # AdamW has no Newton-Schulz
    else:
        measured_ns = format_spread(t.tflops_per_gpu_with_ns) if t else NOT_MEASURED
    run = code(row.run.run_id) if row.run else "-"
    if row.run is not None and row.run.unverified_container:
        run += f" (unverified container {escaped(row.run.container)}: planned on the newest checked release's facts)"
    if row.run is not None and row.run.conformance:
        run += f" (container check: {escaped(row.run.conformance)})"
    if row.other_runs:
        run += f" (+{len(row.other_runs)} older)"
    return [
        f"{row.model}",
        row.gpu,
        str(row.num_gpus or "-"),
        row.precision,
        row.optimizer,
        published_text(row.published),
        source,
        format_spread(t.tflops_per_gpu) if t else NOT_MEASURED,
        measured_ns,
        format_spread(t.tokens_per_s_per_gpu) if t else NOT_MEASURED,
        mfu_text(t, row.run.peak if row.run else None),
        delta_text(row),
        run,
    ]


MAIN_HEADER = [
    "model",
    "GPU",
    "GPUs",
    "precision",
    "optimizer",
    "published TFLOP/s/GPU",
    "source release",
    "measured TFLOP/s/GPU (model)",
    "measured TFLOP/s/GPU (with NS)",
    "tokens/s/GPU",
    "MFU (model, of peak)",
    "delta to published",
    "run",
]


def _ratio_lines(table: Table) -> list[list[str]]:
    """One line per (model, GPU, precision[, source]) that has both optimizers."""
    lines, seen = [], set()
    for row in table.rows:
        if row.optimizer != "muon":
            continue
        if row.published is not None and row.published_ratio != (None, None):
            key = (row.model, row.gpu, row.precision, row.published.source, row.published.release)
            if key not in seen:
                seen.add(key)
                lines.append(
                    [
                        row.model,
                        row.gpu,
                        row.precision,
                        f"published ({key[3]} {key[4]})",
                        _ratio_text(row.published_ratio[0]),
                        _ratio_text(row.published_ratio[1]),
                    ]
                )
        if row.run is not None and (row.measured_ratio != (None, None) or row.ratio_note):
            key = (row.model, row.gpu, row.precision, "measured")
            if key not in seen:
                seen.add(key)
                figures = "measured" + (f" ({row.ratio_note})" if row.ratio_note else "")
                empty = "-" if row.measured_ratio == (None, None) else NOT_MEASURED
                lines.append(
                    [
                        row.model,
                        row.gpu,
                        row.precision,
                        figures,
                        _ratio_text(row.measured_ratio[0]) or empty,
                        _ratio_text(row.measured_ratio[1]) or empty,
                    ]
                )
    return lines


def _short_commit(git: str) -> str:
    """The first 12 hex digits of the commit, keeping a ``+dirty`` mark (the run had uncommitted changes)."""
    commit, plus, mark = git.partition("+")
    return commit[:12] + plus + mark


def _run_lines(table: Table) -> list[list[str]]:
    lines = []
    for run in sorted(table.runs, key=lambda r: r.run_id):
        t = run_throughput(run, table.warmup)
        lines.append(
            [
                code(run.run_id),
                run.kind,
                code(run.recipe) if run.recipe else "-",
                escaped(run.date) if run.date else "-",
                code(run.command) if run.command else "-",
                code(_short_commit(run.git_commit)) if run.git_commit else "-",
                escaped(versions_text(run.versions)) or "-",
                f"{t.steps_used}/{t.steps_total}",
                escaped("; ".join(run.notes)) or "-",
            ]
        )
    return lines


def _projection_lines(table: Table) -> list[list[str]]:
    from optbench.projection.calibration import row_id
    from optbench.plan.row_runs import COMPOSED_ROWS
    from optbench.projection.expected_error import expected_error_cell
    from optbench.projection.published_rows import projection_error

    contradicted = load_inconsistent(default_published_dir(repo_root() / "results"))
    lines = []
    for row in table.rows:
        pub = row.published
        if pub is None:
            continue
        p = projection_error(pub, COMPOSED_ROWS, with_expected_error=True)
        if "tflops" in p:
            note = (
                (
                    "; this row's own setup's other releases contradict it, so it anchors nothing "
                    "(results/published/inconsistent.csv)"
                )
                if row_id(pub) in contradicted
                else ""
            )
            cells = [
                f"{p['tflops']:.0f}",
                _signed_percent(p["error_percent"] / 100),
                expected_error_cell(p["expected_error"]),
                ("anchor: " if p["anchor_itself"] else "") + p["anchor"] + note,
            ]
        else:
            cells = ["-", "not reached", "-", p["reason"][:160]]
        lines.append(
            [
                pub.model,
                pub.release,
                pub.gpu,
                pub.precision,
                pub.optimizer,
                as_published(pub.model_tflops_per_gpu or pub.tflops_per_gpu),
                *cells,
            ]
        )
    return lines


def _planned_section(rows: Sequence[PlannedRow]) -> list[str]:
    out = [
        "",
        f"## {matrix_labels()} vs AdamW, projected (from `make plan`)",
        "",
        "Model TFLOP/s/GPU of each matrix optimizer against the same AdamW twin, each as its own recipe configures it; "
        "projections of our step model, not measurements (docs/projection.md: `projection.optimizers`). One row per "
        "plan in results/plans/; NVIDIA publishes a figure for Muon only.",
        "",
    ]
    if not rows:
        return [
            *out,
            "No plan with COMPARE= yet: `make plan RECIPE=qwen3_30b_a3b_muon "
            f"COMPARE={','.join(MATRIX_OPTIMIZERS[-2:])}`"
            " (or any matrix-optimizer recipe with COMPARE=) adds one; a plan without COMPARE= adds no row.",
        ]
    header = ["plan", "container", "GPUs", "AdamW twin TFLOP/s/GPU", *(OPTIMIZER_LABELS[n] for n in MATRIX_OPTIMIZERS)]
    cells = [[code(r.command), escaped(r.container), r.gpus, f"{r.adamw_tflops:.1f}", *r.cells.values()] for r in rows]
    return [*out, *markdown_table(header, cells)]


def _ratio_section(table: Table) -> list[str]:
    """The answer first: Muon's throughput over AdamW's per model, published and measured."""
    ratios = _ratio_lines(table)
    out = [
        "",
        "## Muon / AdamW per model",
        "",
        "Muon's model TFLOP/s/GPU over AdamW's at the same configuration: below 1, Muon's steps are slower. The second "
        "ratio counts Muon's Newton-Schulz FLOPs as work done besides the model's, as NVIDIA's blog does: it is not a "
        "speed-up (on the CPU proxies Newton-Schulz is most of Muon's FLOPs, so it exceeds 1 while Muon's steps take "
        "longer).",
        "",
    ]
    if ratios:
        out += markdown_table(
            ["model", "GPU", "precision", "figures", "Muon/AdamW (model FLOPs)", "Muon/AdamW counting NS as work"],
            ratios,
        )
    else:
        out.append("No configuration has both optimizers.")
    return out


def render_markdown(
    table: Table,
    sources: dict[str, Source],
    generated: str,
    plots: Sequence[str] = (),
    skipped: Sequence[tuple[str, str]] = (),
    planned: Sequence[PlannedRow] = (),
    beside: Sequence[BesidePlan] = (),
) -> str:
    """results/throughput.md."""
    out = [
        "# Throughput: Muon vs AdamW",
        "",
        measured_sentence(table),
        "",
        f"Generated by `make table` at {generated}. Measured cells are medians [interquartile range] (n = steps) over "
        f"each run's steps after the first {table.warmup} of every segment (warm-up, at most half of a short segment; "
        "a restart warms up again). Delta to published = measured / published - 1 on the same counting (model FLOPs, "
        "or model + Newton-Schulz). Rules: docs/results.md.",
    ]
    out += _ratio_section(table)
    out += _planned_section(planned)
    out += [
        "",
        "## Published rows and measured runs, by model",
        "",
        "The reference: every published figure of each model beside what was measured here, then our projection "
        "at each published row, each run beside its plan, the runs, the sources and the plots.",
    ]
    for family in dict.fromkeys(r.family for r in table.rows):
        out += ["", f"### {family}", ""]
        out += markdown_table(MAIN_HEADER, [_row_cells(r) for r in table.rows if r.family == family])
    out += [
        "",
        "## Our projection at every published row",
        "",
        "Model-only TFLOP/s/GPU projected at the row's configuration (its release's executed NVIDIA preset and the "
        "row's stated values; the `make plan` command of each row is in results/projection/validation.json and prints "
        "the same number), calibrated on one AdamW row (named; never a Muon row). Error = projected / published - 1. "
        "'anchor' marks a row the projection was solved on: in sample, 0 by construction. Expected error: what "
        "the row's `make plan` states, the median error of the scheme that matches its distance from its anchor. "
        "Every scheme's out-of-sample errors, led by leave one setup out and each beside copying the nearest "
        "published row, are in results/projection/validation.md (`make projection`). Rules: docs/projection.md.",
        "",
    ]
    out += markdown_table(
        [
            "model",
            "release",
            "GPU",
            "precision",
            "optimizer",
            "published",
            "projected",
            "error",
            "expected error",
            "calibrated on",
        ],
        _projection_lines(table),
    )
    out += beside_plan_section(beside)
    out += ["", "## Runs", ""]
    out += (
        markdown_table(
            ["run", "kind", "recipe", "date", "command", "git", "versions", "steps used/total", "notes"],
            _run_lines(table),
        )
        if table.runs
        else ["No measured runs."]
    )
    if skipped:
        out += ["", "Skipped:", ""] + _skipped_lines(skipped)
    out += ["", "## Sources", ""]
    out += [f"- `{s.source}`: {s.title}, {s.publisher}, {s.date}. {s.where} ({s.what})" for s in sources.values()]
    if plots:
        out += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(out) + "\n"


CSV_FIELDS = [
    "family",
    "model",
    "gpu",
    "num_gpus",
    "precision",
    "optimizer",
    "published_source",
    "published_release",
    "published_tflops_per_gpu",
    "published_flops_counted",
    "published_model_tflops_per_gpu",
    "published_ns_tflops_per_gpu",
    "published_tokens_per_s_per_gpu",
    "measured_tflops_per_gpu_median",
    "measured_tflops_per_gpu_q1",
    "measured_tflops_per_gpu_q3",
    "measured_tflops_per_gpu_with_ns_median",
    "measured_tflops_per_gpu_with_ns_q1",
    "measured_tflops_per_gpu_with_ns_q3",
    "measured_tokens_per_s_per_gpu_median",
    "measured_tokens_per_s_per_gpu_q1",
    "measured_tokens_per_s_per_gpu_q3",
    "measured_mfu_median",
    "mfu_peak_key",
    "mfu_peak_tflops",
    "mfu_peak_label",
    "steps_used",
    "steps_total",
    "warmup_steps_skipped",
    "delta_to_published",
    "delta_basis",
    "published_muon_adamw_ratio_model",
    "published_muon_adamw_ratio_headline",
    "measured_muon_adamw_ratio_model",
    "measured_muon_adamw_ratio_with_ns",
    "measured_ratio_note",
    "run_id",
    "run_kind",
    "run_intent",
    "other_run_ids",
    "command",
    "date",
    "git_commit",
    "versions",
    "run_path",
    "run_container",
    "run_container_unverified",
    "run_conformance",
]


def _spread_columns(prefix: str, spread) -> dict[str, float | str]:
    if spread is None:
        return {f"{prefix}_median": "", f"{prefix}_q1": "", f"{prefix}_q3": ""}
    return {f"{prefix}_median": spread.median, f"{prefix}_q1": spread.q1, f"{prefix}_q3": spread.q3}


def csv_record(row: TableRow, warmup: int) -> dict[str, object]:
    pub, run, t = row.published, row.run, row.throughput
    record: dict[str, object] = {name: "" for name in CSV_FIELDS}
    record.update(
        family=row.family,
        model=row.model,
        gpu=row.gpu,
        num_gpus=row.num_gpus or "",
        precision=row.precision,
        optimizer=row.optimizer,
        warmup_steps_skipped=warmup,
    )
    if pub is not None:
        record.update(
            published_source=pub.source,
            published_release=pub.release,
            published_tflops_per_gpu=pub.tflops_per_gpu,
            published_flops_counted=pub.flops_counted,
            published_model_tflops_per_gpu=pub.model_tflops_per_gpu or "",
            published_ns_tflops_per_gpu=pub.ns_tflops_per_gpu or "",
            published_tokens_per_s_per_gpu=pub.tokens_per_s_per_gpu or "",
        )
    if t is not None:
        record.update(_spread_columns("measured_tflops_per_gpu", t.tflops_per_gpu))
        record.update(_spread_columns("measured_tflops_per_gpu_with_ns", t.tflops_per_gpu_with_ns))
        record.update(_spread_columns("measured_tokens_per_s_per_gpu", t.tokens_per_s_per_gpu))
        record.update(
            measured_mfu_median=t.mfu.median if t.mfu else "", steps_used=t.steps_used, steps_total=t.steps_total
        )
    if run is not None:
        if run.peak is not None:
            record.update(mfu_peak_key=run.peak.key, mfu_peak_tflops=run.peak.tflops, mfu_peak_label=run.peak.label)
        record.update(
            run_id=run.run_id,
            run_kind=run.kind,
            run_intent=run.intent,
            other_run_ids=" ".join(row.other_runs),
            command=run.command,
            date=run.date,
            git_commit=run.git_commit,
            versions=versions_text(run.versions),
            run_path=run.path,
            run_container=run.container,
            run_container_unverified="true" if run.unverified_container else "",
            run_conformance=run.conformance,
        )
    record.update(
        delta_to_published="" if row.delta is None else row.delta,
        delta_basis=row.delta_basis,
        published_muon_adamw_ratio_model=row.published_ratio[0] or "",
        published_muon_adamw_ratio_headline=row.published_ratio[1] or "",
        measured_muon_adamw_ratio_model=row.measured_ratio[0] or "",
        measured_muon_adamw_ratio_with_ns=row.measured_ratio[1] or "",
        measured_ratio_note=row.ratio_note,
    )
    return record


def render_csv(table: Table) -> str:
    """results/throughput.csv."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in table.rows:
        writer.writerow(csv_record(row, table.warmup))
    return buffer.getvalue()


SKIPPED_LISTED = 3
"""Folders listed one by one for a reason; more with one reason (a study's runs, kept as curves without step records)
are counted on one line that names the first and the last."""


def skipped_groups(skipped: Sequence[tuple[str, str]]) -> list[tuple[list[str], str]]:
    """The skipped folders by reason: (folders, reason), a reason's folders listed alone when few share it."""
    by_reason: dict[str, list[str]] = {}
    for path, reason in skipped:
        by_reason.setdefault(reason, []).append(path)
    groups: list[tuple[list[str], str]] = []
    for reason, paths in by_reason.items():
        groups += [(paths, reason)] if len(paths) > SKIPPED_LISTED else [([path], reason) for path in paths]
    return groups


def _skipped_lines(skipped: Sequence[tuple[str, str]]) -> list[str]:
    """The skipped folders, one line each, or one line for each reason more than :data:`SKIPPED_LISTED` share."""
    return [
        f"- {len(paths)} folders, {code(paths[0])} to {code(paths[-1])}: {escaped(reason)}"
        if len(paths) > 1
        else f"- {code(paths[0])}: {escaped(reason)}"
        for paths, reason in skipped_groups(skipped)
    ]
