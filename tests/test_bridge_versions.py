"""The container axis: every override we emit, for every recipe and container, is a field of that release.

Field names come from ``optbench/data/bridge/fields-<bridge>.json`` (tools/bridge_versions.py, read from the
tagged Bridge source and the Core commit it pins). Only Bridge 0.3.1 also runs through the real Bridge code
(tests/test_bridge_conformance.py); the registry serves no later release.
"""

from __future__ import annotations


import pytest

from optbench.releases import presets, versions
from optbench.engine.bridge.adapter import bridge_setup, override_items
from optbench.compose.recipe import compose_run
from optbench.common.errors import UserError
from optbench.resolve import resolve
from bridge_env.conformance_recipes import CLUSTER_RECIPES

pytestmark = pytest.mark.slow  # checks every container's Bridge fields; `make test-fast` skips it

CONTAINERS = [c.name for c in versions.runnable()]


@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize("recipe", CLUSTER_RECIPES)
@pytest.mark.parametrize("intent", ["reproduce", "train"])
def test_every_override_is_a_field_of_the_container(recipe: str, container: str, intent: str) -> None:
    run = compose_run(recipe, [f"cluster.container={container}", f"intent={intent}"])
    items = override_items(resolve(run).run)  # raises on a missing field
    c = versions.container_of(run)
    mla = bool(run.model.multi_latent_attention)
    assert all(versions.has_field(c, key, mla) for key, _ in items)
    keys = dict(items)
    if run.optimizer.name == "muon":
        if c.core_minor >= (0, 18):
            assert (
                keys["optimizer.optimizer"] == "muon" and keys["optimizer.use_layer_wise_distributed_optimizer"] is True
            )
            assert "optimizer.muon_nesterov" in keys and "optimizer.muon_use_nesterov" not in keys
        else:
            assert keys["optimizer.optimizer"] == "dist_muon" and "optimizer.muon_use_nesterov" in keys
        assert ("optimizer.muon_coefficient_type" in keys) == (c.core_minor >= (0, 17))
        assert keys["ddp.use_distributed_optimizer"] is False  # Bridge builds no layer-wise param layout (<= 0.6.0)
    # The plan lists every departure from NVIDIA's preset with the reason the conformance test accepts.
    assert all(d.get("reason") for d in bridge_setup(resolve(run).run).preset["departures"])


def test_an_option_a_release_lacks_names_the_release_that_has_it() -> None:
    with pytest.raises(UserError) as err:
        compose_and_validate(
            "kimi_k2_muon", ["cluster.container=nemo:26.02.01", "optimizer.muon.overlap_param_gather=true"]
        )
    assert "nemo:26.04" in err.value.lines()[0] and err.value.lines()[0].startswith(
        "error: optimizer.muon.overlap_param_gather:"
    )
    run = compose_run("kimi_k2_muon", ["cluster.container=nemo:26.04", "optimizer.muon.overlap_param_gather=true"])
    keys = dict(override_items(resolve(run).run))
    assert keys["optimizer.overlap_param_gather"] is True and keys["ddp.overlap_param_gather"] is True
    with pytest.raises(UserError) as err:
        compose_and_validate("kimi_k2_muon", ["cluster.container=nemo:26.02", "optimizer.muon.coefficients=simple"])
    assert "nemo:26.04" in err.value.lines()[0]


def compose_and_validate(recipe: str, overrides: list[str]) -> None:
    from optbench.validate import validate

    validate(compose_run(recipe, overrides))


def test_unknown_and_too_old_containers_are_one_line_errors() -> None:
    for name, words in (("nemo:26.03", "not a NeMo container"), ("nemo:25.11", "predates Megatron Bridge 0.3")):
        with pytest.raises(UserError) as err:
            compose_and_validate("qwen3_30b_a3b_adamw", [f"cluster.container={name}"])
        assert len(err.value.lines()) == 1 and words in err.value.lines()[0]


def test_a_field_a_version_lacks_is_reported_with_the_containers_that_have_it() -> None:
    run = compose_run("kimi_k2_muon", ["cluster.container=nemo:26.02.01"])
    problems = versions.missing_fields(run, ["optimizer.muon_nesterov"])
    assert len(problems) == 1 and "nemo:26.06" in str(problems[0]) and "nemo:26.04," not in str(problems[0])


def test_layer_wise_muon_in_core_0_18_spelling_is_no_departure() -> None:
    """26.08's Kimi K2 preset says dist_muon, Core 0.19 maps it to muon + layer-wise (what we emit): same optimizer."""
    from optbench.plan import intent_line

    setup = bridge_setup(resolve(compose_run("kimi_k2_muon", ["cluster.container=nemo:26.08"])).run)
    assert setup.preset["departures"] == []
    respelled = {d["field"]: d["nvidia"] for d in setup.preset["respelled"]}
    assert respelled == {"optimizer.optimizer": "dist_muon", "optimizer.use_layer_wise_distributed_optimizer": False}
    assert "no departure (optimizer.optimizer" in intent_line(setup, "muon")
    typed = bridge_setup(resolve(compose_run("kimi_k2_muon", ["cluster.container=nemo:26.08", "parallel.ep=32"])).run)
    assert [d["field"] for d in typed.preset["departures"]] == ["model.expert_model_parallel_size"]
    assert "departs in model.expert_model_parallel_size (optimizer.optimizer" in intent_line(typed, "muon")


def test_release_preset_cuda_graphs_reach_bridge() -> None:
    """26.06's Qwen3 preset captures whole iterations: the plan must emit it, not depart from it."""
    from optbench.engine.bridge.adapter import bridge_setup

    setup = bridge_setup(resolve(compose_run("qwen3_30b_a3b_adamw", ["cluster.container=nemo:26.06"])).run)
    assert "model.cuda_graph_impl=full_iteration" in setup.overrides
    assert setup.preset["departures"] == []


def test_release_preset_gives_the_published_26_06_layout() -> None:
    run = compose_run("deepseek_v3_adamw", ["cluster.container=nemo:26.06"])
    assert (run.train.gbs, run.train.mbs, run.parallel.pp, run.parallel.vpp, run.parallel.ep) == (4096, 1, 2, 8, 32)
    assert run.cluster.container_image == "nvcr.io/nvidia/nemo:26.06"
    typed = compose_run("deepseek_v3_adamw", ["cluster.container=nemo:26.06", "train.mbs=2"])
    assert typed.train.mbs == 2  # the user's value wins over the release's


def test_every_runnable_container_has_nvidias_executed_presets() -> None:
    """presets-<bridge>.json for every container: NVIDIA's launcher of that release, executed
    (tools/nvidia_presets.py)."""
    for container in versions.runnable():
        data = presets.load(container.bridge)
        assert data["provenance"]["release"] == container.bridge and data["presets"], container.name
        assert (
            container.bridge in data["provenance"]["placeholders"]["image"]
            or container.name in data["provenance"]["placeholders"]["image"]
        )


def test_kimi_k2s_preset_arrives_with_0_3_1_and_serves_nemo_26_02() -> None:
    """Bridge 0.3.0's scripts have no Kimi K2; nemo:26.02 (the blog's container) takes the 0.3.1 preset for it."""
    assert not any(k.startswith("kimi_k2/") for k in presets.load("0.3.0")["presets"])
    run = compose_run("kimi_k2_muon", ["cluster.container=nemo:26.02"])
    assert presets.find_preset(run).release == "0.3.1"
    qwen = compose_run("qwen3_30b_a3b_adamw", ["cluster.container=nemo:26.02"])
    assert presets.find_preset(qwen).release == "0.3.0"


def test_nvidias_0_6_launcher_trains_muon_for_kimis_adam_and_our_twin_is_adam() -> None:
    """NVIDIA's v0.6.0 run_script.py finds the flat recipe by name and never applies --optimizer_type adam."""
    case = presets.load("0.6.0")["presets"]["kimi_k2/gb300/mxfp8/adam"]
    assert case["launcher_optimizer"] == "dist_muon" and case["settings"]["optimizer.optimizer"] == "adam"
    run = compose_run("kimi_k2_adamw", ["cluster.container=nemo:26.08"])
    assert "never applies --optimizer_type adam" in presets.find_preset(run).note


def test_extracted_fields_of_0_3_1_match_the_installed_core() -> None:
    from megatron.core import optimizer

    import dataclasses

    names = set(versions.fields("0.3.1")["sections"]["optimizer"])
    assert {f.name for f in dataclasses.fields(optimizer.OptimizerConfig)} <= names


def test_the_default_container_is_the_newest_one_checked_against_its_real_bridge() -> None:
    """Every runnable container has a conformance target (optbench/engine/bridge/cpu_check/environments.py); the default
    is the newest."""
    from dataclasses import fields

    from optbench.config.schema import ClusterConfig

    newest = versions.runnable()[0].name
    assert {f.default for f in fields(ClusterConfig) if f.name == "container"} == {newest}
    for recipe in CLUSTER_RECIPES:
        assert compose_run(recipe, []).cluster.container == newest, recipe
    assert (
        compose_run("kimi_k2_muon", ["cluster.container=nemo:26.02"]).cluster.container_image
        == "nvcr.io/nvidia/nemo:26.02"
    )


@pytest.mark.parametrize(
    "recipe", ["qwen3_30b_a3b_muon", "qwen3_30b_a3b_adamw", "deepseek_v3_muon", "deepseek_v3_adamw"]
)
@pytest.mark.parametrize("intent", ["reproduce", "train"])
def test_full_iteration_cuda_graphs_turn_the_loss_nan_check_off(recipe: str, intent: str) -> None:
    """Regression: on 26.06.01 (Bridge 0.5.1) every Qwen3 and DeepSeek-V3 plan failed Bridge's validation
    (full-iteration graphs with check_for_nan_in_loss on); intent=train keeps the gradient NaN check."""
    items = dict(
        override_items(resolve(compose_run(recipe, ["cluster.container=nemo:26.06.01", f"intent={intent}"])).run)
    )
    if items.get("model.cuda_graph_impl") == "full_iteration":
        assert items["rerun_state_machine.check_for_nan_in_loss"] is False
        assert items["ddp.check_for_nan_in_grad"] is (intent == "train")
    assert recipe.startswith("deepseek") or items["model.cuda_graph_impl"] == "full_iteration"


def test_kimi_k2_on_26_08_calls_bridges_argument_free_recipe() -> None:
    """Regression: Bridge 0.6's kimi_k2_pretrain_config takes no arguments; optimizer_type= raised TypeError. The plan
    names the call the release takes, and the entry point drops what a real signature does not accept."""
    from optbench.engine.bridge.adapter import bridge_setup
    from optbench.engine.bridge.entry import accepted_kwargs

    for recipe in ("kimi_k2_muon", "kimi_k2_adamw"):
        assert bridge_setup(resolve(compose_run(recipe, [])).run).recipe.kwargs == {}
        assert bridge_setup(resolve(compose_run(recipe, ["cluster.container=nemo:26.06.01"])).run).recipe.kwargs == {
            "optimizer_type": "muon" if recipe.endswith("muon") else "adam"
        }

    def argument_free():
        return "config"

    def with_keywords(**kwargs):
        return kwargs

    assert accepted_kwargs(argument_free, {"optimizer_type": "adam"}) == {}
    assert accepted_kwargs(with_keywords, {"optimizer_type": "adam"}) == {"optimizer_type": "adam"}


@pytest.mark.parametrize(
    ("container", "overrides", "refused"),
    [
        ("nemo:26.02", ["parallel.ep=1"], True),  # Core 0.16: the flex dispatcher asserts TPxEP > 1 for every backend
        (
            "nemo:26.04",
            ["parallel.ep=1", "parallel.tp=2"],
            True,
        ),  # the TP there is the expert TP: TP2 ETP1 EP1 is one expert rank
        ("nemo:26.02", ["parallel.ep=1", "parallel.moe_token_dispatcher=alltoall"], False),
        ("nemo:26.04.01", ["parallel.ep=1"], False),  # Core 0.17.1: only DeepEP asserts it; the preset's HybridEP runs
        ("nemo:26.08", ["parallel.ep=1", "parallel.moe_flex_dispatcher_backend=deepep"], True),
        ("nemo:26.02", ["parallel.ep=2"], False),
    ],
)
def test_a_flex_dispatcher_on_one_expert_rank_is_refused_where_core_asserts(container, overrides, refused) -> None:
    from optbench.validate import collect_problems

    run = compose_run("qwen3_30b_a3b_adamw", [f"cluster.container={container}", *overrides, "force=true"])
    messages = [p.message for p in collect_problems(run) if "needs ep x etp > 1 in Megatron Core" in p.message]
    assert len(messages) == refused, messages
    if refused:
        (message,) = messages
        assert message.endswith("hybridep") or message.endswith("the hybridep backend from nemo:26.04.01 on"), message


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["parallel.ep=1"], "parallel.ep"),
        (["parallel.pp=2", "parallel.vpp=null", "parallel.ep=4"], "parallel.vpp"),
        (
            [
                "parallel.recompute_granularity=full",
                "parallel.recompute_method=uniform",
                "parallel.recompute_num_layers=1",
            ],
            "parallel.recompute_granularity",
        ),
        (
            ["parallel.recompute_granularity=selective", "parallel.recompute_modules=[moe]"],
            "parallel.recompute_modules",
        ),
        (["parallel.moe_token_dispatcher=allgather"], "parallel.moe_token_dispatcher"),
    ],
)
def test_ep_communication_overlap_is_refused_where_bridge_asserts(overrides, field) -> None:
    """26.08's Qwen3 GB300 preset overlaps the EP all-to-all; Bridge's CommOverlapConfig asserts EP > 1, an
    interleaved schedule under PP, no full recompute, ... in the container: the plan refuses them first, and
    turning the overlap off is one of the fixes it names."""
    from optbench.validate import collect_problems

    run = compose_run("qwen3_30b_a3b_adamw", ["cluster.container=nemo:26.08", *overrides, "force=true"])
    assert run.parallel.ep_comm_overlap
    problems = [p for p in collect_problems(run) if "EP-communication overlap" in p.message]
    assert [p.field for p in problems] == [field], [p.message for p in problems]
    assert problems[0].message.endswith("parallel.ep_comm_overlap=false")
    off = compose_run(
        "qwen3_30b_a3b_adamw",
        ["cluster.container=nemo:26.08", *overrides, "parallel.ep_comm_overlap=false", "force=true"],
    )
    assert not [p for p in collect_problems(off) if "EP-communication overlap" in p.message]


def test_turning_off_a_presets_ep_overlap_reaches_bridge_with_its_delayed_wgrad() -> None:
    """Regression: parallel.ep_comm_overlap=false on 26.08's Qwen3 preset (which overlaps the EP all-to-all and delays
    the expert weight gradients) still emitted the preset's overlap, said "no departure" and projected without it.
    Off now reaches Bridge, and so does the delay's off (Core asserts the delay needs the overlap)."""

    def overlap(extra: list[str], container: str = "nemo:26.08") -> tuple[list[str], list[str]]:
        setup = bridge_setup(
            resolve(compose_run("qwen3_30b_a3b_adamw", [f"cluster.container={container}", *extra])).run
        )
        emitted = [o for o in setup.overrides if "overlap_moe_expert" in o or "delay_wgrad" in o]
        return emitted, [d["field"] for d in setup.preset["departures"]]

    assert overlap([]) == (
        ["comm_overlap.delay_wgrad_compute=true", "comm_overlap.overlap_moe_expert_parallel_comm=true"],
        [],
    )
    assert overlap(["parallel.ep_comm_overlap=false"]) == (
        ["comm_overlap.overlap_moe_expert_parallel_comm=false", "comm_overlap.delay_wgrad_compute=false"],
        ["comm_overlap.overlap_moe_expert_parallel_comm", "comm_overlap.delay_wgrad_compute"],
    )
    # A preset that never overlaps gets nothing written for the switch (Bridge's CommOverlapConfig leaves it None).
    assert overlap(["cluster=b200"], "nemo:26.02")[0] == []


@pytest.mark.parametrize(
    ("container", "overrides", "field"),
    [
        (
            "nemo:26.02",
            ["parallel.cuda_graph_impl=full_iteration", "parallel.cuda_graph_scope=[]"],
            "parallel.cuda_graph_impl",
        ),
        (
            "nemo:26.04.01",
            ["parallel.cuda_graph_impl=full_iteration", "parallel.cuda_graph_scope=[]"],
            "parallel.cuda_graph_impl",
        ),
        ("nemo:26.06", ["parallel.cuda_graph_impl=full_iteration", "parallel.cuda_graph_scope=[]"], None),
        (
            "nemo:26.04",
            [
                "parallel.recompute_granularity=full",
                "parallel.recompute_method=uniform",
                "parallel.recompute_num_layers=1",
            ],
            "parallel.recompute_granularity",
        ),
        (
            "nemo:26.04",
            [
                "parallel.recompute_granularity=full",
                "parallel.recompute_method=uniform",
                "parallel.recompute_num_layers=1",
                "parallel.cuda_graph_impl=none",
                "parallel.cuda_graph_scope=[]",
            ],
            None,
        ),
        (
            "nemo:26.04",
            ["parallel.recompute_granularity=selective", "parallel.recompute_modules=[moe]"],
            "parallel.recompute_modules",
        ),
    ],
)
def test_cuda_graph_rules_of_each_core_are_refused_before_launch(container, overrides, field) -> None:
    """26.02-26.04.01's Qwen3 preset graphs attention and the router per layer (Transformer Engine); Core refuses full
    recompute or a recomputed MoE layer with that, and knows the full_iteration implementation only from 0.18."""
    from optbench.validate import collect_problems

    run = compose_run("qwen3_30b_a3b_adamw", [f"cluster.container={container}", *overrides, "force=true"])
    assert [p.field for p in collect_problems(run)] == ([field] if field else [])
