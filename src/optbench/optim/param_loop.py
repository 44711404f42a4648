"""The parameter loop of the element-wise and preconditioned optimizers' ``step``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch


def params_with_grad(
    optimizer: torch.optim.Optimizer, closure: Callable[[], float] | None
) -> Iterator[tuple[dict, torch.Tensor]]:
    """(group, parameter) of every parameter that has a gradient; a closure is refused, as Emerging-Optimizers refuses
    it."""
    if closure is not None:
        raise ValueError("closure is not supported (as upstream)")
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                yield group, p
