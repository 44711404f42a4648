"""Everything the step-time model needs that does not depend on the calibrated efficiency.

:func:`build_inputs` turns a run into per-pipeline-rank GEMM FLOPs and communication per
microbatch, and per-global-rank data-parallel traffic and optimizer time. The calibration then
evaluates :func:`optbench.projection.step_model.evaluate` many times at different efficiencies,
cheaply. Formulas (docs/projection.md has them with sources):

* microbatch GEMM FLOPs per GPU = pipeline rank's FLOPs per token x ``mbs * seq / (tp * cp)``;
* MoE token dispatch: each MoE layer does 4 all-to-alls per microbatch (dispatch and combine,
  forward and backward) of ``tokens * topk * hidden * 2`` bytes per rank (the flex dispatcher sends a token
  once per destination rank and, across the network, once per destination NVLink domain:
  :func:`optbench.projection.comm.flex_all_to_all_s`); with ``ep_comm_overlap`` the
  step model hides them behind another microbatch's GEMMs (:mod:`optbench.projection.step_model`);
* tensor parallelism (``tp > 1``): 8 all-gathers / reduce-scatters of ``tokens * hidden * 2`` bytes per layer
  and microbatch (4 forward, 4 backward); with ``tp_comm_overlap`` the step model exposes only what the TP-split
  GEMMs they feed cannot cover;
* context parallelism: a ring passes K and V ``cp - 1`` times forward and twice that backward;
* pipeline: one ``tokens * hidden * 2``-byte activation per hop;
* data parallelism (dense params over DP x CP, experts over expert-DP): AdamW's distributed
  optimizer reduce-scatters gradients (fp32 with ``grad_reduce_in_fp32``, else bf16) and all-gathers
  parameters (FP8 with ``fp8_param_gather``: 1 byte, + 1/32 for MXFP8 scales; else bf16), Megatron
  DDP otherwise all-reduces gradients; Muon's layer-wise optimizer then all-gathers the updated bf16
  parameters of every group larger than one (variable-size, after the step, not overlapped);
* optimizer step per rank: AdamW (fused, multi-tensor) is memory-bound; each Muon parameter a rank
  owns costs ``max(GPU time, host time)``: GPU = NS FLOPs / (NS efficiency x NS peak) + element-wise
  bytes / HBM, host = eager ops x op overhead (:mod:`optbench.projection.assumptions`).
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from optbench.accounting.ns_flops import OwnedItem, OwnersFn, pingpong_by_numel, recipe_tp_mode
from optbench.accounting.placement import pipeline_rank_of
from optbench.config.optimizers import entry
from optbench.config.schema import RunConfig
from optbench.catalog.hardware import gpu_catalog
from optbench.projection import comm
from optbench.releases.versions import container_of, emerging_optimizers_line
from optbench.projection.assumptions import NS_PEAK_FRACTION_OF_BF16, Assumptions
from optbench.projection.gemm_weights import (
    BF16_BYTES,
    WeightTraffic,
    dense_gemm_calls,
    fp8_cast,
    gemm_numel_per_pipeline_rank,
    weight_bytes_per_element,
    weight_traffic,
)
from optbench.projection.interconnect import Interconnect
from optbench.projection.stage_comm import expert_gemm_slowdown, microbatch_tokens, stage_comm
from optbench.projection.stages import pipeline_rank_work
from optbench.resolve import ResolvedRun


@dataclass(frozen=True)
class RankOptimizer:
    """Optimizer-step time of one rank, by kind of work (seconds)."""

    ns_gemm_s: float = 0.0
    """Newton-Schulz GEMMs at the NS efficiency."""
    elementwise_s: float = 0.0
    """Memory-bound element-wise work (AdamW updates, Muon momentum / scale / update)."""
    launch_s: float = 0.0
    """Host time of eager ops not hidden behind GPU work (launch-bound parameters)."""

    @property
    def total_s(self) -> float:
        return self.ns_gemm_s + self.elementwise_s + self.launch_s


@dataclass(frozen=True)
class StepInputs:
    """Efficiency-independent inputs of the step-time model."""

    world: int
    pp: int
    vpp: int
    microbatches: int
    """Microbatches per model replica per step."""
    gemm_peak_flops: float
    """Dense peak FLOP/s of the GEMM precision (FP8 under FP8 recipes, else BF16)."""
    gemm_peak_key: str
    """Its key, e.g. gb300_fp8."""
    stage_flops_mb: tuple[float, ...]
    """Per pipeline rank: GEMM FLOPs per GPU per microbatch (forward + backward)."""
    stage_attention_flops_mb: tuple[float, ...]
    """Per pipeline rank: the attention part of it."""
    stage_ep_s: tuple[float, ...]
    """Per pipeline rank: MoE all-to-all seconds per microbatch."""
    ep_overlap: bool
    """The all-to-all overlapped with another microbatch's computation (``parallel.ep_comm_overlap``)."""
    stage_tp_s: tuple[float, ...]
    """Per pipeline rank: tensor-parallel collectives' seconds per microbatch (all exposed without ``tp_overlap``)."""
    stage_cp_s: tuple[float, ...]
    """Per pipeline rank: context-parallel ring seconds per microbatch (before overlap with attention)."""
    p2p_s: float
    """One pipeline hop of one microbatch's activations."""
    rank_pipeline: tuple[int, ...]
    """Pipeline rank of every global rank."""
    grad_comm_s: tuple[float, ...]
    """Per rank: gradient reduction (all dense and expert buckets), seconds."""
    grad_bucket_s: tuple[float, ...]
    """Per rank: the last bucket's reduction (exposed even when overlapped)."""
    overlap_grad_reduce: bool
    """Gradient reduction overlapped with the last microbatch's backward."""
    gather_s: tuple[float, ...]
    """Per rank: parameter all-gather after the step, seconds (0 when there is none)."""
    gather_bucket_s: tuple[float, ...]
    """Per rank: the first bucket of it (exposed when the gather is overlapped with the forward)."""
    gather_overlapped: bool
    """Parameter all-gather overlapped with the next forward (AdamW overlap_param_gather)."""
    optimizer: tuple[RankOptimizer, ...]
    """Per rank: optimizer-step time."""
    fp8_cast_s: tuple[float, ...]
    """Per rank: quantizing weights to FP8 once per step."""
    stage_weight_traffic: tuple[tuple[WeightTraffic, ...], ...] = ()
    """Per pipeline rank: its GEMM classes' weight traffic (routed experts, dense); empty: GEMMs priced by FLOPs
    only."""
    hbm_bytes_per_s: float = 0.0
    """Achievable HBM bandwidth the weight traffic moves at."""
    gemm_kernel_efficiency: float = 1.0
    """Fraction of the GEMM peak a GEMM kernel itself sustains (``Assumptions.gemm_kernel_efficiency``)."""
    stage_bf16_attention_flops_mb: tuple[float, ...] = ()
    """Per pipeline rank: attention-core FLOPs per GPU per microbatch that run in BF16 although the GEMMs run in
    FP8 (an FP8 recipe without ``precision.fp8_dot_product_attention``); empty when none do."""
    bf16_attention_slowdown: float = 1.0
    """How many times longer those FLOPs take than at the FP8 rate (``Assumptions.fp8_attention_speedup``)."""
    stage_expert_flops_mb: tuple[float, ...] = ()
    """Per pipeline rank: routed-expert GEMM FLOPs per GPU per microbatch (empty: no slowdown priced)."""
    expert_gemm_slowdown: float = 1.0
    """How many times their FLOP time the routed-expert GEMMs take at this layout's rows per expert
    (:func:`optbench.projection.stage_comm.expert_gemm_slowdown`)."""
    tp_overlap: bool = False
    """TP collectives overlapped with the GEMMs they feed (``parallel.tp_comm_overlap``, Transformer Engine's
    userbuffers): only what exceeds those GEMMs' time is exposed."""
    stage_tp_gemm_flops_mb: tuple[float, ...] = ()
    """Per pipeline rank: FLOPs per GPU per microbatch of the GEMMs tensor parallelism splits (every GEMM but the
    routed experts' and the attention core), which the overlapped TP collectives hide behind."""
    stage_activation_s: tuple[float, ...] = ()
    """Per pipeline rank: seconds per microbatch its element-wise kernels take moving their activations through HBM
    (:mod:`optbench.projection.activation_traffic`; empty: not priced)."""
    stage_dense_gemm_fixed_s: tuple[float, ...] = ()
    """Per pipeline rank: its dense GEMM calls per microbatch times ``Assumptions.dense_gemm_fixed_s`` (empty: none
    priced)."""
    stage_fsdp_s: tuple[float, ...] = ()
    """Per pipeline rank: Megatron FSDP's collectives per microbatch (each layer's weights all-gathered for the
    forward and again for the backward, its gradients reduce-scattered), overlapped with the GEMMs (empty: no FSDP)."""


def gemm_peak(run: RunConfig) -> tuple[float, str]:
    """(FLOP/s, key) of the precision the model's GEMMs run in: FP4 under NVFP4, FP8 under FP8 recipes, else BF16."""
    spec = gpu_catalog()[run.cluster.gpu]
    key = "bf16"
    if run.precision.fp4 is not None and "fp4" in spec.peak_tflops:
        key = "fp4"
    elif run.precision.fp8 is not None and "fp8" in spec.peak_tflops:
        key = "fp8"
    return spec.peak(key) * 1e12, f"{run.cluster.gpu}_{key}"


def ns_peak(run: RunConfig) -> float:
    """FLOP/s peak of the matrix optimizer's products: at its registry entry's fixed precision, else Newton-Schulz's
    at ``optimizer.muon.fp32_matmul_prec``."""
    muon = run.optimizer.muon
    fixed = entry(run.optimizer.name).products_precision_at(emerging_optimizers_line(container_of(run)))
    prec = fixed or (muon.fp32_matmul_prec if muon is not None else "medium")
    return gpu_catalog()[run.cluster.gpu].peak("bf16") * 1e12 * NS_PEAK_FRACTION_OF_BF16[prec]


def qr_rate(run: RunConfig, a: Assumptions) -> float:
    """FLOP/s of an optimizer's QR factorisations: fp32 on CUDA cores at ``qr_efficiency``."""
    return gpu_catalog()[run.cluster.gpu].peak("bf16") * 1e12 * NS_PEAK_FRACTION_OF_BF16["highest"] * a.qr_efficiency


def _param_gather_bytes(run: RunConfig) -> float:
    low_precision_copies = run.precision.fp8_param_gather or run.precision.fp4_param_gather
    return weight_bytes_per_element(run) if low_precision_copies else BF16_BYTES


@dataclass(frozen=True)
class _GroupCosts:
    """Optimizer seconds of each parameter of a data-parallel group, were one rank to own it."""

    per_item: tuple[tuple[float, float, float], ...]
    """(NS GEMM, element-wise, launch excess) seconds per item."""
    totals: tuple[float, float, float]
    """Their sums."""
    volume: int
    """Elements of the group (its gradient and parameter traffic)."""


def _item_costs(items: tuple, run: RunConfig, a: Assumptions, rate_ns: float, hbm: float, syrk: bool) -> _GroupCosts:
    """Per-item optimizer seconds of a group: a matrix of the emerging optimizer costs max(GPU, host), an Adam-side
    parameter its bytes."""
    memo: dict[tuple, tuple[float, float, float]] = {}
    per_item = []
    matrix_cost = _muon_cost if entry(run.optimizer.name).matrix_flops is None else _own_count_cost
    for item in items:
        spec = item.param.spec
        shape = (item.numel, item.ns_flops, item.param.local_shape, spec.kind, spec.partition_dim)
        if shape not in memo:
            if item.ns_flops == 0:
                memo[shape] = (0.0, item.numel * a.adam_bytes_per_element / hbm, 0.0)
            else:
                gemm, elem, ops = matrix_cost(item, run, a, rate_ns, hbm, syrk)
                memo[shape] = (gemm, elem, launch_excess_s(gemm, elem, ops, a))
        per_item.append(memo[shape])
    totals = tuple(sum(c[i] for c in per_item) for i in range(3))
    return _GroupCosts(tuple(per_item), totals, sum(item.numel for item in items))


def launch_excess_s(gemm_s: float, elementwise_s: float, ops: int, a: Assumptions) -> float:
    """Host time of a matrix's eager ops beyond its GPU work: the GPU waits for the launches only that long."""
    return max(0.0, ops * a.eager_op_overhead_s - gemm_s - elementwise_s)


def ns_gram_slowdown(gram: int, a: Assumptions) -> float:
    """How many times its FLOP time at ``ns_gemm_efficiency`` a Newton-Schulz call on a ``gram``-sized Gram matrix
    takes (``Assumptions.ns_small_gram_*``)."""
    return 1.0 + (a.ns_small_gram_rows / gram) ** a.ns_small_gram_power if a.ns_small_grams else 1.0


def muon_matrix_cost(
    numel: int,
    calls: tuple[tuple[int, float], ...],
    ns_steps: int,
    a: Assumptions,
    rate_ns: float,
    hbm: float,
    syrk: bool = False,
    adaptive: bool = False,
) -> tuple[float, float, int]:
    """(NS GEMM s, element-wise s, eager ops) of one Muon (or AdaMuon) parameter of ``numel`` elements whose
    orthogonalizations are ``calls``, each (Gram size, FLOPs)."""
    per_iteration = a.ns_ops_per_iteration_syrk if syrk else a.ns_ops_per_iteration
    bytes_per_element = a.muon_bytes_per_element
    ops = a.muon_ops_per_param + len(calls) * (a.ns_ops_per_call + ns_steps * per_iteration)
    if adaptive:
        bytes_per_element += a.moment2_bytes_per_element
        ops += a.moment2_ops
    gemm = sum(flops * ns_gram_slowdown(gram, a) for gram, flops in calls) / rate_ns
    return gemm, numel * bytes_per_element / hbm, ops


def _muon_cost(
    item: OwnedItem, run: RunConfig, a: Assumptions, rate_ns: float, hbm: float, syrk: bool
) -> tuple[float, float, int]:
    """(NS GEMM s, element-wise s, eager ops) of a Muon or AdaMuon matrix."""
    calls = entry(run.optimizer.name).calls()(item.param, run.model, run, recipe_tp_mode(run), syrk)
    return muon_matrix_cost(
        item.numel, calls, run.optimizer.muon.ns_steps, a, rate_ns, hbm, syrk, run.optimizer.adaptive_muon is not None
    )


def _own_count_cost(
    item: OwnedItem, run: RunConfig, a: Assumptions, rate_ns: float, hbm: float, syrk: bool
) -> tuple[float, float, int]:
    """(GEMM + QR s, element-wise s, eager ops) of a matrix of an optimizer that counts its own work (its registry
    entry): products at its precision's rate, QR on CUDA cores, element-wise bytes at the HBM bandwidth."""
    own, m_n = entry(run.optimizer.name), item.param.local_shape
    flops = own.matrix_flops(run.optimizer.matrix_section, *m_n)
    return flops.gemm / rate_ns + flops.qr / qr_rate(run, a), own.elementwise_bytes(*m_n) / hbm, own.eager_ops


def build_inputs(
    resolved: ResolvedRun,
    net: Interconnect,
    a: Assumptions,
    syrk: bool = False,
    owners_fn: OwnersFn = pingpong_by_numel,
) -> StepInputs:
    """The model's inputs for a resolved run on ``net`` (``syrk`` and ``owners_fn`` serve the what-ifs)."""
    run, layout = resolved.run, resolved.layout
    world, p, opt = layout.world_size, run.parallel, run.optimizer
    work = pipeline_rank_work(run, resolved.placement.stages)
    tokens_gpu = run.train.mbs * run.train.seq_length / (p.tp * p.cp)
    ep_s, tp_s, cp_s = stage_comm(run, net, a, work, world)
    activation = microbatch_tokens(run, True) * run.model.hidden_size * BF16_BYTES
    p2p = comm.p2p_s(activation, 0, world // p.pp, net) if p.pp > 1 else 0.0

    groups = resolved.groups(syrk=syrk)
    shared = opt.layer_wise and layout.dp * layout.cp > 1
    distopt = not opt.matrix_optimizer and opt.use_distributed_optimizer
    grad_bytes = 4 if opt.grad_reduce_in_fp32 else 2
    bucket = max(a.ddp_bucket_min_elements, a.ddp_bucket_per_dp_rank * layout.dp * layout.cp)
    rate_ns = a.ns_gemm_efficiency * ns_peak(run) if opt.matrix_optimizer else 1.0
    hbm = net.hbm_effective

    fsdp = p.megatron_fsdp
    grad_s, grad_bucket, gather_s, gather_bucket, fsdp_s = ([0.0] * world for _ in range(5))
    ns_gemm, elementwise, launch = ([0.0] * world for _ in range(3))

    # Groups of one shape class deal alike items (DpGroupWork.shape_class): cost and deal each class once.
    costs_of: dict[tuple, _GroupCosts] = {}
    dealt: dict[tuple, tuple[list[int], list[int], list[int]]] = {}
    for group in groups:
        ranks, n = group.ranks, len(group.ranks)
        if group.shape_class not in costs_of:
            costs_of[group.shape_class] = _item_costs(group.items, run, a, rate_ns, hbm, syrk)
        costs = costs_of[group.shape_class]
        volume = costs.volume
        more = math.ceil(volume / bucket) - 1  # each further bucket is one more collective: one more latency
        if fsdp:
            # Every microbatch: two gathers and one reduce-scatter per layer unit; only the first unit's gather
            # waits before the first forward, and nothing is left for after the last backward.
            per_microbatch = (
                2 * comm.all_gather_s(volume * _param_gather_bytes(run), ranks, net)
                + comm.reduce_scatter_s(volume * grad_bytes, ranks, net)
                + 3 * more * comm.ring_latency_s(ranks, net, 1)
            )
            for rank in ranks:
                fsdp_s[rank] += per_microbatch
            reduce = last = 0.0
            gather = first = comm.all_gather_s(min(bucket, volume) * _param_gather_bytes(run), ranks, net)
        elif distopt:
            reduce = comm.reduce_scatter_s(volume * grad_bytes, ranks, net) + more * comm.ring_latency_s(ranks, net, 1)
            last = comm.reduce_scatter_s(min(bucket, volume) * grad_bytes, ranks, net)
            gather = comm.all_gather_s(volume * _param_gather_bytes(run), ranks, net) + more * comm.ring_latency_s(
                ranks, net, 1
            )
            first = comm.all_gather_s(min(bucket, volume) * _param_gather_bytes(run), ranks, net)
        else:
            reduce = comm.all_reduce_s(volume * grad_bytes, ranks, net) + more * comm.ring_latency_s(ranks, net, 2)
            last = comm.all_reduce_s(min(bucket, volume) * grad_bytes, ranks, net)
            gather = first = 0.0
        for rank in ranks:
            grad_s[rank] += reduce
            grad_bucket[rank] = max(grad_bucket[rank], last)
            gather_s[rank] += gather
            gather_bucket[rank] = max(gather_bucket[rank], first)
        if distopt or not opt.matrix_optimizer:
            # Fused (multi-tensor) AdamW: memory-bound on the shard (distributed) or everything held.
            share = volume / n if distopt else volume
            for rank in ranks:
                elementwise[rank] += share * a.adam_bytes_per_element / hbm
            continue
        if not shared or n == 1:
            # Every holder updates every parameter of the group (or the group is one rank).
            g, e, k = costs.totals  # Newton-Schulz GEMM, element-wise and launch seconds
            for rank in ranks:
                ns_gemm[rank] += g
                elementwise[rank] += e
                launch[rank] += k
            continue
        if group.shape_class not in dealt:
            owners = owners_fn(group.items, n)
            owned_numel, owned_count = [0] * n, [0] * n
            for item, owner in zip(group.items, owners):
                owned_numel[owner] += item.numel
                owned_count[owner] += 1
            dealt[group.shape_class] = (owners, owned_numel, owned_count)
        owners, owned_numel, owned_count = dealt[group.shape_class]
        for (g, e, k), owner in zip(costs.per_item, owners):
            rank = ranks[owner]
            ns_gemm[rank] += g
            elementwise[rank] += e
            launch[rank] += k
        # Variable-size all-gather of the updated bf16 parameters, then one copy_ per received parameter.
        total = volume * BF16_BYTES
        wire = comm.all_gather_s(total, ranks, net)
        first = comm.all_gather_s(min(bucket, volume) * BF16_BYTES, ranks, net)
        for index, rank in enumerate(ranks):
            received = total - owned_numel[index] * BF16_BYTES
            copies = (len(costs.per_item) - owned_count[index]) * a.eager_op_overhead_s
            gather_s[rank] += wire + max(2 * received / hbm, copies)
            gather_bucket[rank] = max(gather_bucket[rank], first)

    gemm_numel = gemm_numel_per_pipeline_rank(resolved.placement)
    fp8_cast_s = fp8_cast(run, net, a, layout, distopt, gemm_numel)
    traffic = weight_traffic(run, work, gemm_numel, tokens_gpu) if a.weight_roofline else ()
    peak, peak_key = gemm_peak(run)
    bf16_attention = ()
    if not peak_key.endswith("_bf16") and not run.precision.fp8_dot_product_attention:
        bf16_attention = tuple(w.attention_core_flops_per_token * tokens_gpu for w in work)
    rank_pp = tuple(pipeline_rank_of(layout, r) for r in range(world))
    return StepInputs(
        world=world,
        pp=p.pp,
        vpp=layout.vpp,
        microbatches=layout.num_microbatches,
        gemm_peak_flops=peak,
        gemm_peak_key=peak_key,
        stage_flops_mb=tuple(w.flops_per_token * tokens_gpu for w in work),
        stage_attention_flops_mb=tuple(w.attention_flops_per_token * tokens_gpu for w in work),
        stage_ep_s=tuple(ep_s),
        ep_overlap=run.parallel.ep_comm_overlap,
        stage_tp_s=tuple(tp_s),
        stage_cp_s=tuple(cp_s),
        p2p_s=p2p,
        rank_pipeline=rank_pp,
        grad_comm_s=tuple(grad_s),
        grad_bucket_s=tuple(grad_bucket),
        overlap_grad_reduce=opt.overlap_grad_reduce,
        gather_s=tuple(gather_s),
        gather_bucket_s=tuple(gather_bucket),
        gather_overlapped=distopt and opt.overlap_param_gather,
        optimizer=tuple(RankOptimizer(g, e, k) for g, e, k in zip(ns_gemm, elementwise, launch)),
        fp8_cast_s=fp8_cast_s,
        stage_weight_traffic=traffic,
        hbm_bytes_per_s=hbm,
        gemm_kernel_efficiency=a.gemm_kernel_efficiency,
        stage_bf16_attention_flops_mb=bf16_attention,
        bf16_attention_slowdown=a.fp8_attention_speedup,
        stage_expert_flops_mb=tuple(w.expert_flops_per_token * tokens_gpu for w in work),
        expert_gemm_slowdown=expert_gemm_slowdown(run, a),
        stage_activation_s=tuple(w.activation_bytes_per_token * tokens_gpu / hbm for w in work)
        if a.activation_traffic
        else (),
        stage_dense_gemm_fixed_s=tuple(
            calls * a.dense_gemm_fixed_s for calls in dense_gemm_calls(run, resolved.placement)
        ),
        stage_fsdp_s=tuple(max(fsdp_s[r] for r in range(world) if rank_pp[r] == stage) for stage in range(p.pp))
        if fsdp
        else (),
        tp_overlap=p.tp_comm_overlap,
        stage_tp_gemm_flops_mb=tuple(
            (w.flops_per_token - w.expert_flops_per_token - w.attention_core_flops_per_token) * tokens_gpu for w in work
        ),
    )
