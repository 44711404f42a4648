"""Parameter inventory of a model as Megatron Core lays it out (TE spec, grouped-GEMM experts).

One :class:`ParamSpec` per parameter tensor of the *unsharded* model, named as
Megatron names it, with the dimension tensor parallelism shards. This is the single
source of truth for parameter counts, Newton-Schulz FLOPs (which matrix Muon
orthogonalizes, at what shape), optimizer-state memory and the layer-wise owner
assignment, so that all of them agree.

Shapes follow Megatron's ``[out_features, in_features]`` convention:

* GQA layer: ``linear_qkv`` ``[(heads + 2*groups) * kv_channels, h]`` (column-parallel),
  ``q_layernorm``/``k_layernorm`` ``[kv_channels]``, ``linear_proj`` ``[h, heads * kv_channels]``
  (row-parallel).
* MLA layer: ``linear_q_down_proj`` ``[q_lora_rank, h]`` and ``linear_kv_down_proj``
  ``[kv_lora_rank + rope_dim, h]`` (replicated over TP), ``linear_q_up_proj``
  ``[heads * (qk + rope), q_lora_rank]`` and ``linear_kv_up_proj`` ``[heads * (qk + v), kv_lora_rank]``
  (column-parallel) with their layer norms, ``linear_proj`` ``[h, heads * v]`` (row-parallel).
  Without ``q_lora_rank`` a single ``linear_q_proj`` ``[heads * (qk + rope), h]``.
* MLP: gated ``linear_fc1`` ``[2 * ffn, h]`` ([gate; up] fused), ``linear_fc2`` ``[h, ffn]``;
  each routed expert ``e`` has its own ``linear_fc1.weight{e}`` / ``linear_fc2.weight{e}`` (expert-TP
  sharded), the router is ``[experts, h]``, shared experts are one gated MLP of the summed width.
* MTP layer: ``enorm``, ``hnorm``, ``eh_proj`` ``[h, 2h]``, a full transformer layer and a final norm;
  it shares the embedding and output layer of the main model.
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from optbench.config.schema import ModelConfig

# Parameter kinds. Muon takes every 2-D weight that is not the embedding or the output layer.
EMBEDDING, OUTPUT, NORM = "embedding", "output", "norm"
ATTENTION, QKV, ROUTER = "attention", "qkv", "router"
DENSE_MLP, SHARED_EXPERT, EXPERT, MTP_PROJ = "dense_mlp", "shared_expert", "expert", "mtp_proj"

COLUMN, ROW = 0, 1
"""Tensor-parallel partition dimension: column-parallel shards dim 0 (outputs), row-parallel dim 1 (inputs)."""


class ParamSpec(NamedTuple):
    """One parameter tensor of the unsharded model (a named tuple: Kimi K2 has some 47,000, and a frozen dataclass
    is several times slower to build)."""

    name: str
    """Megatron name, e.g. decoder.layers.3.mlp.experts.linear_fc1.weight7."""
    shape: tuple[int, ...]
    """Full (unsharded) shape, [out, in] for linear weights."""
    kind: str
    """One of the kinds above."""
    layer: int | None = None
    """Transformer layer index (MTP layers numbered after the decoder), None outside layers."""
    partition_dim: int | None = None
    """Dimension sharded by TP (ETP for experts); None when replicated across TP."""
    expert: int | None = None
    """Routed-expert index within its layer (expert parallelism deals experts out by it); None otherwise."""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def is_expert(self) -> bool:
        """Routed-expert weights live in the expert-parallel / expert-data-parallel groups."""
        return self.kind == EXPERT

    @property
    def is_muon(self) -> bool:
        """Megatron routes 2-D non-embedding, non-output weights to Muon, everything else to Adam."""
        return len(self.shape) == 2 and self.kind not in (EMBEDDING, OUTPUT)


def padded_vocab_size(model: ModelConfig | ModelShape, tp: int = 1) -> int:
    """Vocabulary padded as Megatron Bridge pads it: up to a multiple of make_vocab_size_divisible_by * tp."""
    multiple = model.make_vocab_size_divisible_by * tp
    return math.ceil(model.vocab_size / multiple) * multiple


def is_moe_layer(model: ModelConfig | ModelShape, layer: int) -> bool:
    """Whether decoder layer ``layer`` (0-based) has a MoE FFN; MTP layers follow the last layer."""
    if not model.num_moe_experts:
        return False
    return min(layer, model.num_layers - 1) >= model.first_k_dense_layers


def _attention(model: ModelConfig | ModelShape, prefix: str, layer: int) -> list[ParamSpec]:
    h, heads = model.hidden_size, model.num_attention_heads
    specs = [ParamSpec(f"{prefix}.input_layernorm.weight", (h,), NORM, layer)]
    if model.multi_latent_attention:
        qk, rope, v = model.qk_head_dim or 0, model.qk_pos_emb_head_dim or 0, model.v_head_dim or 0
        kv_lora = model.kv_lora_rank or 0
        if model.q_lora_rank:
            specs += [
                ParamSpec(
                    f"{prefix}.self_attention.linear_q_down_proj.weight", (model.q_lora_rank, h), ATTENTION, layer
                ),
                ParamSpec(
                    f"{prefix}.self_attention.linear_q_up_proj.layer_norm_weight", (model.q_lora_rank,), NORM, layer
                ),
                ParamSpec(
                    f"{prefix}.self_attention.linear_q_up_proj.weight",
                    (heads * (qk + rope), model.q_lora_rank),
                    ATTENTION,
                    layer,
                    COLUMN,
                ),
            ]
        else:
            specs.append(
                ParamSpec(
                    f"{prefix}.self_attention.linear_q_proj.weight", (heads * (qk + rope), h), ATTENTION, layer, COLUMN
                )
            )
        specs += [
            ParamSpec(f"{prefix}.self_attention.linear_kv_down_proj.weight", (kv_lora + rope, h), ATTENTION, layer),
            ParamSpec(f"{prefix}.self_attention.linear_kv_up_proj.layer_norm_weight", (kv_lora,), NORM, layer),
            ParamSpec(
                f"{prefix}.self_attention.linear_kv_up_proj.weight",
                (heads * (qk + v), kv_lora),
                ATTENTION,
                layer,
                COLUMN,
            ),
            ParamSpec(f"{prefix}.self_attention.linear_proj.weight", (h, heads * v), ATTENTION, layer, ROW),
        ]
        return specs
    kv = model.kv_channels or h // heads
    groups = model.num_query_groups or heads
    specs.append(
        ParamSpec(f"{prefix}.self_attention.linear_qkv.weight", ((heads + 2 * groups) * kv, h), QKV, layer, COLUMN)
    )
    if model.qk_layernorm:
        specs += [
            ParamSpec(f"{prefix}.self_attention.q_layernorm.weight", (kv,), NORM, layer),
            ParamSpec(f"{prefix}.self_attention.k_layernorm.weight", (kv,), NORM, layer),
        ]
    specs.append(ParamSpec(f"{prefix}.self_attention.linear_proj.weight", (h, heads * kv), ATTENTION, layer, ROW))
    return specs


def _gated_mlp(prefix: str, hidden: int, ffn: int, kind: str, layer: int) -> list[ParamSpec]:
    return [
        ParamSpec(f"{prefix}.linear_fc1.weight", (2 * ffn, hidden), kind, layer, COLUMN),
        ParamSpec(f"{prefix}.linear_fc2.weight", (hidden, ffn), kind, layer, ROW),
    ]


def _routed_experts(prefix: str, hidden: int, ffn: int, layer: int, experts: int) -> list[ParamSpec]:
    """The gated MLP of every routed expert of a layer, its index appended to each name (Kimi K2: 46,080 expert
    matrices, so built without the named tuple's argument handling, the shapes shared)."""
    fc1, fc2, new = (2 * ffn, hidden), (hidden, ffn), tuple.__new__
    specs = []
    for e in range(experts):  # every field given, in ParamSpec's order
        specs.append(new(ParamSpec, (f"{prefix}.linear_fc1.weight{e}", fc1, EXPERT, layer, COLUMN, e)))
        specs.append(new(ParamSpec, (f"{prefix}.linear_fc2.weight{e}", fc2, EXPERT, layer, ROW, e)))
    return specs


def _ffn(model: ModelConfig | ModelShape, prefix: str, layer: int) -> list[ParamSpec]:
    h = model.hidden_size
    specs = [ParamSpec(f"{prefix}.pre_mlp_layernorm.weight", (h,), NORM, layer)]
    if not is_moe_layer(model, layer):
        return specs + _gated_mlp(f"{prefix}.mlp", h, model.ffn_hidden_size, DENSE_MLP, layer)
    experts = model.num_moe_experts or 0
    specs.append(ParamSpec(f"{prefix}.mlp.router.weight", (experts, h), ROUTER, layer))
    specs += _routed_experts(f"{prefix}.mlp.experts", h, model.moe_ffn_hidden_size or 0, layer, experts)
    if model.moe_shared_expert_intermediate_size:
        specs += _gated_mlp(
            f"{prefix}.mlp.shared_experts", h, model.moe_shared_expert_intermediate_size, SHARED_EXPERT, layer
        )
    return specs


SHAPE_FIELDS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "qk_layernorm",
    "multi_latent_attention",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_head_dim",
    "qk_pos_emb_head_dim",
    "v_head_dim",
    "num_moe_experts",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "first_k_dense_layers",
    "vocab_size",
    "make_vocab_size_divisible_by",
    "mtp_num_layers",
    "share_embeddings_and_output_weights",
)
"""The model fields that decide its parameter tensors and their pipeline placement. Two models equal on
these have the same inventory, so a run and its calibration anchor (which may differ only in, say,
``init_method_std``) share one placement."""

ModelShape = namedtuple("ModelShape", SHAPE_FIELDS)
"""A model reduced to :data:`SHAPE_FIELDS`. The inventory is built from it, so reading any other field
there fails at once (AttributeError) instead of caching a result that field would change."""


def model_shape(model: ModelConfig) -> ModelShape:
    return ModelShape(*(getattr(model, name) for name in SHAPE_FIELDS))


@lru_cache(maxsize=64)
def _inventory(model: ModelShape, tp: int) -> tuple[ParamSpec, ...]:
    h = model.hidden_size
    vocab = padded_vocab_size(model, tp)
    specs = [ParamSpec("embedding.word_embeddings.weight", (vocab, h), EMBEDDING, None, COLUMN)]
    for layer in range(model.num_layers):
        prefix = f"decoder.layers.{layer}"
        specs += _attention(model, prefix, layer) + _ffn(model, prefix, layer)
    specs.append(ParamSpec("decoder.final_layernorm.weight", (h,), NORM))
    for i in range(model.mtp_num_layers):
        layer = model.num_layers + i
        prefix = f"mtp.layers.{i}"
        specs += [
            ParamSpec(f"{prefix}.enorm.weight", (h,), NORM, layer),
            ParamSpec(f"{prefix}.hnorm.weight", (h,), NORM, layer),
            ParamSpec(f"{prefix}.eh_proj.weight", (h, 2 * h), MTP_PROJ, layer, COLUMN),
        ]
        specs += _attention(model, f"{prefix}.transformer_layer", layer) + _ffn(
            model, f"{prefix}.transformer_layer", layer
        )
        specs.append(ParamSpec(f"{prefix}.final_layernorm.weight", (h,), NORM, layer))
    if not model.share_embeddings_and_output_weights:
        specs.append(ParamSpec("output_layer.weight", (vocab, h), OUTPUT, None, COLUMN))
    return tuple(specs)


def model_parameters(model: ModelConfig, tp: int = 1) -> tuple[ParamSpec, ...]:
    """Every parameter tensor of the unsharded model (the vocabulary padded for ``tp``); cached per shape."""
    # Kimi K2 has ~46k expert matrices: build the inventory once per (shape, tp).
    return _inventory(model_shape(model), tp)


@dataclass(frozen=True)
class ParamCounts:
    """Parameter totals of a model."""

    total: int
    """Every parameter, MTP included, with the vocabulary padded as at TP=1."""
    active: int
    """Parameters touched per token: everything but the routed experts, plus top-k experts per MoE layer."""
    embedding: int
    """Input embedding plus output layer."""
    experts: int
    """Routed-expert parameters."""


def parameter_counts(model: ModelConfig) -> ParamCounts:
    """Total and per-token active parameters (vocabulary padded as Megatron pads it at TP=1)."""
    total = experts = embedding = 0
    for spec in model_parameters(model):
        numel = math.prod(spec.shape)
        total += numel
        if spec.kind == EXPERT:
            experts += numel
        elif spec.kind in (EMBEDDING, OUTPUT):
            embedding += numel
    active_experts = 0
    if model.num_moe_experts:
        active_experts = experts * model.moe_router_topk // model.num_moe_experts
    return ParamCounts(total=total, active=total - experts + active_experts, embedding=embedding, experts=experts)
