"""Every word typed after make reaches a decision: an upper-case variable a target does not read is refused in one
line (make would otherwise take it as its own and the run would ignore it), NVIDIA's layout names pointing at the
Hydra key (issue 56)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import REPO, run_make

from optbench.common.errors import UserError
from optbench.__main__ import COMMANDS
from optbench.common.make_args import words_from_make


def _check(target: str, typed: str) -> list[str]:
    """The command's words for ``make <target> <typed>`` (``typed`` as make lists it, newest first)."""
    command = COMMANDS[target]
    environ = {"OPTBENCH_MAKE_OVERRIDES": typed, "OPTBENCH_RECIPE": "kimi_k2_muon"}
    return words_from_make(target, command.make, command.recipe, command.overrides, environ)


@pytest.mark.parametrize(
    "word, key",
    [
        ("TP", "parallel.tp"),
        ("PP", "parallel.pp"),
        ("EP", "parallel.ep"),
        ("VP", "parallel.vpp"),
        ("MBS", "train.mbs"),
        ("GBS", "train.gbs"),
    ],
)
def test_nvidias_layout_words_point_at_the_hydra_key(word: str, key: str) -> None:
    with pytest.raises(UserError) as refused:
        _check("plan", f"{word}=32 RECIPE=kimi_k2_muon")
    assert refused.value.problems[0].field == word and f"type {key}=32" in str(refused.value)


def test_a_misspelt_variable_gets_a_did_you_mean_and_every_targets_own_pass() -> None:
    with pytest.raises(UserError, match="did you mean RECIPE"):
        _check("pretrain", "RECIPIE=kimi_k2_muon")
    with pytest.raises(UserError, match="did you mean WARMUP"):
        _check("table", "WARMUPS=3")
    for target, command in COMMANDS.items():
        words = _check(target, " ".join(f"{name}=x" for name in (*command.make, "PY", "PYTHON")))
        assert words[: len(command.make)] == [f"{flag}=x" for flag in reversed(command.make.values())], target


def test_make_words_become_the_commands_own_flags_recipe_and_overrides_in_typed_order() -> None:
    words = _check("search", r"parallel.ep=64 FIX=ep,mbs train.mbs=2 HBM=-0.5 CHECK=")  # newest first, as make lists
    assert words == ["--hbm=-0.5", "--fix=ep,mbs", "kimi_k2_muon", "train.mbs=2", "parallel.ep=64"]
    with pytest.raises(UserError, match="make table takes no Hydra overrides"):
        _check("table", "train.iters=3")
    with pytest.raises(UserError, match="is not a variable of make plan"):
        _check("plan", "WARMUP=3")  # table's option, not plan's


@pytest.mark.slow  # runs make
@pytest.mark.parametrize("words", [["plan", "RECIPE=kimi_k2_muon", "EP=32"], ["pretrain", "RECIPIE=kimi_k2_muon"]])
def test_make_refuses_an_unknown_upper_case_word_in_one_line(words: list[str], tmp_path) -> None:
    done = run_make(*words, f"results_dir={tmp_path}/r")
    # make's own "make: ***" line (make[1] when the suite itself runs under make) is not ours
    lines = [line for line in done.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {words[-1].split('=')[0]}: ")
    assert not (tmp_path / "r").exists()


@pytest.mark.slow  # runs make
def test_make_keeps_the_last_of_a_repeated_key_and_the_cli_refuses_the_repeat(tmp_path) -> None:
    """Issue 58's residue, decided: make drops the first of two assignments of one variable before any recipe runs
    (MAKEOVERRIDES, MAKEFLAGS and the command-variables list all hold the last only), so make plan cannot see the
    repeat; the README says so, and python -m optbench, which gets both, refuses it."""
    results = tmp_path / "r"
    done = run_make("plan", "RECIPE=kimi_k2_tiny_muon", "train.iters=5", "train.iters=6", f"results_dir={results}")
    assert done.returncode == 0, done.stderr
    import json

    assert (
        json.loads((results / "plans" / "kimi_k2_tiny_muon" / "plan.json").read_text())["config"]["train"]["iters"] == 6
    )
    direct = subprocess.run(
        [
            sys.executable,
            "-m",
            "optbench",
            "plan",
            "kimi_k2_tiny_muon",
            "train.iters=5",
            "train.iters=6",
            f"results_dir={tmp_path / 'direct'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert direct.returncode == 2 and direct.stderr.startswith("error: train.iters: is typed more than once")


def test_unicode_in_an_unquoted_value_is_refused_in_our_words() -> None:
    from optbench.config.overrides import check_syntax

    [problem] = list(check_syntax(["description=héllo"]))
    assert problem.field == "description" and "quote the value" in problem.message
    assert "Lexer" not in problem.message
    assert list(check_syntax(["description='héllo wörld'"])) == []
