"""AdamW: every parameter to ``torch.optim.AdamW`` (Megatron's ``adam``), the baseline each matrix optimizer is
set against. Its settings are fields of ``optimizer`` itself (they also drive the matrix optimizers' scalar side)."""

from __future__ import annotations

from optbench.config.optimizers.entry import OptimizerEntry, StudyArm

ENTRY = OptimizerEntry(
    name="adamw",
    label="AdamW",
    preset_optimizer="adam",
    # With 1e-3 to 1e-2 alone, AdamW's best rate was the grid's lowest: the grid reaches down to 3e-4.
    study_arms=(StudyArm("adamw", "AdamW", "kimi_k2_tiny_adamw", (), (3e-4, 1e-3, 3e-3, 1e-2), "tab:blue"),),
    gpu_smoke=("qwen3_moe_tiny_adamw", ()),
)
