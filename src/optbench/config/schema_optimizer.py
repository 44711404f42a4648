"""The optimizer sections of the run's schema: AdamW's settings and Megatron Core's emerging optimizers (Muon,
AdaMuon, SOAP), each leaf declared with :func:`~optbench.config.field_spec.setting` like every field of
:mod:`optbench.config.schema`, which re-exports them (the run's schema is one import).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from optbench.config.frozen import Frozen
from optbench.config.domain_types import Choice, Flag, Integer, Real
from optbench.config.field_spec import BRIDGE, PROBABILITY, setting

OPTIMIZERS = ("adamw", "muon", "adaptive_muon", "soap")
MUON_FAMILY = ("muon", "adaptive_muon")
"""Optimizers configured by ``optimizer.muon`` (AdaMuon is Muon with a second moment after Newton-Schulz)."""
MATRIX_OPTIMIZERS = ("muon", "adaptive_muon", "soap")
"""Megatron Core's emerging optimizers: 2-D weights (not embedding/output) go to them, the rest to the scalar optimizer."""
OPTIMIZER_LABELS = {"adamw": "AdamW", "muon": "Muon", "adaptive_muon": "AdaMuon", "soap": "SOAP"}
"""How plans, tables and messages name each optimizer."""
MATRIX_FLOPS_LABELS = {"muon": "NS", "adaptive_muon": "NS", "soap": "SOAP"}
"""Short name of a matrix optimizer's own FLOPs in throughput lines (Newton-Schulz; SOAP's products and QR)."""
MATRIX_FLOPS_WORDS = {"muon": "Newton-Schulz", "adaptive_muon": "Newton-Schulz", "soap": "SOAP's matrix products and QR"}
"""The same in words, for sentences ("... with Newton-Schulz"): SOAP runs no Newton-Schulz."""
SCALAR_OPTIMIZERS = ("adam", "lion")
MOMENT2_METHODS = ("adamuon", "normuon")
MUON_COEFFICIENTS = ("quintic", "simple")
MUON_SCALE_MODES = ("spectral", "shape_scaling", "unit_rms_norm")
MUON_MATMUL_PRECISIONS = ("auto", "medium", "high", "highest")
MUON_TP_MODES = ("blockwise", "duplicated", "distributed")
MUON_ASSIGNMENTS = ("pingpong", "cost_aware")


@dataclass
class MuonConfig(Frozen):
    """Muon as Megatron Core 0.16.1 implements it (FACTS.md section 5); defaults as the Kimi K2 recipe."""

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
    """Newton-Schulz product precision: medium (bf16), high (tf32), highest (fp32); auto = medium on GPU, highest on CPU."""
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
    """Compute the symmetric Newton-Schulz products (X X^T, A A) one triangle block at a time (ours; local engine only)."""
    qk_clip: bool = setting(False, Flag(), bridge="model.qk_clip")
    """MuonClip's QK-clip (Kimi K2): after each step scale the query/key weights of heads whose max attention
    logit exceeded qk_clip_threshold (Megatron Core model.qk_clip; MLA models, and GQA models without
    QK-norm: one scale per query group)."""
    qk_clip_threshold: float = setting(100.0, Real(0.0, 1e6, low_open=True), bridge="model.qk_clip_threshold")
    """QK-clip threshold tau on the pre-softmax logit (Megatron qk_clip_threshold)."""
    qk_clip_alpha: float = setting(0.5, Real(0.0, 1.0), bridge="model.qk_clip_alpha")
    """Share of the scaling put on the query side: q *= eta**alpha, k *= eta**(1-alpha) (Megatron qk_clip_alpha)."""


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


@dataclass
class OptimizerConfig(Frozen):
    """Optimizer; AdamW fields also drive Muon's AdamW side (norms, embeddings, output)."""

    name: str = setting("???", Choice(OPTIMIZERS), bridge="optimizer.optimizer")
    """adamw, muon, adaptive_muon or soap."""
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
    (honoured from Megatron Core 0.19, nemo:26.08)."""
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
        return self.name in MUON_FAMILY and self.muon is not None

    @property
    def matrix_optimizer(self) -> bool:
        """Muon, AdaMuon or SOAP: 2-D weights go to it, the rest to Adam (or Lion)."""
        return self.muon_family or (self.name == "soap" and self.soap is not None)

    @property
    def layer_wise(self) -> bool:
        """The matrix optimizer's layer-wise distributed optimizer: each DP rank owns whole parameters."""
        section = self.soap if self.name == "soap" else self.muon
        return bool(self.matrix_optimizer and section.layer_wise)
