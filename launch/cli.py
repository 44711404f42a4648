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

Overrides are Hydra's (``parallel.pp=8``, ``cluster=h100``, ``debug=true``). With ``--from-make``
the recipe and overrides come from the environment the Makefile exports (see make_args).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence

from optbench.common.make_args import (
    PLAN_CHECK_ENV,
    PLAN_COMPARE_ENV,
    SEARCH_FIX_ENV,
    SEARCH_HBM_ENV,
    check_make_variables,
    overrides_from_make,
    recipe_from_make,
)
from optbench.compose.recipe import list_recipes
from optbench.config.optimizers import MATRIX_OPTIMIZERS
from optbench.config.overrides import check_repeated, split_override, typed_keys
from optbench.common.errors import EXIT_USER_ERROR, UserError
from optbench.common.exits import exit_on_user_error
from optbench.metrics.summary import COMMAND_ENV
from optbench.common.redact import recorded_overrides, remember_typed_secrets


def wants_debug(overrides: Sequence[str]) -> bool:
    """debug=true must be known before composing, so that composition errors keep their traceback."""
    return any(key == "debug" and value.strip().lower() == "true" for key, value in map(split_override, overrides))


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
        check=wanted_check(_option(args, "check", PLAN_CHECK_ENV)),
        compare=compared_optimizers(_option(args, "compare", PLAN_COMPARE_ENV)),
    )
    return 0


def cmd_pretrain(args: argparse.Namespace) -> int:
    from launch.bridge_check import wanted_check
    from launch.dispatch import pretrain
    from optbench.plan import compared_optimizers

    return pretrain(
        args.recipe,
        args.overrides,
        check=wanted_check(_option(args, "check", PLAN_CHECK_ENV)),
        compare=compared_optimizers(_option(args, "compare", PLAN_COMPARE_ENV)),
    )


def cmd_search(args: argparse.Namespace) -> int:
    from launch.bridge_check import wanted_check
    from launch.search import run_search

    return run_search(
        args.recipe,
        args.overrides,
        _option(args, "fix", SEARCH_FIX_ENV),
        _option(args, "hbm", SEARCH_HBM_ENV),
        check=wanted_check(_option(args, "check", PLAN_CHECK_ENV)),
    )


def _option(args: argparse.Namespace, name: str, make_env: str) -> str:
    """An option of the command: as given (--fix ep), else as typed after make (FIX=ep, exported as make_env)."""
    given = getattr(args, name)
    if given is not None:
        return given
    return os.environ.get(make_env, "") if args.from_make else ""


def cmd_sweep(args: argparse.Namespace) -> int:
    from launch.bridge_check import wanted_check
    from launch.sweep import sweep

    return sweep(args.recipe, args.overrides, check=wanted_check(_option(args, "check", PLAN_CHECK_ENV)))


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
        command.add_argument("--from-make", action="store_true", help="read RECIPE and overrides from make")
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


def typed_command(command: str, recipe: str, overrides: Sequence[str], from_make: bool) -> str:
    """How the user launched this, for a run's provenance (secret values hidden)."""
    words = [*recorded_overrides(overrides)]
    if from_make:
        return shlex.join(["make", command, f"RECIPE={recipe}", *words])
    return shlex.join(["python", "-m", "launch", command, recipe, *words])


def main(argv: Sequence[str] | None = None) -> int:
    args, unknown = _parser().parse_known_args(argv)
    if unknown:  # e.g. --foo: not an option of ours; Hydra reports it as an override it cannot read
        if not hasattr(args, "overrides"):
            _parser().error(f"unrecognized arguments: {' '.join(unknown)}")
        args.overrides = [*args.overrides, *unknown]
    if getattr(args, "from_make", False):
        if args.recipe:
            args.overrides = [args.recipe, *args.overrides]
        args.recipe = recipe_from_make()
        args.overrides = [*overrides_from_make(), *args.overrides]
    if hasattr(args, "recipe") and not args.recipe:
        print("error: RECIPE: name a recipe; `python -m optbench recipes` lists them", file=sys.stderr)
        return 2
    if hasattr(args, "recipe"):
        os.environ.setdefault(COMMAND_ENV, typed_command(args.command, args.recipe, args.overrides, args.from_make))
    overrides = getattr(args, "overrides", [])
    with exit_on_user_error(debug=wants_debug(overrides), typed=typed_keys(overrides)):
        if getattr(args, "from_make", False):
            check_make_variables()
        remember_typed_secrets(overrides)
        repeated = list(check_repeated(overrides))
        if repeated:
            raise UserError(repeated)
        return args.func(args)
