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
PLAN_COMPARE_ENV = "OPTBENCH_PLAN_COMPARE"
"""make plan's and pretrain's COMPARE: the matrix optimizers to project beside a matrix-optimizer run's AdamW twin."""
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


MAKE_GOALS_ENV = "OPTBENCH_MAKE_GOALS"
"""The targets typed after ``make`` (the Makefile exports ``$(MAKECMDGOALS)``)."""
MAKE_VARIABLES = {
    "plan": ("RECIPE", "CHECK", "COMPARE"),
    "pretrain": ("RECIPE", "CHECK", "COMPARE"),
    "sweep": ("RECIPE", "CHECK"),
    "search": ("RECIPE", "CHECK", "FIX", "HBM"),
    "data": ("INPUT", "OUT", "TOKENIZER", "VOCAB"),
    "table": ("WARMUP", "LOGS"),
    "search-ranks": ("MODELS",),
    "study": ("SIZE",),
    "compare": ("MODEL", "SEEDS", "TARGET", "ITERS", "WINDOW", "MUON_RECIPE", "ADAMW_RECIPE", "REUSE"),
    "bench": (),
    "bench-gpu": (),
    "projection": (),
}
"""The upper-case variables each target reads (the Makefile's ``typed`` options and RECIPE)."""
MAKE_OWN = ("PYTHON", "PY", "CONTAINER_PYTHON")
"""Variables that configure make itself (which interpreter runs the target), accepted by every target."""
NVIDIA_NAMES = {
    "TP": "parallel.tp",
    "PP": "parallel.pp",
    "VP": "parallel.vpp",
    "VPP": "parallel.vpp",
    "CP": "parallel.cp",
    "EP": "parallel.ep",
    "ETP": "parallel.etp",
    "MBS": "train.mbs",
    "GBS": "train.gbs",
}
"""NVIDIA's performance scripts' layout variables and the Hydra key that sets each here."""


MAKE_INHERITED = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
"""What an enclosing make hands down to every make started under it (``make bench``'s runs, ``make test
PYTEST_ADDOPTS=...``'s tests): its own command-line variables, which the inner make would read as typed by the user."""


def environment_for_make(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without what an enclosing make hands down, plus ``extra``: for starting a make."""
    return {**{k: v for k, v in os.environ.items() if k not in MAKE_INHERITED}, **(extra or {})}


def check_make_variables(environ: Mapping[str, str] | None = None) -> None:
    """Refuse, in one line, an upper-case ``NAME=value`` typed after ``make <target>`` that the target does not read:
    make would take it as its own variable and the run would silently ignore it (``EP=32``, ``RECIPIE=...``)."""
    import difflib

    from optbench.common.errors import Problem, UserError
    from optbench.common.redact import clipped

    environ = os.environ if environ is None else environ
    goals = [g for g in environ.get(MAKE_GOALS_ENV, "").split() if g in MAKE_VARIABLES]
    if not goals:
        return
    known = {*MAKE_OWN, *(name for goal in goals for name in MAKE_VARIABLES[goal])}
    for word in reversed(split_make_words(environ.get(MAKE_OVERRIDES_ENV, ""))):
        name = word.split("=", 1)[0]
        if not is_make_variable(word) or name in known:
            continue
        if name in NVIDIA_NAMES:
            fix = f"this project's key is {NVIDIA_NAMES[name]} (type {NVIDIA_NAMES[name]}={clipped(word.split('=', 1)[1], 20)})"
        else:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            options = ", ".join(f"{n}=" for n in MAKE_VARIABLES[goals[0]]) or "none"
            fix = (
                f"did you mean {close[0]}? " if close else ""
            ) + f"make {goals[0]} reads {options}; settings of the run are lower-case Hydra keys (make help)"
        raise UserError(
            Problem(name, f"is not a variable of make {goals[0]}, so make would ignore it; {fix}; nothing was run")
        )


def refuse_overrides(target: str, options: str) -> None:
    """``make <target>`` takes upper-case options only: a lower-case key=value word would be silently ignored."""
    from optbench.common.errors import Problem, UserError
    from optbench.common.redact import clipped

    check_make_variables()
    stray = overrides_from_make()
    if stray:
        raise UserError(
            Problem(target, f"make {target} takes no Hydra overrides (got {clipped(stray[0], 60)!r}); {options}")
        )


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
