"""The step-time model: one optimizer step's wall time from :class:`StepInputs` and a GEMM efficiency.

With ``R = eff * peak`` (the one calibrated factor, :mod:`optbench.projection.calibration`) and for
pipeline rank ``r``, per microbatch

    t_r = F_r / R + (s(M) - 1) E_r / R + n_r t0 + X_r + W_r + B_r + a2a_r + tp_r + max(0, cp_r - A_r / R)

(``X_r``: the element-wise kernels' activation bytes at the HBM bandwidth,
:mod:`optbench.projection.activation_traffic`,
breakdown ``activation_traffic``; ``F_r`` its GEMM FLOPs per GPU, ``E_r`` their routed-expert part, ``A_r`` their
attention part that a context-parallel ring overlaps with). ``s(M) = 1 + (M0 / M) ** p`` is how much longer expert GEMMs
with ``M`` routed rows per expert take per FLOP (measured on an H200, results/bench/grouped_gemm.md; breakdown
``small_expert_gemms``). ``n_r t0`` is what the rank's ``n_r`` dense GEMM calls per microbatch (forward, data and
weight gradient of each dense weight) cost beyond their FLOPs, ``t0`` per call as measured on an H200
(results/bench/dense_gemm.md; breakdown ``dense_gemm_fixed``). ``tp_r`` is the tensor-parallel collectives' time, all
of it without ``tp_comm_overlap``; with it (Transformer Engine's userbuffers pipeline each all-gather and
reduce-scatter with the GEMM it feeds) only ``max(0, tp_r - T_r / R)``, ``T_r`` the FLOPs of the GEMMs TP splits
(breakdown ``tensor_parallel``). ``W_r`` is what weight traffic adds where it binds (the roofline): for each GEMM class
(routed experts; everything else) the forward and the data gradient read the weights, the weight gradient reads
and writes the main gradient, and each pass takes at least ``bytes / HBM``; the pass's own kernel time is
its FLOPs at ``max(R, gemm_kernel_efficiency x peak)``, so ``W_r`` is the sum of ``max(0, bytes / HBM - kernel)``.
Under an FP8 recipe without ``fp8_dot_product_attention`` the attention core (score and value products,
FlashAttention) runs in BF16: its FLOPs take ``fp8_attention_speedup`` times their time at ``R``; ``B_r`` is
the excess (breakdown ``bf16_attention``). With ``parallel.ep_comm_overlap`` (Megatron's EP A2A overlap: the forward of
one microbatch and the backward of another run interleaved, each one's all-to-all hidden behind the other's GEMMs;
Megatron Core ``overlap_moe_expert_parallel_comm``) only what the GEMMs cannot cover is exposed:
``a2a_r -> max(0, a2a_r - F_r / R)``. No parameter is fitted for it: the overlap is taken as complete up
to the GEMM time (the SMs the dispatcher takes are in the calibrated efficiency). The slowest pipeline rank sets the
pace; interleaved 1F1B adds ``(pp - 1) / vpp`` microbatch
times of bubble (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", SC 2021, section 2.2.2), and the fill and drain cross ``pp - 1`` hops each way:

    pipeline = (m + (pp - 1) / vpp) * max_r t_r + 2 (pp - 1) * hop

After the last backward (Megatron's order; every rank then meets in the gradient-norm all-reduce):

    step = pipeline + max_rank grad_exposed + max_rank optimizer + max_rank gather_exposed + max_rank fp8_cast

* gradient reduction overlapped with the last microbatch's backward (``overlap_grad_reduce``):
  ``grad_exposed = max(last bucket, reduction - backward share x (F_r / R + W_r + B_r))``, else all of it;
* parameter all-gather: the first bucket when it overlaps the next forward (AdamW
  ``overlap_param_gather``), all of it when it follows the step (Muon's layer-wise optimizer);
* the optimizer step of the slowest rank sets the step (the all-gather waits for it): Muon's
  imbalance is the busiest rank minus the mean.

Under Megatron FSDP the gradient reduction and the parameter all-gather happen every microbatch instead, layer by
layer (two gathers and one reduce-scatter of the stage's weights), overlapped with the GEMMs: a microbatch adds
``max(0, fsdp_r - GEMM time)`` (breakdown ``fsdp_exposed``), and after the step only the first layer's gather waits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

from optbench.projection.work import RankOptimizer, StepInputs

BREAKDOWN_TERMS = (
    "compute",
    "gemm_weight_bound",
    "bf16_attention",
    "small_expert_gemms",
    "dense_gemm_fixed",
    "activation_traffic",
    "pipeline_bubble",
    "moe_all_to_all",
    "tensor_parallel",
    "context_parallel",
    "pipeline_p2p",
    "fsdp_exposed",
    "dp_grad_reduce_exposed",
    "optimizer",
    "param_gather_exposed",
    "fp8_weight_cast",
)
"""Named parts of a projected step, in the order they add up."""


@dataclass(frozen=True)
class StepBreakdown:
    """One projected step, seconds per part (they add up to ``total_s``)."""

    parts: dict[str, float]
    """Seconds per BREAKDOWN_TERMS entry."""
    efficiency: float
    """GEMM efficiency the step was evaluated at (fraction of the GEMM peak)."""
    slowest_pipeline_rank: int
    """Pipeline rank that sets the microbatch time."""
    optimizer_busiest_rank: int
    """Global rank with the longest optimizer step."""
    optimizer_busiest: RankOptimizer
    """Its optimizer time by kind."""
    optimizer_mean: RankOptimizer
    """Mean over ranks of the optimizer time by kind."""

    @property
    def total_s(self) -> float:
        return sum(self.parts.values())

    @property
    def optimizer_imbalance_s(self) -> float:
        """Busiest rank's optimizer time minus the mean rank's."""
        return self.optimizer_busiest.total_s - self.optimizer_mean.total_s

    def as_dict(self, digits: int = 5) -> dict:
        return {
            "step_time_s": round(self.total_s, digits),
            "parts_s": {k: round(v, digits) for k, v in self.parts.items()},
            "efficiency": round(self.efficiency, 6),
            "slowest_pipeline_rank": self.slowest_pipeline_rank,
            "optimizer_busiest_rank": self.optimizer_busiest_rank,
            "optimizer_busiest_s": {k: round(v, digits) for k, v in asdict(self.optimizer_busiest).items()},
            "optimizer_mean_s": {k: round(v, digits) for k, v in asdict(self.optimizer_mean).items()},
        }


def _mean(ranks: tuple[RankOptimizer, ...]) -> RankOptimizer:
    n = len(ranks)
    return RankOptimizer(
        ns_gemm_s=sum(r.ns_gemm_s for r in ranks) / n,
        elementwise_s=sum(r.elementwise_s for r in ranks) / n,
        launch_s=sum(r.launch_s for r in ranks) / n,
    )


def _weight_bound_s(inputs: StepInputs, r: int, rate: float, backward_share: float) -> float:
    """Seconds pipeline rank ``r``'s GEMMs take beyond their FLOPs at ``rate`` because their weight traffic binds:
    per class, forward, data gradient and weight gradient each take max(FLOPs / rate, bytes / HBM)."""
    extra = 0.0
    hbm = inputs.hbm_bytes_per_s
    rate = max(rate, inputs.gemm_kernel_efficiency * inputs.gemm_peak_flops)
    for c in inputs.stage_weight_traffic[r] if inputs.stage_weight_traffic else ():
        forward = (1 - backward_share) * c.flops_mb / rate
        gradient = backward_share / 2 * c.flops_mb / rate  # data and weight gradient alike
        extra += max(0.0, c.weight_bytes / hbm - forward) + max(0.0, c.weight_bytes / hbm - gradient)
        extra += max(0.0, c.grad_bytes / hbm - gradient)
    return extra


class _StageTime(NamedTuple):
    """One pipeline rank's microbatch, seconds by part."""

    flops: float
    """Its GEMM FLOPs at the calibrated rate."""
    weight_bound: float
    """What weight traffic adds (:func:`_weight_bound_s`)."""
    bf16_attention: float
    """What the attention core adds running in BF16 under FP8 GEMMs."""
    small_experts: float
    """What the routed-expert GEMMs add at few rows per expert (``expert_gemm_slowdown``)."""
    dense_fixed: float
    """What the dense GEMM calls cost beyond their FLOPs (``dense_gemm_fixed_s`` each)."""
    activation: float
    """What the element-wise kernels take moving activations through HBM."""
    cp_exposed: float
    """Context-parallel ring time the attention does not hide."""
    ep_exposed: float
    """MoE all-to-all time not hidden (all of it without EP overlap)."""
    tp_exposed: float
    """TP collectives' time not hidden (all of it without TP overlap; beyond the TP-split GEMMs' time with it)."""
    fsdp_exposed: float
    """Megatron FSDP's gathers and reduce-scatters beyond the GEMMs' time (0 without FSDP)."""
    total: float
    """The microbatch: the parts above."""

    @property
    def gemm(self) -> float:
        """GEMM time: FLOPs, weight-bound excess, BF16 attention, small expert GEMMs and the dense GEMMs' fixed cost."""
        return self.flops + self.weight_bound + self.bf16_attention + self.small_experts + self.dense_fixed


def _pipeline_hops(inputs: StepInputs) -> int:
    """Pipeline sends on the step's critical path. The interleaved schedule overlaps its steady-state sends with
    computation (``overlap_p2p_comm``), leaving the fill and the drain; Megatron's non-interleaved 1F1B cannot
    ("Non-interleaved pipeline parallelism does not support overlapping p2p communication",
    ``pipeline_parallel/schedules.py``): each of its ``m + pp - 1`` microbatch slots waits for its activations'
    and its gradients' exchange."""
    if inputs.pp == 1:
        return 0
    return 2 * (inputs.microbatches + inputs.pp - 1) if inputs.vpp == 1 else 2 * (inputs.pp - 1)


def _stage_time(inputs: StepInputs, r: int, rate: float, backward_share: float) -> _StageTime:
    cp_exposed = max(0.0, inputs.stage_cp_s[r] - inputs.stage_attention_flops_mb[r] / rate)
    flops = inputs.stage_flops_mb[r] / rate
    bound = _weight_bound_s(inputs, r, rate, backward_share)
    bf16_attention = 0.0
    if inputs.stage_bf16_attention_flops_mb:
        bf16_attention = inputs.stage_bf16_attention_flops_mb[r] / rate * (inputs.bf16_attention_slowdown - 1)
    small_experts = 0.0
    if inputs.stage_expert_flops_mb:
        small_experts = inputs.stage_expert_flops_mb[r] / rate * (inputs.expert_gemm_slowdown - 1)
    dense_fixed = inputs.stage_dense_gemm_fixed_s[r] if inputs.stage_dense_gemm_fixed_s else 0.0
    tp = inputs.stage_tp_s[r]
    if inputs.tp_overlap and inputs.stage_tp_gemm_flops_mb:
        tp = max(0.0, tp - inputs.stage_tp_gemm_flops_mb[r] / rate)
    gemm = flops + bound + bf16_attention + small_experts + dense_fixed
    ep = max(0.0, inputs.stage_ep_s[r] - gemm) if inputs.ep_overlap else inputs.stage_ep_s[r]
    activation = inputs.stage_activation_s[r] if inputs.stage_activation_s else 0.0
    fsdp = max(0.0, inputs.stage_fsdp_s[r] - gemm) if inputs.stage_fsdp_s else 0.0
    return _StageTime(
        flops,
        bound,
        bf16_attention,
        small_experts,
        dense_fixed,
        activation,
        cp_exposed,
        ep,
        tp,
        fsdp,
        gemm + activation + ep + tp + cp_exposed + fsdp,
    )


def evaluate(inputs: StepInputs, efficiency: float, backward_share: float = 2.0 / 3.0) -> StepBreakdown:
    """Project one step at GEMM ``efficiency`` (fraction of ``inputs.gemm_peak_flops``)."""
    if not 0 < efficiency:
        raise ValueError(f"efficiency must be positive, got {efficiency}")
    rate = efficiency * inputs.gemm_peak_flops
    per_stage = [_stage_time(inputs, r, rate, backward_share) for r in range(inputs.pp)]
    slow = max(range(inputs.pp), key=lambda r: per_stage[r].total)
    stage = per_stage[slow]
    m = inputs.microbatches

    def exposed_grad(rank: int) -> float:
        reduction = inputs.grad_comm_s[rank]
        if not inputs.overlap_grad_reduce:
            return reduction
        window = backward_share * per_stage[inputs.rank_pipeline[rank]].gemm
        return max(inputs.grad_bucket_s[rank], reduction - window)

    gather = inputs.gather_bucket_s if inputs.gather_overlapped else inputs.gather_s
    busiest = max(range(inputs.world), key=lambda r: inputs.optimizer[r].total_s)
    parts = {
        "compute": m * stage.flops,
        "gemm_weight_bound": m * stage.weight_bound,
        "bf16_attention": m * stage.bf16_attention,
        "small_expert_gemms": m * stage.small_experts,
        "dense_gemm_fixed": m * stage.dense_fixed,
        "activation_traffic": m * stage.activation,
        "pipeline_bubble": (inputs.pp - 1) / inputs.vpp * stage.total,
        "moe_all_to_all": m * stage.ep_exposed,
        "tensor_parallel": m * stage.tp_exposed,
        "context_parallel": m * stage.cp_exposed,
        "pipeline_p2p": _pipeline_hops(inputs) * inputs.p2p_s,
        "fsdp_exposed": m * stage.fsdp_exposed,
        "dp_grad_reduce_exposed": max(exposed_grad(r) for r in range(inputs.world)),
        "optimizer": inputs.optimizer[busiest].total_s,
        "param_gather_exposed": max(gather),
        "fp8_weight_cast": max(inputs.fp8_cast_s),
    }
    return StepBreakdown(
        parts=parts,
        efficiency=efficiency,
        slowest_pipeline_rank=slow,
        optimizer_busiest_rank=busiest,
        optimizer_busiest=inputs.optimizer[busiest],
        optimizer_mean=_mean(inputs.optimizer),
    )


def solve_efficiency(inputs: StepInputs, step_time_s: float, backward_share: float = 2.0 / 3.0) -> float:
    """The GEMM efficiency at which the projected step equals ``step_time_s`` (bisection; the step
    time falls monotonically as the efficiency grows). Raises ValueError when even a perfect GEMM
    efficiency (1.0) leaves the step slower than ``step_time_s``."""
    if evaluate(inputs, 1.0, backward_share).total_s > step_time_s:
        raise ValueError(f"the non-GEMM parts alone exceed the {step_time_s:.3f} s step; the model cannot reach it")
    low, high = 1e-6, 1.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if evaluate(inputs, mid, backward_share).total_s > step_time_s:
            low = mid
        else:
            high = mid
        if high - low < 1e-13:
            break
    return 0.5 * (low + high)
