"""In-container entry point: ``python -m optbench.engine.bridge.entry <results>/runs/<run_id>/config.yaml``.

Runs on every rank inside the NeMo container (one Slurm task per GPU, or torchrun on one machine):

1. read the resolved config the launcher wrote (:func:`optbench.runs.load_resolved_config`) and the
   plan.json beside it (:func:`optbench.runs.plan_file.read_plan`: its format version is checked);
2. check that this container's Megatron Bridge is the release the plan was made for (one line if not),
   and take the Bridge recipe call and overrides the plan recorded (the ``bridge`` section
   :func:`optbench.engine.bridge.adapter.bridge_setup` wrote): what `make plan` showed is what runs;
3. call the recipe function, put in the mixed-precision preset and any missing section, check every field the
   plan sets against that config, apply the overrides with Bridge's own ``process_config_with_overrides`` and
   read them back; ``conformance.json`` in the run folder says what was found, and a field that is gone or an
   optimizer that is not the plan's stops the job in one line (:mod:`optbench.engine.bridge.conformance`);
4. register :class:`optbench.engine.bridge.callback.MetricsCallback` and call Bridge's ``pretrain`` with
   its GPT ``forward_step``.

Kept thin on purpose: every Bridge call goes through :class:`BridgeAPI`, which tests replace with a
fake, because Bridge itself cannot be imported outside the container. The job script runs this file
by path (``python <checkout>/src/optbench/engine/bridge/entry.py``), so the container needs no install of
optbench; run that way, it puts ``<checkout>/src`` on ``sys.path`` first.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

if __package__ in (None, ""):  # run by path: make the package importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from optbench.engine.bridge.adapter import SECTIONS_CREATED_IF_MISSING, BridgeRecipe, BridgeSetup  # noqa: E402
from optbench.engine.bridge.callback import MetricsCallback  # noqa: E402
from optbench.engine.bridge import conformance  # noqa: E402
from optbench.config.schema import RunConfig  # noqa: E402
from optbench.common.errors import Problem, UserError  # noqa: E402
from optbench.common.exits import exit_on_user_error  # noqa: E402
from optbench.runs.plan_file import read_plan  # noqa: E402
from optbench.releases.versions import container_of  # noqa: E402
from optbench.runs import load_resolved_config  # noqa: E402


class BridgeAPI:
    """The few Megatron Bridge functions the entry point calls, imported when first used."""

    def recipe_function(self, recipe: BridgeRecipe) -> Callable[..., Any]:
        return getattr(importlib.import_module(recipe.module), recipe.function)

    def mixed_precision(self, preset: str) -> Any:
        from megatron.bridge.training.mixed_precision import get_mixed_precision_config

        return get_mixed_precision_config(preset)

    def new_section(self, name: str) -> Any:
        if name == "comm_overlap":
            from megatron.bridge.training.comm_overlap import CommOverlapConfig

            return CommOverlapConfig(tp_comm_overlap=False)
        raise KeyError(name)

    def apply_overrides(self, config: Any, overrides: Sequence[str]) -> Any:
        from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

        return process_config_with_overrides(config, cli_overrides=list(overrides))

    def callback_manager(self) -> Any:
        from megatron.bridge.training.callbacks import CallbackManager

        return CallbackManager()

    def installed_versions(self) -> dict[str, str | None]:
        """Megatron Bridge's, Core's and Emerging-Optimizers' versions installed here (None: not installed)."""
        return conformance.installed_versions()

    def pretrain(self, config: Any, callbacks: Any) -> None:
        from megatron.bridge.training.gpt_step import forward_step
        from megatron.bridge.training.pretrain import pretrain

        pretrain(config, forward_step, callbacks=callbacks)


def accepted_kwargs(function: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``function`` takes, read from its real signature: Bridge 0.6's ``kimi_k2_pretrain_config``
    is an alias of a flat recipe that takes none (``optimizer_type=`` would raise TypeError); the optimizer is then
    set by the overrides alone (the plan's optimizer section emits every field either optimizer needs)."""
    parameters = inspect.signature(function).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(kwargs)
    return {key: value for key, value in kwargs.items() if key in parameters}


def base_config(setup: BridgeSetup, api: BridgeAPI, function: Callable[..., Any] | None = None) -> Any:
    """Recipe function -> mixed-precision preset -> missing sections: the config the overrides then apply to."""
    function = function or api.recipe_function(setup.recipe)
    config = function(**accepted_kwargs(function, setup.recipe.kwargs))
    config.mixed_precision = api.mixed_precision(setup.mixed_precision)
    for name in SECTIONS_CREATED_IF_MISSING:
        if getattr(config, name) is None:
            setattr(config, name, api.new_section(name))
    return config


def build_config_container(setup: BridgeSetup, api: BridgeAPI) -> Any:
    """Recipe function -> mixed-precision preset -> missing sections -> overrides (Bridge's mechanism)."""
    return api.apply_overrides(base_config(setup, api), setup.overrides)


def checked_config(
    run: RunConfig, setup: BridgeSetup, api: BridgeAPI, folder: Path, installed: dict[str, str | None]
) -> Any:
    """:func:`build_config_container` with the container checked at each stage (``installed``: the versions
    :meth:`BridgeAPI.installed_versions` read); conformance.json in ``folder``."""
    container = container_of(run)
    report = conformance.Conformance(
        container=container.name,
        planned=conformance.planned_versions(container),
        installed=installed,
        unverified=bool(container.assumed_from),
        recipe=f"{setup.recipe.module}.{setup.recipe.function}",
    )
    try:
        function = api.recipe_function(setup.recipe)
    except (ImportError, AttributeError) as err:
        report.stop = f"this container's Megatron Bridge has no recipe {report.recipe} ({err}); nothing was trained"
        conformance.finish(report, folder)
    config = base_config(setup, api, function)
    conformance.check_fields(report, config, list(setup.overrides))
    conformance.stop_for_missing(report)
    if report.stop:
        conformance.finish(report, folder)
    config = api.apply_overrides(config, setup.overrides)
    conformance.check_built(report, config, list(setup.overrides))
    if conformance.is_writer() and not report.stop:
        report.nvidia_preset = conformance.with_nvidia(run, config, list(setup.overrides))
    conformance.finish(report, folder)
    for item in report.kind_differs:
        print(
            f"note: {item['field']}: planned {item['planned']!r} ({item['planned_kind']}), this container's "
            f"default is a {item['container_kind']} (conformance.json)",
            flush=True,
        )
    return config


def check_release(run: RunConfig, installed: str | None) -> None:
    """The plan's container must be the one the job runs in: its Bridge version decides every field name. A plan of
    an unchecked container (cluster.unverified_container=true) assumed the newest checked one's Bridge: the job says
    what it found instead, and Bridge's own override processing then stops on any field the plan sets that is gone."""
    planned = container_of(run)
    found = (installed or "").split("+")[0]
    if planned.assumed_from and installed:
        print(
            f"note: unverified container {planned.name}: it has Megatron Bridge {installed}; the plan assumed "
            f"{planned.bridge} ({planned.assumed_from}'s)",
            flush=True,
        )
        return
    if found != planned.bridge:
        raise UserError(
            Problem(
                "cluster.container",
                f"the plan was made for {planned.name} (Megatron Bridge {planned.bridge}) but this environment has "
                f"{'Megatron Bridge ' + installed if installed else 'no megatron-bridge'}; run the job in the "
                f"{planned.name} image, or plan again with cluster.container=<the image it runs in>",
            )
        )


def run_bridge(config_path: Path, api: Optional[BridgeAPI] = None, callback: Optional[MetricsCallback] = None) -> int:
    """Train the run described by ``config_path`` and the plan.json beside it with Megatron Bridge."""
    api = api or BridgeAPI()
    run = load_resolved_config(config_path)
    plan = read_plan(config_path.parent)
    installed = api.installed_versions()
    check_release(run, installed["bridge"])
    config = checked_config(run, BridgeSetup.from_dict(plan["bridge"]), api, config_path.parent, installed)
    manager = api.callback_manager()
    (callback or MetricsCallback(run)).register(manager)
    api.pretrain(config, manager)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m optbench.engine.bridge.entry", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "config", type=Path, help="the resolved config.yaml the launcher wrote (its plan.json beside it)"
    )
    args = parser.parse_args(argv)
    with exit_on_user_error(debug=False):
        return run_bridge(args.config)


if __name__ == "__main__":
    raise SystemExit(main())
