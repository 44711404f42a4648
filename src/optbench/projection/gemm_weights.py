"""What a pipeline rank's GEMM weights cost beyond the GEMMs' FLOPs: their traffic per microbatch and their FP8 cast.

* :func:`weight_traffic`: per microbatch each GEMM's forward and data gradient read its weights and its weight
  gradient reads and writes the main gradient it accumulates into (``gradient_accumulation_fusion``); the step
  model bounds each pass by these bytes over HBM (the roofline, :mod:`optbench.projection.step_model`);
* :func:`fp8_cast`: once a step Transformer Engine quantizes the weights to FP8 (cached across microbatches).
"""

from __future__ import annotations

from dataclasses import dataclass

from optbench.accounting.params import ATTENTION, DENSE_MLP, EMBEDDING, EXPERT, QKV, ROUTER, SHARED_EXPERT
from optbench.accounting.placement import Placement, pipeline_rank_of
from optbench.accounting.activations import NVFP4_BYTES_PER_ELEMENT
from optbench.config.schema import RunConfig
from optbench.projection.assumptions import Assumptions
from optbench.projection.interconnect import Interconnect

BF16_BYTES = 2
MXFP8_SCALE_BYTES = 1 / 32
"""One 1-byte E8M0 scale per 32 elements."""


def weight_bytes_per_element(run: RunConfig) -> float:
    """Bytes of one GEMM weight element as the GEMMs read it: FP4 (1/2, + 1/16 for NVFP4's FP8 scale per 16
    elements) under NVFP4, FP8 (1, + 1/32 for MXFP8 scales) under an FP8 recipe, else bf16."""
    prec = run.precision
    if prec.fp4 is not None:
        return NVFP4_BYTES_PER_ELEMENT
    if prec.fp8 is None:
        return BF16_BYTES
    return 1 + (MXFP8_SCALE_BYTES if prec.fp8_recipe == "mxfp8" else 0.0)


@dataclass(frozen=True)
class WeightTraffic:
    """One class of a pipeline rank's GEMMs and the weight bytes they move per microbatch (per GPU).

    Each GEMM reads its weights in the forward and again in the data gradient, and the weight gradient
    reads and writes the fp32 (or bf16) ``main_grad`` it accumulates into (``gradient_accumulation_fusion``);
    a GEMM with few rows per weight is bound by these bytes, not by its FLOPs (the roofline).
    """

    flops_mb: float
    """FLOPs per GPU per microbatch of these GEMMs (forward + backward)."""
    weight_bytes: float
    """Weight bytes the forward reads (the data gradient reads as many)."""
    grad_bytes: float
    """Main-gradient bytes the weight gradient reads and writes."""


def gemm_numel_per_pipeline_rank(placement: Placement) -> list[tuple[int, list[int]]]:
    """Per pipeline rank: (dense GEMM-weight elements, GEMM-weight elements of each EP rank's experts)."""

    def gemm(params: tuple) -> int:
        return sum(x.numel for x in params if x.spec.is_muon and x.spec.kind != ROUTER)

    # Every EP rank of a pipeline rank holds as many experts of each layer, shaped alike (DpGroupWork.shape_class).
    return [(gemm(h.dense), [gemm(h.experts[0])] * len(h.experts) or [0]) for h in placement.ranks]


GEMM_CALLS_PER_WEIGHT = 3
"""A GEMM weight's calls per microbatch: forward, data gradient, weight gradient."""
GRAPHED_KINDS = {"attn": (QKV, ATTENTION), "mlp": (DENSE_MLP,), "moe": (ROUTER, SHARED_EXPERT), "moe_router": (ROUTER,)}
"""Per Transformer Engine CUDA graph scope (``parallel.cuda_graph_scope``), the GEMM weights whose calls it captures."""


def eager_gemm_weight(run: RunConfig):
    """Whether a dense GEMM weight's calls are launched one by one in ``run``: every 2-D weight but the embedding (a
    lookup) and the routed experts (grouped GEMMs, priced as measured by the small-expert term), unless a CUDA graph
    replays them (``full_iteration`` captures the whole step; a per-layer scope its modules' GEMMs)."""
    p = run.parallel
    if p.cuda_graph_impl == "full_iteration":
        return lambda spec: False
    graphed = {kind for scope in (p.cuda_graph_scope or ()) for kind in GRAPHED_KINDS.get(scope, ())}
    return lambda spec: len(spec.shape) == 2 and spec.kind not in (EMBEDDING, EXPERT) and spec.kind not in graphed


def dense_gemm_calls(run: RunConfig, placement: Placement) -> list[int]:
    """Per pipeline rank: dense GEMM calls launched one by one per microbatch, three per eager weight."""
    eager = eager_gemm_weight(run)
    return [GEMM_CALLS_PER_WEIGHT * sum(1 for x in h.dense if eager(x.spec)) for h in placement.ranks]


def weight_traffic(
    run: RunConfig, work: list, gemm_numel: list[tuple[int, list[int]]], tokens_gpu: float
) -> tuple[tuple[WeightTraffic, ...], ...]:
    """Per pipeline rank: (routed experts, everything else) as :class:`WeightTraffic`.

    The experts' FLOPs are their share of the rank's; their weights those of the fullest EP rank. The
    rest (attention, output head included) is set against the decoder's dense GEMM weights: that
    overstates its FLOPs per weight, so its weight-bound time is a lower bound (with a whole sequence of
    rows per GEMM it is compute-bound in every layout we search).
    """
    weight = weight_bytes_per_element(run)
    grad = 2 * (4 if run.optimizer.grad_reduce_in_fp32 else BF16_BYTES)  # read + write of main_grad
    out = []
    for w, (dense, experts) in zip(work, gemm_numel):
        routed = w.expert_flops_per_token * tokens_gpu
        rest = w.flops_per_token * tokens_gpu - routed
        held = max(experts)
        out.append(
            (WeightTraffic(routed, held * weight, held * grad), WeightTraffic(rest, dense * weight, dense * grad))
        )
    return tuple(out)


def fp8_cast(
    run: RunConfig, net: Interconnect, a: Assumptions, layout, distopt: bool, gemm_numel: list[tuple[int, list[int]]]
) -> tuple[float, ...]:
    """Per rank: quantizing its GEMM weights to FP8 (or FP4) once per step (TE caches them across microbatches).

    With ``fp8_param_gather`` (``fp4_param_gather``) under the distributed optimizer only the rank's shard is cast
    (the gathered parameters arrive quantized); otherwise every GEMM weight the rank holds.
    """
    world = layout.world_size
    prec = run.precision
    if prec.fp8 is None and prec.fp4 is None:
        return (0.0,) * world
    sharded = distopt and (prec.fp8_param_gather or prec.fp4_param_gather)
    dense_share = 1 / (layout.dp * layout.cp) if sharded else 1.0
    expert_share = 1 / layout.edp if sharded else 1.0
    out = []
    for rank in range(world):
        dense, experts = gemm_numel[pipeline_rank_of(layout, rank)]
        ep_rank = (rank // layout.etp) % layout.ep
        numel = dense * dense_share + experts[ep_rank % len(experts)] * expert_share
        out.append(numel * a.fp8_cast_bytes_per_element / net.hbm_effective)
    return tuple(out)
