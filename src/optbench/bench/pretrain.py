"""The local-engine benchmark: results/bench/pretrain.json and pretrain.md.

- ``cpu``: the default ``make pretrain`` (no RECIPE: the Makefile's default tiny Muon recipe) run as a
  user runs it, as a subprocess, timed from start to exit (Python start-up, planning, training and
  writing results included); target: under 2 minutes on 2 cores. Its AdamW twin likewise. The
  machine's load average is recorded: other processes on a 2-core machine change every number.
- ``gpu``: on a CUDA machine, the largest proxy of the ladder below that fits one GPU (by the
  weights + gradients + optimizer-state estimate), with Muon and with AdamW on mock data: model
  TFLOP/s per GPU, with Newton-Schulz, MFU against the datasheet peak, optimizer share of the step,
  and the exact command. Without a GPU the section says so and gives the command to run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from optbench.common.checkout import repo_root
from optbench.compose.recipe import compose_run
from optbench.bench.sections import invocation, section_notes
from optbench.common.io import atomic_write_json, atomic_write_text
from optbench.common.make_args import environment_for_make
from optbench.common.tables import markdown_table

NAME = "pretrain"
DESCRIPTION = (
    "default `make pretrain` wall time on this CPU (target < 2 min on 2 cores); largest GPU proxy when a GPU exists"
)
TARGET_S = 120.0
"""`make pretrain` with no RECIPE must finish within this many seconds on 2 CPU cores."""
QUICK_ITERS = 3
GPU_LADDER: dict[str, list[str]] = {
    size: [
        "model.hidden_size=2048",
        "model.num_layers=12",
        "model.num_attention_heads=16",
        "model.ffn_hidden_size=8192",
        "model.q_lora_rank=768",
        "model.kv_lora_rank=256",
        "model.qk_head_dim=128",
        "model.qk_pos_emb_head_dim=64",
        "model.v_head_dim=128",
        f"model.num_moe_experts={experts}",
        "model.moe_ffn_hidden_size=1024",
        "model.moe_shared_expert_intermediate_size=1024",
        "model.moe_router_topk=8",
        "model.vocab_size=32000",
        "model.max_position_embeddings=4096",
        "train.seq_length=2048",
        "train.gbs=16",
        "train.mbs=2",
        "train.iters=30",
        "train.warmup_iters=3",
        "data=mock",
        "logger=none",
    ]
    for size, experts in (("small", 16), ("medium", 32), ("large", 64))
}
"""Kimi K2-architecture proxies sized for one GPU (overrides on kimi_k2_tiny_<optimizer>), smallest first.
``logger=none``: a GPU machine lent for minutes has no wandb installed, and the step time is what is measured."""
BUSY_PROCESSES = 2
"""Processes kept busy beside the loaded run (each a pure-Python loop on one core)."""
LOADED_TARGET = 3.0
"""The default `make pretrain` beside BUSY_PROCESSES busy processes takes at most this many times its quiet time."""
LIBGOMP_SPIN_COUNT = "300000"
"""libgomp's own GOMP_SPINCOUNT default: what the engine ran with before it set one."""
GPU_RUN_TIMEOUT_S = 200.0
"""Each GPU run is stopped after this long and reported as stopped (a GPU lent for minutes must not hang)."""
GPU_MEMORY_SHARE = 0.5
"""Share of the GPU's memory the weights, gradients and optimizer state may take (the rest: activations)."""


def default_recipe() -> str:
    """The recipe `make pretrain` runs without RECIPE (the Makefile's ``RECIPE ?=`` line)."""
    text = (repo_root() / "Makefile").read_text()
    match = re.search(r"^RECIPE \?= *(\S+)", text, re.MULTILINE)
    return match.group(1) if match else "kimi_k2_tiny_muon"


def _make_command(recipe: str | None, overrides: list[str]) -> list[str]:
    return ["make", "pretrain", *([f"RECIPE={recipe}"] if recipe else []), *overrides]


def timed_pretrain(
    recipe: str | None,
    overrides: list[str],
    results: Path,
    run_id: str,
    env_extra: dict[str, str] | None = None,
    timeout_s: float = 1800.0,
) -> dict[str, Any]:
    """Run ``make pretrain [RECIPE=...] overrides`` as a subprocess; wall time and the run's summary.

    ``env_extra``: variables set for this run only (shown in the command); without them the run gets the
    engine's defaults (OMP_NUM_THREADS and GOMP_SPINCOUNT removed from the environment)."""
    shown = [*(f"{k}={v}" for k, v in (env_extra or {}).items()), *_make_command(recipe, overrides)]
    placement = [f"results_dir={results}", f"run_id={run_id}"]  # keeps bench runs out of results/runs
    make = _make_command(recipe, overrides)
    argv = [make[0], "--no-print-directory", f"PY={sys.executable}", *make[1:], *placement]
    # Not what an enclosing make hands down either (make bench's own command-line variables).
    env = {k: v for k, v in environment_for_make().items() if k not in ("OMP_NUM_THREADS", "GOMP_SPINCOUNT")}
    env.update(env_extra or {})
    start = time.perf_counter()
    # Its own process group: on a timeout make, the launcher and the training process are stopped together.
    child = subprocess.Popen(
        argv,
        cwd=repo_root(),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        stdout, _ = child.communicate()
        return {
            "command": shlex.join(shown),
            "argv": shlex.join(argv),
            "exit_code": None,
            "wall_s": timeout_s,
            "error": [f"stopped after {timeout_s:.0f} s", *stdout.strip().splitlines()[-4:]],
        }
    except BaseException:  # Ctrl-C reaches only the bench (the run has its own session): stop the run too
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        raise
    process = subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)
    wall = time.perf_counter() - start
    result: dict[str, Any] = {
        "command": shlex.join(shown),
        "argv": shlex.join(argv),
        "exit_code": process.returncode,
        "wall_s": wall,
    }
    summary_path = results / "runs" / run_id / "summary.json"
    if process.returncode != 0 or not summary_path.is_file():
        result["error"] = (process.stderr or process.stdout).strip().splitlines()[-5:]
        return result
    summary = json.loads(summary_path.read_text())
    keys = (
        "recipe",
        "initial_loss",
        "final_loss",
        "loss_floor",
        "steps",
        "tokens_per_s",
        "tflops_per_gpu",
        "tflops_per_gpu_with_ns",
        "mfu",
        "peak",
        "step_time_s",
        "optimizer_time_s",
        "optimizer_share",
        "peak_memory_gb",
        "device",
        "precision",
        "world_size",
        "threads_per_process",
    )
    result.update({k: summary.get(k) for k in keys})
    result["training_wall_s"] = summary.get("wall_s")
    result["threads"] = summary.get("threads")
    result["prints_results"] = str(summary_path.parent) in process.stdout
    return result


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[list[subprocess.Popen]]:
    """``count`` processes that each keep one core busy (a pure-Python loop) for as long as the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(1.0)  # let them reach the scheduler's steady state before the measured run starts
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def _cpu_section(quick: bool) -> dict[str, Any]:
    recipe = default_recipe()
    twin = recipe.replace("_muon", "_adamw")
    overrides = [f"train.iters={QUICK_ITERS}"] if quick else []
    load_before = os.getloadavg()[0]
    from optbench.engine.local.threads import available_cores

    cores = available_cores()
    with tempfile.TemporaryDirectory(prefix="optbench-bench-") as tmp:
        runs = {"default": timed_pretrain(None, overrides, Path(tmp), "bench-default")}
        if twin != recipe:
            runs["adamw_twin"] = timed_pretrain(twin, overrides, Path(tmp), "bench-adamw")
        with busy_processes(BUSY_PROCESSES):
            runs["default_loaded"] = timed_pretrain(None, overrides, Path(tmp), "bench-loaded")
            old_policy = {"OMP_NUM_THREADS": str(cores), "GOMP_SPINCOUNT": LIBGOMP_SPIN_COUNT}
            runs["default_loaded_old_policy"] = timed_pretrain(
                None, overrides, Path(tmp), "bench-loaded-old", old_policy
            )
    return {
        "default_recipe": recipe,
        "cores": cores,
        "busy_processes": BUSY_PROCESSES,
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "runs": runs,
    }


def _gpu_candidates(hbm_gb: float) -> list[tuple[str, int]]:
    """Ladder entries whose weights, gradients and optimizer state fit the GPU's memory share, with their size."""
    from optbench.accounting.params import parameter_counts

    fitting = []
    for size, overrides in GPU_LADDER.items():
        params = parameter_counts(compose_run("kimi_k2_tiny_muon", overrides).model).total
        if params * 16 / 1e9 <= GPU_MEMORY_SHARE * hbm_gb:
            fitting.append((size, params))
    return fitting


def _gpu_section(quick: bool) -> dict[str, Any]:
    import torch

    h100_size = _gpu_candidates(80.0)[-1][0]
    example = shlex.join(_make_command("kimi_k2_tiny_muon", GPU_LADDER[h100_size]))
    if not torch.cuda.is_available():
        return {
            "measured": False,
            "reason": "no CUDA device in this run (torch.cuda.is_available() is False; torch "
            f"{torch.__version__} is {'a CPU-only build' if torch.version.cuda is None else 'a CUDA build'})",
            "command_for_h100": example,
            "ladder_size_for_h100": h100_size,
            "how": "run `make bench` on a GPU machine (this section then picks the largest proxy that fits and "
            "runs it with Muon and AdamW), or run the command above and its kimi_k2_tiny_adamw twin",
        }
    from optbench.bench.sections import provenance

    hbm = torch.cuda.get_device_properties(0).total_memory / 1e9
    size, params = _gpu_candidates(hbm)[-1]
    overrides = [*GPU_LADDER[size], *([f"train.iters={QUICK_ITERS}"] if quick else [])]
    with tempfile.TemporaryDirectory(prefix="optbench-bench-gpu-") as tmp:
        runs = {
            optimizer: timed_pretrain(
                f"kimi_k2_tiny_{optimizer}", overrides, Path(tmp), f"bench-gpu-{optimizer}", timeout_s=GPU_RUN_TIMEOUT_S
            )
            for optimizer in ("muon", "adamw")
        }
    return {
        "measured": True,
        **provenance(),
        "device": torch.cuda.get_device_name(0),
        "hbm_gb": hbm,
        "ladder_size": size,
        "params": params,
        "runs": runs,
    }


def _targets(cpu: dict[str, Any], gpu: dict[str, Any]) -> dict[str, bool]:
    default = cpu["runs"]["default"]
    targets = {
        f"default `make pretrain` under {TARGET_S:.0f} s on {cpu['cores']} cores": default["exit_code"] == 0
        and default["wall_s"] < TARGET_S,
        "default run's loss falls": default.get("final_loss") is not None
        and default["final_loss"] < default["initial_loss"],
        "default run prints where its results are": bool(default.get("prints_results")),
        f"beside {BUSY_PROCESSES} busy processes at most {LOADED_TARGET:.0f}x the quiet wall time": _loaded_ratio(cpu)
        is not None
        and _loaded_ratio(cpu) <= LOADED_TARGET,
    }
    if gpu["measured"]:
        for name, r in gpu["runs"].items():
            targets[f"GPU {gpu['ladder_size']} proxy, {name}: runs and its loss falls"] = (
                r["exit_code"] == 0 and r.get("final_loss") is not None and r["final_loss"] < r["initial_loss"]
            )
    return targets


def run(out_dir: Path, quick: bool = False, gpu_only: bool = False) -> list[Path]:
    """Measure and write pretrain.json and pretrain.md under ``out_dir``; with ``gpu_only`` measure the GPU
    section alone and keep the rest of the stored pretrain.json (:mod:`optbench.bench.sections`)."""
    from optbench.bench.sections import kept_or_fresh, require_cuda, stored_result

    stored = stored_result(out_dir, NAME, required=gpu_only)
    if gpu_only:
        require_cuda()
        data = {**stored, "gpu": _gpu_section(quick)}
    else:
        data = {
            "benchmark": NAME,
            **invocation(),
            "quick": quick,
            "cpu": _cpu_section(quick),
            "gpu": kept_or_fresh(_gpu_section(quick), (stored or {}).get("gpu")),
        }
    data["targets"] = _targets(data["cpu"], data["gpu"])
    out_dir = Path(out_dir)
    return [
        atomic_write_json(out_dir / "pretrain.json", data),
        atomic_write_text(out_dir / "pretrain.md", markdown(data)),
    ]


def _loaded_ratio(cpu: dict[str, Any], name: str = "default_loaded") -> float | None:
    """Wall time of a run beside the busy processes over the quiet default run's."""
    quiet, loaded = cpu["runs"]["default"], cpu["runs"].get(name)
    if loaded is None or quiet.get("exit_code") != 0 or loaded.get("exit_code") != 0:
        return None
    return loaded["wall_s"] / quiet["wall_s"]


def _flops(tflops: float | None) -> str:
    if tflops is None:
        return "-"
    return f"{tflops:.1f} TFLOP/s" if tflops >= 1 else f"{tflops * 1e3:.1f} GFLOP/s"


def _run_rows(runs: dict[str, dict[str, Any]]) -> list[str]:
    cells = []
    for name, r in runs.items():
        if "error" in r:
            why = f"exit {r['exit_code']}" if r["exit_code"] is not None else r["error"][0]
            cells.append([name, f"`{r['command']}`", f"{r['wall_s']:.1f} s", f"FAILED ({why})"])
            continue
        mfu = ", ".join(f"{v:.1%} of {k}" for k, v in (r["mfu"] or {}).items())
        floor = f" ({r['loss_floor']:.2f})" if r.get("loss_floor") is not None else ""
        cells.append(
            [
                name,
                f"`{r['command']}`",
                f"{r['wall_s']:.1f} s",
                f"{r['training_wall_s']:.1f} s, {r['steps']} steps",
                f"{r['initial_loss']:.3f} -> {r['final_loss']:.3f}{floor}",
                f"{r['tokens_per_s']:,.0f}",
                f"{_flops(r['tflops_per_gpu'])} / {_flops(r['tflops_per_gpu_with_ns'])}",
                mfu,
                f"{r['optimizer_share']:.0%}",
            ]
        )
    return markdown_table(
        [
            "run",
            "command",
            "wall (whole command)",
            "training",
            "loss start -> end (floor)",
            "tokens/s",
            "model / with NS per proc",
            "MFU",
            "optimizer share",
        ],
        cells,
    )


def _loaded_lines(cpu: dict[str, Any]) -> list[str]:
    if "default_loaded" not in cpu["runs"]:
        return []
    ratio, old = _loaded_ratio(cpu), _loaded_ratio(cpu, "default_loaded_old_policy")
    shown = lambda r: "-" if r is None else f"{r:.2f}x"  # noqa: E731
    changes = (cpu["runs"]["default_loaded"].get("threads") or {}).get("changes") or []
    threads = ", ".join(
        f"step {c['step']}: {c['threads']} (others busy {c['others_busy_cores']} cores)" for c in changes
    )
    return [
        f"Under load: `default_loaded` runs beside {cpu['busy_processes']} processes that each keep one core busy (a "
        f"pure-Python loop): {shown(ratio)} the quiet wall time (target at most {LOADED_TARGET:.0f}x). Its threads: "
        f"{threads or '-'}. `default_loaded_old_policy` is the same run with the engine's earlier thread policy (all "
        f"cores, libgomp's default spin count): {shown(old)} the quiet time.",
        "",
    ]


def markdown(data: dict[str, Any]) -> str:
    """The human-readable summary written beside pretrain.json."""
    cpu, gpu = data["cpu"], data["gpu"]
    default = cpu["runs"]["default"]
    load = cpu["load_average_1min"]
    lines = [
        "# Local engine benchmark",
        "",
        f"Command (CPU section; a measured GPU section names its own): `{data['command']}` (`make bench`), "
        f"{data['created']}" + (f" (QUICK smoke run: {QUICK_ITERS} steps)" if data["quick"] else ""),
        "",
        f"## CPU: `make pretrain` (default recipe {cpu['default_recipe']}), {cpu['cores']} cores",
        "",
        f"Device: {default.get('device', '-')}; precision {default.get('precision', '-')}; 1-min load average "
        f"{load['before']:.1f} before, {load['after']:.1f} after (other processes slow every number down).",
        "Wall time is the whole command as a user types it (Python start-up, plan, training, results); the bench "
        "adds `results_dir` and `run_id` overrides only to keep its runs out of results/runs.",
        "",
        *_run_rows(cpu["runs"]),
        "",
        *_loaded_lines(cpu),
        "## GPU: largest proxy that fits one GPU, Muon vs AdamW",
        "",
    ]
    if gpu["measured"]:
        lines += [
            f"Device: {gpu['device']} ({gpu['hbm_gb']:.0f} GB); proxy {gpu['ladder_size']} "
            f"({gpu['params'] / 1e9:.2f} B params), bf16 autocast with fp32 weights and optimizer state.",
            *section_notes(gpu),
            "",
            *_run_rows(gpu["runs"]),
        ]
    else:
        lines += [
            f"Not measured: {gpu['reason']}.",
            "",
            f"On an 80 GB H100 the bench would run the `{gpu['ladder_size_for_h100']}` proxy:",
            "",
            f"    {gpu['command_for_h100']}",
            "",
            f"and the same with RECIPE=kimi_k2_tiny_adamw; {gpu['how']}.",
        ]
    lines += ["", "## Targets", ""]
    lines += [f"- {'met' if met else 'MISSED'}: {target}" for target, met in data["targets"].items()]
    return "\n".join(lines) + "\n"
