"""The BF16-to-FP8 (and FP8-to-FP4) GEMM rate ratio, for a run whose GEMM precision no anchor of its model shares.

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

NVFP4 is one rung further: FP8/FP4 pairs (an FP8 and an NVFP4 row of one setup: NVIDIA's Llama 3 70B and 3.1
405B on GB200 and GB300) give a second ratio, ``rate_fp8 / rate_fp4``, and a BF16 anchor reaches an NVFP4 run
through both (their product). One more fitted parameter; GB300's FP4 peak is three times its FP8 one and GB200's
twice, yet NVIDIA's NVFP4 rows gain about the same over FP8 on both, so the ratio of rates, not of fractions of
peak, is what carries.
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


RUNGS = ("bf16", "fp8", "fp4")
"""The GEMM precisions in rate order; a ratio is measured between neighbours and chained across two steps."""


def gemm_precision(peak_key: str) -> str:
    """'bf16', 'fp8' or 'fp4' of a peak key such as gb300_fp8."""
    return peak_key.rsplit("_", 1)[-1]


def row_rung(row: PublishedRow) -> str:
    """The GEMM precision a published row's precision runs at (nvfp4: fp4; fp8, fp8_cs, mxfp8: fp8)."""
    if "fp4" in row.precision:
        return "fp4"
    return "fp8" if "fp8" in row.precision else "bf16"


@dataclass(frozen=True)
class PrecisionRatio:
    """The lower precision's effective GEMM rate over the higher one's, from published pairs."""

    value: float
    """Geometric mean of the pairs' ratios (a product of two such means across two rungs)."""
    pairs: tuple[tuple[str, str, float], ...]
    """(lower row, higher row, that pair's ratio) of every pair used."""
    lower: str = "bf16"
    higher: str = "fp8"

    @property
    def label(self) -> str:
        """e.g. 'BF16/FP8'."""
        return f"{self.lower.upper()}/{self.higher.upper()}"

    def as_record(self) -> RateRatio:
        """plan.json's ``efficiency.precision_ratio``."""
        return RateRatio(
            round(self.value, 4),
            tuple(RatePair(lower, higher, round(ratio, 4)) for lower, higher, ratio in self.pairs),
            self.label,
        )

    def efficiency_at(self, efficiency: float, run_peak_key: str) -> float:
        """An anchor's efficiency (fraction of the other precision's peak) as a fraction of ``run_peak_key``."""
        spec = gpu_catalog()[run_peak_key.rsplit("_", 1)[0]]
        run = gemm_precision(run_peak_key)
        anchor = self.higher if run == self.lower else self.lower
        rate_factor = self.value if run == self.lower else 1 / self.value
        return efficiency * spec.peak(anchor) / spec.peak(run) * rate_factor


def chained(first: PrecisionRatio, second: PrecisionRatio) -> PrecisionRatio:
    """BF16/FP4 from BF16/FP8 and FP8/FP4 (neighbouring ratios, ``first`` the lower)."""
    return PrecisionRatio(first.value * second.value, first.pairs + second.pairs, first.lower, second.higher)


def pairs(
    rows: list[PublishedRow], lower: str = "bf16", higher: str = "fp8"
) -> list[tuple[PublishedRow, PublishedRow]]:
    """(lower row, higher row) of every setup NVIDIA published at both GEMM precisions (AdamW, same source and
    release)."""

    def setup(row: PublishedRow) -> tuple:
        return (row.source, row.release, row.model, row.gpu, row.num_gpus)

    adamw = [row for row in rows if row.optimizer == "adamw"]
    return [
        (low, high)
        for low in adamw
        if row_rung(low) == lower
        for high in adamw
        if row_rung(high) == higher and setup(high) == setup(low)
    ]


def pair_rows(rows: list[PublishedRow]) -> list[PublishedRow]:
    """Every row of a pair, once each, in the published order: the rows whose rates ``make projection`` commits."""
    paired = {id(row) for lower, higher in zip(RUNGS, RUNGS[1:]) for pair in pairs(rows, lower, higher) for row in pair}
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
    lower: str = "bf16",
    higher: str = "fp8",
) -> PrecisionRatio | None:
    """The ``lower``/``higher`` ratio over the pairs whose two rows ``keeps`` keeps (``row_name``: a row's name;
    ``rate``: a row's effective GEMM rate, :func:`live_rate` or the one ``make projection`` committed), None without
    one."""
    found = []
    for low, high in pairs(rows, lower, higher):
        if keeps(low) and keeps(high):
            rate_low, rate_high = rate(low), rate(high)
            if rate_low and rate_high:
                found.append((row_name(low), row_name(high), rate_low / rate_high))
    if not found:
        return None
    return PrecisionRatio(math.exp(sum(math.log(r) for _, _, r in found) / len(found)), tuple(found), lower, higher)
