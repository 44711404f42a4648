"""NeMo containers, the Megatron Bridge and Core each holds, and the field names each version accepts.

Data (``optbench/data/bridge``), written by ``tools/bridge_versions.py`` from the tagged sources:

* ``containers.json``: container -> Bridge release (Bridge's ``docs/versions1.json``), the Core that release
  pins (its ``3rdparty/Megatron-LM`` submodule) and the components Bridge's software-versions page lists;
* ``fields-<bridge>.json``: every ConfigContainer section's field names for that Bridge + Core (dataclasses
  with their bases), Muon defaults, and Muon behaviour found in the source.

The adapter asks this module which name a version uses (``muon_use_nesterov`` before Core 0.18,
``muon_nesterov`` after), and checks every override it emits against the version's fields: a field the
version lacks is a one-line error naming the containers that have it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Optional

from optbench.config.schema import RunConfig
from optbench.common.data_files import read_json
from optbench.common.errors import Problem, UserError

DATA = Path(__file__).resolve().parents[1] / "data" / "bridge"


@dataclass(frozen=True)
class Container:
    """One NeMo container and the Megatron versions in it."""

    name: str
    """e.g. nemo:26.06"""
    bridge: str
    """Megatron Bridge release (docs/versions1.json)."""
    core: str
    """Megatron Core the Bridge tag pins (3rdparty/Megatron-LM), e.g. 0.18.0."""
    core_in_container: Optional[str]
    """Megatron Core as Bridge's software-versions page lists it for the container (None: not listed)."""
    runnable: bool
    """False for containers older than our adapter (kept for their published rows)."""
    assumed_from: Optional[str] = None
    """For a container newer than the newest checked one (cluster.unverified_container=true): the checked container
    whose Bridge, Core and presets the plan assumes."""

    @property
    def core_minor(self) -> tuple[int, int]:
        return release_line(self.core)

    @property
    def bridge_minor(self) -> tuple[int, int]:
        return release_line(self.bridge)

    def label(self) -> str:
        if self.assumed_from:
            return (
                f"{self.name} (unverified: planned on {self.assumed_from}'s Megatron Bridge {self.bridge}, "
                f"Megatron Core {self.core})"
            )
        return f"{self.name} (Megatron Bridge {self.bridge}, Megatron Core {self.core})"


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    return read_json("bridge/containers.json", ("containers", "core_main"))


@lru_cache(maxsize=1)
def containers() -> dict[str, Container]:
    """Every container Bridge's documentation maps to a release, newest first."""
    return {
        c["container"]: Container(c["container"], c["bridge"], c["core"], c["core_in_container"], c["runnable"])
        for c in _data()["containers"]
    }


def runnable() -> list[Container]:
    return [c for c in containers().values() if c.runnable]


def core_main() -> dict[str, Any]:
    """Megatron Core's main branch as the data tool read it (options no container holds yet)."""
    return _data()["core_main"]


def release_key(name: str) -> tuple[int, ...] | None:
    """``nemo:26.10.01`` -> (26, 10, 1); None for a name of another form."""
    match = re.fullmatch(r"nemo:(\d\d)\.(\d\d)(?:\.(\d\d))?", name)
    return None if match is None else tuple(int(part or 0) for part in match.groups())


def container_of(run: RunConfig) -> Container:
    """The run's container (cluster.container); an unknown or too old one is a one-line error. A release newer than
    the newest checked one is planned on that one's facts only with cluster.unverified_container=true."""
    name = run.cluster.container
    found = containers().get(name)
    newest = runnable()[0]
    newer = found is None and (release_key(name) or ()) > (release_key(newest.name) or ())
    if run.cluster.unverified_container:
        if not newer:
            what = "a release we checked" if found else "not newer than the newest release we checked"
            raise UserError(
                Problem(
                    "cluster.unverified_container",
                    f"{name} is {what} ({newest.name}); drop cluster.unverified_container",
                )
            )
        return Container(name, newest.bridge, newest.core, None, True, assumed_from=newest.name)
    if newer:
        raise UserError(
            Problem(
                "cluster.container",
                f"'{name}' is newer than the newest release we checked "
                f"({newest.name}); to plan it on {newest.name}'s facts add "
                "cluster.unverified_container=true (the job checks them in the "
                "container; docs/containers.md)",
            )
        )
    if found is None or not found.runnable:
        names = ", ".join(c.name for c in runnable())
        why = (
            "predates Megatron Bridge 0.3 (kept for its published rows only)"
            if found
            else "is not a NeMo container we know"
        )
        raise UserError(Problem("cluster.container", f"'{name}' {why}; choose one of {names}"))
    return found


@lru_cache(maxsize=None)
def fields(bridge: str) -> dict[str, Any]:
    return read_json(f"bridge/fields-{bridge}.json", ("sections",))


def _section_names(bridge: str, section: str, mla: bool) -> frozenset[str]:
    data = fields(bridge)["sections"]
    if section == "model":
        return frozenset(data["model_mla" if mla else "model_gpt"])
    return frozenset(data.get(section, ()))


MAPPING_FIELDS = ("env_vars",)
"""ConfigContainer fields that are dicts of any keys (Bridge 0.6: the environment NVIDIA's bootstrap exports)."""


def has_field(container: Container, key: str, mla: bool = True) -> bool:
    """Whether the container's Bridge + Core has the override key: ``section.field``, or a whole section (NVIDIA's
    GPT-OSS launcher sets ``comm_overlap`` to None)."""
    section, _, name = key.partition(".")
    if not name:
        return section in fields(container.bridge)["container_sections"]
    if section in MAPPING_FIELDS:
        return section in fields(container.bridge)["container_sections"]
    return name in _section_names(container.bridge, section, mla)


def containers_with(key: str, mla: bool = True) -> list[str]:
    return [c.name for c in runnable() if has_field(c, key, mla)]


def behaviour(container: Container, name: str) -> bool:
    return bool(fields(container.bridge)["behaviour"].get(name))


def emerging_optimizers(container: Container) -> str:
    """The Emerging-Optimizers release the container ships (its Bridge's uv.lock pin; tools/bridge_versions.py)."""
    return fields(container.bridge)["provenance"]["emerging_optimizers"]["version"]


def release_line(version: str) -> tuple[int, int]:
    """(major, minor) of a release such as ``0.17.0rc0`` or ``0.3.1``: what every version rule compares."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def emerging_optimizers_line(container: Container) -> tuple[int, int]:
    """(major, minor) of the container's Emerging-Optimizers release."""
    return release_line(emerging_optimizers(container))


def first_with(predicate) -> Optional[Container]:
    """The oldest runnable container for which ``predicate(container)`` holds."""
    matching = [c for c in runnable() if predicate(c)]
    return matching[-1] if matching else None


def missing_fields(run: RunConfig, keys: Iterable[str]) -> list[Problem]:
    """Override keys the run's Bridge + Core has no field for, each naming the containers that have one."""
    container = container_of(run)
    mla = bool(run.model.multi_latent_attention)
    problems = []
    for key in dict.fromkeys(keys):
        if has_field(container, key, mla):
            continue
        having = containers_with(key, mla)
        where = f"{', '.join(having)} have it" if having else "no container up to the newest we know has it"
        problems.append(
            Problem(
                "cluster.container",
                f"{container.label()} has no field {key} (an override optbench would emit); {where}",
            )
        )
    return problems


def check_fields(run: RunConfig, keys: Iterable[str]) -> None:
    problems = missing_fields(run, keys)
    if problems:
        raise UserError(problems)
