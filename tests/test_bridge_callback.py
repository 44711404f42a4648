"""The Bridge metrics callback on a CPU: a fake device probe, fake Bridge contexts, a fake clock."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from optbench.accounting.throughput import step_throughput
from optbench.engine.bridge.callback import MetricsCallback, learning_rate, optimizer_seconds, scalar_loss
from optbench.compose.recipe import compose_run
from optbench.runs import run_dir


class FakeProbe:
    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world, self.syncs = rank, world, 0
        self.memory = [40.0, 55.5, 52.0, 51.0]

    def rank_and_world(self):
        return self.rank, self.world

    def synchronize(self):
        self.syncs += 1

    def peak_memory_gb(self):
        return self.memory.pop(0) if len(self.memory) > 1 else self.memory[0]

    def max_over_ranks(self, value):
        return max(value, 70.0)  # another rank used more

    def device_name(self):
        return "NVIDIA GB300 (fake)"


class FakeTimer:
    def __init__(self) -> None:
        self.total = 0.0

    def active_time(self):
        return self.total


class FakeTimers:
    """Megatron's Timers as the callback sees them: a dict of created timers, callable to create one."""

    def __init__(self, timer: FakeTimer) -> None:
        self._timers = {"optimizer": timer}

    def __call__(self, name, log_level=None):
        raise AssertionError("the callback must not create or fetch timers through Timers.__call__")


class FakeWandb:
    def __init__(self) -> None:
        self.logged: list[tuple[dict, int]] = []
        self.run = SimpleNamespace(summary={})

    def log(self, data, step):
        self.logged.append((data, step))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def context(step: int, timer: FakeTimer, wandb: Any, loss: Any = 2.5) -> SimpleNamespace:
    optimizer = SimpleNamespace(param_groups=[{"lr": 1e-4, "is_decoupled_lr": False}])
    state = SimpleNamespace(train_state=SimpleNamespace(step=step), timers=FakeTimers(timer), wandb_logger=wandb)
    return SimpleNamespace(
        state=state, loss_dict={"lm loss": loss}, grad_norm=1.25, optimizer=optimizer, skipped_iter=False
    )


def drive(callback: MetricsCallback, clock: Clock, steps: list[tuple[float, float]], wandb: Any) -> None:
    """Run Bridge's event sequence: (step seconds, optimizer seconds) per step."""
    timer = FakeTimer()
    callback.on_train_start(context(0, timer, wandb))
    for index, (seconds, optimizer) in enumerate(steps):
        clock.now += seconds
        timer.total += optimizer
        callback.on_train_step_end(context(index, timer, wandb, loss=(5.0 - index, 2)))
    callback.on_train_end(context(len(steps), timer, wandb))


@pytest.fixture
def run(tmp_path: Path):
    return compose_run("qwen3_30b_a3b_muon", [f"results_dir={tmp_path}", "run_id=cb-test"])


def test_last_rank_writes_records_with_our_accounting(run, tmp_path: Path) -> None:
    clock, wandb = Clock(), FakeWandb()
    callback = MetricsCallback(run, probe=FakeProbe(rank=7, world=8), clock=clock)
    drive(callback, clock, [(9.0, 0.5), (8.5, 0.4), (8.8, 0.45), (8.7, 0.42)], wandb)
    lines = (run_dir(run) / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    expected = step_throughput(run, 8.5, world_size=8)
    second = records[1]
    assert second["step_time_s"] == pytest.approx(8.5) and second["optimizer_time_s"] == pytest.approx(0.4)
    assert second["tflops_per_gpu"] == pytest.approx(expected.tflops_per_gpu)
    assert second["tflops_per_gpu_with_ns"] == pytest.approx(expected.tflops_per_gpu_with_ns)
    assert second["mfu"] == pytest.approx(expected.mfu) and set(second["mfu"]) == {"gb300_fp8", "gb300_bf16"}
    assert second["tokens_per_s_per_gpu"] == pytest.approx(512 * 4096 / 8.5 / 8)
    assert second["loss"] == pytest.approx(2.0) and second["lr"] == 1e-4 and second["grad_norm"] == 1.25
    assert second["peak_memory_gb"] == 55.5
    # The same records in Bridge's wandb run, under optbench/, at Bridge's iteration numbers.
    assert [step for _, step in wandb.logged] == [1, 2, 3, 4]
    assert wandb.logged[1][0]["optbench/mfu/gb300_fp8"] == pytest.approx(expected.mfu["gb300_fp8"])


def test_summary_has_medians_peaks_and_provenance(run) -> None:
    clock, wandb = Clock(), FakeWandb()
    callback = MetricsCallback(run, probe=FakeProbe(rank=7, world=8), clock=clock)
    drive(callback, clock, [(30.0, 3.0), (8.0, 0.4), (9.0, 0.5), (10.0, 0.6), (9.5, 0.55)], wandb)
    summary = json.loads((run_dir(run) / "summary.json").read_text())
    assert summary["warmup_steps_skipped"] == 2 and summary["step_time_s"] == pytest.approx(9.5)
    assert summary["peak"]["key"] == "gb300_fp8" and summary["world_size"] == 8
    assert summary["peak_memory_gb_all_ranks"] == 70.0 and summary["engine"] == "megatron_bridge"
    assert summary["initial_loss"] == pytest.approx(2.5) and summary["final_loss"] == pytest.approx(0.5)
    assert wandb.run.summary["optbench/tflops_per_gpu"] == pytest.approx(summary["tflops_per_gpu"])


def test_other_ranks_write_nothing_and_do_not_synchronize(run) -> None:
    clock, probe = Clock(), FakeProbe(rank=0, world=8)
    callback = MetricsCallback(run, probe=probe, clock=clock)
    drive(callback, clock, [(9.0, 0.5), (8.0, 0.4)], None)
    assert not run_dir(run).exists() and probe.syncs == 0


def test_helpers_read_bridges_values() -> None:
    assert scalar_loss({"lm loss": (6.0, 3)}) == 2.0 and scalar_loss({"lm loss": 1.5}) == 1.5
    assert scalar_loss({}) is None and scalar_loss(None) is None
    groups = [{"lr": 9.0, "is_decoupled_lr": True}, {"lr": 3e-4, "is_decoupled_lr": False}]
    assert learning_rate(SimpleNamespace(param_groups=groups)) == 3e-4

    assert optimizer_seconds(FakeTimers(FakeTimer())) == 0.0
    assert optimizer_seconds(SimpleNamespace(_timers={})) is None  # not created yet (or timing level 0)


def test_log_interval_records_once_per_interval_with_the_mean_step(tmp_path: Path) -> None:
    run = compose_run("qwen3_30b_a3b_muon", [f"results_dir={tmp_path}", "run_id=cb-interval", "train.log_interval=2"])
    clock, probe = Clock(), FakeProbe(rank=7, world=8)
    callback = MetricsCallback(run, probe=probe, clock=clock)
    drive(callback, clock, [(9.0, 0.5), (8.0, 0.3), (10.0, 0.6), (6.0, 0.2)], None)
    records = [json.loads(line) for line in (run_dir(run) / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4] and [r["steps_in_interval"] for r in records] == [2, 2]
    assert records[0]["step_time_s"] == pytest.approx(8.5) and records[1]["optimizer_time_s"] == pytest.approx(0.4)
    assert probe.syncs == 3  # train start + the two interval ends: none between log points
