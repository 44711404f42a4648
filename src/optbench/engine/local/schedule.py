"""Learning-rate schedule: linear warmup then cosine decay, as Megatron's OptimizerParamScheduler.

For optimizer step ``n`` (1-based: the n-th update), with ``W = warmup_iters`` and
``D = lr_decay_iters or iters``::

    n <= W:        lr = lr_max * n / W
    W < n <= D:    lr = lr_min + (lr_max - lr_min) * (1 + cos(pi * (n - W) / (D - W))) / 2
    n > D:         lr = lr_min

Megatron evaluates the same formula at its step counter *before* the increment, so its first update
runs at lr 0; we evaluate it at ``n`` so that no update is wasted. Otherwise the curves are identical.
"""

from __future__ import annotations

import math

from optbench.config.schema import OptimizerConfig, TrainConfig


def learning_rate(step: int, optimizer: OptimizerConfig, train: TrainConfig) -> float:
    """Learning rate of optimizer step ``step`` (1-based)."""
    warmup = train.warmup_iters
    decay = train.lr_decay_iters or train.iters
    if warmup > 0 and step <= warmup:
        return optimizer.lr * step / warmup
    if step > decay or decay <= warmup:
        return optimizer.min_lr
    progress = (step - warmup) / (decay - warmup)
    return optimizer.min_lr + (optimizer.lr - optimizer.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
