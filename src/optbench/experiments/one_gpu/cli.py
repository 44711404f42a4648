"""``make gpu-smoke``: the real Megatron Bridge and Core train our recipe on one GPU (issue 55).

    python -m optbench gpu-smoke [--optimizers adamw,muon,...] [--loops core[,bridge]]
                                      [--steps 20] [--timeout 200] [--set KEY=VALUE ...]
                                      [--out results/bench/megatron_one_gpu.json]

For each optimizer and loop it prepares a job folder through the cluster path (:mod:`.arms`), trains it in a worker
process (:mod:`.worker`, its output in the folder's ``worker-<loop>.log``), and writes every arm's report, its
metrics (our callback's records and summary) and the plan's projection of the same setup on this GPU into one JSON
file (added to the invocations it holds), rendered by :mod:`.page` into the markdown page beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shlex
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Sequence

from optbench.experiments.one_gpu import page
from optbench.experiments.one_gpu.arms import LOOPS, RECIPES, Arm, cluster_of, overrides, prepare
from optbench.common.checkout import repo_root
from optbench.common.errors import Problem, UserError
from optbench.common.io import atomic_write_json
from optbench.common.redact import clipped

WORKER = Path(__file__).resolve().with_name("worker.py")
PACKAGES = ("torch", "megatron-core", "megatron-bridge", "emerging-optimizers", "transformer-engine", "transformers")
LOG_TAIL = 40


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def run_arm(arm: Arm, timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Train one prepared arm in a worker process; its report with the run's metrics and log tail."""
    report_path, log_path = arm.folder / f"smoke-{arm.loop}.json", arm.folder / f"worker-{arm.loop}.log"
    command = [sys.executable, str(WORKER), str(arm.folder), "--loop", arm.loop, "--report", str(report_path)]
    started = time.perf_counter()
    with log_path.open("w") as log:
        try:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, env=env).returncode
        except subprocess.TimeoutExpired:
            code = None
    report: dict[str, Any] = (
        json.loads(report_path.read_text())
        if report_path.is_file()
        else {
            "status": "error",
            "error": f"no report: the worker {'timed out after %ss' % timeout if code is None else 'exited %s' % code}",
        }
    )
    plan = json.loads((arm.folder / "plan.json").read_text())
    summary = arm.folder / "summary.json"
    metrics = arm.folder / "metrics.jsonl"
    lines = log_path.read_text(errors="replace").splitlines()
    return {
        **report,
        "optimizer": arm.optimizer,
        "loop": arm.loop,
        "run_id": arm.run_id,
        "wall_s": round(time.perf_counter() - started, 1),
        "summary": json.loads(summary.read_text()) if summary.is_file() else None,
        "records": [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        if metrics.is_file()
        else [],
        "projection": plan.get("projection"),
        "plan": {
            key: plan.get(key)
            for key in (
                "recipe",
                "overrides",
                "gpu",
                "precision",
                "layout",
                "gbs",
                "mbs",
                "seq_length",
                "num_microbatches",
                "tokens_per_step",
                "model",
                "model_flops_per_step",
                "ns_flops_per_step_per_gpu",
                "memory_per_gpu_gb",
            )
        },
        "bridge_recipe": plan.get("bridge", {}).get("recipe"),
        "log_tail": lines[-LOG_TAIL:],
    }


MAX_STEPS = 10_000
MAX_TIMEOUT_S = 3600.0
"""An arm's time limit: a lent GPU's lease is 15 minutes, so an hour is never what a user meant."""


def _earlier_smokes(out: Path) -> list[dict[str, Any]]:
    """The invocations a results file already holds (a later one adds to them, as a second lease finishes arms the
    first could not); a file that is not one, or one the page cannot render, is refused before any GPU time."""
    if not (out.exists() or out.is_symlink()):
        return []
    return page.read_result(out, "--out")["smokes"]


def _names(text: str, known: Sequence[str], option: str) -> list[str]:
    """A comma-separated list of ``known`` names, each once; anything else is one line naming ``option``."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise UserError(Problem(option, f"names nothing; give any of {', '.join(known)}, comma-separated"))
    for name in names:
        if name not in known:
            raise UserError(Problem(option, f"'{clipped(name, 40)}' is not one of {', '.join(known)}"))
    twice = next((name for index, name in enumerate(names) if name in names[:index]), None)
    if twice is not None:
        raise UserError(
            Problem(
                option,
                f"names {twice} twice; name each once (a second arm of one name would write into the first's folder)",
            )
        )
    return names


def _number(text: str, option: str, low: float, high: float, whole: bool) -> float:
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and low <= value <= high):
        kind = "a whole number" if whole else "a number of seconds"
        raise UserError(Problem(option, f"'{clipped(text, 24)}' is not {kind} from {low:g} to {high:g}"))
    return value


def _checked(args: argparse.Namespace) -> tuple[list[str], list[str], int, float, Path]:
    """Every option checked before the GPU is touched: optimizers, loops, steps, timeout, the results file and its
    page (on a lent GPU each minute counts, so nothing is refused after an arm has trained)."""
    optimizers = _names(args.optimizers, list(RECIPES), "--optimizers")
    loops = _names(args.loops, LOOPS, "--loops")
    steps = int(_number(args.steps, "--steps", 1, MAX_STEPS, whole=True))
    timeout = _number(args.timeout, "--timeout", 1, MAX_TIMEOUT_S, whole=False)
    out = args.out if args.out is not None else repo_root() / "results" / "bench" / "megatron_one_gpu.json"
    if out.suffix != ".json":
        raise UserError(Problem("--out", f"{out} is not a .json file; the page is written beside it as .md"))
    return optimizers, loops, steps, timeout, out


def _check_arms(optimizers: list[str], loops: list[str], cluster: str, steps: int, extra: list[str]) -> None:
    """Compose and validate every arm (writing nothing) before the first trains: a bad --set fails at once."""
    from optbench.compose.recipe import compose_run
    from optbench.validate import validate

    for loop in loops:
        for optimizer in optimizers:
            validate(compose_run(*overrides(optimizer, cluster, steps, f"gpu-smoke-check-{optimizer}-{loop}", extra)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m optbench gpu-smoke", description=__doc__.split("\n\n")[0])
    parser.add_argument("--optimizers", default=",".join(RECIPES))
    parser.add_argument(
        "--loops",
        default="core",
        help="core: Megatron Core's step as Bridge builds it; bridge: "
        "Bridge's own pretrain() (needs a Makefile in megatron/core/datasets: docs/gpu.md)",
    )
    parser.add_argument("--steps", default="20", help=f"steps per arm, 1 to {MAX_STEPS:,}")
    parser.add_argument(
        "--timeout",
        default="200",
        help="seconds per arm, 1 to 3,600 (on an H200: Muon 113.5 s for "
        "20 steps, 76.6 s of them in the steps; AdamW 92.0 s for 30, 62.2 s in the steps; a preconditioner that "
        "refreshes eigenbases needs more)",
    )
    parser.add_argument(
        "--set",
        dest="extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override added to every arm of this invocation, after the smoke's own (a variant "
        "arm: the page lists it apart, labelled with its overrides)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the results file (default: the checkout's "
        "results/bench/megatron_one_gpu.json); the page is written beside it",
    )
    args = parser.parse_args(argv)
    optimizers, loops, steps, timeout, out = _checked(args)
    earlier = _earlier_smokes(out)
    page.check_page(out)  # before any GPU time: the page beside --out is replaced at the end
    import torch

    if not torch.cuda.is_available():
        raise UserError(Problem("gpu", "no CUDA device here; run make gpu-smoke on a GPU machine (docs/gpu.md)"))
    device = torch.cuda.get_device_name()
    cluster = cluster_of(device)
    _check_arms(optimizers, loops, cluster, steps, args.extra)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    head = {
        "command": "python -m optbench gpu-smoke " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "device": device,
        "gpu": cluster,
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in PACKAGES},
        "steps": steps,
    }
    arms: list[dict[str, Any]] = []
    # Loop by loop: every optimizer through Core's step first, then Bridge's pretrain(); the file is rewritten
    # after each arm, so an interrupted smoke keeps what it measured.
    for loop in loops:
        for optimizer in optimizers:
            arm = prepare(optimizer, loop, cluster, steps, stamp, args.extra)
            print(f"gpu-smoke: {page.label(optimizer, args.extra)} ({loop} loop) -> {arm.folder}", flush=True)
            arms.append({**run_arm(arm, timeout), "extra": args.extra})
            step = (arms[-1]["summary"] or {}).get("step_time_s")
            print(
                f"  {arms[-1]['status']}: {arms[-1].get('error') or f'step {step} s'} ({arms[-1]['wall_s']} s)",
                flush=True,
            )
            atomic_write_json(out, {"smokes": [*earlier, {**head, "arms": arms}]})
    print(f"gpu-smoke: {len(arms)} arms -> {out}; {page.write(out)}")
    return 0
