"""Host-side cost of the Bridge metrics callback per record, and the bound it puts on a GPU step.

The callback (:mod:`optbench.engine.bridge.callback`) runs on the last rank after ``on_train_step_end``. On a
GPU its device cost is one ``torch.cuda.synchronize()`` at the point where Bridge's own training log
synchronizes a moment later (so the device is drained once either way); what it adds is host time:
throughput arithmetic, one JSON line, the wandb call. This benchmark measures that host time with the
device calls stubbed out (no GPU needed) for the Kimi K2 GB300 recipe, and divides it by the step time
of NVIDIA's published run (the bound on the slowdown if that host time were fully exposed).
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from optbench.bench.sections import invocation
from optbench.common.io import atomic_write_json, atomic_write_text
from optbench.measured.stats import spread

NAME = "callback"
DESCRIPTION = "Bridge metrics callback: host microseconds per record, as a share of a published GB300 step"
RECIPE = "kimi_k2_muon"
PUBLISHED_STEP_S = 4096 * 4096 / (5072 * 256)
"""Kimi K2 + Muon on 256 GB300: 5072 tokens/s/GPU (Bridge perf summary 26.02.01) -> 12.9 s per GBS-4096 step."""


class _NoDevice:
    def rank_and_world(self):
        return 255, 256

    def synchronize(self):
        pass

    def peak_memory_gb(self):
        return 200.0

    def max_over_ranks(self, value):
        return value

    def device_name(self):
        return "none (host-side cost only)"


def measure(steps: int) -> list[float]:
    """Seconds of host time per ``on_train_step_end`` (a record every step, log_interval 1)."""
    from optbench.engine.bridge.callback import MetricsCallback
    from optbench.compose.recipe import compose_run

    with tempfile.TemporaryDirectory(prefix="optbench-bench-callback-") as tmp:
        run = compose_run(RECIPE, [f"results_dir={tmp}", "run_id=bench-callback", "logger=none"])
        callback = MetricsCallback(run, probe=_NoDevice())
        timers = SimpleNamespace(_timers={})
        state = SimpleNamespace(train_state=SimpleNamespace(step=0), timers=timers, wandb_logger=None)
        optimizer = SimpleNamespace(param_groups=[{"lr": 3e-4}])
        context = SimpleNamespace(
            state=state, loss_dict={"lm loss": 2.0}, grad_norm=1.0, optimizer=optimizer, skipped_iter=False
        )
        callback.on_train_start(context)
        times = []
        for step in range(steps):
            state.train_state.step = step
            started = time.perf_counter()
            callback.on_train_step_end(context)
            times.append(time.perf_counter() - started)
        callback.on_train_end(context)
    return times


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    times = measure(200 if quick else 2000)[10:]  # the first records open files
    sample = spread(times)  # the same quartiles as the other benchmarks
    median, q1, q3 = sample.median, sample.q1, sample.q3
    data = {
        "benchmark": NAME,
        **invocation(),
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "recipe": RECIPE,
        "records": len(times),
        "host_us_per_record": {"median": median * 1e6, "q1": q1 * 1e6, "q3": q3 * 1e6},
        "published_step_s": PUBLISHED_STEP_S,
        "bound_share_of_step": median / PUBLISHED_STEP_S,
        "not_measured": "the device side (one torch.cuda.synchronize at Bridge's own sync point) needs a GPU",
    }
    return [
        atomic_write_json(Path(out_dir) / "callback.json", data),
        atomic_write_text(Path(out_dir) / "callback.md", markdown(data)),
    ]


def markdown(data: dict[str, Any]) -> str:
    us = data["host_us_per_record"]
    return "\n".join(
        [
            "# Bridge metrics callback: host cost per record",
            "",
            f"`{data['command']}` ({data['created']}, {data['machine']['processor']}, {data['machine']['cores']} "
            f"cores, Python {data['machine']['python']}).",
            "",
            f"- {data['recipe']}, one record per step: **{us['median']:.0f} us** host time per record "
            f"(median of {data['records']}, IQR {us['q1']:.0f}-{us['q3']:.0f} us), device calls stubbed out.",
            f"- Bound on the slowdown of NVIDIA's Kimi K2 + Muon step ({data['published_step_s']:.1f} s at 5072 "
            "tokens/s/GPU, "
            f"Bridge perf summary 26.02.01) if all of it were exposed: **{100 * data['bound_share_of_step']:.4f} %**.",
            f"- Not measured: {data['not_measured']}.",
            "",
        ]
    )
