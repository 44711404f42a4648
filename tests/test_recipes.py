"""Every recipe composes and validates; every named layout is valid for the model it names;
every published row's layout is expressible and matches the published numbers."""

from __future__ import annotations

import dataclasses

import csv
from pathlib import Path

import pytest

from optbench.catalog.hardware import gpu_catalog
from optbench.releases import presets, versions

from optbench.common.errors import UserError
from optbench.compose.recipe import compose_run, list_group_options, list_recipes
from optbench.config.layout import derive_layout
from optbench.plan import build_plan
from optbench.validate import collect_problems
from optbench.resolve import resolve

REPO = Path(__file__).resolve().parents[1]
CLUSTER_FOR_GPU = {gpu: spec.cluster_preset for gpu, spec in gpu_catalog().items()}


@pytest.mark.parametrize("recipe", list_recipes())
def test_recipe_composes_validates_and_plans(recipe: str) -> None:
    run = compose_run(recipe)
    assert collect_problems(run) == []
    plan = build_plan(resolve(run))
    assert plan.recipe == recipe
    if run.model.num_moe_experts:  # a MoE model activates a share of its parameters; a dense one all of them
        assert plan.model.total_params > plan.model.active_params > 0
    else:
        assert plan.model.total_params == plan.model.active_params > 0


@pytest.mark.parametrize("recipe", list_recipes())
def test_composing_without_hydras_unused_groups_gives_hydras_full_composition(recipe: str) -> None:
    """compose_dictconfig leaves out Hydra's logging, help, launcher, sweeper, output and env configs (never read
    by hydra.compose): the run it composes must be the one Hydra's own full composition gives."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from optbench.compose.recipe import _register_schema, compose_dictconfig

    overrides = ["train.mbs=1"]
    ours = compose_dictconfig(recipe, overrides)
    _register_schema()
    with initialize_config_dir(config_dir=str(REPO / "recipes"), version_base="1.3"):
        full = compose(
            config_name=recipe,
            overrides=[f"hydra.searchpath=[file://{REPO / 'conf'}]", f"++recipe={recipe}", *overrides],
        )
    assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(full)


RELEASE_CASES = [
    ("kimi_k2_muon", []),  # the default container's preset: Kimi K2's layout and batch from a later Bridge
    ("qwen3_30b_a3b_adamw", ["cluster.container=nemo:26.06"]),
    ("deepseek_v3_adamw", ["cluster.container=nemo:26.08", "train.gbs=4096"]),
    ("qwen3_30b_a3b_muon", ["intent=reproduce", "parallel.tp=1"]),
]


@pytest.mark.parametrize(("recipe", "overrides"), RELEASE_CASES)
def test_a_releases_layout_is_the_run_hydra_composes_with_its_overrides_typed_first(recipe, overrides) -> None:
    """compose_run sets the release's values on the composed config (OmegaConf.update, as Hydra applies a value
    override) instead of composing again: the run must be the one Hydra composes with them typed before the user's."""
    from optbench.compose.recipe import compose_dictconfig
    from optbench.compose.release_layout import layout_overrides
    from optbench.config.serialize import to_run_config

    run = compose_run(recipe, overrides)
    first = to_run_config(compose_dictconfig(recipe, overrides))
    release = layout_overrides(first, overrides)
    assert release, "a case without a release layout tests nothing"
    assert run == to_run_config(compose_dictconfig(recipe, [*release, *overrides]))


def test_recipe_file_is_short_and_says_what_it_reproduces() -> None:
    for path in sorted((REPO / "recipes").glob("*.yaml")):
        text = path.read_text()
        assert len(text.splitlines()) <= 40, path
        assert text.startswith("# @package _global_\n#"), f"{path.name} must open with a comment on what it reproduces"


def _layout_overrides(layout: str) -> tuple[str, list[str]]:
    """Recipe and overrides that put a named layout (``<model>/<gpu>_<count>``) on the model and GPU it names."""
    model, rest = layout.split("/")
    gpu, _ = rest.rsplit("_", 1)
    precision = "fp8_cs" if gpu in ("h100", "h200") else "mxfp8"
    overrides = [f"parallel={layout}", f"cluster={CLUSTER_FOR_GPU[gpu]}", f"precision={precision}"]
    preset = f"{model}/{gpu}"
    if preset in list_group_options("train"):
        overrides.append(f"train={preset}")
    return f"{model}_adamw", overrides


@pytest.mark.parametrize("layout", [name for name in list_group_options("parallel") if name != "single"])
@pytest.mark.slow  # every published row / preset / invalid input: `make test` runs it
def test_named_layout_is_valid_for_its_model(layout: str) -> None:
    recipe, overrides = _layout_overrides(layout)
    run = compose_run(recipe, overrides)
    if not any(o.startswith("train=") for o in overrides):
        # No published batch for this row (DeepSeek-V3 on B200/B300): eight sequences per replica.
        gbs = 8 * run.parallel.num_gpus // (run.parallel.tp * run.parallel.pp * run.parallel.cp)
        run = dataclasses.replace(run, train=dataclasses.replace(run.train, mbs=1, gbs=gbs))
    assert collect_problems(run) == [], layout


def _published_rows() -> list[dict[str, str]]:
    """The rows with a named layout of ours (a headline model's conf/parallel/<model>/<gpu>_<count>); the rows of the
    other projected models are held to their stated layout by test_accounting_memory.test_published_layouts_fit."""
    named = set(list_group_options("parallel"))
    with open(REPO / "results" / "published" / "published.csv") as handle:
        return [
            row
            for row in csv.DictReader(handle)
            if row["tp"] and f"{row['model']}/{row['gpu']}_{row['num_gpus']}" in named
        ]


BRIDGE_030_BATCH = {
    ("26.02.01", "qwen3_30b_a3b", "b200"),
    ("26.02", "deepseek_v3", "b200"),
    ("26.02", "deepseek_v3", "b300"),
    ("26.02.01", "deepseek_v3", "b200"),
    ("26.02.01", "deepseek_v3", "b300"),
}
"""Batch sizes our 26.02 train presets do not hold: Qwen3 on B200 keeps 26.02's MBS 1 (26.02.01: 4); DeepSeek-V3 on
B200/B300 has no train preset (a command line sets train.gbs/mbs; the plan lists the departure from the preset)."""
PUBLISHED_NOT_EXECUTED = {
    ("26.02.01", "llama31_405b", "gb300", "fp8"),
    ("26.02.01", "llama3_70b", "gb300", "mxfp8"),
    ("26.02.01", "llama3_70b", "gb300", "nvfp4"),
}
"""Rows whose stated layout is not what NVIDIA's 0.3.1 launcher executes for that case (405B FP8: TP2 CP2 stated, TP4
CP1 executed; 70B MXFP8: MBS 2 without VPP stated, MBS 1 VPP 5 executed; 70B NVFP4: PP1 MBS 2 stated, PP4 VPP5 MBS 1
executed): the projection types the stated values (plan/row_runs.py), so these rows are scored at the layout NVIDIA
published."""
NON_DEFAULT_VARIANT_GBS = {"15360"}
"""DeepSeek-V3 26.06 GB300 at GBS 15360: NVIDIA's named variant (DEEPSEEK_V3_..._GB300_FP8_MX_GBS15360), not the
default."""


@pytest.mark.parametrize("row", _published_rows(), ids=lambda r: f"{r['model']}-{r['gpu']}-{r['release']}")
@pytest.mark.slow  # every published row / preset / invalid input: `make test` runs it
def test_published_row_layout_matches(row: dict[str, str]) -> None:
    """Every published row of a container we run is what `make plan` plans with cluster.container=<its release>."""
    container = f"nemo:{row['release']}"
    if container not in {c.name for c in versions.runnable()}:
        pytest.skip(f"{container} predates Megatron Bridge 0.3: published rows only")
    if (row["release"], row["model"], row["gpu"], row["precision"]) in PUBLISHED_NOT_EXECUTED:
        pytest.skip("NVIDIA published another layout than its launcher executes (PUBLISHED_NOT_EXECUTED)")
    if row["fsdp"] not in ("", "0"):
        pytest.skip("Megatron FSDP: our config does not hold it (the row is data)")
    precision = {"fp8": "fp8_cs"}.get(row["precision"], row["precision"])
    if precision not in list_group_options("precision"):
        pytest.skip(f"precision {row['precision']}: no option of ours (the row is data)")
    layout = f"{row['model']}/{row['gpu']}_{row['num_gpus']}"
    recipe, overrides = _layout_overrides(layout)
    overrides = [o for o in overrides if not o.startswith("precision=")] + [f"precision={precision}"]
    if presets.release_of_container(container) != presets.RELEASE:
        overrides = [o for o in overrides if not o.startswith(("parallel=", "train="))]  # the release's preset decides
    if row["optimizer"] == "muon":
        recipe = recipe.replace("_adamw", "_muon")
    run = compose_run(recipe, [*overrides, f"cluster.container={container}"])
    lay = derive_layout(run)
    assert lay.world_size == int(row["num_gpus"])
    for key in ("tp", "pp", "cp", "ep"):
        assert getattr(lay, key) == int(row[key] or 1), key  # a dense model states no EP
    assert lay.vpp == int(row["vpp"] or 1)
    assert run.precision.name == precision
    if (row["release"], row["model"], row["gpu"]) in BRIDGE_030_BATCH or row["gbs"] in NON_DEFAULT_VARIANT_GBS:
        return
    assert (run.train.gbs, run.train.mbs, run.train.seq_length) == (
        int(row["gbs"]),
        int(row["mbs"]),
        int(row["seq_length"]),
    )


@pytest.mark.parametrize("gpu", list(gpu_catalog()))
def test_each_registry_gpu_has_its_cluster_preset_with_the_registrys_node_size(gpu: str) -> None:
    """The GPU registry (optbench/data/gpus.csv) names the cluster preset; the preset agrees with it."""
    spec = gpu_catalog()[gpu]
    cluster = compose_run("kimi_k2_muon", [f"cluster={spec.cluster_preset}"]).cluster
    assert (cluster.gpu, cluster.gpus_per_node) == (gpu, spec.gpus_per_node)


def test_each_registry_model_has_its_model_preset_and_the_catalog_only_ones_are_named() -> None:
    """Every catalog model has its shape; a model without a recipe is data only, and models.csv says why (its
    published rows are listed, not projected)."""
    from optbench.catalog.models import model_registry

    assert set(model_registry()) <= set(list_group_options("model"))
    catalog_only = {model for model in model_registry() if f"{model}_adamw" not in list_recipes()}
    assert catalog_only == {model for model, entry in model_registry().items() if entry.not_projected}
    assert catalog_only == {"llama3_8b"}


@pytest.mark.parametrize("restated", ["precision=mxfp8", "parallel=qwen3_30b_a3b/gb300_8", "logger=wandb_offline"])
def test_a_group_typed_as_the_recipe_picks_it_changes_nothing(restated: str) -> None:
    """Typing the recipe's own option of a group (the recipe's or base.yaml's) is the recipe: NVIDIA's preset of
    the release still supplies its values (26.08's FP8 attention for Qwen3 MXFP8), as without the override."""
    plain = compose_run("qwen3_30b_a3b_adamw")
    assert plain.precision.fp8_dot_product_attention  # from the release's preset, not conf/precision/mxfp8.yaml
    assert compose_run("qwen3_30b_a3b_adamw", [restated]) == plain


def test_a_group_typed_with_another_option_is_the_users_choice() -> None:
    run = compose_run("qwen3_30b_a3b_adamw", ["precision=fp8_cs"])
    assert run.precision.name == "fp8_cs" and not run.precision.fp8_dot_product_attention


@pytest.mark.parametrize("recipe", ["kimi_k2_muon", "deepseek_v3_adamw"])
def test_nvidias_h100_preset_brings_its_sequence_parallelism_with_its_tensor_parallelism(recipe: str) -> None:
    """On cluster=h100 the release's preset runs TP8 (Kimi K2) or TP2 (DeepSeek-V3) with EP: Megatron needs sequence
    parallelism there, and the preset sets it. Taking the preset's TP without its sequence_parallel made
    `make plan RECIPE=<recipe> cluster=h100 precision=fp8_cs` refuse NVIDIA's own layout."""
    run = compose_run(recipe, ["cluster=h100", "precision=fp8_cs"])
    assert run.parallel.tp > 1 and run.parallel.ep > 1
    assert run.parallel.sequence_parallel is True
    assert collect_problems(run) == []


def test_a_tp_typed_to_1_over_nvidias_h100_preset_leaves_its_sequence_parallelism_behind() -> None:
    run = compose_run("kimi_k2_muon", ["cluster=h100", "precision=fp8_cs", "parallel.tp=1"])
    assert (run.parallel.tp, run.parallel.sequence_parallel) == (1, False)


def test_sequence_parallelism_follows_a_typed_tp_as_nvidias_launcher_sets_it_unless_typed_too() -> None:
    """NVIDIA's launcher sets sequence_parallel = tp > 1 from a TP it is given; so does a typed parallel.tp (issue 79's
    done-when: `make plan RECIPE=qwen3_30b_a3b_muon parallel.tp=2` plans, MoE at TP 2 and EP > 1 needing it)."""
    run = compose_run("qwen3_30b_a3b_muon", ["parallel.tp=2"])
    assert (run.parallel.tp, run.parallel.sequence_parallel) == (2, True) and run.parallel.ep > 1
    assert collect_problems(run) == []
    typed_off = compose_run("qwen3_30b_a3b_muon", ["parallel.tp=2", "parallel.sequence_parallel=false"])
    assert typed_off.parallel.sequence_parallel is False
    assert [p.field for p in collect_problems(typed_off)] == ["parallel.sequence_parallel"]
    assert compose_run("qwen3_30b_a3b_muon").parallel.sequence_parallel is False  # untyped: the recipe's


def test_sequence_parallelism_without_tensor_parallelism_is_refused_as_megatron_drops_or_refuses_it() -> None:
    """Core raises on it (nemo:26.02, 26.02.01); Bridge from 0.4 turns it off before Core sees it, so a plan that
    accepted it would record sequence parallelism the job never runs."""
    run = compose_run("kimi_k2_muon", ["parallel.sequence_parallel=true"])
    assert run.parallel.tp == 1
    problems = [p for p in collect_problems(run) if p.field == "parallel.sequence_parallel"]
    assert (
        problems
        and "needs tensor parallelism" in problems[0].message
        and "sequence_parallel=false" in problems[0].message
    )


@pytest.mark.parametrize("recipe", list_recipes())
def test_the_plain_view_of_a_run_is_omegaconfs_structured_view_value_for_value(recipe: str) -> None:
    """run_config_to_dict reads the dataclasses directly; plan.json and config.yaml must not change: the same keys,
    values and value types (repr tells 1 from 1.0) as OmegaConf's structured view, including where OmegaConf
    converts (an int in a float field) and where the fast path hands over to it (an int in a text field)."""
    import dataclasses

    from omegaconf import OmegaConf

    from optbench.config.serialize import run_config_to_dict

    run = compose_run(recipe)
    variants = [
        run,
        dataclasses.replace(run, step_time_s=3, run_id=None),
        dataclasses.replace(run, parallel=dataclasses.replace(run.parallel, pipeline_layout=None)),
        dataclasses.replace(run, description=5),  # not a text value: OmegaConf's conversion makes it "5"
    ]
    for variant in variants:
        expected = OmegaConf.to_container(OmegaConf.structured(variant), resolve=False)
        assert repr(run_config_to_dict(variant)) == repr(expected)


def test_a_typed_run_is_never_changed_in_place() -> None:
    """Every schema section refuses assignment once built; a change is a new run (dataclasses.replace)."""
    run = compose_run("kimi_k2_muon")
    for section, name in (
        (run, "force"),
        (run.parallel, "tp"),
        (run.optimizer, "lr"),
        (run.optimizer.muon, "momentum"),
    ):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(section, name, getattr(section, name))
    changed = dataclasses.replace(run, parallel=dataclasses.replace(run.parallel, tp=2))
    assert (changed.parallel.tp, run.parallel.tp) == (2, compose_run("kimi_k2_muon").parallel.tp)


def test_make_recipes_gives_each_recipe_its_description(capsys):
    """Issue 81 item 9: the list printed bare names; each line now carries the recipe's own description line."""
    from optbench.__main__ import main
    from optbench.compose.recipe import list_recipes

    assert main(["recipes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list_recipes()
    mine = next(line for line in lines if line.startswith("kimi_k2_muon "))
    assert (
        mine.split(None, 1)[1]
        == "Kimi K2 + Muon (layer-wise), 256 GB300, MXFP8 - NVIDIA blog Table 1 / Bridge perf preset"
    )
    assert all(len(line.split(None, 1)) == 2 for line in lines)  # every committed recipe has a description


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("parallel=../model/kimi_k2", "parallel: no option '../model/kimi_k2'"),
        ("parallel=kimi_k2_gb300_256", "parallel: no option 'kimi_k2_gb300_256' (did you mean kimi_k2/gb300_256?)"),
        ("model=kimi_k2/tiny/x", "model: no option 'kimi_k2/tiny/x'"),
    ],
)
def test_a_group_choice_is_one_of_its_options(typed: str, said: str) -> None:
    """A model's options sit in its folder of the group (kimi_k2/gb300_256); a value that is none of the group's
    options, a path out of the group's folder included, is refused in one line before Hydra reads any file."""
    with pytest.raises(UserError) as refused:
        compose_run("kimi_k2_muon", [typed])
    [line] = refused.value.report()
    assert line.startswith(f"error: {said}"), line
    run = compose_run("kimi_k2_muon", ["parallel=kimi_k2/gb300_256"])
    assert run.parallel.name == "kimi_k2_gb300_256"
