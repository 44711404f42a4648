"""The two intents and NVIDIA's presets, without Bridge: what reaches the overrides, the plan and the job."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import ON_0_3_1

from launch.jobs import job_env
from optbench.catalog.hardware import gpu_spec
from optbench.engine.bridge.adapter import bridge_setup, override_items
from optbench.releases.presets import (
    find_preset,
    layout_from_string,
    load,
    provenance,
    unheld_reason,
)
from optbench.compose.recipe import compose_run
from optbench.validate import validate
from optbench.resolve import resolve
from bridge_env.conformance_recipes import CLUSTER_RECIPES

PRESET_SETTINGS = {
    "model.moe_router_force_load_balancing": True,
    "model.moe_router_fusion": True,
    "model.apply_rope_fusion": True,
    "model.moe_hybridep_num_sms": 32,
    "rng.te_rng_tracker": True,
    "dist.enable_megatron_core_experimental": True,
    "train.manual_gc_interval": 100,
    "train.eval_iters": 0,
    "ddp.check_for_nan_in_grad": False,
    "rerun_state_machine.check_for_nan_in_loss": False,
    "ddp.grad_reduce_in_fp32": False,
}
"""What issue 12 found missing from our Kimi K2 + Muon job, as NVIDIA's preset sets it."""


def items(recipe: str, *overrides: str) -> dict:
    run = compose_run(recipe, [ON_0_3_1, *overrides])
    validate(run)
    return dict(override_items(resolve(run).run))


def test_the_preset_data_says_where_it_came_from() -> None:
    source = provenance()
    assert source["release"] == "0.3.1" and source["commit"].startswith("9c9dd84")
    # 50 + Qwen3 235B-A22B's 14 + Llama 3 70B's and 3.1 405B's 14 each + GPT-OSS 120B's 5 (BF16)
    assert len(load()["presets"]) == 108 and "scripts/performance" in source["source"]


@pytest.mark.parametrize("recipe", CLUSTER_RECIPES)
def test_cluster_recipes_reproduce_nvidias_preset_with_no_undocumented_departure(recipe: str) -> None:
    run = compose_run(recipe, [ON_0_3_1])
    assert run.intent == "reproduce"
    preset = bridge_setup(resolve(run).run).preset
    assert {d["field"] for d in preset["departures"]} == set(run.preset_departures)
    assert all(d.get("reason") for d in preset["departures"])
    assert preset["adapted_from_adam"] == (recipe in ("qwen3_30b_a3b_muon", "deepseek_v3_muon"))


def test_reproduce_carries_the_presets_settings_and_its_timing_level() -> None:
    got = items("kimi_k2_muon")
    assert {k: got.get(k) for k in PRESET_SETTINGS} == PRESET_SETTINGS
    assert "logger.timing_log_level" not in got  # the recipe's level 0 stays: no per-step timer synchronisation
    assert find_preset(compose_run("kimi_k2_muon", [ON_0_3_1])).nvidia_value("logger.timing_log_level") == 0
    assert got["optimizer.adam_beta2"] == 0.999


@pytest.mark.slow  # several seconds: `make test` runs it
def test_train_turns_on_real_routing_checks_evaluation_and_the_optimizer_timer() -> None:
    got = items("kimi_k2_muon", "intent=train")
    assert got["model.moe_router_force_load_balancing"] is False and got["ddp.check_for_nan_in_grad"] is True
    assert got["rerun_state_machine.check_for_nan_in_loss"] is True and got["train.eval_iters"] == 32
    assert got["logger.timing_log_level"] == 1
    # Same layout and kernels as reproduce.
    for key in (
        "model.moe_hybridep_num_sms",
        "model.moe_router_fusion",
        "model.expert_model_parallel_size",
        "model.pipeline_model_parallel_layout",
        "train.manual_gc_interval",
    ):
        assert got[key] == items("kimi_k2_muon")[key], key


def test_a_typed_layout_is_listed_as_a_departure() -> None:
    preset = bridge_setup(
        resolve(compose_run("kimi_k2_muon", [ON_0_3_1, "parallel.pp=8", "parallel.ep=32"])).run
    ).preset
    assert {"model.pipeline_model_parallel_size", "model.expert_model_parallel_size"} <= {
        d["field"] for d in preset["departures"]
    }


def test_muon_on_an_adam_preset_drops_adams_precision_aware_optimizer() -> None:
    got = items("deepseek_v3_muon")
    assert (
        got["optimizer.use_precision_aware_optimizer"] is False and got["optimizer.main_grads_dtype"] == "torch.float32"
    )
    assert got["optimizer.optimizer"] == "dist_muon"


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["intent=reproduce"], "intent"),  # on the local engine
        (["intent=replay"], "intent"),
    ],
)
def test_bad_intents_are_one_line_errors(overrides, field, tmp_path, capsys) -> None:
    code, err = plan(capsys, "kimi_k2_tiny_muon", f"results_dir={tmp_path}", *overrides)
    assert code == 2 and err.startswith(f"error: {field}: ") and len(err.strip().splitlines()) == 1, err


def plan(capsys, *args: str) -> tuple[int, str]:
    from optbench.__main__ import main

    try:
        code = main(["plan", *args])
    except SystemExit as stop:
        code = stop.code
    return code, capsys.readouterr().err


@pytest.mark.slow  # several seconds: `make test` runs it
def test_reproduce_without_a_preset_names_the_field_and_the_way_out(tmp_path, capsys) -> None:
    common = (
        "kimi_k2_muon",
        f"results_dir={tmp_path}",
        "cluster=h200",
        "precision=bf16",
        "parallel.num_gpus=512",
        "force=true",
    )
    code, err = plan(capsys, *common)
    # Named after what the user typed (cluster), with the way out.
    assert (
        code == 2
        and err.startswith("error: cluster: NVIDIA measured no kimi_k2/h200/bf16/muon")
        and "intent=train" in err
    )
    assert plan(capsys, *common, "intent=train")[0] == 0


def test_nvidias_layout_notation_expands() -> None:
    stages = layout_from_string("Et*4|(t*4|)*14tmL")
    assert (
        len(stages) == 16 and stages[0] == ["embedding"] + ["decoder"] * 4 and stages[-1] == ["decoder", "mtp", "loss"]
    )


@pytest.mark.parametrize("key", sorted(load()["presets"]))
@pytest.mark.slow  # every published row / preset / invalid input: `make test` runs it
def test_job_environment_is_nvidias_for_every_preset(key: str) -> None:
    """NVIDIA's rules for the layout-dependent variables, applied to each preset's own layout, give its rendering."""
    if (why := unheld_reason(load()["presets"][key])) is not None:
        pytest.skip(why)
    model, gpu, precision, optimizer = key.split("/")
    entry = load()["presets"][key]
    value = lambda field: entry["settings"].get(field, entry["recipe_values"].get(field))  # noqa: E731
    cluster = gpu_spec(gpu).cluster_preset
    run = compose_run(
        f"{model}_{'muon' if optimizer == 'muon' else 'adamw'}",
        [f"cluster={cluster}", f"precision={precision}", ON_0_3_1],
    )
    parallel = dataclasses.replace(
        run.parallel,
        tp=value("model.tensor_model_parallel_size"),
        cp=value("model.context_parallel_size"),
        ep=value("model.expert_model_parallel_size"),
        moe_token_dispatcher=value("model.moe_token_dispatcher_type"),
        moe_flex_dispatcher_backend=value("model.moe_flex_dispatcher_backend")
        or run.parallel.moe_flex_dispatcher_backend,
    )
    env = job_env(dataclasses.replace(run, parallel=parallel))
    assert find_preset(run) is not None
    assert {name: env.get(name) for name in entry["job"]["env"]} == entry["job"]["env"]


@pytest.mark.slow  # every cluster recipe x intent x container: about 100 plans
def test_every_printed_claim_follows_from_the_overrides_the_plan_emits() -> None:
    """What the plan says (\"NaN checks\", \"no departure\", executed as NVIDIA ran it) is derived from the final
    overrides, never from the preset's intent (issue 58: 26.06.01+ turn the loss NaN check off under CUDA graphs;
    Bridge 0.6's launcher trains dist_muon for Kimi K2's documented Adam case)."""
    from optbench.plan import intent_line
    from optbench.releases.versions import containers

    checked = 0
    for recipe in CLUSTER_RECIPES:
        for container in containers():
            for intent in ("reproduce", "train"):
                try:
                    run = validate(
                        compose_run(recipe, [f"cluster.container={container}", f"intent={intent}", "force=true"])
                    ).run
                    setup = bridge_setup(run)
                except Exception:  # noqa: BLE001 - a container that refuses the recipe says so elsewhere
                    continue
                preset, final = setup.preset, dict(override_items(run))
                if preset is None:
                    continue
                line = intent_line(setup, run.optimizer.name)
                loss = final.get("rerun_state_machine.check_for_nan_in_loss", True)
                if intent == "train":
                    assert preset["train_changes"]["rerun_state_machine.check_for_nan_in_loss"] == loss, (
                        recipe,
                        container,
                    )
                    assert ("the loss NaN check stays off" in line) == (not loss), (recipe, container, line)
                    assert preset["train_changes"]["ddp.check_for_nan_in_grad"] == final["ddp.check_for_nan_in_grad"]
                else:
                    launcher = [d for d in preset["departures"] if d["field"] == "optimizer (NVIDIA's launcher)"]
                    assert ("NVIDIA's launcher trains" in line) == bool(launcher), (recipe, container, line)
                    if preset["as_executed"]:
                        assert not preset["departures"] and "no departure" in line and not launcher
                checked += 1
    assert checked >= 60
