"""Local engine runs end to end on a micro proxy: 2-process gloo data parallelism (layer-wise Muon and
AdamW) matching one process, kill + resume reproducing an uninterrupted run bit for bit, every metrics
and summary field, and wandb's offline run holding the summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import MICRO_KIMI, MICRO_VOCAB
from optbench.compose.recipe import compose_run
from optbench.engine.local import launch_local
from optbench.engine.local.checkpoint import LATEST, checkpoint_dir
from optbench.common.errors import UserError
from optbench.metrics import STEP_FIELDS, SUMMARY_FIELDS, offline_run_dirs, read_metrics, read_offline_run
from optbench.runs import load_resolved_config, run_dir, save_resolved_config

pytestmark = pytest.mark.slow  # trains the local engine end to end; `make test-fast` skips it

REPO = Path(__file__).resolve().parents[1]
MICRO_TRAIN = ["train.gbs=8", "train.mbs=2", "train.seq_length=32", "train.iters=4", "train.warmup_iters=1"]


def micro_train(iters: int) -> list[str]:
    """MICRO_TRAIN with another number of steps (the command line refuses a key typed twice)."""
    return [o for o in MICRO_TRAIN if not o.startswith("train.iters=")] + [f"train.iters={iters}"]


@pytest.fixture(autouse=True)
def one_thread_per_process(monkeypatch):
    """Runs here use one CPU thread per process (fast and steady on a busy 2-core machine), then restore torch's."""
    threads = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield
    torch.set_num_threads(threads)


def _run(results: Path, recipe: str, *overrides: str, logger: str = "none"):
    return compose_run(
        recipe, [*MICRO_KIMI, *MICRO_VOCAB, *MICRO_TRAIN, f"results_dir={results}", f"logger={logger}", *overrides]
    )


def _losses(directory: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(directory / "metrics.jsonl")]


@pytest.mark.parametrize(
    ("recipe", "optimizer"),
    [
        ("kimi_k2_tiny_muon", []),
        ("kimi_k2_tiny_adamw", []),
        ("kimi_k2_tiny_muon", ["optimizer=adaptive_muon", "optimizer.scalar_optimizer=lion"]),
    ],
    ids=["muon", "adamw", "adaptive_muon+lion"],
)
def test_two_gloo_processes_train_like_one(tmp_path, recipe, optimizer):
    """torchrun with 2 processes (layer-wise Muon or AdaMuon: each rank updates the parameters it owns) gives
    the losses of a single process accumulating the same global batch, up to float summation order (AdaMuon with
    Lion on an AVX512 machine: 1.8e-4 relative by the fourth step, 2026-11-28; a wrong reduction is off by far more)."""
    two = launch_local(_run(tmp_path, recipe, "parallel.num_gpus=2", "run_id=two", *optimizer))
    one = launch_local(_run(tmp_path, recipe, "run_id=one", *optimizer))
    summary = json.loads((two / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["threads_per_process"] >= 1
    assert _losses(two) == pytest.approx(_losses(one), rel=1e-3)
    assert _losses(two)[-1] < _losses(two)[0]


def test_layer_wise_soap_on_two_processes_equals_replicated_soap(tmp_path):
    """SOAP amplifies float noise (a 1e-7 relative change of a rank-2 gradient moves its first steps by more than
    the update itself: Adam normalizes the near-null eigen-directions of the Kronecker factors), so one process and
    two, which sum gradients in another order, part after a few steps. Two processes that own whole matrices
    (layer-wise) and two that each update everything see the same reduced gradients: the same losses, exactly."""
    shared = ["optimizer=soap", "parallel.num_gpus=2"]
    owned = launch_local(_run(tmp_path, "kimi_k2_tiny_muon", *shared, "run_id=owned"))
    replicated = launch_local(
        _run(tmp_path, "kimi_k2_tiny_muon", *shared, "optimizer.soap.layer_wise=false", "run_id=replicated")
    )
    assert _losses(owned) == _losses(replicated)
    assert _losses(owned)[-1] < _losses(owned)[0]


def test_metrics_summary_and_wandb_files_carry_every_field(tmp_path):
    directory = launch_local(_run(tmp_path, "kimi_k2_tiny_muon", "run_id=fields", logger="wandb_offline"))
    records = read_metrics(directory / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    for record in records:
        assert set(STEP_FIELDS) <= set(record), set(STEP_FIELDS) - set(record)
        assert record["mfu"] and all(0 < v for v in record["mfu"].values())
        assert record["tflops_per_gpu_with_ns"] > record["tflops_per_gpu"] > 0  # Muon adds NS FLOPs
    summary = json.loads((directory / "summary.json").read_text())
    assert set(SUMMARY_FIELDS) <= set(summary), set(SUMMARY_FIELDS) - set(summary)
    assert summary["final_loss"] == records[-1]["loss"] and summary["steps"] == 4
    assert summary["peak"]["key"] == "cpu_fp32_probe" and summary["precision"] == "fp32"
    assert {"python", "torch", "transformers"} <= set(summary["versions"])
    assert load_resolved_config(directory / "config.yaml").run_id == "fields"

    wandb_dirs = offline_run_dirs(tmp_path, "fields")
    assert len(wandb_dirs) == 1 and wandb_dirs[0].parent == tmp_path / "wandb"
    held = read_offline_run(wandb_dirs[0])
    assert held["run"]["group"] == "kimi_k2_tiny-cpu-fp32" and held["run"]["job_type"] == "pretrain"
    assert {"kimi_k2_tiny", "muon", "cpu", "fp32"} <= set(held["run"]["tags"])
    assert held["summary"]["final_loss"] == pytest.approx(summary["final_loss"])
    assert held["summary"]["tflops_per_gpu"] == pytest.approx(summary["tflops_per_gpu"])
    assert len(held["history"]) >= 4


def _every_file_parses(root: Path) -> None:
    for path in root.rglob("*"):
        if not path.is_file() or path.name.startswith("."):  # .name.tmp: an unfinished atomic write
            continue
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".yaml":
            load_resolved_config(path)
        elif path.suffix == ".pt":
            torch.load(path, map_location="cpu", weights_only=False)
        elif path.name == "metrics.jsonl":
            read_metrics(path)  # raises on any broken line but a partial last one


def test_killed_run_leaves_no_corrupt_file_and_resumes_bit_for_bit(tmp_path, monkeypatch):
    # Muon with 2 threads: its bf16 Newton-Schulz GEMMs were the one nondeterministic part on CPU.
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    steps = ["train.iters=12", "train.save_interval=1"]
    reference = launch_local(_run(tmp_path, "kimi_k2_tiny_muon", *steps, "run_id=whole"))

    run = _run(tmp_path, "kimi_k2_tiny_muon", *steps, "run_id=killed")
    config = save_resolved_config(run, run_dir(run) / "config.yaml")
    process = subprocess.Popen(
        [sys.executable, "-m", "optbench.engine.local", str(config)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    metrics = run_dir(run) / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None and len(read_metrics(metrics)) < 4:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert 4 <= len(read_metrics(metrics)) < 12, "the run must be killed mid-way"
    _every_file_parses(tmp_path / "runs")
    _every_file_parses(checkpoint_dir(run))
    assert (checkpoint_dir(run) / LATEST).is_file()

    resumed = launch_local(_run(tmp_path, "kimi_k2_tiny_muon", *steps, "run_id=killed", "resume=true"))
    records = read_metrics(resumed / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, 13))  # no step lost or duplicated
    assert _losses(resumed) == _losses(reference)  # bitwise on CPU
    assert json.loads((resumed / "summary.json").read_text())["resumed_from_step"] >= 3


def test_launch_refuses_reuse_resume_of_nothing_and_models_that_do_not_fit(tmp_path):
    launch_local(_run(tmp_path, "kimi_k2_tiny_adamw", "run_id=once", "train.iters=1"))
    with pytest.raises(UserError, match="already holds a run"):
        launch_local(_run(tmp_path, "kimi_k2_tiny_adamw", "run_id=once", "train.iters=1"))
    with pytest.raises(UserError) as err:
        launch_local(
            _run(tmp_path, "kimi_k2_tiny_adamw", "run_id=once", "train.iters=1", "resume=true", "train.gbs=16")
        )
    assert err.value.problems[0].field == "train.gbs"
    with pytest.raises(UserError, match="no run to resume"):
        launch_local(_run(tmp_path, "kimi_k2_tiny_adamw", "run_id=never", "resume=true"))
    huge = compose_run(
        "kimi_k2_muon",
        [
            f"results_dir={tmp_path}",
            "engine=local",
            "parallel=single",
            "cluster=local",
            "precision=bf16",
            "logger=none",
        ],
    )
    with pytest.raises(UserError) as err:
        launch_local(huge)
    assert err.value.problems[0].field == "model" and "cluster" in str(err.value)


def test_cpu_runs_repeat_bit_for_bit_with_several_threads(tmp_path, monkeypatch):
    """The real tiny proxy with Muon on 2 threads: without torch's deterministic algorithms its bf16
    Newton-Schulz GEMMs differed between two runs from the second step on (measured)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    losses = [
        _losses(
            launch_local(
                compose_run(
                    "kimi_k2_tiny_muon", ["train.iters=3", f"results_dir={tmp_path}", "logger=none", f"run_id=again{i}"]
                )
            )
        )
        for i in range(2)
    ]
    assert losses[0] == losses[1]
