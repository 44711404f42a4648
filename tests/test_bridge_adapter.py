"""The Bridge adapter: every override names a real field of Megatron Bridge 0.3.1 / Megatron Core 0.16.1,
applies through Bridge's own override mechanism, passes Megatron Core's own validation, and the GB300
recipes reproduce the published presets (src/optbench/data/bridge/presets-*.json) exactly."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from conftest import ON_0_3_1
from test_bridge_source import (
    bridge_override_module,
    class_fields,
    container_sections,
    function_args,
    function_names,
    kimi_k2_layout,
    literal_defaults,
    mcore,
    mcore_fields,
    registered_mixed_precision_presets,
    section_fields,
    stand_in_container,
)

from bridge_env.conformance_recipes import as_nvidia_ran_it
from conftest import REPO
from optbench.engine.bridge.adapter import bridge_overrides, bridge_recipe, bridge_setup, override_items
from optbench.releases.hydra_values import hydra_value
from optbench.compose.recipe import compose_run, list_group_options, list_recipes
from optbench.config.schema import RunConfig
from optbench.common.errors import UserError
from optbench.resolve import resolve

RESULTS = "/nonexistent/optbench-results"
"""Overrides only name paths under results_dir; nothing is written there."""
BRIDGE_RECIPES = [
    r
    for r in list_recipes()
    if "engine: megatron_bridge" in (REPO / "recipes" / f"{r}.yaml").read_text()
    and not r.endswith(("_soap", "_adaptive_muon"))
]
"""Recipes Bridge 0.3.1 can run (SOAP and AdaMuon arrive with Core 0.18: test_bridge_conformance checks them there)."""


@functools.lru_cache(maxsize=None)
def _composed(recipe: str, overrides: tuple[str, ...]) -> RunConfig:
    then = as_nvidia_ran_it(recipe, ON_0_3_1.split("=", 1)[1])
    return compose_run(recipe, [ON_0_3_1, *then, *overrides, f"results_dir={RESULTS}"])


def composed(recipe: str, overrides: Sequence[str] = ()) -> RunConfig:
    """A resolved copy of a composed run (composition is cached; resolving copies it and fixes the job's run id)."""
    return resolve(_composed(recipe, tuple(overrides))).run


VARIANTS = [
    ("kimi_k2_muon", []),
    ("kimi_k2_muon", ["optimizer.muon.layer_wise=false", "optimizer.muon.fp32_matmul_prec=high", "precision=bf16"]),
    (
        "kimi_k2_muon",
        [
            "optimizer.muon.qk_clip=true",
            "optimizer.muon.qk_clip_threshold=50",
            "train.eval_interval=100",
            "train.eval_iters=2",
        ],
    ),
    ("kimi_k2_adamw", ["precision=fp8_cs", "train.save_interval=50", "train.async_save=true", "resume=true"]),
    (
        "qwen3_30b_a3b_muon",
        [
            "data=indexed",
            "data.path=[0.3,/data/a_text_document,0.7,/data/b_text_document]",
            "data.tokenizer=Qwen/Qwen3-30B-A3B",
            "logger=none",
            "data.split='90,8,2'",
        ],
    ),
    ("qwen3_30b_a3b_adamw", ["parallel.moe_token_dispatcher=alltoall", "parallel.moe_flex_dispatcher_backend=null"]),
]


def items_of(recipe: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    return dict(override_items(composed(recipe, overrides)))


def section_and_field(key: str) -> tuple[str, str]:
    section, _, field = key.partition(".")
    assert "." not in field, key
    return section, field


# ---------------------------------------------------------------------------------------------
# Field names and Bridge's override mechanism
# ---------------------------------------------------------------------------------------------


def test_every_bridge_recipe_is_covered() -> None:
    assert {"kimi_k2_muon", "kimi_k2_adamw", "qwen3_30b_a3b_muon", "qwen3_30b_a3b_adamw"} <= set(BRIDGE_RECIPES)


@pytest.mark.parametrize("recipe", BRIDGE_RECIPES + [f"{r}+{i}" for i, (r, _) in enumerate(VARIANTS)])
def test_every_override_key_is_a_field_of_bridge_or_megatron_core(recipe: str) -> None:
    name, _, index = recipe.partition("+")
    overrides = VARIANTS[int(index)][1] if index else []
    run = composed(name, overrides)
    fields = section_fields(run.model.name)
    sections = container_sections()
    for key, _ in override_items(run):
        section, field = section_and_field(key)
        assert section in sections, key
        # a whole section (NVIDIA's GPT-OSS launcher runs without comm_overlap) is a field of the container itself
        assert not field or field in fields[section], f"{key}: not a field of Bridge 0.3.1 / Core 0.16.1 {section}"


@pytest.mark.parametrize("recipe,overrides", VARIANTS)
def test_overrides_apply_through_bridges_own_mechanism(recipe: str, overrides: list[str]) -> None:
    """process_config_with_overrides (Bridge's file, loaded alone) on a container with Bridge's field names."""
    run = composed(recipe, overrides)
    container = stand_in_container(run.model.name)
    bridge_override_module().process_config_with_overrides(container, cli_overrides=bridge_overrides(run))
    for key, value in override_items(run):
        section, field = section_and_field(key)
        assert getattr(getattr(container, section), field) == value, key


def test_a_misspelled_key_is_refused_by_bridges_mechanism() -> None:
    module = bridge_override_module()
    with pytest.raises(module.OverridesError):
        module.process_config_with_overrides(
            stand_in_container("kimi_k2"), cli_overrides=["model.tensor_parallel_size=2"]
        )


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        64,
        -1,
        3e-4,
        1e-8,
        2.827,
        "dist_muon",
        "none",
        "true",
        "null",
        "1.5",
        "nan",
        "/lustre/data/x-y_text_document",
        "nvcr.io/nvidia/nemo:26.02",
        "it's",
        "a\\b",
        "back\\",
        "a\\'b",
        'x"; rm -rf / #',
        "a,b",
        "[x]",
        "hello world",
        [],
        [1, 2],
        [[0, 1], ["embedding", "loss"]],
        [["a b"], None],
    ],
)
def test_hydra_values_read_back_exactly(value: Any) -> None:
    [parsed] = OverridesParser.create().parse_overrides([f"k={hydra_value(value)}"])
    assert parsed.value() == value and type(parsed.value()) is type(value)


def test_every_override_string_parses_back_to_its_value() -> None:
    run = composed("kimi_k2_muon")
    parsed = OverridesParser.create().parse_overrides(bridge_overrides(run))
    assert [(p.key_or_group, p.value()) for p in parsed] == override_items(run)


# ---------------------------------------------------------------------------------------------
# Megatron Core's own validation
# ---------------------------------------------------------------------------------------------


NEEDS_TE_KERNELS = {"apply_rope_fusion", "use_precision_aware_optimizer"}
"""Fields Megatron Core validates by importing a TE kernel (the precision-aware optimizer: TE's FusedAdam), absent
here; tests/test_bridge_conformance.py checks them with the real Bridge and its stand-ins."""


def _section(items: dict[str, Any], section: str, allowed: set[str]) -> dict[str, Any]:
    import torch

    values = {}
    for key, value in items.items():
        s, field = section_and_field(key)
        if s == section and field in allowed and field not in NEEDS_TE_KERNELS:
            # Bridge turns "torch.float32" back into a dtype when it applies the override.
            values[field] = (
                getattr(torch, value[6:]) if isinstance(value, str) and value.startswith("torch.") else value
            )
    return values


def _mixed_precision(items: dict[str, Any]) -> dict[str, Any]:
    """What MixedPrecisionConfig.setup copies onto model/optimizer/DDP: the bf16 preset base plus our fields."""
    base = {"bf16": True, "params_dtype": torch.bfloat16, "pipeline_dtype": torch.bfloat16}
    return base | {k.split(".", 1)[1]: v for k, v in items.items() if k.startswith("mixed_precision.")}


def _instantiate(cls: type, *layers: dict[str, Any]) -> Any:
    allowed = mcore_fields(cls)
    kwargs: dict[str, Any] = {}
    for layer in layers:
        kwargs |= {k: v for k, v in layer.items() if k in allowed}
    return cls(**kwargs)


@pytest.fixture
def te_is_new_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    """Transformer Engine cannot be installed on a CPU machine; the NeMo 26.02 container ships TE 2.x.

    TransformerConfig asks TE's version only for FP8 / CUDA-graph features; those questions are
    answered "new enough". Every other check of __post_init__ runs as is.
    """
    monkeypatch.setattr(mcore().transformer_config, "is_te_min_version", lambda *args, **kwargs: True)


@pytest.mark.parametrize("recipe", ["kimi_k2_muon", "kimi_k2_adamw"])
def test_kimi_k2_model_config_passes_megatron_core_validation(recipe: str, te_is_new_enough: None) -> None:
    items = items_of(recipe)
    m = mcore()
    provider = literal_defaults("models/kimi/kimi_provider.py", "KimiK2Provider")
    config = _instantiate(
        m.MLATransformerConfig,
        provider,
        _section(items, "model", mcore_fields(m.MLATransformerConfig)),
        _mixed_precision(items),
    )
    assert config.pipeline_model_parallel_layout is not None and config.recompute_modules == ["mla_up_proj"]
    assert config.fp8_recipe == "mxfp8" and config.moe_flex_dispatcher_backend == "hybridep"


@pytest.mark.parametrize("recipe", ["qwen3_30b_a3b_muon", "qwen3_30b_a3b_adamw"])
def test_qwen3_model_config_passes_megatron_core_validation(recipe: str, te_is_new_enough: None) -> None:
    items = items_of(recipe)
    m = mcore()
    # What AutoBridge derives from the Hugging Face config besides our shape fields (Qwen3 MoE: SwiGLU, RMSNorm, no
    # bias).
    hf_derived = {
        "gated_linear_unit": True,
        "normalization": "RMSNorm",
        "add_bias_linear": False,
        "moe_grouped_gemm": True,
    }
    config = _instantiate(
        m.TransformerConfig,
        hf_derived,
        _section(items, "model", mcore_fields(m.TransformerConfig)),
        _mixed_precision(items),
    )
    assert [scope.name for scope in config.cuda_graph_scope] == ["moe_router", "moe_preprocess"]


@pytest.mark.parametrize("recipe", BRIDGE_RECIPES)
def test_optimizer_and_ddp_configs_pass_megatron_core_validation(recipe: str) -> None:
    items = items_of(recipe)
    m = mcore()
    precision = _mixed_precision(items)
    optimizer = _instantiate(
        m.OptimizerConfig, precision, _section(items, "optimizer", mcore_fields(m.OptimizerConfig))
    )
    ddp = _instantiate(
        m.DistributedDataParallelConfig,
        precision,
        _section(items, "ddp", mcore_fields(m.DistributedDataParallelConfig)),
    )
    if "muon" in optimizer.optimizer:
        # Megatron's Muon refuses the element-wise distributed optimizer and FP8 parameter gather.
        assert not optimizer.use_distributed_optimizer and not ddp.use_distributed_optimizer
        assert not ddp.fp8_param_gather and not ddp.reuse_grad_buf_for_mxfp8_param_ag
    else:
        assert optimizer.use_distributed_optimizer and ddp.use_distributed_optimizer and ddp.overlap_param_gather


def test_ddp_validation_would_catch_an_inconsistent_mxfp8_setting() -> None:
    with pytest.raises(AssertionError, match="Reuse grad buffer"):
        mcore().DistributedDataParallelConfig(fp8_param_gather=False, reuse_grad_buf_for_mxfp8_param_ag=True)


# ---------------------------------------------------------------------------------------------
# The published GB300 presets (src/optbench/data/bridge/presets-0.3.1.json) and the recipe functions
# ---------------------------------------------------------------------------------------------

KIMI_K2_GB300 = {
    "model.tensor_model_parallel_size": 1,
    "model.pipeline_model_parallel_size": 4,
    "model.virtual_pipeline_model_parallel_size": 4,
    "model.expert_model_parallel_size": 64,
    "model.expert_tensor_parallel_size": 1,
    "model.context_parallel_size": 1,
    "train.global_batch_size": 4096,
    "train.micro_batch_size": 2,
    "model.seq_length": 4096,
    "dataset.sequence_length": 4096,
    "mixed_precision.fp8": "e4m3",
    "mixed_precision.fp8_recipe": "mxfp8",
    "model.moe_token_dispatcher_type": "flex",
    "model.moe_flex_dispatcher_backend": "hybridep",
    "model.recompute_granularity": "selective",
    "model.recompute_modules": ["mla_up_proj"],
    "model.cuda_graph_impl": "none",
}
QWEN3_GB300 = {
    "model.tensor_model_parallel_size": 1,
    "model.pipeline_model_parallel_size": 1,
    "model.virtual_pipeline_model_parallel_size": None,
    "model.expert_model_parallel_size": 8,
    "model.expert_tensor_parallel_size": 1,
    "train.global_batch_size": 512,
    "train.micro_batch_size": 8,
    "model.seq_length": 4096,
    "dataset.sequence_length": 4096,
    "mixed_precision.fp8": "e4m3",
    "mixed_precision.fp8_recipe": "mxfp8",
    "model.moe_token_dispatcher_type": "flex",
    "model.moe_flex_dispatcher_backend": "hybridep",
    "model.cuda_graph_impl": "transformer_engine",
    "model.cuda_graph_scope": ["moe_router", "moe_preprocess"],
    "comm_overlap.tp_comm_overlap": True,
}
MUON = {
    "optimizer.optimizer": "dist_muon",
    "optimizer.use_distributed_optimizer": False,
    "ddp.use_distributed_optimizer": False,
    "ddp.overlap_param_gather": False,
    "mixed_precision.fp8_param_gather": False,
    "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": False,
}
ADAM = {
    "optimizer.optimizer": "adam",
    "optimizer.use_distributed_optimizer": True,
    "ddp.use_distributed_optimizer": True,
    "ddp.overlap_param_gather": True,
    # bf16_with_mxfp8_mixed's own values: only the layer-wise Muon optimizer needs them off.
    "mixed_precision.fp8_param_gather": True,
    "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": True,
}


@pytest.mark.parametrize(
    "recipe,expected",
    [
        ("kimi_k2_muon", KIMI_K2_GB300 | MUON),
        ("kimi_k2_adamw", KIMI_K2_GB300 | ADAM),
        ("qwen3_30b_a3b_muon", QWEN3_GB300 | MUON),
        ("qwen3_30b_a3b_adamw", QWEN3_GB300 | ADAM),
    ],
)
def test_gb300_recipes_reproduce_the_published_presets(recipe: str, expected: dict[str, Any]) -> None:
    items = items_of(recipe)
    assert {key: items.get(key) for key in expected} == expected
    assert bridge_setup(resolve(composed(recipe)).run).mixed_precision == "bf16_with_mxfp8_mixed"


def test_kimi_k2_pipeline_layout_is_bridges_own() -> None:
    items = items_of("kimi_k2_muon")
    assert items["model.pipeline_model_parallel_layout"] == kimi_k2_layout(4, 4)


def test_an_explicit_pipeline_layout_turns_the_recipes_own_split_off() -> None:
    """Megatron Core refuses a layout beside account_for_embedding/loss_in_pipeline_split (TransformerConfig:
    "pipeline_model_parallel_layout cannot be set with other pipeline layout arguments"), which the Llama 3.1 405B
    and Qwen3 235B-A22B recipes turn on: the plan turns them off wherever it writes a layout out (the real Bridge
    0.6.0 built qwen3_235b_a22b_adamw only so: tests/test_bridge_conformance.py)."""
    flags = ("model.account_for_embedding_in_pipeline_split", "model.account_for_loss_in_pipeline_split")
    with_layout = items_of("kimi_k2_muon")
    assert with_layout["model.pipeline_model_parallel_layout"] and all(with_layout[f] is False for f in flags)
    without = items_of("qwen3_30b_a3b_muon")
    assert without.get("model.pipeline_model_parallel_layout") is None and not any(f in without for f in flags)


def test_kimi_k2_model_shape_matches_bridges_provider() -> None:
    provider = literal_defaults("models/kimi/kimi_provider.py", "KimiK2Provider")
    items = items_of("kimi_k2_muon")
    shape = {
        k.split(".", 1)[1]: v for k, v in items.items() if k.startswith("model.") and k.split(".", 1)[1] in provider
    }
    shape.pop(
        "moe_shared_expert_overlap"
    )  # the flex dispatcher turns it off, as Bridge's apply_flex_dispatcher_backend
    shape.pop("apply_rope_fusion")  # NVIDIA's preset turns it on (a kernel choice, not the shape)
    shape.pop("seq_length")
    for field in (
        "moe_token_dispatcher_type",
        "recompute_granularity",
        "recompute_modules",
        "recompute_method",
        "recompute_num_layers",
        "num_layers_in_first_pipeline_stage",
        "num_layers_in_last_pipeline_stage",
    ):
        shape.pop(field, None)  # parallel settings, checked against the preset above
    assert len(shape) >= 25
    assert {k: provider[k] for k in shape} == shape


@pytest.mark.parametrize("recipe", BRIDGE_RECIPES)
def test_recipe_functions_exist_in_bridge(recipe: str) -> None:
    target = bridge_recipe(composed(recipe))
    relative = target.module.removeprefix("megatron.bridge.").replace(".", "/") + ".py"
    assert target.function in function_names(relative)
    assert set(target.kwargs) <= set(function_args(relative, target.function))


def test_every_precision_preset_is_registered_in_bridge() -> None:
    presets = {
        composed("kimi_k2_adamw", [f"precision={name}"]).precision.bridge_mixed_precision
        for name in list_group_options("precision")
    }
    assert presets <= registered_mixed_precision_presets()


# ---------------------------------------------------------------------------------------------
# Optimizer, schedule, data, logger and checkpoint mapping
# ---------------------------------------------------------------------------------------------


def test_every_muon_field_of_megatron_core_is_set() -> None:
    items = items_of("kimi_k2_muon")
    emitted = {k.split(".", 1)[1] for k in items if k.startswith("optimizer.muon_")}
    assert emitted == {f for f in mcore_fields(mcore().OptimizerConfig) if f.startswith("muon_")}
    assert items["optimizer.muon_fp32_matmul_prec"] == "medium"  # auto -> bf16 Newton-Schulz on a GPU


def test_muon_variants() -> None:
    items = items_of(
        "kimi_k2_muon",
        [
            "optimizer.muon.layer_wise=false",
            "optimizer.muon.fp32_matmul_prec=high",
            "optimizer.muon.tp_mode=duplicated",
            "optimizer.muon.extra_scale_factor=0.2",
        ],
    )
    assert items["optimizer.optimizer"] == "muon"
    assert items["optimizer.muon_fp32_matmul_prec"] == "high"
    assert items["optimizer.muon_tp_mode"] == "duplicated" and items["optimizer.muon_extra_scale_factor"] == 0.2
    assert not any(k.startswith("optimizer.muon_") for k in items_of("qwen3_30b_a3b_adamw"))


def test_weight_decay_reaches_the_scheduler_megatron_applies() -> None:
    items = items_of("qwen3_30b_a3b_muon", ["optimizer.weight_decay=0.05"])
    assert items["scheduler.start_weight_decay"] == items["scheduler.end_weight_decay"] == 0.05
    assert items["scheduler.weight_decay_incr_style"] == "constant"
    # With an NVIDIA preset, optimizer.weight_decay (never applied: the scheduler sets it every step) stays the
    # preset's.
    assert "optimizer.weight_decay" not in items
    no_preset = items_of("qwen3_30b_a3b_muon", ["optimizer.weight_decay=0.05", "intent=train", "precision=fp16"])
    assert no_preset["optimizer.weight_decay"] == 0.05


def test_grad_reduce_dtype_is_ours_not_the_presets() -> None:
    items = items_of("kimi_k2_adamw")
    assert items["mixed_precision.grad_reduce_in_fp32"] is False and items["ddp.grad_reduce_in_fp32"] is False


def test_mock_data_uses_the_null_tokenizer() -> None:
    items = items_of("kimi_k2_muon")
    assert items["tokenizer.tokenizer_type"] == "NullTokenizer" and items["tokenizer.vocab_size"] == 163840
    assert items["dataset.blend"] is None


def test_indexed_data_uses_a_tokenizer_path_and_a_weighted_blend() -> None:
    items = items_of("qwen3_30b_a3b_muon", VARIANTS[4][1])
    assert items["dataset.blend"] == [["/data/a_text_document", "/data/b_text_document"], [0.3, 0.7]]
    assert items["dataset.split"] == "90,8,2"
    assert items["tokenizer.tokenizer_type"] == "HuggingFaceTokenizer"
    assert items["tokenizer.tokenizer_model"] == "Qwen/Qwen3-30B-A3B"


def test_synthetic_data_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match="mock or indexed"):
        override_items(composed("kimi_k2_muon", ["data=synthetic"]))


def test_logger_and_checkpoint() -> None:
    items = items_of("kimi_k2_adamw", ["train.save_interval=50", "train.async_save=true", "resume=true", "run_id=r1"])
    assert items["checkpoint.save"] == items["checkpoint.load"] == f"{RESULTS}/checkpoints/r1"
    assert items["checkpoint.save_interval"] == 50 and items["checkpoint.async_save"] is True
    assert items["logger.wandb_exp_name"] == "r1" and items["logger.wandb_save_dir"] == f"{RESULTS}/wandb"
    assert items["logger.log_throughput"] is True and items["logger.wandb_project"] == "optbench"
    fresh = items_of("kimi_k2_adamw", ["logger=none"])
    assert (
        fresh["checkpoint.save"] is None and fresh["checkpoint.load"] is None and fresh["logger.wandb_project"] is None
    )


def test_free_text_with_interpolation_is_refused() -> None:
    # An escaped interpolation survives composition as text; Bridge's OmegaConf pass would resolve it.
    with pytest.raises(UserError, match="logger.wandb_project"):
        override_items(composed("kimi_k2_muon", ["logger.wandb_project='\\${oc.env:HOME}'"]))


def test_local_engine_recipes_have_no_bridge_setup() -> None:
    with pytest.raises(UserError, match="engine"):
        override_items(composed("kimi_k2_tiny_muon"))
    assert class_fields("training/config.py", "ConfigContainer")  # sanity: the source is readable
    assert dataclasses.is_dataclass(stand_in_container("kimi_k2"))
