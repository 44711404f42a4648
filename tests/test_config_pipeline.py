"""A recipe's pipeline layout follows pp/vpp typed on the command line; a typed layout is kept."""

from __future__ import annotations

import pytest

from optbench.config.compose import compose_run
from optbench.config.layout import stage_decoder_layers
from optbench.config.pipeline import balanced_pipeline_layout, layout_follows_overrides
from optbench.plan import build_plan, format_summary
from optbench.validate import collect_problems


@pytest.mark.parametrize(
    ("layers", "stages", "expected"),
    [
        (61, 16, [3] + [4] * 13 + [3, 3]),
        (61, 32, [1] + [2] * 29 + [1, 1]),
        (8, 4, [2, 2, 2, 2]),
        (9, 4, [2, 3, 2, 2]),
        (5, 2, [3, 2]),
    ],
)
def test_balanced_layout_spreads_layers_middle_stages_first(layers: int, stages: int, expected: list[int]) -> None:
    layout = balanced_pipeline_layout(layers, stages, mtp_layers=1)
    assert [stage.count("decoder") for stage in layout] == expected
    assert layout[0][0] == "embedding" and layout[-1][-2:] == ["mtp", "loss"]
    assert sum(stage.count("embedding") for stage in layout) == 1


@pytest.mark.parametrize(
    ("overrides", "follows"),
    [
        (["parallel.pp=8"], True),
        (["parallel.vpp=2", "train.gbs=8"], True),
        (["parallel.pp=8", "parallel.pipeline_layout=null"], False),
        (["parallel=kimi_k2_gb200_256", "parallel.pp=8"], False),
        (["parallel.ep=32"], False),
    ],
)
def test_only_typed_stage_counts_without_a_layout_rebalance(overrides: list[str], follows: bool) -> None:
    assert layout_follows_overrides(overrides) is follows


def test_typed_pp_gives_a_valid_plan_that_says_the_layout_was_balanced() -> None:
    overrides = ["parallel.pp=8", "parallel.ep=32"]
    run = compose_run("kimi_k2_muon", overrides)
    assert collect_problems(run) == []
    layers = stage_decoder_layers(run)
    assert len(layers) == 32 and sum(layers) == 61 and max(layers) - min(layers) == 1
    plan = build_plan(run, overrides)
    assert plan["pipeline_layout_balanced"] is True
    assert "layout balanced for the typed pp/vpp" in format_summary(plan)


def test_unchanged_stage_count_keeps_the_published_layout() -> None:
    published = compose_run("kimi_k2_muon").parallel.pipeline_layout
    run = compose_run("kimi_k2_muon", ["parallel.pp=2", "parallel.vpp=8"])  # 16 stages, as published
    assert run.parallel.pipeline_layout == published
    assert build_plan(run, ["parallel.pp=2", "parallel.vpp=8"])["pipeline_layout_balanced"] is False


def test_pp_one_drops_the_layout() -> None:
    run = compose_run("kimi_k2_muon", ["parallel.pp=1", "parallel.vpp=null", "parallel.ep=64"])
    assert run.parallel.pipeline_layout is None


def test_a_typed_layout_is_validated_not_replaced() -> None:
    run = compose_run("kimi_k2_muon", ["parallel.pp=8", "parallel.ep=32", "parallel.pipeline_layout=[[embedding],[loss]]"])
    messages = [problem.message for problem in collect_problems(run)]
    assert any("has 2 stages but pp*vpp = 8*4 = 32" in message for message in messages)
