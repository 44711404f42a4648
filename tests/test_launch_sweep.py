"""make sweep: Hydra's sweep syntax expanded, every point validated, valid points planned and rendered as one
experiment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_launch_slurm import ACCOUNT, launch

from launch.sweep import expand_overrides, plan_sweep, point_name
from optbench.common.errors import UserError

pytestmark = pytest.mark.slow  # renders sweeps through NeMo-Run; `make test-fast` skips it


def test_expansion_is_the_cartesian_product_in_typed_order() -> None:
    fixed, points = expand_overrides(["parallel.ep=32,64", "dryrun=true", "parallel.pp=4,8"])
    assert fixed == ["dryrun=true"]
    assert points == [
        ["parallel.ep=32", "parallel.pp=4"],
        ["parallel.ep=32", "parallel.pp=8"],
        ["parallel.ep=64", "parallel.pp=4"],
        ["parallel.ep=64", "parallel.pp=8"],
    ]


def test_range_and_choice_sweeps() -> None:
    _, points = expand_overrides(["train.mbs=range(1,4)", "optimizer=choice(adamw,muon)"])
    assert len(points) == 6 and points[0] == ["train.mbs=1", "optimizer=adamw"]


def test_nothing_to_sweep_is_one_line() -> None:
    with pytest.raises(UserError, match="nothing to sweep"):
        expand_overrides(["parallel.ep=32"])


def test_point_names_are_short_and_path_safe() -> None:
    assert point_name(["parallel.ep=32", "parallel.pp=4"]) == "ep32-pp4"
    assert point_name(["cluster=gb200_nvl72", "logger.wandb_group=a b/c"]) == "cluster-gb200_nvl72-wandb_group-a_b_c"


def test_invalid_points_keep_their_reason_and_valid_points_their_plan(tmp_path: Path) -> None:
    points = plan_sweep("kimi_k2_muon", ["parallel.ep=32,64", "parallel.pp=4,8", f"results_dir={tmp_path}"])
    by_name = {p.name: p for p in points}
    assert list(by_name) == ["ep32-pp4", "ep32-pp8", "ep64-pp4", "ep64-pp8"]
    assert by_name["ep64-pp4"].valid and by_name["ep64-pp4"].plan.layout.ep == 64
    # pp=8 without a typed layout: the recipe's 16-stage layout is rebalanced over 8*4 = 32 stages.
    assert by_name["ep32-pp8"].valid and len(by_name["ep32-pp8"].plan.pipeline_stage_layers) == 32
    assert any("ep*etp = 64*1 must divide" in line for line in by_name["ep64-pp8"].problems)
    assert not by_name["ep64-pp8"].valid and all(line.startswith("error: ") for line in by_name["ep64-pp8"].problems)
    # Each point is its own run: distinct run ids that the Bridge overrides name.
    plan = by_name["ep64-pp4"].plan
    assert plan.config["run_id"].endswith("-ep64-pp4")
    assert f"logger.wandb_exp_name={plan.config['run_id']}" in plan.bridge.overrides


def test_sweep_dry_run_renders_every_valid_point_in_one_experiment(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setenv("SBATCH_ACCOUNT", ACCOUNT)
    code, out, err = launch(
        capsys,
        "sweep",
        "qwen3_30b_a3b_muon",
        "train.mbs=4,8",
        "parallel.ep=8,16",
        "dryrun=true",
        f"results_dir={tmp_path}",
    )
    assert code == 0, err
    assert "4 points, 2 valid" in out
    progress = [line for line in out.splitlines() if "planning point" in line]  # a long sweep says where it is
    assert progress == [f"  planning point {n} of 4" for n in (1, 2, 3, 4)]
    assert "invalid  mbs4-ep16  error: parallel.ep: ep*etp = 16*1 must divide" in out
    folder = tmp_path / "plans" / "qwen3_30b_a3b_muon" / "sweep"
    summary = json.loads((folder / "sweep.json").read_text())
    valid = [p for p in summary["points"] if p["valid"]]
    assert [p["name"] for p in valid] == ["mbs4-ep8", "mbs8-ep8"]
    experiments = set()
    for point in valid:
        plan = json.loads((folder / point["name"] / "plan.json").read_text())
        assert plan["mbs"] == int(point["name"][3]) and plan["launch"]["job_script"] == str(
            folder / point["name"] / "sbatch.sh"
        )
        assert (folder / point["name"] / "config.yaml").is_file()
        script = (folder / point["name"] / "sbatch.sh").read_text()
        assert "#SBATCH --nodes=2\n" in script
        tasks = Path(plan["launch"]["nemo_run_script"]).parent.rglob("scripts/*.sh")  # srun runs these per task
        assert any(str(folder / point["name"] / "config.yaml") in task.read_text() for task in tasks)
        experiments.add(Path(plan["launch"]["nemo_run_script"]).parent)
    assert len(experiments) == 1  # one NeMo-Run experiment holds both jobs
    assert ACCOUNT not in "".join(p.read_text(errors="ignore") for p in tmp_path.rglob("*") if p.is_file())


def test_a_sweep_with_no_valid_point_fails_in_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setenv("SBATCH_ACCOUNT", ACCOUNT)
    code, out, err = launch(
        capsys, "sweep", "kimi_k2_muon", "parallel.pp=8,16", "dryrun=true", f"results_dir={tmp_path}"
    )
    assert code == 2 and "2 points, 0 valid" in out
    assert err.strip() == "error: sweep: none of the 2 points is valid; see the reasons above"


def test_a_sweep_says_each_note_once(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.delenv("SBATCH_ACCOUNT", raising=False)
    code, _, err = launch(
        capsys,
        "sweep",
        "qwen3_30b_a3b_muon",
        "train.mbs=4,8",
        "cluster.account=null",
        "dryrun=true",
        f"results_dir={tmp_path}",
    )
    assert code == 0, err
    assert err.count("note: cluster.account: not set") == 1  # two points, one note
