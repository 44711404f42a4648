"""The study's numbers: validation loss at token budgets, tokens and seconds to target losses, each over
seeds with a 95 % confidence interval, and each arm against AdamW paired by seed (tokens ratio at every
target, final-loss difference at the end of training).

Intervals are Student t intervals on the mean over seeds (3 seeds: mean +- 4.30 s / sqrt(3)); ratios
are geometric means of the per-seed ratios with the t interval taken on their logarithms. With three
seeds the intervals are wide: they say how far apart the optimizers must be before this study can
tell them apart, and an interval that contains 1.0 is a tie.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass


def t_two_sided_probability(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with ``df`` degrees of freedom, in closed form (Abramowitz & Stegun 26.7.3-4: a
    finite series in theta = atan(t / sqrt(df)) for whole degrees of freedom)."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...)), df - 3 powers
        term, series = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= cos2 * (2 * k) / (2 * k + 1)
            series += term
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * series)
    term, series = 1.0, 1.0  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...), up to cos^(df - 2)
    for k in range(1, df // 2):
        term *= cos2 * (2 * k - 1) / (2 * k)
        series += term
    return math.sin(theta) * series


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` whole degrees of freedom (the half-width factor of a 95 %
    interval): the exact probability above, inverted by bisection to the last bit."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    low, high = 0.0, 1e3  # t(1) = 12.706: every quantile lies below
    while high - low > 1e-12 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if t_two_sided_probability(middle, df) < 0.95 else (low, middle)
    return (low + high) / 2


TARGET_FRACTIONS = (0.25, 0.5, 0.75, 0.9)
"""Targets: the validation loss every winner reached on average by these fractions of the horizon (tuning seeds)."""
BUDGET_FRACTIONS = (0.25, 0.5, 1.0)
"""Token budgets at which validation losses are compared, as fractions of the horizon."""


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict:
        return asdict(self)


def interval(values: Sequence[float]) -> Interval | None:
    """Mean and 95 % t interval of the finite values (None when none)."""
    sample = [v for v in values if v is not None and math.isfinite(v)]
    if not sample:
        return None
    mean = statistics.fmean(sample)
    if len(sample) == 1:
        return Interval(mean, mean, mean, 1)
    half = t_quantile_975(len(sample) - 1) * statistics.stdev(sample) / math.sqrt(len(sample))
    return Interval(mean, mean - half, mean + half, len(sample))


def ratio_interval(ratios: Sequence[float]) -> Interval | None:
    """Geometric mean of positive ratios with the t interval on their logarithms."""
    logs = interval([math.log(r) for r in ratios if r and r > 0])
    return None if logs is None else Interval(math.exp(logs.mean), math.exp(logs.low), math.exp(logs.high), logs.n)


def val_curve(run: dict) -> list[tuple[float, float]]:
    """(tokens, validation loss) of a run's validation passes."""
    return [(step * run["tokens_per_step"], loss) for step, loss in run["val"]]


def loss_at(curve: list[tuple[float, float]], tokens: float) -> float | None:
    """Validation loss at ``tokens``, linear between passes (None outside the measured range)."""
    for (t0, l0), (t1, l1) in zip(curve, curve[1:]):
        if t0 <= tokens <= t1:
            return l0 + (l1 - l0) * (tokens - t0) / (t1 - t0)
    return curve[-1][1] if curve and math.isclose(curve[-1][0], tokens) else None


def tokens_to(curve: list[tuple[float, float]], target: float) -> float | None:
    """Tokens at which the validation loss first reaches ``target``, linear between passes; None if never."""
    if curve and curve[0][1] <= target:
        return curve[0][0]
    for (t0, l0), (t1, l1) in zip(curve, curve[1:]):
        if l1 <= target:
            return t0 + (t1 - t0) * (l0 - target) / (l0 - l1)
    return None


def seconds_at_tokens(run: dict, tokens: float | None) -> float | None:
    """Training seconds (sum of step times, validation excluded) when ``tokens`` had been consumed."""
    if tokens is None:
        return None
    steps = tokens / run["tokens_per_step"]
    whole = int(steps)
    times = run["step_time_s"]
    done = sum(times[:whole])
    return done + (steps - whole) * times[whole] if whole < len(times) else done


def final_val(run: dict) -> float:
    return run["val"][-1][1]


def choose_winners(tuning: dict[str, dict[float, list[dict]]]) -> dict[str, dict]:
    """Per arm: every learning rate's final validation loss over the tuning seeds, and the best rate."""
    winners = {}
    for arm, by_lr in tuning.items():
        points = {lr: interval([final_val(r) for r in runs]) for lr, runs in by_lr.items()}
        best = min(points, key=lambda lr: points[lr].mean)
        # A winner at either end of its grid may not be the optimum: the report says so.
        winners[arm] = {
            "lr": best,
            "grid": {lr: p.as_dict() for lr, p in points.items()},
            "at_grid_edge": len(points) > 1 and best in (min(points), max(points)),
        }
    return winners


def targets_from(
    tuning: dict[str, dict[float, list[dict]]], winners: dict[str, dict], horizon_tokens: float
) -> list[float]:
    """Target losses every winner reaches on its tuning seeds' mean curve by each TARGET_FRACTIONS point."""
    targets = []
    for fraction in TARGET_FRACTIONS:
        levels = []
        for arm, winner in winners.items():
            runs = tuning[arm][winner["lr"]]
            levels.append(statistics.fmean(loss_at(val_curve(r), fraction * horizon_tokens) for r in runs))
        targets.append(max(levels))
    return targets


def held_out_metrics(runs: list[dict], targets: list[float], horizon_tokens: float) -> dict:
    """One arm's held-out runs: loss at budgets, tokens and seconds to each target, step time and NS share."""
    curves = [val_curve(r) for r in runs]
    out: dict = {"seeds": len(runs), "budgets": {}, "targets": {}, "final_val": [final_val(r) for r in runs]}
    for fraction in BUDGET_FRACTIONS:
        found = interval([loss_at(c, fraction * horizon_tokens) for c in curves])
        out["budgets"][f"{fraction:g}"] = found.as_dict() if found else None
    for target in targets:
        tokens = [tokens_to(c, target) for c in curves]
        seconds = [seconds_at_tokens(r, t) for r, t in zip(runs, tokens)]
        reached = sum(t is not None for t in tokens)
        tok, sec = interval(tokens), interval(seconds)
        out["targets"][f"{target:.4f}"] = {
            "reached": reached,
            "tokens": tok.as_dict() if tok else None,
            "seconds": sec.as_dict() if sec else None,
            "per_seed_tokens": tokens,
            "per_seed_seconds": seconds,
        }
    step_times = [statistics.median(r["step_time_s"]) for r in runs]
    shares = [
        statistics.median(n / s for n, s in zip(r["ns_time_s"], r["step_time_s"]) if n is not None)
        for r in runs
        if any(n is not None for n in r["ns_time_s"])
    ]
    out["step_time_s"] = interval(step_times).as_dict()
    out["ns_share_of_step"] = interval(shares).as_dict() if shares else None
    loads = [r.get("others_cpu_share") for r in runs]
    out["others_cpu_share_max"] = max((v for v in loads if v is not None), default=None)
    return out


def _missed(arm: list, adamw: list, seeds: list[int]) -> dict[str, str]:
    """Seed -> which side never reached the target (a pair without a ratio is named, never dropped silently)."""
    sides = {(True, False): "arm", (False, True): "adamw", (True, True): "both"}
    return {str(seed): sides[(a is None, b is None)] for seed, a, b in zip(seeds, arm, adamw) if a is None or b is None}


def paired_ratios(arm: dict, adamw: dict, targets: list[float], seeds: list[int]) -> dict:
    """Arm / AdamW per held-out seed (same seed: same initialisation and data order), per target, and the
    arm's final validation loss minus AdamW's at the end of training."""
    ratios: dict = {}
    for target in targets:
        key = f"{target:.4f}"
        mine, theirs = arm["targets"][key], adamw["targets"][key]
        missed = _missed(mine["per_seed_tokens"], theirs["per_seed_tokens"], seeds)
        tokens = ratio_interval(
            [
                m / a
                for m, a in zip(mine["per_seed_tokens"], theirs["per_seed_tokens"])
                if m is not None and a is not None
            ]
        )
        wall = ratio_interval(
            [
                m / a
                for m, a in zip(mine["per_seed_seconds"], theirs["per_seed_seconds"])
                if m is not None and a is not None
            ]
        )
        ratios[key] = {
            "tokens": tokens.as_dict() if tokens else None,
            "seconds": wall.as_dict() if wall else None,
            "pairs": len(seeds) - len(missed),
            "missed": missed,
        }
    difference = interval([m - a for m, a in zip(arm["final_val"], adamw["final_val"])])
    return {"targets": ratios, "final_val_difference": difference.as_dict() if difference else None}


def rederive_targets(study: dict) -> list[float]:
    """The targets recomputed from a written study.json's tuning curves alone (what a reviewer re-derives)."""
    tokens_per_step = study["tokens_per_step"]
    tuning = {
        arm: {
            float(lr): [{"val": curve, "tokens_per_step": tokens_per_step} for curve in runs.values()]
            for lr, runs in by_lr.items()
        }
        for arm, by_lr in study["tuning_curves"].items()
    }
    winners = {arm: {"lr": float(w["lr"])} for arm, w in study["winners"].items()}
    return targets_from(tuning, winners, study["horizon_tokens"])
