"""Run the study (:mod:`optbench.experiments.study_plan`), analyse it (:mod:`optbench.experiments.study_stats`) and
write results/study.{json,md} and results/plots/study_*.png (:mod:`optbench.experiments.study_format`)."""

from __future__ import annotations

from collections.abc import Callable

from optbench.common.errors import Problem, UserError
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


def ns_precision(runs: list[dict]) -> str | None:
    """What ``fp32_matmul_prec=auto`` meant in the runs that ran Newton-Schulz, as they recorded it (it depends on the
    machine's bf16 support, so a reanalysis elsewhere must not recompute it): one value, "mixed: ..." when they
    differ, None when none recorded it (runs before 2026-11-28)."""
    seen = sorted({r["ns_precision"] for r in runs if r["ns_precision"]})
    return None if not seen else seen[0] if len(seen) == 1 else "mixed: " + ", ".join(seen)


def check_corpus(runs: list[dict], validation: dict | None) -> None:
    """Refuse a study whose validation set comes from another corpus than its runs trained on: pydocs is built from
    the running Python's own stdlib, so another Python builds another corpus (a run records its corpus in its
    summary's ``data.description``)."""
    here = (validation or {}).get("corpus")
    other = next((r for r in runs if here and r["corpus"] and r["corpus"] != here), None)
    if other is not None:
        raise UserError(
            Problem(
                "data",
                f"the corpus here ({here}) is not the one {other['run_id']} trained on "
                f"({other['corpus']}): pydocs is built from this Python's stdlib, the runs' was "
                f"Python {other['python']}; analyse them with that Python, or move them away",
            )
        )


def run_study(
    spec: StudySpec,
    launcher: Callable | None = None,
    progress: Callable[[str], None] = print,
    validation: dict | None = None,
) -> dict:
    """Train (or reuse) every run, choose each arm's learning rate on the tuning seeds, measure on held-out ones.
    Everything returned comes from the runs (and the validation set's statistics): reanalysing the same runs gives
    the same study, whatever the machine and the hour."""
    check(spec)
    check_finished(spec)
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
        arm: [
            read_run(train(spec, spec.run(arm, winner["lr"], seed, "held_out"), launcher, progress))
            for seed in spec.held_out_seeds
        ]
        for arm, winner in winners.items()
    }
    first = next(iter(held_out.values()))[0]
    every = [r for by_lr in tuning.values() for v in by_lr.values() for r in v] + [
        r for v in held_out.values() for r in v
    ]
    check_corpus(every, validation)
    horizon = first["val"][-1][0] * first["tokens_per_step"]
    targets = stats.targets_from(tuning, winners, horizon)
    metrics = {arm: stats.held_out_metrics(runs, targets, horizon) for arm, runs in held_out.items()}
    seeds = list(spec.held_out_seeds)
    ratios = {
        arm: stats.paired_ratios(metrics[arm], metrics["adamw"], targets, seeds) for arm in metrics if arm != "adamw"
    }
    return {
        "size": spec.size,
        "size_overrides": list(SIZES[spec.size]),
        "extra_overrides": list(spec.overrides),
        "arms": {
            arm: {"recipe": ARMS[arm][0], "overrides": list(ARMS[arm][1]), "grid": list(spec.learning_rates[arm])}
            for arm in spec.arms
        },
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
        "machine": {
            "device": first["device"],
            "precision": first["precision"],
            "ns_precision": ns_precision([r for v in held_out.values() for r in v]),
            "threads_per_process": first["threads_per_process"],
            "python": first["python"],
        },
        "tokens_per_step": first["tokens_per_step"],
        "curves": {arm: {r["run_id"]: r["val"] for r in runs} for arm, runs in held_out.items()},
        "tuning_curves": {
            arm: {f"{lr:g}": {r["run_id"]: r["val"] for r in runs} for lr, runs in by_lr.items()}
            for arm, by_lr in tuning.items()
        },
        "runs": len(every),
        "seconds": round(sum(r["wall_s"] or 0.0 for r in every), 1),
        "last_run_finished": max((r["finished"] for r in every if r["finished"]), default=None),
    }
