"""The adversarial command corpus (tests/adversarial/corpus.txt), every line a test: the exit code it
must end with, no traceback, no secret printed or written, every canary (user files, a device node, a
FIFO, a link, the input, a fake checkout) as it was, and a refusal changes no file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from adversarial.harness import Case, World, build_world, execute, load_corpora

pytestmark = pytest.mark.slow  # runs the 500-command adversarial corpus through make; `make test-fast` skips it

CASES = load_corpora()
ONLY = set(os.environ.get("OPTBENCH_CORPUS_LINES", "").replace(",", " ").split())
"""OPTBENCH_CORPUS_LINES="91 205 corpus_surfaces:12": run only these lines (of corpus.txt unless the file is named)."""
SELECTED = [
    case
    for case in CASES
    if not ONLY or str(case.number) in ONLY and case.corpus == "corpus" or f"{case.corpus}:{case.number}" in ONLY
]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("adversarial"))


def test_the_corpus_is_large_and_covers_every_surface() -> None:
    assert len(CASES) >= 500
    targets = {case.target for case in CASES}
    assert targets == {"plan", "pretrain", "sweep", "search", "data", "table", "study", "gpu-smoke", "make"}
    assert sum(case.expect == "refused" for case in CASES) >= 300


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", SELECTED, ids=[case.id for case in SELECTED])
def test_adversarial_command(case: Case, world: World, tmp_path: Path, capsys, monkeypatch) -> None:
    execute(case, world, tmp_path, capsys, monkeypatch)
