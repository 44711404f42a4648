"""From a composed run config to Megatron Bridge: a recipe function to start from, and overrides.

Megatron Bridge (0.3.1) builds a run as a ``ConfigContainer`` returned by a recipe function
(``kimi_k2_pretrain_config``, ``qwen3_30b_a3b_pretrain_config``, ...). This module chooses that
function and lists the dotted ``section.field=value`` overrides (Hydra syntax, applied inside the
container by Bridge's own ``process_config_with_overrides``) that turn the recipe into exactly the
run our config describes: NVIDIA's preset for the run (:mod:`optbench.releases.presets`, per intent)
first, then our config's own sections (:mod:`optbench.engine.bridge.sections`).

Two settings are structural and cannot be dotted overrides, so the entry point applies them first,
as NVIDIA's performance scripts do: the ``mixed_precision`` section is replaced by the Bridge preset
our precision names (Qwen3's recipe holds the string ``"bf16_mixed"``, not a dataclass), and a
``comm_overlap`` section is created when the recipe has none. Both are recorded in the plan.

Pure Python: nothing here imports Bridge, Megatron Core or torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from optbench.releases import presets, versions
from optbench.releases.known_issues import issues_for
from optbench.releases.hydra_values import format_override
from optbench.engine.bridge.sections import Item, our_items, switched_off
from optbench.config.schema import RunConfig
from optbench.common.errors import Problem, UserError
from optbench.catalog.models import model_registry


@dataclass(frozen=True)
class BridgeRecipe:
    """A Megatron Bridge recipe function: ``<module>.<function>(**kwargs) -> ConfigContainer``."""

    module: str
    """Import path of the module that defines the function (the kimi folder is not re-exported)."""
    function: str
    """Name of the recipe function."""
    kwargs: dict[str, str]
    """Keyword arguments of the call."""
    hf_config: Optional[str] = None
    """Hugging Face model id whose config.json the recipe reads from the hub or the mounted cache
    (AutoBridge.from_hf_pretrained; Kimi K2 from Bridge 0.4 with trust_remote_code)."""


@dataclass(frozen=True)
class BridgeSetup:
    """Everything the in-container entry point needs to build the ConfigContainer."""

    recipe: BridgeRecipe
    """The recipe function to start from."""
    mixed_precision: str
    """Bridge mixed-precision preset that replaces the recipe's ``mixed_precision`` before the overrides."""
    overrides: tuple[str, ...]
    """Dotted Hydra overrides, applied in order by Bridge's ``process_config_with_overrides``."""
    intent: str = "train"
    """reproduce or train (:mod:`optbench.releases.presets`)."""
    preset: Optional[dict[str, Any]] = None
    """Which NVIDIA preset the overrides start from, and where the run departs from it (None: no preset)."""
    unverified: Optional[dict[str, Any]] = None
    """For a container newer than the newest checked one: the container, the checked one whose facts the plan
    assumes (its Bridge and Core), and the public notes that apply to this run (None: a checked container)."""
    known_issues: tuple[dict[str, Any], ...] = ()
    """Upstream issues that apply to this run (:mod:`optbench.releases.known_issues`)."""

    def as_dict(self) -> dict[str, Any]:
        """The ``bridge`` section of plan.json."""
        return {
            "intent": self.intent,
            "preset": self.preset,
            "recipe": {
                "module": self.recipe.module,
                "function": self.recipe.function,
                "kwargs": dict(self.recipe.kwargs),
                "hf_config": self.recipe.hf_config,
            },
            "mixed_precision_preset": self.mixed_precision,
            "sections_created_if_missing": list(SECTIONS_CREATED_IF_MISSING),
            "overrides": list(self.overrides),
            **({"unverified": self.unverified} if self.unverified else {}),
            **({"known_issues": list(self.known_issues)} if self.known_issues else {}),
        }

    @classmethod
    def from_dict(cls, section: dict[str, Any]) -> BridgeSetup:
        """The setup a plan's ``bridge`` section recorded (:meth:`as_dict` read back)."""
        recipe = section["recipe"]
        return cls(
            recipe=BridgeRecipe(recipe["module"], recipe["function"], dict(recipe["kwargs"]), recipe.get("hf_config")),
            mixed_precision=section["mixed_precision_preset"],
            overrides=tuple(section["overrides"]),
            intent=section["intent"],
            preset=section["preset"],
            unverified=section.get("unverified"),
            known_issues=tuple(section.get("known_issues") or ()),
        )


SECTIONS_CREATED_IF_MISSING = ("comm_overlap",)
"""ConfigContainer sections the entry point creates (with Bridge's defaults) when a recipe leaves them None."""

BRIDGE_MODELS = tuple(model_registry())
"""Models with a Megatron Bridge recipe function (the model registry, optbench/data/models.csv)."""


def bridge_recipe(run: RunConfig) -> BridgeRecipe:
    """The Bridge recipe function for the run's model (and, for Kimi K2, its optimizer) in the run's container."""
    optimizer_type = "muon" if run.optimizer.muon_family else "adam"
    return bridge_recipe_for(bridge_model(run) or run.model.name, optimizer_type, versions.container_of(run))


def bridge_model(run: RunConfig) -> Optional[str]:
    """The model whose Bridge recipe function the run starts from: its own, else (a small proxy such as
    qwen3_moe_tiny) the one it stands for, whose shape our ``model.*`` overrides then replace; None when neither has
    one."""
    for name in (run.model.name, run.model.proxy_of):
        if name in model_registry():
            return name
    return None


def bridge_recipe_for(name: str, optimizer_type: str, container: versions.Container) -> BridgeRecipe:
    """The Bridge recipe function for a model name and an optimizer type (muon or adam) in the container's release,
    as that release's source shows it: whether it takes ``optimizer_type`` (Kimi K2's up to 0.5; the overrides then set
    the optimizer alone) and whether it reads the hub config (Kimi K2's from 0.4), per the model's registry entry."""
    entry = model_registry().get(name)
    if entry is not None:
        takes = bool(entry.optimizer_type_marker) and versions.behaviour(container, entry.optimizer_type_marker)
        hub = not entry.hub_config_marker or versions.behaviour(container, entry.hub_config_marker)
        return BridgeRecipe(
            entry.bridge_recipe_module,
            entry.bridge_recipe_function,
            {"optimizer_type": optimizer_type} if takes else {},
            hf_config=entry.hf_config if hub else None,
        )
    raise UserError(
        Problem(
            "model",
            f"no Megatron Bridge recipe for model '{name}' ({', '.join(BRIDGE_MODELS)} have one); "
            "use engine=local, or a proxy of a model that has one",
        )
    )


PRESET_OWNED = ("optimizer.weight_decay", "comm_overlap.overlap_grad_reduce", "comm_overlap.overlap_param_gather")
"""Fields a run with a preset leaves to it: a value Megatron never applies (the scheduler's weight decay is
the one applied each step, and ours sets it), and the comm-overlap switches whose setup() NVIDIA lets decide."""


def preset_items(run: RunConfig, ours: list[Item], preset: Optional[presets.Preset]) -> list[Item]:
    """NVIDIA's preset settings our config does not set itself; intent=train then turns on real routing and checks."""
    if preset is None:
        return []
    emitted = {key for key, _ in ours}
    # Muon on an Adam preset: the preset's optimizer settings are Adam's (DeepSeek-V3's precision-aware
    # optimizer is refused by Megatron for anything but Adam); Muon's come from our config.
    adam_only = preset.adapted_from_adam
    items = [
        (key, value)
        for key, value in preset.settings.items()
        if key not in emitted and not (adam_only and key.startswith("optimizer.")) and not presets.not_emitted(key)
    ]
    if run.intent == "train":
        train = dict(presets.TRAIN_SETTINGS)
        items = [(key, train.pop(key, value)) for key, value in items] + list(train.items())
    return items


def _ours_under(run: RunConfig, preset: Optional[presets.Preset]) -> list[Item]:
    """Our sections' overrides; under a preset, less the fields it owns and with what our settings require (COUPLED,
    so that the departures from the preset name them; :func:`_checked_items` couples the whole list again). A switch
    we emit only when on that the preset sets is written off when the run turns it off: the preset's value came into
    the run at compose, so off means the user turned it off, and it must not come back."""
    ours = our_items(run)
    if preset is None:
        return ours
    off = [(key, value) for key, value in switched_off(run).items() if key in preset.settings]
    return _coupled([(key, value) for key, value in ours if key not in PRESET_OWNED] + off)


COUPLED = {
    ("model.cuda_graph_impl", "full_iteration"): ("rerun_state_machine.check_for_nan_in_loss", False),
    ("comm_overlap.overlap_moe_expert_parallel_comm", False): ("comm_overlap.delay_wgrad_compute", False),
}
"""Settings Megatron Bridge requires together (``ConfigContainer.validate``, Bridge >= 0.5): a full-iteration CUDA
graph cannot check the loss for NaN (NVIDIA's 26.06+ presets turn the check off in their shared helper code;
``intent=train`` keeps the gradient NaN check, ``ddp.check_for_nan_in_grad``); delaying the expert weight gradients
(NVIDIA's presets do, with the EP all-to-all overlapped) needs that overlap, so turning it off turns the delay off
(Megatron Core's ``TransformerConfig``: "overlap_moe_expert_parallel_comm must be enabled when enabling
delay_wgrad_compute")."""


def _coupled(items: list[Item]) -> list[Item]:
    """``items`` with every setting a chosen one requires (COUPLED) set last, so that nothing earlier undoes it."""
    chosen = dict(items)
    required = [needed for (key, value), needed in COUPLED.items() if chosen.get(key) == value]
    keys = {key for key, _ in required}
    return [(key, value) for key, value in items if key not in keys] + required


def _checked_items(run: RunConfig) -> tuple[Optional[presets.Preset], list[Item], list[Item]]:
    """(preset, our overrides under it, every override in application order), each key checked against the
    field names of the run's container (Bridge + Core of that release)."""
    preset = presets.require_preset(run)
    ours = _ours_under(run, preset)
    items = _without_removed_sections(_coupled(preset_items(run, ours, preset) + ours))
    versions.check_fields(run, [key for key, _ in items])
    return preset, ours, items


def _without_removed_sections(items: list[Item]) -> list[Item]:
    """``items`` where a preset removes a whole section (``comm_overlap=None``: NVIDIA's GPT-OSS launcher runs without
    Bridge's communication-overlap config) and our fields under it are all off: those fields are dropped, as setting
    them would bring the section back. A field of ours turned on under it keeps the section and drops the removal
    (the plan lists that field as a departure from the preset)."""
    for section in [key for key, value in items if "." not in key and value is None]:
        under = [key for key, value in items if key.startswith(f"{section}.")]
        on = any(value for key, value in items if key in under)
        dropped = {section} if on else set(under)
        items = [(key, value) for key, value in items if key not in dropped]
    return items


def override_items(run: RunConfig) -> list[Item]:
    """Every override as (dotted key, typed value), in application order: the preset's settings, then ours."""
    return _checked_items(run)[2]


def bridge_overrides(run: RunConfig) -> list[str]:
    """The overrides as Hydra strings ``section.field=value``."""
    return [format_override(key, value) for key, value in override_items(run)]


def train_changes(items: list[Item]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(what ``intent=train`` changes, with the value each key finally has among ``items``; the ones another setting
    overrode, with the setting and Bridge's reason): a plan never claims a check the overrides turn off."""
    final = dict(items)
    effective = {key: final.get(key, wanted) for key, wanted in presets.TRAIN_SETTINGS.items()}
    overruled = []
    for (key, value), (needed, forced) in COUPLED.items():
        if final.get(key) == value and needed in presets.TRAIN_SETTINGS and forced != presets.TRAIN_SETTINGS[needed]:
            overruled.append(
                {
                    "field": needed,
                    "wanted": presets.TRAIN_SETTINGS[needed],
                    "effective": forced,
                    "because": f"{key}={value}",
                    "reason": "Megatron Bridge refuses a loss NaN check under a "
                    "full-iteration CUDA graph (ConfigContainer.validate); the gradient NaN check stays on",
                }
            )
    return effective, overruled


def preset_summary(
    run: RunConfig, preset: Optional[presets.Preset], ours: list[Item], items: list[Item] | None = None
) -> Optional[dict[str, Any]]:
    """plan.json's account of the preset: its key and provenance, the fields where ``ours`` departs from it, and for
    ``intent=train`` what it changes as the final overrides (``items``) have it."""
    if preset is None:
        return None
    departures = presets.departures(ours, preset)
    reasons = presets.departure_reasons(run)
    for d in departures:
        reason = (
            reasons.get(d["field"])
            or presets.derived_reason(d["field"], run.intent, preset.adapted_from_adam, run.optimizer.name)
            or d.get("reason")
        )
        if reason:
            d["reason"] = reason
    # NVIDIA's dist_muon, written as Megatron Core >= 0.18 spells it, is the same optimizer: not a departure.
    respelled = [d for d in departures if presets.is_respelling(d["field"], preset.adapted_from_adam)]
    departures = [d for d in departures if d not in respelled]
    departures += presets.unreproduced(preset, run)
    muon_own = [preset.adapted_from_adam and presets.is_muon_field(d["field"]) for d in departures]
    if preset.launcher_optimizer:  # NVIDIA's launcher trains another optimizer for this case: a departure to name
        departures.append(
            {
                "field": "optimizer (NVIDIA's launcher)",
                "ours": preset.key.rsplit("/", 1)[1],
                "nvidia": preset.launcher_optimizer,
                "reason": preset.note,
            }
        )
        muon_own.append(False)
    # Exactly what NVIDIA executed: its preset of this release, at its GPU count, with nothing of ours in it.
    as_executed = (
        run.intent == "reproduce"
        and not departures
        and not preset.adapted_from_adam
        and run.parallel.num_gpus == preset.num_gpus
    )
    return {
        "key": preset.key,
        "container": versions.container_of(run).label(),
        "release": preset.release,
        "source": presets.provenance(preset.release)["source"],
        "case": preset.source,
        "note": preset.note or None,
        "adapted_from_adam": preset.adapted_from_adam,
        "departures": [d for d, muon in zip(departures, muon_own) if not muon],
        "muon_fields": [d for d, muon in zip(departures, muon_own) if muon],
        "respelled": respelled,
        "as_executed": as_executed,
        **_train_fields(run, items if items is not None else _coupled(preset_items(run, ours, preset) + ours)),
    }


def _train_fields(run: RunConfig, items: list[Item]) -> dict[str, Any]:
    effective, overruled = train_changes(items) if run.intent == "train" else ({}, [])
    return {"train_changes": effective, "train_changes_overruled": overruled}


def executed_by_nvidia(run: RunConfig) -> Optional[str]:
    """``"<preset key>, <container>"`` when the run is exactly a configuration NVIDIA executed (its preset of the
    run's release at its GPU count, no departure), else None: evidence beside our memory estimate (+-20 %)."""
    if run.engine != "megatron_bridge" or run.intent != "reproduce":
        return None
    try:
        preset, ours, _ = _checked_items(run)
    except UserError:
        return None  # the plan's Bridge stage reports it
    summary = preset_summary(run, preset, ours)
    return f"{summary['key']}, {summary['container']}" if summary and summary["as_executed"] else None


def bridge_setup(run: RunConfig) -> BridgeSetup:
    """Recipe function, mixed-precision preset and overrides for a megatron_bridge run."""
    preset, ours, items = _checked_items(run)
    return BridgeSetup(
        recipe=bridge_recipe(run),
        mixed_precision=run.precision.bridge_mixed_precision,
        overrides=tuple(format_override(key, value) for key, value in items),
        intent=run.intent,
        preset=preset_summary(run, preset, ours, items),
        unverified=unverified_section(run),
        known_issues=tuple(dataclasses.asdict(issue) for issue in issues_for(run)),
    )


def unverified_section(run: RunConfig) -> Optional[dict[str, Any]]:
    """What a plan of an unchecked container assumes, and what the public notes say changed for this run."""
    from optbench.releases.release_notes import notes_for

    container = versions.container_of(run)
    if not container.assumed_from:
        return None
    notes = notes_for(container.name, container.assumed_from, run.model.name, run.cluster.gpu)
    return {
        "container": container.name,
        "assumed_from": container.assumed_from,
        "bridge": container.bridge,
        "core": container.core,
        "notes": [dataclasses.asdict(note) for note in notes],
    }
