"""Muon: momentum orthogonalized by Newton-Schulz (Megatron Core's ``muon``, docs/optimizer.md), everything the
stages need to know about it. Its FLOPs are counted per tensor-parallel mode in
:mod:`optbench.accounting.ns_flops`; its state is an fp32 main copy and momentum, 8 bytes per element."""

from __future__ import annotations

import math
from dataclasses import dataclass

from optbench.config.domain_types import Choice, Flag, Integer, Real
from optbench.config.field_spec import BRIDGE, PROBABILITY, setting
from optbench.config.frozen import Frozen
from optbench.config.optimizers.entry import FP32, OptimizerEntry, StudyArm

MUON_COEFFICIENTS = ("quintic", "simple", "cubic5")
"""Emerging-Optimizers' coefficient types we run: quintic (Megatron's default), simple, and 0.4.0's cubic5 (five fixed
cubic steps, c = 0: two products per step instead of three)."""
MUON_SCALE_MODES = ("spectral", "shape_scaling", "unit_rms_norm")
MUON_MATMUL_PRECISIONS = ("auto", "medium", "high", "highest")
MUON_TP_MODES = ("blockwise", "duplicated", "distributed")
MUON_ASSIGNMENTS = ("pingpong", "cost_aware")


@dataclass
class MuonConfig(Frozen):
    """Muon as Megatron Core 0.16.1 implements it (docs/optimizer.md, Semantics); defaults as the Kimi K2 recipe."""

    momentum: float = setting(0.95, PROBABILITY, bridge="optimizer.muon_momentum")
    """Momentum beta (Megatron muon_momentum)."""
    nesterov: bool = setting(True, Flag(), bridge="optimizer.muon_nesterov", renamed_from="optimizer.muon_use_nesterov")
    """Nesterov momentum (muon_use_nesterov)."""
    ns_steps: int = setting(5, Integer(1, 100), bridge="optimizer.muon_num_ns_steps")
    """Newton-Schulz iterations (muon_num_ns_steps)."""
    coefficients: str = setting("quintic", Choice(MUON_COEFFICIENTS), bridge="optimizer.muon_coefficient_type")
    """quintic (Megatron: one tuple per step) or simple (Keller Jordan / torch.optim.Muon)."""
    scale_mode: str = setting("spectral", Choice(MUON_SCALE_MODES), bridge="optimizer.muon_scale_mode")
    """spectral sqrt(max(M,N)), shape_scaling sqrt(max(1,M/N)) or unit_rms_norm sqrt(M/N) (muon_scale_mode)."""
    extra_scale_factor: float = setting(
        1.0,
        Real(0.0, 100.0, low_open=True),
        bridge="optimizer.muon_extra_scale_factor",
    )
    """Extra factor on the update (muon_extra_scale_factor; 0.2 with spectral = Moonlight's rule)."""
    fp32_matmul_prec: str = setting(
        "auto",
        Choice(MUON_MATMUL_PRECISIONS),
        bridge="optimizer.muon_fp32_matmul_prec",
        transform="ns_precision",
    )
    """Newton-Schulz product precision: medium (bf16), high (tf32), highest (fp32); auto = medium on GPU, highest on
    CPU."""
    tp_mode: str = setting("blockwise", Choice(MUON_TP_MODES), bridge="optimizer.muon_tp_mode")
    """Tensor-parallel Newton-Schulz: blockwise, duplicated or distributed (muon_tp_mode)."""
    split_qkv: bool = setting(True, Flag(), bridge="optimizer.muon_split_qkv")
    """Orthogonalize Q, K and V blocks of a fused QKV weight separately (muon_split_qkv)."""
    layer_wise: bool = setting(True, Flag(), bridge="optimizer.use_layer_wise_distributed_optimizer")
    """Layer-wise distributed optimizer (dist_muon up to Core 0.17; muon + use_layer_wise_distributed_optimizer
    from Core 0.18): each DP rank owns whole parameters."""
    overlap_param_gather: bool = setting(False, Flag(), readers=BRIDGE, bridge="optimizer.overlap_param_gather")
    """Layer-wise optimizer: all-gather the updated parameters asynchronously, overlapped with the next
    forward pass (Megatron Core 0.17+, nemo:26.04 and newer; Core 0.16 gathers them in the step)."""
    assignment: str = setting("pingpong", Choice(MUON_ASSIGNMENTS))
    """Owner assignment for layer_wise: pingpong (Megatron) or cost_aware (ours; local engine only)."""
    syrk: bool = setting(False, Flag())
    """Compute the symmetric Newton-Schulz products (X X^T, A A) one triangle block at a time (ours; local engine
    only)."""
    qk_clip: bool = setting(False, Flag(), bridge="model.qk_clip")
    """MuonClip's QK-clip (Kimi K2): after each step scale the query/key weights of heads whose max attention
    logit exceeded qk_clip_threshold (Megatron Core model.qk_clip; MLA models, and GQA models without
    QK-norm: one scale per query group)."""
    qk_clip_threshold: float = setting(100.0, Real(0.0, 1e6, low_open=True), bridge="model.qk_clip_threshold")
    """QK-clip threshold tau on the pre-softmax logit (Megatron qk_clip_threshold)."""
    qk_clip_alpha: float = setting(0.5, Real(0.0, 1.0), bridge="model.qk_clip_alpha")
    """Share of the scaling put on the query side: q *= eta**alpha, k *= eta**(1-alpha) (Megatron qk_clip_alpha)."""


MUON_BRIDGE_FIELDS = (
    "optimizer.muon.momentum",
    "optimizer.muon.nesterov",
    "optimizer.muon.scale_mode",
    "optimizer.muon.fp32_matmul_prec",
    "optimizer.muon.ns_steps",
    "optimizer.muon.tp_mode",
    "optimizer.muon.split_qkv",
    "optimizer.muon.extra_scale_factor",
    "optimizer.muon.coefficients",
)
"""Muon's settings every Megatron Core we run takes (Core 0.18 renamed muon_use_nesterov muon_nesterov; Core 0.17
added muon_coefficient_type: before it, quintic only)."""


def describe_muon(optimizer, overrides: list[tuple[str, str]]) -> str:
    """The plan's words on Muon's settings, with Megatron's spelling of the layer-wise optimizer in the run's
    container: dist_muon up to Core 0.17, then muon + use_layer_wise_distributed_optimizer."""
    muon = optimizer.muon
    mode = "layer-wise" if muon.layer_wise else "replicated"
    names = [value for key, value in overrides if key == "optimizer.optimizer"]
    if names:
        flag = ("optimizer.use_layer_wise_distributed_optimizer", "true") in overrides
        mode += f" ({names[0]}{' + use_layer_wise_distributed_optimizer' if flag else ''})"
    return (
        f"{mode}, {muon.coefficients} NS x{muon.ns_steps}, {muon.scale_mode} scale, "
        f"TP mode {muon.tp_mode}, momentum {muon.momentum:g}{' nesterov' if muon.nesterov else ''}"
    )


ENTRY = OptimizerEntry(
    name="muon",
    label="Muon",
    sections=("muon",),
    matrix=True,
    flops_label="NS",
    flops_words="Newton-Schulz",
    preset_optimizer="muon",
    bridge_fields=MUON_BRIDGE_FIELDS,
    bridge_flags=("optimizer.muon.overlap_param_gather",),
    matrix_state_bytes=lambda optimizer, shape: 2 * FP32 * math.prod(shape),  # main copy, momentum
    describe=describe_muon,
    # The spectral update scale sqrt(max(M, N)) is Megatron's and the Kimi K2 recipe's default; Moonlight's
    # AdamW-matched 0.2 x sqrt(max(M, N)) lets Muon share AdamW's learning rates.
    study_arms=(
        StudyArm(
            "muon_spectral",
            "Muon, spectral scale",
            "kimi_k2_tiny_muon",
            ("optimizer.muon.extra_scale_factor=1.0",),
            (3e-4, 1e-3, 3e-3),
            "tab:red",
        ),
        StudyArm(
            "muon_moonlight",
            "Muon, Moonlight 0.2 scale",
            "kimi_k2_tiny_muon",
            ("optimizer.muon.extra_scale_factor=0.2",),
            (1e-3, 3e-3, 1e-2),
            "tab:orange",
        ),
    ),
    gpu_smoke=("qwen3_moe_tiny_muon", ()),
    local_builder="optbench.optim.training:build_muon",
    matrix_calls="optbench.accounting.ns_flops:newton_schulz_calls",
)
