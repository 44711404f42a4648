"""What each optimizer keeps and computes per matrix: fp32 state bytes and SOAP's FLOPs per step.

State, per element of a parameter (Megatron keeps an fp32 main copy of every bf16 parameter, 4 bytes):

* AdamW: main copy, exp_avg, exp_avg_sq: 12; 8 under Megatron's precision-aware optimizer with BF16 moments, which
  Bridge's DeepSeek-V3 recipe sets in every release (``optimizer.use_precision_aware_optimizer``,
  ``exp_avg_dtype`` and ``exp_avg_sq_dtype`` ``torch.bfloat16``: read from the run's NVIDIA preset,
  :func:`optbench.accounting.memory.adam_moment_bytes`);
* Muon: main copy and momentum: 8 (its Adam side: 12);
* AdaMuon (Emerging-Optimizers ``AdaptiveMuon``): Muon's plus the second moment, element-wise for ``adamuon``
  (12), one value per row or column for ``normuon`` (the longer side averaged: ``max(m, n)`` values);
* SOAP (Emerging-Optimizers ``SOAP``, as Megatron builds it): main copy, exp_avg, exp_avg_sq (m x n each) and the
  Kronecker factors L, R with their eigenbases Q_L, Q_R (m x m, n x n, two each), all fp32:
  ``4 (3 m n + 2 m^2 + 2 n^2)`` bytes for an m x n matrix. Megatron's SOAP is not tensor-parallel aware: each
  shard is its own matrix, so m x n is the local shard.

SOAP's FLOPs per step for an m x n matrix, as Emerging-Optimizers 0.2.0 executes them (the containers' release;
``use_kl_shampoo`` on, one power iteration, eigenbasis every ``f`` = ``precondition_frequency`` steps). A product
of an a x b and a b x c matrix is 2abc FLOPs; ``k`` is m for the left side and n for the right:

* every step, KL-Shampoo's factor update per side: the approximate eigenvalues diag(Q^T K Q) as (Q^T K) * Q^T
  (2k^3), the correction Q diag(s) Q^T (2k^3), and G^T C G or G C G^T (2m^2 n + 2m n^2 over both sides twice):
  ``4 m^3 + 4 n^3 + 4 m^2 n + 4 m n^2``; the gradient into the eigenbasis and the update back out
  (``4 m^2 n + 4 m n^2``);
* every f steps: exp_avg out of the old eigenbasis and into the new one (``4 m^2 n + 4 m n^2``), and per side the
  approximate eigenvalues to sort by (2k^3), one power iteration K Q (2k^3) and a Householder QR with its explicit
  Q (geqrf + orgqr: 8/3 k^3, counted apart: it runs far below the GEMM rate).

The first step's eigendecomposition (``eigh``) is once per run and not counted. Element-wise work (the inner Adam,
weight decay, the factor EMA) is memory-bound and priced by bytes in the projection, not counted as FLOPs.
"""

from __future__ import annotations

from typing import NamedTuple

from optbench.config.schema import OptimizerConfig

FP32 = 4


class SoapFlops(NamedTuple):
    """SOAP's FLOPs per step on one matrix."""

    gemm: float
    """Matrix products (factor update, projections, power iteration), amortized over the eigenbasis period."""
    qr: float
    """Householder QR of both eigenbases (geqrf + orgqr), amortized over the eigenbasis period."""

    @property
    def total(self) -> float:
        return self.gemm + self.qr


def soap_flops(m: int, n: int, precondition_frequency: int = 1, kl_shampoo: bool = True) -> SoapFlops:
    """SOAP's FLOPs per step on an m x n matrix (see the module docstring)."""
    cross = m * m * n + m * n * n
    every_step = 4 * cross  # gradient into the eigenbasis, update out of it
    every_step += 4 * m**3 + 4 * n**3 + 4 * cross if kl_shampoo else 2 * cross
    refresh = 4 * cross + 4 * m**3 + 4 * n**3
    qr = 8.0 / 3.0 * (m**3 + n**3)
    return SoapFlops(every_step + refresh / precondition_frequency, qr / precondition_frequency)


def matrix_state_bytes(optimizer: OptimizerConfig, shape: tuple[int, ...]) -> float:
    """Optimizer-state bytes of one matrix the run's emerging optimizer updates (local shard shape)."""
    numel = 1
    for size in shape:
        numel *= size
    if optimizer.soap is not None:
        m, n = shape[-2], shape[-1]
        return FP32 * (3 * numel + 2 * m * m + 2 * n * n)
    state = 2 * FP32 * numel  # main copy, momentum
    moment2 = optimizer.adaptive_muon
    if moment2 is not None:
        state += FP32 * (numel if moment2.moment2_method == "adamuon" else max(shape[-2], shape[-1]))
    return state


def adam_state_bytes(numel: int, moment_bytes: int = FP32) -> float:
    """AdamW's state (fp32 main copy, both moments of ``moment_bytes`` each) of ``numel`` elements."""
    return (FP32 + 2 * moment_bytes) * numel
