"""Upstream issues that change what a run means, where they bite (``optbench/data/known_issues.csv``): each row names
its component, the containers it affects (space-separated names, ``*``, or ``unverified``: a container newer than the
newest checked one, whose code nobody here read), the models, GPUs, precisions and optimizers it applies to, the
condition (``any`` or ``resume``), what goes wrong, its source and how the affected containers were established.
``make plan`` prints those that apply to a Megatron Bridge run as notes (plan.json ``bridge.known_issues``)."""

from __future__ import annotations

from dataclasses import dataclass

from optbench.common.data_files import TEXT, Column, listed, read_table
from optbench.config.schema import RunConfig
from optbench.releases.versions import container_of

COLUMNS = {
    "id": TEXT,
    "component": TEXT,
    "containers": TEXT,
    "models": TEXT,
    "gpus": TEXT,
    "precisions": TEXT,
    "optimizers": TEXT,
    "condition": Column(choices=("any", "resume")),
    "effect": TEXT,
    "source": TEXT,
    "evidence": TEXT,
}


@dataclass(frozen=True)
class KnownIssue:
    """One upstream issue that applies to a run."""

    id: str
    effect: str
    source: str
    evidence: str


def issues_for(run: RunConfig) -> list[KnownIssue]:
    """The known issues that apply to ``run`` (a Megatron Bridge run), in file order."""
    container = container_of(run)
    found = []
    for row in read_table("known_issues.csv", COLUMNS):
        where = row["containers"]
        if not (where == "*" or (where == "unverified" and container.assumed_from) or container.name in where.split()):
            continue
        if not all(
            listed(row[column], value)
            for column, value in (
                ("models", run.model.name),
                ("gpus", run.cluster.gpu),
                ("precisions", run.precision.name),
                ("optimizers", run.optimizer.name),
            )
        ):
            continue
        if row["condition"] == "resume" and not run.resume:
            continue
        found.append(KnownIssue(row["id"], row["effect"], row["source"], row["evidence"]))
    return found
