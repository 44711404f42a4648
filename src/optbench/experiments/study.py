"""Run the study (:mod:`optbench.experiments.study_plan`), analyse it (:mod:`optbench.experiments.study_stats`) and
write results/study.{json,md} and results/plots/study_*.png (:mod:`optbench.experiments.study_format`)."""

from __future__ import annotations

import platform
from collections.abc import Callable

from optbench.optim.newton_schulz import resolve_matmul_precision
from optbench.experiments import study_stats as stats
from optbench.experiments.study_plan import ARMS, SIZES, StudyRun, StudySpec, check, read_run, train, tuning_runs


def run_study(spec: StudySpec, launcher: Callable | None = None, progress: Callable[[str], None] = print) -> dict:
    """Train (or reuse) every run, choose each arm's learning rate on the tuning seeds, measure on held-out ones."""
    check(spec)
    if launcher is None:
        from optbench.corpus.pydocs import ensure_pydocs
        from optbench.engine.local import launch_local

        ensure_pydocs(progress)
        launcher = launch_local
    tuning: dict[str, dict[float, list[dict]]] = {arm: {} for arm in spec.arms}
    for run in tuning_runs(spec):
        tuning[run.arm].setdefault(run.lr, []).append(read_run(train(spec, run, launcher, progress)))
    winners = stats.choose_winners(tuning)
    held_out = {
        arm: [read_run(train(spec, StudyRun(arm, winner["lr"], seed, "held_out", spec.size), launcher, progress))
              for seed in spec.held_out_seeds]
        for arm, winner in winners.items()
    }
    first = next(iter(held_out.values()))[0]
    horizon = first["val"][-1][0] * first["tokens_per_step"]
    targets = stats.targets_from(tuning, winners, horizon)
    metrics = {arm: stats.held_out_metrics(runs, targets, horizon) for arm, runs in held_out.items()}
    ratios = {arm: stats.paired_ratios(metrics[arm], metrics["adamw"], targets) for arm in metrics if arm != "adamw"}
    return {
        "size": spec.size,
        "size_overrides": list(SIZES[spec.size]),
        "extra_overrides": list(spec.overrides),
        "arms": {arm: {"recipe": ARMS[arm][0], "overrides": list(ARMS[arm][1]), "grid": list(spec.learning_rates[arm])}
                 for arm in spec.arms},
        "tuning_seeds": list(spec.tuning_seeds),
        "held_out_seeds": list(spec.held_out_seeds),
        "horizon_tokens": horizon,
        "winners": winners,
        "targets": targets,
        "target_rule": f"the validation loss every arm's winner reached on average (tuning seeds) by "
                       f"{', '.join(f'{f:.0%}' for f in stats.TARGET_FRACTIONS)} of the horizon",
        "held_out": metrics,
        "muon_vs_adamw": ratios,
        "machine": {"device": first["device"], "precision": first["precision"],
                    "ns_precision": resolve_matmul_precision("auto", "cpu" if "cpu" in str(first["device"]) else "cuda"),
                    "threads_per_process": first["threads_per_process"], "python": platform.python_version()},
        "curves": {arm: {r["run_id"]: r["val"] for r in runs} for arm, runs in held_out.items()},
        "runs": sum(len(v) for by_lr in tuning.values() for v in by_lr.values()) + sum(len(v) for v in held_out.values()),
        "seconds": round(sum(r["wall_s"] or 0.0 for by_lr in tuning.values() for v in by_lr.values() for r in v)
                         + sum(r["wall_s"] or 0.0 for v in held_out.values() for r in v), 1),
    }
