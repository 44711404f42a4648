"""The cluster recipes the Bridge tests build: one list for the conformance report (conformance.py, run in each
Bridge environment by path) and the tests that read it or check the same recipes in the main environment. Plain
data, importable without Bridge or pytest."""

CLUSTER_RECIPES = (
    "kimi_k2_muon",
    "kimi_k2_adamw",
    "qwen3_30b_a3b_muon",
    "qwen3_30b_a3b_adamw",
    "deepseek_v3_muon",
    "deepseek_v3_adamw",
)
"""The three headline models' cluster recipes, each reproducing an executed NVIDIA preset of Bridge 0.3.1."""

RECIPES = (*CLUSTER_RECIPES, "qwen3_235b_a22b_adamw", "llama31_405b_adamw", "llama3_70b_adamw")
"""Every recipe the conformance report composes and builds with each release's real Bridge."""
