"""The model's shape and its parallel layout: the part of the run schema that says what is trained where.

Split from :mod:`optbench.config.schema` (which re-exports both classes) to keep each module readable; every field
is declared with its domain, readers and Megatron Bridge names (:mod:`optbench.config.field_spec`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from optbench.config.frozen import Frozen
from optbench.config.domain_types import Choice, Flag, Integer, Items, Real
from optbench.config.field_spec import (
    BRIDGE,
    CUDA_GRAPH_SCOPES,
    HEAD_DIM,
    HEADS,
    IDENTIFIER,
    LAYERS,
    LOCAL,
    PARALLEL,
    RANK,
    RECOMPUTE_MODULES,
    WIDTH,
    setting,
)


ARCHITECTURES = ("deepseek_v3", "qwen3_moe", "llama", "gpt_oss")
DISPATCHERS = ("alltoall", "allgather", "flex")
FLEX_BACKENDS = ("deepep", "hybridep")
RECOMPUTE_GRANULARITIES = ("selective", "full")
PIPELINE_LAYOUT_ENTRIES = ("embedding", "decoder", "mtp", "loss")


@dataclass
class ModelConfig(Frozen):
    """Model shape, in Megatron Core's vocabulary (the shapes of conf/model/*.yaml, each with its source)."""

    name: str = setting("???", IDENTIFIER)
    """Model id, e.g. kimi_k2 or qwen3_moe_tiny."""
    architecture: str = setting("???", Choice(ARCHITECTURES))
    """deepseek_v3 (MLA + MoE with shared expert; Kimi K2, DeepSeek-V3), qwen3_moe (GQA + MoE; Qwen3 30B-A3B and
    235B-A22B), llama (dense GQA; Llama 3 and 3.1) or gpt_oss (GQA + MoE with biases, sinks and a sliding window;
    GPT-OSS 120B). The local engine builds proxies of the first two."""
    proxy_of: Optional[str] = setting(None, IDENTIFIER)
    """For a small local proxy: the full-size model whose architecture it mirrors."""
    num_layers: int = setting(1, LAYERS, bridge="model.num_layers")
    """Transformer layers, MTP layers excluded."""
    hidden_size: int = setting(64, Integer(1, 65536), bridge="model.hidden_size")
    """Model width h."""
    ffn_hidden_size: int = setting(256, WIDTH, bridge="model.ffn_hidden_size")
    """FFN width of the dense (non-MoE) layers."""
    num_attention_heads: int = setting(4, HEADS, bridge="model.num_attention_heads")
    """Query heads."""
    num_query_groups: Optional[int] = setting(None, HEADS, bridge="model.num_query_groups")
    """GQA key/value groups (null for MLA)."""
    kv_channels: Optional[int] = setting(None, HEAD_DIM, bridge="model.kv_channels")
    """GQA head dimension (null for MLA)."""
    qk_layernorm: bool = setting(False, Flag(), bridge="model.qk_layernorm")
    """RMSNorm on queries and keys (Qwen3, Kimi K2)."""
    multi_latent_attention: bool = setting(False, Flag())
    """Use MLA projections instead of GQA."""
    q_lora_rank: Optional[int] = setting(None, RANK, bridge="model.q_lora_rank")
    """MLA query down-projection rank (null: a single full query projection)."""
    kv_lora_rank: Optional[int] = setting(None, RANK, bridge="model.kv_lora_rank")
    """MLA key/value down-projection rank."""
    qk_head_dim: Optional[int] = setting(None, HEAD_DIM, bridge="model.qk_head_dim")
    """MLA per-head query/key dimension without the rotary part."""
    qk_pos_emb_head_dim: Optional[int] = setting(None, HEAD_DIM, bridge="model.qk_pos_emb_head_dim")
    """MLA per-head rotary dimension (shared key)."""
    v_head_dim: Optional[int] = setting(None, HEAD_DIM, bridge="model.v_head_dim")
    """MLA per-head value dimension."""
    num_moe_experts: Optional[int] = setting(None, Integer(1, 4096), bridge="model.num_moe_experts")
    """Routed experts per MoE layer (null: dense model)."""
    moe_ffn_hidden_size: Optional[int] = setting(None, WIDTH, bridge="model.moe_ffn_hidden_size")
    """FFN width of one routed expert."""
    moe_shared_expert_intermediate_size: int = setting(
        0,
        Integer(0, 1 << 20),
        bridge="model.moe_shared_expert_intermediate_size",
        transform="none_if_zero",
    )
    """Total FFN width of the shared experts (0: none)."""
    moe_router_topk: int = setting(1, Integer(1, 4096), bridge="model.moe_router_topk")
    """Experts each token is routed to."""
    first_k_dense_layers: int = setting(0, Integer(0, 1024), bridge="model.moe_layer_freq")
    """Leading layers with a dense FFN instead of MoE (Megatron's moe_layer_freq = [0]*k + [1]*(L-k))."""
    moe_router_score_function: str = setting(
        "softmax",
        Choice(("softmax", "sigmoid")),
        bridge="model.moe_router_score_function",
    )
    """softmax or sigmoid."""
    moe_router_topk_scaling_factor: Optional[float] = setting(
        None,
        Real(0.0, 1000.0, low_open=True),
        bridge="model.moe_router_topk_scaling_factor",
    )
    """Scale applied to the top-k routing weights (Kimi K2: 2.827)."""
    moe_router_num_groups: Optional[int] = setting(None, Integer(1, 4096), bridge="model.moe_router_num_groups")
    """Device-limited routing groups (DeepSeek-V3: 8)."""
    moe_router_group_topk: Optional[int] = setting(None, Integer(1, 4096), bridge="model.moe_router_group_topk")
    """Groups each token may use (DeepSeek-V3: 4)."""
    moe_router_enable_expert_bias: bool = setting(False, Flag(), bridge="model.moe_router_enable_expert_bias")
    """Aux-loss-free load balancing bias (DeepSeek-V3 / Kimi K2)."""
    norm_topk_prob: bool = setting(True, Flag(), readers=LOCAL)
    """Renormalise the top-k routing weights to sum to one (local engine: Megatron Bridge's model recipe decides it)."""
    moe_aux_loss_coeff: float = setting(0.0, Real(0.0, 100.0), bridge="model.moe_aux_loss_coeff", preset="reproduce")
    """Load-balancing auxiliary loss coefficient (Megatron moe_aux_loss_coeff; Qwen3-MoE: 1e-3; 0: none)."""
    vocab_size: int = setting(256, Integer(1, 1 << 22), bridge="model.vocab_size")
    """Tokenizer vocabulary before padding."""
    make_vocab_size_divisible_by: int = setting(128, Integer(1, 65536), bridge="model.make_vocab_size_divisible_by")
    """Megatron pads the vocabulary to a multiple of this times TP (Kimi K2 and DeepSeek-V3: 1280)."""
    mtp_num_layers: int = setting(0, Integer(0, 16), bridge="model.mtp_num_layers", transform="none_if_zero")
    """Multi-token-prediction layers (DeepSeek-V3: 1)."""
    share_embeddings_and_output_weights: bool = setting(
        False,
        Flag(),
        bridge="model.share_embeddings_and_output_weights",
    )
    """Tie input embedding and output layer."""
    rotary_base: float = setting(10000.0, Real(0.0, 1e12, low_open=True), bridge="model.rotary_base")
    """RoPE base."""
    rotary_scaling_factor: Optional[float] = setting(
        None,
        Real(0.0, 1024.0, low_open=True),
        bridge="model.rotary_scaling_factor",
    )
    """YaRN scaling factor (Kimi K2: 32; null: plain RoPE)."""
    max_position_embeddings: int = setting(4096, Integer(1, 1 << 24), readers=LOCAL)
    """Longest sequence the positional encoding is built for (local engine: Bridge's model recipe decides it)."""
    layernorm_epsilon: float = setting(
        1e-6,
        Real(0.0, 1.0, low_open=True, high_open=True),
        bridge="model.layernorm_epsilon",
    )
    """RMSNorm epsilon."""
    init_method_std: float = setting(
        0.02,
        Real(0.0, 10.0, low_open=True),
        bridge="model.init_method_std",
        preset="reproduce",
    )
    """Standard deviation of the random weight init."""


@dataclass
class ParallelConfig(Frozen):
    """Parallel layout; dp is derived as num_gpus / (tp * pp * cp)."""

    name: str = setting("???", IDENTIFIER)
    """Layout id, e.g. kimi_k2_gb300_256 (the group option kimi_k2/gb300_256) or single."""
    num_gpus: int = setting(1, Integer(1, 32768))
    """World size (GPUs, or processes on the local engine)."""
    tp: int = setting(1, PARALLEL, bridge="model.tensor_model_parallel_size", preset="every")
    """Tensor parallel size."""
    pp: int = setting(1, PARALLEL, bridge="model.pipeline_model_parallel_size", preset="every")
    """Pipeline parallel size."""
    vpp: Optional[int] = setting(
        None,
        Integer(1, 256),
        bridge="model.virtual_pipeline_model_parallel_size",
        preset="every",
    )
    """Virtual pipeline stages per pipeline rank (interleaved schedule); null = 1."""
    cp: int = setting(1, PARALLEL, bridge="model.context_parallel_size", preset="every")
    """Context parallel size."""
    ep: int = setting(1, Integer(1, 4096), bridge="model.expert_model_parallel_size", preset="every")
    """Expert parallel size."""
    etp: int = setting(1, PARALLEL, bridge="model.expert_tensor_parallel_size", preset="every")
    """Expert tensor parallel size."""
    sequence_parallel: bool = setting(False, Flag(), readers=BRIDGE, bridge="model.sequence_parallel", preset="every")
    """Shard activations along the sequence inside TP regions."""
    megatron_fsdp: bool = setting(False, Flag(), readers=BRIDGE, bridge="ddp.use_megatron_fsdp", preset="every")
    """Megatron FSDP (ZeRO-3): weights, gradients and optimizer state sharded over DP x CP (experts: expert-DP),
    each layer's weights all-gathered in the forward and again in the backward and its gradients reduce-scattered,
    every microbatch (Bridge's ``ddp.use_megatron_fsdp`` with sharding strategy ``optim_grads_params``, as NVIDIA's
    Llama 3 70B FP8 presets on GB200/GB300 run it). AdamW only."""
    pipeline_layout: Optional[List[List[str]]] = setting(
        None,
        Items(Items(Choice(PIPELINE_LAYOUT_ENTRIES), 1024 + 18), 4096),
        bridge="model.pipeline_model_parallel_layout",
        transform="lists",
    )
    """Megatron pipeline layout: one list per virtual stage of embedding / decoder / mtp / loss."""
    recompute_granularity: Optional[str] = setting(
        None,
        Choice(RECOMPUTE_GRANULARITIES),
        readers=BRIDGE,
        bridge="model.recompute_granularity",
    )
    """null, selective or full activation recompute."""
    recompute_modules: Optional[List[str]] = setting(
        None,
        Items(Choice(RECOMPUTE_MODULES), len(RECOMPUTE_MODULES)),
        readers=BRIDGE,
        bridge="model.recompute_modules",
        transform="list",
        preset="every",
    )
    """Modules recomputed under selective recompute (e.g. mla_up_proj)."""
    recompute_method: Optional[str] = setting(
        None,
        Choice(("uniform", "block")),
        readers=BRIDGE,
        bridge="model.recompute_method",
    )
    """uniform or block, for full recompute."""
    recompute_num_layers: Optional[int] = setting(
        None,
        LAYERS,
        readers=BRIDGE,
        bridge="model.recompute_num_layers",
        preset="every",
    )
    """Layers per recompute unit, for full recompute."""
    moe_token_dispatcher: str = setting(
        "alltoall",
        Choice(DISPATCHERS),
        readers=BRIDGE,
        bridge="model.moe_token_dispatcher_type",
        preset="every",
    )
    """alltoall, allgather or flex."""
    moe_flex_dispatcher_backend: Optional[str] = setting(
        None,
        Choice(FLEX_BACKENDS),
        readers=BRIDGE,
        bridge="model.moe_flex_dispatcher_backend",
        preset="every",
    )
    """deepep or hybridep when moe_token_dispatcher is flex."""
    cuda_graph_scope: List[str] = setting(
        list,
        Items(Choice(CUDA_GRAPH_SCOPES), len(CUDA_GRAPH_SCOPES)),
        readers=BRIDGE,
        bridge="model.cuda_graph_scope",
        transform="list",
        preset="every",
    )
    """Transformer Engine CUDA graph scopes (e.g. moe_router, moe_preprocess); empty = off."""
    cuda_graph_impl: Optional[str] = setting(
        None,
        Choice(("none", "transformer_engine", "local", "full_iteration")),
        readers=BRIDGE,
        bridge="model.cuda_graph_impl",
        preset="every",
    )
    """CUDA graph implementation: null = transformer_engine when cuda_graph_scope is set, else none;
    full_iteration = one graph per training iteration (NVIDIA's presets from Bridge 0.5, nemo:26.06)."""
    tp_comm_overlap: bool = setting(
        False, Flag(), readers=BRIDGE, bridge="comm_overlap.tp_comm_overlap", preset="every"
    )
    """Overlap TP communication with GEMMs (userbuffers)."""
    ep_comm_overlap: bool = setting(
        False, Flag(), readers=BRIDGE, bridge="comm_overlap.overlap_moe_expert_parallel_comm", preset="every"
    )
    """Overlap the MoE all-to-all of one microbatch with the computation of another (Megatron's EP A2A overlap:
    the forward of one microbatch and the backward of another run interleaved); NVIDIA's MXFP8 MoE presets
    set it from nemo:26.06 (and a few earlier ones)."""
