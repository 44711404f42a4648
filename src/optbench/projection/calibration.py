"""One GEMM efficiency per model, calibrated on a published AdamW figure, never on a Muon one.

The step-time model has one free number: the fraction ``eff`` of the GEMM peak (FP8 under FP8
recipes) at which the model's forward and backward GEMMs run, which absorbs everything the model
does not price (attention and element-wise kernels, router, quantization, dispatcher overheads).
It is solved so that the projected AdamW step equals a published AdamW step
(:func:`optbench.projection.step_model.solve_efficiency`), and the same value is then used for every
other projection of that model: Muon, other layouts, other GPUs ("transferred").

Anchor choice, among the AdamW rows of ``results/published/published.csv`` for the run's model
(Muon rows are never read here), best first:

1. measured on the run's GPU;
2. from a source that also publishes the Muon figure of the same setup (a paired comparison:
   NVIDIA's blog Table 1, Kimi K2 1051 and Qwen3 30B-A3B 713 on GB300);
3. measured with the container release the run's cluster preset uses (``nemo:26.02`` -> 26.02);
4. file order.

An anchor needs a configuration that reproduces it: the model's ``<model>_adamw`` recipe as is, or
with the cluster, parallel, train and precision presets named after the row
(``parallel=<model>_<gpu>_<num_gpus>``, ``train=<model>_<gpu>``), whichever matches the row's GPU,
GPU count, precision and stated layout. A model without such a row is "not calibrated".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from optbench.accounting.plan_fields import PRECISION_ALIASES, layout_matches
from optbench.accounting.throughput import step_time_for_tflops, step_time_for_tokens
from optbench.compose.recipe import (
    compose_run,
    list_group_options,
    list_recipes,
    repo_root,
)
from optbench.config.schema import RunConfig
from optbench.errors import UserError
from optbench.hardware import gpu_catalog
from optbench.projection.assumptions import Assumptions
from optbench.projection.interconnect import interconnect_for
from optbench.projection.step_model import solve_efficiency
from optbench.projection.work import build_inputs, gemm_peak
from optbench.published import PublishedRow, default_published_dir, load_published
from optbench.resolve import ResolvedRun, resolve


@dataclass(frozen=True)
class Calibration:
    """The calibrated GEMM efficiency of one model and where it comes from."""

    efficiency: float
    """Fraction of the anchor's GEMM peak the model's GEMMs run at."""
    peak_key: str
    """The peak it is a fraction of, e.g. gb300_fp8."""
    anchor: str
    """Published row it was solved on: '<source> <release> <model> <gpu> x<num_gpus> adamw <figure>'."""
    anchor_step_time_s: float
    """Step time the published figure implies on the anchor configuration."""
    anchor_recipe: str
    """Recipe that reproduces the anchor."""
    anchor_overrides: tuple[str, ...]
    """Overrides applied to it."""
    anchor_gpu: str
    """GPU of the anchor."""
    anchor_run: ResolvedRun | None = field(default=None, compare=False, repr=False)
    """The anchor configuration, resolved (a Muon run's AdamW twin is often this very configuration)."""

    def as_dict(self, run_gpu: str) -> dict:
        transferred = run_gpu != self.anchor_gpu
        return {
            "value": round(self.efficiency, 6),
            "of_peak": self.peak_key,
            "status": f"transferred from {self.anchor_gpu}" if transferred else "calibrated",
            "calibrated_on": self.anchor,
            "anchor_step_time_s": round(self.anchor_step_time_s, 4),
            "anchor_config": " ".join([self.anchor_recipe, *self.anchor_overrides]),
            "fitted_to_muon": False,
        }


def cluster_for_gpu(gpu: str) -> str | None:
    """Our cluster preset for ``gpu`` (the GPU registry, optbench/data/gpus.csv), None for a GPU it lacks."""
    spec = gpu_catalog().get(gpu)
    return spec.cluster_preset if spec is not None else None


def _release_of(run: RunConfig) -> str | None:
    return run.cluster.container.split(":", 1)[1]


def _matches(anchor: ResolvedRun, row: PublishedRow) -> bool:
    run = anchor.run
    return (
        run.model.name == row.model
        and run.cluster.gpu == row.gpu
        and run.parallel.num_gpus == row.num_gpus
        and run.precision.name == PRECISION_ALIASES.get(row.precision, row.precision)
        and run.optimizer.name == "adamw"
        and layout_matches(run, row.layout, anchor.layout)
    )


@lru_cache(maxsize=128)
def _candidate(recipe: str, overrides: tuple[str, ...]) -> ResolvedRun:
    """One anchor candidate, composed and resolved once however many calibrations rank it (``make table``
    calibrates some 60 model/GPU/release keys on a handful of candidates; a UserError is not kept)."""
    return resolve(compose_run(recipe, list(overrides)))


def anchor_config(row: PublishedRow) -> tuple[str, tuple[str, ...], ResolvedRun] | None:
    """(recipe, overrides, resolved run) that reproduces an AdamW row, or None."""
    recipe = f"{row.model}_adamw"
    if recipe not in list_recipes():
        return None
    presets: list[str] = []
    cluster = cluster_for_gpu(row.gpu)
    if cluster:
        presets.append(f"cluster={cluster}")
    for group, option in (
        ("parallel", f"{row.model}_{row.gpu}_{row.num_gpus}"),
        ("train", f"{row.model}_{row.gpu}"),
        ("precision", PRECISION_ALIASES.get(row.precision, row.precision)),
    ):
        if option in list_group_options(group):
            presets.append(f"{group}={option}")
    for overrides in ((), tuple(presets)):
        try:
            anchor = _candidate(recipe, overrides)
        except UserError:
            continue
        if _matches(anchor, row):
            return recipe, overrides, anchor
    return None


def _paired(row: PublishedRow, rows: list[PublishedRow]) -> bool:
    return any(
        other.optimizer == "muon"
        and (other.source, other.release, other.model, other.gpu, other.num_gpus)
        == (row.source, row.release, row.model, row.gpu, row.num_gpus)
        for other in rows
    )


def ranked_anchors(model: str, gpu: str, release: str | None, rows: list[PublishedRow]) -> list[PublishedRow]:
    """The model's AdamW rows, best anchor first (see the module docstring)."""
    adamw = [(i, row) for i, row in enumerate(rows) if row.model == model and row.optimizer == "adamw"]
    adamw.sort(key=lambda pair: (pair[1].gpu != gpu, not _paired(pair[1], rows), pair[1].release != release, pair[0]))
    return [row for _, row in adamw]


def _step_time(run: RunConfig, row: PublishedRow) -> float | None:
    if row.tokens_per_s_per_gpu:
        return step_time_for_tokens(run, row.tokens_per_s_per_gpu)
    if row.model_tflops_per_gpu:
        return step_time_for_tflops(run, row.model_tflops_per_gpu)
    return None


def _label(row: PublishedRow) -> str:
    figure = f"{row.tokens_per_s_per_gpu:g} tokens/s/GPU" if row.tokens_per_s_per_gpu else f"{row.model_tflops_per_gpu:g} TFLOP/s/GPU"
    return f"{row.label} {row.model} {row.gpu} x{row.num_gpus} adamw {figure}"


@lru_cache(maxsize=32)
def _calibrate(model: str, gpu: str, release: str | None, published: str, assumptions: Assumptions) -> Calibration | None:
    rows = load_published(published)
    for row in ranked_anchors(model, gpu, release, rows):
        found = anchor_config(row)
        if found is None:
            continue
        recipe, overrides, anchor_run = found
        run = anchor_run.run
        step = _step_time(run, row)
        net = interconnect_for(run.cluster.gpu, run.cluster.nvlink_domain_size)
        if step is None or net is None:
            continue
        inputs = build_inputs(anchor_run, net, assumptions)
        try:
            efficiency = solve_efficiency(inputs, step, assumptions.backward_share)
        except ValueError:
            continue
        return Calibration(
            efficiency=efficiency,
            peak_key=gemm_peak(run)[1],
            anchor=_label(row),
            anchor_step_time_s=step,
            anchor_recipe=recipe,
            anchor_overrides=overrides,
            anchor_gpu=row.gpu,
            anchor_run=anchor_run,
        )
    return None


def calibrate(run: RunConfig, assumptions: Assumptions, published_dir: str | Path | None = None) -> Calibration | None:
    """The calibrated GEMM efficiency for ``run``'s model (cached), or None when no AdamW anchor fits."""
    directory = Path(published_dir) if published_dir else default_published_dir(repo_root() / "results")
    try:
        return _calibrate(run.model.name, run.cluster.gpu, _release_of(run), str(directory), assumptions)
    except UserError:
        return None
