"""AdaMuon / NorMuon: Muon (``optimizer.muon``) plus a second moment of the orthogonalized update (Megatron Core
>= 0.18 ``adaptive_muon``, Emerging-Optimizers ``AdaptiveMuon``), everything the stages need to know about it.
Its state is Muon's plus the second moment: element-wise for ``adamuon``, one value per row or column for
``normuon`` (the longer side averaged: ``max(m, n)`` values)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from optbench.config.domain_types import Choice, Real
from optbench.config.field_spec import PROBABILITY, setting
from optbench.config.frozen import Frozen
from optbench.config.optimizers import muon
from optbench.config.optimizers.entry import FP32, OptimizerEntry, StudyArm

MOMENT2_METHODS = ("adamuon", "normuon")


@dataclass
class AdaptiveMuonConfig(Frozen):
    """AdaMuon / NorMuon: Muon (``optimizer.muon``) plus a second moment of the orthogonalized update (Megatron Core
    >= 0.18 ``adaptive_muon``, Emerging-Optimizers AdaptiveMuon)."""

    moment2_method: str = setting("adamuon", Choice(MOMENT2_METHODS), bridge="optimizer.adaptive_muon_moment2_method")
    """adamuon: element-wise second moment (as AdamW's); normuon: one per row or column (the longer side averaged)."""
    beta2: float = setting(0.95, PROBABILITY, bridge="optimizer.adaptive_muon_beta2")
    """Decay of the second moment (adaptive_muon_beta2)."""
    eps: float = setting(1e-8, Real(0.0, 1.0, low_open=True), bridge="optimizer.adaptive_muon_eps")
    """Added to the second moment's square root (adamuon) or its floor (normuon) (adaptive_muon_eps)."""


def _state_bytes(optimizer, shape: tuple[int, ...]) -> float:
    moment2 = optimizer.adaptive_muon
    per_matrix = math.prod(shape) if moment2.moment2_method == "adamuon" else max(shape[-2], shape[-1])
    return muon.ENTRY.matrix_state_bytes(optimizer, shape) + FP32 * per_matrix


def _describe(optimizer, overrides: list[tuple[str, str]]) -> str:
    a = optimizer.adaptive_muon
    return f"{muon.describe_muon(optimizer, overrides)}; second moment {a.moment2_method} beta2 {a.beta2:g}"


ENTRY = OptimizerEntry(
    name="adaptive_muon",
    label="AdaMuon",
    sections=("muon", "adaptive_muon"),
    matrix=True,
    flops_label="NS",
    flops_words="Newton-Schulz",
    preset_optimizer="muon",
    upstream="emerging_optimizers.orthogonalized_optimizers",
    bridge_marker="emerging_adaptive_muon",
    bridge_fields=(
        *muon.MUON_BRIDGE_FIELDS,
        "optimizer.adaptive_muon.moment2_method",
        "optimizer.adaptive_muon.beta2",
        "optimizer.adaptive_muon.eps",
    ),
    bridge_flags=muon.ENTRY.bridge_flags,
    matrix_state_bytes=_state_bytes,
    describe=_describe,
    # The update is element-wise normalised like Adam's (the spectral scale cancels in Emerging-Optimizers 0.2):
    # the grid starts from AdamW's range.
    study_arms=(
        StudyArm(
            "adaptive_muon",
            "AdaMuon",
            "kimi_k2_tiny_muon",
            ("optimizer=adaptive_muon",),
            (3e-4, 1e-3, 3e-3),
            "tab:purple",
        ),
    ),
    gpu_smoke=("qwen3_moe_tiny_muon", ("optimizer=adaptive_muon",)),
    local_builder="optbench.optim.training:build_muon",
    matrix_calls="optbench.accounting.ns_flops:newton_schulz_calls",
)
