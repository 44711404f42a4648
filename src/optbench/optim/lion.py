"""Lion (Chen et al., arXiv:2302.06675) as Megatron Core runs it for the scalars of a Muon run
(``muon_scalar_optimizer=lion``, Core 0.19; Emerging-Optimizers ``Lion``, decoupled weight decay):

    W -= lr * wd * W
    U  = sign(lerp(M, G, 1 - beta1))
    M  = lerp(M, G, 1 - beta2)
    W -= lr * U
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from optbench.optim.param_loop import params_with_grad


class Lion(torch.optim.Optimizer):
    """Sign updates of an interpolated momentum (``betas`` = Megatron's lion_beta1, lion_beta2)."""

    def __init__(
        self, params, lr: float = 1e-4, betas: tuple[float, float] = (0.95, 0.98), weight_decay: float = 0.01
    ) -> None:
        if lr < 0.0 or weight_decay < 0.0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Lion needs lr, weight_decay >= 0 and betas in [0, 1), got {lr}, {weight_decay}, {betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:
        for group, p in params_with_grad(self, closure):
            beta1, beta2 = group["betas"]
            state = self.state[p]
            if "exp_avg" not in state:
                state["exp_avg"] = torch.zeros_like(p)
            if group["weight_decay"] != 0.0:
                p.add_(p, alpha=-group["weight_decay"] * group["lr"])
            exp_avg = state["exp_avg"]
            update = torch.sign(exp_avg.lerp(p.grad, 1 - beta1))
            exp_avg.lerp_(p.grad, 1 - beta2)
            p.add_(update, alpha=-group["lr"])
