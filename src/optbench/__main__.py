"""``python -m optbench <command> [its flags]``: one command surface; every make target that runs optbench is an alias
of one command (``make plan`` runs ``python -m optbench plan --from-make``).

Each command is the entry point of the stage that owns it; ``python -m optbench <command> --help`` prints its flags.
This dispatcher owns what is common to all of them: ``--from-make`` (make's command line turned into the command's
own flags, RECIPE and overrides, :func:`optbench.common.make_args.words_from_make`), the one-line refusal with exit
code 2 (:func:`optbench.common.exits.exit_on_user_error`; a traceback only with ``debug=true`` or ``--debug``), and
the refusal of an unknown command.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

FROM_MAKE = "--from-make"


@dataclass(frozen=True)
class Command:
    """One command: the module whose ``main(argv)`` runs it, and the words put before the user's."""

    module: str
    words: tuple[str, ...]
    about: str
    make: Mapping[str, str] = field(default_factory=dict)
    """The make variables the target reads, each with the command's flag it becomes (``WARMUP`` -> ``--warmup``)."""
    recipe: bool = False
    """It takes a recipe as its first word (make: RECIPE, the Makefile's default when none is typed)."""
    overrides: bool = False
    """It takes Hydra overrides (make: every lower-case key=value word, in the order typed)."""


_RUN = {"recipe": True, "overrides": True}
COMMANDS: dict[str, Command] = {
    "recipes": Command("launch.cli", ("recipes",), "list the recipes, one line each"),
    "plan": Command(
        "launch.cli",
        ("plan",),
        "validate a recipe with overrides and write its plan",
        {"CHECK": "--check", "COMPARE": "--compare"},
        **_RUN,
    ),
    "pretrain": Command(
        "launch.cli",
        ("pretrain",),
        "validate, plan and launch a recipe (local or Slurm)",
        {"CHECK": "--check", "COMPARE": "--compare"},
        **_RUN,
    ),
    "sweep": Command(
        "launch.cli",
        ("sweep",),
        "plan and rank every point of a sweep; launch the valid ones",
        {"CHECK": "--check"},
        **_RUN,
    ),
    "search": Command(
        "launch.cli",
        ("search",),
        "every valid layout of a recipe's model, projected and ranked",
        {"CHECK": "--check", "FIX": "--fix", "HBM": "--hbm"},
        **_RUN,
    ),
    "search-ranks": Command(
        "optbench.report.search_ranks", (), "where NVIDIA's own layout ranks in search", {"MODELS": "--models"}
    ),
    "projection": Command("optbench.report.validation_report", (), "the projection against every published row"),
    "docs-projection": Command(
        "optbench.report.validation_report", ("--update-docs",), "maintainers: projection, then the docs' blocks"
    ),
    "table": Command(
        "optbench.report.cli",
        (),
        "published rows beside measured runs, with plots",
        {"WARMUP": "--warmup", "LOGS": "--log"},
    ),
    "compare": Command(
        "optbench.experiments.cli",
        ("compare",),
        "Muon vs AdamW time to a target loss",
        {
            "MODEL": "--model",
            "SEEDS": "--seeds",
            "TARGET": "--target",
            "ITERS": "--iters",
            "WINDOW": "--window",
            "MUON_RECIPE": "--muon-recipe",
            "ADAMW_RECIPE": "--adamw-recipe",
            "REUSE": "--reuse",
        },
        overrides=True,
    ),
    "study": Command(
        "optbench.experiments.cli",
        ("study",),
        "each optimizer's learning rate swept, on real text",
        {"SIZE": "--size"},
        overrides=True,
    ),
    "data": Command(
        "optbench.corpus.cli",
        (),
        "build Megatron .bin/.idx datasets",
        {"INPUT": "--input", "OUT": "--out", "TOKENIZER": "--tokenizer", "VOCAB": "--vocab"},
    ),
    "bench": Command("optbench.bench.cli", (), "benchmarks into results/bench/"),
    "bench-gpu": Command("optbench.bench.cli", ("--gpu-only",), "only the benchmarks' GPU sections"),
    "gpu-smoke": Command(
        "optbench.experiments.one_gpu.cli", (), "on a GPU: the real Megatron Bridge + Core train a proxy"
    ),
    "term-selection": Command(
        "optbench.report.term_report", (), "maintainers: each step-model term re-decided inside the folds (~8 min)"
    ),
    "projection-tables": Command(
        "optbench.report.projection_tables", (), "maintainers: Muon projected at the published layouts, with a chart"
    ),
    "ns-count": Command("optbench.report.ns_report", (), "maintainers: our Newton-Schulz count beside the blog's"),
    "gpu-smoke-page": Command(
        "optbench.experiments.one_gpu.page", (), "maintainers: results/bench/megatron_one_gpu.md from its JSON"
    ),
}
"""Every command, in the order ``--help`` lists them; tests/test_cli.py holds the Makefile's targets to it (the
maintainers' commands have no make target)."""


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {command.about}" for name, command in COMMANDS.items()]
    return "\n".join(
        ["usage: python -m optbench <command> [its flags]   (python -m optbench <command> --help)", "", *lines]
    )


@contextlib.contextmanager
def _recorded_as(name: str, command: Command, from_make: bool, words: Sequence[str]) -> Iterator[None]:
    """While the command runs, OPTBENCH_COMMAND holds how the user typed it (secret values hidden), as every run,
    plan and benchmark records it: ``make <target> ...`` from make, else ``python -m optbench <command> ...``. A value
    already set (a make that started another) is kept."""
    from optbench.common.make_args import MAKE_RECIPE_ENV, typed_after_make
    from optbench.common.redact import recorded_overrides
    from optbench.metrics.summary import COMMAND_ENV

    if COMMAND_ENV in os.environ:
        yield
        return
    if from_make:
        recipe = [f"RECIPE={os.environ.get(MAKE_RECIPE_ENV, '')}"] if command.recipe else []
        typed = [*recipe, *(w for w in typed_after_make() if not w.startswith("RECIPE="))]
        shown = ["make", name, *recorded_overrides(typed)]
    else:
        shown = ["python", "-m", "optbench", name, *recorded_overrides(words)]
    os.environ[COMMAND_ENV] = shlex.join(shown)
    try:
        yield
    finally:
        os.environ.pop(COMMAND_ENV, None)


def _debug(words: Sequence[str]) -> bool:
    """debug=true (or --debug) must be known before anything runs, so that every error keeps its traceback."""
    from optbench.config.overrides import split_override

    return "--debug" in words or any(
        key == "debug" and value.strip().lower() == "true" for key, value in map(split_override, words)
    )


def main(argv: Sequence[str] | None = None) -> int:
    from optbench.common.exits import exit_on_user_error
    from optbench.config.overrides import typed_keys

    words = list(sys.argv[1:] if argv is None else argv)
    if not words or words[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = words[0], words[1:]
    command = COMMANDS.get(name)
    if command is None:
        print(f"error: command: '{name}' is not a command; use one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    words, from_make = rest, FROM_MAKE in rest
    if from_make:
        from optbench.common.make_args import words_from_make

        with exit_on_user_error(debug=_debug(rest)):
            made = words_from_make(name, command.make, command.recipe, command.overrides)
        words = [*made, *(w for w in rest if w != FROM_MAKE)]
    typed = typed_keys([w for w in words if not w.startswith("-")])
    with exit_on_user_error(debug=_debug(words), typed=typed), _recorded_as(name, command, from_make, words):
        return int(importlib.import_module(command.module).main([*command.words, *words]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
