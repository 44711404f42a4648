"""Slurm launching with NeMo-Run: dry-run job scripts, one-line errors, shell safety, secrets, submission."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ON_0_3_1, REPO, run_cli

from optbench.__main__ import main

pytestmark = pytest.mark.slow  # renders Slurm jobs through NeMo-Run; `make test-fast` skips it

ACCOUNT = "acct-7f3e9c-secret"
WANDB_KEY = "wandb-key-0123456789abcdef"
PAYLOAD = 'x"; rm -rf / #'
ENTRY = str(REPO / "src" / "optbench" / "engine" / "bridge" / "entry.py")


def launch(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    """``python -m optbench <args>`` in this process: (exit code, stdout, stderr)."""
    try:
        code = main(list(args))
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SBATCH_ACCOUNT", ACCOUNT)
    monkeypatch.setenv("WANDB_API_KEY", WANDB_KEY)
    return ACCOUNT


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def srun_argv(script: str) -> list[str]:
    """The job's srun command line, split as bash would."""
    [line] = [line for line in script.splitlines() if line.startswith("srun --output")]
    return shlex.split(line)


def task_script(folder: Path) -> Path:
    """The per-task script NeMo-Run rendered (srun runs it as /nemo_run/scripts/<job>.sh)."""
    [path] = list((folder / "nemo_run").rglob("scripts/*.sh"))
    return path


def task_argv(folder: Path) -> list[str]:
    """The task's command line (the NUMA binding, then our entry point), split as bash would."""
    return shlex.split(task_script(folder).read_text().strip().splitlines()[-1])


def all_files_text(root: Path) -> str:
    return "\n".join(p.read_text(errors="ignore") for p in root.rglob("*") if p.is_file())


def test_kimi_k2_dry_run_renders_the_published_job(account: str, capsys, tmp_path: Path) -> None:
    results = tmp_path / "results"
    code, out, err = launch(
        capsys, "pretrain", "kimi_k2_muon", "cluster=gb300_nvl72", "dryrun=true", f"results_dir={results}", ON_0_3_1
    )
    assert code == 0, err
    folder = results / "plans" / "kimi_k2_muon"
    script = (folder / "sbatch.sh").read_text()
    assert f"job script  {folder / 'sbatch.sh'}" in out
    for flag in ("--nodes=64", "--ntasks-per-node=4", "--gpus-per-node=4", "--exclusive", "--mem=0", "--time=01:00:00"):
        assert f"#SBATCH {flag}\n" in script, flag
    for export in (
        "NVLINK_DOMAIN_SIZE=72",
        "USE_MNNVL=1",
        "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64",
        "WANDB_RUN_GROUP=kimi_k2-gb300-mxfp8",
        "WANDB_TAGS=kimi_k2,muon,gb300,mxfp8,intent-reproduce",
        "WANDB_JOB_TYPE=pretrain",
    ):
        assert f"\nexport {export}\n" in script, export
    argv = srun_argv(script)
    assert argv[argv.index("--container-image") + 1] == "nvcr.io/nvidia/nemo:26.02.01"
    assert f"{REPO}:{REPO}" in argv[argv.index("--container-mounts") + 1].split(",")
    assert {"--mpi=pmix", "--no-container-mount-home"} <= set(argv)
    assert argv[-2] == "bash" and argv[-1].startswith("/nemo_run/scripts/")
    command = task_argv(folder)
    assert command[:3] == ["numactl", "--cpunodebind=$((SLURM_LOCALID/2))", "--membind=$((SLURM_LOCALID/2))"]
    assert command[-3:] == ["python", ENTRY, str(folder / "config.yaml")]
    assert "#SBATCH --segment=16\n" in script  # 16 nodes (64 hybrid-EP ranks) in one NVL72 domain
    assert (folder / "logs").is_dir()  # Slurm does not create its --output folder

    plan = json.loads((folder / "plan.json").read_text())
    assert plan["bridge"]["recipe"]["module"] == "megatron.bridge.recipes.kimi.kimi_k2"
    assert plan["bridge"]["recipe"]["function"] == "kimi_k2_pretrain_config"
    overrides = set(plan["bridge"]["overrides"])
    assert {
        "model.tensor_model_parallel_size=1",
        "model.pipeline_model_parallel_size=4",
        "model.virtual_pipeline_model_parallel_size=4",
        "model.expert_model_parallel_size=64",
        "train.global_batch_size=4096",
        "train.micro_batch_size=2",
        "optimizer.optimizer=dist_muon",
        "optimizer.use_distributed_optimizer=false",
        "ddp.use_distributed_optimizer=false",
    } <= overrides
    assert plan["launch"]["nodes"] == 64 and plan["launch"]["job_script"] == str(folder / "sbatch.sh")

    # No secret anywhere: plans, configs, NeMo-Run's own files, the output.
    text = all_files_text(results) + out + err
    assert ACCOUNT not in text and WANDB_KEY not in text


@pytest.mark.parametrize(
    "recipe,optimizer,distributed",
    [("qwen3_30b_a3b_muon", "dist_muon", "false"), ("qwen3_30b_a3b_adamw", "adam", "true")],
)
def test_qwen3_dry_run(recipe: str, optimizer: str, distributed: str, account: str, capsys, tmp_path: Path) -> None:
    code, out, err = launch(
        capsys, "pretrain", recipe, "cluster=gb300_nvl72", "dryrun=true", f"results_dir={tmp_path}", ON_0_3_1
    )
    assert code == 0, err
    script = (tmp_path / "plans" / recipe / "sbatch.sh").read_text()
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --ntasks-per-node=4\n" in script
    assert "\nexport NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8\n" in script
    overrides = set(json.loads((tmp_path / "plans" / recipe / "plan.json").read_text())["bridge"]["overrides"])
    assert {
        "model.expert_model_parallel_size=8",
        "train.global_batch_size=512",
        "train.micro_batch_size=8",
        f"optimizer.optimizer={optimizer}",
        f"ddp.use_distributed_optimizer={distributed}",
    } <= overrides


# ---------------------------------------------------------------------------------------------
# Bad input: one line each, exit code 2
# ---------------------------------------------------------------------------------------------


def test_unknown_cluster(account: str, capsys) -> None:
    code, _, err = launch(capsys, "pretrain", "kimi_k2_muon", "cluster=gb400_nvl72", "dryrun=true")
    assert code == 2 and error_line(err).startswith("error: cluster: no option 'gb400_nvl72'")


def test_missing_account_stops_a_submission(monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path) -> None:
    monkeypatch.delenv("SBATCH_ACCOUNT", raising=False)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text("#!/bin/sh\necho should-not-run >&2\nexit 1\n")
    (fake / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    code, _, err = launch(
        capsys, "pretrain", "kimi_k2_muon", "cluster.account=null", f"results_dir={tmp_path / 'results'}"
    )
    assert code == 2 and error_line(err).startswith("error: cluster.account: no Slurm account for gb300_nvl72")
    assert "should-not-run" not in err


def test_dry_run_needs_no_account_and_says_so(monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path) -> None:
    monkeypatch.delenv("SBATCH_ACCOUNT", raising=False)
    code, _, err = launch(
        capsys, "pretrain", "kimi_k2_muon", "cluster.account=null", "dryrun=true", f"results_dir={tmp_path}"
    )
    assert code == 0, err
    assert "note: cluster.account: not set" in err
    assert (tmp_path / "plans" / "kimi_k2_muon" / "sbatch.sh").is_file()


def test_no_container_image(account: str, capsys, tmp_path: Path) -> None:
    code, _, err = launch(
        capsys,
        "pretrain",
        "qwen3_30b_a3b_muon",
        "cluster.container_image=null",
        "dryrun=true",
        f"results_dir={tmp_path}",
    )
    assert code == 2 and error_line(err).startswith("error: cluster.container_image:")


def test_no_sbatch_prints_the_plan_then_one_line(
    account: str, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without sbatch
    code, out, err = launch(capsys, "pretrain", "kimi_k2_muon", f"results_dir={tmp_path}")
    assert code == 2 and "Plan: kimi_k2_muon" in out
    line = error_line(err)
    assert line.startswith("error: cluster: no sbatch on PATH") and "dryrun=true" in line
    assert not (tmp_path / "runs").exists()


def test_credentials_in_cluster_env_are_refused(account: str, capsys, tmp_path: Path) -> None:
    code, _, err = launch(
        capsys, "pretrain", "kimi_k2_muon", "+cluster.env.HF_TOKEN=hf_abc", "dryrun=true", f"results_dir={tmp_path}"
    )
    assert code == 2 and error_line(err).startswith("error: cluster.env.HF_TOKEN: looks like a credential")


# ---------------------------------------------------------------------------------------------
# Shell safety: values from overrides are quoted; the script runs nothing but the job
# ---------------------------------------------------------------------------------------------

FAKE_SRUN = """#!/bin/bash
shopt -s nullglob
calls=("$LOG_DIR"/srun.*)
printf '%s\\0' "$@" > "$LOG_DIR/srun.${#calls[@]}"
printf '%s' "$WANDB_RUN_GROUP" > "$LOG_DIR/group.txt"
printf '%s' "$EXTRA" > "$LOG_DIR/extra.txt"
"""


def _fake_bin(folder: Path) -> Path:
    bin_dir = folder / "fakebin"
    bin_dir.mkdir()
    scripts = {
        "srun": FAKE_SRUN,
        "scontrol": "#!/bin/bash\necho node1\n",
        **{
            name: '#!/bin/bash\necho "$0 $*" >> "$LOG_DIR/unexpected.txt"\n' for name in ("rm", "python", "touch", "sh")
        },
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    return bin_dir


def test_injected_override_values_reach_the_job_verbatim_and_run_nothing(account: str, capsys, tmp_path: Path) -> None:
    quoted = "'" + PAYLOAD + "'"
    # Slurm names and wandb names have a domain the payload is outside of: refused before anything is written.
    for field in ("cluster.partition", "logger.wandb_group"):
        code, _, err = launch(
            capsys,
            "pretrain",
            "kimi_k2_muon",
            "dryrun=true",
            f"results_dir={tmp_path / 'results'}",
            f"{field}={quoted}",
        )
        assert code == 2 and error_line(err).startswith(f"error: {field}: "), err
        assert not (tmp_path / "results" / "plans").exists()
    # Free text (job variables, srun arguments, mounts) reaches the job verbatim and runs nothing.
    code, _, err = launch(
        capsys,
        "pretrain",
        "kimi_k2_muon",
        "dryrun=true",
        f"results_dir={tmp_path / 'results'}",
        "cluster.partition='batch,gpu'",
        f"+cluster.env.EXTRA={quoted}",
        f"cluster.srun_args=['--mpi=pmix',{quoted}]",
        f"cluster.container_mounts=[{quoted}]",
    )
    assert code == 0, err
    path = tmp_path / "results" / "plans" / "kimi_k2_muon" / "sbatch.sh"
    script = path.read_text()
    assert subprocess.run(["/bin/bash", "-n", str(path)]).returncode == 0
    [partition] = [line for line in script.splitlines() if line.startswith("#SBATCH --partition")]
    assert shlex.split(partition.removeprefix("#SBATCH ")) == ["--partition=batch,gpu"]
    argv = srun_argv(script)
    assert PAYLOAD in argv and argv[-2] == "bash"
    assert PAYLOAD in argv[argv.index("--container-mounts") + 1].split(",")

    # Run the script with fake Slurm tools: only srun may run, twice (head-node IP, then the job).
    logs = tmp_path / "logs"
    logs.mkdir()
    env = {"PATH": str(_fake_bin(tmp_path)), "HOME": str(tmp_path), "LOG_DIR": str(logs), "SLURM_JOB_NODELIST": "node1"}
    done = subprocess.run(["/bin/bash", str(path)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not (logs / "unexpected.txt").exists()
    calls = [(logs / f"srun.{n}").read_text().split("\0")[:-1] for n in range(len(list(logs.glob("srun.*"))))]
    assert len(calls) == 2 and calls[0][-2:] == ["hostname", "--ip-address"]
    assert calls[1][-2] == "bash" and PAYLOAD in calls[1]
    assert (logs / "extra.txt").read_text() == PAYLOAD
    # Each task runs NVIDIA's NUMA binding, then our entry point: with a fake numactl, for local rank 3.
    folder = tmp_path / "results" / "plans" / "kimi_k2_muon"
    numactl = tmp_path / "fakebin" / "numactl"
    numactl.write_text('#!/bin/bash\nprintf "%s\\0" "$@" > "$LOG_DIR/numactl"\n')
    numactl.chmod(0o755)
    done = subprocess.run(
        ["/bin/bash", str(task_script(folder))],
        env={**env, "SLURM_LOCALID": "3"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (logs / "numactl").read_text().split("\0")[:-1] == [
        "--cpunodebind=1",
        "--membind=1",
        "python",
        ENTRY,
        str(folder / "config.yaml"),
    ]


def test_control_characters_cannot_reach_the_script(account: str, capsys, tmp_path: Path) -> None:
    code, _, err = launch(
        capsys,
        "pretrain",
        "kimi_k2_muon",
        "dryrun=true",
        f"results_dir={tmp_path}",
        "cluster.time='01:00:00\nrm -rf /'",
    )  # a real newline would end the #SBATCH comment
    assert code == 2 and error_line(err).startswith(
        "error: cluster.time: must be one line without control characters"
    ), err


# ---------------------------------------------------------------------------------------------
# Submission, with a fake sbatch
# ---------------------------------------------------------------------------------------------


def test_submission_passes_the_account_only_through_sbatchs_environment(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text(
        '#!/bin/bash\n{ echo "ACCOUNT=$SBATCH_ACCOUNT"; echo "ARGS=$*"; } >> "$LOG_FILE"\necho 4242\n'
    )
    (fake / "sbatch").chmod(0o755)
    log, results, home = tmp_path / "sbatch.log", tmp_path / "results", tmp_path / "nemo_run_home"
    env = {k: v for k, v in os.environ.items() if k != "SBATCH_ACCOUNT"}
    env |= {
        "PATH": f"{fake}:{os.environ['PATH']}",
        "LOG_FILE": str(log),
        "NEMORUN_HOME": str(home),
        "WANDB_API_KEY": WANDB_KEY,
    }
    args = [
        "pretrain",
        "qwen3_30b_a3b_adamw",
        f"results_dir={results}",
        "run_id=submit-test",
        f"cluster.account={ACCOUNT}",
    ]
    done = run_cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    assert "submitted as Slurm job 4242" in done.stdout
    calls = log.read_text()
    assert f"ACCOUNT={ACCOUNT}" in calls and str(results / "runs" / "submit-test" / "nemo_run") in calls
    folder = results / "runs" / "submit-test"
    assert {"config.yaml", "plan.json", "sbatch.sh", "logs", "nemo_run"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "plan.json").read_text())["launch"]["job_ids"] == ["4242"]
    text = all_files_text(results) + all_files_text(home) + done.stdout + done.stderr
    assert ACCOUNT not in text and WANDB_KEY not in text

    again = run_cli(*args, env=env)
    assert again.returncode == 2 and error_line(again.stderr).startswith(
        "error: run_id: submit-test was already submitted"
    )
    assert sys.executable  # the CLI ran under this interpreter (conftest.run_cli)
