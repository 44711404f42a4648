"""``python -m optbench table``: the entry point behind ``make table``.

  table    [--results-dir D] [--warmup N] [--log FILE ...]
           write results/throughput.md, .csv and plots from the published rows and every measured run

``make compare`` and ``make study`` train: they are :mod:`optbench.experiments.cli`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from optbench.common.errors import UserError
from optbench.common.redact import clipped
from optbench.common.outputs import run_in_results_dir
from optbench.common.make_args import add_results_options


def cmd_table(args: argparse.Namespace) -> int:
    from optbench.report.throughput import write_throughput

    text = str(args.warmup).strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 10):
        raise UserError(f"{clipped(text, 20)!r} is not a whole number of steps from 0 to 1,000,000,000", "WARMUP")
    warmup = int(text)
    if warmup > 1_000_000_000:
        raise UserError(f"must be at most 1,000,000,000 steps, got {warmup:,}", "WARMUP")
    started = time.perf_counter()
    out = write_throughput(args.results_dir, warmup, args.logs, say=lambda line: print(line, flush=True))
    measured = len(out.table.runs)
    from optbench.report.table_format import skipped_groups

    for folders, reason in skipped_groups(out.skipped):  # a study's 66 runs keep curves, no step records: one line
        shown = folders[0] if len(folders) == 1 else f"{len(folders)} folders, {folders[0]} to {folders[-1]}"
        print(f"skipped {shown}: {' '.join(reason.split())}")
    print(
        f"wrote {out.markdown} and {out.csv} ({len(out.table.rows)} rows, {measured} measured run(s)) "
        f"and {len(out.plots)} plot(s) in {time.perf_counter() - started:.1f} s"
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m optbench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    table = sub.add_parser("table", help="write results/throughput.{md,csv} and plots")
    add_results_options(table)
    table.add_argument("--warmup", default=None, help="steps skipped at the start of every run segment")
    table.add_argument("--log", dest="logs", action="append", default=[], help="a raw Megatron Bridge log (repeatable)")
    table.set_defaults(func=cmd_table)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "table" and args.warmup is None:
        from optbench.report.throughput import DEFAULT_WARMUP

        args.warmup = str(DEFAULT_WARMUP)
    return run_in_results_dir(args)
