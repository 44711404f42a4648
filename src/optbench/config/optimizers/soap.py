"""SOAP: Adam in the eigenbasis of Shampoo's Kronecker factors (Megatron Core >= 0.18 ``soap``, Emerging-Optimizers
``SOAP``), everything the stages need to know about it.

State (fp32, as Megatron builds it): main copy, exp_avg, exp_avg_sq (m x n each) and the Kronecker factors L, R with
their eigenbases Q_L, Q_R (m x m, n x n, two each): ``4 (3 m n + 2 m^2 + 2 n^2)`` bytes for an m x n matrix. Megatron's
SOAP is not tensor-parallel aware: each shard is its own matrix, so m x n is the local shard.

FLOPs per step for an m x n matrix, as Emerging-Optimizers 0.2.0 executes them (the containers' release;
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

from dataclasses import dataclass

from optbench.config.domain_types import Flag, Integer
from optbench.config.field_spec import PROBABILITY, setting
from optbench.config.frozen import Frozen
from optbench.config.optimizers.entry import FP32, MatrixFlops, OptimizerEntry, StudyArm


@dataclass
class SoapConfig(Frozen):
    """SOAP: Adam in the eigenbasis of Shampoo's Kronecker factors (Megatron Core >= 0.18 ``soap``, Emerging-Optimizers
    SOAP). Megatron passes only these fields; the inner Adam takes ``adam_beta1/2``; eps 1e-8, one power iteration with
    QR per step (eigh on the first), TF32 products and bias correction are Emerging-Optimizers' defaults."""

    shampoo_beta: float = setting(0.95, PROBABILITY, bridge="optimizer.soap_shampoo_beta")
    """Decay of the Kronecker factors L = E[G G^T], R = E[G^T G] (soap_shampoo_beta)."""
    precondition_frequency: int = setting(1, Integer(1, 100_000), bridge="optimizer.soap_precondition_frequency")
    """Steps between eigenbasis updates (soap_precondition_frequency; Emerging-Optimizers 0.2, the containers' own)."""
    use_kl_shampoo: bool = setting(True, Flag(), bridge="optimizer.soap_use_kl_shampoo")
    """KL-Shampoo's factor update (soap_use_kl_shampoo; Megatron's default true)."""
    layer_wise: bool = setting(True, Flag(), bridge="optimizer.use_layer_wise_distributed_optimizer")
    """Layer-wise distributed optimizer: each DP rank owns whole matrices and their SOAP state (dist_soap); false
    keeps every matrix's state on every DP rank."""


def soap_flops(m: int, n: int, precondition_frequency: int = 1, kl_shampoo: bool = True) -> MatrixFlops:
    """SOAP's FLOPs per step on an m x n matrix (see the module docstring)."""
    cross = m * m * n + m * n * n
    every_step = 4 * cross  # gradient into the eigenbasis, update out of it
    every_step += 4 * m**3 + 4 * n**3 + 4 * cross if kl_shampoo else 2 * cross
    refresh = 4 * cross + 4 * m**3 + 4 * n**3
    qr = 8.0 / 3.0 * (m**3 + n**3)
    return MatrixFlops(every_step + refresh / precondition_frequency, qr / precondition_frequency)


def _elementwise_bytes(m: int, n: int) -> float:
    """Per element outside the products, 46 bytes: fp32 gradient copy (6), weight decay (8), the inner Adam on the
    projected gradient (exp_avg, exp_avg_sq, update: 24), the update's p.add_ (8); and the factor EMAs, 12 bytes per
    factor element."""
    return 46 * m * n + 12 * (m * m + n * n)


EAGER_OPS = 60
"""Eager ops per matrix and step, counted in Emerging-Optimizers 0.2.0 ``SOAP.step``: fp32 copy, KL-Shampoo factor
update (10 per side, 2 lerps), eigenbasis refresh (exp_avg out and in: 4; per side eigenvalues, sort, gathers, K Q,
QR: about 12), gradient projections (4), inner Adam (6), weight decay and update (2)."""


def _state_bytes(optimizer, shape: tuple[int, ...]) -> float:
    m, n = shape[-2], shape[-1]
    return FP32 * (3 * m * n + 2 * m * m + 2 * n * n)


def _describe(optimizer, overrides: list[tuple[str, str]]) -> str:
    section: SoapConfig = optimizer.soap
    return (
        f"{'layer-wise' if section.layer_wise else 'replicated'}, shampoo beta {section.shampoo_beta:g}, eigenbasis "
        f"every {section.precondition_frequency} step(s), KL-Shampoo {'on' if section.use_kl_shampoo else 'off'}"
    )


ENTRY = OptimizerEntry(
    name="soap",
    label="SOAP",
    sections=("soap",),
    matrix=True,
    flops_label="SOAP",
    flops_words="SOAP's matrix products and QR",
    preset_optimizer="adam",
    preset_adapted=True,
    upstream="emerging_optimizers.soap",
    bridge_marker="emerging_soap",
    bridge_fields=(
        "optimizer.soap.shampoo_beta",
        "optimizer.soap.precondition_frequency",
        "optimizer.soap.use_kl_shampoo",
    ),
    products_precision="high",  # Emerging-Optimizers' default: TF32
    products_precision_from=(((0, 4), "highest"),),  # 0.4.0's default: fp32
    matrix_flops=lambda s, m, n: soap_flops(m, n, s.precondition_frequency, s.use_kl_shampoo),
    elementwise_bytes=_elementwise_bytes,
    eager_ops=EAGER_OPS,
    matrix_state_bytes=_state_bytes,
    tensor_parallel_aware=False,
    unshardable_state="SOAP's Kronecker factors and eigenbases (m x m, n x n per matrix)",
    describe=_describe,
    # The eigenbasis refreshed every 10 steps, the SOAP paper's default: Megatron's every step costs ~1.3 s per
    # step on 2 CPU cores for the study's proxy.
    study_arms=(
        StudyArm(
            "soap",
            "SOAP",
            "kimi_k2_tiny_adamw",
            ("optimizer=soap", "optimizer.soap.precondition_frequency=10"),
            (3e-4, 1e-3, 3e-3, 1e-2),
            "tab:green",
        ),
    ),
    gpu_smoke=("qwen3_moe_tiny_muon", ("optimizer=soap",)),
    local_builder="optbench.optim.soap:build_soap",
)
