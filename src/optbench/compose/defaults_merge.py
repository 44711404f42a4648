"""A recipe's group choices merged as Hydra merges them, without Hydra's composition machinery.

Hydra composes a config in two steps: it builds the defaults list (which file, at which package, in which order)
and merges the files along it, then applies the value overrides (:mod:`optbench.compose.reuse` keeps the merge).
Its defaults list is general (search path, packages, overrides of nested groups, interpolated choices, checks),
and it loads and merges its own ``hydra`` node only for :func:`hydra.compose` to delete it: about 0.05 s of a
merge on 2 cores, and the first ``make plan`` of a Muon recipe merges four. Our configs use a small part of that
language, so this module builds their defaults list itself and merges the same files into the same schema node.

It covers: a primary config (a recipe) whose defaults name root configs (``- base``) and override groups
(``- override /optimizer: muon``); configs whose defaults name groups (``- model: kimi_k2``), optional groups at
another package whose option is a choice (``- optional local@cluster: ${cluster}``), configs of their own group
(``- muon`` in ``optimizer/adaptive_muon.yaml``) and the schema in Hydra's config store; an explicit ``_self_`` in
every defaults list; a ``# @package _global_`` header or none; command-line choices of groups the defaults list
holds. Anything else (a missing file, an unknown group, another header or keyword, a choice that adds or removes
a group) raises :class:`NotCovered` and Hydra composes it, with its own error where it is one.

Where it departs from Hydra's steps, it does so for speed and keeps the result: a file is merged into its
package's node instead of being embedded in an empty config (a deep copy) and merged at the root (which walks and
re-parents the whole config after every file); and the optimizer group's files are merged after the other groups'
(:func:`_commuted`), so that merges differing only in the optimizer share the rest. tests/test_compose_reuse.py
holds the merge of every recipe, alone and with every option of every group, to Hydra's: every node's type,
metadata, flags and value.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any, Callable, Sequence

from omegaconf import DictConfig, OmegaConf, flag_override

SEARCH_FOLDERS = ("recipes", "conf")
"""Hydra's search path for our compositions, in its order: the primary config's folder, then ``conf/``."""

VARIED_GROUP = "optimizer"
"""The group merged last among the groups: the merges of one plan (the run, its AdamW twin, the SOAP and AdaMuon
siblings) differ in it alone."""

_CHOICE = re.compile(r"^\$\{(\w+)\}$")
_PACKAGE_HEADER = re.compile(r"^\s*#\s*@package\s+(\S+)\s*$")

Step = tuple[str, str, Any]
"""(config path, package, content): a file's parsed YAML (a dict), or the schema's node."""


class NotCovered(Exception):
    """The composition uses a part of Hydra's language this module does not implement: Hydra composes it."""


class _Files:
    """Where each config lives and what it holds: ``load`` gives a file's head (its first 512 characters) and its
    parsed data (a fresh copy each call), ``schema`` a fresh copy of the node Hydra's config store holds under
    ``schema_name``."""

    def __init__(self, root: Path, load: Callable[[Path], tuple[str, Any]], schema_name: str,
                 schema: Callable[[], DictConfig]):
        self.root, self.load, self.schema_name, self.schema = root, load, schema_name, schema

    def find(self, config_path: str) -> Path | None:
        for folder in SEARCH_FOLDERS:
            path = self.root / folder / f"{config_path}.yaml"
            if path.is_file():
                return path
        return None

    def content(self, path: Path, where: str) -> tuple[str | None, dict, list]:
        """A file's ``# @package`` header, its content and its defaults list (``_self_`` alone where it has
        none), popped from it as Hydra pops an untyped config's."""
        head, data = self.load(path)
        data = {} if data is None else data
        if not isinstance(data, dict):
            raise NotCovered(f"{where} is not a mapping")
        entries = data.pop("defaults", ["_self_"])
        if not isinstance(entries, list) or "_self_" not in entries:
            raise NotCovered(f"defaults of {where}: not a list with _self_")
        return _header_package(head), data, entries


def _header_package(head: str) -> str | None:
    """The ``# @package`` of a file's head, None when it has none."""
    for line in head.splitlines():
        found = _PACKAGE_HEADER.match(line)
        if found:
            return found.group(1)
        if re.match(r"^\s*#\s*@", line):
            raise NotCovered(f"header {line.strip()!r}")
    return None


def merge_order(files: _Files, primary: str, choices: dict[str, str]) -> list[Step]:
    """Every config Hydra merges for ``primary`` with the command line's group ``choices``, in Hydra's order."""
    primary_path = files.find(primary)
    if primary_path is None or primary_path.parent.name != "recipes":
        raise NotCovered(f"primary config {primary}")
    header, primary_content, primary_entries = files.content(primary_path, primary)
    if header not in (None, "_global_"):
        raise NotCovered(f"package {header} of {primary}")
    overrides: dict[str, str] = {}
    for entry in primary_entries:
        if isinstance(entry, dict):
            (key, value), = entry.items()
            if not key.startswith("override /") or len(key.split()) != 2:
                raise NotCovered(f"defaults entry {key!r} of {primary}")
            overrides[key.split()[1][1:]] = value
    order: list[Step] = []
    chosen: dict[str, str] = {}

    def visit(config_path: str, package: str, content: Any, entries: list, group: str) -> None:
        for entry in entries:
            if entry == "_self_":
                order.append((config_path, package, content))
            elif isinstance(entry, str):
                if package != group:
                    raise NotCovered(f"config default {entry!r} of {config_path} at another package")
                add(f"{group}/{entry}" if group else entry, group, optional=False)
            elif isinstance(entry, dict) and len(entry) == 1:
                (key, value), = entry.items()
                words = key.split()
                optional = words[0] == "optional"
                if words[0] == "override" and config_path == primary:
                    continue
                if len(words) != 1 + optional or not isinstance(value, str):
                    raise NotCovered(f"defaults entry {key!r} of {config_path}")
                name, _, at = words[-1].partition("@")
                child_group = name.lstrip("/") if name.startswith("/") or not group else f"{group}/{name}"
                interpolated = _CHOICE.match(value)
                if interpolated:
                    if interpolated.group(1) not in chosen:
                        raise NotCovered(f"choice {value} of {config_path}")
                    value = chosen[interpolated.group(1)]
                elif at:
                    raise NotCovered(f"defaults entry {key!r} of {config_path}")
                elif child_group in chosen:
                    raise NotCovered(f"{child_group} chosen twice in the defaults list")
                else:
                    value = chosen[child_group] = choices.get(child_group, overrides.get(child_group, value))
                add(f"{child_group}/{value}", at or child_group, optional, at_package=bool(at))
            else:
                raise NotCovered(f"defaults entry {entry!r} of {config_path}")

    def add(config_path: str, package: str, optional: bool, at_package: bool = False) -> None:
        path = files.find(config_path)
        if path is None:
            if config_path == files.schema_name:
                order.append((config_path, "", files.schema()))
            elif not optional:
                raise NotCovered(f"no config {config_path}")
            return
        header, content, entries = files.content(path, config_path)
        if header not in (None, "_global_") or (at_package and header is not None):
            raise NotCovered(f"package {header} in {config_path}")  # or a header beside an entry's own @package
        visit(config_path, "" if header == "_global_" else package, content, entries, config_path.rpartition("/")[0])

    visit(primary, "", primary_content, primary_entries, "")
    if not set(overrides) <= set(chosen) or not set(choices) <= set(chosen):
        raise NotCovered("a choice of a group the defaults list does not hold")
    return order


def merged(root: Path, recipe: str, group_choices: Sequence[str], load: Callable[[Path], tuple[str, Any]],
           schema: tuple[str, Callable[[], DictConfig]], kept: dict | None = None) -> DictConfig:
    """The config Hydra merges for ``recipe`` with ``group_choices`` (``group=option`` each), before its value
    overrides; raises :class:`NotCovered` where Hydra must compose it. ``load`` gives a file's head and its data as
    ``OmegaConf.load`` parses it (a fresh copy), ``schema`` names the schema in Hydra's config store and gives a fresh
    copy of its node; ``kept`` (the caller's, emptied when a config file changes) keeps the merge of everything
    before the optimizer group for the next merge that shares it."""
    files = _Files(root, load, *schema)
    choices: dict[str, str] = {}
    for line in group_choices:
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][\w/]*", key) or not re.fullmatch(r"[\w.-]+", value):
            raise NotCovered(f"choice {line!r}")
        if key in choices:
            raise NotCovered(f"choice of {key} given twice")
        choices[key] = value
    steps, shared = _commuted(merge_order(files, recipe, choices))
    key = ("merge before the optimizer group", tuple((path, package) for path, package, _ in steps[:shared]))
    before = kept.get(key) if kept is not None and shared else None
    if before is not None:
        cfg = pickle.loads(before)
    else:
        cfg = OmegaConf.create()
        _merge_steps(cfg, steps[:shared])
        if kept is not None and shared:
            kept[key] = pickle.dumps(cfg, protocol=pickle.HIGHEST_PROTOCOL)
    _merge_steps(cfg, steps[shared:])
    OmegaConf.set_struct(cfg, True)  # as Hydra sets the composed root
    return cfg


def _commuted(steps: list[Step]) -> tuple[list[Step], int]:
    """``steps`` with the optimizer group's files moved after the other groups' (each package's files in their
    order), and how many leading steps hold no optimizer file; ``(steps, 0)`` where the order must stay Hydra's.

    Files at different packages commute: each is merged into its own package's node (:func:`_merge_at`), which no
    other package's file reaches. So the order is free among the group files between the first config (the
    schema) and the root configs after them (``base``, the recipe), when each is merged into a node the first
    config holds."""
    packages = [package for _, package, _ in steps]
    groups = [i for i, package in enumerate(packages) if package]
    if VARIED_GROUP not in packages or packages[0] or groups[0] != 1 or not isinstance(steps[0][2], DictConfig):
        return steps, 0
    middle = steps[1:groups[-1] + 1]
    for _, package, _ in middle:
        if not package or _package_node(steps[0][2], package) is None:
            return steps, 0
    others = [step for step in middle if step[1] != VARIED_GROUP]
    varied = [step for step in middle if step[1] == VARIED_GROUP]
    return [steps[0], *others, *varied, *steps[groups[-1] + 1:]], 1 + len(others)


def _package_node(cfg: DictConfig, package: str) -> DictConfig | None:
    """The node a file at ``package`` merges into, where it is a plain config node of ``cfg`` (None otherwise)."""
    node = cfg._get_node(package) if "." not in package and package in cfg else None
    if not isinstance(node, DictConfig) or node._is_none() or node._is_missing() or node._is_interpolation():
        return None
    return node


def _merge_steps(cfg: DictConfig, steps: list[Step]) -> None:
    with flag_override(cfg, "no_deepcopy_set_nodes", True):  # as Hydra's merge: the contents are fresh copies
        for _, package, content in steps:
            _merge_at(cfg, package, content)


def _merge_at(cfg: DictConfig, package: str, content: Any) -> None:
    """Merge one file's content into ``cfg`` at ``package``: into the package's node where it is one (what Hydra's
    merge at the root does there), else embedded and merged at the root as Hydra does."""
    target = _package_node(cfg, package) if package else cfg
    if target is not None:
        target.merge_with(content)
        return
    embedded = OmegaConf.create()
    OmegaConf.update(embedded, package, OmegaConf.create(content), merge=False)
    cfg.merge_with(embedded)
