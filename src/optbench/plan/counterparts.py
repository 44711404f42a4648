"""The runs a plan composes beside its own: a matrix-optimizer run's AdamW twin, and the optimizers COMPARE names.

The planner decides them (the twin is the recipe the run's ``compare_with`` names: projection.twin.twin_recipe),
composes each once through Hydra, and hands them to the projection
(:class:`optbench.projection.counterparts.Counterparts`),
which composes nothing itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from optbench.compose.recipe import compose_run, list_recipes
from optbench.config.schema import RunConfig
from optbench.projection.twin import check_twin, twin_recipe
from optbench.resolve import ResolvedRun, resolve
from optbench.validate import validate


def compose_twin(run: RunConfig, overrides: Sequence[str]) -> tuple[str, tuple[str, ...], RunConfig]:
    """The AdamW twin's recipe, overrides and composed run; UserError when it does not compose or is not an AdamW
    run of the same model."""
    recipe, kept = twin_recipe(run, overrides)
    return recipe, kept, _checked_twin(run, recipe, kept)


def _checked_twin(run: RunConfig, recipe: str, overrides: Sequence[str]) -> RunConfig:
    return check_twin(run, compose_run(recipe, list(overrides)), recipe, overrides)


class ComposedCounterparts:
    """:class:`~optbench.projection.counterparts.Counterparts` composed from the recipes on disk."""

    def recipes(self) -> Sequence[str]:
        return list_recipes()

    def twin(self, recipe: str, overrides: Sequence[str], like: ResolvedRun) -> ResolvedRun:
        return resolve(_checked_twin(like.run, recipe, overrides), like=like)

    def sibling(self, recipe: str, overrides: Sequence[str], like: ResolvedRun) -> ResolvedRun:
        return validate(compose_run(recipe, list(overrides)), like=like)
