"""Keep secrets out of everything we write or print: plans, resolved configs, job files, wandb, logs.

A secret is the Slurm account (``cluster.account``), any environment value whose name looks like a
credential (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*ACCOUNT*``: WANDB_API_KEY,
SBATCH_ACCOUNT, HF_TOKEN, ...), the value of such variables in ``cluster.env``, and the value of any
such key typed on the command line.

Three layers, so that no path a value can take writes it:

1. **Refusal at composition** (:func:`secret_problems`): a config value whose interpolation reaches a
   secret through any resolver (``${cluster.account}``, ``${oc.select:cluster.account,x}``,
   ``${oc.env:WANDB_API_KEY}``, nested, relative, a whole ``${cluster}``) is refused in one line that
   never shows the value: the config is resolved once with every secret replaced by a marker, and a
   field whose value (or resolution error) carries a marker is refused. A plain value that contains a
   credential from the environment is refused too. Nothing downstream ever sees it.
2. **Structural redaction** (:func:`redact_config`): the account and credential-named job variables
   are replaced in every config we write (plan.json, config.yaml, wandb's config).
3. **Redaction where text leaves the process** (:func:`redact_known`): every text file written through
   :mod:`optbench.common.io` and everything printed inside :func:`redacted_streams` (error lines, debug
   tracebacks, sweep tables) has each known secret replaced: those of at least :data:`MIN_TEXT_SECRET`
   characters wherever they occur, shorter ones that the user typed as a secret's value (from 3
   characters) where they stand as a whole word (a 3-letter account would otherwise match ordinary words).
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from optbench.common.errors import Problem

REDACTED = "<redacted>"
SECRET_NAME = re.compile(
    r"KEY|TOKEN(?!IZER|S|_DISPATCH|_DROP|_ID)|SECRET|PASSWORD|PASSWD|CREDENTIAL|ACCOUNT", re.IGNORECASE
)
"""Credential-looking names (HF_TOKEN, WANDB_API_KEY, SBATCH_ACCOUNT, ...). A model's own words for its tokens are not
ones: ``TOKENIZER`` (data.tokenizer, TOKENIZERS_PARALLELISM), counts of ``TOKENS``, the MoE token dispatcher and
drop policy, ``*_TOKEN_ID``. (Before 2026-11-26 ``parallel.moe_token_dispatcher=alltoall`` typed on the command line
made ``alltoall`` a secret: the plan's Bridge overrides then read ``<redacted>`` and the job could not parse them.)"""
MIN_TEXT_SECRET = 6
"""Shortest secret replaced in free text."""
MIN_WORD_SECRET = 3
"""Shortest typed secret replaced where it stands as a whole word."""
ACCOUNT_FIELD = "cluster.account"
_MARKER = "optbench-secret-marker-"

_typed_secrets: set[str] = set()
"""Secret values this process has seen typed or composed (the account, secret-named overrides)."""


@dataclass(frozen=True)
class SecretProblem(Problem):
    """A field that would carry a secret into what we write or print (:func:`secret_problems`): a sweep with such a
    point is refused as a whole, never run without it."""


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


def remember_secret(value: Any) -> None:
    """Add a secret value (the composed account, a typed secret) to what :func:`redact_known` hides."""
    if isinstance(value, str) and len(value.strip()) >= MIN_WORD_SECRET and value != REDACTED and _MARKER not in value:
        _typed_secrets.add(value.strip())


def remember_typed_secrets(overrides: Sequence[str]) -> None:
    """Remember the value of every typed override whose key names a secret (``cluster.account=...``)."""
    for override in overrides:
        key, sep, value = override.partition("=")
        if sep and is_secret_name(key):
            remember_secret(value.strip().strip("'\""))


def known_secrets() -> list[str]:
    """Every secret this process knows of, longest first."""
    return sorted({*secret_values(), *_typed_secrets}, key=len, reverse=True)


def redact_known(text: str, words: bool = False) -> str:
    """``text`` with every known secret of MIN_TEXT_SECRET or more characters replaced, in any letter case (a typed
    word may be lower-cased before it is printed: ``FIX=$HF_TOKEN``); with ``words`` (what is printed), also shorter
    typed ones where they stand as whole words. Files never get the word rule: a
    3-letter account could be a number or a key of the JSON being written."""
    folded = text.casefold()
    for secret in known_secrets():
        if secret.casefold() not in folded:
            continue
        if len(secret) >= MIN_TEXT_SECRET:
            text = re.sub(re.escape(secret), REDACTED, text, flags=re.IGNORECASE)
        elif words:
            text = re.sub(
                rf"(?<![A-Za-z0-9_.-]){re.escape(secret)}(?![A-Za-z0-9_-])", REDACTED, text, flags=re.IGNORECASE
            )
    return text


def clipped(text: str, limit: int) -> str:
    """A typed word as an error line shows it: its secrets hidden first, then cut to ``limit`` characters. Cutting
    (or lower-casing) first would print a piece of a secret that the output's redaction no longer recognises."""
    return redact_known(str(text), words=True)[:limit]


class _RedactingStream:
    """A text stream that hides every known secret in what is written to it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact_known(text, words=True))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _redacting_excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    import traceback

    sys.stderr.write(redact_known("".join(traceback.format_exception(kind, value, tb)), words=True))


def install_redacting_excepthook() -> None:
    """An uncaught exception's traceback (debug=true) is printed with every known secret hidden."""
    sys.excepthook = _redacting_excepthook


@contextlib.contextmanager
def redacted_streams() -> Iterator[None]:
    """Inside the block, stdout and stderr (tracebacks included) never show a known secret; the secrets
    remembered inside it (typed, composed) are forgotten after it: one command's secrets are its own."""
    saved = sys.stdout, sys.stderr
    remembered = set(_typed_secrets)
    if not isinstance(sys.stdout, _RedactingStream):
        sys.stdout = _RedactingStream(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, _RedactingStream):
        sys.stderr = _RedactingStream(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        _typed_secrets.intersection_update(remembered)


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


def _variants(value: str) -> set[str]:
    """A secret as it may appear: as set, and stripped of the whitespace a shell or a line break adds around it."""
    return {value, value.strip()} - {""}


def secret_values(config: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every concrete secret string we know of (longest first): the account, credential-like env values, each also
    stripped of surrounding whitespace (``HF_TOKEN=$'hf_x\\n'`` is printed as ``hf_x``)."""
    return sorted({v for value, _ in secret_sources(config, environ) for v in _variants(value)}, key=len, reverse=True)


def secret_sources(
    config: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """(value, where it comes from: ``$NAME``, ``cluster.account``, ``cluster.env.NAME``) of every secret we know of."""
    environ = os.environ if environ is None else environ
    found = [(value, f"${name}") for name, value in environ.items() if is_secret_name(name) and value]
    cluster = (config or {}).get("cluster") or {}
    if cluster.get("account") and cluster["account"] != REDACTED:
        found.append((str(cluster["account"]), "cluster.account"))
    found += [
        (str(v), f"cluster.env.{k}")
        for k, v in (cluster.get("env") or {}).items()
        if is_secret_name(k) and v and v != REDACTED
    ]
    return found


def secret_in_path(path: str | os.PathLike[str]) -> str | None:
    """Where the secret a path contains comes from (``$SBATCH_ACCOUNT``, ...), or None. Such a path is refused, not
    rewritten: every file and printed line hides the secret, which would name a path that does not exist."""
    text = os.fspath(path)
    typed = [(value, "a secret typed on the command line") for value in sorted(_typed_secrets)]
    for value, source in [*secret_sources(), *typed]:
        if any(len(v) >= MIN_TEXT_SECRET and v.casefold() in text.casefold() for v in _variants(value)):
            return source
    return None


def run_secrets(run: Any) -> list[str]:
    """:func:`secret_values` of a typed run config (its account and job variables) and this environment."""
    cluster = getattr(run, "cluster", None)
    return secret_values(
        {"cluster": {"account": getattr(cluster, "account", None), "env": dict(getattr(cluster, "env", None) or {})}}
    )


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret of at least MIN_TEXT_SECRET characters in ``text``, in any letter
    case."""
    for secret in secrets:
        if secret and len(secret) >= MIN_TEXT_SECRET:
            text = re.sub(re.escape(secret), REDACTED, text, flags=re.IGNORECASE)
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


def _marked_copy(cfg: Any) -> Any:
    """A copy of the composed config with the account and secret job variables replaced by markers.

    A deep copy, typed as the config is: a typed field that resolves to a marker fails to validate with
    the marker quoted in the error, which :func:`_reaches_secret` reads as reaching it."""
    from omegaconf import OmegaConf

    marked = copy.deepcopy(cfg)
    cluster = marked.get("cluster") if OmegaConf.is_dict(marked) else None
    if OmegaConf.is_dict(cluster):
        cluster["account"] = f"{_MARKER}account"
        env = cluster.get("env")
        if OmegaConf.is_dict(env):
            for name in env:
                if is_secret_name(str(name)):
                    env[name] = f"{_MARKER}env"
    return marked


def secret_environment_names(environ: Mapping[str, str] | None = None) -> set[str]:
    """Environment variables that hold a secret: credential-named ones, and any other whose value holds one of
    theirs (``FZ_ALIAS=$WANDB_API_KEY``: ``${oc.env:FZ_ALIAS}`` would carry the key past a check of names alone)."""
    environ = os.environ if environ is None else environ
    named = {name for name in environ if is_secret_name(name)}
    values = {v for name in named for v in _variants(environ[name]) if len(v) >= MIN_TEXT_SECRET}
    return named | {name for name, value in environ.items() if any(v in value for v in values)}


@contextlib.contextmanager
def _marked_environment() -> Iterator[None]:
    """Environment variables that hold a secret replaced by markers (``oc.env`` reads them at resolution)."""
    saved = {name: os.environ[name] for name in secret_environment_names()}
    try:
        for name in saved:
            os.environ[name] = f"{_MARKER}{name}"
        yield
    finally:
        os.environ.update(saved)


def _reaches_secret(marked: Any, path: str) -> bool:
    """Whether the field at ``path`` of the marked config resolves to (or fails quoting) a secret marker."""
    from omegaconf import OmegaConf

    try:
        value = OmegaConf.select(marked, path, throw_on_missing=False)
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
        text = str(value)
    except Exception as err:  # noqa: BLE001 - any resolver failure; only whether it quotes a marker matters
        text = repr(err)
    return _MARKER in text


def secret_problems(cfg: Any, environ: Mapping[str, str] | None = None) -> list[Problem]:
    """Fields (other than cluster.account) that would carry a secret into what we write or print.

    ``cfg``: the composed config (a DictConfig, interpolations unresolved). A field whose interpolation
    reaches a secret through any resolver is refused; so is a plain value that holds a credential from
    the environment or the account. The value is never shown.
    """
    from omegaconf import OmegaConf

    environ = os.environ if environ is None else environ
    raw = OmegaConf.to_container(cfg, resolve=False)
    interpolated = [
        path for path, value in _leaves(raw) if isinstance(value, str) and "${" in value and not _is_secret_field(path)
    ]
    reaching: set[str] = set()
    if interpolated:  # the marked copy costs a conversion of the whole config: only when something can resolve
        with _marked_environment():
            marked = _marked_copy(cfg)
            reaching = {path for path in interpolated if _reaches_secret(marked, path)}
    sources = {
        v: f"${name}"
        for name, value in environ.items()
        if is_secret_name(name)
        for v in _variants(value)
        if len(v) >= MIN_TEXT_SECRET
    }
    account = (raw.get("cluster") or {}).get("account") if isinstance(raw, dict) else None
    if isinstance(account, str) and "${" not in account and len(account) >= MIN_TEXT_SECRET:
        sources[account] = "cluster.account"
    problems = []
    for path, value in _leaves(raw):
        if _is_secret_field(path) or not isinstance(value, str):
            continue
        found = (
            "interpolates a secret (the Slurm account or a credential variable)"
            if path in reaching
            else next(
                (
                    f"holds the value of {source}, a secret"
                    for secret, source in sources.items()
                    if secret.casefold() in value.casefold()
                ),
                None,
            )
        )
        if found:
            problems.append(
                SecretProblem(
                    path,
                    f"{found}; plans, configs, job files and logs never hold secrets: give a plain value (the account "
                    "reaches sbatch only through SBATCH_ACCOUNT, credentials through your exported environment)",
                )
            )
    return problems


def _is_secret_field(path: str) -> bool:
    """cluster.account: where the account belongs (redacted whenever written)."""
    return path == ACCOUNT_FIELD
