"""Reading Megatron Bridge 0.3.1 without importing it, and Megatron Core's config classes as installed.

``import megatron.bridge`` needs CUDA builds of Transformer Engine, so the Bridge side is read from
its installed source (``pip install --no-deps megatron-bridge==0.3.1``, done by ``make setup``): class
fields by parsing the source (ast), one pure-Python module (the override mechanism) by loading its
file on its own. Megatron Core's dataclasses import on a CPU and are used directly.

The helpers here are shared by the other test_bridge_* files; the tests here check the helpers.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import sys
import warnings
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

BRIDGE_VERSION = "0.3.1"
MCORE_VERSION = "0.16.1"

# ConfigContainer section -> (Bridge source file, class) pairs whose fields it has (Megatron Core bases below).
BRIDGE_SECTION_CLASSES: dict[str, tuple[tuple[str, str], ...]] = {
    "model": (
        ("models/gpt_provider.py", "GPTModelProvider"),
        ("models/transformer_config.py", "TransformerConfig"),
        ("models/transformer_config.py", "MLATransformerConfig"),
    ),
    "train": (("training/config.py", "TrainingConfig"),),
    "optimizer": (("training/config.py", "OptimizerConfig"),),
    "ddp": (("training/config.py", "DistributedDataParallelConfig"),),
    "scheduler": (("training/config.py", "SchedulerConfig"),),
    "dataset": (("training/config.py", "GPTDatasetConfig"), ("training/config.py", "DataloaderConfig")),
    "logger": (("training/config.py", "LoggerConfig"),),
    "tokenizer": (("training/tokenizers/config.py", "TokenizerConfig"),),
    "checkpoint": (("training/config.py", "CheckpointConfig"),),
    "rng": (("training/config.py", "RNGConfig"),),
    "dist": (("training/config.py", "DistributedInitConfig"),),
    "rerun_state_machine": (("training/config.py", "RerunStateMachineConfig"),),
    "mixed_precision": (("training/mixed_precision.py", "MixedPrecisionConfig"),),
    "comm_overlap": (("training/comm_overlap.py", "CommOverlapConfig"),),
}
MODEL_PROVIDER = {
    "kimi_k2": ("models/kimi/kimi_provider.py", "KimiK2Provider"),
    "deepseek_v3": ("models/mla_provider.py", "MLAModelProvider"),
    "qwen3_30b_a3b": ("models/gpt_provider.py", "GPTModelProvider"),  # AutoBridge's Qwen3 MoE provider class
    "qwen3_235b_a22b": ("models/gpt_provider.py", "GPTModelProvider"),
    "llama3_70b": ("models/gpt_provider.py", "GPTModelProvider"),  # Llama3ModelProvider70B adds RoPE scaling only
    "llama31_405b": ("models/gpt_provider.py", "GPTModelProvider"),
    "gpt_oss_120b": ("models/gpt_oss/gpt_oss_provider.py", "GPTOSSProvider"),
}


def bridge_root() -> Path:
    """The installed megatron/bridge folder (found without importing megatron.bridge)."""
    spec = importlib.util.find_spec("megatron.bridge")
    assert spec is not None and spec.submodule_search_locations, (
        "Megatron Bridge's source is not installed: pip install --no-deps megatron-bridge==0.3.1 (make setup does)"
    )
    return Path(list(spec.submodule_search_locations)[0])


@functools.lru_cache(maxsize=None)
def _tree(relative: str) -> ast.Module:
    return ast.parse((bridge_root() / relative).read_text())


def class_node(relative: str, name: str) -> ast.ClassDef:
    for node in ast.walk(_tree(relative)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"class {name} not found in megatron/bridge/{relative}")


def class_fields(relative: str, name: str) -> dict[str, ast.expr | None]:
    """Annotated class attributes (dataclass fields) declared in the class body, with their default expression."""
    fields = {}
    for stmt in class_node(relative, name).body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if "ClassVar" not in ast.unparse(stmt.annotation):
                fields[stmt.target.id] = stmt.value
    return fields


def literal_defaults(relative: str, name: str) -> dict[str, Any]:
    """Fields whose default is a Python literal (or a default_factory lambda returning a list expression)."""
    values = {}
    for field_name, node in class_fields(relative, name).items():
        if node is None:
            continue
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "field":
            factory = next((k.value for k in node.keywords if k.arg == "default_factory"), None)
            if isinstance(factory, ast.Lambda):
                values[field_name] = eval(compile(ast.Expression(factory.body), "<ast>", "eval"), {"__builtins__": {}})
            continue
        try:
            values[field_name] = ast.literal_eval(node)
        except ValueError:
            continue
    return values


def function_names(relative: str) -> set[str]:
    return {node.name for node in _tree(relative).body if isinstance(node, ast.FunctionDef)}


def function_args(relative: str, name: str) -> list[str]:
    node = next(n for n in _tree(relative).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return [arg.arg for arg in node.args.args + node.args.kwonlyargs]


def registered_mixed_precision_presets() -> set[str]:
    """Functions decorated with @register in Bridge's mixed_precision.py (the preset names)."""
    return {
        node.name
        for node in _tree("training/mixed_precision.py").body
        if isinstance(node, ast.FunctionDef) and any(ast.unparse(d) == "register" for d in node.decorator_list)
    }


def kimi_k2_layout(pp: int, vpp: int) -> list[list[str]]:
    """Bridge's own Kimi K2 pipeline layout for (pp, vpp), evaluated from the recipe's source."""
    for node in ast.walk(_tree("recipes/kimi/kimi_k2.py")):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "map_pp_vp_to_layout":
            for key, value in zip(node.value.keys, node.value.values):
                if ast.literal_eval(key) == (pp, vpp):
                    return eval(compile(ast.Expression(value), "<ast>", "eval"), {"__builtins__": {}})
    raise AssertionError(f"no Kimi K2 layout for {(pp, vpp)}")


@functools.lru_cache(maxsize=None)
def mcore() -> ModuleType:
    """Megatron Core's config classes (they import on a CPU; TE/Apex fallbacks warn)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core import distributed, optimizer
        from megatron.core.datasets import gpt_dataset
        from megatron.core.transformer import transformer_config

    module = ModuleType("mcore_configs")
    module.TransformerConfig = transformer_config.TransformerConfig
    module.MLATransformerConfig = transformer_config.MLATransformerConfig
    module.OptimizerConfig = optimizer.OptimizerConfig
    module.DistributedDataParallelConfig = distributed.DistributedDataParallelConfig
    module.GPTDatasetConfig = gpt_dataset.GPTDatasetConfig
    module.transformer_config = transformer_config
    return module


def mcore_fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def section_fields(model: str) -> dict[str, set[str]]:
    """Every field name each ConfigContainer section has for a model, Bridge (ast) and Megatron Core (installed)."""
    m = mcore()
    sections = {
        section: set().union(*(class_fields(path, name) for path, name in classes))
        for section, classes in BRIDGE_SECTION_CLASSES.items()
    }
    sections["model"] |= set(class_fields(*MODEL_PROVIDER[model]))
    mla = MODEL_PROVIDER[model][1] != "GPTModelProvider"
    sections["model"] |= mcore_fields(m.MLATransformerConfig if mla else m.TransformerConfig)
    sections["optimizer"] |= mcore_fields(m.OptimizerConfig)
    sections["ddp"] |= mcore_fields(m.DistributedDataParallelConfig)
    sections["dataset"] |= mcore_fields(m.GPTDatasetConfig)
    return sections


def container_sections() -> set[str]:
    return set(class_fields("training/config.py", "ConfigContainer"))


@functools.lru_cache(maxsize=None)
def bridge_override_module() -> ModuleType:
    """Bridge's own override mechanism (training/utils/omegaconf_utils.py), loaded from its file alone.

    The module imports torch, hydra and omegaconf only, so it runs here exactly as in the container.
    """
    path = bridge_root() / "training" / "utils" / "omegaconf_utils.py"
    spec = importlib.util.spec_from_file_location("bridge_omegaconf_utils", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def stand_in_container(model: str, without: tuple[str, ...] = ()) -> Any:
    """A ConfigContainer stand-in: one dataclass per section with exactly Bridge's field names (all None), less the
    ``section.field`` names in ``without`` (a release that dropped them)."""
    sections = {}
    for section, names in section_fields(model).items():
        kept = sorted(n for n in names if f"{section}.{n}" not in without)
        cls = dataclasses.make_dataclass(
            f"StandIn_{section}", [(name, Any, dataclasses.field(default=None)) for name in kept]
        )
        sections[section] = cls()
    container = dataclasses.make_dataclass(
        "StandInContainer", [(s, Any, dataclasses.field(default=None)) for s in sections]
    )
    return container(**sections)


# ---------------------------------------------------------------------------------------------
# Checks of the helpers themselves
# ---------------------------------------------------------------------------------------------


def test_pinned_versions_are_installed() -> None:
    assert metadata.version("megatron-bridge") == BRIDGE_VERSION
    assert metadata.version("megatron-core") == MCORE_VERSION


def test_ast_reading_finds_known_fields() -> None:
    assert {"tensor_model_parallel_size", "seq_length", "vocab_size"} <= section_fields("kimi_k2")["model"]
    assert {"q_lora_rank", "rotary_scaling_factor"} <= section_fields("kimi_k2")["model"]
    assert "q_lora_rank" not in section_fields("qwen3_30b_a3b")["model"]
    assert {"wandb_project", "wandb_exp_name", "wandb_save_dir", "log_throughput"} <= section_fields("kimi_k2")[
        "logger"
    ]
    assert "muon_tp_mode" in section_fields("kimi_k2")["optimizer"]
    assert {"model", "optimizer", "ddp", "mixed_precision", "comm_overlap"} <= container_sections()
    assert literal_defaults("models/kimi/kimi_provider.py", "KimiK2Provider")["moe_layer_freq"] == [0] + [1] * 60


def test_bridge_override_module_loads_without_bridge() -> None:
    module = bridge_override_module()
    assert callable(module.process_config_with_overrides)
    assert "megatron.bridge" not in sys.modules
