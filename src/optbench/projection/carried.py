"""The calibration carried across setups: one efficiency table fitted on every published AdamW row.

A **setup** is one model x GPU x GPU count x precision. Where the run's model has a published AdamW row on its
GPU, the calibration solves the efficiency on that row (:mod:`optbench.projection.calibration`). Elsewhere (another
GPU, a model without rows) the efficiency comes from this table, fitted once by ``make projection``:

    log eff(row) = arch[arch of row.gpu] + model[row.model] + release[row.release] + residual

over the per-row efficiencies each AdamW row of the validated domain solves to (the step model at the row's
executed configuration reproduces the row's figure), by least squares. The architecture term (data/gpus.csv
``arch``: hopper, blackwell, blackwell_ultra) carries what a chip's kernels reach of its own peak: a GB300 and a
B300 are one Blackwell Ultra die, their kernels the same, and what tells their systems apart (the NVLink domain,
the fabric beyond it, the peak at their power) is priced by the step model, not fitted. One term per GPU instead
let each system absorb its own communication error, and a setup held out took it from the other models' rows on
that system alone (leave one setup out 7.8 % median against 6.1 %: docs/projection.md section 2). The
model term what a model's shapes reach (deepseek_v3's is 0: the baseline), the release
term what a container's software adds whatever the model and GPU (25.11-26.08). One more parameter is fitted with
them: ``M0`` of the MXFP8 small-expert-GEMM slowdown (``Assumptions.small_expert_gemm_rows_mxfp8``), chosen on a
grid as the value whose table leaves the smallest squared residual. The slowdown is the one term of the step model
that tells a layout with few rows per expert (DeepSeek-V3 at EP8 on 8-GPU nodes: 1,024 rows) from one with many
(EP32-64 on NVL72: 4,096-8,192); without it the GPU and model terms cannot agree across setups.

A GPU of an architecture without rows takes the mean of the known architectures. A model without rows takes the
term of the fitted models whose GEMMs have its shapes (:func:`gemm_shape`: Kimi K2 is DeepSeek-V3's hidden size,
expert width, top-k, shared expert and MLA), else the fitted models' terms moved by its routed experts' measured
GEMM rate (:mod:`optbench.projection.expert_rates`: Qwen3 30B-A3B's small experts against DeepSeek-V3's), else the
mean of the model terms (the baseline's 0 included). A
release outside the table takes the nearest earlier one (else the earliest). ``make projection`` writes the table
to ``results/projection/calibration.json``; plans read it and compose nothing to calibrate. The validation refits
it without the rows each scheme holds out.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from optbench.accounting.plan_fields import PRECISION_ALIASES
from optbench.common.checkout import repo_root
from optbench.catalog.hardware import gpu_catalog
from optbench.config.schema import ModelConfig
from optbench.projection.assumptions import DEFAULT_ASSUMPTIONS, Assumptions
from optbench.projection.expert_rates import ExpertRates
from optbench.projection.precision_ratio import row_rung
from optbench.projection.row_config import RowRuns
from optbench.projection.row_solve import solve_at
from optbench.catalog.published import (
    PublishedRow,
    default_published_dir,
    load_inconsistent,
    load_published,
    release_order,
    row_id,
)

CALIBRATION = Path("projection") / "calibration.json"
"""Where ``make projection`` writes the table, under a results folder."""
MXFP8_EXPERT_ROWS_GRID = tuple(round(120.0 * (4000.0 / 120.0) ** (i / 24), 1) for i in range(25))
"""The values of ``M0`` (MXFP8 grouped GEMMs) the fit tries: 25 steps of 15 % from the H200's BF16 120 to 4,000 rows."""


def gpu_arch(gpu: str) -> str:
    """The architecture ``gpu`` is built on (data/gpus.csv; a GPU outside the catalog is its own)."""
    catalog = gpu_catalog()
    return catalog[gpu].arch if gpu in catalog else gpu


def precision_class(row: PublishedRow) -> str:
    """A row's precision as the run's option names it (``fp8`` and ``fp8_cs`` are one recipe)."""
    return PRECISION_ALIASES.get(row.precision, row.precision)


GemmShape = tuple[int, int, int, int, bool]
"""What :func:`gemm_shape` compares."""
SHAPE_FIELDS = ("hidden_size", "ffn_width", "experts_per_token", "shared_expert_width", "multi_latent_attention")
"""calibration.json's names for a :data:`GemmShape`'s members."""


def gemm_shape(model: ModelConfig) -> GemmShape:
    """The shapes of a model's bulk GEMMs: hidden size, (expert) FFN width, the experts a token visits, the shared
    expert's width and whether attention is MLA. The model term is what a model's shapes reach of the peak, so a
    model without rows of the same shapes as a fitted one takes that one's term. Not in it: the head count (Kimi K2
    64, DeepSeek-V3 128: the attention's core and output projection differ), the expert count (the rows per expert
    are priced by the step model's small-expert term) and the layer count (a step is a sum over layers)."""
    moe = bool(model.num_moe_experts)
    return (
        model.hidden_size,
        (model.moe_ffn_hidden_size or model.ffn_hidden_size) if moe else model.ffn_hidden_size,
        model.moe_router_topk if moe else 0,
        model.moe_shared_expert_intermediate_size if moe else 0,
        model.multi_latent_attention,
    )


def setup_of(row: PublishedRow) -> tuple[str, str, int, str]:
    """A row's setup: model, GPU, GPU count, precision (the sources of one setup are one setup)."""
    return row.model, row.gpu, row.num_gpus, precision_class(row)


@dataclass(frozen=True)
class CarriedTable:
    """Fitted log-efficiency terms (natural log of the fraction of the GPU's GEMM peak)."""

    arch: tuple[tuple[str, float], ...]
    model: tuple[tuple[str, float], ...]
    release: tuple[tuple[str, float], ...]
    mxfp8_expert_rows: float
    """``M0`` of the MXFP8 small-expert-GEMM slowdown the efficiencies were solved at."""
    rows: tuple[str, ...]
    """The rows fitted on (:func:`optbench.projection.calibration.row_id`)."""
    rms_residual: float
    """Root mean square of the fit's log residual."""
    model_shapes: tuple[tuple[str, GemmShape], ...] = ()
    """Each fitted model's :func:`gemm_shape` (how a model without rows finds a term; empty: the mean)."""

    @property
    def parameter_count(self) -> int:
        """Architecture, model (the baseline's is fixed at 0), release (likewise) terms and M0."""
        return len(self.arch) + max(0, len(self.model) - 1) + max(0, len(self.release) - 1) + 1

    def term(
        self, kind: str, key: str, shape: GemmShape | None = None, expert: ExpertRates | None = None
    ) -> tuple[float, str]:
        """(log term, how it was found) for ``key`` of ``kind`` (gpu, model, release); ``shape``: a model's
        :func:`gemm_shape`, ``expert``: its measured expert GEMM rates, read in that order when the model has no
        term."""
        if kind == "gpu":
            arch = gpu_arch(key)
            table = dict(self.arch)
            if arch in table:
                return table[arch], f"as {arch}"
            return statistics.fmean(table.values()), "mean of every architecture"
        table = dict(getattr(self, kind))
        if key in table:
            return table[key], "fitted"
        if kind == "model":
            alike = [model for model, its in self.model_shapes if its == shape and model in table]
            if alike:
                return statistics.fmean(table[m] for m in alike), f"as {' and '.join(alike)} (same GEMM shapes)"
            moved = expert.moved_term(table) if expert is not None else None
            if moved is not None:
                return moved[0], f"as {' and '.join(moved[1])} at its {expert.source}"
            return statistics.fmean(table.values()), "mean of every model"
        known = sorted(table, key=release_order)
        earlier = [r for r in known if release_order(r) <= release_order(key)]
        nearest = earlier[-1] if earlier else known[0]
        return table[nearest], f"as release {nearest}"

    def efficiency(
        self, model: str, gpu: str, release: str, shape: GemmShape | None = None, expert: ExpertRates | None = None
    ) -> tuple[float, dict[str, str]]:
        """The efficiency of ``model`` (of :func:`gemm_shape` ``shape``, measured expert GEMM rates ``expert``) on
        ``gpu`` at ``release``, and how each term was found."""
        found = {
            kind: self.term(kind, key, shape, expert)
            for kind, key in (("gpu", gpu), ("model", model), ("release", release))
        }
        return math.exp(sum(value for value, _ in found.values())), {kind: how for kind, (_, how) in found.items()}

    def as_dict(self) -> dict[str, Any]:
        return {
            "form": "log eff = arch + model + release (deepseek_v3 and the earliest release are 0)",
            "arch": {k: round(math.exp(v), 5) for k, v in self.arch},
            "model": {k: round(math.exp(v), 5) for k, v in self.model},
            "release": {k: round(math.exp(v), 5) for k, v in self.release},
            "small_expert_gemm_rows_mxfp8": self.mxfp8_expert_rows,
            "parameter_count": self.parameter_count,
            "rms_log_residual": round(self.rms_residual, 5),
            "model_shapes": {m: dict(zip(SHAPE_FIELDS, shape)) for m, shape in self.model_shapes},
            "rows": list(self.rows),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CarriedTable":
        def logs(name: str) -> tuple[tuple[str, float], ...]:
            return tuple((k, math.log(float(v))) for k, v in data[name].items())

        shapes = tuple(
            (m, tuple(fields[f] for f in SHAPE_FIELDS)) for m, fields in data.get("model_shapes", {}).items()
        )
        return cls(
            logs("arch"),
            logs("model"),
            logs("release"),
            float(data["small_expert_gemm_rows_mxfp8"]),
            tuple(data["rows"]),
            float(data["rms_log_residual"]),
            shapes,
        )


def fit_rows(rows: Sequence[PublishedRow], row_runs: RowRuns, inconsistent: Sequence[str] = ()) -> list[PublishedRow]:
    """The rows a table may be fitted on: AdamW, a model-only figure, a release whose preset we executed, not
    contradicted by its own setup, GEMMs in BF16 or FP8. NVFP4 rows stay out: the table is read as a fraction of the
    FP8 peak, and a run in NVFP4 reaches it through the FP8/FP4 rate ratio of the published pairs
    (:mod:`optbench.projection.precision_ratio`), as a BF16 run does through BF16/FP8. Fitted in, their fraction of a
    peak three times FP8's would move the GPU and model terms of every other row."""
    kept = []
    for row in rows:
        if row.optimizer != "adamw" or not row.model_tflops_per_gpu or row_id(row) in inconsistent:
            continue
        if row_rung(row) == "fp4":
            continue
        config = row_runs.config(row)
        if not isinstance(config, str) and config.in_domain and not isinstance(row_runs.run(row), str):
            kept.append(row)
    return kept


@lru_cache(maxsize=16384)
def solved_efficiency(
    row: PublishedRow, mxfp8_expert_rows: float, row_runs: RowRuns, base: Assumptions = DEFAULT_ASSUMPTIONS
) -> float | None:
    """The efficiency ``row`` solves to at its executed configuration with MXFP8 ``M0`` = ``mxfp8_expert_rows`` (the
    step model's other constants and switches: ``base``'s)."""
    assumptions = replace(base, small_expert_gemm_rows_mxfp8=mxfp8_expert_rows)
    solved = solve_at(row_runs.run(row), row, assumptions)
    return None if isinstance(solved, str) else solved[0]


def _least_squares(rows: Sequence[PublishedRow], effs: Sequence[float]) -> tuple[dict[tuple[str, str], float], float]:
    import numpy as np

    columns = [("arch", a) for a in sorted({gpu_arch(r.gpu) for r in rows})]
    columns += [("model", m) for m in sorted({r.model for r in rows})[1:]]
    columns += [("release", x) for x in sorted({r.release for r in rows}, key=release_order)[1:]]
    index = {c: i for i, c in enumerate(columns)}
    design = np.zeros((len(rows), len(columns)))
    for i, row in enumerate(rows):
        for column in (("arch", gpu_arch(row.gpu)), ("model", row.model), ("release", row.release)):
            if column in index:
                design[i, index[column]] = 1.0
    target = np.log(np.array(effs))
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    residual = target - design @ coef
    return dict(zip(columns, (float(c) for c in coef))), float(np.sqrt(np.mean(residual**2)))


def fit_table(
    rows: Sequence[PublishedRow],
    row_runs: RowRuns,
    grid: Sequence[float] = MXFP8_EXPERT_ROWS_GRID,
    base: Assumptions = DEFAULT_ASSUMPTIONS,
) -> CarriedTable | None:
    """The table fitted on ``rows`` (see :func:`fit_rows`), ``M0`` chosen on ``grid``; None without rows.

    An ``M0`` at which some row solves to no efficiency (its small-expert penalty alone exceeds the row's step) is no
    candidate: it cannot be the constant of the GPUs that ran that row, and a residual over fewer rows is not
    comparable with one over all of them (on the 76 rows with Qwen3 235B-A22B's, 4000 scored 0.141 over the 70 it
    could solve, against 0.155 at 1438 over all 76)."""
    best: CarriedTable | None = None
    for m0 in grid:
        solved = [(row, solved_efficiency(row, m0, row_runs, base)) for row in rows]
        if not solved or not all(e for _, e in solved):
            continue
        terms, rms = _least_squares([r for r, _ in solved], [e for _, e in solved])
        table = CarriedTable(
            arch=tuple((k, v) for (kind, k), v in terms.items() if kind == "arch"),
            model=((min(r.model for r, _ in solved), 0.0),)
            + tuple((k, v) for (kind, k), v in terms.items() if kind == "model"),
            release=((min((r.release for r, _ in solved), key=release_order), 0.0),)
            + tuple((k, v) for (kind, k), v in terms.items() if kind == "release"),
            mxfp8_expert_rows=m0,
            rows=tuple(row_id(r) for r, _ in solved),
            rms_residual=rms,
            model_shapes=tuple(sorted({(r.model, gemm_shape(row_runs.run(r).run.model)) for r, _ in solved})),
        )
        if best is None or table.rms_residual < best.rms_residual - 1e-12:
            best = table
    return best


def fitted_without(
    published: str, holdout: Any, row_runs: RowRuns, base: Assumptions = DEFAULT_ASSUMPTIONS
) -> CarriedTable | None:
    """The table refitted on the rows ``holdout`` (a :class:`~optbench.projection.calibration.Holdout`) keeps: a
    validation scheme's training rows; the step model's switches and constants are ``base``'s (its ``M0`` is what the
    fit chooses)."""
    return _fitted_without(published, holdout, row_runs, base.switches())


@lru_cache(maxsize=512)
def _fitted_without(published: str, holdout: Any, row_runs: RowRuns, base: Assumptions) -> CarriedTable | None:
    rows = load_published(published)
    fit_on = [r for r in fit_rows(rows, row_runs, tuple(load_inconsistent(published))) if holdout.keeps(r)]
    return fit_table(fit_on, row_runs, base=base)


def refitted(
    published: str, holdout: Any, row_runs: RowRuns, base: Assumptions = DEFAULT_ASSUMPTIONS
) -> tuple[CarriedTable | None, Assumptions]:
    """:func:`fitted_without`, and ``base`` with the ``M0`` that fit chose: what a validation fold projects with."""
    table = fitted_without(published, holdout, row_runs, base)
    return table, base if table is None else replace(base, small_expert_gemm_rows_mxfp8=table.mxfp8_expert_rows)


def committed_table(results_dir: str | Path | None = None) -> CarriedTable | None:
    """The table ``make projection`` wrote (None before the first one, or one this version cannot read)."""
    path = Path(results_dir or repo_root() / "results") / CALIBRATION
    try:
        return CarriedTable.from_dict(json.loads(path.read_text(encoding="utf-8"))["table"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def table_document(table: CarriedTable) -> dict[str, Any]:
    """What ``make projection`` writes to results/projection/calibration.json."""
    return {
        "about": "the calibration carried across setups (optbench.projection.carried; docs/projection.md section 7): "
        "what make plan uses for a GPU its model has no published AdamW row on, or a model without rows",
        "command": "make projection",
        "table": table.as_dict(),
        "published": str(default_published_dir("results") / "published.csv"),
    }
