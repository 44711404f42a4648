"""wandb for optbench runs: offline by default, one group per comparison, and a reader for offline runs.

* Runs are written under ``<results_dir>/wandb/`` (wandb adds ``wandb/`` to the ``dir`` it is given,
  so the offline run directory is ``<results_dir>/wandb/offline-run-<time>-<run_id>/``); upload them
  later with ``wandb sync <that directory>``.
* group = ``logger.wandb_group`` or ``<model>-<gpu>-<precision>``, so a Muon run and its AdamW twin
  share a group; job_type = ``pretrain``; tags = model, optimizer, gpu, precision and
  ``logger.wandb_tags``; name and id = the run id (a resumed run continues the same id).
* wandb 0.31 keeps an offline run's history and summary only in its binary ``run-<id>.wandb`` file
  (a LevelDB-style record log of protobuf ``Record`` messages); :func:`read_offline_run` decodes it so
  tests and reports can check what wandb holds without network access.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

from optbench.config.schema import RunConfig
from optbench.common.errors import UserError

JOB_TYPE = "pretrain"


def wandb_root(run: RunConfig) -> Path:
    """The folder wandb writes under (``<results_dir>/wandb``)."""
    return Path(run.results_dir) / "wandb"


def wandb_group(run: RunConfig, gpu: str, precision: str) -> str:
    """The comparison a run belongs to: the configured group, else ``<model>-<gpu>-<precision>``."""
    return run.logger.wandb_group or f"{run.model.name}-{gpu}-{precision}"


def wandb_tags(run: RunConfig, gpu: str, precision: str) -> list[str]:
    intent = [f"intent-{run.intent}"] if run.engine == "megatron_bridge" else []
    tags = [run.model.name, run.optimizer.name, gpu, precision, *intent, *run.logger.wandb_tags]
    return list(dict.fromkeys(tag[:64] for tag in tags))  # wandb caps tags at 64 characters


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"mfu": {"h100_bf16": 0.4}}`` -> ``{"mfu/h100_bf16": 0.4}`` (wandb charts flat keys)."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "/"))
        else:
            flat[name] = value
    return flat


def _check_online_credentials(mode: str) -> None:
    if mode != "online" or os.environ.get("WANDB_API_KEY"):
        return
    netrc = Path.home() / ".netrc"
    if netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore"):
        return
    raise UserError(
        "wandb online needs WANDB_API_KEY in the environment (or `wandb login`); or use logger=wandb_offline",
        "logger.wandb_mode",
    )


def start_wandb(run: RunConfig, config: dict[str, Any], gpu: str, precision: str, resume: bool):
    """Start the wandb run (None when logger.wandb_mode is disabled)."""
    mode = run.logger.wandb_mode
    if mode == "disabled":
        return None
    _check_online_credentials(mode)
    import wandb

    root = wandb_root(run)
    root.mkdir(parents=True, exist_ok=True)
    return wandb.init(
        project=run.logger.wandb_project,
        entity=run.logger.wandb_entity,
        group=wandb_group(run, gpu, precision),
        job_type=JOB_TYPE,
        tags=wandb_tags(run, gpu, precision),
        name=run.run_id,
        id=run.run_id,
        resume="allow" if resume else None,
        dir=str(root.parent),  # wandb writes to <dir>/wandb/
        mode=mode,
        config=config,
        # No console capture and no system-stats sampling: they cost time and are not what we measure.
        settings=wandb.Settings(console="off", x_disable_stats=True, silent=True),
    )


def offline_run_dirs(results_dir: str | Path, run_id: str) -> list[Path]:
    """Offline run directories of ``run_id`` under ``<results_dir>/wandb``, oldest first."""
    return sorted((Path(results_dir) / "wandb").glob(f"offline-run-*-{run_id}"))


BLOCK_SIZE = 32768
HEADER_SIZE = 7  # ":W&B" + 2-byte magic + 1-byte version
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _record_payloads(raw: bytes):
    """Payloads of a .wandb record log: 32 KiB blocks of (crc32, length, type) chunks, as LevelDB's log."""
    position, pending = HEADER_SIZE, b""
    while position + 7 <= len(raw):
        left = BLOCK_SIZE - position % BLOCK_SIZE
        if left < 7:  # block trailer too short for a chunk header: zero padding
            position += left
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[position : position + 7])
        if length == 0 and kind == 0:
            position += left
            continue
        data = raw[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == FULL:
            yield data
        elif kind == FIRST:
            pending = data
        elif kind == MIDDLE:
            pending += data
        elif kind == LAST:
            yield pending + data
            pending = b""


def read_offline_run(run_dir: str | Path) -> dict[str, Any]:
    """What an offline wandb run holds: its run record (group, job_type, tags), history rows and summary."""
    from wandb.proto import wandb_internal_pb2

    files = sorted(Path(run_dir).glob("run-*.wandb"))
    if not files:
        raise FileNotFoundError(f"no run-*.wandb file in {run_dir}")
    result: dict[str, Any] = {"run": {}, "history": [], "summary": {}}

    def items(updates) -> dict[str, Any]:
        return {(u.key or "/".join(u.nested_key)): json.loads(u.value_json) for u in updates}

    for payload in _record_payloads(files[0].read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            result["run"] = {
                "run_id": record.run.run_id,
                "project": record.run.project,
                "group": record.run.run_group,
                "job_type": record.run.job_type,
                "tags": list(record.run.tags),
                "name": record.run.display_name,
            }
        elif kind == "history":
            result["history"].append(items(record.history.item))
        elif kind == "summary":
            result["summary"].update(items(record.summary.update))
    return result
