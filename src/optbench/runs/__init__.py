"""Run identity and the resolved config a run is launched with.

A run lives in ``<results_dir>/runs/<run_id>/``. Its ``config.yaml`` is the fully resolved,
typed config (secrets redacted) that every engine entry point reads back with
:func:`load_resolved_config`, so a job on a cluster runs exactly what was planned here.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from optbench.config.serialize import run_config_to_dict, to_run_config
from optbench.config.schema import RunConfig
from optbench.common.errors import UserError
from optbench.common.io import atomic_write_text
from optbench.common.redact import redact_config, redact_text, run_secrets
from optbench.common.yaml_aliases import yaml_alias_used

CONFORMANCE_FILE = "conformance.json"
"""What a Bridge job found in its container before step 1 (:mod:`optbench.engine.bridge.conformance`)."""
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""One folder name: never a path, never '..', at most 128 characters."""


def new_run_id(run: RunConfig, now: _dt.datetime | None = None) -> str:
    """``<recipe>-<YYYYmmdd-HHMMSS>`` in UTC: sortable, unique per second, safe in paths and job names."""
    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y%m%d-%H%M%S")
    return f"{run.recipe}-{stamp}"


def checked_run_id(run_id: str) -> str:
    """``run_id`` if it can name a folder and a job, else a one-line error."""
    if not RUN_ID_PATTERN.match(run_id):
        raise UserError("use letters, digits, '.', '_' and '-' only (it names a directory and a job)", "run_id")
    return run_id


def with_run_id(run: RunConfig) -> RunConfig:
    """Name a local-engine run as it starts: ``run`` with its run id fixed (a new one unless the user gave one).

    A Bridge job's run id is fixed earlier, when the run is resolved (:func:`optbench.resolve.resolve`).
    """
    run_id = checked_run_id(run.run_id if run.run_id is not None else new_run_id(run))
    return run if run_id == run.run_id else dataclasses.replace(run, run_id=run_id)


def run_dir(run: RunConfig) -> Path:
    """``<results_dir>/runs/<run_id>`` of a run whose id is fixed."""
    if run.run_id is None:
        raise ValueError("run_dir needs a run id: resolve the run (Bridge) or start it (local engine) first")
    return Path(run.results_dir) / "runs" / checked_run_id(run.run_id)


def _escaped(node):
    """Text holding "${" escaped, so that reading the YAML back gives the text, not an interpolation."""
    if isinstance(node, str):
        return node.replace("${", "\\${")
    if isinstance(node, dict):
        return {key: _escaped(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_escaped(value) for value in node]
    return node


def resolved_config_yaml(run: RunConfig) -> str:
    """The run config as YAML with secrets redacted (read back by :func:`load_resolved_config` as the same values)."""
    return OmegaConf.to_yaml(OmegaConf.create(_escaped(redact_config(run_config_to_dict(run)))))


def save_resolved_config(run: RunConfig, path: str | Path) -> Path:
    """Atomically write the resolved config (what ``load_resolved_config`` reads back)."""
    return atomic_write_text(path, redact_text(resolved_config_yaml(run), run_secrets(run)))


MAX_CONFIG_BYTES = 4 << 20
"""A resolved config is a few KB (a 1024-layer pipeline layout included): anything larger was not written by us."""


def load_config_yaml(source: Path, field: str = "config") -> DictConfig | ListConfig:
    """A config.yaml as OmegaConf reads it, refusing what could make reading it unbounded: more than
    MAX_CONFIG_BYTES, or YAML anchors and aliases (a few lines of aliases expand to billions of nodes)."""
    if not source.is_file() or source.stat().st_size > MAX_CONFIG_BYTES:
        raise UserError(
            f"{source} is not a config.yaml optbench wrote (not a file, or over {MAX_CONFIG_BYTES >> 20} MB)", field
        )
    try:
        text = source.read_text(encoding="utf-8")
        if yaml_alias_used(text):
            raise UserError(f"{source} uses YAML aliases, which optbench never writes; restore the file", field)
        return OmegaConf.load(source)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - YAML syntax, binary bytes, a list at the top
        reason = " ".join(str(err).split())[:160]
        raise UserError(f"{source} is not a readable config.yaml ({type(err).__name__}: {reason})", field) from err


def load_resolved_config(path: str | Path) -> RunConfig:
    """Read a config written by :func:`save_resolved_config` back into the typed schema."""
    source = Path(path)
    if not source.is_file():
        raise UserError(f"no resolved config at {source}", "config")
    loaded = load_config_yaml(source)
    if not isinstance(loaded, DictConfig):
        raise UserError(f"{source} holds a {type(loaded).__name__}, not a config mapping", "config")
    return to_run_config(loaded)
