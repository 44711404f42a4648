"""Recover the words a user typed after ``make <target>``, for the dispatcher (``python -m optbench <command>
--from-make``).

GNU Make treats every ``key=value`` word on its command line as a variable assignment and lists them in
``$(MAKEOVERRIDES)``, newest first, with spaces and backslashes escaped by a backslash and every ``$`` doubled (``$$``,
so that a sub-make would not expand it). The Makefile exports that text (and RECIPE) in the environment, so no shell
ever parses the values; this module splits it back into words, in the order typed. Upper-case names are make's
variables (RECIPE, CHECK, WARMUP, PYTHON, ...): the command's options; lower-case ones are Hydra overrides.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

MAKE_OVERRIDES_ENV = "OPTBENCH_MAKE_OVERRIDES"
MAKE_RECIPE_ENV = "OPTBENCH_RECIPE"
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


LIST_VARIABLES = ("LOGS",)
"""Make variables whose value is a list of words, each given to its flag once (LOGS="a.log b.log")."""


def typed_after_make(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every ``key=value`` word typed after ``make <target>``, in the order typed."""
    environ = os.environ if environ is None else environ
    return list(reversed(split_make_words(environ.get(MAKE_OVERRIDES_ENV, ""))))


def words_from_make(
    target: str,
    variables: Mapping[str, str],
    takes_recipe: bool,
    takes_overrides: bool,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """The command line of ``make <target> ...`` as the command's own words: each upper-case ``NAME=value`` typed
    after make that the target reads becomes its flag (``variables``: NAME -> ``--flag``; an empty value is not
    given; a :data:`LIST_VARIABLES` value gives the flag once per word), then RECIPE (make's default when none was
    typed), then the Hydra overrides in the order typed.

    Make lists only what was typed on its command line in ``$(MAKEOVERRIDES)``, so a MODEL or TARGET left in the
    shell's environment is never read. Refused in one line: an upper-case word the target does not read (make would
    take it as its own variable and the run would silently ignore it: ``EP=32``, ``RECIPIE=...``), and a lower-case
    override for a target that takes none.
    """
    from optbench.common.errors import Problem, UserError
    from optbench.common.redact import clipped

    environ = os.environ if environ is None else environ
    typed = typed_after_make(environ)
    readable = [*(("RECIPE",) if takes_recipe else ()), *variables]
    known = {*MAKE_OWN, *readable}
    flags, overrides = [], []
    for word in typed:
        name, _, value = word.partition("=")
        if not is_make_variable(word):
            overrides.append(word)
        elif name not in known:
            raise UserError(Problem(name, _unknown_variable(target, name, value, sorted(known), readable)))
        elif name in variables:  # '=' keeps a value that starts with '-' a value
            values = value.split() if name in LIST_VARIABLES else [value.strip()] if value.strip() else []
            flags.extend(f"{variables[name]}={v}" for v in values)
    if overrides and not takes_overrides:
        options = ", ".join(f"{n}=" for n in variables) or "no options"
        raise UserError(
            Problem(
                target,
                f"make {target} takes no Hydra overrides (got {clipped(overrides[0], 60)!r}); it reads {options}",
            )
        )
    recipe = [environ.get(MAKE_RECIPE_ENV, "")] if takes_recipe else []
    return [*flags, *recipe, *overrides]


def _unknown_variable(target: str, name: str, value: str, known: list[str], readable: list[str]) -> str:
    import difflib

    from optbench.common.redact import clipped

    if name in NVIDIA_NAMES:
        fix = f"this project's key is {NVIDIA_NAMES[name]} (type {NVIDIA_NAMES[name]}={clipped(value, 20)})"
    else:
        close = difflib.get_close_matches(name, known, n=1)
        options = ", ".join(f"{n}=" for n in readable) or "none"
        fix = (f"did you mean {close[0]}? " if close else "") + (
            f"make {target} reads {options}; settings of the run are lower-case Hydra keys (make help)"
        )
    return f"is not a variable of make {target}, so make would ignore it; {fix}; nothing was run"


def add_results_options(parser: argparse.ArgumentParser) -> None:
    """--results-dir, as every results command (table, compare, study) takes it."""
    parser.add_argument("--results-dir", default=os.environ.get(RESULTS_DIR_ENV) or "results")


def results_parser(command: str, doc: str) -> argparse.ArgumentParser:
    """The parser of a maintainers' report command (``python -m optbench <command>``), with ``--results``: the
    results folder it reads and writes (default: the repository's)."""
    from optbench.common.checkout import repo_root

    parser = argparse.ArgumentParser(prog=f"python -m optbench {command}", description=doc.split("\n\n")[0])
    parser.add_argument(
        "--results", default=str(repo_root() / "results"), help="results folder (default: the repository's)"
    )
    return parser
