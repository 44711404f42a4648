"""The 80 % band a projection prints, from held-out errors, and how often such bands held on rows never used to make
them; and the bootstrap interval of a scheme's scores over setups (``make projection``).

**The band.** Split conformal prediction with the absolute log error as its score, each held-out *group* counting
once: a scheme's held-out errors ``e = projected / published - 1`` fall in the groups the scheme holds out (setups,
models, GPUs, ...); each of the G groups weighs 1/G, shared by its rows, and ``q`` is the smallest of the scores
``|ln(1 + e)|`` below which lies at least ``min(1, 0.8 (G + 1) / G)`` of the weight. With one row per group this is
the textbook ceil(0.8 (n + 1))-th smallest score; with fewer than 4 groups no quantile over groups reaches 80 %, and
``q`` is the largest score seen. A projection ``P`` gets the band ``[P e^-q, P e^q]`` of the published figure.
Why groups: a plan in the class "another model" meets a new *model*, and the scheme has seen 4, not 82 independent
rows; weighing rows alone let the model with most rows set the band, which held on 74 % of another model's rows and
on 54 % of another GPU architecture's (2026-12-07, measured before this rule was chosen: the choice was made after
seeing those coverages, and docs/projection.md's ledger says so). A band this honest is wide where the groups are few.
(A band from the signed errors' 10th and 90th percentiles was computed too, earlier on 2026-12-07; the absolute log
form held on more held-out groups in six of eight schemes.) **Its coverage** is measured honestly: each row's band is
made from the errors of the rows of *other groups* only, the group being what the scheme holds out (a setup, a model,
a GPU, a GPU architecture, a system family, a release, a layout, a row), and the coverage is the share of rows whose
published figure falls inside their band. The band a plan prints is made from all of the scheme's rows.

**The bootstrap.** Setups (model x GPU x GPU count x precision) are resampled with replacement; the 5th and 95th
percentiles of the resampled median |error| and within-5 % share are the 90 % interval: how much the figures would
move with another draw of published setups of this kind.
"""

from __future__ import annotations

import math
import random
import statistics
from fractions import Fraction
from collections.abc import Callable, Sequence
from typing import Any

BAND = 0.8
"""The band's nominal coverage."""
RESAMPLES = 2000
SEED = 20261207


def error_band(errors: Sequence[float], groups: Sequence[Any] | None = None) -> tuple[float, float] | None:
    """(low, high) signed errors (fractions) of the :data:`BAND` band that ``errors`` give, each of ``groups`` (one
    per error; default: each error its own) weighing the same; None without any."""
    if not errors:
        return None
    groups = list(range(len(errors))) if groups is None else list(groups)
    sizes: dict[Any, int] = {}
    for group in groups:
        sizes[group] = sizes.get(group, 0) + 1
    count = len(sizes)
    level = min(Fraction(1), Fraction(BAND).limit_denominator(100) * (count + 1) / count)
    weight, q = Fraction(0), 0.0
    for score, group in sorted(((abs(math.log1p(e)), g) for e, g in zip(errors, groups)), key=lambda pair: pair[0]):
        weight += Fraction(1, count * sizes[group])
        q = score
        if weight >= level:
            break
    return math.expm1(-q), math.expm1(q)


def band_of(projected: float, band: tuple[float, float]) -> tuple[float, float]:
    """The published figure's range that a projection ``projected`` and an error band imply."""
    low, high = band
    return projected / (1 + high), projected / (1 + low)


def held_out_coverage(errors: Sequence[float], groups: Sequence[Any]) -> dict[str, Any]:
    """Each error's band made from the errors of the other groups; the share inside, and the median half width."""
    inside, widths = [], []
    for index, (error, group) in enumerate(zip(errors, groups)):
        others = [(e, g) for e, g in zip(errors, groups) if g != group]
        band = error_band([e for e, _ in others], [g for _, g in others])
        if band is None:
            continue
        inside.append(band[0] <= error <= band[1])
        low, high = band_of(1.0, band)
        widths.append(100 * (high - low) / 2)
    if not inside:
        return {}
    return {
        "band_80_coverage": round(sum(inside) / len(inside), 3),
        "band_80_median_half_width_percent": round(statistics.median(widths), 2),
        "band_80_rows": len(inside),
    }


def bootstrap(errors: Sequence[float], setups: Sequence[Any], score: Callable[[list[float]], float]) -> list[float]:
    """The 90 % interval of ``score`` (of |errors|) over :data:`RESAMPLES` resamples of whole setups."""
    by_setup: dict[Any, list[float]] = {}
    for error, setup in zip(errors, setups):
        by_setup.setdefault(setup, []).append(abs(error))
    keys = list(by_setup)
    draws = random.Random(SEED)
    scores = []
    for _ in range(RESAMPLES):
        sample = [e for _ in keys for e in by_setup[keys[draws.randrange(len(keys))]]]
        scores.append(score(sample))
    scores.sort()
    return [round(scores[int(0.05 * (RESAMPLES - 1))], 5), round(scores[int(0.95 * (RESAMPLES - 1))], 5)]


def bands_overlap(
    tflops: float, best: float, band: tuple[float, ...] | None, best_band: tuple[float, ...] | None = None
) -> bool:
    """Whether a layout projecting ``tflops`` ties with the best (``best``): the published figures its error band
    ``band`` (low, high signed errors, fractions) allows reach those the best's (``best_band``, else the same band)
    allows, so the model does not resolve their order. With one band (one scheme, one calibrated efficiency) it is
    ``tflops >= best (1 + low) / (1 + high)``. The errors of two layouts at one efficiency are correlated, so this
    names more ties than independent errors would: it errs toward saying the order is not resolved."""
    best_band = best_band or band
    if band is None or len(band) != 2 or best_band is None or len(best_band) != 2:
        return False
    return band_of(tflops, band)[1] >= band_of(best, best_band)[0]


def top_stability(tflops: Sequence[float], band: tuple[float, ...] | None, top: int = 3) -> list[int]:
    """For each of the ``top`` best projections (``tflops`` best first): how many of the others its band overlaps,
    i.e. how many layouts could take its place."""
    return [
        sum(
            1
            for j, other in enumerate(tflops)
            if j != i and (bands_overlap(other, value, band) if other <= value else bands_overlap(value, other, band))
        )
        for i, value in enumerate(tflops[:top])
    ]
