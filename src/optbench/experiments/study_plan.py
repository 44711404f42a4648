"""``make study``: Muon against AdamW with each optimizer's learning rate tuned, on real text.

Three arms, each swept over its own learning rates:

* ``adamw``: AdamW (the tiny recipe's settings otherwise);
* ``muon_spectral``: Muon with the spectral update scale sqrt(max(M, N)) (Megatron's and the Kimi K2
  recipe's default);
* ``muon_moonlight``: Muon with Moonlight's AdamW-matched scale 0.2 x sqrt(max(M, N))
  (``optimizer.muon.extra_scale_factor=0.2``), which lets it share AdamW's learning rates.

Every (arm, learning rate) point trains on the tuning seeds; the winner of each arm is the rate with the
lowest mean final validation loss there, and only the winners train again on *held-out* seeds, whose
runs alone give the reported numbers (choosing and measuring on the same seeds would flatter the
winner). A seed sets ``train.seed`` and ``data.seed``: initialisation and data order. Every run is a
local-engine run with a fixed id (``study-<size>-<arm>-lr<rate>-s<seed>``): a study interrupted and
started again reuses every finished run and restarts an unfinished one.

Sizes: ``cpu`` (the default, what the committed results/study.md measured: kimi_k2_tiny, 512 tokens
per step, 600 steps) and ``gpu`` (a larger proxy and batch for one GPU; not run by us).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from optbench.compose.recipe import compose_run
from optbench.config.schema import RunConfig
from optbench.errors import Problem, UserError
from optbench.metrics import read_metrics
from optbench.validate import validate

ARMS = {
    "adamw": ("kimi_k2_tiny_adamw", ()),
    "muon_spectral": ("kimi_k2_tiny_muon", ("optimizer.muon.extra_scale_factor=1.0",)),
    "muon_moonlight": ("kimi_k2_tiny_muon", ("optimizer.muon.extra_scale_factor=0.2",)),
}
"""Arm -> (recipe, its own overrides)."""

LEARNING_RATES = {
    "adamw": (3e-4, 1e-3, 3e-3, 1e-2),
    "muon_spectral": (3e-4, 1e-3, 3e-3),
    "muon_moonlight": (1e-3, 3e-3, 1e-2),
}
"""Each arm's grid, a factor ~3 apart around its expected optimum (spectral updates are ~5x larger per lr).
AdamW's reaches down to 3e-4: with 1e-3 to 1e-2 alone, its best rate was the grid's lowest."""

SIZES = {
    "cpu": (
        "train.iters=600", "train.warmup_iters=30", "train.gbs=8", "train.mbs=8", "train.seq_length=64",
        "train.eval_interval=25", "train.eval_iters=4",
    ),
    "gpu": (
        "train.iters=3000", "train.warmup_iters=150", "train.gbs=32", "train.mbs=16", "train.seq_length=512",
        "train.eval_interval=100", "train.eval_iters=8", "model.num_layers=8", "model.hidden_size=512",
        "model.ffn_hidden_size=1536", "model.num_moe_experts=32", "model.moe_ffn_hidden_size=256",
        "model.moe_shared_expert_intermediate_size=256", "model.num_attention_heads=8", "model.q_lora_rank=192",
        "model.kv_lora_rank=128",
    ),
}
"""Size -> overrides. ``cpu``: 307,200 tokens per run (0.3 epochs of pydocs' training split), ~1-2 min per
run on 2 cores. ``gpu``: 49 M tokens per run, a proxy about 8x larger: meant for one GPU."""

COMMON = ("data=pydocs", "logger=none", "train.lr_decay_iters=null")
TUNING_SEEDS = (1, 2, 3)
HELD_OUT_SEEDS = (4, 5, 6)


@dataclass(frozen=True)
class StudyRun:
    """One run of the study."""

    arm: str
    lr: float
    seed: int
    phase: str
    """tuning or held_out."""
    size: str

    @property
    def run_id(self) -> str:
        return f"study-{self.size}-{self.arm}-lr{self.lr:g}-s{self.seed}"

    def overrides(self, results_dir: str, extra: tuple[str, ...] = ()) -> list[str]:
        recipe_overrides = ARMS[self.arm][1]
        return [*COMMON, *SIZES[self.size], *recipe_overrides, f"optimizer.lr={self.lr}",
                f"optimizer.min_lr={self.lr / 10}", f"train.seed={self.seed}", f"data.seed={self.seed}",
                f"run_id={self.run_id}", f"results_dir={results_dir}", *extra]


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


def compose(spec: StudySpec, run: StudyRun) -> RunConfig:
    config = compose_run(ARMS[run.arm][0], run.overrides(spec.results_dir, spec.overrides))
    validate(config)
    return config


def tuning_runs(spec: StudySpec) -> list[StudyRun]:
    return [StudyRun(arm, lr, seed, "tuning", spec.size) for arm in spec.arms for lr in spec.learning_rates[arm]
            for seed in spec.tuning_seeds]


def check(spec: StudySpec) -> None:
    """Compose every run of the study before any trains (a bad override fails in one line, at once)."""
    if spec.size not in SIZES:
        raise UserError(Problem("SIZE", f"'{spec.size}' is not one of {', '.join(SIZES)}"))
    if set(spec.tuning_seeds) & set(spec.held_out_seeds):
        raise UserError(Problem("SEEDS", "tuning and held-out seeds must differ (the winner is chosen on the former)"))
    for run in tuning_runs(spec):
        compose(spec, run)


def finished(spec: StudySpec, run: StudyRun) -> Path | None:
    """The run's folder when it completed (summary.json written), else None."""
    folder = Path(spec.results_dir) / "runs" / run.run_id
    return folder if (folder / "summary.json").is_file() else None


def train(spec: StudySpec, run: StudyRun, launcher: Callable[[RunConfig], Path], progress: Callable[[str], None]) -> Path:
    """The run's folder: reused when finished, else trained (an unfinished one restarts from step 0)."""
    done = finished(spec, run)
    if done is not None:
        return done
    folder = Path(spec.results_dir) / "runs" / run.run_id
    config = compose(spec, run)
    if (folder / "metrics.jsonl").is_file():
        config.resume = True  # no checkpoint: the engine starts it over and truncates its metrics
    progress(f"{run.phase:<8} {run.arm:<15} lr {run.lr:<7g} seed {run.seed} -> {run.run_id}")
    return launcher(config)


def read_run(folder: Path) -> dict:
    """What the analysis needs from a run: its validation curve, training losses, step times and summary."""
    records = read_metrics(folder / "metrics.jsonl")
    summary = json.loads((folder / "summary.json").read_text())
    return {
        "run_id": folder.name,
        "tokens_per_step": summary.get("tokens_per_step"),
        "val": [(r["step"], r["val_loss"]) for r in records if r.get("val_loss") is not None],
        "train_loss": [r["loss"] for r in records],
        "step_time_s": [r["step_time_s"] for r in records],
        "ns_time_s": [r.get("ns_time_s") for r in records],
        "wall_s": summary.get("wall_s"),
        "device": summary.get("device"),
        "precision": summary.get("precision"),
        "threads_per_process": summary.get("threads_per_process"),
    }
