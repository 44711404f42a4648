"""What NVIDIA's public release notes say changed in containers newer than the newest one we checked
(``optbench/data/release_notes.csv``, each row with its source): a plan of such a container
(``cluster.unverified_container=true``) prints the rows that apply to its model and GPU, since it is built on the
newest checked release's facts and these are what those facts may miss."""

from __future__ import annotations

from dataclasses import dataclass

from optbench.common.data_files import TEXT, listed, read_table
from optbench.releases.versions import release_key

COLUMNS = {
    "container": TEXT,
    "bridge": TEXT,
    "released": TEXT,
    "models": TEXT,
    "gpus": TEXT,
    "topic": TEXT,
    "change": TEXT,
    "source": TEXT,
}


@dataclass(frozen=True)
class ReleaseNote:
    """One change a release's public notes state."""

    container: str
    bridge: str
    topic: str
    change: str
    source: str


def notes_for(container: str, assumed_from: str, model: str, gpu: str) -> list[ReleaseNote]:
    """The notes of every release after ``assumed_from`` up to ``container`` that apply to ``model`` on ``gpu``
    (``*`` applies to every one), oldest first."""
    low, high = release_key(assumed_from) or (), release_key(container) or ()
    found = []
    for row in read_table("release_notes.csv", COLUMNS):
        key = release_key(row["container"]) or ()
        if not low < key <= high:
            continue
        if not (listed(row["models"], model) and listed(row["gpus"], gpu)):
            continue
        found.append(ReleaseNote(row["container"], row["bridge"], row["topic"], row["change"], row["source"]))
    return sorted(found, key=lambda n: release_key(n.container) or ())
