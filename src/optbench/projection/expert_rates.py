"""What a model's routed-expert GEMMs reach of the peak, as measured: how a model with no published row, and no fitted
model of its GEMM shapes, gets its term of the carried table (:mod:`optbench.projection.carried`).

``make bench-gpu`` times every recipe model's grouped expert GEMMs (gated fc1 and fc2; forward, data and weight
gradient) at its own shapes, in BF16 and FP8, at several routed-token counts and EP sizes
(``results/bench/grouped_gemm.json``, one H200). Where a GEMM holds at least :data:`MIN_ROWS_PER_EXPERT` rows per
expert the step model's small-expert slowdown is spent, so what is left tells the shapes apart: Qwen3 30B-A3B's
2048 x 768 experts reach 41 % of the FP8 peak where DeepSeek-V3's and Kimi K2's 7168 x 2048 ones reach 49 and 47 %
(in BF16 all three reach 65-66 %).

A model without rows takes each fitted model's term moved by its measured rate on the share of its model FLOPs
its routed experts hold (:func:`routed_share`); the rest of its GEMMs are taken to run as the fitted model's.
No published row enters: the rates are a kernel benchmark, and the share is Bridge's FLOPs rule.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from optbench.accounting.flops import flop_terms, routed_expert_flops
from optbench.common.checkout import repo_root
from optbench.config.schema import ModelConfig

BENCH = Path("results") / "bench" / "grouped_gemm.json"
"""The grouped-GEMM benchmark's committed output (``make bench-gpu``)."""
MIN_ROWS_PER_EXPERT = 2048
"""Rows per expert from which the bench's own fit counts a GEMM as past the small-expert slowdown."""


@lru_cache(maxsize=4)
def measured_rates(path: str | None = None) -> tuple[str, dict[tuple[str, str], float]]:
    """(the GPU measured on, {(model, 'bf16' or 'fp8'): fraction of that GPU's dense peak}) from the bench: per model
    and precision, the median over its (routed tokens, EP) cases of both expert GEMMs' FLOPs over their time, all
    three passes, at :data:`MIN_ROWS_PER_EXPERT` rows per expert or more. Empty without the file."""
    try:
        bench = json.loads(Path(path or repo_root() / BENCH).read_text(encoding="utf-8"))
        peaks, cases = bench["peak_tflops"], bench["cases"]
    except (OSError, ValueError, KeyError, TypeError):
        return "", {}
    totals: dict[tuple[str, str, int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for case in cases:
        if case["rows"] >= MIN_ROWS_PER_EXPERT:
            total = totals[case["model"], case["precision"], case["routed_tokens"], case["ep"]]
            total[0] += 3 * case["flops_per_pass"]
            total[1] += sum(case["seconds"].values())
    shares: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (model, precision, _, _), (flops, seconds) in totals.items():
        shares[model, precision].append(flops / seconds / 1e12 / peaks[precision])
    return str(bench.get("gpu", "")), {key: statistics.median(values) for key, values in shares.items()}


def routed_share(model: ModelConfig, seq_length: int) -> float:
    """The share of the model's FLOPs (Bridge's rule) in its routed experts' GEMMs (0 for a dense model)."""
    return routed_expert_flops(model, seq_length) / flop_terms(model, seq_length).total


@dataclass(frozen=True)
class ExpertRates:
    """A run's model as the bench saw it: its routed share and every measured model's rate in the run's precision."""

    model: str
    share: float
    """:func:`routed_share` of the run's model."""
    precision: str
    """'bf16' or 'fp8': the run's GEMM precision."""
    rates: tuple[tuple[str, float], ...]
    """(model, fraction of the bench GPU's peak) of every model the bench measured in ``precision``."""
    measured_on: str
    """The bench's GPU."""

    def moved_term(self, fitted: dict[str, float]) -> tuple[float, list[str]] | None:
        """The run's model's log term from the fitted models the bench also measured: each one's term moved by the
        ratio of the two models' time per FLOP, their routed share at the measured rates and the rest at the fitted
        model's; the mean over them, and their names. None when the bench measured not the run's model or none of
        them."""
        rates = dict(self.rates)
        own = rates.get(self.model)
        alike = sorted(m for m in fitted if m in rates)
        if own is None or not alike:
            return None
        moved = [fitted[m] - math.log(self.share * rates[m] / own + 1 - self.share) for m in alike]
        return statistics.fmean(moved), alike

    @property
    def source(self) -> str:
        return f"{self.precision} expert GEMMs measured on an {self.measured_on.upper()} ({BENCH})"


def expert_rates(model: ModelConfig, seq_length: int, precision: str) -> ExpertRates:
    """:class:`ExpertRates` of ``model`` at ``seq_length`` in GEMM precision ``precision`` ('bf16' or 'fp8')."""
    gpu, rates = measured_rates()
    return ExpertRates(
        model.name,
        round(routed_share(model, seq_length), 6),
        precision,
        tuple(sorted((m, r) for (m, p), r in rates.items() if p == precision)),
        gpu,
    )
