"""The runs a projection sets beside the planned one, handed in by whoever asks for the projection.

The projection composes nothing. A matrix-optimizer plan's AdamW twin and the optimizers the user names with
``COMPARE`` are composed by the planner (:class:`optbench.plan.counterparts.ComposedCounterparts`) through this
interface, and only when the projection needs them: a run the model cannot project (local engine, no interconnect
figures, no calibration) composes no twin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from optbench.resolve import ResolvedRun


class Counterparts(Protocol):
    """Where a projection gets the runs it compares the planned one with."""

    def recipes(self) -> Sequence[str]:
        """Every recipe name (a sibling is ``<model>_<optimizer>`` when that recipe exists)."""
        ...

    def twin(self, recipe: str, overrides: Sequence[str], like: ResolvedRun) -> ResolvedRun:
        """The AdamW twin composed from ``recipe`` and ``overrides`` and resolved like ``like`` (not validated: its
        projection is shown even where the plan would refuse it); UserError when it does not compose, or is not an
        AdamW run of ``like``'s model."""
        ...

    def sibling(self, recipe: str, overrides: Sequence[str], like: ResolvedRun) -> ResolvedRun:
        """A run with another matrix optimizer, validated like any run (its one-line refusal is shown instead of a
        number); UserError when it is refused."""
        ...
