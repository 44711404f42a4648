"""The cluster recipes the Bridge tests build: one list for the conformance report (conformance.py, run in each
Bridge environment by path) and the tests that read it or check the same recipes in the main environment.
Importable without Bridge or pytest."""

CLUSTER_RECIPES = (
    "kimi_k2_muon",
    "kimi_k2_adamw",
    "qwen3_30b_a3b_muon",
    "qwen3_30b_a3b_adamw",
    "deepseek_v3_muon",
    "deepseek_v3_adamw",
)
"""The three headline models' cluster recipes, each reproducing an executed NVIDIA preset of Bridge 0.3.1."""

RECIPES = (
    *CLUSTER_RECIPES,
    "qwen3_235b_a22b_adamw",
    "llama31_405b_adamw",
    "llama3_70b_adamw",
    "gpt_oss_120b_adamw",
)
"""Every recipe the conformance report composes and builds with each release's real Bridge."""


def as_nvidia_ran_it(recipe: str, container: str) -> tuple[str, ...]:
    """The override that composes ``recipe`` at a precision NVIDIA ran its model and GPU at in ``container``, where
    it never ran the recipe's own (GPT-OSS 120B: BF16 up to 26.04.01, MXFP8 from 26.06); empty where it did."""
    from optbench.compose.recipe import compose_run
    from optbench.releases import presets

    run = compose_run(recipe, [f"cluster.container={container}"])
    if run.engine != "megatron_bridge" or presets.find_preset(run) is not None:
        return ()
    release = presets.serving_release(presets.release_of(run), run.model.name)
    ran = [
        key.split("/")[2]
        for key in presets.load(release)["presets"]
        if key.startswith(f"{run.model.name}/{run.cluster.gpu}/")
    ]
    return (f"precision={ran[0]}",) if ran else ()
