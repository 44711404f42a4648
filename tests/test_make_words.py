"""Every word typed after make reaches a decision: an upper-case variable a target does not read is refused in one
line (make would otherwise take it as its own and the run would ignore it), NVIDIA's layout names pointing at the
Hydra key (issue 56)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO

from optbench.errors import UserError
from optbench.make_args import MAKE_VARIABLES, check_make_variables


def _check(goals: str, typed: str) -> None:
    check_make_variables({"OPTBENCH_MAKE_GOALS": goals, "OPTBENCH_MAKE_OVERRIDES": typed})


@pytest.mark.parametrize("word, key", [("TP", "parallel.tp"), ("PP", "parallel.pp"), ("EP", "parallel.ep"),
                                       ("VP", "parallel.vpp"), ("MBS", "train.mbs"), ("GBS", "train.gbs")])
def test_nvidias_layout_words_point_at_the_hydra_key(word: str, key: str) -> None:
    with pytest.raises(UserError) as refused:
        _check("plan", f"{word}=32 RECIPE=kimi_k2_muon")
    assert refused.value.problems[0].field == word and f"type {key}=32" in str(refused.value)


def test_a_misspelt_variable_gets_a_did_you_mean_and_every_targets_own_pass() -> None:
    with pytest.raises(UserError, match="did you mean RECIPE"):
        _check("pretrain", "RECIPIE=kimi_k2_muon")
    with pytest.raises(UserError, match="did you mean WARMUP"):
        _check("table", "WARMUPS=3")
    for goal, names in MAKE_VARIABLES.items():
        _check(goal, " ".join(f"{name}=x" for name in (*names, "PY", "PYTHON")))
    _check("", "EP=32")  # no target of ours (make help): nothing to judge


@pytest.mark.slow  # runs make
@pytest.mark.parametrize("words", [["plan", "RECIPE=kimi_k2_muon", "EP=32"], ["pretrain", "RECIPIE=kimi_k2_muon"]])
def test_make_refuses_an_unknown_upper_case_word_in_one_line(words: list[str], tmp_path) -> None:
    done = subprocess.run(["make", "--no-print-directory", f"PY={sys.executable}", *words, f"results_dir={tmp_path}/r"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if not line.startswith("make: ***")]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {words[-1].split('=')[0]}: ")
    assert not (tmp_path / "r").exists()
