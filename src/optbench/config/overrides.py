"""Rules for the overrides a user types, beyond what the schema can see once they are merged.

Hydra reads ``key=value`` words with its own grammar and OmegaConf converts the values to the
schema's types. Some inputs pass both and still mean nothing, or something else than typed:

* a boolean written ``yes``, ``on``, ``1`` or ``Y`` (OmegaConf converts them silently): only
  ``true`` and ``false`` are accepted, so that a typo never flips a switch;
* deleting a field (``~key``), a package override (``key@pkg=...``) or Hydra's own settings
  (``hydra.*``, ``hydra/...``): they bypass the schema;
* a field that names a preset (``recipe``, ``model.name``, ``parallel.name``, ..., ``model.proxy_of``):
  changing the label changes nothing but the label; the preset is chosen with ``RECIPE=`` or
  ``<group>=<option>``;
* a field the run's engine never reads (``parallel.recompute_granularity`` on the local engine,
  ``data.vocab_size`` on Megatron Bridge, Slurm settings on this machine): it would be silently ignored;
* absurdly many or long overrides (bounded work).

Each refusal is a :class:`~optbench.common.errors.Problem` naming the typed key.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable, Sequence
from dataclasses import is_dataclass
from typing import Any, Optional

from optbench.config.field_spec import BRIDGE, LOCAL, SLURM
from optbench.config.field_table import TABLE, spec_of
from optbench.config.schema import RunConfig
from optbench.common.errors import Problem
from optbench.common.redact import clipped, is_secret_name

MAX_OVERRIDES = 200
MAX_OVERRIDE_CHARS = 20_000
MAX_DIGITS = 100
"""Longest run of digits a value may hold: no field takes a larger number (Python refuses to read an integer of
over 4,300 digits, so Hydra's grammar would stop with a traceback)."""
"""A typed pipeline layout of 1024 layers fits; anything longer is not a hand-typed override."""

CONFIG_GROUPS = ("model", "parallel", "optimizer", "precision", "cluster", "train", "data", "logger")

PRESET_LABELS = {
    "recipe": "the recipe is chosen with RECIPE=<name> (make) or the first argument (python -m optbench plan <recipe>)",
    "model.proxy_of": "it labels the model family a proxy stands for; choose the model with model=<option>",
    **{
        f"{group}.name": f"it names the {group} preset; choose another with {group}=<option>" for group in CONFIG_GROUPS
    },
}
"""Fields that name a preset: typing a new value changes only the label."""


def _read_only_by(readers: frozenset[str]) -> tuple[str, ...]:
    return tuple(key for key, spec in TABLE.items() if spec.readers == readers)


BRIDGE_ONLY = _read_only_by(BRIDGE)
"""Fields only the megatron_bridge engine reads (the local engine trains data-parallel in fp32/bf16)."""
LOCAL_ONLY = _read_only_by(LOCAL)
"""Fields only the local engine reads (Bridge's mock data uses the model's vocabulary)."""
SLURM_ONLY = _read_only_by(SLURM)
"""Fields only a Slurm job reads."""


KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")
"""What a dotted config key looks like."""


def typed_key(override: str) -> str:
    """The key a typed override names (``parallel.tp`` of ``+parallel.tp=2``, ``cluster`` of ``cluster=h100``),
    or '' when the text names no key."""
    if "=" not in override and not override.startswith("~"):
        return ""
    key = override.split("=", 1)[0].lstrip("+~").split("@", 1)[0].replace("/", ".").strip()
    return key if KEY.fullmatch(key) else ""


def split_override(override: str) -> tuple[str, str]:
    """(:func:`typed_key`, the text after the first '=': '' when there is none) of a typed override: the one place an
    override's text is taken apart (the secret redaction keeps the raw key on purpose: a key this refuses must still
    hide its value)."""
    return typed_key(override), override.split("=", 1)[1] if "=" in override else ""


def typed_keys(overrides: Sequence[str]) -> list[str]:
    return [typed_key(o) for o in overrides if typed_key(o)]


def field_type(key: str) -> Optional[Any]:
    """The schema type of a dotted leaf field (Optional unwrapped), or None if it is not a leaf field."""
    node: Any = RunConfig
    for part in key.split("."):
        if not is_dataclass(node):
            return None
        hint = typing.get_type_hints(node).get(part)
        if hint is None:
            return None
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        node = args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint
    return None if is_dataclass(node) else node


def check_text(overrides: Sequence[str]) -> Iterable[Problem]:
    """Bounded input: how many overrides, and how long each is."""
    if len(overrides) > MAX_OVERRIDES:
        yield Problem("overrides", f"{len(overrides)} overrides given; at most {MAX_OVERRIDES} are accepted")
    for override in overrides:
        if len(override) > MAX_OVERRIDE_CHARS:
            yield Problem(
                typed_key(override) or "overrides",
                f"override of {len(override):,} characters; at most {MAX_OVERRIDE_CHARS:,} are accepted",
            )


def check_repeated(overrides: Sequence[str]) -> Iterable[Problem]:
    """A key typed twice: which one wins is Hydra's rule, not what the user meant (and the plan records both)."""
    seen: set[str] = set()
    for key in typed_keys(overrides):
        if key in seen:
            yield Problem(
                key, "is typed more than once; type it once (for several values use `make sweep` with key=a,b)"
            )
            return
        seen.add(key)


def check_syntax(overrides: Sequence[str], sweeping: bool = False) -> Iterable[Problem]:
    """Parse every override with Hydra's grammar and refuse what bypasses the schema or is not a plain value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for text in overrides:
        key, value = split_override(text)
        if "=" not in text and not text.startswith("~"):
            yield Problem("overrides", f"'{clipped(text, 60)}' is not key=value; e.g. parallel.pp=8")
            continue
        if not key:
            yield Problem("overrides", f"'{clipped(text, 60)}' names no config key; type key=value, e.g. parallel.pp=8")
            continue
        if value != value.strip():
            yield Problem(
                key,
                "has a space at the start or end of its value, which Hydra would drop silently; remove it, or "
                "quote the value inside the override (key='value ') to keep it",
            )
            continue
        digits = max((len(run) for run in re.findall(r"\d+", value)), default=0)
        if digits > MAX_DIGITS:
            yield Problem(
                key,
                f"holds a number of {digits:,} digits; no field takes a number that large (at most "
                f"{MAX_DIGITS} digits)",
            )
            continue
        try:
            [override] = parser.parse_overrides([text])
        except HydraException as err:
            if is_secret_name(key):  # Hydra's message quotes the whole override, the secret value included
                yield Problem(key, "cannot be read by Hydra's override grammar; quote the value (key='value')")
                continue
            if "LexerNoViableAlt" in str(err) and not value.isascii():
                yield Problem(
                    key or "overrides",
                    "holds characters Hydra's unquoted values cannot take (letters outside "
                    f"ASCII); quote the value inside the override: {key}='...'",
                )
                continue
            reason = clipped(" ".join(str(err).split()), 160)  # Hydra's message quotes the typed text
            yield Problem(
                key or "overrides", f"cannot read '{clipped(text, 60)}': {reason}; quote values with spaces or commas"
            )
            continue
        yield from _override_problems(override, key, sweeping)


def _override_problems(override: Any, key: str, sweeping: bool) -> Iterable[Problem]:
    if override.is_delete():
        yield Problem(key, "cannot be deleted with '~'; set a value instead, or choose another option of its group")
        return
    if override.package is not None:
        yield Problem(key, "package overrides (key@package=...) are not supported; type the dotted key")
        return
    if key == "hydra" or key.startswith("hydra."):
        yield Problem(key, "Hydra's own settings are fixed by optbench; override run fields (make help)")
        return
    if key in PRESET_LABELS:
        yield Problem(key, f"cannot be set on its own: {PRESET_LABELS[key]}")
        return
    if override.is_sweep_override():
        if not sweeping:
            yield Problem(key, "a comma-separated value is a sweep; use `make sweep` (or quote it to pass a string)")
        return
    value = override.value()
    if key in CONFIG_GROUPS and not isinstance(value, str):
        yield Problem(key, f"choose an option of the {key} group by name, e.g. {key}=<option> (make help)")
        return
    if field_type(key) is bool and not isinstance(value, bool) and not _interpolation(value):
        yield Problem(key, f"expected true or false, got '{value}'")


def _interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def check_engine_fields(run: RunConfig, overrides: Sequence[str]) -> Iterable[Problem]:
    """Typed fields that the run's engine or executor never reads (each field's readers, in the schema)."""
    for key in dict.fromkeys(typed_keys(overrides)):
        spec = spec_of(key)
        if spec is None or run.engine in spec.readers or (run.cluster.executor == "slurm" and "slurm" in spec.readers):
            continue
        if spec.readers == BRIDGE:
            yield Problem(
                key,
                "has no effect on the local engine (only Megatron Bridge reads it); drop it, or plan a cluster recipe",
            )
        elif spec.readers == LOCAL:
            yield Problem(key, "has no effect on Megatron Bridge (only the local engine reads it); drop it")
        else:
            yield Problem(
                key,
                f"has no effect on cluster {run.cluster.name} ({run.cluster.executor} executor); it configures "
                "Slurm jobs: choose a Slurm cluster (e.g. cluster=gb300_nvl72) or drop it",
            )
