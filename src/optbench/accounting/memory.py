"""Memory per GPU before launch: weights, gradients, optimizer state, activations, allowance.

Bytes per parameter held by a rank (its pipeline stages, TP/ETP shard and EP slice of experts):

* weights: 2 (bf16). Under FP8 / MXFP8 without ``fp8_param_gather`` Transformer Engine also keeps
  quantized copies of every GEMM weight across the microbatches of a step (row- and column-wise:
  about 2 more bytes, term ``fp8_weight_copies``; under NVFP4 2 x (0.5 + 1/16)); with ``fp8_param_gather``
  (``fp4_param_gather``) the weights themselves are those copies (no extra term).
* gradients: the DDP buffer of every local parameter, 4 bytes with ``grad_reduce_in_fp32``, else 2.
* Megatron FSDP (``parallel.megatron_fsdp``): weights and gradients sharded as the optimizer state is, plus two whole
  layers (weights and gradients) gathered at a time (term ``fsdp_buffers``; NVIDIA's presets double-buffer).
* optimizer state: AdamW keeps fp32 master weights, exp_avg and exp_avg_sq (12 bytes; 8 where the run's
  NVIDIA preset keeps the moments in BF16 with Megatron's precision-aware optimizer, Bridge's DeepSeek-V3 recipe); with
  the element-wise distributed optimizer they are sharded over DP x CP (dense) and expert-DP (experts).
  A matrix optimizer keeps its registry entry's state for its matrices (Muon: fp32 master weights and one
  momentum buffer, 8 bytes; :mod:`optbench.accounting.optimizer_work`) and 12 bytes for its Adam-side
  parameters; with the layer-wise optimizer only for the parameters the
  rank owns (Megatron's ping-pong assignment, the busiest rank of each pipeline stage is taken), without it for
  every local parameter.
* activations: :mod:`optbench.accounting.activations` per layer, times the forwards in flight on the
  rank (the first pipeline rank holds the most), plus the bf16 logits of one microbatch on the loss
  stage (the fused cross-entropy Bridge's recipes select writes its gradient in place).
* allowance: 4 GB for the CUDA context, NCCL communicators, cuBLAS / TE workspaces and the token
  dispatcher's buffers, plus 5 % of the activations for allocator fragmentation (Megatron's
  performance setups run PyTorch's allocator with expandable segments, which keeps it small).

Expected error: +-20 % of the total. Left out: CUDA-graph memory pools, activation offloading,
optimizer CPU offload, the all-gather / reduce-scatter staging buffers of the distributed optimizer
(bucketed), MoE load imbalance (a hot expert receives more than topk/num_experts of the tokens),
the MTP layer's eh_proj input, FP8 scale tensors (about 3 % of the FP8 copies), and the transient
peak of the optimizer step itself (Newton-Schulz workspaces of the largest owned matrix).

Capacities are the GPU's HBM figure from gpus.csv compared with bytes / 1e9; the marketed figures
are close to GiB, so the comparison keeps a few percent in hand for memory the driver reserves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from optbench.accounting.activations import forwards_in_flight, layer_bytes_per_token, quantized_bytes
from optbench.accounting.ns_flops import (
    DpGroupWork,
    OwnedItem,
    add_to_ranks,
    costs_by_owner,
    pingpong_by_numel,
)
from optbench.accounting.optimizer_work import adam_state_bytes, matrix_state_bytes
from optbench.accounting.plan_section import MemorySection
from optbench.accounting.params import EMBEDDING, OUTPUT, ROUTER, ParamSpec, padded_vocab_size
from optbench.accounting.placement import Placement, pipeline_rank_of
from optbench.config.layout import Layout
from optbench.config.schema import RunConfig
from optbench.catalog.hardware import gpu_catalog

GB = 1e9
ALLOWANCE_FIXED_GB = 4.0
"""CUDA context, NCCL communicators, cuBLAS / TE workspaces, dispatcher buffers."""
ALLOWANCE_FRAGMENTATION = 0.05
"""Allocator fragmentation, as a fraction of the activations."""
EXPECTED_ERROR = 0.20
"""Relative error the estimate is expected to stay within."""
OMISSIONS = (
    "CUDA-graph pools",
    "activation / optimizer offloading",
    "distributed-optimizer staging buffers",
    "MoE load imbalance",
    "FP8 scale tensors",
    "optimizer-step transients (Newton-Schulz workspaces)",
)
TERMS = (
    "weights",
    "fp8_weight_copies",
    "gradients",
    "fsdp_buffers",
    "optimizer_state",
    "activations",
    "logits",
    "allowance",
)


@dataclass(frozen=True)
class StageMemory:
    """Memory of the busiest GPU of one pipeline rank, GB (1e9 bytes) per term."""

    pipeline_rank: int
    terms: dict[str, float]
    """GB per term (see TERMS)."""
    forwards_in_flight: int
    """Forward passes (model chunks x microbatches) whose activations are held at the peak."""

    @property
    def total(self) -> float:
        return sum(self.terms.values())


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU memory estimate of a run: the worst pipeline stage's breakdown and every stage's total."""

    breakdown_gb: dict[str, float]
    """GB per term on the worst GPU."""
    total_gb: float
    """Sum of the breakdown."""
    hbm_gb: float | None
    """HBM of the run's GPU (None when the GPU is not in the catalog)."""
    fits: bool
    """total_gb <= hbm_gb (True when there is no capacity to compare with)."""
    largest_term: str
    """Name of the largest term on the worst GPU."""
    worst_pipeline_rank: int
    """Pipeline rank of the worst GPU."""
    stage_totals_gb: tuple[float, ...]
    """Total GB of the busiest GPU of every pipeline rank."""
    stages: tuple[StageMemory, ...] = field(repr=False)
    """Every pipeline rank's breakdown."""
    expected_error: float = EXPECTED_ERROR
    """Relative error expected (+-)."""
    omissions: tuple[str, ...] = OMISSIONS
    """What the estimate leaves out."""

    def section(self) -> MemorySection:
        """plan.json's ``memory_per_gpu_gb`` (GB to 0.01)."""
        return MemorySection(
            total=round(self.total_gb, 2),
            hbm=self.hbm_gb,
            fits=self.fits,
            largest_term=self.largest_term,
            worst_pipeline_rank=self.worst_pipeline_rank,
            breakdown={k: round(v, 2) for k, v in self.breakdown_gb.items()},
            stage_totals=tuple(round(t, 2) for t in self.stage_totals_gb),
            expected_error=self.expected_error,
            omissions=tuple(self.omissions),
        )


def _is_fp8_gemm_weight(spec: ParamSpec) -> bool:
    return len(spec.shape) == 2 and spec.kind not in (EMBEDDING, OUTPUT, ROUTER)


def optimizer_bytes_per_rank(
    run: RunConfig, layout: Layout, groups: Sequence[DpGroupWork], adam_moment_bytes: int
) -> list[float]:
    """Optimizer-state bytes of every global rank (:mod:`optbench.accounting.optimizer_work`).

    ``adam_moment_bytes``: bytes per element of each AdamW moment, a fact of the run's release
    (:func:`optbench.releases.presets.adam_moment_bytes`)."""
    opt = run.optimizer
    state = [0.0] * layout.world_size
    # Groups of one shape class hold alike items (DpGroupWork.shape_class): each class is counted once and
    # added to every group's ranks item by item, in the same order as before, so the sums are unchanged.
    if not opt.matrix_optimizer:
        sharded = opt.use_distributed_optimizer
        moment = adam_moment_bytes
        totals: dict[tuple, float] = {}
        for group in groups:
            if group.shape_class not in totals:
                totals[group.shape_class] = adam_state_bytes(sum(item.numel for item in group.items), moment)
            total = totals[group.shape_class]
            for rank in group.ranks:
                state[rank] += total / len(group.ranks) if sharded else total
        return state

    def item_bytes(item: OwnedItem) -> float:
        # Every matrix the emerging optimizer takes has positive FLOPs; the rest is its Adam side.
        return matrix_state_bytes(opt, item.param.local_shape) if item.ns_flops > 0 else adam_state_bytes(item.numel)

    shared = opt.layer_wise and layout.dp * layout.cp > 1
    counted: dict[tuple, float | int | list[list[float]]] = {}
    for group in groups:
        if group.shape_class not in counted:
            owners = pingpong_by_numel(group.items, len(group.ranks)) if shared else None
            counted[group.shape_class] = costs_by_owner([item_bytes(item) for item in group.items], owners)
        add_to_ranks(state, group.ranks, counted[group.shape_class])
    return state


def _activation_gb(run: RunConfig, layout: Layout, placement: Placement, pp_rank: int) -> tuple[float, float, int]:
    """(activations, logits, forwards in flight) of one pipeline rank, GB."""
    p, m, t = run.parallel, run.model, run.train
    tokens = t.mbs * t.seq_length / p.cp
    chunks = [s for s in placement.stages if s.pipeline_rank == pp_rank]
    full = p.recompute_granularity == "full"
    units = max(1, p.recompute_num_layers or 1)

    def chunk_bytes(stage) -> float:
        layers = list(stage.decoder_layers) + [m.num_layers - 1] * len(stage.mtp_layers)
        per_layer = [layer_bytes_per_token(run, layer, p.tp, p.sequence_parallel, p.etp) for layer in layers]
        if not full:
            return tokens * sum(per_layer)
        layer_input = 2.0 * m.hidden_size / (p.tp if p.sequence_parallel and p.tp > 1 else 1)
        if p.recompute_method == "block":
            return tokens * sum(layer_input if i < units else b for i, b in enumerate(per_layer))
        return tokens * layer_input * len(layers) / units

    in_flight = forwards_in_flight(layout, pp_rank)
    held = sum(chunk_bytes(chunks[chunk]) for chunk in in_flight)
    if full:
        # One recompute unit is rebuilt in full during its backward.
        per_layer = [
            layer_bytes_per_token(run, layer, p.tp, p.sequence_parallel, p.etp) for layer in range(m.num_layers)
        ]
        held += tokens * max(per_layer) * units
    logits = 0.0
    if any(s.loss for s in chunks):
        logits = tokens * padded_vocab_size(m, p.tp) / p.tp * 2
    return held / GB, logits / GB, len(in_flight)


def estimate_memory(
    run: RunConfig, layout: Layout, placement: Placement, optimizer_bytes: Sequence[float]
) -> MemoryEstimate:
    """Per-GPU memory of the busiest GPU of every pipeline rank; the worst one decides whether it fits.

    ``layout``, ``placement``, ``optimizer_bytes`` (:func:`optimizer_bytes_per_rank`): the resolved run's
    (``ResolvedRun.memory`` is the one caller).
    """
    quantized = quantized_bytes(run)
    gathered_quantized = run.precision.fp8_param_gather or run.precision.fp4_param_gather
    grad_bytes = 4 if run.optimizer.grad_reduce_in_fp32 else 2
    stages = []
    for pp_rank in range(layout.pp):
        held = placement.ranks[pp_rank]
        # Every EP rank holds as many experts, shaped alike (placement.ExpertSlice): the first is the busiest.
        params = list(held.dense) + list(held.experts[0])
        numel = sum(x.numel for x in params)
        held_numel, fsdp_buffers = numel, 0.0
        if run.parallel.megatron_fsdp:
            # Sharded over DP x CP (experts: expert-DP); two layers at a time gathered whole (double buffer), each
            # with its gradients before they are reduce-scattered.
            layers = sum(len(s.decoder_layers) for s in placement.stages if s.pipeline_rank == pp_rank) or 1
            fsdp_buffers = 2 * numel / layers * (2 + grad_bytes) / GB
            numel = (
                sum(x.numel for x in held.dense) / (layout.dp * layout.cp)
                + sum(x.numel for x in held.experts[0]) / layout.edp
            )
        gemm = sum(x.numel for x in params if _is_fp8_gemm_weight(x.spec)) * numel / held_numel
        ranks = [r for r in range(layout.world_size) if pipeline_rank_of(layout, r) == pp_rank]
        activations, logits, in_flight = _activation_gb(run, layout, placement, pp_rank)
        terms = {
            "weights": 2 * numel / GB,
            "fp8_weight_copies": (2 * quantized * gemm / GB) if quantized and not gathered_quantized else 0.0,
            "gradients": grad_bytes * numel / GB,
            "fsdp_buffers": fsdp_buffers,
            "optimizer_state": max(optimizer_bytes[r] for r in ranks) / GB,
            "activations": activations,
            "logits": logits,
            "allowance": ALLOWANCE_FIXED_GB + ALLOWANCE_FRAGMENTATION * (activations + logits),
        }
        stages.append(StageMemory(pp_rank, terms, in_flight))
    worst = max(stages, key=lambda s: s.total)
    spec = gpu_catalog().get(run.cluster.gpu)
    hbm = spec.hbm_gb if spec else None
    return MemoryEstimate(
        breakdown_gb=dict(worst.terms),
        total_gb=worst.total,
        hbm_gb=hbm,
        fits=hbm is None or worst.total <= hbm,
        largest_term=max(worst.terms, key=worst.terms.__getitem__),
        worst_pipeline_rank=worst.pipeline_rank,
        stage_totals_gb=tuple(s.total for s in stages),
        stages=tuple(stages),
    )
