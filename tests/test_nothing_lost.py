"""Issue 59's cases, each as a user typed it: journals that only undo what their own command wrote, writers that
refuse a path of the wrong kind, refusals before the first write, bounded inputs, and secrets in every variant."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from test_outputs import killed_in_block

from optbench.common.replace import JOURNAL_PREFIX

pytestmark = pytest.mark.slow  # runs make data, make table and friends as subprocesses

PY = sys.executable


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **extra}


def _run(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, *argv], env=_env(**env), cwd=REPO, capture_output=True, text=True, timeout=300)


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def _corpus(out: Path) -> dict[str, str]:
    """A corpus's files, its manifest without the seconds the build took, and its marker without the minute it was
    made (a rebuild that crosses a minute writes a new stamp: the same corpus, not a different one)."""
    stamped = ("corpus.json", ".optbench-corpus")
    files = {name: digest for name, digest in _tree(out).items() if name not in stamped}
    marker = re.sub(r" on \d{4}-\d\d-\d\d \d\d:\d\d UTC;", " on <stamp>;", (out / ".optbench-corpus").read_text())
    return {**files, "corpus.json": json.loads((out / "corpus.json").read_text())["parts"], ".optbench-corpus": marker}


def _corpus_input(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for i in range(3):
        (folder / f"doc{i}.txt").write_text(f"document {i}: " + "the quick brown fox jumps over the lazy dog " * 5)
    return folder


def make_data(source: Path, out: Path) -> subprocess.CompletedProcess:
    return _run("-m", "optbench", "data", "--input", str(source), "--out", str(out))


def _one_line_refusal(done: subprocess.CompletedProcess, field: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), done.stderr


# ---------------------------------------------------------------------------------------------------
# Journals only ever undo what their own command wrote
# ---------------------------------------------------------------------------------------------------


def test_a_strangers_journal_beside_out_is_reported_and_never_followed(tmp_path: Path) -> None:
    source, shared, victim = _corpus_input(tmp_path / "in"), tmp_path / "w" / "shared", tmp_path / "w" / "victim"
    shared.mkdir(parents=True)
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    import socket

    for name, record in {
        f"{JOURNAL_PREFIX}424242.json": {  # the earlier format: absolute paths
            "pid": 424242,
            "host": socket.gethostname(),
            "state": "started",
            "entries": [
                {"path": str(victim), "aside": str(tmp_path / "w" / ".victim.previous-424242"), "existed": False}
            ],
        },
        f"{JOURNAL_PREFIX}424243-{'a' * 32}.json": {  # today's format, naming a place outside its folder
            "format": 2,
            "pid": 424243,
            "token": "a" * 32,
            "host": socket.gethostname(),
            "folder": os.path.realpath(shared),
            "folder_id": [shared.stat().st_dev, shared.stat().st_ino],
            "state": "started",
            "entries": [{"name": "../victim", "kind": "folder", "existed": False}],
        },
    }.items():
        (shared / name).write_text(json.dumps(record))
    done = make_data(source, shared / "ds")
    assert done.returncode == 0, done.stderr
    assert (victim / "thesis.tex").read_text() == "years of work"
    assert done.stdout.count("note: left alone") == 2
    assert len(list(shared.glob(f"{JOURNAL_PREFIX}*"))) == 2  # reported, not removed


def test_a_journal_copied_with_its_folder_never_acts_on_the_original(tmp_path: Path) -> None:
    source = _corpus_input(tmp_path / "in")
    a, b = tmp_path / "A", tmp_path / "B"
    assert make_data(source, a / "ds").returncode == 0
    earlier = _corpus(a / "ds")
    killed_in_block(a / "ds", "set aside, block half done")  # a build of A/ds killed midway: A's own journal
    shutil.copytree(a, b, symlinks=True)
    done = make_data(source, b / "other")  # the copied journal names A/ds's entry: it is not B's to act on
    assert done.returncode == 0 and "left alone" in done.stdout, done.stderr
    assert make_data(source, a / "ds").returncode == 0  # A's own journal restores, then A is rebuilt
    assert _corpus(a / "ds") == earlier
    assert make_data(source, b / "other2").returncode == 0
    assert _corpus(a / "ds") == earlier


def test_a_build_killed_while_writing_its_marker_is_undone_by_the_next_make_data(tmp_path: Path) -> None:
    source, out = _corpus_input(tmp_path / "in"), tmp_path / "ds"
    killed_in_block(out, "set aside, block half done")  # ds new, created and half-written, journal left
    (out / "half.txt").rename(out / ".optbench-corpus.k3j9.tmp")  # the marker's temporary file, as a kill leaves it
    done = make_data(source, out)
    assert done.returncode == 0, done.stderr
    assert "restored" in done.stdout and (out / "corpus.json").is_file() and (out / ".optbench-corpus").is_file()


def test_a_users_file_in_an_earlier_corpus_is_refused_not_deleted(tmp_path: Path) -> None:
    source, out = _corpus_input(tmp_path / "in"), tmp_path / "ds"
    assert make_data(source, out).returncode == 0
    (out / "NOTES.md").write_text("my notes on this corpus")
    before = _tree(tmp_path)
    done = make_data(source, out)
    _one_line_refusal(done, "OUT")
    assert "NOTES.md" in done.stderr and _tree(tmp_path) == before


def test_make_table_refuses_a_folder_where_it_writes_a_file(tmp_path: Path) -> None:
    from conftest import published_subset

    results = tmp_path / "results"
    published_subset(results)
    (results / "throughput.md").mkdir()
    (results / "throughput.md" / "mine.txt").write_text("a file of the user's")
    before = _tree(results)
    done = _run("-m", "optbench", "table", "--results-dir", str(results))
    _one_line_refusal(done, "results_dir")
    assert "throughput.md is a folder" in done.stderr and _tree(results) == before


# ---------------------------------------------------------------------------------------------------
# make projection: every refusal before the first write, its outputs replaced all together
# ---------------------------------------------------------------------------------------------------


@pytest.fixture
def checkout_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout whose documents make projection reads (README.md, docs/projection.md) are copies."""
    from optbench.report import validation_report

    root = tmp_path / "checkout"
    (root / "docs").mkdir(parents=True)
    for name in ("README.md", "docs/projection.md"):
        shutil.copy(REPO / name, root / name)
    monkeypatch.setattr(validation_report, "repo_root", lambda: root)
    return root


@pytest.mark.parametrize("damage", ["missing", "not utf-8"])
def test_make_projection_refuses_a_damaged_readme_before_writing(
    checkout_copy: Path, tmp_path: Path, damage: str, capsys
) -> None:
    from optbench.__main__ import main

    readme = checkout_copy / "README.md"
    readme.unlink() if damage == "missing" else readme.write_bytes(readme.read_bytes() + b"\xff\xfe")
    results = tmp_path / "results"
    with pytest.raises(SystemExit) as stopped:
        main(["docs-projection", "--results", str(results)])
    assert stopped.value.code == 2 and not results.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: README.md: ") and "nothing was written" in err[0]


def test_make_projection_refuses_a_stray_word_as_make_table_does(monkeypatch, capsys) -> None:
    from optbench.__main__ import main

    monkeypatch.setenv("OPTBENCH_MAKE_OVERRIDES", "foo=1")
    with pytest.raises(SystemExit) as stopped:
        main(["projection", "--results", "/nonexistent/never-written", "--from-make"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith(
        "error: projection: make projection takes no Hydra overrides (got 'foo=1')"
    )


def test_a_replacement_with_one_read_only_file_writes_none_of_the_others(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a read-only bind mount needs root and unshare")
    (tmp_path / "results").mkdir()
    first, locked = tmp_path / "results" / "validation.md", tmp_path / "README.md"
    first.write_text("earlier table\n")
    locked.write_text("the readme\n")
    code = (
        "import sys; from optbench.common.replace import replacing; from optbench.common.io import atomic_write_text\n"
        "from optbench.common.exits import exit_on_user_error\n"
        "with exit_on_user_error():\n"
        "    with replacing(files=[sys.argv[1], sys.argv[2]]):\n"
        "        atomic_write_text(sys.argv[1], 'new'); atomic_write_text(sys.argv[2], 'new')\n"
    )
    script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(locked), PY, "-c", code, str(first), str(locked)],
        env=_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "mount" in done.stderr and done.returncode != 2:
        pytest.skip(f"mount refused here: {done.stderr.strip()[:120]}")
    assert done.returncode == 2 and "is a mount point or read-only" in done.stderr, done.stderr
    assert first.read_text() == "earlier table\n" and locked.read_text() == "the readme\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["README.md", "results", "validation.md"]


# ---------------------------------------------------------------------------------------------------
# Refusals before the first write, and bounded inputs
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("threads", ["0", "99999999999999999999"])
def test_bench_refuses_a_thread_count_before_creating_its_folder(tmp_path: Path, threads: str) -> None:
    out = tmp_path / "bench"
    done = _run("-m", "optbench", "bench", "--threads", threads, "--out", str(out))
    _one_line_refusal(done, "--threads")
    assert not out.exists()


@pytest.mark.parametrize(
    "text", ["", "{}", "[]", '{"rows": [], "layout_changes": []}', '{"rows": [{"row": 1}], "layout_changes": []}']
)
def test_search_ranks_refuses_a_table_it_cannot_keep_rows_from_before_searching(tmp_path: Path, text: str) -> None:
    from conftest import marked_results

    results = marked_results(tmp_path / "results")
    (results / "projection").mkdir()
    (results / "projection" / "search_ranks.json").write_text(text)
    before = _tree(results)
    done = _run("-m", "optbench", "search-ranks", "--results", str(results), "--models", "kimi_k2")
    _one_line_refusal(done, "MODELS")
    assert _tree(results) == before


def test_a_yaml_alias_bomb_in_conf_local_is_refused_at_once(tmp_path: Path) -> None:
    from adversarial.setups import LAUGHS

    from optbench.compose.config_files import check_config_files
    from optbench.common.errors import UserError

    (tmp_path / "conf" / "local").mkdir(parents=True)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "conf" / "local" / "b300.yaml").write_text(LAUGHS)
    with pytest.raises(UserError, match="conf/local/b300.yaml: uses YAML aliases"):
        check_config_files(tmp_path)
    (tmp_path / "conf" / "local" / "b300.yaml").write_text("account: mine\n")
    check_config_files(tmp_path)  # an ordinary file passes (and its new version is scanned again)


def test_make_data_on_a_full_disk_ends_in_one_line_naming_out(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a small file system to fill needs root and unshare")
    source, full = _corpus_input(tmp_path / "in"), tmp_path / "full"
    for i in range(40):
        (source / f"more{i}.txt").write_text(" ".join(f"word{i}x{j}" for j in range(400)))
    full.mkdir()
    script = 'mount -t tmpfs -o size=16k tmpfs "$1" && shift && exec "$@"'
    done = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            script,
            "sh",
            str(full),
            PY,
            "-m",
            "optbench",
            "data",
            "--input",
            str(source),
            "--out",
            str(full / "ds"),
        ],
        env=_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "mount" in done.stderr and done.returncode != 2:
        pytest.skip(f"mount refused here: {done.stderr.strip()[:120]}")
    _one_line_refusal(done, "OUT")
    assert "no space left" in done.stderr


# ---------------------------------------------------------------------------------------------------
# The study: arms keep their grid, one id per run, earlier runs of any shape
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "override",
    [
        "optimizer.lr=0.01",
        "train.seed=3",
        "run_id=fz3_one",
        "optimizer=soap",
        "optimizer.muon.extra_scale_factor=0.5",
        "results_dir=/tmp/elsewhere",
    ],
)
def test_the_study_refuses_a_typed_value_of_what_it_sets_per_run(override: str) -> None:
    from optbench.common.errors import UserError
    from optbench.experiments.study_plan import StudySpec, check

    with pytest.raises(UserError) as refused:
        check(StudySpec(overrides=(override, "train.iters=1")))
    assert refused.value.problems[0].field == override.split("=")[0]


def test_typed_settings_name_the_study_runs_apart_from_the_plain_studys() -> None:
    from optbench.experiments.study_plan import StudySpec, tuning_runs

    plain = tuning_runs(StudySpec())[0].run_id
    short = tuning_runs(StudySpec(overrides=("train.iters=1",)))[0].run_id
    assert plain == "study2-cpu-adamw-lr0.0003-s1"
    assert short.startswith(plain + "-x") and short != tuning_runs(StudySpec(overrides=("train.iters=2",)))[0].run_id
    assert tuning_runs(StudySpec(overrides=("debug=true",)))[0].run_id == plain


@pytest.mark.parametrize("summary", ["[1]", "7", "{not json", '{"tokens_per_step": 5}'])
def test_the_study_refuses_an_earlier_run_it_cannot_read_before_training(tmp_path: Path, summary: str) -> None:
    from optbench.common.errors import UserError
    from optbench.experiments.study_plan import StudySpec, check_finished

    folder = tmp_path / "runs" / "study2-cpu-adamw-lr0.0003-s1"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(summary)
    (folder / "metrics.jsonl").write_text('{"step": 1}\n' if summary.startswith('{"') else "[1, 2]\n")
    with pytest.raises(UserError, match="is not a finished run this study can read"):
        check_finished(StudySpec(results_dir=str(tmp_path)))


# ---------------------------------------------------------------------------------------------------
# Secrets in every variant and every place
# ---------------------------------------------------------------------------------------------------


def _plan(*words: str, **env: str) -> subprocess.CompletedProcess:
    return _run("-m", "optbench", "plan", "kimi_k2_tiny_muon", *words, **env)


def test_a_secret_with_a_trailing_newline_is_never_printed(tmp_path: Path) -> None:
    done = _plan("optimizer=${oc.env:HF_TOKEN}", f"results_dir={tmp_path}", HF_TOKEN="hf-SECRET-321\n")
    assert done.returncode == 2 and "hf-SECRET-321" not in done.stdout + done.stderr, done.stderr


def test_a_secret_reached_through_another_variable_is_refused_before_any_logger_sees_it(tmp_path: Path) -> None:
    key = "wk-alias-0123456789abcdef"
    done = _run(
        "-m",
        "optbench",
        "pretrain",
        "kimi_k2_tiny_muon",
        "description=${oc.env:FZ_ALIAS}",
        "train.iters=1",
        "logger=wandb_offline",
        f"results_dir={tmp_path / 'results'}",
        WANDB_API_KEY=key,
        FZ_ALIAS=key,
    )
    _one_line_refusal(done, "description")
    assert "interpolates a secret" in done.stderr and not (tmp_path / "results").exists()


def test_a_path_holding_the_accounts_word_is_refused_naming_the_variable_not_rewritten(tmp_path: Path) -> None:
    source = _corpus_input(tmp_path / "research")
    done = _run(
        "-m", "optbench", "data", "--input", str(source), "--out", str(tmp_path / "ds"), SBATCH_ACCOUNT="research"
    )
    _one_line_refusal(done, "INPUT")
    assert "$SBATCH_ACCOUNT" in done.stderr and not (tmp_path / "ds").exists()
