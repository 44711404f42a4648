"""Extract NVIDIA's performance presets from Megatron Bridge's ``scripts/performance`` into data files.

NVIDIA's published throughput comes from ``scripts/performance/setup_experiment.py``: it renders a Slurm
job (NeMo-Run ``SlurmExecutor`` + ``PerfEnvPlugin``) whose task runs ``run_script.py``, which builds the
ConfigContainer with ``get_perf_optimized_recipe`` and the launcher's overrides. This tool runs that
code itself, for every case we reproduce, and records what it produced:

* the job: the sbatch script and the task script NeMo-Run renders (dry run), the environment,
  ``--segment``, the NUMA binding and the script arguments after the plugins added theirs;
* the config: every field of NVIDIA's ConfigContainer as ``run_script.py`` hands it to ``pretrain``,
  and every field of the plain library recipe our entry point starts from; the preset's *settings*
  are the fields where the two differ;
* for the published GB300 cases, the effective config after Bridge's ``runtime_config_update``
  (what the conformance test compares ours with).

Run in the Bridge environment (``make bridge-env``) with the same release's scripts, inside a git
work tree (NeMo-Run's packager asks git for the top level)::

    git -C <Megatron-Bridge clone> archive v0.3.1 scripts/performance | tar -x -C /tmp/nv
    git -C /tmp/nv init -q && git -C /tmp/nv add -A && git -C /tmp/nv commit -qm v0.3.1
    .venv-bridge/bin/python tools/nvidia_presets.py --scripts /tmp/nv/scripts/performance --release 0.3.1 \\
        --commit 9c9dd848966322fc3ed7706747ec13219ef49dda

Every release at once (each in its own Bridge environment; 0.6 also needs ``scripts/common`` and the
``perf_recipes`` it ships): ``tools/nvidia_presets_all.sh <Megatron-Bridge git dir>``.

Writes ``src/optbench/data/bridge/presets-<release>.json`` and ``tests/fixtures/nvidia/<release>/<case>/``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from optbench.catalog.hardware import gpu_catalog  # noqa: E402
from optbench.catalog.models import model_registry  # noqa: E402
from optbench.engine.bridge.nvidia_preset import COMPUTE_DTYPES, as_case, case_args, nvidia_config  # noqa: E402

FAMILIES = {model: (entry.nvidia_family, entry.nvidia_recipe) for model, entry in model_registry().items()}
"""Our model -> NVIDIA's (model_family_name, model_recipe_name), from the model registry (optbench/data/models.csv)."""
GPUS_PER_NODE = {gpu: spec.gpus_per_node for gpu, spec in gpu_catalog().items()}
"""GPUs per node of each registry GPU (optbench/data/gpus.csv); a GPU NVIDIA has no workload config for yields no
case."""
MIXED_PRECISION_PRESETS = {
    "bf16": "bf16_mixed",
    "fp8_cs": "bf16_with_fp8_current_scaling_mixed",
    "mxfp8": "bf16_with_mxfp8_mixed",
    "nvfp4": "bf16_with_nvfp4_mixed",
}
"""As conf/precision/*.yaml's bridge_mixed_precision."""
OPTIMIZERS = {"kimi_k2": ("muon", "adam")}
"""Models whose NVIDIA recipe takes ``optimizer_type`` (the others are Adam only)."""
FIXTURE_CASES = (
    "kimi_k2/gb300/mxfp8/muon",
    "kimi_k2/gb300/mxfp8/adam",
    "qwen3_30b_a3b/gb300/mxfp8/adam",
    "deepseek_v3/gb300/mxfp8/adam",
)
"""Cases whose rendered job and effective config are kept as test fixtures (the published GB300 recipes)."""
PLACEHOLDERS = {
    "account": "ACCOUNT",
    "partition": "PARTITION",
    "image": "nvcr.io/nvidia/nemo:26.02",
    "log_dir": "/LOGS",
}
DROPPED_ENV = ("WANDB_RUN_ID", "WANDB_RESUME")
"""Per-launch values of NVIDIA's launcher (a random wandb id), not settings."""


def jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys -> leaf values (lists are leaves)."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: jsonable(tree)}


def flat_config(config: Any) -> dict[str, Any]:
    from megatron.bridge.training.utils.omegaconf_utils import create_omegaconf_dict_config
    from omegaconf import OmegaConf

    omega, _ = create_omegaconf_dict_config(config)
    return flatten(OmegaConf.to_container(omega, resolve=False))


def cases() -> list[tuple[str, str, str, str]]:
    """(model, gpu, precision, optimizer) for every NVIDIA workload config that exists."""
    from utils.utils import get_workload_base_config

    found = []
    for model, (family, recipe) in FAMILIES.items():
        if not model_recipes(model):
            continue  # a catalog model without a recipe of ours (Llama 3): nothing composes from its preset
        for gpu in GPUS_PER_NODE:
            for precision, dtype in COMPUTE_DTYPES.items():
                try:
                    get_workload_base_config(family, recipe, gpu, dtype.upper(), "pretrain", "v2")
                except ValueError:
                    continue
                for optimizer in OPTIMIZERS.get(model, ("adam",)):
                    found.append((model, gpu, precision, optimizer))
    return found


class Capture:
    """Stands in for ``nemo_run.run``: dry-runs the experiment, keeping its files."""

    def __init__(self, base: Path):
        self.base = base
        self.result: dict[str, Any] = {}

    def __call__(self, script, executor=None, plugins=None, dryrun=False, name=None, **_: Any) -> None:
        import nemo_run as run

        with run.Experiment(
            name,
            executor=executor,
            base_dir=str(self.base),
            log_level="ERROR",
            enable_goodbye_message=False,
            skip_status_at_exit=True,
        ) as experiment:
            experiment.add(script, plugins=plugins or [], name=name)
            experiment.dryrun(log=False, exist_ok=True, delete_exp_dir=False)
            job = experiment.jobs[0]
        folder = Path(job.executor.experiment_dir)
        sbatch = next(folder.rglob("*_sbatch.sh"), None)
        task = next(folder.rglob("scripts/*.sh"), None)
        self.result = {
            "script_args": list(job.task.args),
            "env": dict(job.executor.env_vars),
            "segment": job.executor.segment,
            "pre_cmds": job.executor.launcher.template_vars.get("pre_cmds"),
            "srun_args": list(job.executor.srun_args or []),
            "sbatch": sbatch.read_text() if sbatch else None,
            "task": task.read_text() if task else None,
        }


def launcher_argv(model: str, gpu: str, precision: str, optimizer: str, num_gpus: int) -> list[str]:
    placeholders = ("account", "partition", "log_dir", "image")
    launcher = [arg for flag, name in zip(("-a", "-p", "-l", "-i"), placeholders) for arg in (flag, PLACEHOLDERS[name])]
    return case_args(model, gpu, precision, optimizer, num_gpus, GPUS_PER_NODE[gpu], (*launcher, "--dryrun"))


def render_job(scripts: Path, argv: list[str], base: Path) -> dict[str, Any]:
    """What setup_experiment.py renders for ``argv`` (its module state reset first: it mutates a global dict)."""
    import runpy

    import nemo_run
    import utils.executors as executors
    import wandb.util

    if not hasattr(wandb.util, "generate_id"):  # newer wandb moved it; the id is dropped anyway (DROPPED_ENV)
        wandb.util.generate_id = lambda *args, **kwargs: "RUNID"

    shared = getattr(executors, "PERF_ENV_VARS", None)  # a module-level dict up to 0.5 (0.6: the recipe's env_vars)
    pristine = copy.deepcopy(shared)
    capture = Capture(base)
    saved_argv, saved_run = sys.argv, nemo_run.run
    sys.argv, nemo_run.run = [str(scripts / "setup_experiment.py"), *argv], capture
    try:
        runpy.run_path(str(scripts / "setup_experiment.py"), run_name="__main__")
    finally:
        sys.argv, nemo_run.run = saved_argv, saved_run
        if shared is not None:
            shared.clear()
            shared.update(pristine)
    return capture.result


LAUNCHER_TRAINS_MUON = (
    "NVIDIA's run_script.py of this release finds Kimi K2's flat perf recipe by name and never applies "
    "--optimizer_type adam: its documented Adam launch trains dist_muon. The settings here apply NVIDIA's own Adam "
    "path instead (utils.get_perf_optimized_recipe: _apply_kimi_k2_optimizer(cfg, 'adam') keeping the recipe's "
    "lr_decay_iters and lr_warmup_iters), so that the Adam twin is a real Adam run"
)


def launcher_container() -> str:
    """The NeMo container the launcher is given (--image), e.g. nemo:26.08: our side is composed for it."""
    return PLACEHOLDERS["image"].rsplit("/", 1)[-1]


def plain_recipe(model: str, precision: str, optimizer: str) -> Any:
    """Our entry point's starting point: the library recipe, the precision preset, comm_overlap created."""
    from megatron.bridge.training.comm_overlap import CommOverlapConfig
    from megatron.bridge.training.mixed_precision import get_mixed_precision_config

    from optbench.releases import versions
    from optbench.engine.bridge.adapter import bridge_recipe_for
    from optbench.engine.bridge.entry import accepted_kwargs

    recipe = bridge_recipe_for(model, optimizer, versions.containers()[launcher_container()])
    module = __import__(recipe.module, fromlist=[recipe.function])
    function = getattr(module, recipe.function)
    config = function(**accepted_kwargs(function, recipe.kwargs))
    config.mixed_precision = get_mixed_precision_config(MIXED_PRECISION_PRESETS[precision])
    if config.comm_overlap is None:
        config.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)
    return config


def model_recipes(model: str) -> list[str]:
    """The model's cluster recipes whose fields our adapter sets: ``<model>_muon`` and ``<model>_adamw``, where
    there are (a catalog model may have none: its rows are data, not projected)."""
    from optbench.compose.recipe import list_recipes

    return [name for name in (f"{model}_muon", f"{model}_adamw") if name in list_recipes()]


def adapter_keys(model: str) -> set[str]:
    """Every field our adapter sets for the model's cluster recipes (both intents) in the container the launcher is
    given (field names differ per release: muon_use_nesterov up to Core 0.17), with no preset loaded."""
    from optbench.engine.bridge import adapter
    from optbench.releases import presets
    from optbench.compose.recipe import compose_run

    keys = (
        set(presets.TRAIN_SETTINGS)
        | set(presets.TRAIN_EVAL_DEFAULTS)
        | {"logger.timing_log_level", "optimizer.barrier_with_L1_time"}
    )
    saved = presets.load
    presets.load = lambda release=presets.RELEASE: {"presets": {}, "provenance": {}}
    try:
        for recipe in model_recipes(model):
            run = compose_run(recipe, ["intent=train", f"cluster.container={launcher_container()}", f"run_id={recipe}"])
            keys |= {key for key, _ in adapter.override_items(run)}
    finally:
        presets.load = saved
    return keys


def effective(config: Any, world_size: int) -> dict[str, Any]:
    from optbench.engine.bridge.cpu_check.runtime import update_at

    update_at(config, world_size)
    return flat_config(config)


def numa(pre_cmds: str) -> dict[str, Any]:
    match = re.search(r"numactl (.*)$", pre_cmds or "")
    return {"command": match.group(0) if match else None}


def extract(scripts: Path, release: str, commit: str, out: Path, fixtures: Path) -> None:
    from importlib.metadata import version

    from optbench.engine.bridge.cpu_check import hf_cache
    from optbench.engine.bridge.cpu_check import (
        stand_ins,
    )  # before NVIDIA's configs: they import their recipe builders only when Bridge imports

    from utils.utils import get_workload_base_config

    hf_cache.use(tempfile.mkdtemp(prefix="hf-"))
    presets: dict[str, Any] = {}
    keys_by_model: dict[str, set[str]] = {}
    for model, gpu, precision, optimizer in cases():
        key = f"{model}/{gpu}/{precision}/{optimizer}"
        family, recipe_name = FAMILIES[model]
        base = get_workload_base_config(family, recipe_name, gpu, COMPUTE_DTYPES[precision].upper(), "pretrain", "v2")
        print(f"{key}: {base.num_gpus} GPUs", file=sys.stderr)
        stand_ins.install(gpu)
        with tempfile.TemporaryDirectory() as tmp:
            job = render_job(scripts, launcher_argv(model, gpu, precision, optimizer, base.num_gpus), Path(tmp))
        config, plugin_overrides = nvidia_config(job["script_args"])
        config, launcher_optimizer = as_case(config, optimizer)
        nvidia = flat_config(config)
        plain = flat_config(plain_recipe(model, precision, optimizer))
        settings = {k: v for k, v in nvidia.items() if k not in plain or plain[k] != v}
        keys = keys_by_model.setdefault(model, adapter_keys(model))
        recipe_values = {k: plain[k] for k in sorted(keys) if k in plain and k not in settings}
        env = {k: v for k, v in job["env"].items() if k not in DROPPED_ENV}
        if (scripts / "bootstrap.py").is_file():  # Bridge >= 0.6: bootstrap.py exports the recipe's env_vars as
            env = {**{k: str(v) for k, v in (config.env_vars or {}).items()}, **env}  # defaults (setdefault)
        presets[key] = {
            "num_gpus": base.num_gpus,
            "gpus_per_node": GPUS_PER_NODE[gpu],
            "launcher_args": launcher_argv(model, gpu, precision, optimizer, base.num_gpus),
            "plugin_overrides": plugin_overrides,
            "settings": dict(sorted(settings.items())),
            "recipe_values": recipe_values,
            "job": {
                "env": env,
                "segment": job["segment"],
                "numa": numa(job["pre_cmds"]),
                "srun_args": job["srun_args"],
            },
        }
        if launcher_optimizer != config.optimizer.optimizer:
            presets[key]["launcher_optimizer"] = launcher_optimizer
            presets[key]["note"] = LAUNCHER_TRAINS_MUON
        if key in FIXTURE_CASES:
            folder = fixtures / key.replace("/", "__")
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "sbatch.sh").write_text(job["sbatch"] or "")
            (folder / "task.sh").write_text(job["task"] or "")
            (folder / "effective.json").write_text(
                json.dumps(effective(config, base.num_gpus), indent=1, sort_keys=True) + "\n"
            )
    document = {
        "provenance": {
            "source": "NVIDIA-NeMo/Megatron-Bridge scripts/performance (setup_experiment.py, run_script.py, "
            "utils/overrides.py, utils/executors.py, perf_plugins.py, configs/)",
            "release": release,
            "commit": commit,
            "megatron_core": version("megatron-core"),
            "transformers": version("transformers"),
            "extracted_by": "tools/nvidia_presets.py (NeMo-Run dry run + run_script.py's config code, CPU stand-ins)",
            "placeholders": PLACEHOLDERS,
            "recipe_values": "the library recipe's value of every other field our adapter sets",
            "settings": "fields where NVIDIA's ConfigContainer (as run_script.py passes it to pretrain) differs from "
            "the library recipe + mixed-precision preset our entry point starts from",
        },
        "presets": presets,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {out} ({len(presets)} presets)", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripts", type=Path, required=True, help="scripts/performance of the release")
    parser.add_argument("--release", default="0.3.1")
    parser.add_argument("--commit", default="9c9dd848966322fc3ed7706747ec13219ef49dda")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--fixtures", type=Path, help="default: tests/fixtures/nvidia/<release>")
    parser.add_argument("--image", default=PLACEHOLDERS["image"], help="the container image the launcher is given")
    args = parser.parse_args()
    PLACEHOLDERS["image"] = args.image
    scripts = args.scripts.resolve()
    sys.path.insert(0, str(scripts))
    os.chdir(scripts)
    out = args.out or ROOT / "src" / "optbench" / "data" / "bridge" / f"presets-{args.release}.json"
    extract(
        scripts, args.release, args.commit, out, args.fixtures or ROOT / "tests" / "fixtures" / "nvidia" / args.release
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
