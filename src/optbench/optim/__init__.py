"""Optimizers: Muon with Megatron Core's semantics, its TP modes and the layer-wise distributed optimizer.

The trainer uses :func:`build_optimizer` and the :class:`TrainingOptimizer` it returns; the pieces
(Newton-Schulz, tensor-parallel modes, routing) are importable on their own; which rank owns each parameter is
counted in :mod:`optbench.accounting.assignment`, which the planner shares.
See docs/optimizer.md for every option and how it maps to Megatron Core / Bridge.

Exports are loaded lazily, so that importing this package does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Muon": "optbench.optim.muon",
    "COEFFICIENT_SETS": "optbench.optim.newton_schulz",
    "auto_matmul_precision": "optbench.optim.newton_schulz",
    "muon_scale_factor": "optbench.optim.newton_schulz",
    "newton_schulz": "optbench.optim.newton_schulz",
    "ParamRoute": "optbench.optim.routing",
    "mark_qkv": "optbench.optim.routing",
    "route_parameters": "optbench.optim.routing",
    "newton_schulz_tp": "optbench.optim.tensor_parallel",
    "TrainingOptimizer": "optbench.optim.training",
    "build_optimizer": "optbench.optim.training",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'optbench.optim' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
