"""optbench.compose.defaults_merge merges a recipe's groups as Hydra does: every node's type, metadata, flags and
value the same as Hydra's merge, for every recipe alone and with every option of every group; what it does not
cover goes to Hydra."""

from __future__ import annotations

import enum
from pathlib import Path

import pytest
import yaml
from conftest import REPO, composed_by_hydra_in_full
from omegaconf import OmegaConf
from omegaconf._utils import get_yaml_loader

from optbench.compose import defaults_merge
from optbench.compose import recipe as recipe_module
from optbench.compose.loaded_files import each_file_loaded_once, file_data, kept_for_files
from optbench.compose.recipe import list_recipes
from optbench.compose.reuse import config_files_stat



def state(obj) -> tuple:
    """A config's whole internal state as nested tuples: each node's type, metadata (reference and object types,
    key, optional, flags) and content, attributes by name. Left out: the parent links (the tree says them) and
    OmegaConf's flags cache, which only memoizes the flags the tree holds."""
    if isinstance(obj, (str, int, float, bool, type(None), bytes)):
        return (type(obj).__name__, obj)
    if isinstance(obj, type):
        return ("type", obj.__module__, obj.__qualname__)
    if isinstance(obj, enum.Enum):
        return ("enum", type(obj).__qualname__, obj.name)
    if isinstance(obj, dict):
        return ("dict", tuple((state(key), state(value)) for key, value in obj.items()))
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(state(value) for value in obj))
    attributes = getattr(obj, "__dict__", None)
    if attributes is None:
        return ("repr", type(obj).__qualname__, repr(obj))
    return (type(obj).__qualname__,
            tuple((name, state(value)) for name, value in sorted(attributes.items())
                  if name not in ("_parent", "_flags_cache")))


def group_options() -> list[str]:
    return [f"{group.name}={option.stem}" for group in sorted((REPO / "conf").iterdir()) if group.is_dir()
            for option in sorted(group.glob("*.yaml"))]


def cases() -> list:
    """Every recipe alone, with each option of every group and with two choices at once (make test); the inner
    loop merges the default cluster recipe with each optimizer, as a plan does."""
    every = [[], *([option] for option in group_options()), ["optimizer=soap", "cluster=h100"]]
    optimizers = [[], *([option] for option in group_options() if option.startswith("optimizer=")),
                  ["optimizer=soap", "cluster=h100"]]
    return [pytest.param("kimi_k2_muon", optimizers, id="kimi_k2_muon-optimizers"),
            *(pytest.param(recipe, every, id=recipe, marks=pytest.mark.slow) for recipe in list_recipes())]


@pytest.mark.parametrize("recipe, choices", cases())
def test_each_merge_is_hydras_node_for_node(recipe: str, choices: list[list[str]]) -> None:
    merge = recipe_module.defaults_merge_of(recipe_module.repo_root(), recipe)
    files = (str(REPO), config_files_stat(REPO))
    for groups in choices:
        with each_file_loaded_once(files):
            try:
                expected = state(composed_by_hydra_in_full(recipe, groups))
            except Exception:  # noqa: BLE001 - Hydra refuses it (an option that does not fit the recipe's schema)
                expected = None
            ours = merge(groups)
        if expected is None:
            assert ours is None, groups  # Hydra composes it again, with its error
        else:
            assert ours is not None, groups  # covered: a fall back to Hydra here would hide a gap
            assert state(ours) == expected, groups


def test_merges_of_one_plan_share_what_precedes_the_optimizer_group() -> None:
    files = (str(REPO), config_files_stat(REPO))
    with each_file_loaded_once(files):
        kept = kept_for_files()
        before = {key for key in kept if key[0] == "merge before the optimizer group"}
        for recipe, groups in (("kimi_k2_muon", []), ("kimi_k2_adamw", []), ("kimi_k2_muon", ["optimizer=soap"])):
            assert recipe_module.defaults_merge_of(recipe_module.repo_root(), recipe)(groups) is not None
        shared = {key for key in kept if key[0] == "merge before the optimizer group"} - before
    assert len(shared) <= 1  # one merge of the model, parallel, precision, ... files, for all three
    assert all(not any(path.startswith("optimizer/") for path, _ in key[1]) for key in shared)


def test_libyaml_parses_every_config_file_as_omegaconf_does() -> None:
    paths = sorted([*REPO.glob("conf/**/*.yaml"), *REPO.glob("recipes/*.yaml")])
    assert len(paths) > 50
    for path in paths:
        with path.open(encoding="utf-8") as handle:
            pure_python = yaml.load(handle, Loader=get_yaml_loader())
        with each_file_loaded_once(("files", str(path))):
            head, data = file_data(path)
        assert data == pure_python and head == path.read_text()[:512], path
        assert state(OmegaConf.create(data)) == state(OmegaConf.load(path)), path


def test_the_schema_node_is_omegaconfs_structured_schema() -> None:
    from optbench.config.schema import RunConfig

    assert state(recipe_module._schema_node()) == state(OmegaConf.structured(RunConfig))


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


BASE = {
    "recipes/main.yaml": "# @package _global_\ndefaults:\n  - base\n  - override /opt: b\n  - _self_\nx: 1\n",
    "conf/base.yaml": "defaults:\n  - opt: a\n  - _self_\n",
    "conf/opt/a.yaml": "lr: 1\n",
    "conf/opt/b.yaml": "lr: 2\n",
}


@pytest.mark.parametrize("change, groups", [
    ({"conf/opt/b.yaml": "# @package other\nlr: 2\n"}, []),  # a package other than the group's or _global_
    ({"conf/base.yaml": "defaults:\n  - opt: a\n"}, []),  # no _self_: Hydra's implicit place for it
    ({"conf/base.yaml": "defaults:\n  - opt@here: a\n  - _self_\n"}, []),  # a group at another package
    ({"conf/opt/b.yaml": "defaults:\n  - override /opt: a\n  - _self_\n"}, []),  # an override below the primary
    ({}, ["opt=c"]),  # no such option: Hydra's error
    ({}, ["other=a"]),  # a group the defaults list does not hold
    ({}, ["+opt=a"]),  # adds a group
    ({"conf/opt/b.yaml": "- 1\n"}, []),  # not a mapping
    ({"recipes/main.yaml": "# @package other\ndefaults:\n  - base\n  - _self_\n"}, []),  # the primary elsewhere
    ({"conf/base.yaml": "defaults:\n  - opt: a\n  - opt: b\n  - _self_\n"}, []),  # a group chosen twice
    ({"conf/base.yaml": "defaults:\n  - opt: a\n  - optional local@opt: ${opt}\n  - _self_\n",
      "conf/local/b.yaml": "# @package _global_\nx: 3\n"}, []),  # a header beside the entry's own @package
])
def test_what_it_does_not_cover_goes_to_hydra(tmp_path: Path, change: dict, groups: list[str]) -> None:
    root = tree(tmp_path, {**BASE, **change})
    schema = ("run_schema", lambda: OmegaConf.create({"x": 0, "opt": {"lr": 0}}))
    with each_file_loaded_once(("files", str(tmp_path))), pytest.raises(defaults_merge.NotCovered):
        defaults_merge.merged(root, "main", groups, file_data, schema)


def test_an_optional_file_at_another_package_is_merged_there_when_it_exists(tmp_path: Path) -> None:
    base = "defaults:\n  - run_schema\n  - opt: a\n  - optional local@opt: ${opt}\n  - _self_\n"
    root = tree(tmp_path, {**BASE, "conf/base.yaml": base})
    schema = ("run_schema", lambda: OmegaConf.create({"x": 0, "opt": {"lr": 0, "extra": 0}}))
    with each_file_loaded_once(("files", "no local file")):
        assert defaults_merge.merged(root, "main", [], file_data, schema).opt.extra == 0
    tree(tmp_path, {"conf/local/b.yaml": "extra: 7\n"})  # the recipe's choice of opt is b
    with each_file_loaded_once(("files", "a local file")):
        assert defaults_merge.merged(root, "main", [], file_data, schema).opt == {"lr": 2, "extra": 7}


def test_a_small_tree_merges_in_hydras_order(tmp_path: Path) -> None:
    root = tree(tmp_path, {**BASE, "conf/base.yaml": "defaults:\n  - run_schema\n  - opt: a\n  - _self_\nx: 5\n"})
    schema = ("run_schema", lambda: OmegaConf.create({"x": 0, "opt": {"lr": 0}}))
    with each_file_loaded_once(("files", str(tmp_path))):
        assert OmegaConf.to_container(defaults_merge.merged(root, "main", [], file_data, schema)) == {
            "x": 1, "opt": {"lr": 2}}  # the recipe's override of opt and its own x, over base's
        assert defaults_merge.merged(root, "main", ["opt=a"], file_data, schema).opt.lr == 1
