"""The local executor: the local engine (no NeMo-Run import on that path) and Megatron Bridge under torchrun."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO
from test_launch_slurm import ENTRY, error_line, launch


def test_local_engine_dry_run_does_not_import_nemo_run(tmp_path: Path) -> None:
    code = (
        "import sys; from optbench.__main__ import main; "
        f"rc = main(['pretrain', 'kimi_k2_tiny_muon', 'dryrun=true', 'results_dir={tmp_path}']); "
        "print('heavy:', sorted(m for m in ('nemo_run', 'torch', 'megatron.core') if m in sys.modules)); sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "local engine on this machine; dry run, nothing launched" in done.stdout
    assert "heavy: []" in done.stdout
    assert not (tmp_path / "runs").exists()


def test_bridge_on_this_machine_needs_the_container(capsys, tmp_path: Path) -> None:
    code, out, err = launch(capsys, "pretrain", "qwen3_30b_a3b_muon", "cluster=local", f"results_dir={tmp_path}")
    assert code == 2 and error_line(err).startswith("error: cluster.gpu: is auto: name this machine's GPU")
    code, out, err = launch(
        capsys, "pretrain", "qwen3_30b_a3b_muon", "cluster=local", "cluster.gpu=b300", f"results_dir={tmp_path}"
    )
    assert code == 2 and "Plan: qwen3_30b_a3b_muon" in out
    line = error_line(err)
    assert line.startswith("error: cluster: engine=megatron_bridge on cluster=local needs the NeMo container")
    assert "transformer_engine" in line and "dryrun=true" in line


def test_bridge_on_this_machine_dry_run_shows_the_torchrun_command(capsys, tmp_path: Path) -> None:
    code, out, err = launch(
        capsys,
        "pretrain",
        "qwen3_30b_a3b_muon",
        "cluster=local",
        "cluster.gpu=b300",
        "dryrun=true",
        f"results_dir={tmp_path}",
    )
    assert code == 0, err
    folder = tmp_path / "plans" / "qwen3_30b_a3b_muon"
    command = ["torchrun", "--nproc-per-node=8", ENTRY, str(folder / "config.yaml")]
    assert f"command     {' '.join(command)}" in out
    plan = json.loads((folder / "plan.json").read_text())
    assert plan["launch"]["command"] == command and plan["launch"]["executor"] == "local"
    assert (folder / "config.yaml").is_file()
