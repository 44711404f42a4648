"""make study: statistics with intervals, learning rates chosen on tuning seeds and measured on held-out ones."""

from __future__ import annotations

import json
import re
import math
from pathlib import Path

import pytest

from optbench.config.schema import RunConfig
from optbench.experiments import study_stats as stats
from optbench.experiments.study import run_study
from optbench.experiments.study_format import write_study
from optbench.experiments.study_plan import CURVES, StudySpec
from conftest import marked_results
from optbench.runs import run_dir, save_resolved_config

pytestmark = pytest.mark.slow  # trains the study arms; `make test-fast` skips it


def test_intervals_and_ratios():
    iv = stats.interval([1.0, 2.0, 3.0])
    assert iv.mean == 2.0 and iv.n == 3
    assert iv.high - iv.mean == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-3)
    assert stats.interval([5.0]).low == 5.0 and stats.interval([]) is None
    ratio = stats.ratio_interval([0.5, 0.5, 0.5])
    assert ratio.mean == pytest.approx(0.5) and ratio.low == pytest.approx(0.5)


@pytest.mark.parametrize(
    "df, printed",
    [
        (1, 12.706),
        (2, 4.303),
        (3, 3.182),
        (7, 2.365),
        (10, 2.228),
        (11, 2.201),
        (20, 2.086),
        (29, 2.045),
        (30, 2.042),
        (60, 2.000),
        (120, 1.980),
    ],
)
def test_the_t_quantile_is_exact_beyond_ten_degrees_of_freedom(df, printed):
    """Against a printed t table (3 decimals; NIST/SEMATECH e-Handbook 1.3.6.7.2): 11-30 seeds no longer get 1.96."""
    assert round(stats.t_quantile_975(df), 3) == printed
    assert 1.959963 < stats.t_quantile_975(100_000) < 1.96  # the normal quantile's 1.959964 in the limit


def test_curves_interpolate_between_validation_passes():
    curve = [(100.0, 5.0), (200.0, 4.0), (300.0, 3.0)]
    assert stats.loss_at(curve, 150.0) == pytest.approx(4.5)
    assert stats.loss_at(curve, 300.0) == pytest.approx(3.0) and stats.loss_at(curve, 400.0) is None
    assert stats.tokens_to(curve, 3.5) == pytest.approx(250.0)
    assert stats.tokens_to(curve, 5.5) == 100.0 and stats.tokens_to(curve, 2.0) is None
    run = {"tokens_per_step": 100, "step_time_s": [1.0, 2.0, 3.0]}
    assert stats.seconds_at_tokens(run, 250.0) == pytest.approx(1.0 + 2.0 + 0.5 * 3.0)


# A fake engine: loss falls like a / (1 + rate * step) with the rate set by (arm, lr) and the seed.
BEST = {"adamw": 3e-3, "muon_spectral": 1e-3, "muon_moonlight": 3e-3, "adaptive_muon": 1e-3, "soap": 1e-3}


def _fake_launcher(run: RunConfig) -> Path:
    directory = marked_results(Path(run.results_dir)) / "runs" / str(run_dir(run).name)
    directory.mkdir(parents=True)
    save_resolved_config(run, directory / "config.yaml")
    arm = (
        run.optimizer.name
        if run.optimizer.name in ("adamw", "soap", "adaptive_muon")
        else ("muon_moonlight" if run.optimizer.muon.extra_scale_factor < 1 else "muon_spectral")
    )
    speed = (1.5 if arm == "muon_moonlight" else 1.0) / (1.0 + abs(math.log(run.optimizer.lr / BEST[arm])))
    speed *= 1.0 + 0.02 * run.train.seed
    muon = run.optimizer.muon_family
    with (directory / "metrics.jsonl").open("w") as handle:
        for step in range(1, run.train.iters + 1):
            record = {
                "step": step,
                "loss": 6.0 / (1 + 0.05 * speed * step),
                "step_time_s": 0.3 if muon else 0.1,
                "ns_time_s": 0.15 if muon else None,
            }
            if step % run.train.eval_interval == 0 or step == run.train.iters:
                record["val_loss"] = 6.2 / (1 + 0.05 * speed * step)
            handle.write(json.dumps(record) + "\n")
    summary = {
        "tokens_per_step": run.train.gbs * run.train.seq_length,
        "wall_s": 1.0,
        "device": "cpu: fake",
        "precision": "fp32",
        "threads_per_process": 1,
    }
    (directory / "summary.json").write_text(json.dumps(summary))
    return directory


def test_winners_come_from_tuning_seeds_and_numbers_from_held_out_ones(tmp_path):
    arms = ("adamw", "muon_moonlight", "soap")  # three of the five: each fake run composes a config (~0.3 s)
    spec = StudySpec(
        results_dir=str(tmp_path / "results"),
        overrides=("train.iters=40", "train.eval_interval=5"),
        tuning_seeds=(1, 2),
        held_out_seeds=(3, 4),
        arms=arms,
    )
    best = {arm: BEST[arm] for arm in arms}
    launched = []

    def launcher(run: RunConfig) -> Path:
        launched.append(run.run_id)
        return _fake_launcher(run)

    study = run_study(spec, launcher=launcher, progress=lambda _: None)
    assert {arm: w["lr"] for arm, w in study["winners"].items()} == best
    held_out = [r for r in launched if re.search(r"-s[34](-x[0-9a-f]{8})?$", r)]  # typed overrides name the runs apart
    assert all(re.search(r"-x[0-9a-f]{8}$", r) for r in launched)
    grid_points = sum(len(spec.learning_rates[arm]) for arm in arms)
    assert len(launched) == grid_points * 2 + len(held_out) and len(held_out) == len(arms) * 2
    assert not any(w["at_grid_edge"] for w in study["winners"].values())  # every fake optimum is inside its grid

    assert all(f"lr{best[arm]:g}" in r for r in held_out for arm in best if f"-{arm}-" in r)
    ratios = study["vs_adamw"]["muon_moonlight"]["targets"]
    assert all(
        r["tokens"]["mean"] < 1 and r["pairs"] == 2 and not r["missed"] for r in ratios.values()
    )  # faster fake arm
    assert study["vs_adamw"]["muon_moonlight"]["final_val_difference"]["mean"] < 0
    assert len(study["targets"]) == 4 and study["targets"] == sorted(study["targets"], reverse=True)
    assert all(
        study["held_out"][arm]["targets"][t]["reached"] == 2 for arm in best for t in study["held_out"][arm]["targets"]
    )

    again = run_study(
        spec, launcher=lambda run: pytest.fail("a finished run was trained again"), progress=lambda _: None
    )
    assert again["winners"] == study["winners"]
    paths = write_study(study, tmp_path / "results", "make study")
    text = (tmp_path / "results" / "study.md").read_text()
    assert "**chosen**" in text and "held-out" in text and "tokens ratio" in text and "Newton-Schulz" in text
    written = json.loads(paths[0].read_text())
    assert written["targets"] == study["targets"]
    assert stats.rederive_targets(written) == pytest.approx(
        study["targets"], rel=1e-12
    )  # from the committed curves alone
    assert set(written["tuning_curves"]) == set(arms) and "SOAP" in text and "End of training" in text

    # What git keeps of a run (summary, config, curves; not metrics.jsonl) analyses to the same study.
    for folder in (tmp_path / "results" / "runs").iterdir():
        assert (folder / CURVES).is_file()
        (folder / "metrics.jsonl").unlink()
    from_git = run_study(
        spec, launcher=lambda run: pytest.fail("a committed run was trained again"), progress=lambda _: None
    )
    assert from_git == study


def test_a_seed_that_misses_the_target_is_named_not_dropped():
    target = 3.0
    arm = {
        "targets": {"3.0000": {"per_seed_tokens": [100.0, None, 90.0], "per_seed_seconds": [1.0, None, 0.9]}},
        "final_val": [2.9, 3.1, 2.8],
    }
    adamw = {
        "targets": {"3.0000": {"per_seed_tokens": [200.0, 150.0, None], "per_seed_seconds": [2.0, 1.5, None]}},
        "final_val": [3.0, 2.95, 3.05],
    }
    versus = stats.paired_ratios(arm, adamw, [target], [4, 5, 6])
    found = versus["targets"]["3.0000"]
    assert found["pairs"] == 1 and found["missed"] == {"5": "arm", "6": "adamw"}
    assert found["tokens"]["mean"] == pytest.approx(0.5) and found["tokens"]["n"] == 1
    assert versus["final_val_difference"]["n"] == 3  # the end-of-training comparison keeps every seed
    from optbench.experiments.study_format import _verdict

    assert _verdict(found["tokens"], found["missed"]) == "incomplete (seed 5: the arm, seed 6: AdamW missed the target)"


def test_a_bad_study_setting_is_one_line():
    from optbench.common.errors import UserError
    from optbench.experiments.study_plan import check

    with pytest.raises(UserError, match="SIZE: 'huge' is not one of cpu, gpu"):
        check(StudySpec(size="huge"))
    with pytest.raises(UserError, match="tuning and held-out seeds must differ"):
        check(StudySpec(tuning_seeds=(1, 2), held_out_seeds=(2, 3)))
    check(StudySpec(size="gpu"))  # the GPU size composes and validates on this machine too
    with pytest.raises(UserError, match=r"train.eval_iters: a validation pass of 4 x 8 x 64 = 2,048 tokens is under"):
        check(StudySpec(overrides=("train.eval_iters=4",)))


def test_a_winner_at_the_end_of_its_grid_is_flagged():
    from optbench.experiments.study_stats import choose_winners

    def runs(final: float) -> list[dict]:
        return [{"val": [(10, final + d)]} for d in (0.0, 0.01, -0.01)]

    tuning = {
        "adamw": {1e-3: runs(3.0), 3e-3: runs(3.2)},
        "muon_spectral": {3e-4: runs(3.3), 1e-3: runs(3.1), 3e-3: runs(3.4)},
    }
    winners = choose_winners(tuning)
    assert winners["adamw"]["lr"] == 1e-3 and winners["adamw"]["at_grid_edge"]
    assert winners["muon_spectral"]["lr"] == 1e-3 and not winners["muon_spectral"]["at_grid_edge"]
