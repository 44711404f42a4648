"""Shared fixtures: compose runs quickly and keep every output under a temporary results dir."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ON_0_3_1 = "cluster.container=nemo:26.02.01"
"""For tests that describe Bridge 0.3.1 / Core 0.16.1 (the main venv's Core, NVIDIA's executed 0.3.1 presets, the
blog's jobs): they name that container, since the default is the newest proven one. Every container, the default
included, is checked against its own real Bridge in test_bridge_conformance."""


MICRO_KIMI = [
    "model.num_layers=2",
    "model.hidden_size=64",
    "model.ffn_hidden_size=128",
    "model.num_moe_experts=4",
    "model.moe_ffn_hidden_size=32",
    "model.moe_shared_expert_intermediate_size=32",
    "model.moe_router_topk=2",
    "model.q_lora_rank=32",
    "model.kv_lora_rank=16",
    "model.qk_head_dim=16",
    "model.qk_pos_emb_head_dim=8",
    "model.v_head_dim=16",
]
"""The Kimi K2 proxy shrunk to 2 layers of 4 experts: a local-engine step in well under a second (tests add their
vocabulary and batch)."""
MICRO_VOCAB = ["model.vocab_size=256", "data.vocab_size=128"]
"""A vocabulary for MICRO_KIMI on the synthetic stream."""


SLOW_MODULE = "pytestmark = pytest.mark.slow"
"""How a test module marks every test in it slow (the line starts with this)."""


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``-m "not slow"`` (`make test-fast`), a module marked slow as a whole is not imported at all: every
    test in it would be deselected after collection anyway, and importing and rewriting the 19 such modules (with
    Megatron Core, Hypothesis and their fixtures) was about 4 s of each worker's start."""
    if config.getoption("markexpr", "") != "not slow" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    lines = collection_path.read_text(encoding="utf-8").splitlines()
    return True if any(line.startswith(SLOW_MODULE) for line in lines) else None


def published_subset(results: Path) -> Path:
    """``results/published/`` with NVIDIA's blog rows and the Kimi K2 rows only (8 of the rows), for `make table`
    tests that are not about the projection beside every published row: that projection composes each row's own
    plan (about half a second a row on 2 cores). Tests of the projection itself read the whole file."""
    import csv

    target = marked_results(results) / "published"
    target.mkdir()
    source = REPO / "results" / "published"
    for name in ("README.md", "sources.csv"):
        (target / name).write_bytes((source / name).read_bytes())
    with (source / "published.csv").open(newline="") as handle:
        reader = csv.DictReader(handle)
        rows = [r for r in reader if r["source"] == "nvidia_blog_table1" or r["model"] == "kimi_k2"]
    with (target / "published.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=reader.fieldnames, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return target


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    """A private results/ root for one test."""
    return tmp_path / "results"


def marked_results(path: Path) -> Path:
    """A results folder as optbench makes one (created, with its marker), for tests that fill it by hand."""
    from optbench.common.outputs import claim

    return claim(path, "results_dir", "results")


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """Run ``python -m optbench <args>`` the way a user does, capturing output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "optbench", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120
    )


def make_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without what an enclosing make hands down (``make test PYTEST_ADDOPTS=...``), plus ``extra``."""
    from optbench.common.make_args import environment_for_make

    return environment_for_make(extra)


def run_make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``make <args>`` with this interpreter standing in for .venv/bin/python."""
    full_env = make_environment(env)
    return subprocess.run(
        ["make", "--no-print-directory", f"PY={sys.executable}", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def squeezed(text: str) -> str:
    """``text`` with the padding tabulate puts around table cells squeezed to one space (``| a   | b |`` -> ``| a | b
    |``),
    so a test can look for a row's cells as written."""
    import re

    return "\n".join(re.sub(r" {2,}", " ", line) if line.startswith("|") else line for line in text.splitlines())
