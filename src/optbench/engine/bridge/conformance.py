"""The job's check of its container before step 1: ``conformance.json`` in the run folder (issue 80 item 2).

A plan names a Megatron Bridge release and the exact fields it sets. In the container the job reads what is really
there, before anything trains:

* the versions of Megatron Bridge, Megatron Core and Emerging-Optimizers installed, beside the plan's (for an
  unverified container, the newest checked release it assumed);
* the recipe function the plan calls;
* every field the plan's overrides set, on the config the recipe built: present, and of a compatible kind (a
  number where a number was planned, a flag where a flag was);
* after Bridge's own override processing: each value landed, and the optimizer is the plan's.

It writes the outcome (rank 0 only: every rank runs the same check) and stops with one line when a field the plan
sets is gone, the recipe function is, or the optimizer is not the plan's: a run that silently dropped a setting
would not be the run the plan priced. Kinds that differ are listed, not fatal: Bridge's override processing
converts text to enums and dtypes, which this check cannot judge. Where the container has its perf scripts
(``$OPTBENCH_NVIDIA_SCRIPTS``, else Megatron Bridge's source in the image), NVIDIA's executed preset of the same
setup is rebuilt by NVIDIA's own code (:mod:`optbench.engine.bridge.nvidia_preset`) and each field the plan sets to
another value is listed: never fatal, since a plan may depart from NVIDIA on purpose (the plan says which).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from optbench.common.errors import Problem, UserError
from optbench.common.io import atomic_write_json
from optbench.config.schema import RunConfig
from optbench.engine.bridge import nvidia_preset
from optbench.engine.bridge.readback import comparable, lookup, read_back
from optbench.releases import presets
from optbench.releases.versions import Container, emerging_optimizers
from optbench.runs import CONFORMANCE_FILE

PACKAGES = {"bridge": "megatron-bridge", "core": "megatron-core", "emerging_optimizers": "emerging-optimizers"}
"""Our name of each component -> its distribution name."""
OPTIMIZER_KEY = "optimizer.optimizer"


def installed_versions() -> dict[str, str | None]:
    """The version of each of :data:`PACKAGES` installed here (None: not installed)."""
    found: dict[str, str | None] = {}
    for name, distribution in PACKAGES.items():
        try:
            found[name] = version(distribution)
        except PackageNotFoundError:
            found[name] = None
    return found


def planned_versions(container: Container) -> dict[str, str | None]:
    """What the plan assumed of each component (for an unverified container: its assumed release's)."""
    return {"bridge": container.bridge, "core": container.core, "emerging_optimizers": emerging_optimizers(container)}


def parse_override(text: str) -> tuple[str, Any, bool]:
    """(dotted key, typed value, whether Hydra may add the key: ``+``/``++``) of one override string, read by Hydra's
    own override parser, as Bridge's ``process_config_with_overrides`` reads it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    override = OverridesParser.create().parse_overrides([text])[0]
    return override.key_or_group, override.value(), override.is_add() or override.is_force_add()


def kind(value: Any) -> str | None:
    """A value's kind for the compatibility check: bool, number, text, list, mapping; None where it cannot say."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return None  # None, enums, dtypes: Bridge's override processing converts text to them


@dataclass
class Conformance:
    """What the job found in its container, written as conformance.json."""

    container: str
    planned: dict[str, str | None]
    installed: dict[str, str | None]
    unverified: bool
    recipe: str
    fields_checked: int = 0
    missing: list[dict[str, Any]] = field(default_factory=list)
    """Fields the plan sets that the container's config lacks: the run stops."""
    kind_differs: list[dict[str, Any]] = field(default_factory=list)
    """Fields whose planned value is of another kind than the container's default: listed, not fatal."""
    not_landed: list[dict[str, Any]] = field(default_factory=list)
    optimizer: dict[str, Any] = field(default_factory=dict)
    nvidia_preset: dict[str, Any] = field(default_factory=lambda: {"status": "not rebuilt"})
    """NVIDIA's executed preset of the same setup, rebuilt from the container's perf scripts (:func:`with_nvidia`)."""
    stop: str | None = None
    """Why the job stopped before step 1 (None: it went on)."""

    @property
    def status(self) -> str:
        if self.stop:
            return "stopped"
        return "differs" if self.kind_differs or self.not_landed else "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "stop": self.stop,
            "container": self.container,
            "unverified": self.unverified,
            "planned_versions": self.planned,
            "installed_versions": self.installed,
            "versions_differ": sorted(
                k
                for k in self.planned
                if self.installed.get(k) and self.planned[k] and self.installed[k].split("+")[0] != self.planned[k]
            ),
            "recipe": self.recipe,
            "fields_checked": self.fields_checked,
            "missing_fields": self.missing,
            "kind_differs": self.kind_differs,
            "values_not_landed": self.not_landed,
            "optimizer": self.optimizer,
            "nvidia_preset": self.nvidia_preset,
        }


def check_fields(report: Conformance, config: Any, overrides: list[str]) -> None:
    """Every field ``overrides`` set, on the config the recipe built: present, and of a compatible kind."""
    for text in overrides:
        key, value, may_add = parse_override(text)
        report.fields_checked += 1
        try:
            current = lookup(config, key)
        except (AttributeError, KeyError) as err:
            parent = key.rpartition(".")[0]
            if may_add and parent and isinstance(_lookup_or_none(config, parent), dict):
                continue  # ++env_vars.X=...: a key Hydra adds to a mapping
            report.missing.append({"field": key, "planned": comparable(value), "error": f"no such field ({err})"})
            continue
        have, want = kind(current), kind(value)
        if None not in (have, want) and have != want and not annotation_allows(config, key, want):
            report.kind_differs.append(
                {
                    "field": key,
                    "planned": comparable(value),
                    "container_default": comparable(current),
                    "container_kind": have,
                    "planned_kind": want,
                }
            )


ANNOTATION_WORDS = {
    "bool": ("bool",),
    "number": ("int", "float"),
    "text": ("str", "literal"),
    "list": ("list", "tuple", "sequence"),
    "mapping": ("dict", "mapping"),
}
"""Words in a dataclass field's annotation that admit a value of each kind."""


def annotation_allows(config: Any, key: str, wanted: str) -> bool:
    """Whether the field's declared type admits a value of kind ``wanted`` (``Union[str, list[str]]`` admits both);
    False where the field declares nothing readable."""
    parent, _, name = key.rpartition(".")
    owner = _lookup_or_none(config, parent) if parent else config
    declared = {f.name: f.type for f in dataclasses.fields(owner)} if dataclasses.is_dataclass(owner) else {}
    annotation = str(declared.get(name, "")).lower()
    return "any" in annotation.split("[")[0] or any(word in annotation for word in ANNOTATION_WORDS[wanted])


def _lookup_or_none(config: Any, key: str) -> Any:
    try:
        return lookup(config, key)
    except (AttributeError, KeyError):
        return None


def check_built(report: Conformance, config: Any, overrides: list[str]) -> None:
    """After Bridge's override processing: each value landed, and the optimizer is the plan's."""
    items = []
    for text in overrides:
        key, value, may_add = parse_override(text)
        if not may_add:
            items.append((key, value))
    report.not_landed = [m for m in read_back(config, items) if "error" not in m]
    planned = dict(items).get(OPTIMIZER_KEY)
    built = _lookup_or_none(config, OPTIMIZER_KEY)
    report.optimizer = {"planned": planned, "built": comparable(built)}
    if planned is not None and comparable(built) != comparable(planned):
        report.stop = (
            f"{OPTIMIZER_KEY}: the plan runs {planned} but this container's Megatron Bridge built "
            f"{built!r}; nothing was trained"
        )


def with_nvidia(run: RunConfig, config: Any, overrides: list[str]) -> dict[str, Any]:
    """NVIDIA's executed preset of ``run``'s own case (model, GPU, precision, optimizer, GPU count) rebuilt from this
    container's perf scripts, and each field ``overrides`` set that NVIDIA's configuration has at another value.
    Never raises: NVIDIA's code of a release we never checked may fail, and that is recorded in one line."""
    from optbench.config.layout import gpus_per_node

    scripts = nvidia_preset.find_scripts()
    if scripts is None:
        places = ", ".join([f"${nvidia_preset.SCRIPTS_VARIABLE}", *nvidia_preset.SCRIPTS_PLACES])
        return {"status": "no perf scripts in this container", "looked_in": places}
    model, gpu, precision, optimizer = presets.preset_key(run).split("/")
    if precision not in nvidia_preset.COMPUTE_DTYPES:
        return {"status": f"NVIDIA's scripts have no {precision} case", "scripts": str(scripts)}
    case = nvidia_preset.case_args(model, gpu, precision, optimizer, run.parallel.num_gpus, gpus_per_node(run))
    try:
        nvidia, built = nvidia_preset.rebuilt(case, optimizer, scripts)
    except Exception as err:  # noqa: BLE001 - any failure of NVIDIA's code is reported, the run goes on
        line = f"{type(err).__name__}: {err}".splitlines()[0][:300]
        return {"status": "failed", "scripts": str(scripts), "case": case, "error": line}
    reasons = {**presets.OURS, **presets.departure_reasons(run)}  # our documented departures, why each
    differs = []
    for text in overrides:
        key, _, may_add = parse_override(text)
        ours, theirs = comparable(_lookup_or_none(config, key)), comparable(_lookup_or_none(nvidia, key))
        if may_add or ours == theirs or (key in presets.NONE_IS_EMPTY and ours in (None, []) and theirs in (None, [])):
            continue
        reason = reasons.get(key) or presets.derived_reason(key, run.intent, False, run.optimizer.name)
        differs.append({"field": key, "plan": ours, "nvidia": theirs, **({"reason": reason} if reason else {})})
    return {
        "status": "rebuilt",
        "scripts": str(scripts),
        "case": case,
        "launcher_optimizer": built,
        "fields_compared": len(overrides),
        "differs": differs,
        "differs_unexplained": sum("reason" not in d for d in differs),
    }


def is_writer() -> bool:
    """Whether this process writes the run folder's files: global rank 0 (torchrun's RANK, else Slurm's)."""
    return os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) == "0"


def finish(report: Conformance, folder: Path) -> None:
    """Write conformance.json (rank 0), then stop in one line if the check found the run would not be the plan's."""
    path = folder / CONFORMANCE_FILE
    if is_writer():
        atomic_write_json(path, report.to_json())
    if report.stop:
        raise UserError(Problem("cluster.container", f"{report.stop} ({path}; docs/containers.md)"))


def stop_for_missing(report: Conformance) -> None:
    """Set the stop for fields the container lacks: one line naming the first and the count."""
    if not report.missing:
        return
    first = report.missing[0]["field"]
    more = f" and {len(report.missing) - 1} more" if len(report.missing) > 1 else ""
    found = report.installed.get("bridge") or "no megatron-bridge"
    report.stop = (
        f"this container's Megatron Bridge ({found}) has no field {first}{more}, which the plan sets "
        f"(planned on Megatron Bridge {report.planned['bridge']}); nothing was trained: plan again for "
        "this container or drop the setting"
    )
