"""A recipe names the AdamW recipe its plan compares it with (``compare_with``); nothing is guessed from names."""

from __future__ import annotations

import pytest

from conftest import run_cli
from optbench.compose.recipe import compose_run, list_recipes
from optbench.projection.twin import twin_recipe

RESULTS = "results_dir=/nonexistent/optbench-results"


@pytest.mark.parametrize("recipe", [r for r in list_recipes() if not r.endswith("_adamw")])
def test_every_matrix_optimizer_recipe_names_an_adamw_recipe_of_its_model(recipe):
    run = compose_run(recipe, [])
    assert run.compare_with in list_recipes(), f"{recipe}: compare_with {run.compare_with!r}"
    twin = compose_run(run.compare_with, [])
    assert twin.optimizer.name == "adamw" and twin.model.name == run.model.name


def test_the_twin_keeps_the_users_overrides_but_the_optimizer_ones():
    run = compose_run("kimi_k2_muon", ["parallel.ep=32", "optimizer.lr=1e-3"])
    assert twin_recipe(run, ["parallel.ep=32", "optimizer.lr=1e-3", "compare_with=kimi_k2_adamw"]) == (
        "kimi_k2_adamw",
        ("parallel.ep=32",),
    )
    adamw = compose_run("kimi_k2_adamw", ["optimizer=muon"])
    assert adamw.compare_with is None
    assert twin_recipe(adamw, ["optimizer=muon", "train.mbs=1"]) == (
        "kimi_k2_adamw",
        ("train.mbs=1", "optimizer=adamw"),
    )


def test_a_compare_with_that_is_no_recipe_is_one_line():
    result = run_cli("plan", "kimi_k2_muon", RESULTS, "compare_with=kimi_k2_adam")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[0].startswith("error: compare_with: 'kimi_k2_adam' is not a recipe")


@pytest.mark.parametrize(
    ("named", "says"),
    [
        (
            "qwen3_30b_a3b_adamw",
            "error: compare_with: qwen3_30b_a3b_adamw trains qwen3_30b_a3b, not this run's kimi_k2: ",
        ),
        (
            "kimi_k2_muon",
            "error: compare_with: kimi_k2_muon trains with muon, not AdamW: name an AdamW recipe of kimi_k2",
        ),
    ],
)
def test_a_compare_with_that_is_no_adamw_run_of_the_model_is_refused_not_a_plan_note(tmp_path, named, says):
    """A wrong twin is a bad input: one line, exit 2, nothing written (a twin that merely fails to compose at the
    user's overrides stays a note in the plan)."""
    results = tmp_path / "results"
    result = run_cli("plan", "kimi_k2_muon", f"results_dir={results}", f"compare_with={named}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[0].startswith(says)
    assert not results.exists()
