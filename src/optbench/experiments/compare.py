"""Time-to-target: does Muon's per-step cost pay for itself?

A Muon recipe and its AdamW twin are trained on the same synthetic stream with several seeds
(:mod:`optbench.experiments.compare_run` launches them); this module only reads the runs:

* loss is smoothed with a trailing mean over ``window`` steps (one step's batch loss is noisy);
* the target is a loss value: given by the user, or ``auto`` = the highest smoothed loss over every
  run of both optimizers at 3/4 of its steps: the worst run gets there by 3/4 of its budget, the
  others earlier (or, if they flatten, later but usually within the budget); the last quarter keeps
  the crossing from being forced onto the final step, which would make every ratio 1;
* a run reaches the target at the first step whose smoothed loss is at or below it; tokens-to-target
  are the tokens trained up to that step, time-to-target the training seconds (sum of step times,
  optimizer and Newton-Schulz included) up to that step;
* a run that never reaches the target is reported as not reached, never extrapolated;
* per optimizer: median and range over the seeds that reached; Muon/AdamW ratios are the ratio of the
  medians and, per seed, the paired ratio (same seed = same init and data), shown as a range.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from optbench.measured.comparable import load_flag, others_share, why_not_comparable
from optbench.measured.runs import MeasuredRun, loss_curve, training_seconds
from optbench.measured.stats import Spread, spread

MUON, ADAMW = "muon", "adamw"
AUTO_FRACTION = 0.75
"""``auto`` targets the worst run's smoothed loss at this fraction of its steps."""
AUTO_RULE = f"auto: highest smoothed loss over all runs at {AUTO_FRACTION:.0%} of their steps"


def smoothed(losses: list[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start)."""
    out, total = [], 0.0
    for index, value in enumerate(losses):
        total += value
        if index >= window:
            total -= losses[index - window]
        out.append(total / min(index + 1, window))
    return out


@dataclass(frozen=True)
class SeedResult:
    """One run's way to the target."""

    optimizer: str
    seed: int
    run_id: str
    steps: int
    """Steps the run logged."""
    final_loss: float | None
    """Smoothed loss at the last step (None: the run logged no loss)."""
    reached: bool
    """Whether the smoothed loss ever got to the target."""
    step: int | None = None
    """First step at or below the target."""
    tokens: float | None = None
    """Tokens trained up to and including that step."""
    seconds: float | None = None
    """Training seconds (sum of step times) up to and including that step."""
    step_time_s: float | None = None
    """Median seconds per step over the whole run."""
    ns_share: float | None = None
    """Median share of a step spent in Newton-Schulz (Muon; None when not logged)."""


@dataclass
class OptimizerSummary:
    """Median and range over the seeds of one optimizer that reached the target."""

    optimizer: str
    reached: int
    runs: int
    tokens: Spread | None
    seconds: Spread | None
    step_time_s: Spread | None
    ns_share: Spread | None


@dataclass
class CompareResult:
    """Everything compare.md / .json / .csv print."""

    model: str
    target: float
    target_rule: str
    window: int
    seeds: list[SeedResult]
    summaries: dict[str, OptimizerSummary]
    tokens_ratio: float | None
    """median Muon tokens-to-target / median AdamW tokens-to-target (None unless both reached)."""
    seconds_ratio: float | None
    """median Muon time-to-target / median AdamW time-to-target."""
    step_time_ratio: float | None
    """median Muon step time / median AdamW step time: the per-step cost."""
    paired_tokens_ratio: Spread | None
    """Per-seed Muon/AdamW tokens-to-target (seeds where both reached)."""
    paired_seconds_ratio: Spread | None
    """Per-seed Muon/AdamW time-to-target."""
    loss_floor: float | None = None
    """Entropy floor of the synthetic stream (nats per token) when the runs report it."""
    unlike: str = ""
    """Why a seed's Muon and AdamW runs may not be compared (data, tokens per step, machine differ); the ratios are
    then left out. "" when every pair may be."""
    load: str = ""
    """How busy the machine was with other processes during the busiest run of each optimizer, when more than
    a quiet share: the seconds are then not this CPU's figure."""
    context: dict = field(default_factory=dict)
    """Recipes, iterations, overrides, commands and timings of the comparison."""

    def as_dict(self) -> dict:
        return asdict(self)


def provenance(runs: list[MeasuredRun]) -> dict[str, list[str]]:
    """Where the runs' figures come from, each distinct value once: when they started, the code (commit, and whether
    it had uncommitted changes), the machine, Python and torch, threads, and the data the corpus held. A page rebuilt
    from older runs says so, and a re-run can be set beside it."""

    def distinct(value) -> list[str]:
        return sorted({str(v) for run in runs if (v := value(run.extra)) not in (None, "")})

    started = distinct(lambda extra: extra.get("started"))
    return {
        "started": [started[0], started[-1]] if started else [],
        "code": distinct(
            lambda extra: (
                (extra.get("git") or {}).get("commit", "")[:7]
                + (" with uncommitted changes" if (extra.get("git") or {}).get("dirty") else "")
            )
        ),
        "machine": distinct(lambda extra: extra.get("device")),
        "python": distinct(lambda extra: (extra.get("versions") or {}).get("python")),
        "torch": distinct(lambda extra: (extra.get("versions") or {}).get("torch")),
        "data": distinct(lambda extra: (extra.get("data") or {}).get("description")),
    }


def _smoothed_curve(run: MeasuredRun, window: int):
    curve = [r for r in loss_curve(run.steps) if r.loss is not None]
    return curve, smoothed([r.loss for r in curve], window)


def auto_target(runs: list[MeasuredRun], window: int) -> float:
    """The highest smoothed loss over all runs at AUTO_FRACTION of their steps (see the module docstring)."""
    points = [
        losses[max(0, math.ceil(AUTO_FRACTION * len(losses)) - 1)]
        for _, losses in (_smoothed_curve(run, window) for run in runs)
        if losses
    ]
    if not points:
        raise ValueError("no run logged a loss")
    return max(points)


def seed_result(run: MeasuredRun, seed: int, target: float, window: int) -> SeedResult:
    """Where (if anywhere) one run's smoothed loss first reaches ``target``."""
    curve, losses = _smoothed_curve(run, window)
    seconds = training_seconds(curve)
    step_times = spread(r.step_time_s for r in curve)
    shares = (
        spread(r.ns_time_s / r.step_time_s for r in curve if r.ns_time_s is not None and r.step_time_s)
        if run.optimizer == MUON
        else None
    )
    common = dict(
        optimizer=run.optimizer,
        seed=seed,
        run_id=run.run_id,
        steps=len(curve),
        final_loss=losses[-1] if losses else None,
        step_time_s=step_times.median if step_times else None,
        ns_share=shares.median if shares else None,
    )
    for index, loss in enumerate(losses):
        if loss <= target:
            return SeedResult(
                reached=True, step=curve[index].step, tokens=curve[index].tokens, seconds=seconds[index], **common
            )
    return SeedResult(reached=False, **common)


def _summary(optimizer: str, results: list[SeedResult]) -> OptimizerSummary:
    mine = [r for r in results if r.optimizer == optimizer]
    reached = [r for r in mine if r.reached]
    return OptimizerSummary(
        optimizer=optimizer,
        reached=len(reached),
        runs=len(mine),
        tokens=spread(r.tokens for r in reached),
        seconds=spread(r.seconds for r in reached),
        step_time_s=spread(r.step_time_s for r in mine),
        ns_share=spread(r.ns_share for r in mine),
    )


def _ratio(a: Spread | None, b: Spread | None) -> float | None:
    return a.median / b.median if a is not None and b is not None and b.median else None


def _paired(results: list[SeedResult], attribute: str) -> Spread | None:
    by_seed: dict[int, dict[str, SeedResult]] = {}
    for r in results:
        by_seed.setdefault(r.seed, {})[r.optimizer] = r
    ratios = []
    for pair in by_seed.values():
        muon, adamw = pair.get(MUON), pair.get(ADAMW)
        if muon and adamw and muon.reached and adamw.reached and getattr(adamw, attribute):
            ratios.append(getattr(muon, attribute) / getattr(adamw, attribute))
    return spread(ratios)


def analyse(
    model: str,
    runs: list[tuple[int, MeasuredRun]],
    target: float | None,
    window: int = 5,
    loss_floor: float | None = None,
) -> CompareResult:
    """Time-to-target of (seed, run) pairs of both optimizers; ``target`` None means auto."""
    if window < 1:
        raise ValueError("window must be at least 1")
    rule = "given" if target is not None else AUTO_RULE
    target = target if target is not None else auto_target([run for _, run in runs], window)
    results = [seed_result(run, seed, target, window) for seed, run in runs]
    summaries = {o: _summary(o, results) for o in (ADAMW, MUON)}
    by_seed: dict[int, dict[str, MeasuredRun]] = {}
    for seed, run in runs:
        by_seed.setdefault(seed, {})[run.optimizer] = run
    unlike = next(
        (
            note
            for pair in by_seed.values()
            if len(pair) == 2
            for note in [why_not_comparable(pair[MUON], pair[ADAMW])]
            if note
        ),
        "",
    )
    busiest = [
        max((run for _, run in runs if run.optimizer == name), key=lambda r: others_share(r) or 0.0, default=None)
        for name in (ADAMW, MUON)
    ]
    load = load_flag(*(run for run in busiest if run is not None)) or ""
    # Unlike runs (a reused run on other data, say) give no ratio at all: the table says why instead.
    ratio = (lambda a, b: None) if unlike else _ratio
    paired = (lambda results, attribute: None) if unlike else _paired
    return CompareResult(
        model=model,
        target=target,
        target_rule=rule,
        window=window,
        seeds=results,
        summaries=summaries,
        tokens_ratio=ratio(summaries[MUON].tokens, summaries[ADAMW].tokens),
        seconds_ratio=ratio(summaries[MUON].seconds, summaries[ADAMW].seconds),
        step_time_ratio=ratio(summaries[MUON].step_time_s, summaries[ADAMW].step_time_s),
        paired_tokens_ratio=paired(results, "tokens"),
        paired_seconds_ratio=paired(results, "seconds"),
        loss_floor=loss_floor,
        unlike=unlike,
        load=load,
    )


def verdict(result: CompareResult) -> str:
    """One sentence: does Muon reach the target sooner in training time, and how sure is it."""
    muon, adamw = result.summaries[MUON], result.summaries[ADAMW]
    if result.unlike:
        return f"No verdict: the two optimizers' runs are {result.unlike}."
    if muon.reached == 0 and adamw.reached == 0:
        return "Neither optimizer reached the target: lower the target or raise the iterations."
    if muon.reached == 0:
        return (
            "AdamW reached the target and Muon did not within the budget: here Muon's steps do not pay for themselves."
        )
    if adamw.reached == 0:
        return "Muon reached the target and AdamW did not within the budget: Muon's per-step cost pays for itself here."
    tokens, seconds = result.tokens_ratio, result.seconds_ratio
    text = (
        f"Muon needs {tokens:.2f}x AdamW's tokens and {seconds:.2f}x its training time to reach loss "
        f"{result.target:.3f}"
        + (f" at {result.step_time_ratio:.2f}x the time per step" if result.step_time_ratio else "")
        + ": "
        + ("its per-step cost pays for itself" if seconds < 1 else "its per-step cost does not pay for itself")
        + " on this setup"
    )
    paired = result.paired_seconds_ratio
    if paired is not None and paired.low <= 1 <= paired.high:
        text += (
            f", but the per-seed time ratios span {paired.low:.2f}-{paired.high:.2f} (inconclusive at {paired.n} seeds)"
        )
    if muon.reached < muon.runs or adamw.reached < adamw.runs:
        text += f"; reached by Muon {muon.reached}/{muon.runs}, AdamW {adamw.reached}/{adamw.runs} seeds"
    return text + "."
