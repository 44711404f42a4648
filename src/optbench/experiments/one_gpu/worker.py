"""One arm of ``make gpu-smoke`` in its own process: ``python src/optbench/experiments/one_gpu/worker.py <run folder>
--loop core|bridge --report <file>``.

The run folder holds what a Bridge job's folder holds (config.yaml and the plan.json the launcher writes). The worker
does what the job's entry point does with them (:mod:`optbench.engine.bridge.entry`: the release check, the recipe
function, the mixed-precision preset, the plan's overrides through Bridge's own ``process_config_with_overrides``), then
the changes a machine without Transformer Engine needs (:mod:`.no_te`, recorded), and trains:

* ``--loop bridge``: Bridge's own ``pretrain()`` with its GPT ``forward_step`` and our callback, the imports of
  Transformer Engine answered by the CPU check's stand-ins (:mod:`optbench.engine.bridge.cpu_check.stand_ins`);
* ``--loop core``: Megatron Core's model, DDP, optimizer and step as Bridge builds them (:mod:`.core_loop`).

It writes a JSON report (status, the first line of any error, the changes, seconds) and exits 0 whenever it could
write one: a refusal by Megatron is the finding.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run by path: make the package importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from optbench.experiments.one_gpu.core_first import core_has_transformer_engine, import_core  # noqa: E402

CORE_IMPORT_FAILURES = import_core()  # before the stand-ins: Core must see no Transformer Engine
os.environ.setdefault("OPTBENCH_REAL_CUDA", "1")  # read by the stand-ins at import: the GPU's own CUDA stays
from optbench.engine.bridge.cpu_check import stand_ins  # noqa: E402,F401  (before anything imports Bridge)
from optbench.engine.bridge.entry import BridgeAPI  # noqa: E402


class NoTransformerEngineAPI(BridgeAPI):
    """Bridge's functions as the job calls them, with :func:`.no_te.adapt` applied right after the plan's overrides."""

    def __init__(self) -> None:
        self.changes: list[dict[str, Any]] = []
        self.reached: list[str] = []
        """The stages passed, in order (kept in the report when a later one fails)."""

    def apply_overrides(self, config: Any, overrides: Any) -> Any:
        from optbench.experiments.one_gpu.no_te import adapt

        config = super().apply_overrides(config, overrides)
        self.changes = adapt(config)
        return config


def _error(err: BaseException) -> dict[str, Any]:
    text = str(err).strip().splitlines()
    return {
        "status": "error",
        "error": f"{type(err).__name__}: {text[0][:400] if text else ''}",
        "traceback": traceback.format_exc()[-4000:],
    }


def run_core(config_path: Path, api: NoTransformerEngineAPI) -> dict[str, Any]:
    from optbench.engine.bridge.adapter import BridgeSetup
    from optbench.engine.bridge.callback import MetricsCallback
    from optbench.engine.bridge.entry import build_config_container, check_release
    from optbench.experiments.one_gpu.core_loop import init_single_process, train
    from optbench.engine.local.data import SyntheticStream
    from optbench.runs.plan_file import read_plan
    from optbench.runs import load_resolved_config

    run = load_resolved_config(config_path)
    check_release(run, api.installed_versions()["bridge"])
    config = build_config_container(BridgeSetup.from_dict(read_plan(config_path.parent)["bridge"]), api)
    api.reached.append("config container")
    from optbench.engine.bridge.cpu_check.runtime import update_at

    update_at(config, world_size=1)  # Bridge's own checks and derived fields, as pretrain() runs them first
    api.reached.append("runtime_config_update")
    init_single_process()
    api.reached.append("torch.distributed")
    stream = SyntheticStream(run.model.vocab_size, run.data.seed, run.train.seq_length)
    return {"changes": api.changes, **train(config, stream, run.train.iters, MetricsCallback(run))}


def run_bridge(config_path: Path, api: NoTransformerEngineAPI) -> dict[str, Any]:
    from optbench.engine.bridge.entry import run_bridge as job
    from optbench.experiments.one_gpu.core_loop import single_process_env

    single_process_env()
    job(config_path, api=api)
    return {"changes": api.changes}


def main(argv: list[str] | None = None) -> int:
    from optbench.experiments.one_gpu.arms import LOOPS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the run folder (config.yaml and plan.json)")
    parser.add_argument("--loop", choices=LOOPS, required=True)
    parser.add_argument("--report", type=Path, required=True)
    args = parser.parse_args(argv)
    from optbench.common.exits import exit_on_user_error
    from optbench.engine.bridge.cpu_check import hf_cache

    with exit_on_user_error():
        _check_paths(args.folder, args.report)
    started = time.perf_counter()
    api = NoTransformerEngineAPI()
    with tempfile.TemporaryDirectory(prefix="optbench-hf-") as hub:
        hf_cache.use(hub)  # the recipe reads its model's hub config: from the configs the checkout carries
        try:
            report = {
                "status": "ok",
                **(run_core if args.loop == "core" else run_bridge)(args.folder / "config.yaml", api),
            }
        except BaseException as err:  # what Megatron refuses is the finding
            report = {**_error(err), "changes": api.changes}
    report.update(
        loop=args.loop,
        reached=api.reached,
        seconds=round(time.perf_counter() - started, 1),
        core_sees_transformer_engine=core_has_transformer_engine(),
        core_import_failures=CORE_IMPORT_FAILURES,
    )
    from optbench.common.io import atomic_write_text

    atomic_write_text(args.report, json.dumps(report, indent=1, default=str) + "\n")
    return 0


def _check_paths(folder: Path, report: Path) -> None:
    """The run folder is one the smoke prepared, and the report is a new file in it: the worker never replaces a file
    it did not write (make gpu-smoke names a fresh ``smoke-<loop>.json`` in the arm's new folder)."""
    from optbench.common.errors import Problem, UserError

    if not all((folder / name).is_file() for name in ("config.yaml", "plan.json")):
        raise UserError(
            Problem(
                "folder",
                f"{folder} is not a prepared run folder (config.yaml and plan.json); make "
                "gpu-smoke prepares one per arm",
            )
        )
    if report.exists() or report.is_symlink():
        raise UserError(Problem("--report", f"{report} exists; the worker writes a new report only"))
    if not report.parent.is_dir():
        raise UserError(Problem("--report", f"{report.parent} is not a folder"))
    if report.suffix != ".json":
        raise UserError(Problem("--report", f"{report} is not a .json file"))


if __name__ == "__main__":
    raise SystemExit(main())
