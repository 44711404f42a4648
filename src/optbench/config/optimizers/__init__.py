"""The optimizer registry: one module per optimizer in this folder, each an :class:`OptimizerEntry` that says what
every stage needs to know about it, so that no stage tests an optimizer's name. Adding one: its module here, its
config group ``conf/optimizer/<name>.yaml``, its section in :class:`optbench.config.schema.OptimizerConfig` and its
tests (docs/architecture.md, "Adding an optimizer")."""

from __future__ import annotations

from optbench.config.optimizers import adamw, adaptive_muon, muon, soap
from optbench.config.optimizers.entry import FP32, MatrixFlops, OptimizerEntry, StudyArm

__all__ = [
    "FP32",
    "MatrixFlops",
    "OptimizerEntry",
    "StudyArm",
    "REGISTRY",
    "entry",
    "MATRIX_OPTIMIZERS",
    "matrix_labels",
]

REGISTRY: dict[str, OptimizerEntry] = {e.name: e for e in (adamw.ENTRY, muon.ENTRY, adaptive_muon.ENTRY, soap.ENTRY)}
"""Name -> entry, in the order tables list them."""
MATRIX_OPTIMIZERS = tuple(name for name, e in REGISTRY.items() if e.matrix)
"""Megatron Core's emerging optimizers: 2-D weights (not embedding/output) go to them, the rest to the scalar
optimizer."""


def entry(name: str) -> OptimizerEntry:
    """The registry entry of ``optimizer.name`` (validated names only: validation refuses the others)."""
    return REGISTRY[name]


def matrix_labels() -> str:
    """The matrix optimizers for a sentence or heading: "Muon, AdaMuon and SOAP"."""
    labels = [REGISTRY[name].label for name in MATRIX_OPTIMIZERS]
    return f"{', '.join(labels[:-1])} and {labels[-1]}" if len(labels) > 1 else labels[0]
