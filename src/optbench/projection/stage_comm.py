"""What a pipeline rank communicates per microbatch: the MoE all-to-alls, exposed tensor-parallel traffic, the
context-parallel ring; and how many routed rows each local expert GEMM gets (docs/projection.md section 1:
``a2a_r``, ``tp_r``, ``cp_r``, ``S_r``). The volumes are the ones :mod:`optbench.bench.all_to_all` sends through
NCCL, so a measured all-to-all and the model's price of it are the same bytes."""

from __future__ import annotations

from optbench.config.schema import RunConfig
from optbench.projection import comm
from optbench.projection.assumptions import Assumptions
from optbench.projection.gemm_weights import BF16_BYTES
from optbench.projection.interconnect import Interconnect


def microbatch_tokens(run: RunConfig, split_by_tp: bool) -> float:
    """Tokens of one microbatch on one GPU (sequence parallelism splits them over TP)."""
    p = run.parallel
    tokens = run.train.mbs * run.train.seq_length / p.cp
    return tokens / p.tp if split_by_tp and p.sequence_parallel and p.tp > 1 else tokens


def dispatch_copy_bytes(run: RunConfig, a: Assumptions) -> float:
    """Bytes of one copy of a GPU's MoE tokens of a microbatch (bf16 activations): the alltoall dispatcher sends
    ``topk`` of them per all-to-all, spread over the EP group; the flex dispatcher one per destination rank."""
    return microbatch_tokens(run, True) * run.model.hidden_size * a.dispatch_bytes_per_element


def rows_per_expert(run: RunConfig) -> float:
    """Routed rows each local expert GEMM gets per GPU and microbatch, on average: the rank's MoE tokens (split
    over TP by sequence parallelism, gathered again over expert TP) x top-k x EP / experts (0 without experts)."""
    m = run.model
    if not m.num_moe_experts:
        return 0.0
    tokens = microbatch_tokens(run, split_by_tp=True)
    return tokens * run.parallel.etp * m.moe_router_topk * run.parallel.ep / m.num_moe_experts


def expert_gemm_slowdown(run: RunConfig, a: Assumptions) -> float:
    """``1 + (M0 / M) ** p`` at this layout's rows per expert (1 without experts or with the term off); ``M0`` of
    MXFP8 grouped GEMMs under an MXFP8 recipe, of the H200's BF16 measurement otherwise."""
    rows = rows_per_expert(run)
    if not a.small_expert_gemms or rows <= 0:
        return 1.0
    m0 = a.small_expert_gemm_rows_mxfp8 if run.precision.fp8_recipe == "mxfp8" else a.small_expert_gemm_rows
    return 1.0 + (m0 / rows) ** a.small_expert_gemm_power


def stage_comm(run: RunConfig, net: Interconnect, a: Assumptions, layers: list, world: int) -> tuple[list, list, list]:
    """Per pipeline rank and microbatch: (MoE all-to-all, TP collectives, CP ring) seconds, before any overlap."""
    p, m = run.parallel, run.model
    pp = p.pp
    dp = world // (p.tp * p.pp * p.cp)
    ep_s, tp_s, cp_s = [0.0] * pp, [0.0] * pp, [0.0] * pp
    if p.ep > 1 and m.num_moe_experts:
        copy = dispatch_copy_bytes(run, a)
        groups = comm.expert_parallel_groups(p.tp, p.cp, dp, pp, p.ep, p.etp)
        per_pp = len(groups) // pp

        def a2a_s(group: tuple[int, ...]) -> float:
            if p.moe_token_dispatcher == "flex":
                return comm.flex_all_to_all_s(copy, m.moe_router_topk, m.num_moe_experts, group, net)
            return comm.all_to_all_s(copy * m.moe_router_topk, group, net)

        for r in range(pp):
            a2a = max(a2a_s(g) for g in groups[r * per_pp : (r + 1) * per_pp])
            ep_s[r] = 4 * layers[r].moe_layers * a2a
    if p.tp > 1:  # with tp_comm_overlap the step model hides what the TP-split GEMMs can cover
        activation = microbatch_tokens(run, False) * m.hidden_size * BF16_BYTES
        group = comm.tensor_parallel_groups(p.tp, world)[0]
        per_layer = 8 * comm.reduce_scatter_s(activation, group, net)
        tp_s = [layers[r].layers * per_layer for r in range(pp)]
    if p.cp > 1:
        if m.multi_latent_attention:
            kv_width = m.num_attention_heads * (
                (m.qk_head_dim or 0) + (m.qk_pos_emb_head_dim or 0) + (m.v_head_dim or 0)
            )
        else:
            kv = m.kv_channels or m.hidden_size // m.num_attention_heads
            kv_width = 2 * (m.num_query_groups or m.num_attention_heads) * kv
        kv_bytes = microbatch_tokens(run, False) * kv_width / p.tp * BF16_BYTES
        group = comm.context_parallel_groups(p.tp, p.cp, world)[0]
        per_layer = 3 * (p.cp - 1) * comm.p2p_s(kv_bytes, group[0], group[1], net)
        cp_s = [layers[r].layers * per_layer for r in range(pp)]
    return ep_s, tp_s, cp_s
