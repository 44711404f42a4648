"""Compose a recipe's config groups once per process and apply each run's value overrides to a copy.

Hydra composes in two steps: the group choices (``cluster=h100``, ``optimizer=soap``) build the defaults list,
whose configs are loaded and merged, and only then are the value overrides (``parallel.pp=8``, ``+x=1``,
``~key``) applied to the merged config, one after another (``ConfigLoaderImpl._load_configuration_impl``). The
first step is the expensive one (about 0.09 s of a 0.1 s composition on 2 cores) and is the same for every run of
a recipe with the same group choices: a plan composes its calibration anchor and its AdamW twin from one
recipe, ``make projection`` composes each recipe for every published row of its GPU, and a test worker composes
a recipe hundreds of times. So the merged config of ``(recipe, group choices)`` is kept, and each composition
applies its value overrides to a fresh copy with Hydra's own ``_apply_overrides_to_config``: the config Hydra would
compose, the same errors for a bad value (tests/test_compose_reuse.py holds every recipe to Hydra composing it in full).
The merge is our own where it covers the composition (``merge``: :mod:`optbench.compose.defaults_merge`, about a
quarter of Hydra's time), else Hydra's (``compose``).

An override is a group choice exactly when Hydra takes it for one: its key names a config group (a folder of
``conf/`` or ``recipes/``) and its value is not a dict (``hydra._internal.defaults_list.Overrides``). Overrides of
Hydra's own settings and sweeps are composed by Hydra in full, never from a kept config.

What is kept is keyed on the checkout and the stat of every file under ``conf/`` and ``recipes/`` (path, size,
modification time): a config file written, removed or added (a cluster's ``conf/local/`` file, say) between two
compositions in one process is composed afresh. Each merge is kept pickled (a DictConfig loads from its bytes in
about a millisecond, a fifth of a deep copy) and also on disk for the next process (:mod:`.merge_cache`).
"""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Sequence

from omegaconf import DictConfig

from optbench.compose import merge_cache
from optbench.compose.loaded_files import each_file_loaded_once
from optbench.compose.recipe_choice import restates_recipe_choice

KEPT_COMPOSITIONS = 64
"""How many merged configs a process keeps (least recently used first out): a test worker composes some 20
recipes with a few group choices each; a kept config holds about 0.2 MB."""

_kept: OrderedDict[tuple, bytes] = OrderedDict()
"""Each merge pickled: a DictConfig loads from its bytes in about 1 ms, a fifth of a deep copy's time."""


def config_files_stat(root: Path) -> tuple:
    """(path, size, mtime) of every file Hydra can read for a recipe: any change makes a new key."""
    found = []
    for folder in ("conf", "recipes"):
        for dirpath, dirnames, filenames in os.walk(root / folder):
            dirnames.sort()
            for name in sorted(filenames):
                try:
                    stat = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:  # removed while walking: its absence is the state to key on
                    continue
                found.append((dirpath, name, stat.st_size, stat.st_mtime_ns))
    return tuple(found)


def split_overrides(root: Path, overrides: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """The overrides Hydra takes as group choices and those it applies as values, in their order; None when
    one is Hydra's own setting or a sweep (then Hydra composes the whole run)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    groups, values = [], []
    for line, parsed in zip(overrides, OverridesParser.create().parse_overrides(list(overrides))):
        if parsed.is_hydra_override() or parsed.is_sweep_override():
            return None
        key = parsed.key_or_group
        is_group = any((root / folder / key).is_dir() for folder in ("conf", "recipes"))
        (groups if is_group and not isinstance(parsed.value(), dict) else values).append(line)
    return groups, values


def compose_with_kept_groups(root: Path, recipe: str, overrides: Sequence[str],
                             compose: Callable[[Sequence[str]], DictConfig],
                             merge: Callable[[Sequence[str]], DictConfig | None] | None = None) -> DictConfig:
    """``compose(overrides)``'s config, its group choices merged once per process: by ``merge(groups)`` where it
    gives the config ``compose(groups)`` would (None where it cannot), else by ``compose``."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    split = split_overrides(root, overrides)
    if split is None:
        return compose(overrides)
    # A group typed with the very option the recipe picks composes the same config (a calibration anchor's
    # cluster=, say): it is left out, so the anchor and the AdamW twin of a plan share one merge.
    groups = [g for g in split[0] if g[0] in "+~" or not restates_recipe_choice(recipe, g)]
    values = split[1]
    files = config_files_stat(root)
    key = (recipe, tuple(groups), str(root), files)
    merged = _kept.get(key) or merge_cache.load(root, key)
    if merged is None:
        with each_file_loaded_once((str(root), files)):
            config = merge(groups) if merge is not None else None
            if config is None:
                config = compose(groups)
        merged = pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL)
        merge_cache.store(root, key, merged, config)
    _kept[key] = merged
    _kept.move_to_end(key)
    while len(_kept) > KEPT_COMPOSITIONS:
        _kept.popitem(last=False)
    cfg = pickle.loads(merged)
    ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(values), cfg)
    return cfg
