"""The BF16-to-FP8 GEMM rate ratio, for a run whose GEMM precision no anchor of its model shares.

The calibrated efficiency is a fraction of the anchor's GEMM peak that also absorbs the time the model does not
price (attention and element-wise kernels, router, quantization). Carried to another precision as the same
fraction of that precision's peak, it would price FP8 GEMMs at twice the BF16 rate, non-GEMM time included;
NVIDIA's own pairs say the gap is far smaller (DeepSeek-V3 on 256 GB300, 25.11, one layout: 1088 TFLOP/s/GPU in
MXFP8, 961 in BF16).

So the transfer goes through a measured ratio instead. A **pair** is two published AdamW rows of one source,
release, model, GPU and GPU count, one in BF16 and one in an FP8 precision. On each row the efficiency is solved
at that row's own configuration (:class:`optbench.projection.row_config.RowRuns`: whatever of its release is
unknown, both rows share it), giving the effective GEMM rate ``eff x peak`` of each precision; the pair's ratio is
``rate_bf16 / rate_fp8``, and the ratio used is the geometric mean over the pairs a :class:`Holdout` keeps (one
fitted parameter, counted by ``make projection``). ``make projection`` commits every pair row's rate beside the
solved anchors (results/projection/anchors.json), so a plan that crosses precision composes no pair. A BF16 run on
an FP8 anchor then runs its GEMMs at ``eff_anchor x peak_fp8 x ratio`` (and an FP8 run on a BF16 anchor at
``eff_anchor x peak_bf16 / ratio``), both peaks of the run's GPU. No pair, no ratio: the fraction of peak carries
over unchanged and the plan says the error of that is not measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from optbench.catalog.hardware import gpu_catalog
from optbench.projection.assumptions import Assumptions
from optbench.projection.row_config import RowRuns
from optbench.projection.row_solve import solve_at
from optbench.projection.section import RatePair, RateRatio
from optbench.projection.work import gemm_peak
from optbench.catalog.published import PublishedRow


def gemm_precision(peak_key: str) -> str:
    """'bf16' or 'fp8' of a peak key such as gb300_fp8."""
    return peak_key.rsplit("_", 1)[-1]


@dataclass(frozen=True)
class PrecisionRatio:
    """BF16's effective GEMM rate over FP8's, from published pairs."""

    value: float
    """Geometric mean of the pairs' ratios."""
    pairs: tuple[tuple[str, str, float], ...]
    """(BF16 row, FP8 row, that pair's ratio) of every pair used."""

    def as_record(self) -> RateRatio:
        """plan.json's ``efficiency.precision_ratio``."""
        return RateRatio(
            round(self.value, 4), tuple(RatePair(bf16, fp8, round(ratio, 4)) for bf16, fp8, ratio in self.pairs)
        )

    def efficiency_at(self, efficiency: float, run_peak_key: str) -> float:
        """An anchor's efficiency (fraction of the other precision's peak) as a fraction of ``run_peak_key``."""
        spec = gpu_catalog()[run_peak_key.rsplit("_", 1)[0]]
        fp8_over_bf16 = spec.peak("fp8") / spec.peak("bf16")
        if gemm_precision(run_peak_key) == "bf16":
            return efficiency * fp8_over_bf16 * self.value
        return efficiency / fp8_over_bf16 / self.value


def pairs(rows: list[PublishedRow]) -> list[tuple[PublishedRow, PublishedRow]]:
    """(BF16 row, FP8 row) of every setup NVIDIA published in both precisions (AdamW, same source and release)."""

    def setup(row: PublishedRow) -> tuple:
        return (row.source, row.release, row.model, row.gpu, row.num_gpus)

    adamw = [row for row in rows if row.optimizer == "adamw"]
    return [
        (bf16, fp8)
        for bf16 in adamw
        if bf16.precision == "bf16"
        for fp8 in adamw
        if "fp8" in fp8.precision and setup(fp8) == setup(bf16)
    ]


def pair_rows(rows: list[PublishedRow]) -> list[PublishedRow]:
    """Every row of a pair, once each, in the published order: the rows whose rates ``make projection`` commits."""
    paired = {id(row) for pair in pairs(rows) for row in pair}
    return [row for row in rows if id(row) in paired]


@lru_cache(maxsize=64)
def live_rate(row: PublishedRow, assumptions: Assumptions, row_runs: RowRuns) -> float | None:
    """The effective GEMM rate (FLOP/s) solved on a row at its own configuration, None when it has none."""
    resolved = row_runs.run(row)
    solved = resolved if isinstance(resolved, str) else solve_at(resolved, row, assumptions)
    return None if isinstance(solved, str) else solved[0] * gemm_peak(resolved.run)[0]


def precision_ratio(
    rows: list[PublishedRow],
    row_name: Callable[[PublishedRow], str],
    keeps: Callable[[PublishedRow], bool],
    rate: Callable[[PublishedRow], float | None],
) -> PrecisionRatio | None:
    """The ratio over the pairs whose two rows ``keeps`` keeps (``row_name``: a row's name; ``rate``: a row's
    effective GEMM rate, :func:`live_rate` or the one ``make projection`` committed), None without one."""
    found = []
    for bf16, fp8 in pairs(rows):
        if keeps(bf16) and keeps(fp8):
            rate_bf16, rate_fp8 = rate(bf16), rate(fp8)
            if rate_bf16 and rate_fp8:
                found.append((row_name(bf16), row_name(fp8), rate_bf16 / rate_fp8))
    if not found:
        return None
    return PrecisionRatio(math.exp(sum(math.log(r) for _, _, r in found) / len(found)), tuple(found))
