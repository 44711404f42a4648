"""A recipe's group choices are merged once per process and each run's value overrides applied to a copy
(optbench.compose.reuse): the config and the errors must be those of Hydra composing the run in full."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import composed_by_hydra_in_full
from omegaconf import OmegaConf

from optbench.compose import reuse
from optbench.compose.recipe import compose_dictconfig, list_recipes
from optbench.compose.recipe_choice import recipe_group_choice
from optbench.errors import UserError

REPO = Path(__file__).resolve().parents[1]


def override_lists(recipe: str) -> list[list[str]]:
    cluster = recipe_group_choice(recipe, "cluster")
    return [
        [],
        ["parallel.tp=2", "train.mbs=1", "force=true"],
        [f"cluster={cluster}", "cluster.container=nemo:26.02", "force=true"],  # restates the recipe's cluster
        ["cluster=h100", "train.seq_length=2048", "optimizer=adamw", "optimizer.lr=0.001"],
        ["+cluster.env.MY_FLAG=1", "~logger"],
        ["train.mbs=1", "train.mbs=2"],  # the last value wins, as Hydra applies them in order
    ]


FAST_RECIPES = ("kimi_k2_muon", "qwen3_30b_a3b_soap", "kimi_k2_tiny_muon")
"""The inner loop's share (a cluster recipe, an emerging optimizer's, the local one); make test runs every recipe."""


@pytest.mark.parametrize("recipe", [r if r in FAST_RECIPES else pytest.param(r, marks=pytest.mark.slow)
                                    for r in list_recipes()])
def test_kept_groups_compose_what_hydra_composes(recipe: str) -> None:
    for overrides in override_lists(recipe):
        full = OmegaConf.to_yaml(composed_by_hydra_in_full(recipe, overrides))
        for _ in range(2):  # the second composition reads the kept merge
            ours = compose_dictconfig(recipe, overrides)
            assert OmegaConf.to_yaml(ours) == full, overrides
            assert OmegaConf.is_struct(ours)


@pytest.mark.parametrize("overrides", [
    ["parallel.pp=abc"],
    ["parallel.no_such_field=1"],
    ["train.mbs=1", "+parallel.tp=2"],
    ["cluster=no_such_cluster", "train.mbs=1"],
    ["train.mbs=1", "~no_such_key"],
    ["train.mbs=1", "parallel.pp=[1,"],  # does not parse
    ["parallel.ep=32,64"],  # a sweep: Hydra composes it in full and refuses it
])
def test_kept_groups_fail_as_hydra_fails(overrides: list[str]) -> None:
    compose_dictconfig("kimi_k2_muon", ["train.mbs=1"])  # the recipe's merge is kept
    with pytest.raises(UserError) as ours:
        compose_dictconfig("kimi_k2_muon", overrides)
    with pytest.raises(UserError) as full:
        composed_by_hydra_in_full("kimi_k2_muon", overrides)
    assert ours.value.lines() == full.value.lines()


def test_a_changed_config_file_is_composed_afresh(tmp_path: Path) -> None:
    (tmp_path / "conf" / "cluster").mkdir(parents=True)
    (tmp_path / "recipes").mkdir()
    merges = []

    def merge(groups):
        merges.append(list(groups))
        return OmegaConf.create({"a": 1, "b": {"c": 2}})

    for _ in range(2):
        cfg = reuse.compose_with_kept_groups(tmp_path, "kimi_k2_muon", ["a=3", "cluster=x"], merge)
        assert cfg.a == 3 and cfg.b.c == 2
    assert merges == [["cluster=x"]]  # merged once; the values went on a copy
    reuse.compose_with_kept_groups(tmp_path, "kimi_k2_muon", ["b.c=5", "cluster=x"], merge)
    assert len(merges) == 1
    (tmp_path / "conf" / "cluster" / "x.yaml").write_text("a: 4\n")  # a file added (a conf/local/ one, say)
    reuse.compose_with_kept_groups(tmp_path, "kimi_k2_muon", ["cluster=x"], merge)
    assert len(merges) == 2


def test_hydra_settings_and_dict_values_are_composed_in_full(tmp_path: Path) -> None:
    (tmp_path / "conf" / "model").mkdir(parents=True)
    calls = []

    def merge(overrides):
        calls.append(list(overrides))
        return OmegaConf.create({"model": {"x": 1}})

    reuse.compose_with_kept_groups(tmp_path, "kimi_k2_adamw", ["hydra.job.name=x", "model.x=2"], merge)
    assert calls == [["hydra.job.name=x", "model.x=2"]]
    assert reuse.split_overrides(tmp_path, ["model={x: 3}", "model=big", "model.x=1"]) == (
        ["model=big"], ["model={x: 3}", "model.x=1"])


def test_each_config_file_is_read_once_until_the_files_change(tmp_path: Path, monkeypatch) -> None:
    from hydra import compose, initialize_config_dir

    from optbench.compose.loaded_files import each_file_loaded_once

    (tmp_path / "opt").mkdir()
    (tmp_path / "main.yaml").write_text("defaults:\n  - opt: a\n  - _self_\nx: 1\n")
    (tmp_path / "opt" / "a.yaml").write_text("lr: 1\n")
    (tmp_path / "opt" / "b.yaml").write_text("lr: 2\n")
    reads: list[str] = []
    original = OmegaConf.load

    def counted(file_):  # Hydra's file source parses each file it reads with OmegaConf.load
        reads.append(Path(getattr(file_, "name", "")).with_suffix("").as_posix().removeprefix(f"{tmp_path}/"))
        return original(file_)

    monkeypatch.setattr(OmegaConf, "load", staticmethod(counted))

    def composed(files_key: str, choice: str):
        with each_file_loaded_once(files_key), initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
            return compose(config_name="main", overrides=[f"opt={choice}"])

    first = composed("files 1", "a")
    first.opt.lr = 9  # a composed config is the caller's: changing it changes no later composition
    assert composed("files 1", "b").opt.lr == 2 and composed("files 1", "a").opt.lr == 1
    assert (reads.count("main"), reads.count("opt/a"), reads.count("opt/b")) == (1, 1, 1)
    (tmp_path / "opt" / "a.yaml").write_text("lr: 3\n")
    assert composed("files 2", "a").opt.lr == 3  # the files' stat changed: read afresh
    assert (reads.count("main"), reads.count("opt/a")) == (2, 2)
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):  # outside the block: Hydra's own loads
        compose(config_name="main", overrides=["opt=a"])
    assert reads.count("opt/a") == 3
