"""results/study.md rebuilds byte for byte from what git holds: each study run's summary and curves."""

from __future__ import annotations

import json

from optbench.common.checkout import repo_root
from optbench.experiments.study import run_study
from optbench.experiments.study_format import headline, markdown, run_stamp
from optbench.experiments.study_plan import CURVES, StudySpec, candidate_runs


def _refuse(config) -> None:
    raise AssertionError(f"the committed study lacks the finished run {config.run_id}: it would train")


def test_the_committed_study_page_rebuilds_from_the_committed_runs():
    """No run trains (every one the study needs is committed) and the page comes out as committed. The validation
    set's statistics come from study.json: ``make study`` recomputes them from the corpus, which a test does not
    build."""
    results = repo_root() / "results"
    committed = json.loads((results / "study.json").read_text(encoding="utf-8"))
    study = run_study(
        StudySpec(results_dir=str(results)),
        launcher=_refuse,
        progress=lambda _line: None,
        validation=committed["validation"],
    )
    page = markdown(study, committed["command"], run_stamp(study))
    assert page == (results / "study.md").read_text(encoding="utf-8")
    # docs/results.md's headline is the same runs' every target, as make study wrote it
    assert headline(study) in (repo_root() / "docs" / "results.md").read_text(encoding="utf-8")


def test_every_committed_study_run_is_tracked_whole():
    """Each run the page cites has its summary, config and curves in git, and none of its full metrics."""
    import subprocess

    root = repo_root()
    tracked = set(
        subprocess.run(
            ["git", "ls-files", "results/runs"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.split()
    )
    cited = [
        run.run_id
        for run in candidate_runs(StudySpec())
        if (root / "results" / "runs" / run.run_id / "summary.json").is_file()
    ]
    assert len(cited) >= 60
    for run_id in cited:
        for name in ("summary.json", "config.yaml", CURVES):
            assert f"results/runs/{run_id}/{name}" in tracked, f"{run_id}/{name} is not committed"
        assert f"results/runs/{run_id}/metrics.jsonl" not in tracked


def test_a_study_refuses_a_corpus_its_runs_did_not_train_on():
    """pydocs is built from the running Python's stdlib: another Python's corpus would validate other text."""
    import pytest

    from optbench.common.errors import UserError

    results = repo_root() / "results"
    committed = json.loads((results / "study.json").read_text(encoding="utf-8"))
    assert committed["validation"]["corpus"].startswith("Megatron indexed data")
    other = {
        **committed["validation"],
        "corpus": "Megatron indexed data, 2 prefix(es), 590 documents, 1,020,000 tokens",
    }
    with pytest.raises(UserError) as refused:
        run_study(StudySpec(results_dir=str(results)), launcher=_refuse, progress=lambda _line: None, validation=other)
    line = refused.value.lines()[0]
    assert line.startswith("error: data: the corpus here (") and "Python 3." in line and "trained on" in line


def _copied_runs(tmp_path):
    import shutil

    from optbench.common.outputs import claim

    results = claim(tmp_path / "results", "results_dir", "results")
    for run in candidate_runs(StudySpec()):
        source = repo_root() / "results" / "runs" / run.run_id
        if (source / "summary.json").is_file():
            shutil.copytree(source, results / "runs" / run.run_id)
    return results


def _refused(results, tmp_path) -> str:
    import pytest

    from optbench.common.errors import UserError
    from adversarial.harness import snapshot

    before = snapshot(results)
    committed = json.loads((repo_root() / "results" / "study.json").read_text(encoding="utf-8"))
    with pytest.raises(UserError) as refused:
        run_study(
            StudySpec(results_dir=str(results)),
            launcher=_refuse,
            progress=lambda _line: None,
            validation=committed["validation"],
        )
    assert snapshot(results) == before, "a refused study wrote"
    [line] = refused.value.report()
    return line


def test_a_run_whose_curves_are_lost_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    """Issue 78 item 5: a checkout where a curve file is lost (the full metrics are not committed) wrote an empty
    study_curves.json, through a link where the run folder was one, and raised IndexError on every later run."""
    results = _copied_runs(tmp_path)
    lost = results / "runs" / "study2-cpu-adamw-lr0.0003-s1"
    (lost / CURVES).unlink()
    line = _refused(results, tmp_path)
    assert line.startswith(f"error: results_dir: {lost} is not a finished run") and "curve is lost" in line
    assert _refused(results, tmp_path) == line  # the same refusal every time: nothing was left behind
    # the run folder a link to a copy elsewhere: nothing is written through it
    elsewhere = tmp_path / "elsewhere"
    lost.rename(elsewhere)
    lost.symlink_to(elsewhere)
    (elsewhere / "metrics.jsonl").write_text('{"step": 1, "loss": 5.0, "step_time_s": 0.1}\n')
    assert "no validation curve" in _refused(results, tmp_path)
    assert not (elsewhere / CURVES).exists()


def test_curves_of_the_wrong_shape_are_refused_in_one_line(tmp_path):
    results = _copied_runs(tmp_path)
    curves = results / "runs" / "study2-cpu-adamw-lr0.0003-s1" / CURVES
    good = json.loads(curves.read_text())
    for damaged, said in (
        ({**good, "val": [["4", "x"]]}, "(step, loss) pairs"),
        ({**good, "step_time_s": ["fast"]}, "step_time_s is not a list of numbers"),
        ({**good, "val": []}, "no validation curve"),
        ([1, 2], "holds a list"),
    ):
        curves.write_text(json.dumps(damaged))
        assert said in _refused(results, tmp_path)
