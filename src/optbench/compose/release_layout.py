"""NVIDIA's layout of the run's release, as overrides of our config, so that the plan models what NVIDIA measured.

The recipes' parallel and train presets hold what NVIDIA measured with Bridge 0.3.x (containers 26.02 and
26.02.01); a few of them are 26.02's layout under a 26.02.01 name (Qwen3 30B-A3B B200: MBS 1, where 0.3.1 runs
MBS 4 with HybridEP). Every release's preset, as NVIDIA's own launcher executes it (0.3.1 included), may differ:
DeepSeek-V3 on GB300 runs MBS 1 from 26.06, on B300 PP8 VPP2 instead of PP16, Qwen3 30B-A3B full-iteration CUDA
graphs and EP-communication overlap. For a Bridge run with a preset, :func:`layout_overrides` returns the Hydra
overrides that put NVIDIA's values into our config (parallel layout, GBS/MBS, dispatcher, CUDA graphs, overlap,
recompute, pipeline layout), placed before the user's own: a value typed on the command line wins and the plan
lists it as a departure.

Which of our fields a preset supplies, and from which Bridge field, is declared in the schema (``preset=`` of each
field's :func:`~optbench.config.field_spec.setting`): layout, batch, kernels and memory for every intent; the
library-recipe values NVIDIA changed between releases (Kimi K2's init std 0.006 -> 0.02 and aux-loss 1e-3 -> 1e-4
from Bridge 0.4, Adam's eps 1e-5 in Bridge 0.3.0's Qwen3/DeepSeek-V3) for intent=reproduce only: intent=train keeps
the model's published values (conf/model, conf/optimizer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from optbench.compose.pipeline import balanced_pipeline_layout
from optbench.releases import presets
from optbench.releases.hydra_values import format_override
from optbench.config.field_table import preset_fields, value_at
from optbench.compose.recipe_choice import restates_recipe_choice
from optbench.config.overrides import CONFIG_GROUPS, typed_keys
from optbench.config.schema import RunConfig

REPRODUCE_FIELDS = {
    bridge: ours for bridge, ours in preset_fields("reproduce").items() if bridge not in preset_fields("train")
}
"""Library-recipe values taken from a later release for intent=reproduce only (the schema's preset='reproduce')."""


FOLLOW_THE_RELEASE = ("precision.fp4_param_gather",)
"""Fields a typed ``precision=`` group does not decide: the typed precision's own Bridge preset sets them differently
per release (``bf16_with_nvfp4_mixed`` keeps FP4 weight copies from Bridge 0.4.2, whose field is new there), so the
release's preset supplies them unless the field itself is typed."""


def _current(run: RunConfig, field: str) -> Any:
    return value_at(run, field)[1]


def release_values(run: RunConfig) -> dict[str, Any]:
    """Our config fields the run's release's preset sets (empty without a preset and for non-Bridge runs)."""
    preset = presets.preset_or_none(run)  # an unknown container is reported by validation, in one line
    if preset is None:
        return {}
    nvidia = {**preset.recipe_values, **preset.settings}  # NVIDIA's value of every field our adapter sets
    values: dict[str, Any] = {"parallel.num_gpus": preset.num_gpus}
    fields = preset_fields(run.intent)
    # Muon on an Adam preset keeps its own optimizer settings and the MXFP8 workaround layer-wise Muon needs.
    skip = presets.is_muon_field if preset.adapted_from_adam else (lambda key: False)
    values.update({field: nvidia[key] for key, field in fields.items() if key in nvidia and not skip(key)})
    if values.get("parallel.etp", 1) is None:  # Megatron's "as TP" (a dense model's presets): ours is 1 without experts
        del values["parallel.etp"]
    scope = values.get("parallel.cuda_graph_scope", [])
    if values.get("parallel.cuda_graph_impl") == "none" or scope is None:
        scope = []  # no graphs: the scope ("full", None in Bridge 0.6's flat recipes) decides nothing
    values["parallel.cuda_graph_scope"] = scope if isinstance(scope, list) else [scope]
    # set_workload_base_configs always sets it (None = no interleaving); the flat recipes leave it unset then.
    values["parallel.vpp"] = nvidia.get("model.virtual_pipeline_model_parallel_size")
    layout = nvidia.get("model.pipeline_model_parallel_layout")
    if isinstance(layout, (str, list)):
        values["parallel.pipeline_layout"] = presets.normalised(layout)
    elif (pp := values.get("parallel.pp", run.parallel.pp), values["parallel.vpp"]) != (
        run.parallel.pp,
        run.parallel.vpp,
    ):
        values["parallel.pipeline_layout"] = _derived_layout(run, pp, values["parallel.vpp"])
    return values


def _derived_layout(run: RunConfig, pp: int, vpp: int | None) -> list[list[str]] | None:
    """The layout of a release's new (pp, vpp) that names none: None (Bridge's recipe splits the decoder layers
    evenly) where they split evenly, else the balanced one with the embedding and the loss as a stage's share, as
    Bridge's ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split`` place them
    (Qwen3 235B-A22B: 94 layers over PP4 VPP12)."""
    stages = pp * (vpp or 1)
    layers = run.model.num_layers + run.model.mtp_num_layers
    if stages == 1 or layers % stages == 0:
        return None
    return balanced_pipeline_layout(run.model.num_layers, pp, vpp or 1, run.model.mtp_num_layers)


def layout_values(run: RunConfig, user_overrides: Sequence[str]) -> dict[str, Any]:
    """The fields (and values) that give ``run`` its release's layout, less what the user set (field or whole
    group; a group typed as the recipe picks it is no choice: :mod:`optbench.compose.recipe_choice`)."""
    # A sweep over precision=bf16,mxfp8 compares against the recipe's own MXFP8 run, FP8 attention and all.
    user_overrides = [o for o in user_overrides if not restates_recipe_choice(run.recipe, o)]
    typed = set(typed_keys(user_overrides))
    groups = typed & set(CONFIG_GROUPS)
    supplied = preset_fields(run.intent)
    kept = {supplied.get(key) for key in presets.departure_reasons(run)}
    out = {}
    for field, value in release_values(run).items():
        if field in typed or field in kept or (field.split(".")[0] in groups and field not in FOLLOW_THE_RELEASE):
            continue
        if field == "parallel.sequence_parallel" and "parallel.tp" in typed:
            continue  # it follows the typed TP (sequence_parallel_follows_tp), not the preset's
        if _current(run, field) != value:
            out[field] = value
    return out


def sequence_parallel_follows_tp(run: RunConfig, user_overrides: Sequence[str]) -> RunConfig:
    """``run`` with sequence parallelism on above TP 1 and off at TP 1 where the user typed ``parallel.tp`` and not
    ``parallel.sequence_parallel``, as NVIDIA's launcher sets it from a TP it is given (scripts/performance
    utils/overrides.py: ``sequence_parallel = bool(tensor_model_parallel_size > 1)``, Bridge 0.3-0.6). Megatron
    refuses sequence parallelism at TP 1, and an MoE model at TP > 1 with EP > 1 without it."""
    typed = set(typed_keys(user_overrides))
    wanted = run.parallel.tp > 1
    if "parallel.tp" not in typed or "parallel.sequence_parallel" in typed or run.parallel.sequence_parallel == wanted:
        return run
    return dataclasses.replace(run, parallel=dataclasses.replace(run.parallel, sequence_parallel=wanted))


def as_overrides(values: dict[str, Any]) -> list[str]:
    """Release values (:func:`layout_values`) as the Hydra overrides that set them."""
    return [format_override(field, value) for field, value in values.items()]


def layout_overrides(run: RunConfig, user_overrides: Sequence[str]) -> list[str]:
    """:func:`layout_values` as Hydra overrides, typed before the user's own."""
    return as_overrides(layout_values(run, user_overrides))
