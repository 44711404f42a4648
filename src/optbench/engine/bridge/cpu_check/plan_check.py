"""A plan.json built with its container's real Megatron Bridge and Core on a CPU: ``make plan CHECK=bridge``.

``python src/optbench/engine/bridge/cpu_check/plan_check.py <folder with plan.json>... --out <report.json>``, run with
the interpreter and ``PYTHONPATH`` of the plans' container (:mod:`.environments`; the launcher picks them). It does
what the job's entry point does with each plan, up to the point where a GPU would be needed:

1. the plan's Bridge setup (recipe function, mixed-precision preset, the recorded overrides) built into a
   ConfigContainer by :func:`optbench.engine.bridge.entry.build_config_container` with the real ``BridgeAPI``;
2. every override read back from that container (a key Bridge lacks, or a value that did not land);
3. Bridge's ``runtime_config_update`` at the plan's world size: mixed precision, communication overlap,
   ``ConfigContainer.validate``, Megatron Core's ``TransformerConfig.__post_init__`` and its layout checks,
   on the GPU the plan is for (faked CUDA device properties, :mod:`.stand_ins`).

It writes a JSON list of reports, one per folder, and exits 0 whenever it could look (what Bridge refused is in the
report); the launcher turns a refusal into one line. Transformer Engine, the kernels and NCCL are stand-ins here, so
what passes can still fail where only they decide (a kernel missing for a shape, memory, the network): this
checks the configuration, not the run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run by path in a Bridge environment: import optbench from this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from optbench.engine.bridge.cpu_check import stand_ins  # noqa: E402  (before anything imports Bridge or Megatron Core)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


def check(folders: list[Path]) -> list[dict[str, Any]]:
    """One report per plan.json in ``folders``, in order (see the module's docstring): Bridge and Core are imported
    once, so the plans of a sweep cost one import between them. Every plan must be of the installed release."""
    from importlib.metadata import version

    from omegaconf import OmegaConf

    from optbench.engine.bridge.cpu_check import hf_cache
    from optbench.engine.bridge.entry import BridgeAPI, check_release
    from optbench.config.serialize import to_run_config
    from optbench.runs.plan_file import read_plan

    plans = [read_plan(folder) for folder in folders]
    runs = [to_run_config(OmegaConf.create(plan["config"])) for plan in plans]
    api = BridgeAPI()
    installed = {"megatron_bridge": api.installed_versions()["bridge"], "megatron_core": version("megatron-core")}
    for run in runs:  # before anything is checked: a plan of another release is refused in one line
        check_release(run, installed["megatron_bridge"])
    os.environ.setdefault("RANK", "0")  # the one process checking is rank 0 (Core warns when it cannot tell)
    with tempfile.TemporaryDirectory(prefix="optbench-hf-") as hub:
        stand_ins.install(runs[0].cluster.gpu)
        hf_cache.use(hub)  # before huggingface_hub is imported: it reads its cache folder and offline switch then
        # Imported before warnings are recorded: what Bridge and Core say at import is about themselves, not the plan.
        import megatron.bridge.training.config  # noqa: F401

        return [_check_one(plan, run, api, installed) for plan, run in zip(plans, runs)]


def _check_one(plan: dict[str, Any], run, api, installed: dict[str, str]) -> dict[str, Any]:
    from optbench.engine.bridge.adapter import BridgeSetup, bridge_overrides
    from optbench.releases.versions import container_of

    started = time.perf_counter()
    report: dict[str, Any] = {
        "container": container_of(run).name,
        **installed,
        "gpu": run.cluster.gpu,
        "world_size": plan["world_size"],
    }
    setup = BridgeSetup.from_dict(plan["bridge"])
    report["overrides"] = len(setup.overrides)
    # The plan is the contract the job applies; its overrides must be what this checkout derives from its config.
    report["plan_matches_checkout"] = list(setup.overrides) == bridge_overrides(run)
    stand_ins.install(run.cluster.gpu)
    api.recipe_function(setup.recipe)  # imported before warnings are recorded, as Bridge is
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report.update(_build_and_update(setup, api, run, plan["world_size"]))
    report["warnings"] = megatron_warnings(caught)
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


def _build_and_update(setup, api, run, world_size: int) -> dict[str, Any]:
    from optbench.engine.bridge.adapter import override_items
    from optbench.engine.bridge.readback import read_back
    from optbench.engine.bridge.cpu_check.runtime import update_at
    from optbench.engine.bridge.entry import build_config_container

    try:
        config = build_config_container(setup, api)
    except Exception as err:  # what Bridge raises is the finding
        return {"build": _first_line(err)}
    out: dict[str, Any] = {"build": "ok", "missing": read_back(config, override_items(run))}
    try:
        update_at(config, world_size)
        out["runtime_config_update"] = "ok"
    except Exception as err:
        out["runtime_config_update"] = _first_line(err)
    return out


def megatron_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    """What Megatron Bridge and Core warned about while building and checking the config, each once, in order
    (a deprecated field the plan sets, a combination Megatron-LM's own argument check would refuse)."""
    found = []
    for item in caught:
        if "megatron" in Path(item.filename).parts:
            text = " ".join(str(item.message).split())
            found.append(f"{item.category.__name__}: {text[:300]}")
    return list(dict.fromkeys(found))


def main(argv: list[str] | None = None) -> int:
    from optbench.common.errors import Problem, UserError
    from optbench.common.exits import exit_on_user_error

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", type=Path, nargs="+", help="folders each holding a plan.json")
    parser.add_argument("--out", type=Path, required=True, help="where the JSON list of reports goes (one per folder)")
    args = parser.parse_args(argv)
    with exit_on_user_error(debug=False):
        if args.out.exists() or args.out.is_symlink():  # the launcher names a new file in its own temporary folder
            raise UserError(Problem("--out", f"{args.out} exists; name a new file for the report"))
        args.out.write_text(json.dumps(check(args.folders), indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
