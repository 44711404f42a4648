"""AdaMuon / NorMuon as Megatron Core >= 0.18 runs them (``TensorParallelAdaptiveMuon``).

Muon's step (:class:`~optbench.optim.muon.Muon`: weight decay, momentum, Nesterov, Newton-Schulz), then a second
moment of the orthogonalized update O before it is applied:

    adamuon:  V = lerp(V, O^2, 1 - beta2);              U = O / (sqrt(V) + eps)
    normuon:  V = lerp(V, mean(O^2 over the longer side), 1 - beta2);   U = O * rsqrt(max(V, eps))
    W -= lr * U

Megatron applies Muon's scale (``scale_mode`` x ``extra_scale_factor``) inside its Newton-Schulz function, so O is
already scaled. With Emerging-Optimizers 0.2.0 (nemo:26.06-26.08) nothing follows: for adamuon the scale cancels
in O / sqrt(V) (up to eps). Emerging-Optimizers 0.3.0 applies the scale again after the second moment
(``scale_after_moment2=True``) and rescales NorMuon's update to O's Frobenius norm (``match_norm``). Same config,
a different update: the container decides (docs/optimizers.md).
"""

from __future__ import annotations

import torch

from optbench.optim.muon import Muon
from optbench.optim.newton_schulz import muon_scale_factor

MOMENT2_METHODS = ("adamuon", "normuon")


class AdaptiveMuon(Muon):
    """Muon with a second moment of its orthogonalized update (see the module docstring).

    Args:
        params, **muon: as :class:`~optbench.optim.muon.Muon`.
        moment2_method: "adamuon" (element-wise) or "normuon" (per row or column).
        beta2, eps: the second moment's decay and floor (adaptive_muon_beta2, adaptive_muon_eps).
        scale_after_moment2: Emerging-Optimizers >= 0.3: Muon's scale again after the second moment, and NorMuon's
            update rescaled to the orthogonalized update's Frobenius norm.
    """

    def __init__(
        self,
        params,
        *,
        moment2_method: str = "adamuon",
        beta2: float = 0.95,
        eps: float = 1e-8,
        scale_after_moment2: bool = False,
        **muon,
    ) -> None:
        if moment2_method not in MOMENT2_METHODS:
            raise ValueError(f"unknown moment2_method {moment2_method!r}; choose one of {list(MOMENT2_METHODS)}")
        super().__init__(params, **muon)
        self.moment2_method = moment2_method
        self.beta2 = beta2
        self.eps = eps
        self.scale_after_moment2 = scale_after_moment2

    def _moment2(self, p: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if "moment2_buffer" not in state:
            shape = list(update.shape)
            if self.moment2_method == "normuon":
                shape[-1 if shape[-2] >= shape[-1] else -2] = 1
            state["moment2_buffer"] = torch.zeros(shape, dtype=torch.float32, device=p.device)
        return state["moment2_buffer"]

    def _finish(self, params: list[torch.Tensor], updates: list[torch.Tensor]) -> list[torch.Tensor]:
        out = []
        for p, orthogonal in zip(params, updates):
            moment2 = self._moment2(p, orthogonal)
            if self.moment2_method == "adamuon":
                moment2.lerp_(orthogonal.square(), 1 - self.beta2)
                update = orthogonal / (moment2.sqrt() + self.eps)
            else:
                rows, cols = orthogonal.shape[-2:]
                if rows > cols:  # upstream's Newton-Schulz hands a tall matrix back as a transposed view, and the
                    orthogonal = orthogonal.mT.contiguous().mT  # reductions below sum in its memory order
                moment2.lerp_(orthogonal.square().mean(dim=-1 if rows >= cols else -2, keepdim=True), 1 - self.beta2)
                update = orthogonal * moment2.clamp_min(self.eps).rsqrt_()
                if self.scale_after_moment2:
                    norm = torch.linalg.vector_norm(orthogonal) / torch.linalg.vector_norm(update).clamp_min(self.eps)
                    update = update * norm
            if self.scale_after_moment2:
                rows, cols = update.shape[-2:]
                update = update * muon_scale_factor(rows, cols, self.scale_mode) * self.extra_scale_factor
            out.append(update)
        return out

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        for state in self.state.values():
            if "moment2_buffer" in state:
                state["moment2_buffer"] = state["moment2_buffer"].float()
