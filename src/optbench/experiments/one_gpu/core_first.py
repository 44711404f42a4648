"""Megatron Core imported before the stand-ins, so that it sees the machine as it is: without Transformer Engine.

Megatron Bridge imports Transformer Engine unguarded (``peft/lora_layers.py``: ``import transformer_engine.pytorch``),
so on a machine without it Bridge imports only behind the CPU check's stand-ins. Megatron Core guards every such
import and decides once, at import, whether to build its Transformer Engine paths (``HAVE_TE``). Imported after the
stand-ins, Core would take them for Transformer Engine and call them (``TransformerBlock`` asks the stand-in for
its CPU-offload context); imported first, it takes its own modules, as it does on any machine without it.
"""

from __future__ import annotations

import importlib
import sys

from optbench.engine.bridge.cpu_check import polyfill_typing

CORE_MODULES = (
    "megatron.core.extensions.transformer_engine",
    "megatron.core.tensor_parallel",
    "megatron.core.fusions.fused_bias_swiglu",
    "megatron.core.fusions.fused_cross_entropy",
    "megatron.core.models.common.embeddings.rotary_pos_embedding",
    "megatron.core.transformer.attention",
    "megatron.core.transformer.multi_latent_attention",
    "megatron.core.transformer.transformer_layer",
    "megatron.core.transformer.transformer_block",
    "megatron.core.transformer.moe.moe_layer",
    "megatron.core.transformer.moe.experts",
    "megatron.core.transformer.moe.router",
    "megatron.core.transformer.moe.token_dispatcher",
    "megatron.core.models.gpt.gpt_layer_specs",
    "megatron.core.models.gpt.gpt_model",
    "megatron.core.distributed",
    "megatron.core.optimizer",
    "megatron.core.pipeline_parallel",
)
"""Every Core module on the smoke's path that decides at import whether Transformer Engine is there."""


def import_core() -> list[str]:
    """Import :data:`CORE_MODULES` (before the stand-ins: refused after them); the ones that failed, with why."""
    if any(name == "transformer_engine" or name.startswith("transformer_engine.") for name in sys.modules):
        raise RuntimeError("Transformer Engine (or its stand-in) is already imported: import Megatron Core first")
    polyfill_typing()
    failed = []
    for name in CORE_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as err:  # a module this Core release does not have
            failed.append(f"{name}: {err}")
    return failed


def core_has_transformer_engine() -> bool:
    """What Core decided at import (False on a machine without Transformer Engine)."""
    return bool(importlib.import_module("megatron.core.extensions.transformer_engine").HAVE_TE)
