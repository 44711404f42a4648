"""NVIDIA's executed preset of a setup, built by NVIDIA's own perf scripts (``scripts/performance``).

Two users: ``tools/nvidia_presets.py`` records every case of a checked release into ``presets-<bridge>.json``, and the
job's check before step 1 (:mod:`optbench.engine.bridge.conformance`) rebuilds its own case from the perf scripts of
the container it runs in, so that a release we never checked still says where NVIDIA's configuration and the plan's
differ. Both run the code of ``run_script.py``'s ``main()`` up to ``pretrain``: the arguments NVIDIA's launcher
passes (``-m <family> --model_recipe_name <recipe> -g <gpu> -c <dtype> -ng <gpus> -gn <gpus per node>``), then its
recipe lookup and its overrides. Nothing here imports Megatron Bridge at import time.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

COMPUTE_DTYPES = {"bf16": "bf16", "fp8_cs": "fp8_cs", "mxfp8": "fp8_mx", "nvfp4": "nvfp4"}
"""Our precision name -> NVIDIA's compute dtype (``-c``)."""
SCRIPTS_VARIABLE = "OPTBENCH_NVIDIA_SCRIPTS"
"""Where the job looks for the container's ``scripts/performance`` first (a folder holding ``run_script.py``)."""
SCRIPTS_PLACES = ("/opt/Megatron-Bridge/scripts/performance",)
"""Where NeMo containers keep Megatron Bridge's source, and so its perf scripts, when the variable names none."""


def find_scripts() -> Path | None:
    """The container's perf scripts folder, or None where there is none."""
    named = os.environ.get(SCRIPTS_VARIABLE)
    for place in ([named] if named else []) + list(SCRIPTS_PLACES):
        if (Path(place) / "run_script.py").is_file():
            return Path(place)
    return None


def case_args(
    model: str, gpu: str, precision: str, optimizer: str, num_gpus: int, gpus_per_node: int, launcher: tuple = ()
) -> list[str]:
    """The arguments of NVIDIA's launcher for one case; ``launcher``: its own (account, partition, image, ...), which
    only reach the Slurm job. ``--optimizer_type`` only for a model whose NVIDIA recipe takes one (models.csv)."""
    from optbench.catalog.models import model_registry

    entry = model_registry()[model]
    args = ["-m", entry.nvidia_family, "--model_recipe_name", entry.nvidia_recipe, "-g", gpu]
    args += ["-c", COMPUTE_DTYPES[precision], "-ng", str(num_gpus), "-gn", str(gpus_per_node), *launcher]
    return args + (["--optimizer_type", optimizer] if entry.optimizer_type_marker else [])


def accepted(function: Any, **kwargs: Any) -> dict[str, Any]:
    """The keyword arguments ``function`` takes (NVIDIA's signatures change between releases)."""
    return {k: v for k, v in kwargs.items() if k in inspect.signature(function).parameters}


def nvidia_config(script_args: list[str]) -> tuple[Any, list[str]]:
    """run_script.py's ConfigContainer for these arguments (the code of its main(), up to pretrain), and the
    command-line overrides it applied; NVIDIA's scripts folder must be on ``sys.path``."""
    from argument_parser import parse_cli_args

    args, cli_overrides = parse_cli_args().parse_known_args(script_args)
    import run_script

    if hasattr(run_script, "_prepare_perf_recipe"):  # Bridge >= 0.6: flat perf recipes, found by name first
        recipe = run_script._prepare_perf_recipe(args, cli_overrides)
        if args.compute_dtype == "bf16" and recipe.optimizer.optimizer == "adam":  # as _run_training, before pretrain
            recipe.optimizer.use_precision_aware_optimizer = True
        return recipe, cli_overrides
    from utils.overrides import set_cli_overrides, set_post_overrides, set_user_overrides
    from utils.utils import get_perf_optimized_recipe

    recipe = get_perf_optimized_recipe(
        **accepted(
            get_perf_optimized_recipe,
            model_family_name=args.model_family_name,
            model_recipe_name=args.model_recipe_name,
            train_task=args.task,
            gpu=args.gpu,
            compute_dtype=args.compute_dtype,
            mock=args.data == "mock",
            config_variant=args.config_variant,
            optimizer_type=getattr(args, "optimizer_type", None),
        )
    )
    recipe = set_cli_overrides(recipe, cli_overrides)
    recipe = set_user_overrides(recipe, args)
    return set_post_overrides(
        recipe,
        args.model_family_name,
        args.model_recipe_name,
        args.gpu,
        args.num_gpus,
        args.compute_dtype,
        args.task,
        user_gbs=args.global_batch_size,
        config_variant=args.config_variant,
    ), cli_overrides


def as_case(config: Any, optimizer: str) -> tuple[Any, str]:
    """(NVIDIA's config for a case of ``optimizer``, the optimizer its launcher built): Adam's settings applied where
    the launcher trains another optimizer for an Adam case (:func:`real_adam`)."""
    built = config.optimizer.optimizer
    return (real_adam(config) if optimizer == "adam" and built != "adam" else config), built


def real_adam(config: Any) -> Any:
    """NVIDIA's Adam settings for Kimi K2 where its launcher leaves the flat recipe's Muon (Bridge 0.6)."""
    from megatron.bridge.recipes.kimi.kimi_k2 import _apply_kimi_k2_optimizer

    decay, warmup = config.scheduler.lr_decay_iters, config.scheduler.lr_warmup_iters
    _apply_kimi_k2_optimizer(config, "adam")
    config.scheduler.lr_decay_iters, config.scheduler.lr_warmup_iters = decay, warmup
    return config


@contextlib.contextmanager
def scripts_importable(scripts: Path) -> Iterator[None]:
    """NVIDIA's scripts importable and the working folder theirs (they read files beside them), both restored."""
    saved_path, saved_cwd = list(sys.path), os.getcwd()
    sys.path.insert(0, str(scripts))
    os.chdir(scripts)
    try:
        yield
    finally:
        sys.path[:] = saved_path
        os.chdir(saved_cwd)


def rebuilt(case: list[str], optimizer: str, scripts: Path) -> tuple[Any, str]:
    """:func:`as_case` of NVIDIA's config of ``case`` (:func:`case_args`), built with ``scripts``."""
    with scripts_importable(scripts):
        config, _ = nvidia_config(case)
    return as_case(config, optimizer)
