"""The optimizer section of the run's schema: AdamW's settings, shared by every optimizer's scalar side, and one
settings section per emerging optimizer, each declared with its registry entry (:mod:`optbench.config.optimizers`);
:mod:`optbench.config.schema` re-exports them (the run's schema is one import).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from optbench.config.frozen import Frozen
from optbench.config.domain_types import Choice, Flag, Real
from optbench.config.field_spec import BRIDGE, PROBABILITY, setting
from optbench.config.optimizers import MATRIX_OPTIMIZERS, REGISTRY, entry
from optbench.config.optimizers.adaptive_muon import MOMENT2_METHODS, AdaptiveMuonConfig
from optbench.config.optimizers.muon import (
    MUON_ASSIGNMENTS,
    MUON_COEFFICIENTS,
    MUON_MATMUL_PRECISIONS,
    MUON_SCALE_MODES,
    MUON_TP_MODES,
    MuonConfig,
)
from optbench.config.optimizers.soap import SoapConfig

__all__ = [
    "OPTIMIZERS",
    "MUON_FAMILY",
    "MATRIX_OPTIMIZERS",
    "OPTIMIZER_LABELS",
    "MATRIX_FLOPS_LABELS",
    "MATRIX_FLOPS_WORDS",
    "SCALAR_OPTIMIZERS",
    "MOMENT2_METHODS",
    "MUON_COEFFICIENTS",
    "MUON_SCALE_MODES",
    "MUON_MATMUL_PRECISIONS",
    "MUON_TP_MODES",
    "MUON_ASSIGNMENTS",
    "MuonConfig",
    "AdaptiveMuonConfig",
    "SoapConfig",
    "OptimizerConfig",
]

OPTIMIZERS = tuple(REGISTRY)
MUON_FAMILY = tuple(name for name, e in REGISTRY.items() if "muon" in e.sections)
"""Optimizers configured by ``optimizer.muon`` (AdaMuon is Muon with a second moment after Newton-Schulz)."""
OPTIMIZER_LABELS = {name: e.label for name, e in REGISTRY.items()}
"""How plans, tables and messages name each optimizer."""
MATRIX_FLOPS_LABELS = {name: REGISTRY[name].flops_label for name in MATRIX_OPTIMIZERS}
"""Short name of a matrix optimizer's own FLOPs in throughput lines."""
MATRIX_FLOPS_WORDS = {name: REGISTRY[name].flops_words for name in MATRIX_OPTIMIZERS}
"""The same in words, for sentences ("... with Newton-Schulz")."""
SCALAR_OPTIMIZERS = ("adam", "lion")


@dataclass
class OptimizerConfig(Frozen):
    """Optimizer; AdamW fields also drive Muon's AdamW side (norms, embeddings, output)."""

    name: str = setting("???", Choice(OPTIMIZERS), bridge="optimizer.optimizer")
    """A name in the optimizer registry (optbench/config/optimizers): adamw or a matrix optimizer."""
    lr: float = setting(3e-4, Real(0.0, 10.0, low_open=True), bridge="optimizer.lr")
    """Peak learning rate."""
    min_lr: float = setting(3e-5, Real(0.0, 10.0), bridge="optimizer.min_lr")
    """Learning rate at the end of the cosine decay."""
    weight_decay: float = setting(
        0.1,
        Real(0.0, 10.0),
        bridge=("optimizer.weight_decay", "scheduler.start_weight_decay", "scheduler.end_weight_decay"),
    )
    """Decoupled weight decay."""
    clip_grad: float = setting(1.0, Real(0.0, 1e6), bridge="optimizer.clip_grad")
    """Global gradient-norm clip (0 disables)."""
    adam_beta1: float = setting(0.9, PROBABILITY, bridge="optimizer.adam_beta1")
    """AdamW beta1."""
    adam_beta2: float = setting(0.95, PROBABILITY, bridge="optimizer.adam_beta2")
    """AdamW beta2."""
    adam_eps: float = setting(1e-8, Real(0.0, 1.0, low_open=True), bridge="optimizer.adam_eps", preset="reproduce")
    """AdamW epsilon."""
    use_distributed_optimizer: bool = setting(
        True,
        Flag(),
        readers=BRIDGE,
        bridge=("optimizer.use_distributed_optimizer", "ddp.use_distributed_optimizer"),
    )
    """Element-wise distributed optimizer (ZeRO-1); Muon requires false."""
    overlap_grad_reduce: bool = setting(
        True,
        Flag(),
        readers=BRIDGE,
        bridge=("ddp.overlap_grad_reduce", "comm_overlap.overlap_grad_reduce"),
    )
    """Overlap the gradient reduction with the backward pass."""
    overlap_param_gather: bool = setting(
        True,
        Flag(),
        readers=BRIDGE,
        bridge=("ddp.overlap_param_gather", "comm_overlap.overlap_param_gather"),
    )
    """Overlap the parameter all-gather with the next forward; Muon requires false."""
    grad_reduce_in_fp32: bool = setting(
        False,
        Flag(),
        bridge=("mixed_precision.grad_reduce_in_fp32", "ddp.grad_reduce_in_fp32"),
    )
    """Reduce gradients in fp32 (Kimi K2 Muon recipe: true)."""
    scalar_optimizer: str = setting("adam", Choice(SCALAR_OPTIMIZERS), bridge="optimizer.muon_scalar_optimizer")
    """Muon family: the optimizer of everything Muon does not take (norms, biases, embeddings, output): adam, or lion
    (honoured from Megatron Core 0.19, NeMo 26.08)."""
    lion_beta1: float = setting(0.95, PROBABILITY, bridge="optimizer.lion_beta1")
    """Lion's interpolation beta of the sign update (lion_beta1)."""
    lion_beta2: float = setting(0.98, PROBABILITY, bridge="optimizer.lion_beta2")
    """Lion's momentum decay (lion_beta2)."""
    muon: Optional[MuonConfig] = None
    """Muon settings (muon, adaptive_muon); null otherwise."""
    adaptive_muon: Optional[AdaptiveMuonConfig] = None
    """AdaMuon's second moment (adaptive_muon); null otherwise."""
    soap: Optional[SoapConfig] = None
    """SOAP settings (soap); null otherwise."""

    @property
    def muon_family(self) -> bool:
        """Muon or AdaMuon: Newton-Schulz on every matrix, configured by ``optimizer.muon``."""
        return self.name in MUON_FAMILY and self.matrix_optimizer

    @property
    def matrix_optimizer(self) -> bool:
        """An emerging optimizer with its settings: 2-D weights go to it, the rest to Adam (or Lion)."""
        e = REGISTRY.get(self.name)
        return bool(e and e.matrix and all(getattr(self, s) is not None for s in e.sections))

    @property
    def matrix_section(self):
        """The matrix optimizer's own settings section (``optimizer.muon`` for the Muon family), or None."""
        return entry(self.name).section(self) if self.name in REGISTRY else None

    @property
    def layer_wise_overlap(self) -> bool:
        """The Muon family's layer-wise all-gather deferred into the next forward: Megatron's DDP runs it from its
        forward pre-hooks, so ddp.overlap_param_gather is on as well (Bridge 0.5+ syncs the optimizer's flag)."""
        return bool(self.muon_family and self.muon.layer_wise and self.muon.overlap_param_gather)

    @property
    def layer_wise(self) -> bool:
        """The matrix optimizer's layer-wise distributed optimizer: each DP rank owns whole parameters."""
        return bool(self.matrix_optimizer and self.matrix_section.layer_wise)
