"""``python -m optbench <command> [its flags]``: one command surface; every make target that runs optbench is an alias
of one command (``make plan`` runs ``python -m optbench plan --from-make``).

Each command is the entry point of the stage that owns it; ``python -m optbench <command> --help`` prints its flags.
The stage keeps its own options, ``--from-make`` (options read from the environment the Makefile exports) and
its one-line refusals with exit code 2. An unknown command is refused here the same way.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """One command: the module whose ``main(argv)`` runs it, and the words put before the user's."""

    module: str
    words: tuple[str, ...]
    about: str


COMMANDS: dict[str, Command] = {
    "recipes": Command("launch.cli", ("recipes",), "list the recipes, one line each"),
    "plan": Command("launch.cli", ("plan",), "validate a recipe with overrides and write its plan"),
    "pretrain": Command("launch.cli", ("pretrain",), "validate, plan and launch a recipe (local or Slurm)"),
    "sweep": Command("launch.cli", ("sweep",), "plan and rank every point of a sweep; launch the valid ones"),
    "search": Command("launch.cli", ("search",), "every valid layout of a recipe's model, projected and ranked"),
    "search-ranks": Command("optbench.report.search_ranks", (), "where NVIDIA's own layout ranks in search"),
    "projection": Command("optbench.report.validation_report", (), "the projection against every published row"),
    "docs-projection": Command(
        "optbench.report.validation_report", ("--update-docs",), "maintainers: projection, then the docs' blocks"
    ),
    "table": Command("optbench.report.__main__", ("table",), "published rows beside measured runs, with plots"),
    "compare": Command("optbench.experiments.__main__", ("compare",), "Muon vs AdamW time to a target loss"),
    "study": Command("optbench.experiments.__main__", ("study",), "each optimizer's learning rate swept, on real text"),
    "data": Command("optbench.corpus.__main__", (), "build Megatron .bin/.idx datasets"),
    "bench": Command("optbench.bench.__main__", (), "benchmarks into results/bench/"),
    "bench-gpu": Command("optbench.bench.__main__", ("--gpu-only",), "only the benchmarks' GPU sections"),
    "gpu-smoke": Command(
        "optbench.experiments.one_gpu.__main__", (), "on a GPU: the real Megatron Bridge + Core train a proxy"
    ),
}
"""Every command, in the order ``--help`` lists them; tests/test_cli.py holds the Makefile's targets to it."""


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {command.about}" for name, command in COMMANDS.items()]
    return "\n".join(
        ["usage: python -m optbench <command> [its flags]   (python -m optbench <command> --help)", "", *lines]
    )


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if not words or words[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    command = COMMANDS.get(words[0])
    if command is None:
        print(f"error: command: '{words[0]}' is not a command; use one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return int(importlib.import_module(command.module).main([*command.words, *words[1:]]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
