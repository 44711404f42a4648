"""Which optimizer updates each parameter, with which weight decay: Megatron Core 0.16.1's rules.

``get_megatron_muon_optimizer``: every trainable 2-D weight that is not the embedding or the output
layer goes to Muon (attention projections incl. MLA, dense MLP, shared and routed experts, the
router); everything else (norms, biases, embeddings, output layer) goes to Adam. A Hugging Face
MoE stores its routed experts as one 3-D parameter [E, rows, cols]; that is E of Megatron's 2-D
expert weights, so 3-D parameters go to Muon as well and are orthogonalized per expert.

``_get_param_groups`` with the default overrides (``get_standard_config_overrides``): parameters with
one dimension and parameters named ``*.bias`` get weight decay 0 (wd_mult = 0); every other
parameter, embeddings and output layer included, gets the configured weight decay.

The embedding and output layer are found by module (``get_input_embeddings`` /
``get_output_embeddings`` of a Hugging Face model, every ``nn.Embedding``; for other models a
top-level ``lm_head`` or ``output_layer`` module), or by Megatron's attribute
``is_embedding_or_output_parameter``. A fused QKV weight is marked with :func:`mark_qkv`
(Megatron's ``is_qkv``); the DeepSeek-V3 router's ``e_score_correction_bias`` is a buffer in
transformers 5.23, not a parameter, so no optimizer sees it (Megatron's expert bias is a buffer too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

MUON = "muon"
ADAMW = "adamw"
OUTPUT_LAYER_ATTRIBUTES = ("lm_head", "output_layer")
"""Where a model without ``get_output_embeddings`` keeps its output layer (HF's and Megatron's names)."""


@dataclass(frozen=True)
class ParamRoute:
    """Where one trainable parameter goes."""

    name: str
    """Name in ``model.named_parameters()``."""
    param: nn.Parameter
    """The parameter itself."""
    optimizer: str
    """``muon`` or ``adamw``."""
    weight_decay_mult: float
    """Megatron's wd_mult: 0 for 1-D parameters and biases, else 1."""
    is_expert: bool
    """A routed-expert stack (3-D), Megatron's expert-parallel weights."""
    qkv_split_shapes: tuple[int, int, int] | None
    """Rows of Q, K and V per query group for a fused QKV weight, else None."""
    partition_dim: int | None = None
    """Tensor-parallel shard dimension of the local weight (0 rows, 1 columns; Megatron's attribute), else None."""


def mark_qkv(param: nn.Parameter, split_shapes: Sequence[int] | None = None) -> nn.Parameter:
    """Mark a fused [groups * (q + k + v), hidden] weight as QKV (Megatron's ``is_qkv``).

    ``split_shapes`` are the rows of Q, K and V per query group; when omitted, :func:`route_parameters`
    takes them from its ``qkv_split_shapes`` argument (Megatron derives them from the model config).
    """
    param.is_qkv = True
    if split_shapes is not None:
        param.qkv_split_shapes = tuple(int(s) for s in split_shapes)
    return param


def qkv_split_shapes_for(num_attention_heads: int, num_query_groups: int, kv_channels: int) -> tuple[int, int, int]:
    """Megatron's split for GQA: [heads / groups * kv_channels, kv_channels, kv_channels] rows per group."""
    return (num_attention_heads // num_query_groups * kv_channels, kv_channels, kv_channels)


def embedding_and_output_params(model: nn.Module) -> set[int]:
    """Ids of the parameters of the embedding(s) and output layer, found by module."""
    found: set[int] = set()
    modules: list[nn.Module] = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    for getter, fallbacks in (("get_input_embeddings", ()), ("get_output_embeddings", OUTPUT_LAYER_ATTRIBUTES)):
        method = getattr(model, getter, None)
        module = method() if callable(method) else None
        if module is None and not callable(method):
            # Not a Hugging Face model: the output layer under the attribute name HF or Megatron gives it.
            module = next(
                (getattr(model, a) for a in fallbacks if isinstance(getattr(model, a, None), nn.Module)), None
            )
        if isinstance(module, nn.Module):
            modules.append(module)
    for module in modules:
        found.update(id(p) for p in module.parameters())
    found.update(id(p) for p in model.parameters() if getattr(p, "is_embedding_or_output_parameter", False))
    return found


def route_parameters(
    model: nn.Module, *, optimizer: str = MUON, qkv_split_shapes: Sequence[int] | None = None
) -> list[ParamRoute]:
    """Route every trainable parameter of ``model`` (shared/tied parameters once), in model order.

    With ``optimizer="adamw"`` everything goes to AdamW (with the same weight-decay rule).
    """
    if optimizer not in (MUON, ADAMW):
        raise ValueError(f"unknown optimizer {optimizer!r}; choose {MUON} or {ADAMW}")
    special = embedding_and_output_params(model)
    routes = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        matrix = param.ndim in (2, 3) and id(param) not in special
        to_muon = optimizer == MUON and matrix
        no_decay = param.ndim <= 1 or name.endswith(".bias")
        shapes = None
        if getattr(param, "is_qkv", False) and param.ndim == 2:
            shapes = getattr(param, "qkv_split_shapes", None) or qkv_split_shapes
            if shapes is None:
                raise ValueError(f"{name} is marked as fused QKV but no qkv_split_shapes were given")
            shapes = tuple(int(s) for s in shapes)
        routes.append(
            ParamRoute(
                name=name,
                param=param,
                optimizer=MUON if to_muon else ADAMW,
                weight_decay_mult=0.0 if no_decay else 1.0,
                is_expert=param.ndim == 3,
                qkv_split_shapes=shapes,
                partition_dim=_partition_dim(param),
            )
        )
    return routes


def _partition_dim(param: nn.Parameter) -> int | None:
    """Megatron's ``partition_dim`` attribute of a tensor-parallel weight; -1 (not sharded) becomes None."""
    dim = getattr(param, "partition_dim", None)
    return None if dim is None or dim == -1 else int(dim)


def megatron_order(routes: Sequence[ParamRoute]) -> list[ParamRoute]:
    """The order in which Megatron's layer-wise optimizer lists parameters before its stable size sort.

    Muon's groups come first, then Adam's; within each optimizer the group without overrides
    (weight decay on) precedes the wd_mult = 0 group; within a group, model order.
    """
    rank = {(MUON, 1.0): 0, (MUON, 0.0): 1, (ADAMW, 1.0): 2, (ADAMW, 0.0): 3}
    return sorted(routes, key=lambda r: rank[(r.optimizer, r.weight_decay_mult)])


def ns_matrix_shapes(route: ParamRoute, split_qkv: bool = True) -> list[tuple[int, int]]:
    """Shapes of the matrices Muon orthogonalizes for one routed parameter (one per expert / QKV block)."""
    if route.optimizer != MUON:
        return []
    *lead, rows, cols = route.param.shape
    count = math.prod(lead)
    if route.qkv_split_shapes is not None and split_qkv:
        groups = rows // sum(route.qkv_split_shapes)
        return [(groups * size, cols) for size in route.qkv_split_shapes] * count
    return [(rows, cols)] * count


def param_groups(routes: Sequence[ParamRoute], weight_decay: float, keys) -> list[dict]:
    """Param groups: one per distinct (weight-decay multiplier, *keys(route)), in first-seen order."""
    groups: dict[tuple, dict] = {}
    for r in routes:
        extra = keys(r)
        group = groups.setdefault(
            (r.weight_decay_mult, *extra.values()),
            {"params": [], "weight_decay": weight_decay * r.weight_decay_mult, **extra},
        )
        group["params"].append(r.param)
    return list(groups.values())
