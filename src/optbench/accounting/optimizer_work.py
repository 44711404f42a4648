"""What each optimizer keeps per parameter: fp32 state bytes.

Megatron keeps an fp32 main copy of every bf16 parameter (4 bytes per element). AdamW adds exp_avg and exp_avg_sq:
12 bytes per element, 8 under Megatron's precision-aware optimizer with BF16 moments, which Bridge's DeepSeek-V3
recipe sets in every release (``optimizer.use_precision_aware_optimizer``, ``exp_avg_dtype`` and
``exp_avg_sq_dtype`` ``torch.bfloat16``: read from the run's NVIDIA preset,
:func:`optbench.releases.presets.adam_moment_bytes`). A matrix optimizer's state per matrix is its registry
entry's (:attr:`optbench.config.optimizers.OptimizerEntry.matrix_state_bytes`, documented in each entry's module),
and its own FLOPs per matrix are in :mod:`optbench.accounting.ns_flops`.
"""

from __future__ import annotations

from optbench.config.optimizers import FP32, entry
from optbench.config.schema import OptimizerConfig


def matrix_state_bytes(optimizer: OptimizerConfig, shape: tuple[int, ...]) -> float:
    """Optimizer-state bytes of one matrix the run's emerging optimizer updates (local shard shape)."""
    return entry(optimizer.name).matrix_state_bytes(optimizer, shape)


def adam_state_bytes(numel: int, moment_bytes: int = FP32) -> float:
    """AdamW's state (fp32 main copy, both moments of ``moment_bytes`` each) of ``numel`` elements."""
    return (FP32 + 2 * moment_bytes) * numel
