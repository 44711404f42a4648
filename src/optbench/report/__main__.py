"""``python -m optbench.report table|compare``: the entry point behind ``make table`` and ``make compare``.

  table    [--results-dir D] [--warmup N] [--log FILE ...]
           write results/throughput.md, .csv and plots from the published rows and every measured run
  study    [--size cpu|gpu] [hydra overrides ...]
           learning-rate sweeps of AdamW and Muon (two scales) on real text, winners re-run on held-out
           seeds; write results/study.{md,json} and a plot
  compare  [--model M] [--seeds 3|1,2,3] [--target auto|4.5] [--iters N] [--window N]
           [--muon-recipe R] [--adamw-recipe R] [--reuse compare-<model>-<time>] [hydra overrides ...]
           train a Muon recipe and its AdamW twin per seed on this machine, write results/compare.{md,json,csv}

With ``--from-make`` the options come from the environment the Makefile exports (OPTBENCH_TABLE_* /
OPTBENCH_COMPARE_*) and the Hydra overrides from the words typed after ``make compare``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from optbench.errors import UserError, exit_on_user_error

TABLE_ENV = {"warmup": "OPTBENCH_TABLE_WARMUP", "logs": "OPTBENCH_TABLE_LOGS", "results_dir": "OPTBENCH_RESULTS_DIR"}
COMPARE_ENV = {
    "model": "OPTBENCH_COMPARE_MODEL",
    "seeds": "OPTBENCH_COMPARE_SEEDS",
    "target": "OPTBENCH_COMPARE_TARGET",
    "iters": "OPTBENCH_COMPARE_ITERS",
    "window": "OPTBENCH_COMPARE_WINDOW",
    "muon_recipe": "OPTBENCH_COMPARE_MUON_RECIPE",
    "adamw_recipe": "OPTBENCH_COMPARE_ADAMW_RECIPE",
    "reuse": "OPTBENCH_COMPARE_REUSE",
}


def _from_env(args: argparse.Namespace, names: dict[str, str]) -> None:
    for attribute, variable in names.items():
        value = os.environ.get(variable, "").strip()
        if value:
            setattr(args, attribute, value.split() if attribute == "logs" else value)


def _make_overrides() -> list[str]:
    # make targets run from the repository root, where the launch package lives beside src/
    from launch.make_args import overrides_from_make

    return overrides_from_make()


def cmd_table(args: argparse.Namespace) -> int:
    from optbench.report.throughput import write_throughput

    if args.from_make:
        _from_env(args, TABLE_ENV)
        if _make_overrides():
            raise UserError("make table takes no Hydra overrides; use WARMUP=<steps> and LOGS=<files>", "table")
    text = str(args.warmup).strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 10):
        raise UserError(f"{text[:20]!r} is not a whole number of steps from 0 to 1,000,000,000", "WARMUP")
    warmup = int(text)
    if warmup > 1_000_000_000:
        raise UserError(f"must be at most 1,000,000,000 steps, got {warmup:,}", "WARMUP")
    started = time.perf_counter()
    out = write_throughput(args.results_dir, warmup, args.logs)
    measured = len(out.table.runs)
    for folder, reason in out.skipped:
        print(f"skipped {folder}: {' '.join(reason.split())}")
    print(f"wrote {out.markdown} and {out.csv} ({len(out.table.rows)} rows, {measured} measured run(s)) "
          f"and {len(out.plots)} plot(s) in {time.perf_counter() - started:.1f} s")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from optbench.report.compare import verdict
    from optbench.report.compare_format import write_compare
    from optbench.report.compare_run import run_compare, spec_from_words

    overrides = list(args.overrides)
    if args.from_make:
        _from_env(args, COMPARE_ENV)
        overrides = _make_overrides()
    spec = spec_from_words(args.model, args.seeds, args.target, args.iters, args.window, overrides,
                           args.muon_recipe, args.adamw_recipe, args.results_dir, args.reuse)
    started = time.perf_counter()
    result, runs = run_compare(spec)
    paths = write_compare(result, runs, args.results_dir)
    print(verdict(result))
    print(f"wrote {', '.join(str(p) for p in paths)} ({len(runs)} runs in {time.perf_counter() - started:.0f} s)")
    return 0


STUDY_ENV = {"size": "OPTBENCH_STUDY_SIZE"}


def cmd_study(args: argparse.Namespace) -> int:
    import shlex

    from optbench.report.study import run_study
    from optbench.report.study_format import write_study
    from optbench.report.study_plan import StudySpec

    overrides = list(args.overrides)
    if args.from_make:
        _from_env(args, STUDY_ENV)
        overrides = _make_overrides()
    spec = StudySpec(size=args.size, results_dir=args.results_dir, overrides=tuple(overrides))
    study = run_study(spec)
    command = shlex.join(["make", "study", *([f"SIZE={args.size}"] if args.size != "cpu" else []), *overrides])
    for path in write_study(study, args.results_dir, command):
        print(f"wrote {path}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m optbench.report", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    table = sub.add_parser("table", help="write results/throughput.{md,csv} and plots")
    table.add_argument("--from-make", action="store_true", help="read options from make's environment")
    table.add_argument("--results-dir", default=os.environ.get(TABLE_ENV["results_dir"]) or "results")
    table.add_argument("--warmup", default=None, help="steps skipped at the start of every run segment")
    table.add_argument("--log", dest="logs", action="append", default=[], help="a raw Megatron Bridge log (repeatable)")
    table.set_defaults(func=cmd_table)
    study = sub.add_parser("study", help="Muon vs AdamW with tuned learning rates on real text")
    study.add_argument("--from-make", action="store_true", help="read options from make's environment")
    study.add_argument("--results-dir", default=os.environ.get(TABLE_ENV["results_dir"]) or "results")
    study.add_argument("--size", default="cpu", help="cpu (what fits a laptop) or gpu (a larger proxy for one GPU)")
    study.add_argument("overrides", nargs="*", help="Hydra overrides for every run")
    study.set_defaults(func=cmd_study)
    compare = sub.add_parser("compare", help="time-to-target of a Muon recipe and its AdamW twin")
    compare.add_argument("--from-make", action="store_true", help="read options from make's environment")
    compare.add_argument("--results-dir", default=os.environ.get(TABLE_ENV["results_dir"]) or "results")
    compare.add_argument("--model", default="kimi_k2_tiny", help="pair <model>_muon / <model>_adamw")
    compare.add_argument("--seeds", default="3", help="a count (3 = seeds 1,2,3) or a list (1,2,3)")
    compare.add_argument("--target", default="auto", help="target loss, or auto")
    compare.add_argument("--iters", default="", help="train.iters of every run (default 30, the CPU default)")
    compare.add_argument("--window", default="5", help="steps in the trailing mean that smooths the loss")
    compare.add_argument("--muon-recipe", default="", help="explicit Muon recipe")
    compare.add_argument("--adamw-recipe", default="", help="explicit AdamW recipe")
    compare.add_argument("--reuse", default="", help="analyse the runs of an earlier comparison (compare-<model>-<time>) again")
    compare.add_argument("overrides", nargs="*", help="Hydra overrides for both recipes")
    compare.set_defaults(func=cmd_compare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "table" and args.warmup is None:
        from optbench.report.throughput import DEFAULT_WARMUP

        args.warmup = str(DEFAULT_WARMUP)
    debug = any(o.replace(" ", "") in ("debug=true", "debug=True") for o in getattr(args, "overrides", []))
    with exit_on_user_error(debug):
        from optbench.outputs import check_output

        check_output(str(args.results_dir), "results_dir", "results")  # before any run or table is computed
        return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
