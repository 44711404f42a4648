"""The adversarial command corpus (tests/adversarial/corpus.txt), every line a test: the exit code it
must end with, no traceback, no secret printed or written, every canary (user files, a device node, a
FIFO, a link, the input, a fake checkout) as it was, and a refusal changes no file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from adversarial.harness import (
    MICRO,
    SECRETS,
    Case,
    Places,
    World,
    apply_setups,
    build_canary,
    copy_results,
    environment,
    expand,
    load_corpus,
    run_in_process,
    run_make,
    snapshot,
    texts,
)

CASES = load_corpus()
ONLY = {int(n) for n in os.environ.get("OPTBENCH_CORPUS_LINES", "").replace(",", " ").split()}
"""OPTBENCH_CORPUS_LINES="91 205": run only these lines of corpus.txt (while working on them)."""
SELECTED = [case for case in CASES if not ONLY or case.number in ONLY]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The canary tree and the baseline results (a plan, a dry-run job, a sweep, a run with checkpoints)."""
    import torch

    from launch.cli import main
    from optbench.corpus.prepare import Part, prepare
    from optbench.outputs import claim

    root = tmp_path_factory.mktemp("adversarial")
    canary, kind = build_canary(root)
    baseline = claim(root / "baseline", "results_dir", "results")
    (baseline / "published").mkdir(parents=True)
    published = Path(__file__).resolve().parents[1] / "results" / "published"
    rows = (published / "published.csv").read_text().splitlines()
    (baseline / "published" / "published.csv").write_text("\n".join(rows[:3]) + "\n")
    shutil.copy(published / "sources.csv", baseline / "published" / "sources.csv")
    saved = {name: os.environ.get(name) for name in ("OMP_NUM_THREADS", *SECRETS)}
    os.environ.update({"OMP_NUM_THREADS": "1", **SECRETS})
    threads = torch.get_num_threads()
    try:
        for argv in (
            ["plan", "kimi_k2_tiny_muon"],
            ["pretrain", "qwen3_30b_a3b_muon", "dryrun=true"],
            ["sweep", "qwen3_30b_a3b_muon", "parallel.ep=4,8", "dryrun=true"],
            ["pretrain", "kimi_k2_tiny_muon", *MICRO, "train.iters=4", "train.save_interval=2", "run_id=saved"],
        ):
            assert main([*argv, f"results_dir={baseline}"]) == 0, argv
    finally:
        torch.set_num_threads(threads)
        for name, value in saved.items():
            os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)
    corpus = root / "corpus"
    manifest = prepare([Part("earlier", ["an earlier corpus document " * 10])], corpus, vocab_size=300)
    return World(root, canary, baseline, corpus, Path(manifest["tokenizer"]["path"]) / "tokenizer.json", kind)


def test_the_corpus_is_large_and_covers_every_surface() -> None:
    assert len(CASES) >= 400
    targets = {case.target for case in CASES}
    assert targets == {"plan", "pretrain", "sweep", "data", "table", "make"}
    assert sum(case.expect == "refused" for case in CASES) >= 250


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", SELECTED, ids=[case.id for case in SELECTED])
def test_adversarial_command(case: Case, world: World, tmp_path: Path, capsys, monkeypatch) -> None:
    places = Places(tmp_path / "results", tmp_path / "scratch", tmp_path / "corpus")
    copy_results(world, places)
    words = [w for word in case.words if not word.startswith("@") for w in expand(word, world, places)]
    apply_setups([word[1:] for word in case.words if word.startswith("@")], places)
    if case.target in ("plan", "pretrain", "sweep") and not any(w.startswith("results_dir=") for w in words):
        words.append(f"results_dir={places.results}")
    for name, value in {**SECRETS, "OMP_NUM_THREADS": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OPTBENCH_COMMAND", raising=False)
    monkeypatch.chdir(world.canary / "checkout")
    canary, results, scratch = snapshot(world.canary), snapshot(places.results), snapshot(places.scratch)
    if case.target == "make":
        code, out, err = run_make(words)
    else:
        for name, value in environment(case, words, places).items():
            monkeypatch.setenv(name, value)
        code = run_in_process(case, words)
        out, err = capsys.readouterr()
    shown = f"{case.text}\n--- exit {code}\n{out[-2000:]}\n--- stderr\n{err[-2000:]}"
    assert "Traceback" not in out + err, shown
    assert code == (0 if case.expect == "ok" else 2), shown
    if case.expect == "refused" and case.target != "make":
        lines = err.strip().splitlines()
        assert lines and lines[0].startswith("error: ") and len(lines) <= 2, shown
        if case.field:
            assert lines[0].startswith(f"error: {case.field}: "), shown
    printed = out + err
    written = texts(places.results, places.scratch, places.corpus)
    for secret in SECRETS.values():
        assert secret not in printed, f"secret printed: {shown}"
        assert secret not in written, f"secret written: {case.text}"
    assert snapshot(world.canary) == canary, f"a canary changed: {shown}"
    if case.expect == "refused":
        assert snapshot(places.results) == results, f"a refusal changed results/: {shown}"
        assert snapshot(places.scratch) == scratch, f"a refusal changed the scratch folder: {shown}"
