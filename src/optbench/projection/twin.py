"""A Muon run's AdamW twin and where the difference between the two steps comes from.

The twin is the same run with AdamW as the recipes configure it: the recipe the run's ``compare_with`` names
(``kimi_k2_muon`` names ``kimi_k2_adamw``, so the twin also gets AdamW's distributed optimizer, its gradient
precision and FP8 parameter gather), else the run's own recipe with ``optimizer=adamw``; the user's overrides
are kept except the ``optimizer.*`` ones.

The Muon-minus-AdamW step difference is split into

* ``newton_schulz_compute``: NS GEMM time of the mean rank;
* ``kernel_launch``: host time of Muon's eager ops not hidden behind GPU work (mean rank);
* ``elementwise_update``: mean rank's element-wise optimizer time, Muon's minus AdamW's;
* ``imbalance``: busiest rank minus mean rank (Muon's minus AdamW's; the slowest rank sets the step);
* ``communication``: exposed gradient reduction and parameter all-gather, Muon's (full all-reduce,
  un-overlapped variable-size all-gather) minus AdamW's (reduce-scatter and overlapped all-gather);
* ``other``: the rest (FP8 weight casts once per step: Muon cannot gather FP8 parameters).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from optbench.config.overrides import typed_key
from optbench.config.schema import RunConfig
from optbench.common.errors import UserError
from optbench.projection.step_model import StepBreakdown

COMMUNICATION_PARTS = ("dp_grad_reduce_exposed", "param_gather_exposed")
DECOMPOSITION = ("newton_schulz_compute", "kernel_launch", "elementwise_update", "imbalance", "communication", "other")


def is_optimizer_override(override: str) -> bool:
    key = typed_key(override)
    return key == "optimizer" or key.startswith("optimizer.")


def recipe_with_optimizer(
    run: RunConfig, name: str, overrides: Sequence[str], recipes: Collection[str]
) -> tuple[str, tuple[str, ...]]:
    """(recipe, overrides) of the run with optimizer ``name`` as that optimizer's recipe configures it:
    ``<model>_<optimizer>`` -> ``<model>_<name>`` when that recipe is one of ``recipes``, else the run's recipe with
    ``optimizer=<name>``; the user's overrides are kept but the ``optimizer.*`` ones."""
    kept = tuple(o for o in overrides if not is_optimizer_override(o))
    suffix = f"_{run.optimizer.name}"
    if run.recipe.endswith(suffix):
        counterpart = f"{run.recipe[: -len(suffix)]}_{name}"
        if counterpart in recipes:
            return counterpart, kept
    return run.recipe, (*kept, f"optimizer={name}")


def twin_recipe(run: RunConfig, overrides: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """(recipe, overrides) of the AdamW twin of a matrix-optimizer run: the recipe its ``compare_with`` names,
    else its own with ``optimizer=adamw``."""
    kept = tuple(o for o in overrides if not is_optimizer_override(o) and typed_key(o) != "compare_with")
    if run.compare_with:
        return run.compare_with, kept
    return run.recipe, (*kept, "optimizer=adamw")


class TwinMismatch(UserError):
    """``compare_with`` names a recipe that is no AdamW run of the run's model: a bad input, refused like any other,
    where a twin that does not compose at the user's overrides only leaves the comparison out of the plan."""


def check_twin(run: RunConfig, twin: RunConfig, recipe: str, kept: Sequence[str]) -> RunConfig:
    """``twin`` (composed from ``recipe`` and ``kept``) when it is an AdamW run of ``run``'s model; else
    TwinMismatch."""
    if twin.optimizer.name != "adamw":
        raise TwinMismatch(
            f"{recipe} trains with {twin.optimizer.name}, not AdamW: name an AdamW recipe of "
            f"{run.model.name}, or compare_with=null to compare with this recipe under optimizer=adamw",
            "compare_with",
        )
    if twin.model.name != run.model.name:
        raise TwinMismatch(
            f"{recipe} trains {twin.model.name}, not this run's {run.model.name}: name an AdamW recipe "
            "of the same model",
            "compare_with",
        )
    return twin


def decompose(muon: StepBreakdown, adamw: StepBreakdown) -> dict[str, float]:
    """Seconds of the Muon-minus-AdamW step difference by cause; they add up to the difference."""
    parts = {
        "newton_schulz_compute": muon.optimizer_mean.ns_gemm_s - adamw.optimizer_mean.ns_gemm_s,
        "kernel_launch": muon.optimizer_mean.launch_s - adamw.optimizer_mean.launch_s,
        "elementwise_update": muon.optimizer_mean.elementwise_s - adamw.optimizer_mean.elementwise_s,
        "imbalance": muon.optimizer_imbalance_s - adamw.optimizer_imbalance_s,
        "communication": sum(muon.parts[k] - adamw.parts[k] for k in COMMUNICATION_PARTS),
    }
    parts["other"] = muon.total_s - adamw.total_s - sum(parts.values())
    return parts
