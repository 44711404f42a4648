"""``python -m optbench <command> <recipe> [overrides...]`` for plan, pretrain, sweep, search and recipes (``python -m
launch`` runs the same): the launcher's commands behind their make targets.

Commands:
  recipes                      list the recipes
  plan <recipe> [overrides] [--check bridge]  compose, validate, write results/plans/<recipe>/plan.json, print it
                               (--check bridge: then build it with its container's real Megatron Bridge and Core
                               on this CPU, as the job would, up to Bridge's runtime_config_update)
  pretrain <recipe> [overrides] [--check bridge]  the same, then launch (engine and executor from the config)
  search <recipe> [overrides] [--fix ep,mbs] [--hbm 0.9] [--check bridge]  every valid layout at the recipe's GPU
                               count, projected and ranked (--fix: dimensions held at the recipe's values; --hbm: the
                               largest share of HBM a kept layout's memory estimate may take; --check bridge: the ten
                               best, each planned as make plan plans it, through the container's real Bridge)
  sweep <recipe> [overrides] [--check bridge]  expand Hydra sweep overrides (parallel.ep=32,64), validate every
                               point, plan the valid ones and render or submit them as one NeMo-Run experiment
                               (--check bridge: each valid point's plan through its container's real Bridge first,
                               one process per container; a point Bridge refuses is listed invalid)

Overrides are Hydra's (``parallel.pp=8``, ``cluster=h100``, ``debug=true``). ``make plan`` and the other targets
reach these commands through the dispatcher (:mod:`optbench.__main__`), which turns make's command line into these
words and owns the one-line refusal.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from optbench.compose.recipe import list_recipes
from optbench.config.optimizers import MATRIX_OPTIMIZERS
from optbench.config.overrides import check_repeated
from optbench.common.errors import EXIT_USER_ERROR, UserError
from optbench.common.redact import remember_typed_secrets


def cmd_recipes(_: argparse.Namespace) -> int:
    from optbench.compose.recipe import recipe_description

    names = list_recipes()
    width = max(map(len, names), default=0)
    for name in names:
        print(f"{name:<{width}}  {recipe_description(name) or '-'}".rstrip())
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from launch.bridge_check import wanted_check
    from launch.dispatch import compose_and_plan
    from optbench.plan import compared_optimizers

    compose_and_plan(
        args.recipe,
        args.overrides,
        check=wanted_check(args.check or ""),
        compare=compared_optimizers(args.compare or ""),
    )
    return 0


def cmd_pretrain(args: argparse.Namespace) -> int:
    from launch.bridge_check import wanted_check
    from launch.dispatch import pretrain
    from optbench.plan import compared_optimizers

    return pretrain(
        args.recipe,
        args.overrides,
        check=wanted_check(args.check or ""),
        compare=compared_optimizers(args.compare or ""),
    )


def cmd_search(args: argparse.Namespace) -> int:
    from launch.bridge_check import wanted_check
    from launch.search import run_search

    return run_search(
        args.recipe,
        args.overrides,
        args.fix or "",
        args.hbm or "",
        check=wanted_check(args.check or ""),
    )


def cmd_sweep(args: argparse.Namespace) -> int:
    from launch.bridge_check import wanted_check
    from launch.sweep import sweep

    return sweep(args.recipe, args.overrides, check=wanted_check(args.check or ""))


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one error line (exit 2), not its usage text."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(
            f"error: arguments: {message}; `python -m optbench --help` (or `make help`) lists the commands",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_USER_ERROR)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m optbench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("recipes", help="list the recipes").set_defaults(func=cmd_recipes)
    for name, func, text in (
        ("plan", cmd_plan, "validate a recipe and write its plan"),
        ("pretrain", cmd_pretrain, "validate, plan and launch a recipe"),
        ("sweep", cmd_sweep, "validate and plan every point of a sweep, then render or submit the valid ones"),
        ("search", cmd_search, "every valid layout of the recipe's model at its GPU count, ranked by projection"),
    ):
        command = sub.add_parser(name, help=text)
        command.add_argument("recipe", nargs="?", help="recipe name (file under recipes/)")
        command.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. parallel.pp=8")
        command.set_defaults(func=func)
        if name in ("plan", "pretrain", "sweep", "search"):
            command.add_argument(
                "--check",
                help="bridge: build the plan (each valid point's for a sweep, the ten best "
                "layouts' for a search) with its container's real Megatron Bridge and Core on this CPU "
                "(make bridge-env) before going on (make: CHECK=bridge)",
            )
        if name in ("plan", "pretrain"):
            command.add_argument(
                "--compare",
                help=f"comma-separated matrix optimizers ({', '.join(MATRIX_OPTIMIZERS)}) "
                "to project beside a matrix-optimizer run's AdamW twin, each as its recipe configures "
                f"it (make: COMPARE={','.join(MATRIX_OPTIMIZERS[-2:])}; default none)",
            )
        if name == "search":
            command.add_argument(
                "--fix",
                help="comma-separated dimensions held at the recipe's values "
                "(tp, pp, vpp, cp, ep, mbs; make: FIX=ep,mbs)",
            )
            command.add_argument(
                "--hbm",
                help="the largest share of HBM a kept layout's memory estimate may take, "
                "a fraction up to 1 (make: HBM=0.9; default 1)",
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args, unknown = _parser().parse_known_args(argv)
    if unknown:  # e.g. --foo: not an option of ours; Hydra reports it as an override it cannot read
        if not hasattr(args, "overrides"):
            _parser().error(f"unrecognized arguments: {' '.join(unknown)}")
        args.overrides = [*args.overrides, *unknown]
    if hasattr(args, "recipe") and not args.recipe:
        print("error: RECIPE: name a recipe; `python -m optbench recipes` lists them", file=sys.stderr)
        return 2
    overrides = getattr(args, "overrides", [])
    remember_typed_secrets(overrides)
    repeated = list(check_repeated(overrides))
    if repeated:
        raise UserError(repeated)
    return args.func(args)
