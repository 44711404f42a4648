"""``python -m optbench table [--results-dir D] [--warmup N] [--log FILE ...]``: the entry point behind ``make table``.

It writes results/throughput.md, .csv and plots from the published rows and every measured run.

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


def main(argv: Sequence[str] | None = None) -> int:
    from optbench.report.throughput import DEFAULT_WARMUP

    parser = argparse.ArgumentParser(prog="python -m optbench table", description=__doc__.split("\n\n")[1])
    add_results_options(parser)
    parser.add_argument("--warmup", default=str(DEFAULT_WARMUP), help="steps skipped at the start of every run segment")
    parser.add_argument(
        "--log", dest="logs", action="append", default=[], help="a raw Megatron Bridge log (repeatable)"
    )
    parser.set_defaults(func=cmd_table)
    return run_in_results_dir(parser.parse_args(argv))
