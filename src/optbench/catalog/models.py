"""Model registry: the full-size models with a Megatron Bridge recipe and NVIDIA's names for them (data/models.csv).

Every model of NVIDIA's performance summary with a public transformer config is a catalog entry (its shape in
conf/model); those without a recipe of ours say why (``not_projected``): their rows are data.

One source for what src, tools and tests need to know about a model besides its shape (the shape is the Hydra
group ``conf/model/<model>.yaml``): the Bridge recipe function our adapter starts from, the Hugging Face config
Bridge reads, and the names NVIDIA's performance scripts and tables use.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from optbench.common.data_files import TEXT, Column, read_table


@dataclass(frozen=True)
class ModelEntry:
    """One model of the registry."""

    model: str
    """Our model id (conf/model/<model>.yaml)."""
    bridge_recipe_module: str
    """Module of the Megatron Bridge recipe function."""
    bridge_recipe_function: str
    """Megatron Bridge recipe function (returns a ConfigContainer)."""
    hf_config: str
    """Hugging Face config id Bridge's recipe reads (where the release's recipe reads one)."""
    nvidia_family: str
    """model_family_name in NVIDIA's scripts/performance."""
    nvidia_recipe: str
    """model_recipe_name in NVIDIA's scripts/performance."""
    nvidia_table_key: str
    """The model's name in Bridge's docs/performance-summary.md, lowercased without spaces or its "(...)" variant."""
    source: str
    """Where these names come from."""
    not_projected: str = ""
    """Why the model is a catalog entry only, its published rows data that the projection does not score (empty: it
    has recipes, and the projection scores its rows)."""
    optimizer_type_marker: str = ""
    """The release marker (optbench/data/bridge/fields-*.json) of the releases whose Bridge recipe function takes
    ``optimizer_type`` (muon or adam); empty: none does, and the overrides set the optimizer alone."""
    hub_config_marker: str = ""
    """The release marker of the releases whose recipe function reads ``hf_config`` from the hub; empty: every one."""


@lru_cache(maxsize=1)
def model_registry() -> dict[str, ModelEntry]:
    """Every model with a Megatron Bridge recipe, by our id."""
    columns = {name: Column(optional=True) if name in OPTIONAL_COLUMNS else TEXT for name in MODEL_COLUMNS}
    return {
        row["model"]: ModelEntry(**{name: row[name] or "" for name in MODEL_COLUMNS})
        for row in read_table("models.csv", columns)
    }


OPTIONAL_COLUMNS = ("hf_config", "not_projected", "optimizer_type_marker", "hub_config_marker")
MODEL_COLUMNS = (
    "model",
    "bridge_recipe_module",
    "bridge_recipe_function",
    "hf_config",
    "nvidia_family",
    "nvidia_recipe",
    "nvidia_table_key",
    "source",
    "not_projected",
    "optimizer_type_marker",
    "hub_config_marker",
)
