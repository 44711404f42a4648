"""Expert load of the MoE routers, and aux-loss-free load balancing (DeepSeek-V3, Kimi K2).

Every step the tokens routed to each expert are counted, giving the step's load imbalance
(busiest expert / mean, 1.0 = balanced; recorded as ``moe_load_imbalance``).

Megatron Core (``moe_router_enable_expert_bias``): each router counts the tokens routed to every
expert over the whole optimizer step (all microbatches, summed over the data-parallel group) and,
after the step, moves each expert's bias by ``update_rate`` towards balance::

    bias += update_rate * sign(mean(tokens) - tokens)

The bias only shifts which experts are chosen, not their weights. transformers keeps it as the
router buffer ``e_score_correction_bias`` but never updates it; this class does, with Megatron's
default rate (``moe_router_bias_update_rate`` = 1e-3), when ``model.moe_router_enable_expert_bias``.
The bias is in the model's state dict, so checkpoints carry it. Qwen3-MoE has no bias (and the local
engine adds no auxiliary load-balancing loss, see docs/local_engine.md).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

UPDATE_RATE = 1e-3
"""Megatron Core's default moe_router_bias_update_rate."""


class ExpertLoadTracker:
    """Counts routed tokens per expert through forward hooks; after each step reports the load imbalance
    and, when ``update_bias``, moves the routers' expert bias as Megatron does."""

    def __init__(
        self, routers: list[nn.Module], world: int, update_bias: bool, update_rate: float = UPDATE_RATE
    ) -> None:
        self.routers = routers
        self.world = world
        self.update_rate = update_rate if update_bias else 0.0
        self.counts = [torch.zeros(r.weight.shape[0], device=r.weight.device) for r in routers]
        self.paused = False
        """True during validation: its tokens must not move the bias (Megatron counts training tokens only)."""
        self._hooks = [r.register_forward_hook(self._hook(i)) for i, r in enumerate(self.routers)]

    def _hook(self, index: int):
        def count(_module: nn.Module, _inputs, outputs) -> None:
            if self.paused:
                return
            # Both routers return (router_logits, topk_weights, topk_indices).
            indices = outputs[2].reshape(-1)
            self.counts[index] += torch.bincount(indices, minlength=self.counts[index].numel()).float()

        return count

    @torch.no_grad()
    def update(self) -> float | None:
        """Apply one bias update from this step's counts (summed over ranks), then reset them.

        Returns the step's load imbalance: max over routers of busiest expert's tokens / mean tokens.
        """
        if not self.routers:
            return None
        if self.world > 1:
            flat = torch.cat(self.counts)
            dist.all_reduce(flat)
            self.counts = list(flat.split([c.numel() for c in self.counts]))
        for router, tokens in zip(self.routers, self.counts):
            if not self.update_rate or not hasattr(router, "e_score_correction_bias"):
                continue
            offset = tokens.mean() - tokens
            router.e_score_correction_bias += self.update_rate * torch.sign(offset).to(
                router.e_score_correction_bias.dtype
            )
        ratios = [float(c.max() / c.mean()) for c in self.counts if c.sum() > 0]
        self.counts = [torch.zeros_like(c) for c in self.counts]
        return max(ratios) if ratios else None

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()
