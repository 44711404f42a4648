"""What every release's Megatron Bridge and Core refuse of the precision settings, checked before launch (Bridge
0.3-0.6, Core 0.16-0.19):

* Megatron Core's ``TransformerConfig``: FP4 and FP8 not both (a Bridge FP4 preset typed over an FP8 precision; found
  by ``make plan CHECK=bridge``);
* Megatron Core's ``DistributedDataParallelConfig`` reuses the gradient buffer for the MXFP8 parameter all-gather only
  when the parameters are kept in FP8 ("Reuse grad buffer only when keeping params in MXFP8."):
  ``precision.reuse_grad_buf_for_mxfp8_param_ag`` needs ``precision.fp8_param_gather``;
* Megatron Bridge requires that reuse with MXFP8 parameters ("When fp8_param_gather=True and fp8_recipe='mxfp8',
  reuse_grad_buf_for_mxfp8_param_ag must be set to True"; ``MixedPrecisionConfig.finalize`` up to 0.4, the
  ConfigContainer's validation outside FSDP from 0.5, which our config does not run);
* Megatron Core's ``TransformerConfig``: delayed scaling does not keep the first and last layers in BF16 ("Delayed
  scaling does not support first / last layer in BF16."), which Bridge's current-scaling mixed-precision presets turn
  on (:data:`FIRST_LAST_BF16_PRESETS`), so ``precision.fp8_recipe=delayed`` over one of them is refused;
* Megatron Core's ``TransformerConfig``: delayed scaling does not recompute ``moe_act`` or ``layernorm`` (selective
  recompute under FP8: "Delayed scaling does not support moe_act and layernorm recompute for fp8.").
* Megatron Core's ``TransformerConfig`` (0.18+): the FP8 output projection only under MXFP8 ("fp8_output_proj requires
  fp8_recipe='mxfp8'"), which NVIDIA's DeepSeek-V3 MXFP8 presets turn on from nemo:26.06;
* Megatron Core's ``OptimizerConfig``: the precision-aware optimizer (Adam's moments in BF16, which Bridge's DeepSeek-V3
  recipe and some of NVIDIA's presets keep) only with the distributed optimizer.

tests/test_bridge_conformance.py finds the last four's texts, and each preset's flag, in each installed release.
They were found by the pairwise override sweep (``tests/bridge_env/conformance.py --pairs``): the two reuse rules with
Muon's layer-wise optimizer off (the layer-wise one refuses both FP8 parameter settings: validate.py), and each is one
field away on every AdamW MXFP8 recipe, whose NVIDIA preset turns both on (``precision.fp8_param_gather=false`` or
``precision.reuse_grad_buf_for_mxfp8_param_ag=false`` alone passed ``make plan``); the recompute one by a later run of
it (seed 23, Kimi K2 on NeMo 26.08: ``parallel.recompute_modules=[moe_act] precision.fp8_recipe=delayed``); the last
two by its first run over DeepSeek-V3's recipes (NeMo 26.08, one field: ``precision.fp8_recipe=tensorwise``,
``optimizer.use_distributed_optimizer=false``).
"""

from __future__ import annotations

from collections.abc import Iterable

from optbench.config.schema import MATRIX_OPTIMIZERS, RunConfig
from optbench.common.errors import Problem
from optbench.releases import presets, versions
from optbench.releases.versions import Container

DELAYED_NOT_RECOMPUTED = ("moe_act", "layernorm")
"""Selectively recomputed modules Core refuses under delayed FP8 scaling (every release 0.16-0.19)."""

FIRST_LAST_BF16_PRESETS = ("bf16_with_fp8_current_scaling_mixed", "fp16_with_fp8_current_scaling_mixed")
"""Bridge's mixed-precision presets (of those our config offers) that keep the first and last layers in BF16
(``first_last_layers_bf16 = True``, every release 0.3-0.6)."""


def precision_problems(run: RunConfig, container: Container) -> Iterable[Problem]:
    """Every FP8 rule of Bridge and Core that the run breaks (``container``: named in the message)."""
    p = run.precision
    if p.fp8 is not None and "fp4" in p.bridge_mixed_precision:
        # Found by make plan CHECK=bridge: the FP4 preset's fp4 and our precision's fp8 both reach Core, which refuses.
        yield Problem(
            "precision.bridge_mixed_precision",
            f"{p.bridge_mixed_precision} turns on FP4 and precision={p.name} FP8; Megatron Core refuses both at once; "
            "drop the override (each precision= option sets its own preset)",
            ("precision",),
        )
    if p.fp4 is not None and p.fp8 is not None:
        yield Problem(
            "precision.fp4",
            f'FP4 ({p.fp4}) beside FP8 ({p.fp8}): Megatron Bridge refuses both at once ("fp4 and fp8 cannot be used '
            'simultaneously"); set precision.fp8=null, or use precision=nvfp4 as it is',
            ("precision.fp8", "precision"),
        )
    if p.fp4_param_gather and p.fp4 is None:
        yield Problem(
            "precision.fp4_param_gather",
            "FP4 weight copies for the parameter all-gather need an FP4 recipe and this run has none; set it false "
            "or use precision=nvfp4",
            ("precision",),
        )
    if p.fp4_param_gather and not versions.has_field(container, "mixed_precision.fp4_param_gather"):
        yield Problem(
            "precision.fp4_param_gather",
            f"Megatron Bridge {container.bridge} ({container.name}) has no FP4 parameter all-gather (a field of "
            "0.4.2+, nemo:26.04.01+); set precision.fp4_param_gather=false, or cluster.container=nemo:26.04.01 or "
            "newer",
            ("cluster.container", "precision"),
        )
    if p.reuse_grad_buf_for_mxfp8_param_ag and not p.fp8_param_gather:
        yield Problem(
            "precision.reuse_grad_buf_for_mxfp8_param_ag",
            "reuse_grad_buf_for_mxfp8_param_ag=true with "
            "fp8_param_gather=false: Megatron Core reuses the gradient buffer for the parameter all-gather only "
            "when FP8 parameters are kept; set both true or both false",
            ("precision.fp8_param_gather",),
        )
    if p.fp8_recipe == "mxfp8" and p.fp8_param_gather and not p.reuse_grad_buf_for_mxfp8_param_ag:
        yield Problem(
            "precision.reuse_grad_buf_for_mxfp8_param_ag",
            f"fp8_param_gather=true with reuse_grad_buf_for_mxfp8_param_ag=false: Megatron Bridge {container.bridge} "
            f"({container.name}) requires the reuse with MXFP8 parameters; set it true, or fp8_param_gather=false",
            ("precision.fp8_param_gather",),
        )
    if p.fp8_recipe == "delayed" and p.bridge_mixed_precision in FIRST_LAST_BF16_PRESETS:
        yield Problem(
            "precision.fp8_recipe",
            f"delayed scaling with precision.bridge_mixed_precision="
            f"{p.bridge_mixed_precision}, which keeps the first and last layers in BF16: Megatron Core refuses "
            "the pair; use tensorwise, or a delayed-scaling preset (bf16_with_fp8_delayed_scaling_mixed)",
            ("precision.bridge_mixed_precision",),
        )
    refused = sorted(set(run.parallel.recompute_modules or ()) & set(DELAYED_NOT_RECOMPUTED))
    if (
        p.fp8 is not None
        and p.fp8_recipe == "delayed"
        and run.parallel.recompute_granularity == "selective"
        and refused
    ):
        yield Problem(
            "parallel.recompute_modules",
            f"{', '.join(refused)} recomputed under delayed FP8 scaling: Megatron "
            f"Core refuses it; drop {' and '.join(refused)} from parallel.recompute_modules, or use another "
            "precision.fp8_recipe (tensorwise, mxfp8)",
            ("precision.fp8_recipe",),
        )
    if p.fp8_output_proj and (p.fp8 is None or p.fp8_recipe != "mxfp8"):
        yield Problem(
            "precision.fp8_output_proj",
            f"the FP8 output projection runs only under MXFP8 and this run's FP8 "
            f"recipe is {p.fp8_recipe if p.fp8 is not None else 'off'} (Megatron Core refuses it); set "
            "precision.fp8_output_proj=false, or precision.fp8_recipe=mxfp8",
            ("precision.fp8_recipe", "precision.fp8", "precision"),
        )
    yield from _precision_aware_problems(run)


def _precision_aware_problems(run: RunConfig) -> Iterable[Problem]:
    """Adam under the recipe's or NVIDIA's precision-aware optimizer needs the distributed optimizer."""
    o = run.optimizer
    if o.use_distributed_optimizer or o.name in MATRIX_OPTIMIZERS:  # the emerging optimizers turn it off (sections.py)
        return
    preset = presets.find_preset(run)
    if preset is not None and preset.precision_aware_adam:
        yield Problem(
            "optimizer.use_distributed_optimizer",
            f"NVIDIA's preset {preset.key} runs Adam with Megatron's "
            f"precision-aware optimizer ({presets.PRECISION_AWARE}; moments in "
            f"{'/'.join(sorted(set(preset.adam_moment_dtypes())))}), which Megatron Core runs only with the "
            "distributed optimizer; keep optimizer.use_distributed_optimizer=true",
        )
