"""The configuration of a published row, and where the projection gets rows' composed runs.

The calibration solves on published rows (an anchor is a row) and the validation projects every row, each at the
configuration whose ``make plan`` prints the very number the table shows for the row (NVIDIA's executed preset of
the row's release, the row's stated values typed: :mod:`optbench.plan.row_runs`). Composing is the planner's: the
projection asks a :class:`RowRuns` handed down to it, and composes nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from optbench.catalog.published import PublishedRow
from optbench.resolve import ResolvedRun

STATED = {
    "tp": "parallel.tp",
    "pp": "parallel.pp",
    "vpp": "parallel.vpp",
    "cp": "parallel.cp",
    "ep": "parallel.ep",
    "etp": "parallel.etp",
    "gbs": "train.gbs",
    "mbs": "train.mbs",
    "seq_length": "train.seq_length",
    "fsdp": "parallel.megatron_fsdp",
}
"""A published row's layout column -> our field (fsdp: the sharding group, > 0 for Megatron FSDP)."""


@dataclass(frozen=True)
class RowConfig:
    """What reproduces one published row."""

    recipe: str
    """The model's recipe for the row's optimizer."""
    overrides: tuple[str, ...]
    """The overrides, in the order ``make plan`` takes them."""
    in_domain: bool
    """Whether NVIDIA's executed preset of the row's release supplies the layout (False: 25.11)."""
    typed: tuple[str, ...] = ()
    """The row's stated values its release's preset does not hold, typed (empty when the preset agrees)."""

    @property
    def command(self) -> str:
        """The ``make plan`` command that prints this row's projection."""
        return " ".join(["make plan", f"RECIPE={self.recipe}", *self.overrides])


class RowRuns(Protocol):
    """Where the projection gets a published row's configuration and run
    (:class:`optbench.plan.row_runs.ComposedRowRuns`)."""

    def config(self, row: PublishedRow) -> RowConfig | str:
        """The configuration of ``row``, or the reason there is none (no recipe, no cluster preset, no composition)."""
        ...

    def run(self, row: PublishedRow) -> ResolvedRun | str:
        """The validated, resolved run of ``row`` (composed once per setup), or the reason there is none."""
        ...


def row_key(row: PublishedRow) -> tuple:
    """What of a row decides its configuration (hashable: two rows of one setup share one composition)."""
    stated = tuple((column, row.layout[column]) for column in STATED if row.layout.get(column) is not None)
    return row.model, row.optimizer, row.gpu, row.precision, row.release, row.num_gpus, "w/o MTP" in row.note, stated


def layout_key(row: PublishedRow, row_runs: RowRuns) -> tuple | None:
    """The layout a row was measured at (its executed configuration: TP, PP, VPP, CP, EP, ETP, MBS, GBS, FSDP), or None
    when it has none we compose."""
    resolved = row_runs.run(row)
    return None if isinstance(resolved, str) else run_layout_key(resolved)


def run_layout_key(resolved: ResolvedRun) -> tuple:
    """A resolved run's layout as :func:`layout_key` compares them."""
    lay, train = resolved.layout, resolved.run.train
    return lay.tp, lay.pp, lay.vpp, lay.cp, lay.ep, lay.etp, train.mbs, train.gbs, resolved.run.parallel.megatron_fsdp
