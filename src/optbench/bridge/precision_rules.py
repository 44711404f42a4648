"""What every release's Megatron Bridge and Core refuse of the FP8 settings, checked before launch (Bridge 0.3-0.6,
Core 0.16-0.19):

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
  on (:data:`FIRST_LAST_BF16_PRESETS`), so ``precision.fp8_recipe=delayed`` over one of them is refused.

tests/test_bridge_conformance.py finds the last three's texts, and each preset's flag, in each installed release.
They were found by the pairwise override sweep (``tests/bridge_env/conformance.py --pairs``): the two reuse rules with
Muon's layer-wise optimizer off (the layer-wise one refuses both FP8 parameter settings: validate.py), and each is one
field away on every AdamW MXFP8 recipe, whose NVIDIA preset turns both on (``precision.fp8_param_gather=false`` or
``precision.reuse_grad_buf_for_mxfp8_param_ag=false`` alone passed ``make plan``).
"""

from __future__ import annotations

from collections.abc import Iterable

from optbench.config.schema import RunConfig
from optbench.errors import Problem
from optbench.releases.versions import Container

FIRST_LAST_BF16_PRESETS = ("bf16_with_fp8_current_scaling_mixed", "fp16_with_fp8_current_scaling_mixed")
"""Bridge's mixed-precision presets (of those our config offers) that keep the first and last layers in BF16
(``first_last_layers_bf16 = True``, every release 0.3-0.6)."""


def precision_problems(run: RunConfig, container: Container) -> Iterable[Problem]:
    """Every FP8 rule of Bridge and Core that the run breaks (``container``: named in the message)."""
    p = run.precision
    if p.fp8 is not None and "fp4" in p.bridge_mixed_precision:
        # Found by make plan CHECK=bridge: the FP4 preset's fp4 and our precision's fp8 both reach Core, which refuses.
        yield Problem("precision.bridge_mixed_precision", f"{p.bridge_mixed_precision} turns on FP4 and precision={p.name} "
                      "FP8; Megatron Core refuses both at once; drop the override (each precision= option sets its own "
                      "preset)", ("precision",))
    if p.reuse_grad_buf_for_mxfp8_param_ag and not p.fp8_param_gather:
        yield Problem("precision.reuse_grad_buf_for_mxfp8_param_ag", "reuse_grad_buf_for_mxfp8_param_ag=true with "
                      "fp8_param_gather=false: Megatron Core reuses the gradient buffer for the parameter all-gather only "
                      "when FP8 parameters are kept; set both true or both false", ("precision.fp8_param_gather",))
    if p.fp8_recipe == "mxfp8" and p.fp8_param_gather and not p.reuse_grad_buf_for_mxfp8_param_ag:
        yield Problem("precision.reuse_grad_buf_for_mxfp8_param_ag", "fp8_param_gather=true with "
                      f"reuse_grad_buf_for_mxfp8_param_ag=false: Megatron Bridge {container.bridge} ({container.name}) "
                      "requires the reuse with MXFP8 parameters; set it true, or fp8_param_gather=false",
                      ("precision.fp8_param_gather",))
    if p.fp8_recipe == "delayed" and p.bridge_mixed_precision in FIRST_LAST_BF16_PRESETS:
        yield Problem("precision.fp8_recipe", f"delayed scaling with precision.bridge_mixed_precision="
                      f"{p.bridge_mixed_precision}, which keeps the first and last layers in BF16: Megatron Core refuses "
                      "the pair; use tensorwise, or a delayed-scaling preset (bf16_with_fp8_delayed_scaling_mixed)",
                      ("precision.bridge_mixed_precision",))
