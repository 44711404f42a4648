"""`make table`: published rows beside measured fixture runs, plots, and the rules of docs/results.md."""

from __future__ import annotations

import csv
import json
import struct
import shutil
import statistics
from pathlib import Path

import pytest

from conftest import REPO, marked_results, published_subset, run_make, squeezed
from optbench.compose.recipe import compose_run
from optbench.common.errors import UserError
from optbench.measured.collect import collect_runs
from optbench.catalog.published import load_published
from optbench.plan.row_runs import COMPOSED_ROWS
from optbench.projection.expected_error import expected_error_cell
from optbench.projection.published_rows import projection_error
from optbench.report.throughput import write_throughput
from optbench.runs import save_resolved_config

pytestmark = pytest.mark.slow  # runs make table end to end; `make test-fast` skips it

FIXTURES = Path(__file__).parent / "fixtures" / "report"
ADAMW_RUN = "kimi_k2_tiny_adamw-20261120-100000"
MUON_RUN = "kimi_k2_tiny_muon-20261120-100500"
LOG_RUN = "kimi_k2_muon-20260401-100000"
PNG = b"\x89PNG\r\n\x1a\n"


def _published(results: Path) -> None:
    published_subset(results)


def _local_run(results: Path, run_id: str) -> Path:
    directory = marked_results(results) / "runs" / run_id
    shutil.copytree(FIXTURES / "runs" / run_id, directory)
    recipe = run_id.rsplit("-", 2)[0]
    save_resolved_config(compose_run(recipe, [f"run_id={run_id}"]), directory / "config.yaml")
    return directory


def _log_run(results: Path, intent: str = "reproduce", *overrides: str) -> Path:
    directory = marked_results(results) / "runs" / LOG_RUN
    directory.mkdir(parents=True)
    shutil.copy(FIXTURES / "logs" / "bridge_kimi_k2_restart.log", directory / "log-kimi_k2_muon_0.out")
    save_resolved_config(
        compose_run("kimi_k2_muon", [f"run_id={LOG_RUN}", f"intent={intent}", *overrides]), directory / "config.yaml"
    )
    return directory


@pytest.fixture
def measured(results_dir: Path) -> Path:
    _published(results_dir)
    _local_run(results_dir, ADAMW_RUN)
    _local_run(results_dir, MUON_RUN)
    _log_run(results_dir)
    return results_dir


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _fixture_median(run_id: str, field: str, skip: int = 3) -> float:
    lines = (FIXTURES / "runs" / run_id / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.endswith("}")]
    return statistics.median(r[field] for r in records[skip:])


def test_published_side_alone_says_nothing_was_measured(results_dir):
    _published(results_dir)
    out = write_throughput(results_dir)
    text = out.markdown.read_text()
    assert "Nothing was measured" in text
    for figure in ("1,051", "1,080 = 1,029 model + 51 NS", "713", "721 = 686 model + 35 NS"):
        assert figure in text
    assert "1,037" in text and "bridge_perf_summary 26.02.01" in text and "bridge_perf_summary 26.06" in text
    rows = _rows(out.csv)
    assert len(rows) == len(load_published(results_dir / "published"))
    assert all(r["measured_tflops_per_gpu_median"] == "" and r["run_id"] == "" for r in rows)
    assert {"0.979", "1.028", "0.962", "1.011"} <= {t for t in text.replace("|", " ").split()}
    assert all(p.read_bytes().startswith(PNG) for p in out.plots)
    # Beside its projection, each published row states the expected error its own make plan states.
    rows_here = load_published(results_dir / "published")
    checked = [r for r in rows_here if r.optimizer == "muon" and r.release == "26.04"]
    assert checked
    for row in checked:
        p = projection_error(row, COMPOSED_ROWS, with_expected_error=True)
        cell = expected_error_cell(p["expected_error"])
        assert "leave one release out; Muon rows" in cell
        assert f"| {p['tflops']:.0f} | {p['error_percent']:+.1f} % | {cell} | " in squeezed(text), cell


def test_measured_rows_beside_published(measured):
    out = write_throughput(measured)
    rows = _rows(out.csv)
    local = {r["optimizer"]: r for r in rows if r["model"] == "kimi_k2_tiny"}
    assert set(local) == {"adamw", "muon"}
    muon, adamw = local["muon"], local["adamw"]
    # medians over the steps after the warm-up, the killed run's partial last line skipped
    assert float(adamw["measured_tflops_per_gpu_median"]) == pytest.approx(_fixture_median(ADAMW_RUN, "tflops_per_gpu"))
    assert float(muon["measured_tflops_per_gpu_with_ns_median"]) == pytest.approx(
        _fixture_median(MUON_RUN, "tflops_per_gpu_with_ns")
    )
    assert muon["steps_used"] == "7" and muon["steps_total"] == "10"
    ratio = _fixture_median(MUON_RUN, "tflops_per_gpu") / _fixture_median(ADAMW_RUN, "tflops_per_gpu")
    assert float(muon["measured_muon_adamw_ratio_model"]) == pytest.approx(ratio)
    assert muon["mfu_peak_key"] == "cpu_fp32_probe" and float(muon["mfu_peak_tflops"]) == 0.085
    assert muon["command"] == "make pretrain RECIPE=kimi_k2_tiny_muon" and "torch 2.13.0+cpu" in muon["versions"]
    assert muon["git_commit"].endswith("+dirty") and muon["family"] == "kimi_k2"
    assert muon["published_tflops_per_gpu"] == "" and muon["delta_to_published"] == ""

    text = out.markdown.read_text()
    assert text.splitlines()[2].startswith("Measured here: local engine on cpu; megatron log on gb300 (3 run(s)).")
    assert "% of cpu_fp32_probe 85.0 GFLOP/s" in text
    assert "none published" in text and "not measured" in text
    assert f"| `{muon['git_commit'].partition('+')[0][:12]}+dirty` |" in squeezed(text)  # the Runs table keeps the mark


def test_raw_log_row_compares_like_with_like(measured):
    rows = _rows(write_throughput(measured).csv)
    muon_gb300 = [r for r in rows if (r["model"], r["gpu"], r["optimizer"]) == ("kimi_k2", "gb300", "muon")]
    by_release = {r["published_release"]: r for r in muon_gb300}
    bridge = by_release["26.02.01"]  # Bridge counts model FLOPs: compared with the log's model-only median
    median = float(bridge["measured_tflops_per_gpu_median"])
    assert median == pytest.approx(statistics.median([1031.4, 1037.0, 1038.5, 1034.6, 1036.2, 1037.4, 1036.6, 1035.3]))
    assert float(bridge["delta_to_published"]) == pytest.approx(median / 1037 - 1)
    assert bridge["delta_basis"] == "model" and bridge["mfu_peak_key"] == "gb300_fp8"
    blog = by_release["26.02"]  # the blog counts Newton-Schulz FLOPs: compared with model + our NS count
    with_ns = float(blog["measured_tflops_per_gpu_with_ns_median"])
    assert with_ns > median and blog["delta_basis"] == "model+newton_schulz"
    assert float(blog["delta_to_published"]) == pytest.approx(with_ns / 1080 - 1)
    adamw = [r for r in rows if (r["model"], r["gpu"], r["optimizer"]) == ("kimi_k2", "gb300", "adamw")]
    assert adamw and all(r["measured_tflops_per_gpu_median"] == "" for r in adamw)  # missing stays missing


def test_a_train_run_is_never_compared_with_a_published_figure(results_dir):
    _published(results_dir)
    _log_run(results_dir, intent="train")
    written = write_throughput(results_dir)
    rows = [r for r in _rows(written.csv) if (r["model"], r["gpu"], r["optimizer"]) == ("kimi_k2", "gb300", "muon")]
    assert rows and all(r["run_intent"] == "train" and r["delta_to_published"] == "" for r in rows)
    assert all(r["measured_tflops_per_gpu_median"] for r in rows)  # measured, shown, but not compared
    assert "not comparable: intent=train" in written.markdown.read_text()
    assert "unverified container" not in written.markdown.read_text()  # the default container, a checked one: no mark


def test_a_run_on_an_unverified_container_is_marked(results_dir):
    _published(results_dir)
    _log_run(results_dir, "reproduce", "cluster.container=nemo:26.10.01", "cluster.unverified_container=true")
    written = write_throughput(results_dir)
    rows = [r for r in _rows(written.csv) if r["run_id"] == LOG_RUN]
    assert rows and all(r["run_container"] == "nemo:26.10.01" and r["run_container_unverified"] == "true" for r in rows)
    assert (
        "(unverified container nemo:26.10.01: planned on the newest checked release's facts)"
        in written.markdown.read_text()
    )
    run = next(r for r in collect_runs(results_dir).runs if r.run_id == LOG_RUN)
    assert (run.container, run.unverified_container) == ("nemo:26.10.01", True)


def test_a_bridge_runs_container_check_is_shown_beside_its_row(results_dir):
    """Issue 80 item 2: make table shows what the job's check found (conformance.json), and nothing without one."""
    _published(results_dir)
    directory = _log_run(
        results_dir, "reproduce", "cluster.container=nemo:26.10.01", "cluster.unverified_container=true"
    )
    written = write_throughput(results_dir)
    assert all(r["run_conformance"] == "" for r in _rows(written.csv) if r["run_id"] == LOG_RUN)
    (directory / "conformance.json").write_text(
        json.dumps(
            {"status": "differs", "kind_differs": [{"field": "model.x"}], "values_not_landed": [], "missing_fields": []}
        )
    )
    written = write_throughput(results_dir)
    rows = [r for r in _rows(written.csv) if r["run_id"] == LOG_RUN]
    assert rows and all(r["run_conformance"] == "differs (1 of another kind)" for r in rows)
    assert "(container check: differs (1 of another kind))" in written.markdown.read_text()
    nvidia = {
        "status": "rebuilt",
        "differs": [{"field": "train.train_iters"}, {"field": "x"}],
        "differs_unexplained": 1,
    }
    (directory / "conformance.json").write_text(json.dumps({"status": "ok", "nvidia_preset": nvidia}))
    rows = [r for r in _rows(write_throughput(results_dir).csv) if r["run_id"] == LOG_RUN]
    assert all(r["run_conformance"] == "ok; NVIDIA's preset: 2 fields differ, 1 unexplained" for r in rows)


def test_plots_written(measured):
    out = write_throughput(measured)
    names = {p.name for p in out.plots}
    assert {"throughput_kimi_k2.png", "loss_kimi_k2.png", "throughput_qwen3_30b_a3b.png"} <= names
    assert all(p.stat().st_size > 5000 and p.read_bytes().startswith(PNG) for p in out.plots)
    assert "![plots/throughput_kimi_k2.png](plots/throughput_kimi_k2.png)" in out.markdown.read_text()


def test_plots_stay_readable_with_every_published_row(measured):
    """Every published release of a family is one more row, never more width (Qwen3's plot was 6,038 px wide), and
    the local engine's runs (GFLOP/s on a CPU) never share an axis with the cluster's rows (TFLOP/s on a GB300)."""
    from optbench.report.plots import _groups

    out = write_throughput(measured, published_dir=REPO / "results" / "published")  # every committed row
    for path in out.plots:
        width, height = struct.unpack(">II", path.read_bytes()[16:24])  # the PNG header's IHDR
        assert width <= 2400, (path.name, width, height)
    for family in {row.family for row in out.table.rows}:
        groups = _groups(out.table, family)
        assert all(not g["local"] for g in groups if g["published"])
        local = [g for g in groups if g["local"]]
        assert all(g["measured"] and not g["published"] for g in local)
    assert any(g["local"] for g in _groups(out.table, "kimi_k2")) and len(_groups(out.table, "qwen3_30b_a3b")) > 20


def test_plots_draw_the_pairs_and_newest_releases_and_say_what_they_draw(measured):
    """Qwen3's 30-odd AdamW release bars swamped its one Muon pair: a plot keeps every pair and measured configuration,
    and of one-optimizer published rows the newest release per setup; its titles say who produced what is drawn
    (a panel with no measured cluster run does not say "measured by Megatron Bridge")."""
    from optbench.report.plots import _cluster_title, _groups, newest_per_setup

    out = write_throughput(measured, published_dir=REPO / "results" / "published")
    groups = _groups(out.table, "qwen3_30b_a3b")
    kept, left_out = newest_per_setup(groups)
    assert left_out > 20 and len(kept) + left_out == len(groups)
    pairs = [g for g in groups if len(g["published"]) == 2]
    assert pairs and all(g in kept for g in pairs) and all(g in kept for g in groups if g["measured"])
    setups = [g["setup"] for g in kept if "setup" in g and len(g["published"]) == 1]
    assert len(setups) == len(set(setups))
    newest_gb300 = max(
        g["release"]
        for g in groups
        if g.get("setup", ("",))[2:4] == ("gb300", 8) and g["setup"][0] == "bridge_perf_summary"
    )
    assert any(g.get("setup", ())[2:3] == ("gb300",) and g["release"] == newest_gb300 for g in kept)
    published_only = [g for g in kept if not g["measured"]]
    assert "measured" not in _cluster_title("qwen3_30b_a3b", published_only, left_out)
    assert f"{left_out} older release(s)" in _cluster_title("qwen3_30b_a3b", published_only, left_out)
    assert "measured here by Megatron Bridge" in _cluster_title("x", [{"published": {}, "measured": {"muon": 1}}], 0)


def test_most_recent_run_wins_and_others_are_listed(measured):
    newer = "kimi_k2_tiny_adamw-20261121-090000"
    shutil.copytree(measured / "runs" / ADAMW_RUN, measured / "runs" / newer)
    summary_path = measured / "runs" / newer / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary.update(run_id=newer, started="2026-11-21T09:00:00+00:00")
    summary_path.write_text(json.dumps(summary))
    rows = _rows(write_throughput(measured).csv)
    adamw = next(r for r in rows if (r["model"], r["optimizer"]) == ("kimi_k2_tiny", "adamw"))
    assert adamw["run_id"] == newer and adamw["other_run_ids"] == ADAMW_RUN


def test_unreadable_run_dirs_are_skipped_with_reason(measured):
    (measured / "runs" / "empty-run").mkdir()
    broken = measured / "runs" / "broken-run"
    broken.mkdir()
    (broken / "metrics.jsonl").write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    collection = collect_runs(measured)
    reasons = dict(collection.skipped)
    assert "no metrics.jsonl and no log file" in reasons[str(measured / "runs" / "empty-run")]
    assert "corrupt metrics line" in reasons[str(broken)]
    assert len(collection.runs) == 3
    assert "Skipped:" in write_throughput(measured).markdown.read_text()


def test_many_folders_skipped_for_one_reason_are_one_line_and_a_few_are_listed(measured):
    """A study's runs keep their curves, not their steps: sixty of them are one line, not sixty."""
    for name in [f"study-s{i:02d}" for i in range(6)]:
        (measured / "runs" / name).mkdir()
    (measured / "runs" / "empty-run").mkdir()
    text = write_throughput(measured).markdown.read_text()
    skipped = text.split("Skipped:", 1)[1].split("## Sources", 1)[0].strip().splitlines()
    assert skipped == [
        f"- 7 folders, `{measured / 'runs' / 'empty-run'}` to `{measured / 'runs' / 'study-s05'}`: "
        "no metrics.jsonl and no log file (*.log, *.out, *.txt)"
    ]
    for name in [f"study-s{i:02d}" for i in range(4)]:
        (measured / "runs" / name).rmdir()
    text = write_throughput(measured).markdown.read_text()
    assert text.count("no metrics.jsonl and no log file") == 3 and f"`{measured / 'runs' / 'study-s05'}`" in text


def test_a_log_without_a_run_folder_is_read_for_what_it_states(tmp_path, results_dir):
    _published(results_dir)
    log = tmp_path / "orphan.log"
    shutil.copy(FIXTURES / "logs" / "bridge_kimi_k2_restart.log", log)
    out = write_throughput(results_dir, extra_logs=[log])
    [run] = out.table.runs
    assert run.model == "unknown" and run.peak is None
    assert any("model, GPU and precision are unknown" in note for note in run.notes)
    assert all(step.tflops_per_gpu is None or step.tflops_per_gpu > 0 for step in run.steps)
    assert any(step.tflops_per_gpu for step in run.steps)


def test_bad_published_number_names_file_line_and_column(tmp_path):
    source = REPO / "results" / "published"
    shutil.copytree(source, tmp_path / "published")
    path = tmp_path / "published" / "published.csv"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace(",1051,", ",1O51,")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError) as err:
        load_published(tmp_path / "published")
    assert "published.csv:2: column tflops_per_gpu is '1O51'" in str(err.value)


def test_published_split_adds_up():
    for row in load_published(REPO / "results" / "published"):
        if row.ns_tflops_per_gpu is not None:
            assert row.model_tflops_per_gpu + row.ns_tflops_per_gpu == row.tflops_per_gpu


def test_make_table_end_to_end(measured):
    done = run_make("table", "WARMUP=2", env={"OPTBENCH_RESULTS_DIR": str(measured)})
    assert done.returncode == 0, done.stderr
    assert "3 measured run(s)" in done.stdout
    lines = done.stdout.splitlines()  # a progress line before each step that can take seconds, the summary last
    assert lines[0].startswith("reading the measured runs under ") and lines[1].startswith("read 3 run(s) beside ")
    assert any(line.startswith("drawing 1/") for line in lines) and lines[-1].startswith("wrote ")
    assert "after the first 2 of every segment" in (measured / "throughput.md").read_text()
    bad = run_make("table", "WARMUP=x", env={"OPTBENCH_RESULTS_DIR": str(measured)})
    assert bad.returncode == 2 and bad.stderr.splitlines()[0].startswith(
        "error: WARMUP: 'x' is not a whole number of steps"
    )


def test_the_table_puts_each_plans_matrix_optimizers_side_by_side(results_dir):
    """make table collects every plan's projection.optimizers (Muon, AdaMuon, SOAP vs one AdamW twin); nothing
    recomputed."""
    from optbench.plan import build_plan
    from optbench.validate import validate

    _published(results_dir)
    assert "No plan with COMPARE= yet" in write_throughput(results_dir).markdown.read_text()
    typed = [f"results_dir={results_dir}"]
    plan = build_plan(validate(compose_run("qwen3_30b_a3b_muon", typed)), [], compare=("adaptive_muon", "soap"))
    (results_dir / "plans" / "qwen3_30b_a3b_muon").mkdir(parents=True)
    (results_dir / "plans" / "qwen3_30b_a3b_muon" / "plan.json").write_text(json.dumps(plan.to_json()))
    (results_dir / "plans" / "broken").mkdir()
    (results_dir / "plans" / "broken" / "plan.json").write_text("{not json")
    out = write_throughput(results_dir)
    line = next(x for x in squeezed(out.markdown.read_text()).splitlines() if x.startswith("| `qwen3_30b_a3b_muon`"))
    siblings = {s.optimizer: s for s in plan.projection.optimizers}
    for name in ("muon", "adaptive_muon", "soap"):
        assert (
            f"{siblings[name].tflops_per_gpu_change_percent:+.2f} % ({siblings[name].optimizer_state_gb:.1f} GB state)"
            in line
        )
    assert f"| {plan.projection.twin.step.tflops_per_gpu:.1f} |" in line
    assert any(path.endswith("broken/plan.json") and "JSONDecodeError" in why for path, why in out.skipped)


def _edit_summary(results: Path, run_id: str, **changes) -> None:
    path = results / "runs" / run_id / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_unlike_runs_are_not_paired_and_the_table_says_why(measured):
    """The first default `make pretrain` (synthetic data) beside an AdamW run on real text read "Muon/AdamW 0.058":
    now no ratio, and the field that differs."""
    _edit_summary(measured, MUON_RUN, data={"kind": "synthetic", "description": "Markov chain"})
    _edit_summary(measured, ADAMW_RUN, data={"kind": "indexed", "description": "Megatron indexed data, pydocs"})
    out = write_throughput(measured)
    [muon] = [r for r in out.table.rows if (r.model, r.optimizer) == ("kimi_k2_tiny", "muon")]
    assert muon.measured_ratio == (None, None) and muon.ratio_note.startswith(
        "not comparable: data differs (muon: synthetic"
    )
    assert "measured (not comparable: data differs" in out.markdown.read_text()
    [csv_row] = [r for r in _rows(out.csv) if (r["model"], r["optimizer"]) == ("kimi_k2_tiny", "muon")]
    assert csv_row["measured_muon_adamw_ratio_model"] == "" and csv_row["measured_ratio_note"] == muon.ratio_note


def test_comparable_runs_are_paired_and_a_shared_machine_is_flagged(measured):
    out = write_throughput(measured)
    [muon] = [r for r in out.table.rows if (r.model, r.optimizer) == ("kimi_k2_tiny", "muon")]
    assert muon.measured_ratio[0] is not None and muon.ratio_note == ""
    _edit_summary(measured, MUON_RUN, machine_load={"others_cpu_share": 0.83})
    out = write_throughput(measured)
    [muon] = [r for r in out.table.rows if (r.model, r.optimizer) == ("kimi_k2_tiny", "muon")]
    assert muon.measured_ratio[0] is not None
    assert muon.ratio_note == "shared machine: other processes held 83% of the CPU during the muon run"
    assert (
        "measured (shared machine: other processes held 83% of the CPU during the muon run)" in out.markdown.read_text()
    )
