"""``make study``: every matrix optimizer against AdamW with each one's learning rate tuned, on real text.

The arms are the optimizer registry's (:attr:`optbench.config.optimizers.OptimizerEntry.study_arms`): each a recipe,
its overrides and a learning-rate grid, written beside the optimizer's other facts (Muon brings two: the spectral
update scale and Moonlight's AdamW-matched 0.2).

Every (arm, learning rate) point trains on the tuning seeds; the winner of each arm is the rate with the
lowest mean final validation loss there, and only the winners train again on *held-out* seeds, whose
runs alone give the reported numbers (choosing and measuring on the same seeds would flatter the
winner). A seed sets ``train.seed`` and ``data.seed``: initialisation and training-data order. Every
run validates on the same samples (``data.valid_seed`` fixed, ``VALIDATION_TOKENS`` or more) of a
corpus whose near-duplicate documents were removed before the split (:mod:`optbench.corpus.dedup`).
Every run is a local-engine run with a fixed id (``study<protocol>-<size>-<arm>-lr<rate>-s<seed>``): a
study interrupted and started again reuses every finished run and restarts an unfinished one.

Sizes: ``cpu`` (the default, what the committed results/study.md measured: kimi_k2_tiny, 512 tokens
per step, 600 steps) and ``gpu`` (a larger proxy and batch for one GPU; not run by us).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from optbench.compose.recipe import compose_run
from optbench.config.overrides import typed_key, typed_keys
from optbench.config.optimizers import REGISTRY
from optbench.config.schema import RunConfig
from optbench.common.redact import clipped
from optbench.common.errors import Problem, UserError
from optbench.common.io import atomic_write_json
from optbench.metrics import read_metrics
from optbench.validate import validate

ARMS = {arm.key: (arm.recipe, arm.overrides) for e in REGISTRY.values() for arm in e.study_arms}
"""Arm -> (recipe, its own overrides)."""

LEARNING_RATES = {arm.key: arm.learning_rates for e in REGISTRY.values() for arm in e.study_arms}
"""Each arm's grid, a factor ~3 apart around its expected optimum (spectral updates are ~5x larger per lr)."""

PROTOCOL = 2
"""Bumped when a change makes earlier runs incomparable (2: fixed >= 64k-token validation set, deduplicated
corpus, 90/10 split); part of every run id so a study never reuses a run of another protocol."""
VALIDATION_TOKENS = 65_536
"""The least number of predicted tokens every validation pass covers (the same samples for every run)."""

SIZES = {
    "cpu": (
        "train.iters=600",
        "train.warmup_iters=30",
        "train.gbs=8",
        "train.mbs=8",
        "train.seq_length=64",
        "train.eval_interval=50",
        "train.eval_iters=128",
    ),
    "gpu": (
        "train.iters=3000",
        "train.warmup_iters=150",
        "train.gbs=32",
        "train.mbs=16",
        "train.seq_length=512",
        "train.eval_interval=100",
        "train.eval_iters=4",
        "model.num_layers=8",
        "model.hidden_size=512",
        "model.ffn_hidden_size=1536",
        "model.num_moe_experts=32",
        "model.moe_ffn_hidden_size=256",
        "model.moe_shared_expert_intermediate_size=256",
        "model.num_attention_heads=8",
        "model.q_lora_rank=192",
        "model.kv_lora_rank=128",
    ),
}
"""Size -> overrides. ``cpu``: 307,200 training tokens per run (0.3 epochs of pydocs' training split), a
validation pass of 128 x 8 x 64 = 65,536 tokens every 50 steps; ~2-6 min per run on 2 cores (the preconditioned
optimizers the most). ``gpu``: 49 M tokens per run, a proxy about 8x larger, 65,536 validation tokens: meant for one
GPU."""

COMMON = ("data=pydocs", "data.split='90,10,0'", "data.valid_seed=1", "logger=none", "train.lr_decay_iters=null")
"""Every run: pydocs with a tenth of each part's documents held out (about 100k tokens, so a 64k-token
validation set is drawn without repeats) and the validation order fixed whatever the run's seed."""
TUNING_SEEDS = (1, 2, 3)
HELD_OUT_SEEDS = (4, 5, 6)


SET_PER_RUN = ("optimizer.lr", "optimizer.min_lr", "train.seed", "data.seed", "run_id", "results_dir")
"""Keys the study sets for each run (its grid, its seeds, its ids): a typed value would train every run at it under
names that say otherwise, so it is refused (as is every key an arm sets, :data:`ARMS`)."""
CURVES = "study_curves.json"
"""What the study reads of a finished run besides its summary (validation curve, per-step training loss, step and
Newton-Schulz seconds), written beside the run's metrics.jsonl the first time the study reads it. It and the summary
are committed, the full metrics are not: ``make study`` rebuilds study.md from git alone."""
NOT_NAMED = ("debug",)
"""Typed keys that change nothing a run measures, left out of its id."""


@dataclass(frozen=True)
class StudyRun:
    """One run of the study."""

    arm: str
    lr: float
    seed: int
    phase: str
    """tuning or held_out."""
    size: str
    variant: str = ""
    """A short digest of the typed overrides ("" without any): runs of other settings never share an id."""

    @property
    def run_id(self) -> str:
        return f"study{PROTOCOL}-{self.size}-{self.arm}-lr{self.lr:g}-s{self.seed}" + (
            f"-x{self.variant}" if self.variant else ""
        )

    def overrides(self, results_dir: str, extra: tuple[str, ...] = ()) -> list[str]:
        recipe_overrides = ARMS[self.arm][1]
        return [
            *COMMON,
            *SIZES[self.size],
            *recipe_overrides,
            f"optimizer.lr={self.lr}",
            f"optimizer.min_lr={self.lr / 10}",
            f"train.seed={self.seed}",
            f"data.seed={self.seed}",
            f"run_id={self.run_id}",
            f"results_dir={results_dir}",
            *extra,
        ]


@dataclass
class StudySpec:
    size: str = "cpu"
    results_dir: str = "results"
    overrides: tuple[str, ...] = ()
    """Extra Hydra overrides for every run (after the study's own)."""
    arms: tuple[str, ...] = tuple(ARMS)
    tuning_seeds: tuple[int, ...] = TUNING_SEEDS
    held_out_seeds: tuple[int, ...] = HELD_OUT_SEEDS
    learning_rates: dict = field(default_factory=lambda: dict(LEARNING_RATES))

    @property
    def variant(self) -> str:
        """What names this study's runs apart from those of the plain study (:attr:`StudyRun.variant`)."""
        named = [o for o in self.overrides if typed_key(o) not in NOT_NAMED]
        return hashlib.sha256("\n".join(named).encode()).hexdigest()[:8] if named else ""

    def run(self, arm: str, lr: float, seed: int, phase: str) -> StudyRun:
        return StudyRun(arm, lr, seed, phase, self.size, self.variant)


def compose(spec: StudySpec, run: StudyRun) -> RunConfig:
    config = compose_run(ARMS[run.arm][0], run.overrides(spec.results_dir, spec.overrides))
    validate(config)
    return config


def tuning_runs(spec: StudySpec) -> list[StudyRun]:
    return [
        spec.run(arm, lr, seed, "tuning")
        for arm in spec.arms
        for lr in spec.learning_rates[arm]
        for seed in spec.tuning_seeds
    ]


def candidate_runs(spec: StudySpec) -> list[StudyRun]:
    """Every run the study may train: the tuning runs, and each grid point on the held-out seeds (its winner's)."""
    return [
        *tuning_runs(spec),
        *(
            spec.run(arm, lr, seed, "held_out")
            for arm in spec.arms
            for lr in spec.learning_rates[arm]
            for seed in spec.held_out_seeds
        ),
    ]


def check(spec: StudySpec) -> None:
    """Compose every run of the study before any trains (a bad override fails in one line, at once)."""
    if spec.size not in SIZES:
        raise UserError(Problem("SIZE", f"{clipped(spec.size, 40)!r} is not one of {', '.join(SIZES)}"))
    if set(spec.tuning_seeds) & set(spec.held_out_seeds):
        raise UserError(Problem("SEEDS", "tuning and held-out seeds must differ (the winner is chosen on the former)"))
    if "adamw" not in spec.arms:
        raise UserError(Problem("ARMS", "every arm is measured against adamw: keep it"))
    arm_keys = {typed_key(o): arm for arm in spec.arms for o in ARMS[arm][1]}
    for key in typed_keys(spec.overrides):
        if key == "results_dir":
            raise UserError(
                Problem(
                    key,
                    "the study keeps its runs and tables in one folder: set it with "
                    "OPTBENCH_RESULTS_DIR=<folder> (default results/), not per run",
                )
            )
        if key == "run_id":
            raise UserError(
                Problem(
                    key,
                    "make study makes many runs, each with its own id (study<protocol>-<size>-<arm>-"
                    "lr<rate>-s<seed>); drop run_id=",
                )
            )
        if key in SET_PER_RUN:
            raise UserError(
                Problem(
                    key,
                    "is set by the study for each run (its learning-rate grid and seeds); a typed "
                    "value would train every run at it under names that say otherwise; drop it",
                )
            )
        if key in arm_keys:
            raise UserError(
                Problem(
                    key,
                    f"is what the {arm_keys[key]} arm sets; a typed value would change the arm under its name; drop it",
                )
            )
    for run in tuning_runs(spec):
        if run.seed != spec.tuning_seeds[0]:
            continue  # a seed changes train.seed and data.seed only: one per (arm, lr) says whether it composes
        config = compose(spec, run)
        tokens = (config.train.eval_iters or 0) * config.train.gbs * config.train.seq_length
        if tokens < VALIDATION_TOKENS:
            raise UserError(
                Problem(
                    "train.eval_iters",
                    f"a validation pass of {config.train.eval_iters} x "
                    f"{config.train.gbs} x {config.train.seq_length} = {tokens:,} tokens is under the "
                    f"study's {VALIDATION_TOKENS:,}; raise train.eval_iters",
                )
            )


def finished(spec: StudySpec, run: StudyRun) -> Path | None:
    """The run's folder when it completed (summary.json written), else None."""
    folder = Path(spec.results_dir) / "runs" / run.run_id
    return folder if (folder / "summary.json").is_file() else None


def train(
    spec: StudySpec, run: StudyRun, launcher: Callable[[RunConfig], Path], progress: Callable[[str], None]
) -> Path:
    """The run's folder: reused when finished, else trained (an unfinished one restarts from step 0)."""
    done = finished(spec, run)
    if done is not None:
        return done
    folder = Path(spec.results_dir) / "runs" / run.run_id
    config = compose(spec, run)
    if (folder / "metrics.jsonl").is_file():
        config = dataclasses.replace(
            config, resume=True
        )  # no checkpoint: the engine starts it over and truncates its metrics
    progress(f"{run.phase:<8} {run.arm:<15} lr {run.lr:<7g} seed {run.seed} -> {run.run_id}")
    return launcher(config)


def check_finished(spec: StudySpec) -> None:
    """Read every finished run the study would reuse, so that one it cannot read is refused before any run trains."""
    for run in candidate_runs(spec):
        folder = finished(spec, run)
        if folder is not None:
            read_run(folder)


def read_run(folder: Path) -> dict:
    """What the analysis needs from a run: its validation curve, training losses, step times and summary; a run it
    cannot read (another shape, corrupt, not a run of this study) is a one-line refusal naming it."""
    try:
        return _read_run(folder)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
        reason = " ".join(str(err).split())[:120] or type(err).__name__
        raise UserError(
            Problem(
                "results_dir",
                f"{folder} is not a finished run this study can read ({reason}); move the "
                "folder away and the study trains it again",
            )
        ) from None


def _curves(folder: Path) -> dict:
    """The run's :data:`CURVES`: read when written, else taken from its metrics.jsonl and written (best effort, never
    through a link, and only when complete). Curves that are lost or of the wrong shape raise ValueError."""
    path = folder / CURVES
    if path.is_file():
        if path.stat().st_size > MAX_CURVES_BYTES:
            raise ValueError(f"{CURVES} is over {MAX_CURVES_BYTES >> 20} MB")
        return _checked_curves(json.loads(path.read_text(encoding="utf-8")))
    if not (folder / "metrics.jsonl").is_file():
        raise ValueError(
            f"neither {CURVES} nor metrics.jsonl is here: its validation curve is lost (git checkout -- "
            f"{folder}/{CURVES} restores a committed one)"
        )
    records = read_metrics(folder / "metrics.jsonl")
    curves = _checked_curves(
        {
            "val": [[r.get("step"), r["val_loss"]] for r in records if r.get("val_loss") is not None],
            "train_loss": [r.get("loss") for r in records],
            "step_time_s": [r.get("step_time_s") for r in records],
            "ns_time_s": [r.get("ns_time_s") for r in records],
        }
    )
    if not (folder.is_symlink() or path.is_symlink()):
        try:
            atomic_write_json(path, curves)
        except OSError:
            pass  # a read-only copy of the runs still analyses; it only keeps reading metrics.jsonl
    return curves


MAX_CURVES_BYTES = 16 << 20
"""A run's curves are tens of KB."""


def _checked_curves(curves: object) -> dict:
    """``curves`` when it has the shape the analysis reads: a validation curve of (whole step, finite loss) pairs with
    at least one point, and per-step lists of numbers (a diverged step's loss and AdamW's Newton-Schulz seconds are
    null)."""

    def number(value: object, empty: bool = False) -> bool:
        return (value is None and empty) or (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        )

    if not isinstance(curves, dict):
        raise ValueError(f"{CURVES} holds a {type(curves).__name__}, not the run's curves")
    val = curves.get("val")
    if not isinstance(val, list) or not val:
        raise ValueError("no validation curve (the run evaluated nothing, or its curves are lost)")
    if not all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and not isinstance(p[0], bool) and number(p[1])
        for p in val
    ):
        raise ValueError("its validation curve is not a list of (step, loss) pairs")
    for key, empty in (("train_loss", True), ("step_time_s", False), ("ns_time_s", True)):
        values = curves.get(key)
        if not isinstance(values, list) or not all(number(v, empty) for v in values):
            raise ValueError(f"its {key} is not a list of numbers")
    if not curves["step_time_s"]:
        raise ValueError("it records no step times")
    return curves


def _read_run(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    if not isinstance(summary, dict):
        raise ValueError(f"summary.json holds a {type(summary).__name__}, not a run summary")
    curves = _curves(folder)
    return {
        "run_id": folder.name,
        "tokens_per_step": summary.get("tokens_per_step"),
        "val": [(step, loss) for step, loss in curves["val"]],
        "train_loss": curves["train_loss"],
        "step_time_s": curves["step_time_s"],
        "ns_time_s": curves["ns_time_s"],
        "wall_s": summary.get("wall_s"),
        "device": summary.get("device"),
        "precision": summary.get("precision"),
        "threads_per_process": summary.get("threads_per_process"),
        "others_cpu_share": (summary.get("machine_load") or {}).get("others_cpu_share"),
        "finished": summary.get("finished"),
        "python": (summary.get("versions") or {}).get("python"),
        "ns_precision": summary.get("ns_matmul_precision"),
        "corpus": (summary.get("data") or {}).get("description"),
    }
