"""What the schema declares about a field besides its type and docstring: the one place a field is described.

Each leaf field of :class:`~optbench.config.schema.RunConfig` is written with :func:`setting`, which records a
:class:`FieldSpec` in the dataclass field's metadata:

* ``domain``: the values that mean something (:mod:`optbench.config.domain_types`), checked before any work;
* ``readers``: who reads it: the ``local`` engine, the ``megatron_bridge`` engine, a ``slurm`` job. A typed
  override no reader of the run reads is refused (it would be silently ignored);
* ``bridge``: the Megatron Bridge ConfigContainer fields it sets (dotted), the first one the field NVIDIA's
  presets are read back from; ``transform`` names how the value is written where it is not 1:1, and
  ``renamed_from`` the first name in the containers that predate it (Megatron Core renames);
* ``preset``: whether a later release's NVIDIA preset supplies the field (``every`` intent, or ``reproduce``
  only), read back through the first Bridge name.

:mod:`optbench.config.field_table` walks the schema and derives everything else from these: the domain table,
the engine scopes of typed overrides, our -> Bridge names and Bridge -> ours reading of presets.
The named domains shared by several fields live here too, so that the schema can name them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from optbench.config.domain_types import Integer, Real, Text

READERS = ("local", "megatron_bridge", "slurm")
EVERYONE = frozenset(READERS)
BRIDGE = frozenset({"megatron_bridge"})
LOCAL = frozenset({"local"})
SLURM = frozenset({"slurm"})
PRESET_SCOPES = ("every", "reproduce")
TRANSFORMS = ("same", "list", "lists", "none_if_zero", "ns_precision", "blend")
"""How a value is written into Bridge (implemented in :mod:`optbench.config.field_table`)."""


@dataclass(frozen=True)
class FieldSpec:
    """One field's domain, readers and Megatron Bridge mapping."""

    domain: Any
    """Values that mean something (an :mod:`optbench.config.domain_types` kind)."""
    readers: frozenset[str] = EVERYONE
    """Who reads it: local, megatron_bridge, slurm (a typed override none of the run's readers reads is refused)."""
    bridge: tuple[str, ...] = ()
    """Megatron Bridge fields it sets, dotted; the first is the one a preset's value is read from."""
    transform: str = "same"
    """How the value is written into Bridge where it is not 1:1 (one of TRANSFORMS)."""
    renamed_from: Optional[str] = None
    """The first Bridge name in containers whose Megatron Core predates it."""
    preset: Optional[str] = None
    """every / reproduce: a later release's NVIDIA preset supplies this field (for those intents)."""

    def __post_init__(self) -> None:
        assert self.readers and self.readers <= EVERYONE, self.readers
        assert self.transform in TRANSFORMS, self.transform
        assert self.preset in (None, *PRESET_SCOPES), self.preset
        assert self.bridge or (self.preset is None and self.renamed_from is None), "needs a Bridge name"


def setting(
    default: Any,
    domain: Any,
    *,
    readers: frozenset[str] = EVERYONE,
    bridge: str | tuple[str, ...] = (),
    transform: str = "same",
    renamed_from: Optional[str] = None,
    preset: Optional[str] = None,
) -> Any:
    """A schema field with its spec; a mutable default is given as its type (``list``, ``dict``: empty)."""
    names = (bridge,) if isinstance(bridge, str) else tuple(bridge)
    spec = FieldSpec(domain, readers, names, transform, renamed_from, preset)
    if default in (list, dict):
        return field(default_factory=default, metadata={"spec": spec})
    return field(default=default, metadata={"spec": spec})


# Named domains shared by several fields.
LAYERS = Integer(1, 1024)
WIDTH = Integer(1, 1 << 20)
HEADS = Integer(1, 4096)
HEAD_DIM = Integer(1, 16384)
RANK = Integer(1, 65536)
STEPS = Integer(1, 1_000_000_000)
SEED = Integer(0, (1 << 32) - 1)
PARALLEL = Integer(1, 1024)
PROBABILITY = Real(0.0, 1.0, high_open=True)
IDENTIFIER = Text(64, r"[A-Za-z0-9][A-Za-z0-9_.-]*", "a name of letters, digits, '.', '_' and '-'", min_len=1)
WANDB_NAME = Text(128, r"[^/\\#?%:]+", "a wandb name (1-128 characters, none of / \\ # ? % :)", min_len=1)
SLURM_NAME = Text(256, r"[A-Za-z0-9_.,+-]+", "a Slurm name (letters, digits, '_', '.', ',', '+', '-')", min_len=1)
SLURM_TIME = Text(
    32,
    r"UNLIMITED|INFINITE|\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}",
    "a Slurm time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS",
    min_len=1,
)
SLURM_MEMORY = Text(16, r"\d+[KMGT]?", "a Slurm memory size such as 0 (all of the node), 500G or 64000M", min_len=1)
ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def gpu_words() -> tuple[str, ...]:
    from optbench.catalog.hardware import gpu_catalog

    return ("auto", "cpu", *gpu_catalog())


BRIDGE_MIXED_PRECISION_PRESETS = (
    "bf16_mixed",
    "fp16_mixed",
    "bf16_with_fp8_delayed_scaling_mixed",
    "fp16_with_fp8_delayed_scaling_mixed",
    "bf16_with_mxfp8_mixed",
    "fp16_with_mxfp8_mixed",
    "bf16_with_fp8_current_scaling_mixed",
    "fp16_with_fp8_current_scaling_mixed",
    "bf16_with_fp8_subchannel_scaling_mixed",
    "fp16_with_fp8_subchannel_scaling_mixed",
    "bf16_with_nvfp4_mixed",
)
"""Megatron Bridge 0.3.1's registered mixed-precision presets (training/mixed_precision.py), generic ones only."""

RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
"""Megatron Core 0.16.1 TransformerConfig: allowed recompute_modules."""
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
"""Megatron Core 0.16.1 CudaGraphScope values for the transformer_engine implementation."""
