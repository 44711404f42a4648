"""A typed run and plain data: merging a composed config into the schema (with one-line errors that
name the field) and the plain-dict view written to plan.json and config.yaml.

Composition (:mod:`optbench.compose.recipe`) and reading a run's saved config.yaml
(:mod:`optbench.runs`) both type their config here, so the two cannot disagree.
"""

from __future__ import annotations

import difflib
import functools
import re
import typing
from dataclasses import fields, is_dataclass
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from optbench.config.schema import RunConfig
from optbench.common.errors import Problem, UserError


def closest(word: str, choices: Sequence[str]) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


def _schema_keys(path: str) -> list[str]:
    """Field names the schema allows under a dotted path ('' = top level)."""
    node: Any = RunConfig
    for part in [p for p in path.split(".") if p]:
        hint = typing.get_type_hints(node).get(part)
        candidates = typing.get_args(hint) or (hint,)
        node = next((c for c in candidates if is_dataclass(c)), None)
        if node is None:
            return []
    return [f.name for f in fields(node)]


@functools.lru_cache(maxsize=1)
def _schema_paths() -> tuple[str, ...]:
    """Every dotted field path of the schema (sections and their fields)."""
    out: list[str] = []
    pending = [""]
    while pending:
        path = pending.pop()
        for name in _schema_keys(path):
            dotted = f"{path}.{name}" if path else name
            out.append(dotted)
            if _schema_keys(dotted):
                pending.append(dotted)
    return tuple(sorted(out))


def unknown_key_problem(full_key: str) -> Problem:
    """An unknown key: the nearest name in its own section, else a field of that name elsewhere (a user who types
    ``release.unverified`` is told of ``cluster.unverified_container``)."""
    parent, _, key = full_key.rpartition(".")
    top = _schema_keys("")
    section = parent.split(".")[0]
    if parent and section not in top:  # a section we lack
        hint = _elsewhere(key) or closest(section, top)
        return Problem(full_key, f"unknown section {section}{hint}; the run config has: {', '.join(top)}")
    allowed = _schema_keys(parent)
    where = parent or "the run config"
    known = ", ".join(allowed) if allowed else "(none)"
    return Problem(full_key, f"unknown key{closest(key, allowed) or _elsewhere(key)}; {where} has: {known}")


def _elsewhere(key: str) -> str:
    """' (did you mean <section>.<field>?)' for the one field of some section whose name contains ``key`` (four
    letters or more: ``unverified`` in ``cluster.unverified_container``), else ''. Containment, not similarity:
    similar names across sections mislead (``ep_size`` is not ``model.hidden_size``)."""
    found = [path for path in _schema_paths() if "." in path and len(key) >= 4 and key in path.rpartition(".")[2]]
    return f" (did you mean {found[0]}?)" if len(found) == 1 else ""


def translate_schema_error(err: OmegaConfBaseException) -> UserError:
    key = getattr(err, "full_key", "") or ""
    text = str(err).splitlines()[0]
    if "not in struct" in text or re.search(r"Key '[^']+' not in '\w+'", text):
        return UserError(unknown_key_problem(key))
    if "is not Optional" in text or "Non optional field cannot be assigned None" in text:
        return UserError(Problem(key, "cannot be null; give it a value"))
    incompatible = re.search(r"Incompatible value '([^']*)' for field of type '(\w+)'", text)
    if incompatible:
        return UserError(Problem(key, f"expected {incompatible.group(2)}, got '{incompatible.group(1)}'"))
    value = re.search(r"Value '([^']*)'", text)
    expected = re.search(r"could not be converted to (\w+)", text)
    if value and expected:
        kind = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false"}.get(
            expected.group(1), expected.group(1)
        )
        return UserError(Problem(key, f"expected {kind}, got '{value.group(1)}'"))
    invalid_bool = re.search(r"Value '([^']*)' is not a valid bool", text)
    if invalid_bool:
        return UserError(Problem(key, f"expected true or false, got '{invalid_bool.group(1)}'"))
    if "Missing mandatory value" in text:
        return UserError(Problem(key, "has no value; set it in the recipe or on the command line"))
    return UserError(Problem(key, text))


def _unknown_keys(node: Any, path: str = "") -> list[str]:
    """Keys of a typed config that its dataclass does not declare (``+key=value`` appends them)."""
    if not isinstance(node, DictConfig):
        return []
    object_type = OmegaConf.get_type(node)
    known = {f.name for f in fields(object_type)} if is_dataclass(object_type) else None
    found = []
    for key in node.keys():
        full = f"{path}.{key}" if path else str(key)
        if known is not None and key not in known:
            value = node[key] if not OmegaConf.is_interpolation(node, key) else None
            leaves = _leaf_keys(value, full) if isinstance(value, DictConfig) else []
            found += leaves or [full]  # a section we lack: name what was typed under it (release.unverified)
        elif not OmegaConf.is_interpolation(node, key):  # an interpolated value is checked where it points
            found += _unknown_keys(node[key], full)
    return found


def _leaf_keys(node: DictConfig, path: str) -> list[str]:
    out = []
    for key in node.keys():
        full = f"{path}.{key}"
        child = None if OmegaConf.is_interpolation(node, key) else node[key]
        out += _leaf_keys(child, full) if isinstance(child, DictConfig) else [full]
    return out


def to_run_config(cfg: DictConfig) -> RunConfig:
    """Merge a composed config into the typed schema; unknown keys and wrong types become one-line errors."""
    unknown = _unknown_keys(cfg)
    if unknown:
        raise UserError([unknown_key_problem(key) for key in unknown])
    try:
        # Hydra composed it into the schema already (conf/base.yaml lists it first) and the check above found
        # every key ``+`` appended, so only a config read from a file (config.yaml) needs merging into it.
        typed = cfg if OmegaConf.get_type(cfg) is RunConfig else OmegaConf.merge(OmegaConf.structured(RunConfig), cfg)
        run = OmegaConf.to_object(typed)
    except OmegaConfBaseException as err:
        raise translate_schema_error(err) from err
    assert isinstance(run, RunConfig)
    return run


def run_config_to_dict(run: RunConfig) -> dict[str, Any]:
    """Plain-dict view of a typed run config (for plan.json, config.yaml).

    What OmegaConf's structured view gives (a float field's int as a float), read straight off the dataclasses,
    a sixth of its time; a value outside its field's type takes OmegaConf's own conversion instead.
    """
    try:
        return _plain_dataclass(run)
    except _NotPlain:
        # A typed run is resolved already: a "${...}" left in a value is text the user escaped, not an interpolation.
        container = OmegaConf.to_container(OmegaConf.structured(run), resolve=False)
        assert isinstance(container, dict)
        return container


class _NotPlain(Exception):
    """A value that is not of its field's type as written: OmegaConf converts it (or refuses it)."""


@functools.cache
def _field_types(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type, nullable) of each field of a schema dataclass, in order; the type with Optional removed."""
    out = []
    for name, hint in typing.get_type_hints(cls).items():
        args = typing.get_args(hint)
        nullable = typing.get_origin(hint) is typing.Union and type(None) in args
        out.append((name, next(a for a in args if a is not type(None)) if nullable else hint, nullable))
    return tuple(out)


def _plain_dataclass(node: Any) -> dict[str, Any]:
    return {name: _plain(getattr(node, name), kind, nullable) for name, kind, nullable in _field_types(type(node))}


def _plain(value: Any, kind: Any, nullable: bool) -> Any:
    if value is None and nullable:
        return None
    if is_dataclass(kind) and type(value) is kind:
        return _plain_dataclass(value)
    if kind is float and type(value) in (float, int):
        return float(value)
    if kind in (str, int, bool) and type(value) is kind:
        return value
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is list and type(value) in (list, tuple):
        return [_plain(item, args[0], False) for item in value]
    if origin is dict and args[0] is str and type(value) is dict and all(type(key) is str for key in value):
        return {key: _plain(item, args[1], False) for key, item in value.items()}
    raise _NotPlain
