"""What a ConfigContainer needs to run on a GPU without Transformer Engine (the lent one-GPU machines).

A NeMo container has Transformer Engine; a lent machine has only torch. Megatron Core still builds every layer of
our models from its own modules (the *local* layer spec), so the smoke changes only the fields that name a kernel
of Transformer Engine (or Apex), and records each change with its reason: what the run measured is the recipe less
exactly these. Everything else (the layout, the MoE routing, the optimizer section, the schedule) is the plan's.
"""

from __future__ import annotations

from typing import Any

FIELDS: tuple[tuple[str, Any, str], ...] = (
    ("model.apply_rope_fusion", False, "fused RoPE is Transformer Engine's kernel"),
    ("model.masked_softmax_fusion", False, "the fused masked softmax comes from Transformer Engine or Apex"),
    (
        "model.gradient_accumulation_fusion",
        False,
        "fused weight-gradient accumulation needs Apex or Transformer Engine",
    ),
    ("model.cross_entropy_loss_fusion", False, "the recipe's fused cross entropy is Transformer Engine's (impl 'te')"),
    ("model.moe_permute_fusion", False, "fused token permutation is Transformer Engine's kernel"),
    ("model.moe_router_fusion", False, "the fused router top-k is Transformer Engine's kernel"),
    (
        "model.moe_grouped_gemm",
        False,
        "the local spec's experts are Megatron Core's SequentialMLP (one GEMM per expert)",
    ),
    (
        "optimizer.use_precision_aware_optimizer",
        False,
        "the precision-aware Adam is Transformer Engine's FusedAdam "
        "(torch's AdamW, which Core takes without it, has no state dtypes)",
    ),
    (
        "model.bias_activation_fusion",
        False,
        "kept to eager kernels on a first run (Megatron's fused SwiGLU is compiled)",
    ),
)
"""(dotted field, value, why): the recipe's settings a machine without Transformer Engine cannot run."""


def local_layer_spec(model: Any) -> Any:
    """Megatron Core's layer spec built from its own modules only, for the provider's architecture."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    if getattr(model, "num_moe_experts", None) and getattr(model, "moe_layer_freq", 1) != 1:
        # One layer spec for every layer: dense layers among MoE ones (Kimi K2's first layer) would need Core's
        # block spec, which no smoke has run.
        raise ValueError(
            "model.moe_layer_freq: the smoke builds every layer alike; run a model whose every layer is MoE"
        )
    return get_gpt_layer_local_spec(
        num_experts=getattr(model, "num_moe_experts", None),
        moe_grouped_gemm=False,
        qk_layernorm=bool(getattr(model, "qk_layernorm", False)),
        multi_latent_attention=bool(getattr(model, "multi_latent_attention", False)),
        normalization=getattr(model, "normalization", None),
    )


def adapt(config: Any) -> list[dict[str, Any]]:
    """Set :data:`FIELDS` and the local layer spec on a built ConfigContainer; the changes made, as recorded."""
    changes = []
    for dotted, value, why in FIELDS:
        section, name = dotted.split(".", 1)
        holder = getattr(config, section)
        if not hasattr(holder, name):
            continue
        before = getattr(holder, name)
        if before != value:
            setattr(holder, name, value)
            changes.append({"field": dotted, "recipe": _plain(before), "smoke": value, "why": why})
    recipe_spec, config.model.transformer_layer_spec = config.model.transformer_layer_spec, local_layer_spec
    changes.append(
        {
            "field": "model.transformer_layer_spec",
            "recipe": getattr(recipe_spec, "__name__", repr(recipe_spec)),
            "smoke": "megatron.core get_gpt_layer_local_spec",
            "why": "the recipe's spec builds Transformer Engine modules",
        }
    )
    return changes


def _plain(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str, type(None))) else repr(value)
