"""``CHECK=bridge``: build a plan with its container's real Megatron Bridge and Core on this CPU before it runs.

Our validation mirrors Bridge's and Megatron Core's checks (releases/moe_rules.py, graph_rules.py, the layout
rules), and CI runs every recipe and every ``make search`` layout through each release's real Bridge. A run's
own overrides are checked here: the plan is written to a temporary folder and
``optbench/engine/bridge/cpu_check/plan_check.py`` runs it in the Bridge environment of the plan's container
(``make bridge-env``; :mod:`optbench.engine.bridge.cpu_check.environments`), which builds the ConfigContainer as the
job would, reads every override back and runs Bridge's ``runtime_config_update`` at the plan's world size. A
refusal is one line naming what Bridge said (exit 2), and ``make pretrain`` then launches nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from optbench.engine.bridge.cpu_check.environments import Target, targets
from optbench.common.redact import clipped
from optbench.config.schema import RunConfig
from optbench.common.errors import Problem, UserError
from optbench.common.io import atomic_write_json
from optbench.runs.plan_file import PLAN_FILE
from optbench.plan.types import Plan
from optbench.releases.versions import container_of

CHECKS = ("bridge",)
"""What CHECK= may name."""
TIMEOUT_S = 900
"""A check took 7-28 s on 2 cores (importing Bridge and Core is most of it); past this it is stuck."""
PER_PLAN_S = 60
"""What each further plan of one process may add to that (about a second each on 2 cores)."""
SCRIPT = Path(__file__).resolve().parents[1] / "src" / "optbench" / "engine" / "bridge" / "cpu_check" / "plan_check.py"


def wanted_check(value: str) -> bool:
    """Whether CHECK= asks for the Bridge check ('' = no check); anything else is a one-line error."""
    value = value.strip()
    if value and value not in CHECKS:
        raise UserError(
            Problem(
                "CHECK",
                f"'{clipped(value, 40)}' is not a check; CHECK=bridge builds the plan with its "
                "container's real Megatron Bridge and Core on this CPU",
            )
        )
    return bool(value)


def environment_for(run: RunConfig) -> Target:
    """The Bridge environment of the run's container, built on this machine; a one-line refusal otherwise."""
    container = container_of(run)
    target = next((t for t in targets() if t.name == container.name), None)
    if target is None:
        raise UserError(
            Problem(
                "CHECK",
                f"no Megatron Bridge environment is defined for {container.name}; "
                "`python src/optbench/engine/bridge/cpu_check/environments.py list` names those there are",
            )
        )
    if not target.installed:
        raise UserError(
            Problem(
                "CHECK",
                f"the Megatron Bridge {target.bridge} environment of {container.name} is not "
                "built on this machine; run `make bridge-env` (make setup does) and check again",
            )
        )
    return target


def check_plans(items: Sequence[tuple[RunConfig, Plan]]) -> list[dict[str, Any]]:
    """Each (run, plan) through its container's real Bridge: the reports, in order. The plans of one container
    share one process (Bridge and Core are imported once: most of a check's time); each report's ``wall_s`` is
    that process's time. Raises UserError when a check cannot run at all (no environment, no report)."""
    for run, _ in items:
        if run.engine != "megatron_bridge":
            raise UserError(
                Problem(
                    "CHECK",
                    f"CHECK=bridge checks a Megatron Bridge plan and this run's engine is "
                    f"{run.engine}; drop CHECK or plan a megatron_bridge recipe",
                )
            )
    groups: dict[str, list[int]] = {}
    for index, (run, _) in enumerate(items):
        groups.setdefault(container_of(run).name, []).append(index)
    group_targets = [
        environment_for(items[indices[0]][0]) for indices in groups.values()
    ]  # every one refused before any runs
    print(
        f"  checking {len(items)} plan(s) with the real Megatron Bridge and Core of {', '.join(groups)} on this CPU "
        f"(importing them takes most of the 20-60 s)",
        flush=True,
    )
    # One process per container, side by side (each is a subprocess, mostly importing): a sweep over two releases
    # takes about the time of one on 2 cores.
    with ThreadPoolExecutor(max_workers=max(1, min(len(groups), os.cpu_count() or 1))) as pool:
        done = [
            pool.submit(_run_check, target, [items[i] for i in indices])
            for target, indices in zip(group_targets, groups.values())
        ]
        reports: list[dict[str, Any]] = [{} for _ in items]
        for indices, future in zip(groups.values(), done):
            for index, report in zip(indices, future.result()):
                reports[index] = report
    return reports


def _run_check(target: Target, items: Sequence[tuple[RunConfig, Plan]]) -> list[dict[str, Any]]:
    """The reports of one container's plans, from one run of plan_check.py in its Bridge environment."""
    debug = any(run.debug for run, _ in items)
    timeout = TIMEOUT_S + PER_PLAN_S * (len(items) - 1)
    with tempfile.TemporaryDirectory(prefix="optbench-check-") as folder:
        folders = []
        for index, (_, plan) in enumerate(items):
            folders.append(Path(folder) / str(index))
            atomic_write_json(folders[-1] / PLAN_FILE, plan.to_json())
        out = Path(folder) / "reports.json"
        started = time.perf_counter()
        try:
            done = subprocess.run(
                [str(target.python), str(SCRIPT), *map(str, folders), "--out", str(out)],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=target.environment(),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise UserError(
                Problem(
                    "CHECK",
                    f"the Bridge check of {target.name} did not finish in {timeout} s; "
                    "add debug=true to see where it stops",
                )
            ) from None
        if debug:
            sys.stderr.write(done.stderr)
        if done.returncode != 0 or not out.is_file():
            raise UserError(Problem("CHECK", _failure_line(done.stderr, target.name)))
        reports = json.loads(out.read_text())
    wall = round(time.perf_counter() - started, 1)
    return [{**report, "wall_s": wall} for report in reports]


def check_with_bridge(run: RunConfig, plan: Plan) -> dict[str, Any]:
    """Run the plan through its container's real Bridge; print what it found; raise UserError if Bridge refuses."""
    [report] = check_plans([(run, plan)])
    for line in report_lines(report):
        print(line)
    problem = refusal(report)
    if problem:
        raise UserError(Problem("bridge", problem))
    return report


def _failure_line(stderr: str, container: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    if errors:  # the check's own one-line refusal (a plan of another release, say)
        return errors[-1]
    last = lines[-1][:300] if lines else "no output"
    return f"the Bridge check could not run in {container}'s environment ({last}); add debug=true for its output"


def versions_text(report: dict[str, Any]) -> str:
    """The container and the Bridge and Core a report was made with."""
    return f"{report['container']} (Megatron Bridge {report['megatron_bridge']}, Core {report['megatron_core']})"


def outcome_text(report: dict[str, Any]) -> str:
    """What Bridge did with the plan, in one line."""
    if report["build"] != "ok":
        return f"did not build: {report['build']}"
    landed = report["overrides"] - len(report["missing"])
    update = report["runtime_config_update"]
    return (
        f"{landed} of {report['overrides']} overrides read back; runtime_config_update "
        + ("passed" if update == "ok" else f"refused: {update}")
        + f" at world size {report['world_size']} on {report['gpu']}"
    )


def report_lines(report: dict[str, Any]) -> list[str]:
    """What the check found, as plan lines."""
    lines = [
        f"  bridge check {versions_text(report)} on this CPU ({report['wall_s']} s; Transformer Engine and CUDA "
        f"are stand-ins): {outcome_text(report)}"
    ]
    lines += [f"              warned: {warning}" for warning in report["warnings"]]
    return lines


def checked_lines(names: Sequence[str], reports: Sequence[dict[str, Any]], noun: str) -> list[str]:
    """Several plans' reports (a sweep's points, a search's best layouts, each named): per container a header, one
    line per plan, and each Megatron warning once with the plans it names (most are the preset's, at every plan)."""
    lines = []
    width = max(len(name) for name in names)
    for versions in dict.fromkeys(versions_text(r) for r in reports):
        group = [(name, r) for name, r in zip(names, reports) if versions_text(r) == versions]
        plans = f"{len(group)} plan{'s' if len(group) > 1 else ''}"
        lines.append(
            f"Bridge check: {versions} on this CPU, {plans} in {group[0][1]['wall_s']} s "
            "(Transformer Engine and CUDA are stand-ins)"
        )
        lines += [
            f"  {'refused' if refusal(r) else 'passed':<8} {name:<{width}}  {outcome_text(r)}" for name, r in group
        ]
        warned: dict[str, list[str]] = {}
        for name, report in group:
            for warning in report["warnings"]:
                warned.setdefault(warning, []).append(name)
        for warning, named in warned.items():
            which = (
                "" if len(group) == 1 else f" (every {noun})" if len(named) == len(group) else f" ({', '.join(named)})"
            )
            lines.append(f"  warned{which}: {warning}")
    return lines


def refusal(report: dict[str, Any]) -> str | None:
    """The one line a refusing report comes to (None when Bridge took the plan)."""
    bridge = f"Megatron Bridge {report['megatron_bridge']} ({report['container']})"
    if not report["plan_matches_checkout"]:
        return "the plan's overrides are not what this checkout derives from its config; plan again"
    if report["build"] != "ok":
        return f"{bridge} could not build this plan's config: {report['build']}"
    if report["missing"]:
        first = report["missing"][0]
        got = first.get("error") or f"it holds {first.get('actual')!r}"
        return (
            f"{len(report['missing'])} override(s) did not land in {bridge}'s config; first {first['field']}"
            f"={first['expected']!r}: {got}"
        )
    if report["runtime_config_update"] != "ok":
        return (
            f"{bridge} refuses this plan at world size {report['world_size']}: {report['runtime_config_update']}; "
            "change the setting it names (plan.json bridge.overrides shows each Bridge name we set)"
        )
    return None
