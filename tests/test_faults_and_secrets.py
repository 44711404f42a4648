"""Faults outside validation: secrets on every path, confined names, checkpoints, run locks, tables, make's `$`."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from test_engine_runs import MICRO_TRAIN, micro_train
from test_launch_slurm import launch

from conftest import MICRO_KIMI, MICRO_VOCAB, REPO, marked_results, published_subset, run_make
from optbench.compose.recipe import compose_run
from optbench.config.schema import RunConfig
from optbench.engine.local import launch_local
from optbench.engine.local.checkpoint import LATEST, MANIFEST, checkpoint_dir, complete_steps
from optbench.common.errors import UserError
from optbench.metrics import read_metrics
from optbench.report.throughput import write_throughput
from optbench.common.run_lock import lock_run_dir, unlock_run_dir

pytestmark = pytest.mark.slow  # runs dry runs, sweeps, local runs and tables in subprocesses; `make test-fast` skips it

SECRETS = {"WANDB_API_KEY": "wk-0123456789abcdef", "SBATCH_ACCOUNT": "acct-hidden-77", "HF_TOKEN": "hf_tokenvalue42"}


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return SECRETS


def leaked(text: str) -> list[str]:
    return [value for value in SECRETS.values() if value in text]


def all_text(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------------
# Secrets
# ---------------------------------------------------------------------------------------------

INTERPOLATED = [
    ("description", "description=${oc.env:WANDB_API_KEY}"),
    ("logger.wandb_project", "logger.wandb_project=${cluster.account}"),
    ("cluster.env.PROJ", "+cluster.env.PROJ=${cluster.account}"),
    ("logger.wandb_group", "logger.wandb_group=${oc.env:SBATCH_ACCOUNT}"),
    ("logger.wandb_tags.0", "logger.wandb_tags=[${oc.env:HF_TOKEN}]"),
    ("description", "description=key wk-0123456789abcdef pasted"),
    ("data.path.0", "data.path=[${oc.env:HF_TOKEN}]"),
]


@pytest.mark.parametrize(("field", "override"), INTERPOLATED, ids=[o for _, o in INTERPOLATED])
@pytest.mark.parametrize("command", ["plan", "pretrain", "sweep"])
def test_a_secret_in_any_field_is_refused_and_never_printed_or_written(
    secrets, capsys, tmp_path, field, override, command
):
    extra = {"pretrain": ["dryrun=true"], "sweep": ["dryrun=true", "train.seed=1,2"]}.get(command, [])
    code, out, err = launch(capsys, command, "kimi_k2_muon", override, *extra, f"results_dir={tmp_path}")
    assert code == 2 and err.startswith(f"error: {field}: "), err
    assert "secret" in err and not leaked(out + err)
    assert not tmp_path.exists() or not leaked(all_text(tmp_path))


def test_no_secret_reaches_any_file_of_a_dry_run_a_sweep_a_local_run_or_a_table(secrets, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    results = tmp_path / "results"
    published_subset(results)
    outputs = []
    for args in (
        ["plan", "kimi_k2_muon"],
        ["pretrain", "kimi_k2_muon", "dryrun=true", "+cluster.env.EXTRA=1"],
        ["sweep", "qwen3_30b_a3b_muon", "parallel.ep=4,8", "dryrun=true"],
        ["pretrain", "kimi_k2_tiny_muon", *MICRO_KIMI, *MICRO_VOCAB, *micro_train(iters=2), "logger=wandb_offline"],
    ):
        code, out, err = launch(capsys, *args, f"results_dir={results}")
        assert code == 0, err
        outputs.append(out + err)
    write_throughput(results)
    written = all_text(results)
    assert "nemo_run" in "".join(str(p) for p in results.rglob("*"))  # NeMo-Run's own files were checked too
    assert not leaked(written) and not leaked("".join(outputs))


# ---------------------------------------------------------------------------------------------
# Names confined to their folders
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("recipe=../../escape", "recipe"),
        ("recipe=kimi_k2_adamw", "recipe"),
        ("recipe=", "recipe"),
        ("run_id=" + "r" * 300, "run_id"),
        ("run_id=" + "r" * 100_000, "run_id"),
        ("run_id=../x", "run_id"),
    ],
)
def test_recipe_names_and_run_ids_stay_in_their_folders(capsys, tmp_path, override, field):
    code, _, err = launch(capsys, "plan", "kimi_k2_muon", override, f"results_dir={tmp_path / 'results'}")
    assert code == 2 and err.startswith(f"error: {field}: ") and len(err.splitlines()) == 1, err[:300]
    assert not tmp_path.joinpath("results").exists() and not (tmp_path / "escape").exists()


# ---------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------


def _micro(results: Path, *overrides: str) -> RunConfig:
    # One schedule for every run here (6 steps of cosine), so that a run resumed with more iterations
    # follows the same learning rates as an uninterrupted one.
    return compose_run(
        "kimi_k2_tiny_muon",
        [
            *MICRO_KIMI,
            *MICRO_VOCAB,
            *MICRO_TRAIN,
            "train.lr_decay_iters=6",
            f"results_dir={results}",
            "logger=none",
            *overrides,
        ],
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A finished 4-step run with checkpoints after steps 2 and 4 (one thread, as the tests that resume it)."""
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        results = tmp_path_factory.mktemp("ckpt") / "results"
        launch_local(_micro(results, "run_id=base", "train.save_interval=2"))
    finally:
        if previous is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = previous
    return results


def _copy(saved: Path, tmp_path: Path) -> Path:
    results = tmp_path / "results"
    shutil.copytree(saved, results)
    return results


def _break(root: Path, how: str) -> None:
    step4 = root / "step_000004"
    if how == "truncated":
        data = (step4 / "model.pt").read_bytes()
        (step4 / "model.pt").write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        (step4 / "rank0.pt").write_bytes(b"\x00garbage" * 100)
    elif how == "empty shard":
        (step4 / "rank0.pt").write_bytes(b"")
    elif how == "missing shard":
        (step4 / "rank0.pt").unlink()
    elif how == "wrong shape":
        state = torch.load(step4 / "model.pt", weights_only=True)
        name = next(iter(state))
        state[name] = torch.zeros(3, 3)
        torch.save(state, step4 / "model.pt")
    elif how == "no manifest":
        (step4 / MANIFEST).unlink()
    elif how == "empty latest":
        (root / LATEST).write_text("")
    elif how == "binary latest":
        (root / LATEST).write_bytes(b"\xff\xfe\x00step")
    elif how == "escaping latest":
        (root / LATEST).write_text("../../runs\n")
    elif how == "latest names nothing":
        (root / LATEST).write_text("step_000099\n")


CORRUPTIONS = [
    "truncated",
    "garbage",
    "empty shard",
    "missing shard",
    "wrong shape",
    "no manifest",
    "empty latest",
    "binary latest",
    "escaping latest",
    "latest names nothing",
]


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_a_corrupt_checkpoint_is_named_in_one_line_and_the_last_complete_one_offered(saved, tmp_path, capsys, how):
    results = _copy(saved, tmp_path)
    root = checkpoint_dir(_micro(results, "run_id=base"))
    assert complete_steps(root) == [2, 4]
    _break(root, how)
    code, _, err = launch(
        capsys,
        "pretrain",
        "kimi_k2_tiny_muon",
        *MICRO_KIMI,
        *MICRO_VOCAB,
        *micro_train(iters=6),
        "train.lr_decay_iters=6",
        "logger=none",
        "run_id=base",
        "resume=true",
        "train.save_interval=2",
        f"results_dir={results}",
    )
    assert code == 2, err
    [line] = err.splitlines()
    offered = 4 if "latest" in how else 2  # a broken pointer leaves both checkpoints complete
    assert line.startswith("error: resume: ") and f"add train.resume_step={offered} to continue from it" in line, line


def test_resume_from_the_offered_checkpoint_continues_bit_for_bit(saved, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    results = _copy(saved, tmp_path)
    whole = launch_local(_micro(results, "run_id=whole", "train.iters=6"))
    _break(checkpoint_dir(_micro(results, "run_id=base")), "truncated")
    resumed = launch_local(
        _micro(results, "run_id=base", "resume=true", "train.iters=6", "train.save_interval=2", "train.resume_step=2")
    )
    records = read_metrics(resumed / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert [r["loss"] for r in records] == [r["loss"] for r in read_metrics(whole / "metrics.jsonl")]


def test_a_run_killed_before_its_first_checkpoint_resumes_from_the_start(saved, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    results = _copy(saved, tmp_path)
    directory = results / "runs" / "early"
    shutil.copytree(results / "runs" / "base", directory)  # config and two steps' metrics, no checkpoint
    (directory / "summary.json").unlink()
    lines = (directory / "metrics.jsonl").read_text().splitlines()[:2]
    (directory / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match="add resume=true"):
        launch_local(_micro(results, "run_id=early"))
    resumed = launch_local(_micro(results, "run_id=early", "resume=true"))
    assert [r["step"] for r in read_metrics(resumed / "metrics.jsonl")] == [1, 2, 3, 4]


def test_two_runs_with_one_run_id_cannot_write_at_once(tmp_path, capsys):
    directory = marked_results(tmp_path / "results") / "runs" / "twice"
    handle = lock_run_dir(directory)
    try:
        code, _, err = launch(
            capsys,
            "pretrain",
            "kimi_k2_tiny_muon",
            *MICRO_KIMI,
            *MICRO_VOCAB,
            *MICRO_TRAIN,
            "logger=none",
            "run_id=twice",
            f"results_dir={tmp_path / 'results'}",
        )
    finally:
        unlock_run_dir(handle)
    assert code == 2 and err.startswith("error: run_id: ") and "being written by another process" in err
    assert not (directory / "metrics.jsonl").exists()


def test_a_diverging_run_ends_in_one_line(tmp_path, capsys, monkeypatch):
    from optbench.engine.local import trainer

    monkeypatch.setattr(trainer.Trainer, "_forward_backward", lambda self, step: torch.tensor(float("nan")))
    code, _, err = launch(
        capsys,
        "pretrain",
        "kimi_k2_tiny_muon",
        *MICRO_KIMI,
        *MICRO_VOCAB,
        *MICRO_TRAIN,
        "logger=none",
        f"results_dir={tmp_path}",
    )
    assert (
        code == 2
        and err.startswith("error: optimizer.lr: the loss became nan at step 1")
        and len(err.splitlines()) == 1
    )


# ---------------------------------------------------------------------------------------------
# make table over broken folders and bare logs
# ---------------------------------------------------------------------------------------------


def test_make_table_skips_broken_runs_with_a_reason_and_reads_any_bridge_log(saved, tmp_path):
    results = _copy(saved, tmp_path)
    published_subset(results)
    good = results / "runs" / "base"
    for name, files in {
        "bad-yaml": {"config.yaml": "model: [unclosed\n  : :"},
        "list-line": {"metrics.jsonl": '[1, 2, 3]\n{"step": 1}\n'},
        "negative-time": {
            "job.log": " [2026-04-01 12:00:00] iteration 10/ 100 | elapsed time per iteration (ms): -12.5 |"
            " throughput per GPU (TFLOP/s/GPU): -3.0 | lm loss: 9.8E+00 |\n"
        },
    }.items():
        folder = results / "runs" / name
        folder.mkdir()
        if name == "bad-yaml":
            shutil.copy(good / "metrics.jsonl", folder / "metrics.jsonl")
        for file, text in files.items():
            (folder / file).write_text(text)
    binary = results / "runs" / "binary"
    binary.mkdir()
    (binary / "metrics.jsonl").write_bytes(bytes(range(256)) * 8)
    log = tmp_path / "anywhere" / "job.out"
    log.parent.mkdir()
    log.write_text(
        "Step Time : 12.78s GPU utilization: 528.1 TFLOP/s/GPU\nStep Time : 12.92s GPU utilization: "
        "1037.0MODEL_TFLOP/s/GPU\n"
    )
    out = write_throughput(results, warmup=0, extra_logs=[log])
    reasons = dict(out.skipped)
    assert "a metrics line must be a JSON object" in reasons[str(results / "runs" / "list-line")]
    assert "not a metrics file" in reasons[str(binary)]
    ids = {run.run_id for run in out.table.runs}
    assert {"base", "bad-yaml", "job"} <= ids  # a broken config.yaml costs identity, not the run
    bare = next(run for run in out.table.runs if run.run_id == "job")
    assert [s.tflops_per_gpu for s in bare.steps] == [528.1, 1037.0]
    negative = next((run for run in out.table.runs if run.run_id == "negative-time"), None)
    assert negative is None or all(s.tflops_per_gpu is None and s.step_time_s is None for s in negative.steps)


# ---------------------------------------------------------------------------------------------
# `$` through make
# ---------------------------------------------------------------------------------------------


def test_dollar_values_reach_hydra_exactly_as_typed_through_make(tmp_path):
    results = tmp_path / "results"
    done = run_make("plan", "RECIPE=kimi_k2_tiny_muon", "description=cost $5 ${oc.env:HOME}", f"results_dir={results}")
    assert done.returncode == 0, done.stderr
    plan = json.loads((results / "plans" / "kimi_k2_tiny_muon" / "plan.json").read_text())
    assert plan["description"] == f"cost $5 {Path.home()}"
    done = run_make("plan", "RECIPE=kimi_k2_tiny_muon", "description=${description}", f"results_dir={results}")
    assert (
        done.returncode == 2
        and done.stderr.startswith("error: description: ")
        and "Recursive variable" not in done.stderr
    )


def test_the_makefile_keeps_every_top_level_field_out_of_makes_exports() -> None:
    from dataclasses import MISSING, fields

    scalar = {f.name for f in fields(RunConfig) if f.default_factory is MISSING}  # the sections have factories
    [line] = [line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith("unexport ")]
    assert set(line.split()[1:]) == scalar
