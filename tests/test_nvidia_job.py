"""Our rendered Slurm job against the one NVIDIA's scripts/performance launcher renders for the same run.

The reference renderings under tests/fixtures/nvidia/<preset>/ (sbatch.sh and the per-task task.sh) were
written by tools/nvidia_presets.py, which runs NVIDIA's setup_experiment.py (Megatron Bridge 0.3.1) in
dry run with placeholders for the account, partition and log folder. Both scripts are parsed into
#SBATCH directives, exported variables, srun options and the task's command; every difference must be
in DOCUMENTED, with its reason.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from launch.jobs import numa_binding, numa_rule, segment_size
from optbench.catalog.hardware import gpu_spec
from optbench.config.layout import derive_layout
from optbench.releases import versions
from optbench.releases.presets import find_preset, load, unheld_reason
from optbench.compose.recipe import compose_run

pytestmark = (
    pytest.mark.slow
)  # renders NVIDIA's own job and ours for every preset of every release; `make test-fast` skips it

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia"
CONTAINERS = {c.bridge: c.name for c in versions.runnable()}
"""Bridge release -> its container: NVIDIA's renderings are kept per release (tests/fixtures/nvidia/<release>/)."""
CASES = {
    "kimi_k2_muon": "kimi_k2__gb300__mxfp8__muon",
    "kimi_k2_adamw": "kimi_k2__gb300__mxfp8__adam",
    "qwen3_30b_a3b_adamw": "qwen3_30b_a3b__gb300__mxfp8__adam",
    "deepseek_v3_adamw": "deepseek_v3__gb300__mxfp8__adam",
}

DOCUMENTED = {
    "sbatch.account": "never rendered: sbatch reads SBATCH_ACCOUNT from the submitting shell (no secret in files)",
    "sbatch.job-name": "optbench-<run id> (NVIDIA: <account>-<account>.<experiment>)",
    "sbatch.output": "log path in our plan folder",
    "sbatch.partition": "cluster.partition (NVIDIA's rendering used a placeholder)",
    "srun.--container-image": "nvcr.io/nvidia/<cluster.container> (default nemo:26.02.01, the container of "
    "Bridge 0.3.1; the fixture was rendered with a nemo:26.02 placeholder)",
    "sbatch.time": "cluster.time (NVIDIA's default 00:30:00 is for 50 iterations)",
    "sbatch.gpus-per-node": "ours asks for the GPUs explicitly (NVIDIA passes --gres only when given)",
    "export.WANDB_RUN_ID": "ours is the run id; NVIDIA's a random id per launch",
    "export.WANDB_RESUME": "NVIDIA's launcher sets it for every launch; ours only with resume=true",
    "export.WANDB_MODE": "ours: logger.wandb_mode",
    "export.WANDB_RUN_GROUP": "ours: wandb group <model>-<gpu>-<precision>",
    "export.WANDB_TAGS": "ours: wandb tags",
    "export.WANDB_JOB_TYPE": "ours: wandb job type",
    "export.PYTHONPATH": "NVIDIA's scripts folder; our entry point runs by path from the mounted checkout",
    "srun.--output": "log path in our plan folder",
    "srun.--container-mounts": "ours mounts the checkout and the results folder at the same paths",
    "srun.--container-env": "ours names every variable so that it wins over a same-named one baked into the image",
    "task.wrapper": "NVIDIA wraps the command in bash -c '...'; ours runs it directly (a quoted argument could close "
    "those single quotes); the NUMA binding and the environment are the same",
    "task.command": "ours runs optbench's entry point on the resolved config; NVIDIA runs run_script.py with its flags",
    "task.prefix": "Bridge >= 0.4: NVIDIA's task first runs the container's print_sha.sh (its repo commits into "
    "/nemo_run/configs); ours records the Megatron versions in the run's summary",
}


def parse_job(sbatch: str, task: str) -> dict[str, str]:
    """Flat view of a job: sbatch.<option>, export.<NAME>, srun.<option>, task.numa, task.command, task.wrapper."""
    out: dict[str, str] = {}
    for line in sbatch.splitlines():
        if m := re.match(r"#SBATCH --([\w-]+)(?:=(.*))?$", line.strip()):
            out[f"sbatch.{m.group(1)}"] = m.group(2) or ""
        elif m := re.match(r"export (\w+)=(.*)$", line.strip()):
            out[f"export.{m.group(1)}"] = m.group(2)
        elif line.startswith("srun ") and "--container-image" in line:
            words = shlex.split(line.replace("${SLURM_RESTART_COUNT:-0}", "RESTART"))[1:]
            index = 0
            while index < len(words) and words[index].startswith("--"):
                option = words[index]
                if "=" in option:
                    name, value = option.split("=", 1)
                    index += 1
                elif index + 1 < len(words) and not words[index + 1].startswith("--"):
                    name, value = option, words[index + 1]
                    index += 2
                else:
                    name, value = option, ""
                    index += 1
                out[f"srun.{name}"] = value
            out["srun.command"] = re.sub(
                r"/nemo_run/scripts/\S+\.sh$", "/nemo_run/scripts/<task>.sh", " ".join(words[index:])
            )
    body = [line for line in task.splitlines() if line.strip() and not line.startswith("#") and "set -euo" not in line]
    command = body[-1]
    out["task.wrapper"] = "bash -c" if command.startswith("bash -c") else "none"
    command = command.removeprefix("bash -c ").strip("'")
    prefix, _, rest = command.rpartition(" ; ")  # Bridge >= 0.4: print_sha.sh prints the container's repo SHAs first
    out["task.prefix"], command = prefix, rest
    numa = re.match(r"(numactl(?: --\S+)+(?: -C \S+)?) (.*)$", command)
    out["task.numa"] = numa.group(1) if numa else ""
    out["task.command"] = numa.group(2) if numa else command
    return out


def ours(tmp_path: Path, recipe: str, container: str = "nemo:26.02.01") -> dict[str, str]:
    from optbench.__main__ import main

    assert (
        main(
            [
                "pretrain",
                recipe,
                "dryrun=true",
                f"results_dir={tmp_path}",
                "run_id=job-test",
                f"cluster.container={container}",
            ]
        )
        == 0
    )
    folder = tmp_path / "plans" / recipe
    task = next((folder / "nemo_run").rglob("scripts/*.sh"))
    return parse_job((folder / "sbatch.sh").read_text(), task.read_text())


JOB_CASES = [
    (release, recipe)
    for release in CONTAINERS
    for recipe in sorted(CASES)
    if (FIXTURES / release / CASES[recipe]).is_dir()
]


@pytest.mark.parametrize(("release", "recipe"), JOB_CASES, ids=[f"{r}-{c}" for r, c in JOB_CASES])
def test_rendered_job_matches_nvidia_up_to_the_documented_list(tmp_path: Path, release: str, recipe: str) -> None:
    fixture = FIXTURES / release / CASES[recipe]
    nvidia = parse_job((fixture / "sbatch.sh").read_text(), (fixture / "task.sh").read_text())
    # Bridge >= 0.6: NVIDIA's bootstrap.py exports the recipe's env_vars inside the task (setdefault), not the sbatch
    # script; the preset records that effective environment, which ours exports in the script.
    env = load(release)["presets"][CASES[recipe].replace("__", "/")]["job"]["env"]
    nvidia.update({f"export.{k}": v for k, v in env.items() if f"export.{k}" not in nvidia})
    mine = ours(tmp_path, recipe, CONTAINERS[release])
    differing = {key for key in set(mine) | set(nvidia) if mine.get(key) != nvidia.get(key)}
    assert differing - set(DOCUMENTED) == set(), {k: (mine.get(k), nvidia.get(k)) for k in differing - set(DOCUMENTED)}
    # What the issue names must be there, equal to NVIDIA's.
    for key in (
        "sbatch.segment",
        "task.numa",
        "export.CUDA_DEVICE_MAX_CONNECTIONS",
        "export.NCCL_NVLS_ENABLE",
        "export.TORCH_NCCL_AVOID_RECORD_STREAMS",
        "export.TORCH_NCCL_HIGH_PRIORITY",
        "export.NVTE_FWD_LAYERNORM_SM_MARGIN",
    ):
        assert mine[key] == nvidia[key], key


def test_parser_sees_a_difference_that_is_not_documented(tmp_path: Path) -> None:
    """Negative control: a changed NUMA binding or a dropped variable is caught."""
    fixture = FIXTURES / "0.3.1" / CASES["kimi_k2_muon"]
    sbatch, task = (fixture / "sbatch.sh").read_text(), (fixture / "task.sh").read_text()
    base = parse_job(sbatch, task)
    changed = parse_job(sbatch.replace("export NCCL_NVLS_ENABLE=0\n", ""), task.replace("/2))", "/4))"))
    assert {k for k in set(base) | set(changed) if base.get(k) != changed.get(k)} == {
        "export.NCCL_NVLS_ENABLE",
        "task.numa",
    }


PRESET_CASES = [(release, key) for release in CONTAINERS for key in sorted(load(release)["presets"])]


@pytest.mark.parametrize(("release", "key"), PRESET_CASES, ids=[f"{r}-{k}" for r, k in PRESET_CASES])
def test_segment_and_numa_rules_reproduce_every_preset(release: str, key: str) -> None:
    """NVIDIA's --segment and NUMA rules, applied by us, give what its launcher rendered for every preset of every
    release."""
    model, gpu, precision, optimizer = key.split("/")
    preset = load(release)["presets"][key]
    if (why := unheld_reason(preset)) is not None:
        pytest.skip(why)
    cluster = gpu_spec(gpu).cluster_preset
    recipe = f"{model}_{'muon' if optimizer == 'muon' else 'adamw'}"
    run = compose_run(
        recipe,
        [
            f"cluster={cluster}",
            f"precision={precision}",
            f"parallel.num_gpus={preset['num_gpus']}",
            f"cluster.container={CONTAINERS[release]}",
            "intent=train",
        ],
    )
    assert segment_size(run, derive_layout(run).nodes) == preset["job"]["segment"]
    assert numa_binding(run) == preset["job"]["numa"]["command"]  # NVIDIA's rendering of the release, taken over
    if release.startswith("0.3."):  # our rule for runs without a preset is NVIDIA's 0.3 rule, exactly
        assert numa_rule(run) == preset["job"]["numa"]["command"]
    assert find_preset(run).key == key
