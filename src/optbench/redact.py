"""Keep secrets out of everything we write: plans, resolved configs, job scripts kept as results, logs.

A secret is the Slurm account, any environment value whose name looks like a credential
(``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``), and the value of such variables in
this process's environment (WANDB_API_KEY above all).
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "<redacted>"
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|ACCOUNT", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable or config field name looks like it holds a credential."""
    return bool(SECRET_NAME.search(name))


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of a resolved run config (plain dict) with the account and secret-looking env values hidden."""
    clean = copy.deepcopy(dict(config))
    cluster = clean.get("cluster") or {}
    if cluster.get("account"):
        cluster["account"] = REDACTED
    env = cluster.get("env") or {}
    for name in env:
        if is_secret_name(name):
            env[name] = REDACTED
    return clean


def secret_values(config: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every concrete secret string we know of: the configured account and credential-like env values."""
    environ = os.environ if environ is None else environ
    values = [value for name, value in environ.items() if is_secret_name(name) and len(value) >= 8]
    cluster = (config or {}).get("cluster") or {}
    if cluster.get("account"):
        values.append(str(cluster["account"]))
    values += [str(v) for k, v in (cluster.get("env") or {}).items() if is_secret_name(k) and v]
    return sorted(set(values), key=len, reverse=True)


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret in ``text``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text
