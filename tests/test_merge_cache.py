"""Merged config groups kept on disk between processes (optbench.compose.merge_cache): read only while every
input of the merge is unchanged, never holding a credential, never replacing a file that is not the cache's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from optbench.compose import merge_cache, reuse
from optbench.compose.recipe import compose_dictconfig

from conftest import REPO, run_cli


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(merge_cache.SETTING, str(folder))
    monkeypatch.setattr(reuse, "_kept", type(reuse._kept)())  # as a new process: nothing kept in memory
    return folder


RECIPE = "kimi_k2_muon"
"""A real recipe (whether a group restates its choice is read from it) over a made-up checkout's files."""


def a_checkout(tmp_path: Path) -> Path:
    (tmp_path / "conf" / "cluster").mkdir(parents=True)
    (tmp_path / "recipes").mkdir()
    return tmp_path


def merging(config: dict):
    merges = []

    def merge(groups):
        merges.append(list(groups))
        return OmegaConf.create(config)
    return merge, merges


def in_a_new_process() -> None:
    reuse._kept.clear()


def test_a_later_process_reads_the_merge_and_applies_its_own_values(cache: Path, tmp_path: Path) -> None:
    root = a_checkout(tmp_path / "checkout")
    merge, merges = merging({"a": 1, "b": {"c": 2}})
    first = reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x", "a=3"], merge)
    in_a_new_process()
    second = reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x", "b.c=5"], merge)
    assert merges == [["cluster=x"]]
    assert (first.a, first.b.c, second.a, second.b.c) == (3, 2, 1, 5)
    assert [p.suffix for p in cache.iterdir()] == [".merge"]
    assert cache.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("change", ["config file", "new config file", "package source", "checkout path"])
def test_a_changed_input_is_merged_afresh(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    root = a_checkout(tmp_path / "checkout")
    (root / "conf" / "cluster" / "x.yaml").write_text("a: 1\n")
    merge, merges = merging({"a": 1})
    reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x"], merge)
    in_a_new_process()
    if change == "config file":
        (root / "conf" / "cluster" / "x.yaml").write_text("a: 22\n")
    elif change == "new config file":
        (root / "recipes" / "other.yaml").write_text("a: 2\n")
    elif change == "package source":
        monkeypatch.setattr(merge_cache, "_source_stat", lambda: (("schema.py", 1, 2),))
    else:
        os.rename(root, tmp_path / "moved")
        root = tmp_path / "moved"
    reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x"], merge)
    assert len(merges) == 2


def test_every_recipe_read_back_is_the_config_hydra_composes(cache: Path) -> None:
    for recipe in ("kimi_k2_muon", "qwen3_30b_a3b_soap", "kimi_k2_tiny_muon"):
        overrides = ["cluster=h100", "optimizer=adamw", "train.mbs=1"]
        composed = OmegaConf.to_yaml(compose_dictconfig(recipe, overrides))
        in_a_new_process()
        read_back = compose_dictconfig(recipe, overrides)
        assert OmegaConf.to_yaml(read_back) == composed and OmegaConf.is_struct(read_back)
    assert len(list(cache.glob("*.merge"))) == 3


def test_a_merge_holding_a_credential_is_never_written(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = a_checkout(tmp_path / "checkout")
    for config in ({"cluster": {"account": "acct-in-conf-local"}}, {"cluster": {"env": {"HF_TOKEN": "hf_abcdefgh"}}},
                   {"description": "wk-0123456789abcdef"}):
        monkeypatch.setenv("WANDB_API_KEY", "wk-0123456789abcdef")
        merge, _ = merging(config)
        reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x"], merge)
        in_a_new_process()
    assert not cache.exists()
    merge, _ = merging({"cluster": {"account": "${oc.env:SBATCH_ACCOUNT,null}"}})  # resolved only when run: kept
    reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x"], merge)
    assert len(list(cache.glob("*.merge"))) == 1


@pytest.mark.parametrize("damage", ["truncated", "other bytes", "not ours"])
def test_a_damaged_or_foreign_file_is_a_miss_and_only_ours_is_replaced(cache: Path, tmp_path: Path, damage: str) -> None:
    root = a_checkout(tmp_path / "checkout")
    merge, merges = merging({"a": 1})
    reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x"], merge)
    [entry] = cache.glob("*.merge")
    data = entry.read_bytes()
    written = {"truncated": data[: len(data) // 2], "other bytes": data[:-8] + b"\x00" * 8, "not ours": b"a user's file\n"}
    entry.write_bytes(written[damage])
    in_a_new_process()
    cfg = reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x", "a=2"], merge)
    assert cfg.a == 2 and len(merges) == 2
    if damage == "not ours":
        assert entry.read_bytes() == written[damage]  # left as it was, and the cache folder no longer written
    else:  # the bytes' digest no longer matches: never unpickled, written whole again
        assert entry.read_bytes() == data


def test_a_folder_others_can_write_is_never_read(cache: Path, tmp_path: Path) -> None:
    root = a_checkout(tmp_path / "checkout")
    merge, merges = merging({"a": 1})
    reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x"], merge)
    cache.chmod(0o777)
    in_a_new_process()
    reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x"], merge)
    assert len(merges) == 2


def test_off_writes_nothing_and_clear_removes_only_the_caches_files(cache: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    root = a_checkout(tmp_path / "checkout")
    monkeypatch.setenv(merge_cache.SETTING, "off")
    merge, _ = merging({"a": 1})
    reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x"], merge)
    assert not (root / ".cache").exists()
    monkeypatch.delenv(merge_cache.SETTING)
    in_a_new_process()
    reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x"], merge)
    folder = root / merge_cache.DEFAULT_FOLDER
    assert len(list(folder.glob("*.merge"))) == 1
    (folder / "notes.merge").write_text("mine\n")
    assert merge_cache.clear(root) == 1
    assert [p.name for p in folder.iterdir()] == ["notes.merge"]


@pytest.mark.slow
def test_a_second_plan_merges_nothing_and_writes_the_same_plan(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    plans, written = [], []
    for attempt, setting in (("first", str(cache)), ("second", str(cache)), ("hydra", "off")):
        results = tmp_path / attempt
        done = run_cli("plan", "kimi_k2_muon", "train.seed=3", "run_id=same", f"results_dir={results}",
                       env={merge_cache.SETTING: setting})
        assert done.returncode == 0, done.stderr
        plans.append((results / "plans" / "kimi_k2_muon" / "plan.json").read_text().replace(str(results), "<results>"))
        written.append({p.name: p.stat().st_mtime_ns for p in cache.glob("*.merge")})
    assert plans[0] == plans[1] == plans[2]
    assert written[0] == written[1]  # the second process read every merge and wrote none
    # the run and its AdamW twin (the anchor is read from anchors.json; the sibling optimizers only with COMPARE)
    assert sorted(name.split("-")[0] for name in written[0]) == ["kimi_k2_adamw", "kimi_k2_muon"]
    assert "/.cache/" in REPO.joinpath(".gitignore").read_text().splitlines()  # never committed


def test_two_checkouts_with_the_same_files_keep_their_own_merges(cache: Path, tmp_path: Path) -> None:
    merges = []
    for name, value in (("one", 1), ("two", 2)):
        root = a_checkout(tmp_path / name)
        merge, merges = merging({"a": value})
        assert reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x"], merge).a == value
        assert merges == [["cluster=x"]]


def test_clear_leaves_a_users_empty_folder_it_wrote_into(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, folder = a_checkout(tmp_path / "checkout"), tmp_path / "users-empty-folder"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv(merge_cache.SETTING, str(folder))
    monkeypatch.setattr(reuse, "_kept", type(reuse._kept)())
    merge, _ = merging({"a": 1})
    reuse.compose_with_kept_groups(root, RECIPE, ["cluster=x"], merge)
    assert merge_cache.clear(root) == 1 and folder.is_dir() and not any(folder.iterdir())
