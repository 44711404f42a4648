"""metrics.jsonl survives a kill mid-write; the summary statistics skip warm-up steps as documented."""

from __future__ import annotations

import json

import pytest

from optbench.metrics import read_metrics, repair_metrics, steady_state, warmup_steps_skipped
from optbench.metrics.jsonl import JsonlAppender
from optbench.metrics.wandb_run import flatten


def _records(n: int) -> list[dict]:
    return [
        {
            "step": i,
            "loss": 10.0 - i,
            "step_time_s": 1.0 + (5.0 if i == 1 else 0.0),
            "optimizer_time_s": 0.25,
            "tokens_per_s": 100.0 * i,
            "tflops_per_gpu": 0.5,
            "mfu": {"cpu_fp32_probe": 0.1},
        }
        for i in range(1, n + 1)
    ]


def test_appender_writes_one_flushed_line_per_record(tmp_path):
    path = tmp_path / "metrics.jsonl"
    appender = JsonlAppender(path)
    appender.append({"step": 1, "loss": 2.5})
    # Flushed, not just buffered: another reader sees it before close().
    assert read_metrics(path) == [{"step": 1, "loss": 2.5}]
    appender.close()


def test_partial_last_line_is_skipped_and_repaired(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps(r) for r in _records(3)]
    path.write_text("\n".join(lines) + "\n" + lines[0][:17])  # a kill cut the 4th write short
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    kept = repair_metrics(path)
    assert [r["step"] for r in kept] == [1, 2, 3]
    assert path.read_text().endswith("\n") and len(path.read_text().splitlines()) == 3


def test_complete_last_record_without_newline_is_kept(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1}) + "\n" + json.dumps({"step": 2}))
    assert [r["step"] for r in read_metrics(path)] == [1, 2]


def test_corruption_before_the_last_line_raises(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2"):
        read_metrics(path)


def test_repair_for_resume_drops_steps_after_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _records(5)))
    kept = repair_metrics(path, keep_through_step=3)
    assert [r["step"] for r in kept] == [1, 2, 3]
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]


def test_steady_state_skips_warmup_and_takes_medians():
    assert [warmup_steps_skipped(n) for n in (0, 1, 2, 3, 4, 7, 8, 100)] == [0, 0, 0, 1, 1, 3, 3, 3]
    steady = steady_state(_records(8))
    assert steady["warmup_steps_skipped"] == 3 and steady["measured_steps"] == [4, 8]
    assert steady["step_time_s"] == 1.0  # step 1's 6 s is left out
    assert steady["tokens_per_s"] == 600.0  # median of 400..800
    assert steady["optimizer_share"] == 0.25
    assert steady["mfu"] == {"cpu_fp32_probe": 0.1}


def test_flatten_nests_with_slashes():
    assert flatten({"mfu": {"h100_bf16": 0.4}, "loss": 1.0}) == {"mfu/h100_bf16": 0.4, "loss": 1.0}


def test_a_run_calls_its_code_dirty_only_for_changes_outside_results(tmp_path, monkeypatch):
    """make table and make compare rewrite committed pages under results/; a run after them ran clean code, and its
    summary (and the compare page that quotes it) must not say "uncommitted changes"."""
    import subprocess

    import optbench.common.checkout as checkout
    from optbench.metrics.summary import git_commit

    def git(*words):
        subprocess.run(["git", "-C", str(tmp_path), *words], check=True, capture_output=True)

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "page.md").write_text("a\n")
    (tmp_path / "code.py").write_text("a = 1\n")
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    monkeypatch.setattr(checkout, "repo_root", lambda: tmp_path)
    (tmp_path / "results" / "page.md").write_text("b\n")
    assert git_commit()["dirty"] is False
    (tmp_path / "code.py").write_text("a = 2\n")
    assert git_commit()["dirty"] is True
