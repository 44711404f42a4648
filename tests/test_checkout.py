"""Outputs go under the checkout a command runs in, whichever source tree the interpreter imports (a venv shared
between two checkouts imports one of them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from optbench.common.checkout import repo_root

SOURCE = Path(__file__).resolve().parents[1]


@pytest.fixture
def other_checkout(tmp_path: Path) -> Path:
    """A second checkout's configs (its own recipes/ and conf/) whose source is not on this interpreter's path."""
    for folder in ("recipes", "conf"):
        shutil.copytree(SOURCE / folder, tmp_path / folder)
    (tmp_path / "src" / "optbench").mkdir(parents=True)  # its source, which this interpreter does not import
    return tmp_path


def test_the_working_directory_wins_over_the_imported_source(other_checkout, monkeypatch):
    monkeypatch.delenv("OPTBENCH_ROOT", raising=False)
    monkeypatch.chdir(other_checkout)
    assert repo_root() == other_checkout.resolve()
    monkeypatch.chdir(other_checkout / "recipes")  # not a checkout: the imported source tree
    assert repo_root() == SOURCE
    (other_checkout / "src" / "optbench").rmdir()  # a project of the user's with a recipes/ and conf/ of its own
    monkeypatch.chdir(other_checkout)
    assert repo_root() == SOURCE


def test_a_plan_typed_in_another_checkout_is_written_there(other_checkout):
    mine = SOURCE / "results" / "plans" / "kimi_k2_tiny_muon" / "plan.json"
    before = mine.read_bytes() if mine.is_file() else None
    done = subprocess.run(
        [sys.executable, "-m", "optbench", "plan", "kimi_k2_tiny_muon", "description=other-checkout"],
        cwd=other_checkout,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SOURCE)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    written = other_checkout / "results" / "plans" / "kimi_k2_tiny_muon" / "plan.json"
    assert "other-checkout" in written.read_text()
    assert (mine.read_bytes() if mine.is_file() else None) == before
