"""Run the study (:mod:`optbench.experiments.study_plan`), analyse it (:mod:`optbench.experiments.study_stats`) and
write results/study.{json,md} and results/plots/study_*.png (:mod:`optbench.experiments.study_format`)."""

from __future__ import annotations

import platform
from collections.abc import Callable

from optbench.optim.newton_schulz import resolve_matmul_precision
from optbench.experiments import study_stats as stats
from optbench.experiments.study_plan import (
    ARMS,
    SIZES,
    StudySpec,
    check,
    check_finished,
    compose,
    read_run,
    train,
    tuning_runs,
)


def run_study(spec: StudySpec, launcher: Callable | None = None, progress: Callable[[str], None] = print) -> dict:
    """Train (or reuse) every run, choose each arm's learning rate on the tuning seeds, measure on held-out ones."""
    check(spec)
    check_finished(spec)
    validation = None
    if launcher is None:
        from optbench.corpus.pydocs import ensure_pydocs
        from optbench.engine.local import launch_local
        from optbench.experiments.study_data import validation_set

        ensure_pydocs(progress)
        launcher = launch_local
        validation = validation_set(compose(spec, tuning_runs(spec)[0]))
    tuning: dict[str, dict[float, list[dict]]] = {arm: {} for arm in spec.arms}
    for run in tuning_runs(spec):
        tuning[run.arm].setdefault(run.lr, []).append(read_run(train(spec, run, launcher, progress)))
    winners = stats.choose_winners(tuning)
    held_out = {
        arm: [read_run(train(spec, spec.run(arm, winner["lr"], seed, "held_out"), launcher, progress))
              for seed in spec.held_out_seeds]
        for arm, winner in winners.items()
    }
    first = next(iter(held_out.values()))[0]
    horizon = first["val"][-1][0] * first["tokens_per_step"]
    targets = stats.targets_from(tuning, winners, horizon)
    metrics = {arm: stats.held_out_metrics(runs, targets, horizon) for arm, runs in held_out.items()}
    seeds = list(spec.held_out_seeds)
    ratios = {arm: stats.paired_ratios(metrics[arm], metrics["adamw"], targets, seeds) for arm in metrics if arm != "adamw"}
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
        "vs_adamw": ratios,
        "validation": validation,
        "machine": {"device": first["device"], "precision": first["precision"],
                    "ns_precision": resolve_matmul_precision("auto", "cpu" if "cpu" in str(first["device"]) else "cuda"),
                    "threads_per_process": first["threads_per_process"], "python": platform.python_version()},
        "tokens_per_step": first["tokens_per_step"],
        "curves": {arm: {r["run_id"]: r["val"] for r in runs} for arm, runs in held_out.items()},
        "tuning_curves": {arm: {f"{lr:g}": {r["run_id"]: r["val"] for r in runs} for lr, runs in by_lr.items()}
                          for arm, by_lr in tuning.items()},
        "runs": sum(len(v) for by_lr in tuning.values() for v in by_lr.values()) + sum(len(v) for v in held_out.values()),
        "seconds": round(sum(r["wall_s"] or 0.0 for by_lr in tuning.values() for v in by_lr.values() for r in v)
                         + sum(r["wall_s"] or 0.0 for v in held_out.values() for r in v), 1),
    }
