"""plan.json as a typed object: built once, written in its documented order, read back to the same plan."""

from __future__ import annotations

import json

import pytest

from optbench.accounting.plan_fields import ACCOUNTING_KEYS
from optbench.compose.recipe import compose_run
from optbench.plan import build_plan, format_summary
from optbench.runs.plan_file import PLAN_VERSION
from optbench.plan.types import Plan
from optbench.validate import validate


def _written(plan: Plan) -> dict:
    return json.loads(json.dumps(plan.to_json()))


@pytest.mark.parametrize("recipe", ["kimi_k2_muon", "qwen3_moe_tiny_muon"])
def test_a_plan_read_back_is_the_plan_that_was_written(recipe: str) -> None:
    plan = build_plan(validate(compose_run(recipe)))
    written = _written(plan)
    again = Plan.from_json(written)
    assert again.to_json() == written
    assert (again.layout, again.optimizer, again.model, again.bridge) == (
        plan.layout,
        plan.optimizer,
        plan.model,
        plan.bridge,
    )
    assert again.accounting == plan.accounting  # the typed section, record for record
    assert format_summary(again) == format_summary(plan)


def test_the_typed_accounting_section_writes_published_figures_only_for_a_published_step_time() -> None:
    plan = build_plan(validate(compose_run("kimi_k2_muon", ["step_time_s=12.5"])))
    ours, *published = plan.accounting.throughput_at
    assert ours.published is None and "published" not in ours.to_json() and ours.basis == "step_time_s=12.5"
    assert published and all("published_ns_tflops_per_gpu" in p.to_json() for p in published)
    assert type(plan.accounting).from_json(_written(plan)) == plan.accounting
    assert plan.accounting.memory_per_gpu_gb.total == max(plan.accounting.memory_per_gpu_gb.stage_totals)


def test_plan_json_keeps_its_documented_key_order() -> None:
    written = _written(build_plan(validate(compose_run("kimi_k2_muon"))))
    keys = list(written)
    assert keys[:2] == ["plan_version", "recipe"] and written["plan_version"] == PLAN_VERSION
    data = keys.index("data")
    assert keys[data + 1 : data + 1 + len(ACCOUNTING_KEYS)] == list(ACCOUNTING_KEYS)
    assert keys[-3:] == ["projection", "config", "bridge"]
    assert "muon" in written["optimizer"] and "soap" not in written["optimizer"]  # a null section is left out


def test_the_launcher_adds_its_section_to_a_new_plan() -> None:
    plan = build_plan(validate(compose_run("qwen3_moe_tiny_muon")))
    launched = plan.with_launch({"executor": "local", "summary": "torchrun on this machine, 1 processes"})
    assert plan.launch is None and "launch" not in plan.to_json()
    assert list(launched.to_json())[-1] == "launch"
    assert format_summary(launched).endswith("  launch      torchrun on this machine, 1 processes")


def test_a_plan_of_another_shape_is_refused_by_the_reader() -> None:
    written = _written(build_plan(validate(compose_run("qwen3_moe_tiny_muon"))))
    written["optimizer"]["lr"] = "fast"
    with pytest.raises(ValueError, match="optimizer"):
        Plan.from_json(written)
    del written["layout"]
    with pytest.raises(KeyError):
        Plan.from_json(written)


def test_a_plan_of_other_overrides_says_which_plan_it_replaces(tmp_path, capsys):
    """Each recipe keeps its latest plan (results/plans/<recipe>/plan.json, what make table reads): the printed line
    says when a plan of other overrides goes, and a re-plan of the same overrides says nothing."""
    from conftest import marked_results
    from optbench.__main__ import main

    results = marked_results(tmp_path / "results")
    lines = []
    for overrides in ([], ["train.iters=5"], ["train.iters=5"], ["parallel.ep=32", "description=x y"]):
        assert main(["plan", "kimi_k2_muon", f"results_dir={results}", *overrides]) == 0
        lines.append(next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  plan.json ")))
    assert lines[0].endswith("plan.json") and lines[2].endswith("plan.json")
    assert lines[1].endswith("(replaces the plan of kimi_k2_muon with no overrides: a recipe keeps its latest plan)")
    assert lines[3].endswith("(replaces the plan of kimi_k2_muon with train.iters=5: a recipe keeps its latest plan)")
