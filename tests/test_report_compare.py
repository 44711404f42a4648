"""Time-to-target: the analysis on known curves, and `make compare`'s pipeline with a stand-in engine."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from optbench.config.schema import RunConfig
from optbench.common.errors import UserError
from optbench.experiments.compare import analyse, smoothed, verdict
from optbench.experiments.compare_format import write_compare
from optbench.experiments.compare_run import (
    CPU_DEFAULTS,
    CompareSpec,
    compose_compare_runs,
    parse_seeds,
    parse_target,
    run_compare,
)
from optbench.measured.runs import MeasuredRun, StepRecord
from conftest import marked_results, squeezed
from optbench.runs import run_dir, save_resolved_config

pytestmark = pytest.mark.slow  # trains a comparison; `make test-fast` skips it

PNG = b"\x89PNG\r\n\x1a\n"


def _run(
    optimizer: str, losses: list[float], step_time: float, tokens_per_step: int = 512, run_id: str = ""
) -> MeasuredRun:
    steps = [
        StepRecord(step=i + 1, loss=loss, step_time_s=step_time, tokens=tokens_per_step * (i + 1))
        for i, loss in enumerate(losses)
    ]
    return MeasuredRun(
        run_id or f"{optimizer}", "local engine", "-", "tiny", "tiny", "cpu", "fp32", optimizer, steps=steps
    )


def test_unlike_runs_give_no_ratio_and_a_shared_machine_is_flagged():
    adamw = _run("adamw", [6, 5, 4, 3, 2], step_time=1.0)
    muon = _run("muon", [6, 4, 3, 2, 1], step_time=1.5)
    adamw.extra = {"data": {"kind": "indexed", "description": "pydocs"}, "machine_load": {"others_cpu_share": 0.84}}
    muon.extra = {"data": {"kind": "synthetic", "description": "Markov chain"}}
    result = analyse("tiny", [(1, adamw), (1, muon)], target=3.0, window=1)
    assert result.tokens_ratio is None and result.seconds_ratio is None and result.paired_seconds_ratio is None
    assert result.unlike.startswith(
        "not comparable: data differs (muon: synthetic Markov chain; adamw: indexed pydocs)"
    )
    assert verdict(result).startswith("No verdict: the two optimizers' runs are not comparable: data differs")
    assert result.load == "shared machine: other processes held 84% of the CPU during the adamw run"
    muon.extra = {"data": adamw.extra["data"]}
    result = analyse("tiny", [(1, adamw), (1, muon)], target=3.0, window=1)
    assert result.unlike == "" and result.seconds_ratio == pytest.approx(1.125) and result.load


def test_smoothing_is_a_trailing_mean():
    assert smoothed([4.0, 2.0, 6.0, 0.0], 2) == [4.0, 3.0, 4.0, 3.0]
    assert smoothed([5.0, 1.0], 1) == [5.0, 1.0]


def test_tokens_and_time_to_a_given_target():
    adamw = _run("adamw", [6, 5, 4, 3, 2], step_time=1.0)
    muon = _run("muon", [6, 4, 3, 2, 1], step_time=1.5)
    result = analyse("tiny", [(1, adamw), (1, muon)], target=3.0, window=1)
    by = {r.optimizer: r for r in result.seeds}
    assert (by["adamw"].step, by["adamw"].tokens, by["adamw"].seconds) == (4, 2048, 4.0)
    assert (by["muon"].step, by["muon"].tokens, by["muon"].seconds) == (3, 1536, 4.5)
    assert result.tokens_ratio == pytest.approx(0.75)
    assert result.seconds_ratio == pytest.approx(1.125)
    assert result.step_time_ratio == pytest.approx(1.5)
    assert "does not pay for itself" in verdict(result)


def test_auto_target_is_the_worst_smoothed_loss_at_three_quarters():
    runs = [
        (1, _run("adamw", [6, 5, 4, 3.5], 1.0)),
        (1, _run("muon", [6, 4, 3, 2.5], 1.2)),
        (2, _run("adamw", [6, 5.5, 4.5, 4.0], 1.0)),
        (2, _run("muon", [6, 4.2, 3.1, 2.4], 1.2)),
    ]
    result = analyse("tiny", runs, target=None, window=2)
    assert result.target == pytest.approx((5.5 + 4.5) / 2)  # adamw seed 2, smoothed, at step 3 of 4
    assert result.target_rule.startswith("auto")
    assert all(r.reached for r in result.seeds)  # by construction every run gets there
    assert result.summaries["adamw"].tokens.n == 2 and result.paired_seconds_ratio.n == 2
    assert result.tokens_ratio == pytest.approx(1280 / 1536)  # Muon: steps 2 and 3, AdamW: step 3 twice
    assert result.seconds_ratio == pytest.approx(1.0)  # (2.4 + 3.6) / 2 vs 3.0: fewer tokens, dearer steps


def test_a_run_that_never_reaches_is_not_extrapolated():
    runs = [
        (1, _run("adamw", [6, 5, 4.5, 4.2], 1.0)),
        (1, _run("muon", [6, 4, 3, 2], 1.2)),
        (2, _run("adamw", [6, 4.5, 3.5, 2.5], 1.0)),
        (2, _run("muon", [6, 3.9, 2.9, 1.9], 1.2)),
    ]
    result = analyse("tiny", runs, target=3.0, window=1)
    adamw = result.summaries["adamw"]
    assert (adamw.reached, adamw.runs) == (1, 2)
    missed = next(r for r in result.seeds if r.optimizer == "adamw" and r.seed == 1)
    assert not missed.reached and missed.tokens is None and missed.seconds is None
    assert result.paired_tokens_ratio.n == 1  # only seed 2 has both
    assert "AdamW 1/2" in verdict(result)


def test_neither_reached():
    result = analyse("tiny", [(1, _run("adamw", [6, 5], 1.0)), (1, _run("muon", [6, 5.5], 1.0))], target=1.0, window=1)
    assert verdict(result).startswith("Neither optimizer reached the target")


def test_make_variable_parsing():
    assert parse_seeds("3") == (1, 2, 3)
    assert parse_seeds("7,11") == (7, 11)
    assert parse_target("auto") is None and parse_target("4.5") == 4.5
    for bad, field in (("x", "SEEDS"), ("1,1", "SEEDS")):
        with pytest.raises(UserError, match=field):
            parse_seeds(bad)
    with pytest.raises(UserError, match="TARGET"):
        parse_target("low")


def test_compose_pairs_seeds_and_overrides():
    spec = CompareSpec(model="qwen3_moe_tiny", seeds=(1, 2), iters=7, overrides=("train.gbs=4", "train.mbs=4"))
    planned = compose_compare_runs(spec, "20261121-000000")
    assert [(seed, run.optimizer.name) for seed, run in planned] == [
        (1, "muon"),
        (1, "adamw"),
        (2, "adamw"),
        (2, "muon"),
    ]
    for seed, run in planned:
        assert run.train.seed == seed and run.data.seed == seed and run.train.iters == 7
        assert run.train.gbs == 4  # the user's override wins over the CPU default
        assert run.data.kind == "indexed" and run.data.name == "pydocs" and run.logger.wandb_mode == "disabled"
        assert run.run_id == f"compare-qwen3_moe_tiny-20261121-000000-{run.optimizer.name}-s{seed}"


def test_unknown_pair_and_non_twins_are_one_line_errors():
    with pytest.raises(
        UserError, match="MODEL: no recipe nope_muon, nope_adamw; local pairs with both optimizers: .*kimi_k2_tiny"
    ):
        compose_compare_runs(CompareSpec(model="nope", seeds=(1,)), "x")
    with pytest.raises(UserError, match="kimi_k2_muon runs on megatron_bridge; make compare trains on this machine"):
        compose_compare_runs(CompareSpec(model="kimi_k2", seeds=(1,)), "x")
    spec = CompareSpec(model="mixed", seeds=(1,), muon_recipe="kimi_k2_tiny_muon", adamw_recipe="qwen3_moe_tiny_adamw")
    with pytest.raises(UserError, match="differ in model"):
        compose_compare_runs(spec, "x")


def _fake_launcher(run: RunConfig) -> Path:
    """Stands in for the local engine: writes what it writes, with Muon learning faster per step but slower steps."""
    directory = marked_results(Path(run.results_dir)) / "runs" / str(run_dir(run).name)
    directory.mkdir(parents=True)
    save_resolved_config(run, directory / "config.yaml")
    muon = run.optimizer.name == "muon"
    rate, step_time = (0.30 if muon else 0.18) + 0.01 * run.train.seed, (1.3 if muon else 1.0)
    tokens = run.train.gbs * run.train.seq_length
    with (directory / "metrics.jsonl").open("w") as handle:
        for step in range(1, run.train.iters + 1):
            loss = 1.4 + 4.1 * math.exp(-rate * step)
            handle.write(
                json.dumps(
                    {
                        "step": step,
                        "loss": loss,
                        "step_time_s": step_time,
                        "tokens": tokens,
                        "ns_time_s": 0.2 if muon else None,
                    }
                )
                + "\n"
            )
    summary = {
        "run_id": run.run_id,
        "engine": "local",
        "model": run.model.name,
        "optimizer": run.optimizer.name,
        "gpu": "cpu",
        "precision": "fp32",
        "loss_floor": 1.37,
        "command": "make compare",
        "started": f"2026-12-07T10:0{run.train.seed}:00+00:00",
        "device": "cpu: test machine",
        "git": {"commit": "abcdef0123456789", "dirty": run.train.seed == 2},
        "versions": {"python": "3.11.7", "torch": "2.13.0+cpu"},
        "data": {"description": "a stream"},
    }
    (directory / "summary.json").write_text(json.dumps(summary))
    return directory


def test_compare_pipeline_writes_tables_and_plot(tmp_path):
    spec = CompareSpec(model="kimi_k2_tiny", seeds=(1, 2, 3), iters=12, results_dir=str(tmp_path / "results"))
    result, runs = run_compare(spec, launcher=_fake_launcher, progress=lambda _: None)
    assert len(runs) == 6 and result.loss_floor == 1.37
    assert len(list((tmp_path / "results" / "runs").iterdir())) == 6
    assert result.tokens_ratio < 1 and result.step_time_ratio == pytest.approx(1.3)
    paths = write_compare(result, runs, tmp_path / "results")
    markdown = (tmp_path / "results" / "compare.md").read_text()
    assert "Time to target: Muon vs AdamW on kimi_k2_tiny" in markdown
    assert "| muon | 3/3 |" in squeezed(markdown) and "| adamw | 3/3 |" in squeezed(markdown)
    assert " ".join(CPU_DEFAULTS) in markdown and "loss floor is 1.370" in markdown
    data = json.loads((tmp_path / "results" / "compare.json").read_text())
    assert data["target_rule"].startswith("auto") and len(data["seeds"]) == 6
    lines = (tmp_path / "results" / "compare.csv").read_text().splitlines()
    assert len(lines) == 7 and lines[0].startswith("model,optimizer,seed")
    assert paths[-1].read_bytes().startswith(PNG)
    assert (
        "Runs started 2026-12-07T10:01:00+00:00 to 2026-12-07T10:03:00+00:00; code abcdef0; abcdef0 with "
        "uncommitted changes; machine cpu: test machine; Python 3.11.7, torch 2.13.0+cpu; data: a stream."
    ) in markdown
    assert "What a re-run should match" in markdown

    # a new target without training again
    prefix = runs[0].run_id.rsplit("-", 2)[0]
    again, reused = run_compare(
        CompareSpec(model="kimi_k2_tiny", seeds=(9,), target=3.0, reuse=prefix, results_dir=str(tmp_path / "results")),
        launcher=None,
    )
    assert again.target == 3.0 and again.context["reused"] == prefix and again.context["seeds"] == [1, 2, 3]
    assert {r.run_id for r in reused} == {r.run_id for r in runs}
    with pytest.raises(UserError, match="REUSE: no runs nope-muon-s<seed>"):
        run_compare(CompareSpec(model="kimi_k2_tiny", seeds=(1,), reuse="nope", results_dir=str(tmp_path / "results")))
