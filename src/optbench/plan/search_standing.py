"""Where one layout stands in a search's result: its rank, its gap to the best, and its rank under a stricter
memory rule or among the layouts that share some of its values (what ``make search`` prints for the recipe's own
layout and ``make search-ranks`` for NVIDIA's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from optbench.plan.search import Point, Ranked


@dataclass(frozen=True)
class Standing:
    """Where one layout stands in a search, in rank and in projected throughput."""

    rank: int
    """1 = best; points the model prices alike share a rank."""
    tflops_per_gpu: float
    """Its projected model TFLOP/s per GPU."""
    best: Point
    """The search's best layout: this one when it shares rank 1, else the first of rank 1."""
    best_tflops_per_gpu: float
    """The best layout's projected model TFLOP/s per GPU."""

    @property
    def gap_to_best_percent(self) -> float:
        """How far below the best the model projects it (0 for the best, negative otherwise)."""
        return round(100 * (self.tflops_per_gpu / self.best_tflops_per_gpu - 1), 2) + 0.0  # + 0.0: no "-0.0"


def ranked_of(result: dict[str, Any], point: Point) -> Ranked | None:
    """``point``'s entry in a search's ranking, None when it was not a valid point."""
    return next((r for r in result["ranked"] if r.point == point), None)


def standing_of(result: dict[str, Any], point: Point) -> Standing | None:
    """``point``'s rank and projected throughput beside the search's best, None when it was not a valid point."""
    found = ranked_of(result, point)
    if found is None:
        return None
    best = found if found.rank == 1 else result["ranked"][0]
    return Standing(found.rank, found.tflops_per_gpu, best.point, best.tflops_per_gpu)


def rank_with_headroom(result: dict[str, Any], point: Point, share: float) -> int | None:
    """``point``'s rank once every other layout whose memory estimate exceeds ``share`` of HBM is dropped (ties
    as in the search), None when it was not a valid point: how much a stricter memory rule would change."""
    found = ranked_of(result, point)
    if found is None:
        return None
    kept = [r for r in result["ranked"] if r.point != point and (r.memory_share is None or r.memory_share <= share)]
    return _rank_among(kept, found.tflops_per_gpu)


class Among(NamedTuple):
    """A layout's place among the layouts of a search that share some of its values."""

    rank: int
    """1 = best among them; ties as in the search."""
    layouts: int
    """How many valid layouts share those values (itself included)."""


def rank_at_fixed(result: dict[str, Any], point: Point, fixed: frozenset[str]) -> Among | None:
    """``point``'s rank among the layouts of a search that share its values of the ``fixed`` dimensions, None when
    it was not a valid point: the rank a search with ``FIX=`` those gives it."""
    found = ranked_of(result, point)
    if found is None:
        return None
    alike = [r for r in result["ranked"] if all(getattr(r.point, name) == getattr(point, name) for name in fixed)]
    return Among(_rank_among(alike, found.tflops_per_gpu), len(alike))


def _rank_among(ranked: list[Ranked], tflops_per_gpu: float) -> int:
    """1 + the layouts strictly better than ``tflops_per_gpu`` (to 0.01 TFLOP/s/GPU, as the search ties them)."""
    return 1 + sum(1 for r in ranked if round(r.tflops_per_gpu, 2) > round(tflops_per_gpu, 2))
