"""Keep secrets out of everything we write or print: plans, resolved configs, job files, wandb, logs.

A secret is the Slurm account (``cluster.account``), any environment value whose name looks like a
credential (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*ACCOUNT*``: WANDB_API_KEY,
SBATCH_ACCOUNT, HF_TOKEN, ...), and the value of such variables in ``cluster.env``.

Three layers, so that no path a value can take writes it:

1. **Refusal at composition** (:func:`secret_problems`): a config value that interpolates a secret
   (``${cluster.account}``, ``${oc.env:WANDB_API_KEY}``, ``${oc.env:SBATCH_ACCOUNT}``) or that
   contains a credential from the environment is refused in one line that never shows the value.
   Nothing downstream ever sees it.
2. **Structural redaction** (:func:`redact_config`): the account and credential-named job variables
   are replaced in every config we write (plan.json, config.yaml, wandb's config).
3. **Text redaction** (:func:`redact_text`) of every file we write from a config (plan.json,
   config.yaml, summary.json, NeMo-Run's scripts and executor files) and of error lines: each known
   secret of at least :data:`MIN_TEXT_SECRET` characters is replaced wherever it occurs. Shorter
   values (a 3-letter account) would match ordinary words, so they rely on layers 1 and 2.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from optbench.errors import Problem

REDACTED = "<redacted>"
SECRET_NAME = re.compile(r"KEY|TOKEN(?!IZER)|SECRET|PASSWORD|PASSWD|CREDENTIAL|ACCOUNT", re.IGNORECASE)
"""Credential-looking names; ``TOKENIZER`` (data.tokenizer, TOKENIZERS_PARALLELISM) is not one."""
MIN_TEXT_SECRET = 6
"""Shortest secret replaced in free text."""
ACCOUNT_FIELD = "cluster.account"
_SECRET_REFERENCE = re.compile(r"\$\{\s*(?:cluster\.account|oc\.env\s*:\s*([A-Za-z_][A-Za-z0-9_]*))")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable or config field name looks like it holds a credential."""
    return bool(SECRET_NAME.search(name))


def recorded_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides as typed, with the value of a secret key (cluster.account=..., *KEY*=...) hidden."""
    recorded = []
    for override in overrides:
        key, sep, _ = override.partition("=")
        recorded.append(f"{key}={REDACTED}" if sep and is_secret_name(key) else override)
    return recorded



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
    """Every concrete secret string we know of (longest first): the account, credential-like env values."""
    environ = os.environ if environ is None else environ
    values = [value for name, value in environ.items() if is_secret_name(name) and value]
    cluster = (config or {}).get("cluster") or {}
    if cluster.get("account") and cluster["account"] != REDACTED:
        values.append(str(cluster["account"]))
    values += [str(v) for k, v in (cluster.get("env") or {}).items() if is_secret_name(k) and v and v != REDACTED]
    return sorted(set(values), key=len, reverse=True)


def run_secrets(run: Any) -> list[str]:
    """:func:`secret_values` of a typed run config (its account and job variables) and this environment."""
    from optbench.config.compose import run_config_to_dict

    return secret_values(run_config_to_dict(run))


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret of at least MIN_TEXT_SECRET characters in ``text``."""
    for secret in secrets:
        if secret and len(secret) >= MIN_TEXT_SECRET:
            text = text.replace(secret, REDACTED)
    return text


def _leaves(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from _leaves(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _leaves(value, f"{path}.{index}")
    else:
        yield path, node


def _refers_to_secret(text: str) -> bool:
    """``${cluster.account}`` or ``${oc.env:NAME...}`` with a credential-looking NAME anywhere in ``text``."""
    return any(match.group(1) is None or is_secret_name(match.group(1)) for match in _SECRET_REFERENCE.finditer(text))


def secret_problems(raw: Mapping[str, Any], resolved: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None) -> list[Problem]:
    """Fields (other than cluster.account) that would carry a secret into what we write or print.

    ``raw``: the composed config with interpolations unresolved; ``resolved``: the same resolved
    (None when it does not resolve: then only the references are checked). The value is never shown.
    """
    environ = os.environ if environ is None else environ
    resolved_leaves = dict(_leaves(resolved)) if resolved is not None else {}
    sources = {value: f"${name}" for name, value in environ.items() if is_secret_name(name) and len(value) >= MIN_TEXT_SECRET}
    account = resolved_leaves.get(ACCOUNT_FIELD)
    if account and len(str(account)) >= MIN_TEXT_SECRET:
        sources[str(account)] = "cluster.account"
    problems = []
    for path, value in _leaves(raw):
        if path == ACCOUNT_FIELD or not isinstance(value, str):
            continue
        text = str(resolved_leaves.get(path, value))
        found = "interpolates a secret (the Slurm account or a credential variable)" if _refers_to_secret(value) else next(
            (f"holds the value of {source}, a secret" for secret, source in sources.items() if secret in text), None
        )
        if found:
            problems.append(
                Problem(
                    path,
                    f"{found}; plans, configs, job files and logs never hold secrets: give a plain value (the "
                    "account reaches sbatch only through SBATCH_ACCOUNT, credentials through your exported environment)",
                )
            )
    return problems
