"""Activation memory: bytes one transformer layer keeps for its backward pass, and microbatches in flight.

Per layer and token, in the spirit of Korthikanti et al., "Reducing Activation Recomputation in
Large Transformer Models" (MLSys 2023, arXiv:2205.05198, section 4), adapted to what Megatron Core
with Transformer Engine keeps for these models: RMSNorm, no dropout, SwiGLU, flash/fused attention
(no s x s matrix is stored), MLA, MoE with the routing probabilities applied inside the weighted
SwiGLU (so the expert output is not kept). Under FP8 / MXFP8 a GEMM keeps its input as a 1-byte
quantized copy (scales ignored, about 3 %); everything else is bf16 (2 bytes), router scores fp32.

Sharding: tensors inside tensor-parallel regions (heads, FFN width) divide by ``tp``; tensors on the
residual stream divide by ``tp`` only under sequence parallelism; everything divides by ``cp``.
Routed experts process ``topk`` (token, expert) pairs per local token, ``etp`` times as many tokens
with ``1/etp`` of the FFN width under expert tensor parallelism.

Recompute (``parallel.recompute_granularity``): ``selective`` drops what its modules would keep
(``mla_up_proj``: the up-projections' outputs and Q, K, V; ``moe_act`` / ``mlp`` / ``moe`` /
``shared_experts`` / ``layernorm`` as named; ``core_attn`` saves nothing here because fused attention
never stores the s x s scores); ``full`` keeps only each recomputed layer's input plus, transiently,
one recompute unit's full activations.

Microbatches in flight (1F1B): Megatron's warm-up count (``schedules.get_pp_rank_microbatches``):
without interleaving pipeline rank r runs ``pp - r - 1`` warm-up forwards, with ``vpp`` chunks
``2 (pp - r - 1) + (vpp - 1) pp``; one more forward is in flight at the peak, capped by the
microbatches of the step. The k-th forward of rank r runs chunk ``(k // pp) % vpp``. Rank 0 holds
the most: about ``pp`` microbatches of its layers times ``1 + (pp - 1) / (pp vpp)`` (Korthikanti et
al., section 4.2.3).
"""

from __future__ import annotations

from dataclasses import dataclass

from optbench.accounting.params import is_moe_layer
from optbench.config.layout import Layout
from optbench.config.schema import RunConfig

BF16 = 2
FP32 = 4


@dataclass(frozen=True)
class _Shards:
    tp: int
    seq: int
    """Divisor of residual-stream tensors: tp under sequence parallelism, else 1."""
    etp: int


NVFP4_BYTES_PER_ELEMENT = 0.5 + 1 / 16
"""An NVFP4 value (4 bits) and its share of one E4M3 scale per 16 values (the per-tensor FP32 scale neglected)."""


def quantized_bytes(run: RunConfig) -> float:
    """Bytes per element of a GEMM input kept quantized for the backward: 1 under FP8, 0.5 + 1/16 under NVFP4 (an
    E4M3 scale per 16 values), 0 (none kept) in BF16."""
    if run.precision.fp4 is not None:
        return NVFP4_BYTES_PER_ELEMENT
    return 1.0 if run.precision.fp8 is not None else 0.0


def _gemm_input_bytes(quantized: float) -> float:
    return quantized or BF16


def attention_bytes_per_token(run: RunConfig, shards: _Shards, quantized: float, modules: set[str]) -> float:
    """Bytes the attention block of one layer keeps per token (``quantized``: :func:`quantized_bytes`)."""
    m = run.model
    quantized_copies = quantized > 0
    h, heads, tp = m.hidden_size, m.num_attention_heads, shards.tp
    gemm_in = _gemm_input_bytes(quantized)
    kept = BF16 * h / shards.seq  # residual stream into input_layernorm
    if m.multi_latent_attention:
        qk, rope, v = m.qk_head_dim or 0, m.qk_pos_emb_head_dim or 0, m.v_head_dim or 0
        q_lora, kv_lora = m.q_lora_rank or 0, m.kv_lora_rank or 0
        # The normed input feeds two projections: quantized, each keeps its own copy, in bf16
        # they share it (recomputed instead under `layernorm` recompute).
        if quantized_copies:
            kept += 2 * quantized * h / shards.seq
        elif "layernorm" not in modules:
            kept += BF16 * h / shards.seq
        kept += BF16 * (q_lora + kv_lora + rope) / shards.seq  # latents (inputs of the up-projections' norms)
        if "mla_up_proj" not in modules:
            kept += gemm_in * (q_lora + kv_lora) / shards.seq  # normed latents into the up-projections
            kept += BF16 * heads * ((qk + rope) + (qk + v)) / tp  # up-projection outputs
            kept += BF16 * heads * 2 * (qk + rope) / tp  # Q and K after rotary and concatenation
        out = heads * v
    else:
        kv = m.kv_channels or h // heads
        groups = m.num_query_groups or heads
        kept += gemm_in * h / shards.seq  # normed input, kept by the fused norm + QKV GEMM
        kept += BF16 * (heads + 2 * groups) * kv / tp  # Q, K, V
        if m.qk_layernorm:
            kept += BF16 * (heads + groups) * kv / tp  # Q, K before their norms
        out = heads * kv
    kept += BF16 * out / tp  # attention output (kept by fused attention, input of the projection)
    kept += quantized * out / tp  # its quantized copy for the output projection
    return kept


def ffn_bytes_per_token(run: RunConfig, layer: int, shards: _Shards, quantized: float, modules: set[str]) -> float:
    """Bytes the FFN block (dense MLP or MoE) of one layer keeps per token (``quantized``: :func:`quantized_bytes`)."""
    m = run.model
    h, tp = m.hidden_size, shards.tp
    gemm_in = _gemm_input_bytes(quantized)
    residual = BF16 * h / shards.seq
    if not is_moe_layer(m, layer):
        if "mlp" in modules:
            return residual
        ffn = m.ffn_hidden_size
        return residual + gemm_in * h / shards.seq + BF16 * 2 * ffn / tp + gemm_in * ffn / tp
    if "moe" in modules:
        return residual
    kept = residual + (0 if "layernorm" in modules else BF16 * h / shards.seq)  # normed input, for the router
    kept += 2 * FP32 * (m.num_moe_experts or 0) / shards.seq  # router logits and scores
    shared = m.moe_shared_expert_intermediate_size
    if shared and "shared_experts" not in modules:
        kept += quantized * h / shards.seq + BF16 * 2 * shared / tp + gemm_in * shared / tp
    ffn = (m.moe_ffn_hidden_size or 0) / shards.etp
    per_pair = gemm_in * h + BF16 * 2 * ffn + (0 if "moe_act" in modules else gemm_in * ffn)
    return kept + m.moe_router_topk * shards.etp * per_pair / shards.seq


def layer_bytes_per_token(run: RunConfig, layer: int, tp: int, sequence_parallel: bool, etp: int) -> float:
    """Bytes one layer keeps per local token (before the context-parallel split) without full recompute."""
    shards = _Shards(tp=tp, seq=tp if sequence_parallel and tp > 1 else 1, etp=etp)
    quantized = quantized_bytes(run)
    modules = set(run.parallel.recompute_modules or []) if run.parallel.recompute_granularity == "selective" else set()
    return attention_bytes_per_token(run, shards, quantized, modules) + ffn_bytes_per_token(
        run, layer, shards, quantized, modules
    )


def forwards_in_flight(layout: Layout, pp_rank: int) -> list[int]:
    """Model chunk (0 .. vpp-1) of each forward pass whose activations pipeline rank ``pp_rank`` holds at its peak."""
    pp, vpp, microbatches = layout.pp, layout.vpp, layout.num_microbatches
    if pp == 1:
        return [0] * vpp if vpp > 1 else [0]
    if vpp == 1:
        warmup = pp - pp_rank - 1
    else:
        warmup = 2 * (pp - pp_rank - 1) + (vpp - 1) * pp
    in_flight = min(warmup + 1, microbatches * vpp)
    return [(k // pp) % vpp for k in range(in_flight)]
