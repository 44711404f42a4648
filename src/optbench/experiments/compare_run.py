"""``make compare``: train a Muon recipe and its AdamW twin with several seeds, then time-to-target.

Every run is composed and validated before the first one starts (a bad override fails in a second,
not after minutes of training). The runs go one after another on this machine (two at once would
share the cores and distort the clock), alternating which optimizer goes first from seed to seed so
that a drift in machine load does not favour one of them. Seed ``s`` sets ``train.seed`` and
``data.seed``: both optimizers of a seed start from the same weights and see the same tokens.
"""

from __future__ import annotations

import datetime as _dt
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from optbench.compose.recipe import compose_run, list_recipes
from optbench.config.schema import RunConfig
from optbench.common.errors import Problem, UserError
from optbench.measured.collect import read_metrics_run
from optbench.experiments.compare import ADAMW, MUON, CompareResult, analyse, provenance
from optbench.measured.runs import MeasuredRun
from optbench.runs import load_resolved_config
from optbench.validate import validate

Launcher = Callable[[RunConfig], Path]

CPU_DEFAULTS = (
    "logger=none",
    "train.iters=120",
    "train.warmup_iters=3",
    "train.gbs=8",
    "train.mbs=8",
    "train.seq_length=64",
    "data=pydocs",
)
"""A comparison sized for a laptop CPU (a few minutes for 2 optimizers x 3 seeds): 512 tokens per step of
real text, the pydocs corpus (CPython's documentation, 512-token BPE; `make data` builds it, and the
comparison does when it is missing). Applied before the user's overrides, which win (``data=synthetic``
gives the synthetic stream with its known loss floor)."""


@dataclass(frozen=True)
class CompareSpec:
    """What to compare and how."""

    model: str
    """Pair name: recipes ``<model>_muon`` and ``<model>_adamw`` (e.g. kimi_k2_tiny)."""
    seeds: tuple[int, ...]
    """Seeds; each sets train.seed and data.seed of both runs."""
    target: float | None = None
    """Target loss (None: auto, see optbench.experiments.compare)."""
    iters: int | None = None
    """train.iters for every run (None: the recipes' own)."""
    window: int = 5
    """Steps in the trailing mean that smooths the loss."""
    overrides: tuple[str, ...] = ()
    """Hydra overrides applied to both recipes (after the comparison's own, so they win)."""
    muon_recipe: str | None = None
    """Muon recipe (None: <model>_muon)."""
    adamw_recipe: str | None = None
    """AdamW recipe (None: <model>_adamw)."""
    results_dir: str = "results"
    """Where the runs (runs/<run_id>) and the comparison's files go."""
    reuse: str | None = None
    """Run-id prefix of an earlier comparison to analyse again instead of training (compare-<model>-<time>)."""

    def recipes(self) -> dict[str, str]:
        return {MUON: self.muon_recipe or f"{self.model}_muon", ADAMW: self.adamw_recipe or f"{self.model}_adamw"}


MAX_SEEDS = 100
MAX_SEED = 2**31 - 1
MAX_ITERS = 1_000_000_000


def _shown(text: str) -> str:
    """A typed value quoted for a one-line error, cut to 40 characters."""
    return repr(text[:40]) + ("..." if len(text) > 40 else "")


def parse_seeds(text: str) -> tuple[int, ...]:
    """``3`` means seeds 1, 2, 3; ``7,11,13`` lists them."""
    parts = [part.strip() for part in text.split(",") if part.strip()] if "," in text else [text.strip()]
    if not all(part.isascii() and part.isdigit() and len(part) <= 10 for part in parts):
        raise UserError(
            f"{_shown(text)} is neither a count (SEEDS=3) nor a list (SEEDS=1,2,3) of whole numbers", "SEEDS"
        )
    seeds = tuple(int(p) for p in parts) if "," in text else tuple(range(1, min(int(parts[0]), MAX_SEEDS + 1) + 1))
    if not seeds or len(set(seeds)) != len(seeds):
        raise UserError(f"{_shown(text)} gives no seeds or repeats one; use e.g. SEEDS=3 or SEEDS=1,2,3", "SEEDS")
    if len(seeds) > MAX_SEEDS or max(seeds) > MAX_SEED:
        raise UserError(f"{_shown(text)}: at most {MAX_SEEDS} seeds, each at most {MAX_SEED:,}", "SEEDS")
    return seeds


def parse_target(text: str) -> float | None:
    """``auto`` or a loss value in nats."""
    if text.strip().lower() in ("", "auto"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{_shown(text)} is not a loss value; use e.g. TARGET=4.5 or TARGET=auto", "TARGET") from None
    if not 0 < value < float("inf"):
        raise UserError(f"{_shown(text)}: a target loss must be a positive finite number of nats", "TARGET")
    return value


def _check_twins(runs: dict[str, RunConfig]) -> None:
    """The two recipes may differ only in the optimizer: same model, data and batch geometry."""
    muon, adamw = runs[MUON], runs[ADAMW]
    problems = []
    if muon.optimizer.name != MUON or adamw.optimizer.name != ADAMW:
        problems.append(
            Problem("optimizer", f"the pair must be muon vs adamw, got {muon.optimizer.name} vs {adamw.optimizer.name}")
        )
    for group in ("model", "data", "train", "precision", "parallel"):
        if getattr(muon, group) != getattr(adamw, group):
            problems.append(
                Problem(
                    group,
                    f"{muon.recipe} and {adamw.recipe} differ in {group}; a comparison changes only the optimizer",
                )
            )
    if problems:
        raise UserError(problems)


def local_pairs() -> list[str]:
    """Pair names whose Muon and AdamW recipes both run on the local engine."""
    names = set(list_recipes())
    pairs = sorted(r[: -len("_muon")] for r in names if r.endswith("_muon") and f"{r[:-5]}_adamw" in names)
    return [p for p in pairs if compose_run(f"{p}_muon", []).engine == "local"]


def compose_compare_runs(spec: CompareSpec, stamp: str) -> list[tuple[int, RunConfig]]:
    """(seed, run) for every seed and optimizer, validated, in the order they will run."""
    recipes = spec.recipes()
    missing = [name for name in recipes.values() if name not in list_recipes()]
    if missing:
        raise UserError(
            f"no recipe {', '.join(missing)}; local pairs with both optimizers: {', '.join(local_pairs())}", "MODEL"
        )
    if spec.iters is not None and spec.iters < 1:
        raise UserError("must be at least 1", "ITERS")
    for name in recipes.values():
        engine = compose_run(name, []).engine
        if engine != "local":
            raise UserError(
                f"{name} runs on {engine}; make compare trains on this machine, use one of: {', '.join(local_pairs())}",
                "MODEL",
            )
    planned = []
    for index, seed in enumerate(spec.seeds):
        order = (MUON, ADAMW) if index % 2 == 0 else (ADAMW, MUON)
        pair = {}
        for optimizer in order:
            own = [
                *CPU_DEFAULTS,
                f"train.seed={seed}",
                f"data.seed={seed}",
                f"run_id=compare-{spec.model}-{stamp}-{optimizer}-s{seed}",
                f"results_dir={spec.results_dir}",
            ]
            if spec.iters is not None:
                own.append(f"train.iters={spec.iters}")
            run = compose_run(recipes[optimizer], [*own, *spec.overrides])
            validate(run)
            pair[optimizer] = run
        _check_twins(pair)
        planned += [(seed, pair[optimizer]) for optimizer in order]
    return planned


def default_launcher() -> Launcher:
    from optbench.engine.local import launch_local  # torch is imported only when runs really start

    return launch_local


def _train(spec: CompareSpec, launcher: Launcher | None, stamp: str, progress: Callable[[str], None]):
    """Launch every planned run; returns (seed, run) pairs, the first config and per-run process seconds."""
    planned = compose_compare_runs(spec, stamp)
    if launcher is None:
        if any(run.data.name == "pydocs" for _, run in planned):
            from optbench.corpus.pydocs import ensure_pydocs

            ensure_pydocs(progress)
        launcher = default_launcher()
    measured, timings = [], []
    for number, (seed, run) in enumerate(planned, start=1):
        progress(f"[{number}/{len(planned)}] {run.recipe} seed {seed} ({run.train.iters} steps) -> {run.run_id}")
        started = time.perf_counter()
        directory = launcher(run)
        timings.append({"run_id": run.run_id, "process_seconds": time.perf_counter() - started})
        measured.append((seed, read_metrics_run(Path(directory))))
    return measured, planned[0][1], timings


def reuse_runs(results_dir: str | Path, prefix: str) -> tuple[list[tuple[int, MeasuredRun]], RunConfig]:
    """The runs of an earlier comparison: ``<results_dir>/runs/<prefix>-<optimizer>-s<seed>``."""
    pattern = re.compile(rf"^{re.escape(prefix)}-({MUON}|{ADAMW})-s(\d+)$")
    root = Path(results_dir) / "runs"
    found = sorted((int(m[2]), d) for d in (root.iterdir() if root.is_dir() else []) if (m := pattern.match(d.name)))
    optimizers = {pattern.match(d.name)[1] for _, d in found}
    if optimizers != {MUON, ADAMW}:
        raise UserError(f"no runs {prefix}-muon-s<seed> and {prefix}-adamw-s<seed> under {root}", "REUSE")
    return [(seed, read_metrics_run(d)) for seed, d in found], load_resolved_config(found[0][1] / "config.yaml")


def run_compare(
    spec: CompareSpec,
    launcher: Launcher | None = None,
    now: _dt.datetime | None = None,
    progress: Callable[[str], None] = print,
) -> tuple[CompareResult, list[MeasuredRun]]:
    """Train every (seed, optimizer) run (or reuse an earlier comparison's), then analyse them."""
    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y%m%d-%H%M%S")
    if spec.reuse:
        measured, first = reuse_runs(spec.results_dir, spec.reuse)
        timings: list[dict] = []
    else:
        measured, first, timings = _train(spec, launcher, stamp, progress)
    floors = [run.extra.get("loss_floor") for _, run in measured]
    floor = next((f for f in floors if isinstance(f, (int, float))), None)
    result = analyse(spec.model, measured, spec.target, spec.window, loss_floor=floor)
    result.context = {
        "recipes": spec.recipes(),
        "seeds": sorted({seed for seed, _ in measured}),
        "iters": first.train.iters,
        "gbs": first.train.gbs,
        "seq_length": first.train.seq_length,
        "defaults": list(CPU_DEFAULTS),
        "overrides": list(spec.overrides),
        "data": first.data.kind,
        "started": stamp,
        "reused": spec.reuse,
        "runs": timings,
        "commands": {run.run_id: run.command for _, run in measured},
        "provenance": provenance([run for _, run in measured]),
    }
    return result, [run for _, run in measured]


def spec_from_words(
    model: str,
    seeds: str,
    target: str,
    iters: str,
    window: str,
    overrides: Sequence[str],
    muon_recipe: str = "",
    adamw_recipe: str = "",
    results_dir: str = "results",
    reuse: str = "",
) -> CompareSpec:
    """A spec from the make variables (strings, as typed)."""
    for field, text in (("WINDOW", window), ("ITERS", iters)):
        text = text.strip()
        if text and not (text.isascii() and text.isdigit() and int(text[:12]) <= MAX_ITERS and len(text) <= 10):
            raise UserError(f"{_shown(text)} is not a whole number of steps from 1 to {MAX_ITERS:,}", field)
    window_steps = int(window)
    iter_count = int(iters) if iters.strip() else None
    if window_steps < 1:
        raise UserError("must be at least 1 step", "WINDOW")
    return CompareSpec(
        model=model,
        seeds=parse_seeds(seeds),
        target=parse_target(target),
        iters=iter_count,
        window=window_steps,
        overrides=tuple(overrides),
        muon_recipe=muon_recipe or None,
        adamw_recipe=adamw_recipe or None,
        results_dir=str(results_dir),
        reuse=reuse or None,
    )
