"""``make table``: collect runs, build the table, draw the plots, write results/throughput.{md,csv}."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from optbench.common.errors import UserError
from optbench.common.io import atomic_write_text
from optbench.metrics.summary import WARMUP_SKIP_STEPS
from optbench.common.outputs import claim
from optbench.common.replace import replacing
from optbench.measured.collect import collect_runs
from optbench.measured.loss_plot import plot_loss
from optbench.report.plots import plot_throughput
from optbench.catalog.published import (
    check_sources,
    default_published_dir,
    load_published,
    load_sources,
)
from optbench.report.table import Table, build_table
from optbench.report.beside_plan import beside_plan
from optbench.report.planned import planned_rows
from optbench.report.table_format import render_csv, render_markdown

DEFAULT_WARMUP = WARMUP_SKIP_STEPS
"""Steps skipped at the start of every segment (as summary.json's medians): allocation, lazy optimizer state."""


@dataclass(frozen=True)
class TableOutputs:
    """What ``make table`` wrote."""

    markdown: Path
    csv: Path
    plots: list[Path]
    table: Table
    skipped: list[tuple[str, str]]
    """(folder, reason) of every run folder that could not be read."""


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


def write_throughput(
    results_dir: str | Path = "results",
    warmup: int = DEFAULT_WARMUP,
    extra_logs: Sequence[str | Path] = (),
    published_dir: str | Path | None = None,
    now: _dt.datetime | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> TableOutputs:
    """Write ``<results_dir>/throughput.md``, ``throughput.csv`` and ``plots/*.png``; ``say`` gets a progress line
    before each step that can take seconds (reading the runs, projecting the plans, drawing each plot)."""
    if warmup < 0:
        raise UserError("must be 0 or more (steps skipped at the start of every run segment)", "WARMUP")
    published_dir = (
        Path(published_dir) if published_dir is not None else default_published_dir(Path(results_dir).expanduser())
    )
    published = load_published(published_dir)  # before the folder is claimed: a refusal writes nothing
    sources = load_sources(published_dir)
    check_sources(published, sources)
    results = claim(results_dir, "results_dir", "results")
    say(
        "reading the measured runs under "
        f"{results / 'runs'}{' and ' + str(len(extra_logs)) + ' log(s)' if extra_logs else ''}"
    )
    collection = collect_runs(results, extra_logs)
    table = build_table(published, collection.runs, warmup)
    say(f"read {len(collection.runs)} run(s) beside {len(published)} published row(s); projecting the stored plans")
    planned, unread_plans = planned_rows(results)
    beside = beside_plan(collection.runs, warmup)
    skipped = [*collection.skipped, *unread_plans]

    plots_dir = results / "plots"
    drawn = []  # (path, draw): everything is drawn and written together, or nothing is replaced
    for family in dict.fromkeys(r.family for r in table.rows):
        drawn.append(
            (plots_dir / f"throughput_{_slug(family)}.png", lambda path, f=family: plot_throughput(table, f, path))
        )
        measured = [r.run for r in table.rows if r.family == family and r.run is not None]
        if any(step.loss is not None for run in measured for step in run.steps):
            unique = list({run.run_id: run for run in measured}.values())
            drawn_runs = ", ".join(
                sorted({f"{run.model} on {run.gpu} ({run.engine or 'unknown'} engine)" for run in unique})
            )
            title = f"{family}'s measured runs used in the table: {drawn_runs}"
            drawn.append(
                (plots_dir / f"loss_{_slug(family)}.png", lambda path, u=unique, t=title: plot_loss(u, path, t))
            )
    plots = [path for path, _ in drawn]
    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    relative = [str(p.relative_to(results)) for p in plots]
    markdown, csv_path = results / "throughput.md", results / "throughput.csv"
    with replacing(files=[markdown, csv_path, *plots]):
        for number, (path, draw) in enumerate(drawn, 1):
            say(f"drawing {number}/{len(drawn)}: {path.relative_to(results)}")
            draw(path)
        atomic_write_text(markdown, render_markdown(table, sources, stamp, relative, skipped, planned, beside))
        atomic_write_text(csv_path, render_csv(table))
    return TableOutputs(markdown, csv_path, plots, table, skipped)
