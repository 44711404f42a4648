"""Output folders: the ownership rules, journaled replacement under SIGKILL at any instant, read-only places,
secrets in debug tracebacks, and the local engine's thread choice."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import MICRO_KIMI, MICRO_VOCAB, REPO, published_subset

from optbench.engine.local.threads import (
    CpuSample,
    ThreadGovernor,
    others_busy_cores,
    threads_for,
)
from optbench.common.errors import UserError
from optbench.common.outputs import claim, output_problem
from optbench.common.replace import ASIDE_INFIX, JOURNAL_PREFIX, recover

pytestmark = pytest.mark.slow  # kills and restricts subprocesses; `make test-fast` skips it

PY = sys.executable


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **extra}


# ---------------------------------------------------------------------------------------------------
# Ownership rules
# ---------------------------------------------------------------------------------------------------


def test_a_folder_is_new_empty_or_marked_and_never_a_place_that_holds_something_else(tmp_path: Path) -> None:
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "user")
    assert output_problem(tmp_path / "new" / "deeper", "results") is None
    assert output_problem(tmp_path / "empty", "results") is None
    assert "did not create it" in output_problem(tmp_path / "user", "results")
    assert "is a file" in output_problem(tmp_path / "file", "results")
    assert "symbolic link" in output_problem(tmp_path / "link", "results")
    assert "under /dev" in output_problem("/dev/null", "corpus")
    assert "root of the file system" in output_problem("/", "corpus")
    assert "is the working directory" in output_problem(REPO, "results")  # the tests run in the checkout
    assert "above it" in output_problem(REPO.parent, "results")
    assert "conf/ folder" in output_problem(REPO / "conf" / "new", "corpus")
    assert "the input" in output_problem(tmp_path / "user", "corpus", inputs=[tmp_path / "user"])
    assert "holds the input" in output_problem(tmp_path, "corpus", inputs=[tmp_path / "user"])
    claim(tmp_path / "ours", "results_dir", "results")
    (tmp_path / "ours" / "plan.json").write_text("{}")
    assert output_problem(tmp_path / "ours", "results") is None
    assert "not a corpus" in output_problem(tmp_path / "ours", "corpus")


def test_a_path_holding_a_secret_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "wk-outputs-0123456789")
    assert "holds the value of $WANDB_API_KEY, a secret" in output_problem(
        tmp_path / "wk-outputs-0123456789", "results"
    )


# ---------------------------------------------------------------------------------------------------
# Journaled replacement
# ---------------------------------------------------------------------------------------------------


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


KILLED_IN_BLOCK = """
import os, signal, sys
from pathlib import Path
from optbench.common.replace import Folder, replacing
out, moment = Path(sys.argv[1]), sys.argv[2]
with replacing(folders=[Folder(out)]):
    if moment != "before set-aside":
        out.mkdir()
        (out / "half.txt").write_text("the killed command's partial output")
    if moment.startswith("committed"):
        import optbench.common.replace as r
        real = r.atomic_write_json
        def then_die(path, data):
            real(path, data)
            if data.get("state") == "committed":
                import shutil
                shutil.rmtree(out); out.mkdir(); (out / "new.txt").write_text("complete new output")
                os.kill(os.getpid(), signal.SIGKILL)
        r.atomic_write_json = then_die
    else:
        os.kill(os.getpid(), signal.SIGKILL)
"""
"""A process that replaces ``out`` and is killed at ``moment`` (its journal is real: this optbench wrote it here)."""


def killed_in_block(out: Path, moment: str) -> None:
    done = subprocess.run([PY, "-c", KILLED_IN_BLOCK, str(out), moment], env=_env(), capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr


@pytest.mark.parametrize(
    "moment", ["before set-aside", "set aside, block half done", "committed, aside not yet removed"]
)
def test_a_kill_at_any_moment_of_a_replacement_is_repaired_by_the_next_command(tmp_path: Path, moment: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("earlier output")
    killed_in_block(out, moment)
    assert [p for p in tmp_path.iterdir() if p.name.startswith(JOURNAL_PREFIX)]
    recover(tmp_path, [out])
    expected = (
        {"new.txt": hashlib.sha1(b"complete new output").hexdigest()}
        if moment.startswith("committed")
        else {"old.txt": hashlib.sha1(b"earlier output").hexdigest()}
    )
    assert _tree(out) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_journal_of_a_running_process_is_a_refusal_and_foreign_journals_are_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    token = "0" * 32
    journal = tmp_path / f"{JOURNAL_PREFIX}{os.getppid()}-{token}.json"
    journal.write_text(
        json.dumps(
            {
                "format": 2,
                "pid": os.getppid(),
                "token": token,
                "host": socket.gethostname(),
                "folder": os.path.realpath(tmp_path),
                "folder_id": [tmp_path.stat().st_dev, tmp_path.stat().st_ino],
                "state": "started",
                "entries": [{"name": "out", "kind": "folder", "existed": True}],
            }
        )
    )
    with pytest.raises(UserError, match="being written by process"):
        recover(tmp_path, [out])
    journal.unlink()
    (tmp_path / f"{JOURNAL_PREFIX}77.json").write_text('{"pid": 77, "state": "started", "entries": [{"path": "/etc"}]}')
    notes = recover(tmp_path, [out])  # not a journal of ours: never acted on, said in one line
    assert (tmp_path / f"{JOURNAL_PREFIX}77.json").exists() and Path("/etc").is_dir()
    assert len(notes) == 1 and "left alone" in notes[0]


def _complete_corpus(out: Path) -> bool:
    manifest = json.loads((out / "corpus.json").read_text())
    return all(
        hashlib.sha256(Path(part["prefix"] + suffix).read_bytes()).hexdigest() == digest
        for part in manifest["parts"]
        for suffix, digest in part["sha256"].items()
    )


def test_make_data_killed_at_any_instant_leaves_the_earlier_corpus_or_the_new_one(tmp_path: Path) -> None:
    source = tmp_path / "input"
    source.mkdir()
    for i in range(300):
        (source / f"doc{i}.txt").write_text(f"document {i}: " + "the quick brown fox jumps over the lazy dog " * 40)
    out = tmp_path / "corpus"
    command = [PY, "-m", "optbench", "data", "--input", str(source), "--out", str(out)]
    assert subprocess.run(command, env=_env(), capture_output=True, timeout=120).returncode == 0
    inputs, started = _tree(source), time.perf_counter()
    assert subprocess.run(command, env=_env(), capture_output=True, timeout=120).returncode == 0
    duration = time.perf_counter() - started
    for fraction in (0.15, 0.35, 0.5, 0.65, 0.8, 0.95):
        child = subprocess.Popen(command, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(duration * fraction)
        child.send_signal(signal.SIGKILL)
        child.wait()
        recover(tmp_path, [out])
        assert _complete_corpus(out), fraction
        assert not [p.name for p in tmp_path.iterdir() if ASIDE_INFIX in p.name or p.name.startswith(JOURNAL_PREFIX)]
    assert _tree(source) == inputs
    assert subprocess.run(command, env=_env(), capture_output=True, timeout=120).returncode == 0 and _complete_corpus(
        out
    )


def test_a_sweep_killed_at_any_instant_keeps_the_previous_sweep_or_the_new_one(tmp_path: Path) -> None:
    results = tmp_path / "results"
    command = [
        PY,
        "-m",
        "optbench",
        "sweep",
        "qwen3_30b_a3b_adamw",
        "parallel.ep=4,8",
        "dryrun=true",
        f"results_dir={results}",
    ]
    env = _env(SBATCH_ACCOUNT="acct")
    assert subprocess.run(command, env=env, capture_output=True, timeout=120, cwd=REPO).returncode == 0
    folder = results / "plans" / "qwen3_30b_a3b_adamw" / "sweep"
    started = time.perf_counter()
    assert subprocess.run(command, env=env, capture_output=True, timeout=120, cwd=REPO).returncode == 0
    duration = time.perf_counter() - started
    for fraction in (0.5, 0.7, 0.85, 0.95):
        child = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(duration * fraction)
        child.send_signal(signal.SIGKILL)
        child.wait()
        recover(folder.parent, [folder])
        summary = json.loads((folder / "sweep.json").read_text())
        assert [p["name"] for p in summary["points"]] == ["ep4", "ep8"]
        assert all((folder / name / "sbatch.sh").is_file() for name in ("ep4", "ep8"))
        assert not [
            p.name for p in folder.parent.iterdir() if ASIDE_INFIX in p.name or p.name.startswith(JOURNAL_PREFIX)
        ]


# ---------------------------------------------------------------------------------------------------
# Read-only places: one line, nothing lost (as root, a read-only bind mount; otherwise permissions)
# ---------------------------------------------------------------------------------------------------


def _read_only_run(read_only: Path, argv: list[str]) -> subprocess.CompletedProcess:
    if os.geteuid() == 0:
        script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
        return subprocess.run(
            ["unshare", "-m", "sh", "-c", script, "sh", str(read_only), *argv],
            env=_env(),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=180,
        )
    mode = read_only.stat().st_mode
    read_only.chmod(mode & ~0o222)
    try:
        return subprocess.run(argv, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=180)
    finally:
        read_only.chmod(mode)


def _can_make_read_only(tmp_path: Path) -> bool:
    if os.geteuid() != 0:
        return True
    probe = tmp_path / "probe"
    probe.mkdir()
    done = _read_only_run(probe, ["sh", "-c", f"touch {probe}/x"])
    probe.rmdir() if not any(probe.iterdir()) else None
    return shutil.which("unshare") is not None and "Read-only" in done.stderr


MICRO = [
    *MICRO_KIMI,
    *MICRO_VOCAB,
    "train.gbs=8",
    "train.mbs=2",
    "train.seq_length=32",
    "train.iters=2",
    "train.warmup_iters=1",
    "logger=none",
]


@pytest.mark.parametrize("where", ["results", "results/runs", "results/throughput.md", "data-parent"])
def test_an_unwritable_place_ends_in_one_line_and_loses_nothing(tmp_path: Path, where: str) -> None:
    if not _can_make_read_only(tmp_path):
        pytest.skip("no way to make a folder read-only here (unshare/mount not permitted)")
    results = tmp_path / "results"
    published_subset(results)
    (results / "runs").mkdir()
    (results / "throughput.md").write_text("an earlier table\n")
    (tmp_path / "data-parent").mkdir()
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "a.txt").write_text("some text to tokenize " * 50)
    before = _tree(tmp_path)
    commands = {
        "results": [
            [PY, "-m", "optbench", "table", "--results-dir", str(results)],
            [PY, "-m", "optbench", "pretrain", "kimi_k2_tiny_muon", *MICRO, f"results_dir={results}"],
            [PY, "-m", "optbench", "plan", "kimi_k2_tiny_muon", f"results_dir={results}"],
        ],
        "results/runs": [[PY, "-m", "optbench", "pretrain", "kimi_k2_tiny_muon", *MICRO, f"results_dir={results}"]],
        "results/throughput.md": [[PY, "-m", "optbench", "table", "--results-dir", str(results)]],
        "data-parent": [
            [
                PY,
                "-m",
                "optbench",
                "data",
                "--input",
                str(tmp_path / "input"),
                "--out",
                str(tmp_path / "data-parent" / "corpus"),
            ]
        ],
    }[where]
    for argv in commands:
        done = _read_only_run(tmp_path / where, argv)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and "Traceback" not in done.stderr and len(lines) == 1, done.stderr[-1500:]
        assert lines[0].startswith(("error: results_dir: ", "error: OUT: ")) and any(
            w in lines[0] for w in ("read-only", "not writable", "busy")
        ), lines
        assert _tree(tmp_path) == before


# ---------------------------------------------------------------------------------------------------
# Secrets in debug tracebacks; a lexer error never echoes a secret
# ---------------------------------------------------------------------------------------------------


def test_a_debug_traceback_and_a_lexer_error_never_show_a_secret(tmp_path: Path) -> None:
    secret, key = "acct-debug-hidden-99", "wk-debug-0123456789"
    for words, traceback in (
        ([f"cluster.account={secret}}}"], False),  # Hydra's lexer quotes the whole override
        (["debug=true", f"description={key}}}"], True),  # ... and so does the traceback
        (["debug=true", f"cluster.account={secret}", "description=${oc.select:cluster.account}"], True),
        (["debug=true", f"cluster.account={secret}", "parallel.tp=0"], True),
    ):
        done = subprocess.run(
            [PY, "-m", "optbench", "plan", "qwen3_30b_a3b_adamw", *words, f"results_dir={tmp_path / 'r'}"],
            env=_env(WANDB_API_KEY=key),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0 and ("Traceback" in done.stderr) == traceback, done.stderr[-800:]
        assert secret not in done.stdout + done.stderr and key not in done.stdout + done.stderr, done.stderr[-800:]


# ---------------------------------------------------------------------------------------------------
# Threads of the local engine
# ---------------------------------------------------------------------------------------------------


def test_threads_follow_the_cores_other_processes_leave_free() -> None:
    assert (
        threads_for(2, 0.0) == 2 and threads_for(2, 0.7) == 1 and threads_for(2, 2.0) == 1 and threads_for(2, None) == 2
    )
    assert threads_for(16, 3.2) == 13 and threads_for(4, 1.5) == 3 and threads_for(4, 1.6) == 2
    assert others_busy_cores(CpuSample(0.0, 10.0, 1.0), CpuSample(2.0, 14.0, 2.0)) == pytest.approx(1.5)
    applied: list[int] = []
    governor = ThreadGovernor(applied.append, cores=2, fixed=3)
    assert governor.start() == 3 and applied == [3] and governor.record()["policy"] == "fixed by OMP_NUM_THREADS"


def test_the_governor_samples_the_load_at_start_and_moves_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from optbench.engine.local import threads

    samples = iter(
        [
            CpuSample(0.0, 0.0, 0.0),
            CpuSample(1.0, 2.0, 0.0),  # start: the others keep 2 cores busy
            CpuSample(20.0, 20.0, 19.0),
        ]
    )  # 19 s later: only we were busy
    monkeypatch.setattr(threads, "_sample", lambda: next(samples))
    monkeypatch.setattr(threads.time, "sleep", lambda _: None)
    monkeypatch.setattr(threads.time, "monotonic", lambda: 100.0)
    applied: list[int] = []
    governor = ThreadGovernor(applied.append, cores=2)
    assert governor.start() == 1
    governor.tick(5)
    assert applied == [1, 2] and [c["step"] for c in governor.changes] == [0, 5]


# ---------------------------------------------------------------------------------------------------
# The writers not in the command corpus: bench, compare, study
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "optbench", "bench", "--only", "callback", "--quick", "--out", "{place}"],
        ["-m", "optbench", "compare", "--results-dir", "{place}", "--iters", "2", "--seeds", "1"],
        ["-m", "optbench", "study", "--results-dir", "{place}"],
        ["-m", "optbench", "table", "--results-dir", "{place}"],
    ],
)
def test_bench_compare_study_and_table_refuse_a_place_that_is_not_theirs(tmp_path: Path, argv: list[str]) -> None:
    import stat

    canary = tmp_path / "canary"
    (canary / "user").mkdir(parents=True)
    (canary / "user" / "notes.txt").write_text("mine")
    (canary / "file.txt").write_text("a file")
    try:
        os.mknod(canary / "device", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        os.mkfifo(canary / "device")
    before = {p: (p.lstat().st_mode, p.lstat().st_size) for p in canary.rglob("*")}
    for place in ("user", "file.txt", "device", "."):
        target = str(canary / place) if place != "." else "."
        done = subprocess.run(
            [PY, *(a.replace("{place}", target) for a in argv)],
            env=_env(),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr, (
            done.stderr
        )
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert {p: (p.lstat().st_mode, p.lstat().st_size) for p in canary.rglob("*")} == before
