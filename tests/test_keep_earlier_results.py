"""A refused or failing command leaves every earlier result as it was (plans, dry-run jobs, sweeps)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from test_launch_slurm import launch

from launch import slurm
from optbench.common.errors import UserError
from optbench.common.replace import Folder, replacing

pytestmark = pytest.mark.slow  # launches and kills runs; `make test-fast` skips it


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def earlier(capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A results folder with a dry-run job of kimi_k2_muon and a dry-run sweep in it."""
    monkeypatch.setenv("SBATCH_ACCOUNT", "acct")
    results = tmp_path / "results"
    assert launch(capsys, "pretrain", "kimi_k2_muon", "dryrun=true", f"results_dir={results}")[0] == 0
    assert launch(capsys, "sweep", "kimi_k2_muon", "parallel.ep=32,64", "dryrun=true", f"results_dir={results}")[0] == 0
    return results


@pytest.mark.parametrize(
    "overrides",
    [
        ["+cluster.env.1BAD=x", "dryrun=true"],  # a bad job variable name, found at launch
        ["cluster.container_image=null", "dryrun=true"],  # no image to run
        [],  # a real submission from a machine without sbatch
        ["parallel.tp=0"],  # validation
        ["optimizer.muon.ns_steps=7", "dryrun=true"],
    ],
)
def test_a_refused_pretrain_changes_no_file(
    earlier: Path, capsys, monkeypatch, tmp_path: Path, overrides: list[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no sbatch
    before = snapshot(earlier)
    code, _, err = launch(capsys, "pretrain", "kimi_k2_muon", f"results_dir={earlier}", *overrides)
    assert code == 2 and err.startswith("error: "), err
    assert snapshot(earlier) == before


def test_a_sweep_that_fails_at_launch_keeps_the_previous_sweep(
    earlier: Path, capsys, monkeypatch, tmp_path: Path
) -> None:
    before = snapshot(earlier)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # submitting needs sbatch
    code, _, err = launch(capsys, "sweep", "kimi_k2_muon", "parallel.ep=32,64", "force=true", f"results_dir={earlier}")
    assert code == 2 and "no sbatch on PATH" in err
    code, _, err = launch(
        capsys,
        "sweep",
        "kimi_k2_muon",
        "parallel.ep=32,64",
        "+cluster.env.1BAD=x",
        "dryrun=true",
        f"results_dir={earlier}",
    )
    assert code == 2 and "cluster.env.1BAD" in err
    assert snapshot(earlier) == before


def test_a_render_that_fails_midway_puts_the_earlier_job_back(earlier: Path, capsys, monkeypatch) -> None:
    before = snapshot(earlier)

    def broken(*args, **kwargs):
        raise UserError("NeMo-Run failed", "sbatch")

    monkeypatch.setattr(slurm, "render", broken)
    code, _, _ = launch(capsys, "pretrain", "kimi_k2_muon", "dryrun=true", "train.iters=7", f"results_dir={earlier}")
    assert code == 2
    assert snapshot(earlier) == before
    assert not list(earlier.rglob(".*previous-*"))


def test_replacing_keeps_or_replaces_as_a_whole(tmp_path: Path) -> None:
    folder, file = tmp_path / "job", tmp_path / "plan.json"
    folder.mkdir()
    (folder / "old.txt").write_text("old")
    file.write_text("old plan")
    with pytest.raises(KeyboardInterrupt):
        with replacing(files=[file, tmp_path / "new"], folders=[Folder(folder)]):
            folder.mkdir()
            (folder / "half.txt").write_text("half")
            (tmp_path / "new").write_text("x")
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job", "plan.json"]
    assert (folder / "old.txt").read_text() == "old" and file.read_text() == "old plan"
    with replacing(files=[file], folders=[Folder(folder)]):
        folder.mkdir()
        (folder / "new.txt").write_text("new")
        file.write_text("new plan")
    assert [p.name for p in folder.iterdir()] == ["new.txt"] and file.read_text() == "new plan"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job", "plan.json"]
