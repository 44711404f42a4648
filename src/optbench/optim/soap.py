"""SOAP as Megatron Core >= 0.18 builds it (Emerging-Optimizers ``SOAP`` with Megatron's settings).

Per m x n matrix W with gradient G (fp32), at 1-based step t, in this order (upstream ``SOAP.step``):

    b   = 1 - (1 - shampoo_beta) / (1 - shampoo_beta^t)             bias-corrected factor decay
    L, R <- KL-Shampoo update (or L <- lerp(L, G G^T, 1 - b), R <- lerp(R, G^T G, 1 - b))
    every ``precondition_frequency`` steps (t - 1 divisible by it):
        exp_avg <- Q_L exp_avg Q_R^T                                 out of the old eigenbasis
        Q_L, Q_R <- eigh(L), eigh(R) on the first step; else, per side, the columns sorted by the
                    approximate eigenvalues diag(Q^T K Q) (exp_avg_sq permuted alike), K Q, then QR
        exp_avg <- Q_L^T exp_avg Q_R                                 into the new one
    W -= lr * wd * W                                                  decoupled weight decay
    U = Adam(Q_L^T G Q_R; exp_avg, exp_avg_sq, betas, eps, bias correction)
    W -= lr * Q_L U Q_R^T

KL-Shampoo (Megatron's default, arXiv:2509.03378): with the approximate eigenvalues s = diag(Q^T K Q) of each side
and C = Q diag(max(s, eps)^-1 / dim) Q^T, the left factor moves towards G C_R G^T and the right towards G^T C_L G.

Products run under ``torch.set_float32_matmul_precision(fp32_matmul_prec)`` as upstream (``high``: TF32 on GPUs;
the CPU computes fp32). Megatron passes only ``shampoo_beta``, ``use_kl_shampoo`` and (with Emerging-Optimizers
0.2, the containers' own) ``precondition_frequency``; betas are ``adam_beta1/2``; everything else is upstream's
default. Megatron's SOAP is not tensor-parallel aware: a sharded weight is preconditioned shard by shard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from optbench.config.optimizers import REGISTRY
from optbench.optim.newton_schulz import matmul_precision
from optbench.releases.versions import release_line
from optbench.optim.param_loop import params_with_grad
from optbench.optim.routing import ParamRoute, param_groups

EIGH_EPS = 1e-7
"""Upstream's eigh stabilizer for fp32 factors (``eigh_with_fallback`` with eps None)."""


def project(x: torch.Tensor, bases: list[torch.Tensor], into: bool) -> torch.Tensor:
    """Q_L^T x Q_R (into the eigenbasis) or Q_L x Q_R^T (out of it), as upstream contracts it (tensordot)."""
    dims = [[0], [0]] if into else [[0], [1]]
    for basis in bases:
        x = torch.tensordot(x, basis, dims=dims)
    return x


def approximate_eigenvalues(factor: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """diag(Q^T K Q), computed as upstream does: rows of Q^T K times Q^T, summed."""
    return (basis.T @ factor * basis.T).sum(dim=1)


def eigenbasis(factor: torch.Tensor, stabilized: bool = True) -> torch.Tensor:
    """Eigenvectors of a symmetric factor, eigenvalues descending (upstream ``eigh_with_fallback``).

    ``stabilized``: Emerging-Optimizers 0.2.0 takes a diagonal factor as its own eigenbasis and adds EIGH_EPS I
    before ``eigh``; 0.3.0 calls ``eigh`` on the factor as it is. The eigenvalues are the same to fp32, but a
    rank-deficient factor (R of a 7 x 130 gradient has rank 7) has a null space whose basis ``eigh`` picks freely,
    and from about 30 x 30 LAPACK's divide-and-conquer picks another one for the shifted matrix: the two releases
    then train differently from the first step."""
    eye = torch.eye(factor.shape[0], dtype=factor.dtype, device=factor.device)
    if stabilized and not (factor - torch.diag(torch.diagonal(factor))).any():  # its own eigenbasis, sorted as upstream
        values, order = torch.diagonal(factor).sort()
        _, descending = values.sort(descending=True)
        return eye[:, order][:, descending]
    stabilized_factor = torch.addmm(factor, eye, eye, alpha=EIGH_EPS) if stabilized else factor
    try:
        _, vectors = torch.linalg.eigh(stabilized_factor)
    except (torch.linalg.LinAlgError, RuntimeError):
        _, vectors = torch.linalg.eigh(stabilized_factor.double())
        vectors = vectors.to(factor.dtype)
    return torch.flip(vectors, [-1])


class SOAP(torch.optim.Optimizer):
    """SOAP (Vyas et al., arXiv:2409.11321) with Megatron's configuration (see the module docstring).

    Args:
        params: 2-D parameters (norms, biases and embeddings go to AdamW), or param groups.
        lr, betas, eps, weight_decay: the inner Adam's (Megatron: lr, adam_beta1/2, 1e-8, weight decay times lr).
        shampoo_beta: decay of the Kronecker factors (soap_shampoo_beta).
        precondition_frequency: steps between eigenbasis updates (soap_precondition_frequency).
        use_kl_shampoo: KL-Shampoo's factor update (soap_use_kl_shampoo).
        power_iter_steps: power iterations before each QR.
        fp32_matmul_prec, qr_fp32_matmul_prec: precision of the products and of the eigenbasis update.
        stabilized_eigh: the first step's eigendecomposition as Emerging-Optimizers 0.2.0 makes it (shifted by
            EIGH_EPS I, diagonal factors taken as they are; :func:`eigenbasis`); False: as 0.3.0 (plain eigh).
    """

    def __init__(
        self,
        params,
        lr: float = 3e-4,
        betas: tuple[float, float] = (0.9, 0.95),
        shampoo_beta: float = 0.95,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        *,
        precondition_frequency: int = 1,
        use_kl_shampoo: bool = True,
        correct_bias: bool = True,
        power_iter_steps: int = 1,
        fp32_matmul_prec: str = "high",
        qr_fp32_matmul_prec: str = "high",
        stabilized_eigh: bool = True,
    ) -> None:
        if precondition_frequency < 1 or power_iter_steps < 1:
            raise ValueError("precondition_frequency and power_iter_steps must be >= 1")
        self.precondition_frequency = precondition_frequency
        self.use_kl_shampoo = use_kl_shampoo
        self.correct_bias = correct_bias
        self.power_iter_steps = power_iter_steps
        self.fp32_matmul_prec = fp32_matmul_prec
        self.qr_fp32_matmul_prec = qr_fp32_matmul_prec
        self.stabilized_eigh = stabilized_eigh
        defaults = dict(lr=lr, betas=tuple(betas), shampoo_beta=shampoo_beta, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim not in (2, 3):
                    raise ValueError(
                        f"SOAP takes 2-D matrices (or 3-D stacks of expert matrices), got shape "
                        f"{tuple(p.shape)}; route it to AdamW"
                    )

    def _states(self, p: torch.Tensor) -> list[dict]:
        """One state per matrix: a 3-D stack of experts is that many matrices, as Megatron's separate expert weights."""
        state = self.state[p]
        if not state:
            state["matrices"] = [
                self._new_state(p.shape[-2:], p.device) for _ in range(p.shape[0] if p.ndim == 3 else 1)
            ]
        return state["matrices"]

    @staticmethod
    def _new_state(shape: torch.Size, device: torch.device) -> dict:
        rows, cols = shape
        zeros = dict(dtype=torch.float32, device=device)
        return dict(
            step=0,
            exp_avg=torch.zeros(rows, cols, **zeros),
            exp_avg_sq=torch.zeros(rows, cols, **zeros),
            L=torch.zeros(rows, rows, **zeros),
            R=torch.zeros(cols, cols, **zeros),
            Q_L=torch.eye(rows, **zeros),
            Q_R=torch.eye(cols, **zeros),
        )

    def _update_factors(self, state: dict, grad: torch.Tensor, beta: float, eps: float) -> None:
        factors, bases = [state["L"], state["R"]], [state["Q_L"], state["Q_R"]]
        if not self.use_kl_shampoo:
            factors[0].lerp_(grad @ grad.T, 1 - beta)
            factors[1].lerp_(grad.T @ grad, 1 - beta)
            return
        updates = []
        for side, (factor, basis) in enumerate(zip(factors, bases)):
            scale = 1 / grad.shape[side] * approximate_eigenvalues(factor, basis).clamp_min(eps) ** -1.0
            correction = (basis * scale[None, :]) @ basis.T
            g = grad.T if side == 1 else grad
            updates.append(g.T @ correction @ g)
        for factor, update in zip(factors, reversed(updates)):  # the left correction moves R, the right one L
            factor.lerp_(update, 1 - beta)

    def _refresh_eigenbases(self, state: dict) -> None:
        factors = [state["L"], state["R"]]
        exp_avg = project(state["exp_avg"], [state["Q_L"], state["Q_R"]], into=False)
        if state["step"] == 0:  # upstream always starts from an eigendecomposition
            bases = [eigenbasis(factor, self.stabilized_eigh) for factor in factors]
        else:
            bases, exp_avg_sq = [], state["exp_avg_sq"]
            for side, (factor, basis) in enumerate(zip(factors, [state["Q_L"], state["Q_R"]])):
                order = torch.argsort(approximate_eigenvalues(factor, basis), descending=True)
                exp_avg_sq = exp_avg_sq.index_select(side, order)
                q = basis[:, order]
                for _ in range(self.power_iter_steps):
                    q = torch.linalg.qr(factor @ q).Q
                bases.append(q)
            state["exp_avg_sq"] = exp_avg_sq
        state["Q_L"], state["Q_R"] = bases
        state["exp_avg"] = project(exp_avg, bases, into=True)

    def _step_matrix(
        self, p: torch.Tensor, grad: torch.Tensor, state: dict, group: dict, beta1: float, beta2: float
    ) -> None:
        t = state["step"] + 1
        beta = group["shampoo_beta"]
        if self.correct_bias:
            beta = 1 - (1 - beta) / (1 - beta**t)
        with matmul_precision(self.fp32_matmul_prec):
            self._update_factors(state, grad, beta, group["eps"])
        if state["step"] % self.precondition_frequency == 0:
            with matmul_precision(self.qr_fp32_matmul_prec):
                self._refresh_eigenbases(state)
        if group["weight_decay"] != 0.0:
            p.add_(p, alpha=-group["weight_decay"] * group["lr"])
        bases = [state["Q_L"], state["Q_R"]]
        with matmul_precision(self.fp32_matmul_prec):
            projected = project(grad, bases, into=True)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(projected, 1 - beta1)
        exp_avg_sq.lerp_(projected.square(), 1 - beta2)
        correction1 = 1.0 - beta1**t if self.correct_bias else 1.0
        correction2 = 1.0 - beta2**t if self.correct_bias else 1.0
        update = (exp_avg / correction1) / ((exp_avg_sq / correction2).sqrt() + group["eps"])
        with matmul_precision(self.fp32_matmul_prec):
            update = project(update, bases, into=False)
        p.add_(update, alpha=-group["lr"])
        state["step"] = t

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:
        for group, p in params_with_grad(self, closure):
            beta1, beta2 = group["betas"]
            matrices = [(p, p.grad)] if p.ndim == 2 else list(zip(p.unbind(0), p.grad.unbind(0)))
            for (weight, grad), state in zip(matrices, self._states(p)):
                self._step_matrix(weight, grad.to(torch.float32), state, group, beta1, beta2)


def build_soap(routes: Sequence[ParamRoute], cfg, tp_group, emerging_optimizers: str) -> SOAP:
    """SOAP over the matrix side's routes (the registry's local builder; not tensor-parallel aware: ``tp_group``
    unused), as that Emerging-Optimizers release behaves: from 0.3 it refreshes the eigenbasis every step with a plain
    first eigh, from 0.4 its products run at fp32 (``highest``) instead of TF32."""
    soap = cfg.soap
    line = release_line(emerging_optimizers)
    later = line >= (0, 3)
    return SOAP(
        param_groups(routes, cfg.weight_decay, lambda r: {}),
        lr=cfg.lr,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        shampoo_beta=soap.shampoo_beta,
        weight_decay=cfg.weight_decay,
        precondition_frequency=1 if later else soap.precondition_frequency,  # 0.3.0 refreshes every step
        use_kl_shampoo=soap.use_kl_shampoo,
        stabilized_eigh=not later,  # 0.3.0's first eigendecomposition is a plain eigh
        fp32_matmul_prec=REGISTRY["soap"].products_precision_at(line),
    )
