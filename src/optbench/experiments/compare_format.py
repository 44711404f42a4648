"""Write a time-to-target comparison: results/compare.md, .json, .csv and its loss plot."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict
from pathlib import Path

from optbench.common.io import atomic_write_text, dumps_strict
from optbench.common.tables import markdown_table
from optbench.common.outputs import claim
from optbench.experiments.compare import ADAMW, MUON, CompareResult, verdict
from optbench.measured.loss_plot import plot_loss
from optbench.measured.runs import MeasuredRun
from optbench.measured.stats import Spread, format_spread

NOT_REACHED = "not reached"


def _range(s: Spread | None, digits: int = 3, unit: str = "") -> str:
    """``median [min-max] (n=N)`` over seeds."""
    return format_spread(s, digits, missing=NOT_REACHED, unit=unit, extremes=True)


def _ratio(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


def _provenance(found: dict[str, list[str]]) -> list[str]:
    """Which runs, code, machine and data the figures come from, and what a re-run should match."""
    if not found:
        return []

    def said(key: str) -> str:
        return "; ".join(found.get(key) or ["not recorded"])

    started = found.get("started") or []
    when = " to ".join(dict.fromkeys(started)) or "not recorded"
    return [
        "",
        "## Where these figures come from",
        "",
        f"Runs started {when}; code {said('code')}; machine {said('machine')}; Python {said('python')}, "
        f"torch {said('torch')}; data: {said('data')}.",
        "",
        "What a re-run should match: on the same code, the same corpus and the same threads, every loss repeats bit "
        "for bit (tests/test_engine_runs.py holds it), so the tokens to target repeat exactly; the seconds move with "
        "the machine and its load. The pydocs corpus is built from the docstrings of the Python that runs `make data`, "
        "so another Python version trains on other tokens, as does code that changes the corpus, the model or the "
        "optimizers: expect the tokens ratio within the per-seed range above rather than the same median. The time "
        "ratio is this CPU's: Newton-Schulz and the model's GEMMs speed up differently on another CPU.",
    ]


def render_compare_markdown(result: CompareResult, plot: str | None = None) -> str:
    ctx = result.context
    muon, adamw = result.summaries[MUON], result.summaries[ADAMW]
    floor = f"; the stream's loss floor is {result.loss_floor:.3f} nats/token" if result.loss_floor is not None else ""
    flags = [f"**{note[0].upper() + note[1:]}.**" for note in (result.unlike, result.load) if note]
    if result.load:
        flags[-1] += " The seconds columns are not this CPU's quiet figure; tokens and losses are unaffected."
    out = [
        f"# Time to target: Muon vs AdamW on {result.model}",
        "",
        verdict(result),
        "",
        *(line for flag in flags for line in (flag, "")),
        "A quick check, not a tuned comparison: both optimizers run at their recipes' learning rates (one value for "
        "both), on few seeds, and the time ratio is a CPU's, where Newton-Schulz outweighs the model's own FLOPs. "
        "`make study` (results/study.md) tunes each optimizer's learning rate and measures on held-out seeds.",
        "",
        f"Recipes {ctx.get('recipes', {}).get(MUON, '?')} vs {ctx.get('recipes', {}).get(ADAMW, '?')} on "
        f"{ctx.get('data', '?')} data, {ctx.get('iters', '?')} steps of {ctx.get('gbs', '?')} x "
        f"{ctx.get('seq_length', '?')} tokens, seeds {ctx.get('seeds', [])}"
        + (f" (CPU-sized defaults `{' '.join(ctx['defaults'])}`" if ctx.get("defaults") else "")
        + (f", then your overrides `{' '.join(ctx['overrides'])}`" if ctx.get("overrides") else "")
        + (")" if ctx.get("defaults") else "")
        + f". Target loss {result.target:.4f} ({result.target_rule}){floor}; loss smoothed by a trailing mean over "
        f"{result.window} steps. Time = sum of step times up to the step that reaches the target (forward, backward, "
        "optimizer and Newton-Schulz; start-up excluded). A run that never reaches the target is reported as not "
        "reached, never extrapolated. Medians [min-max] over the seeds that reached. Method: docs/results.md.",
        "",
    ]
    cells = [
        [
            summary.optimizer,
            f"{summary.reached}/{summary.runs}",
            _range(summary.tokens, 4),
            _range(summary.seconds),
            _range(summary.step_time_s),
            _range(summary.ns_share.scaled(100), 3, " %") if summary.ns_share else "-",
        ]
        for summary in (adamw, muon)
    ]
    paired_tokens = result.paired_tokens_ratio
    paired_seconds = result.paired_seconds_ratio
    cells.append(
        [
            "Muon/AdamW",
            "",
            f"{_ratio(result.tokens_ratio)} (per seed {_range(paired_tokens) if paired_tokens else '-'})",
            f"{_ratio(result.seconds_ratio)} (per seed {_range(paired_seconds) if paired_seconds else '-'})",
            _ratio(result.step_time_ratio),
            "",
        ]
    )
    out += markdown_table(
        [
            "optimizer",
            "reached",
            "tokens to target",
            "seconds to target",
            "seconds per step",
            "Newton-Schulz share of step",
        ],
        cells,
    )
    runs = []
    for r in sorted(result.seeds, key=lambda r: (r.seed, r.optimizer)):
        final = f"{r.final_loss:.4f}" if r.final_loss is not None else "-"
        reached = [r.step, f"{r.tokens:,.0f}", f"{r.seconds:.2f}"] if r.reached else [NOT_REACHED, "-", "-"]
        runs.append([r.run_id, r.optimizer, r.seed, r.steps, final, *reached])
    out += [
        "",
        "## Runs",
        "",
        *markdown_table(
            ["run", "optimizer", "seed", "steps", "final loss (smoothed)", "step reached", "tokens", "seconds"], runs
        ),
    ]
    if ctx.get("reused"):
        out += ["", f"Analysed again from the runs of `{ctx['reused']}` (no training in this invocation)."]
    out += _provenance(ctx.get("provenance") or {})
    commands = ctx.get("commands") or {}
    if any(commands.values()):
        out += ["", "Commands: " + "; ".join(f"`{c}`" for c in dict.fromkeys(commands.values()) if c)]
    if plot:
        out += ["", f"![loss curves]({plot})"]
    return "\n".join(out) + "\n"


CSV_FIELDS = [
    "model",
    "optimizer",
    "seed",
    "run_id",
    "steps",
    "final_loss_smoothed",
    "reached",
    "step_to_target",
    "tokens_to_target",
    "seconds_to_target",
    "step_time_s_median",
    "ns_share_median",
    "target",
    "target_rule",
    "window",
]


def render_compare_csv(result: CompareResult) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in result.seeds:
        writer.writerow(
            {
                "model": result.model,
                "optimizer": r.optimizer,
                "seed": r.seed,
                "run_id": r.run_id,
                "steps": r.steps,
                "final_loss_smoothed": r.final_loss,
                "reached": r.reached,
                "step_to_target": r.step if r.reached else "",
                "tokens_to_target": r.tokens if r.reached else "",
                "seconds_to_target": r.seconds if r.reached else "",
                "step_time_s_median": r.step_time_s if r.step_time_s is not None else "",
                "ns_share_median": r.ns_share if r.ns_share is not None else "",
                "target": result.target,
                "target_rule": result.target_rule,
                "window": result.window,
            }
        )
    return buffer.getvalue()


def write_compare(result: CompareResult, runs: list[MeasuredRun], results_dir: str | Path = "results") -> list[Path]:
    """compare.md, compare.json, compare.csv and plots/compare_<model>_loss.png under ``results_dir``."""
    results = claim(results_dir, "results_dir", "results")
    plot_path = results / "plots" / f"compare_{result.model}_loss.png"
    labels = [f"{run.optimizer}" for run in runs]
    title = (
        f"{result.model}: training loss per step, {len(runs)} runs (one line per seed); "
        f"the target (dashed) is met by the {result.window}-step trailing mean"
    )
    plot_loss(runs, plot_path, title, result.target, labels)
    relative = str(plot_path.relative_to(results))
    return [
        atomic_write_text(results / "compare.md", render_compare_markdown(result, relative)),
        atomic_write_text(results / "compare.json", dumps_strict(asdict(result), indent=2) + "\n"),
        atomic_write_text(results / "compare.csv", render_compare_csv(result)),
        plot_path,
    ]
