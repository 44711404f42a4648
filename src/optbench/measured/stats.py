"""Median and spread: the only statistics the tables print."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    """Median of a sample with its interquartile range and extremes."""

    median: float
    """Middle value."""
    q1: float
    """25th percentile (inclusive method; equals the median for one value)."""
    q3: float
    """75th percentile."""
    low: float
    """Smallest value."""
    high: float
    """Largest value."""
    n: int
    """Number of values."""

    def scaled(self, factor: float) -> Spread:
        """The same sample multiplied by a positive factor (unit changes, ratios to a peak)."""
        return Spread(
            self.median * factor, self.q1 * factor, self.q3 * factor, self.low * factor, self.high * factor, self.n
        )

    def as_dict(self, prefix: str) -> dict[str, float | int]:
        """Flat columns ``<prefix>_median``, ``_q1``, ``_q3``, ``_min``, ``_max``, ``_n`` for CSV and JSON."""
        return {
            f"{prefix}_median": self.median,
            f"{prefix}_q1": self.q1,
            f"{prefix}_q3": self.q3,
            f"{prefix}_min": self.low,
            f"{prefix}_max": self.high,
            f"{prefix}_n": self.n,
        }


def spread(values: Iterable[float | None]) -> Spread | None:
    """Median, quartiles and range of the finite values; None when there are none."""
    sample = sorted(float(v) for v in values if v is not None and math.isfinite(v))
    if not sample:
        return None
    if len(sample) == 1:
        q1 = q3 = sample[0]
    else:
        q1, _, q3 = statistics.quantiles(sample, n=4, method="inclusive")
    return Spread(statistics.median(sample), q1, q3, sample[0], sample[-1], len(sample))


def format_number(value: float, digits: int = 3) -> str:
    """``digits`` significant digits without scientific notation for the magnitudes tables show."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    return f"{value:,.{decimals}f}"


def format_spread(
    s: Spread | None, digits: int = 3, missing: str = "not measured", unit: str = "", extremes: bool = False
) -> str:
    """``median [q1-q3] (n=N)`` (``[min-max]`` with ``extremes``, for a few seeds), or ``missing``."""
    if s is None:
        return missing
    if s.n == 1:
        return f"{format_number(s.median, digits)}{unit} (n=1)"
    low, high = (s.low, s.high) if extremes else (s.q1, s.q3)
    return (
        f"{format_number(s.median, digits)}{unit} "
        f"[{format_number(low, digits)}-{format_number(high, digits)}] (n={s.n})"
    )
