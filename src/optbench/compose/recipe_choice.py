"""Which option of each config group a recipe picks, read from its defaults list (and conf/base.yaml's).

A group typed on the command line with the very option the recipe already picks (``precision=mxfp8`` on an
MXFP8 recipe, as a sweep ``precision=bf16,mxfp8`` types it) restates the recipe: Hydra composes the same config
with or without it, so nothing downstream (the release layout, :mod:`optbench.compose.release_layout`) may treat
it as the user's choice of that group.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from optbench.common.checkout import repo_root
from optbench.config.overrides import CONFIG_GROUPS, split_override


def recipe_group_choice(recipe: str, group: str) -> str | None:
    """The option a recipe picks for ``group``: its own ``override /group: option``, else conf/base.yaml's."""
    root = repo_root()
    for path, key in (
        (root / "recipes" / f"{recipe}.yaml", f"override /{group}"),
        (root / "conf" / "base.yaml", group),
    ):
        for entry in _defaults_list(path):
            if isinstance(entry, dict) and key in entry:
                return entry[key]
    return None


def _defaults_list(path: Path) -> tuple:
    """The ``defaults`` entries of a YAML file, parsed once per version of the file (a plan asks about 7 times)."""
    stat = path.stat()
    return _parsed_defaults(str(path), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=64)
def _parsed_defaults(path: str, size: int, mtime_ns: int) -> tuple:
    return tuple(yaml.safe_load(Path(path).read_text()).get("defaults", []))


def restates_recipe_choice(recipe: str, override: str) -> bool:
    """Whether ``override`` picks the very option of a group the recipe already picks."""
    key, option = split_override(override)
    return (
        "=" in override
        and not override.startswith("~")
        and key in CONFIG_GROUPS
        and recipe_group_choice(recipe, key) == option
    )
