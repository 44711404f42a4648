"""``python -m optbench study|compare``: the entry point behind ``make study`` and ``make compare``.

study    [--size cpu|gpu] [hydra overrides ...]
         learning-rate sweeps of AdamW and Muon (two scales) on real text, winners re-run on held-out
         seeds; write results/study.{md,json} and a plot
compare  [--model M] [--seeds 3|1,2,3] [--target auto|4.5] [--iters N] [--window N]
         [--muon-recipe R] [--adamw-recipe R] [--reuse compare-<model>-<time>] [hydra overrides ...]
         train a Muon recipe and its AdamW twin per seed on this machine, write results/compare.{md,json,csv}

"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from optbench.common.outputs import run_in_results_dir
from optbench.common.make_args import add_results_options


def cmd_compare(args: argparse.Namespace) -> int:
    from optbench.experiments.compare import verdict
    from optbench.experiments.compare_format import write_compare
    from optbench.experiments.compare_run import run_compare, spec_from_words

    overrides = list(args.overrides)
    spec = spec_from_words(
        args.model,
        args.seeds,
        args.target,
        args.iters,
        args.window,
        overrides,
        args.muon_recipe,
        args.adamw_recipe,
        args.results_dir,
        args.reuse,
    )
    started = time.perf_counter()
    result, runs = run_compare(spec)
    paths = write_compare(result, runs, args.results_dir)
    print(verdict(result))
    print(f"wrote {', '.join(str(p) for p in paths)} ({len(runs)} runs in {time.perf_counter() - started:.0f} s)")
    return 0


def cmd_study(args: argparse.Namespace) -> int:
    import shlex

    from optbench.experiments.study import run_study
    from optbench.experiments.study_format import write_study
    from optbench.experiments.study_plan import StudySpec

    overrides = list(args.overrides)
    spec = StudySpec(size=args.size, results_dir=args.results_dir, overrides=tuple(overrides))
    study = run_study(spec)
    command = shlex.join(["make", "study", *([f"SIZE={args.size}"] if args.size != "cpu" else []), *overrides])
    from pathlib import Path

    from optbench.common.checkout import repo_root

    own = Path(args.results_dir).resolve() == (repo_root() / "results").resolve()  # only the repository's study
    for path in write_study(
        study, args.results_dir, command, docs=repo_root() / "docs" / "results.md" if own else None
    ):
        print(f"wrote {path}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m optbench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    study = sub.add_parser("study", help="every matrix optimizer vs AdamW with tuned learning rates on real text")
    add_results_options(study)
    study.add_argument("--size", default="cpu", help="cpu (what fits a laptop) or gpu (a larger proxy for one GPU)")
    study.add_argument("overrides", nargs="*", help="Hydra overrides for every run")
    study.set_defaults(func=cmd_study)
    compare = sub.add_parser("compare", help="time-to-target of a Muon recipe and its AdamW twin")
    add_results_options(compare)
    compare.add_argument("--model", default="kimi_k2_tiny", help="pair <model>_muon / <model>_adamw")
    compare.add_argument("--seeds", default="3", help="a count (3 = seeds 1,2,3) or a list (1,2,3)")
    compare.add_argument("--target", default="auto", help="target loss, or auto")
    compare.add_argument("--iters", default="", help="train.iters of every run (default 30, the CPU default)")
    compare.add_argument("--window", default="5", help="steps in the trailing mean that smooths the loss")
    compare.add_argument("--muon-recipe", default="", help="explicit Muon recipe")
    compare.add_argument("--adamw-recipe", default="", help="explicit AdamW recipe")
    compare.add_argument(
        "--reuse", default="", help="analyse the runs of an earlier comparison (compare-<model>-<time>) again"
    )
    compare.add_argument("overrides", nargs="*", help="Hydra overrides for both recipes")
    compare.set_defaults(func=cmd_compare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_in_results_dir(_parser().parse_args(argv))
