"""make gpu-smoke (issue 55): what of it needs no GPU, on the CPU.

* the arms compose, validate and plan through the cluster path (their job folders as the launcher writes them);
* the worker builds each arm's ConfigContainer with the newest container's real Bridge and Core, with the
  no-Transformer-Engine changes, through ``runtime_config_update``, with Megatron Core seeing no Transformer Engine,
  and stops only where the GPU is needed;
* the committed result page is the rendering of its JSON, and make table reads the committed runs.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import REPO
from optbench.__main__ import main as optbench_main
from optbench.experiments.one_gpu import arms, no_te, page
from optbench.common.errors import UserError


def test_the_gpu_torch_names_maps_to_our_cluster_and_an_unknown_one_is_one_line():
    assert arms.cluster_of("NVIDIA H200") == "h200"
    assert arms.cluster_of("NVIDIA H100 80GB HBM3") == "h100"
    with pytest.raises(UserError, match="no cluster config"):
        arms.cluster_of("NVIDIA GeForce RTX 4090")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    results = tmp_path_factory.mktemp("smoke") / "results"
    extra = [f"results_dir={results}"]
    return {o: arms.prepare(o, "core", "h200", 4, "test", extra).folder for o in ("muon", "adamw")}


def test_each_arm_is_planned_as_a_cluster_job_of_the_newest_container(folders):
    for optimizer, folder in folders.items():
        plan = json.loads((folder / "plan.json").read_text())
        assert (folder / "config.yaml").is_file()
        assert plan["engine"] == "megatron_bridge" and plan["gpu"] == "h200" and plan["world_size"] == 1
        assert plan["bridge"]["recipe"]["function"].startswith(
            "qwen3_30b_a3b"
        )  # the proxy starts from its model's recipe
        overrides = plan["bridge"]["overrides"]
        assert "model.num_moe_experts=32" in overrides and "model.hidden_size=1024" in overrides
        assert f"optimizer.optimizer={'adam' if optimizer == 'adamw' else 'muon'}" in overrides
        assert plan["projection"]["available"] and plan["projection"]["step_time_s"] > 0


def test_every_field_the_smoke_changes_is_a_field_of_the_newest_bridge():
    from optbench.releases import versions

    newest = versions.runnable()[0]
    for dotted, _, why in no_te.FIELDS:
        assert versions.has_field(newest, dotted), dotted
        assert why


def _bridge_target():
    from optbench.engine.bridge.cpu_check.environments import NEXT, targets

    return next(t for t in reversed(targets()) if t.name != NEXT["name"])


@pytest.mark.slow
def test_the_worker_builds_the_real_config_and_stops_only_at_the_gpu(folders, tmp_path):
    target = _bridge_target()
    if not target.installed:
        pytest.skip(f"make bridge-env has not built Bridge {target.bridge}")
    report = tmp_path / "report.json"
    env = {**target.environment(), "OPTBENCH_REAL_CUDA": "0", "OPTBENCH_FAKE_GPU": "h200"}
    subprocess.run(
        [
            str(target.python),
            str(REPO / "src/optbench/experiments/one_gpu/worker.py"),
            str(folders["adamw"]),
            "--loop",
            "core",
            "--report",
            str(report),
        ],
        env=env,
        check=True,
        timeout=600,
        capture_output=True,
    )
    found = json.loads(report.read_text())
    assert found["reached"] == ["config container", "runtime_config_update"], found.get("error")
    assert found["core_sees_transformer_engine"] is False and found["core_import_failures"] == []
    assert {c["field"] for c in found["changes"]} >= {"model.transformer_layer_spec", "model.moe_grouped_gemm"}
    assert found["status"] == "error" and "cuda" in found["error"].lower()  # the first thing that needs the GPU


def test_the_committed_page_is_the_rendering_of_its_json():
    folder = REPO / "results" / "bench"
    data = json.loads((folder / "megatron_one_gpu.json").read_text())
    assert page.markdown(data) == (folder / "megatron_one_gpu.md").read_text()
    done = page.finished(data)
    assert {"muon", "adamw"} <= set(done)
    for arm in done.values():
        assert arm["summary"]["final_loss"] < arm["summary"]["initial_loss"]
        assert arm["summary"]["peak"]["key"] == "h200_bf16" and arm["records"][0]["tflops_per_gpu"] > 0
    # "no Transformer Engine" is said from the versions recorded on the GPU, not written in
    assert data["smokes"][0]["versions"]["transformer-engine"] is None and ", no Transformer Engine." in page.markdown(
        data
    )
    data["smokes"][0]["versions"]["transformer-engine"] = "2.12.0"
    assert "no Transformer Engine." not in page.markdown(data)


def test_a_variant_arm_and_bridges_own_pretrain_are_listed_apart_never_in_place_of_the_plain_arms():
    data = json.loads((REPO / "results" / "bench" / "megatron_one_gpu.json").read_text())
    data["smokes"] = data["smokes"][:2]  # the first lease's: Core-loop arms only, no variant
    plain = page.finished(data)
    variant = {
        **plain["adamw"],
        "extra": ["ddp.grad_reduce_in_fp32=true"],
        "summary": {**plain["adamw"]["summary"], "step_time_s": 9.0},
    }
    bridge = [{**plain[name], "loop": "bridge"} for name in ("muon", "adamw")]
    data["smokes"].append({**data["smokes"][-1], "arms": [variant, *bridge]})
    done = page.finished(data)
    assert (
        done["adamw"] is plain["adamw"]
        and done["adamw (ddp.grad_reduce_in_fp32=true)"]["summary"]["step_time_s"] == 9.0
    )
    text = page.markdown(data)
    assert "| adamw (ddp.grad_reduce_in_fp32=true) |" in text and "9.000" in text
    assert text.count("Muon vs AdamW, model TFLOP/s per GPU") == 2  # the Core loop's pair, and Bridge's pretrain()'s
    assert "## Finished runs: Bridge's own pretrain()" in text
    data["smokes"].pop()
    assert "## Finished runs: Bridge's own pretrain()" not in page.markdown(data)


def test_the_page_never_replaces_a_file_it_did_not_write(tmp_path):
    (tmp_path / "smoke.json").write_text((REPO / "results" / "bench" / "megatron_one_gpu.json").read_text())
    (tmp_path / "smoke.md").write_text("a user's notes")
    with pytest.raises(UserError, match="not a gpu-smoke page"):
        page.write(tmp_path / "smoke.json")
    assert (tmp_path / "smoke.md").read_text() == "a user's notes"
    (tmp_path / "smoke.md").unlink()
    assert "wrote" in page.write(tmp_path / "smoke.json") and page.write(tmp_path / "smoke.json")  # its own page again


def test_make_table_sets_the_committed_smoke_runs_beside_their_plans_projection():
    from optbench.report.beside_plan import beside_plan, section
    from optbench.measured.collect import read_metrics_run

    runs = [read_metrics_run(folder) for folder in sorted((REPO / "results" / "runs").glob("gpu-smoke-*-core-*"))]
    assert {run.optimizer for run in runs} >= {"muon", "adamw"}
    assert all(run.gpu == "h200" and run.steps for run in runs)
    rows = {row.optimizer: row for row in beside_plan(runs, warmup=3)}
    assert rows["muon"].setup == rows["adamw"].setup  # the gap pairs the two runs of one setup
    for row in rows.values():
        assert row.step_s > row.projected_step_s > 0 and row.optimizer_s > 0 and row.projected_optimizer_s > 0
    text = "\n".join(section(list(rows.values())))
    gap = rows["adamw"].step_s / rows["muon"].step_s - 1  # the newest pair: one lease's two runs
    assert "Muon vs AdamW on the same setup" in text and f"| {gap:+.0%} " in text


def test_the_stand_in_model_optimizer_answers_no_distillation_as_the_real_one_does():
    """Bridge's pretrain() hands this answer to Core's no-pipeline schedule, which asserts it is None (the one-GPU
    run of 2026-11-28 stopped there while the stand-in answered with a class)."""
    import sys

    code = (
        "from optbench.engine.bridge.cpu_check import stand_ins\n"
        "from modelopt.torch.distill.plugins.megatron import get_tensor_shapes_adjust_fn_for_distillation as f\n"
        "import modelopt.torch.distill as other\n"
        "assert f([object()], seq_length=8, micro_batch_size=1) is None\n"
        "assert other.anything is not None\n"
    )  # every other name stays the generic stand-in
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        timeout=120,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin", "OPTBENCH_FAKE_GPU": "h200"},
    )


def test_every_arm_is_checked_before_the_first_trains(tmp_path, monkeypatch, capsys):
    """Issue 78 item 3: on a lent GPU a refusal after an arm trained wastes the lease. A bad --set is refused before
    any arm runs, and nothing of the run folders is written."""
    import torch

    from optbench.experiments.one_gpu import cli as smoke

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    ran = []
    monkeypatch.setattr(smoke, "run_arm", lambda arm, timeout, env=None: ran.append(arm) or {})
    out = tmp_path / "bench" / "smoke.json"
    with pytest.raises(SystemExit) as stopped:
        optbench_main(
            [
                "gpu-smoke",
                "--optimizers",
                "muon,adamw",
                f"--out={out}",
                "--set",
                f"results_dir={tmp_path / 'results'}",
                "--set",
                "optimizer.muon.momentum=0.9",
            ]
        )  # Muon's arm takes it; AdamW's, second, refuses it
    assert stopped.value.code == 2 and ran == []
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: optimizer.muon.momentum: "), line
    assert not out.exists() and not (tmp_path / "results").exists()


def test_the_worker_never_replaces_a_file_and_the_page_refuses_what_it_cannot_render(tmp_path, capsys):
    import os
    import sys

    worker = REPO / "src" / "optbench" / "experiments" / "one_gpu" / "worker.py"  # in its own process, as the
    # smoke runs it: importing it installs the CPU check's Transformer Engine stand-ins in this one
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("config.yaml", "plan.json"):
        (folder / name).write_text("{}")
    mine = tmp_path / "notes.json"
    mine.write_text("the user's")
    for report, said in (
        (mine, "exists"),
        (tmp_path / "no" / "r.json", "is not a folder"),
        (tmp_path / "r.txt", ".json"),
    ):
        done = subprocess.run(
            [sys.executable, str(worker), str(folder), "--loop", "core", "--report", str(report)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )  # Core's import warnings
        assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert mine.read_text() == "the user's"
    for damaged in (
        '{"smokes": [{"arms": [1]}]}',
        '{"smokes": []}',
        "[]",
        "{oops",
        '{"smokes": [{"arms": [{"loop": 1}]}]}',
    ):
        (tmp_path / "r.json").write_text(damaged)
        with pytest.raises(SystemExit) as stopped:
            optbench_main(["gpu-smoke-page", str(tmp_path / "r.json")])
        assert stopped.value.code == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("error: json: ") and "not a gpu-smoke result this page can render" in line
    assert not (tmp_path / "r.md").exists()


def test_the_entry_points_answer_outside_a_checkout(tmp_path):
    """Issue 78 item 7: --help built its --out default from the checkout and raised a traceback outside one."""
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("OPTBENCH_ROOT", None)
    done = subprocess.run(
        [sys.executable, "-m", "optbench", "gpu-smoke", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "--optimizers" in done.stdout and "Traceback" not in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "optbench", "table"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "is not the results/ folder of an optbench checkout" in done.stderr and "git" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # the refusal wrote nothing (it made results/ here before)
