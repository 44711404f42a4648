"""A recipe's pipeline layout follows pp/vpp typed on the command line; a typed layout is kept."""

from __future__ import annotations

import pytest

from optbench.compose.recipe import compose_run
from optbench.config.layout import stage_decoder_layers
from optbench.compose.pipeline import (
    balanced_layout_for,
    balanced_pipeline_layout,
    last_stage_weight,
    layout_follows_overrides,
)
from optbench.plan import build_plan, format_summary
from optbench.validate import collect_problems
from optbench.resolve import resolve


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "last_weight", "expected"),
    [
        (8, 4, 1, 0.0, [2, 2, 2, 2]),
        (9, 4, 1, 0.0, [2, 3, 2, 2]),  # the extra layer goes to a middle rank
        (61, 4, 4, 2.2, [4] * 15 + [1]),  # Bridge's own Kimi K2 layout for (4, 4)
        (61, 2, 2, 2.2, [16, 16, 16, 13]),
        (61, 8, 4, 2.2, [2] * 23 + [1] + [2] * 7 + [0]),  # last rank: 2+2+1+0 layers + the output layer
    ],
)
def test_balanced_layout_evens_the_ranks_work_counting_the_output_layer(layers, pp, vpp, last_weight, expected) -> None:
    layout = balanced_pipeline_layout(layers, pp, vpp, mtp_layers=1, last_weight=last_weight)
    counts = [stage.count("decoder") for stage in layout]
    assert counts == expected
    assert layout[0][0] == "embedding" and layout[-1][-2:] == ["mtp", "loss"]


def test_kimi_k2_output_layer_weighs_about_two_decoder_layers() -> None:
    assert 2.0 < last_stage_weight(compose_run("kimi_k2_muon")) < 2.4
    assert last_stage_weight(compose_run("deepseek_v3_muon")) > 3.0  # + its MTP layer and a second output head


@pytest.mark.parametrize(
    ("recipe", "overrides"),
    [
        ("kimi_k2_muon", ["parallel.pp=8", "parallel.ep=32"]),
        ("kimi_k2_muon", ["parallel.pp=16", "parallel.vpp=null", "parallel.ep=16"]),
        ("deepseek_v3_muon", ["parallel.pp=8", "parallel.ep=32"]),
        ("qwen3_30b_a3b_muon", ["parallel.pp=2", "parallel.vpp=3", "parallel.num_gpus=16"]),
    ],
)
def test_balanced_layouts_pass_megatron_cores_own_layout_check(recipe: str, overrides: list[str]) -> None:
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    run = compose_run(recipe, overrides)
    layout = run.parallel.pipeline_layout or balanced_layout_for(run)
    checked = PipelineParallelLayerLayout([list(stage) for stage in layout], run.parallel.pp)
    checked.validate_layer_layout(run.model.num_layers, run.model.mtp_num_layers or None)
    assert collect_problems(run) == []


@pytest.mark.parametrize(
    ("overrides", "follows"),
    [
        (["parallel.pp=8"], True),
        (["parallel.vpp=2", "train.gbs=8"], True),
        (["parallel.pp=8", "parallel.pipeline_layout=null"], False),
        (["parallel=kimi_k2/gb200_256", "parallel.pp=8"], False),
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
    assert len(layers) == 32 and sum(layers) == 61
    rank_layers = [sum(layers[rank::8]) for rank in range(8)]
    assert rank_layers == [8] * 7 + [5]  # the last rank also runs the ~2.2-layer output layer
    plan = build_plan(resolve(run), overrides)
    assert plan.pipeline_layout_balanced is True
    assert "layout balanced for the typed pp/vpp" in format_summary(plan)


def test_unchanged_stage_count_keeps_the_published_layout() -> None:
    published = compose_run("kimi_k2_muon").parallel.pipeline_layout
    run = compose_run("kimi_k2_muon", ["parallel.pp=2", "parallel.vpp=8"])  # 16 stages, as published
    assert run.parallel.pipeline_layout == published
    assert build_plan(resolve(compose_run("kimi_k2_muon")), []).pipeline_layout_balanced is False


def test_pp_one_drops_the_layout() -> None:
    run = compose_run("kimi_k2_muon", ["parallel.pp=1", "parallel.vpp=null", "parallel.ep=64"])
    assert run.parallel.pipeline_layout is None


def test_a_typed_layout_is_validated_not_replaced() -> None:
    run = compose_run(
        "kimi_k2_muon", ["parallel.pp=8", "parallel.ep=32", "parallel.pipeline_layout=[[embedding],[loss]]"]
    )
    messages = [problem.message for problem in collect_problems(run)]
    assert any("has 2 stages but pp*vpp = 8*4 = 32" in message for message in messages)
