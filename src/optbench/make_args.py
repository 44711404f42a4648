"""Recover the Hydra overrides a user typed after ``make <target>``.

GNU Make treats every ``key=value`` word on its command line as a variable assignment and
lists them in ``$(MAKEOVERRIDES)``, newest first, with spaces and backslashes escaped by a
backslash and every ``$`` doubled (``$$``, so that a sub-make would not expand it). The Makefile exports that text (and RECIPE) in the environment, so no shell ever
parses the values; this module splits it back into the override strings, in the order typed.
Upper-case names are Make's own variables (RECIPE, PYTHON, ...) and are not overrides.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

MAKE_OVERRIDES_ENV = "OPTBENCH_MAKE_OVERRIDES"
MAKE_RECIPE_ENV = "OPTBENCH_RECIPE"
SEARCH_FIX_ENV = "OPTBENCH_SEARCH_FIX"
"""make search's FIX: the search dimensions held at the recipe's values."""
SEARCH_HBM_ENV = "OPTBENCH_SEARCH_HBM"
"""make search's HBM: the largest share of the GPU's memory a kept layout's estimate may take."""
PLAN_CHECK_ENV = "OPTBENCH_CHECK"
"""make plan's, pretrain's and sweep's CHECK: bridge builds the plan (each point's) with its container's real Megatron
Bridge first."""
RESULTS_DIR_ENV = "OPTBENCH_RESULTS_DIR"
"""Where make table, compare and study write (default results/)."""


def split_make_words(text: str) -> list[str]:
    """Split Make's escaped word list: ``\\x`` is a literal x, an unescaped space separates words."""
    words, current, escaped = [], [], False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == " ":
            if current:
                words.append("".join(current))
            current = []
        else:
            current.append(char)
    if current:
        words.append("".join(current))
    return [word.replace("$$", "$") for word in words]


def is_make_variable(word: str) -> bool:
    """Upper-case assignments (RECIPE=..., PYTHON=...) configure Make, not the run."""
    name = word.split("=", 1)[0].lstrip("+~")
    return name.isupper()


def overrides_from_make(environ: Mapping[str, str] | None = None) -> list[str]:
    """The Hydra overrides from ``make <target> key=value ...``, in the order they were typed."""
    environ = os.environ if environ is None else environ
    words = split_make_words(environ.get(MAKE_OVERRIDES_ENV, ""))
    return [w for w in reversed(words) if not is_make_variable(w)]


def refuse_overrides(target: str, options: str) -> None:
    """``make <target>`` takes upper-case options only: a lower-case key=value word would be silently ignored."""
    from optbench.errors import Problem, UserError

    stray = overrides_from_make()
    if stray:
        raise UserError(Problem(target, f"make {target} takes no Hydra overrides (got {stray[0][:60]!r}); {options}"))


def recipe_from_make(environ: Mapping[str, str] | None = None) -> str | None:
    environ = os.environ if environ is None else environ
    return environ.get(MAKE_RECIPE_ENV) or None


def options_from_env(args: argparse.Namespace, names: Mapping[str, str]) -> None:
    """Set each option of ``args`` that its make variable (exported by the Makefile) gives; LOGS is a list."""
    for attribute, variable in names.items():
        value = os.environ.get(variable, "").strip()
        if value:
            setattr(args, attribute, value.split() if attribute == "logs" else value)


def add_results_options(parser: argparse.ArgumentParser) -> None:
    """--from-make and --results-dir, as every results command (table, compare, study) takes them."""
    parser.add_argument("--from-make", action="store_true", help="read options from make's environment")
    parser.add_argument("--results-dir", default=os.environ.get(RESULTS_DIR_ENV) or "results")
