"""The setup ``make gpu-smoke`` trains, and the run folders it prepares, through the path a cluster job takes.

Each arm is a recipe composed with overrides (``engine=megatron_bridge``, the GPU's cluster, the smoke's scale),
validated and planned as ``make plan`` does, then written as the launcher writes a job's folder: the resolved
config.yaml and the plan.json whose Bridge overrides the job applies. Pure Python: runs on a CPU (the tests do).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from optbench.common.errors import Problem, UserError
from optbench.config.optimizers import REGISTRY

RECIPES = {name: e.gpu_smoke for name, e in REGISTRY.items() if e.gpu_smoke[0]}
"""Optimizer -> (recipe, overrides), from the optimizer registry: Qwen3 30B-A3B's architecture (GQA, QK-norm, every
layer MoE with softmax top-k routing and its aux loss), each optimizer as its recipe configures it (the emerging
optimizers without a recipe of their own on the Muon recipe's lr)."""
SCALE = (
    "model.num_layers=8",
    "model.hidden_size=1024",
    "model.num_attention_heads=16",
    "model.num_query_groups=4",
    "model.kv_channels=64",
    "model.ffn_hidden_size=3072",
    "model.num_moe_experts=32",
    "model.moe_ffn_hidden_size=512",
    "train.seq_length=2048",
    "train.mbs=4",
    "train.gbs=32",
    "train.warmup_iters=3",
    "train.eval_iters=0",
)
"""The tiny proxy scaled to keep one H100/H200 busy for a fraction of a second per step (a 2k-token sequence, 8
micro-batches of 4), small enough for 4 optimizers x 30 steps in about a minute. The vocabulary stays the synthetic
stream's 512 tokens, so the loss can fall."""


LOOPS = ("core", "bridge")
"""The training loops an arm runs in: Megatron Core's step as Bridge builds it, or Bridge's own pretrain()."""


def cluster_of(device_name: str) -> str:
    """Our cluster config for the GPU torch names (the registry's device_name and cluster preset), e.g. 'NVIDIA H200'
    -> h200."""
    from optbench.common.checkout import repo_root
    from optbench.catalog.hardware import gpu_catalog

    for spec in sorted(gpu_catalog().values(), key=lambda s: -len(s.device_name)):
        if spec.device_name and spec.device_name.lower() in device_name.lower():
            if (repo_root() / "conf" / "cluster" / f"{spec.cluster_preset}.yaml").is_file():
                return spec.cluster_preset
    raise UserError(Problem("gpu", f"no cluster config for the GPU '{device_name}'; the smoke runs on H100 or H200"))


@dataclass(frozen=True)
class Arm:
    optimizer: str
    loop: str
    folder: Path
    run_id: str


def overrides(
    optimizer: str, cluster: str, steps: int, run_id: str, extra: Sequence[str] = ()
) -> tuple[str, list[str]]:
    """(recipe, overrides) of one arm."""
    if optimizer not in RECIPES:
        raise UserError(Problem("optimizers", f"'{optimizer}' is not one of {', '.join(RECIPES)}"))
    recipe, own = RECIPES[optimizer]
    return recipe, [
        *own,
        "engine=megatron_bridge",
        f"cluster={cluster}",
        "data=mock",
        "logger=none",
        *SCALE,
        f"train.iters={steps}",
        f"run_id={run_id}",
        *extra,
    ]


def prepare(optimizer: str, loop: str, cluster: str, steps: int, stamp: str, extra: Sequence[str] = ()) -> Arm:
    """Compose, validate and plan one arm; write its job folder (config.yaml, plan.json) as the launcher does."""
    from optbench.compose.recipe import compose_run
    from optbench.common.io import atomic_write_json
    from optbench.plan import build_plan, claim_results
    from optbench.runs import run_dir, save_resolved_config
    from optbench.validate import validate

    run_id = f"gpu-smoke-{optimizer}-{loop}-{stamp}"
    recipe, typed = overrides(optimizer, cluster, steps, run_id, extra)
    resolved = validate(compose_run(recipe, typed))
    run, plan = resolved.run, build_plan(resolved, typed)
    claim_results(run)
    folder = run_dir(run)
    if folder.exists():  # two arms of one name in one second (an optimizer named twice): never write into it
        raise UserError(Problem("optimizers", f"{folder} exists; name each optimizer once"))
    folder.mkdir(parents=True)
    save_resolved_config(run, folder / "config.yaml")
    atomic_write_json(folder / "plan.json", plan.to_json())
    return Arm(optimizer, loop, folder, run_id)
