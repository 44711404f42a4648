"""The GEMM efficiency that reproduces a published row's figure at a resolved configuration.

Shared by the calibration (an anchor row at its executed configuration) and the BF16/FP8 rate ratio (both rows
of a published pair, :mod:`optbench.projection.precision_ratio`).
"""

from __future__ import annotations

from optbench.accounting.throughput import step_throughput, step_time_for_tflops, step_time_for_tokens
from optbench.config.schema import RunConfig
from optbench.projection.assumptions import Assumptions
from optbench.projection.interconnect import interconnect_for
from optbench.projection.step_model import solve_efficiency
from optbench.projection.work import build_inputs
from optbench.catalog.published import PublishedRow
from optbench.resolve import ResolvedRun


def step_time(run: RunConfig, row: PublishedRow) -> float | None:
    """The step time a row's published figure implies at ``run``'s configuration (None without a figure)."""
    if row.tokens_per_s_per_gpu:
        return step_time_for_tokens(run, row.tokens_per_s_per_gpu)
    if row.model_tflops_per_gpu:
        return step_time_for_tflops(run, row.model_tflops_per_gpu)
    return None


def published_tflops_at(run: RunConfig, row: PublishedRow) -> float | None:
    """``row``'s published speed as model TFLOP/s/GPU counted by our FLOPs rule at ``run`` (its own configuration),
    None without a figure. Compared by speed, not by NVIDIA's count: NVIDIA's FLOPs rule for a model can change
    between releases (GPT-OSS 120B: 27.2 GFLOP/token up to 26.04.01, 32.6 from 26.06; docs/projection.md), our
    projection's does not. Where the row publishes tokens/s this is that speed in our count (the projected and the
    published figure then differ exactly as their tokens/s do); else the published model-only TFLOP/s."""
    step = step_time(run, row)
    return None if step is None else step_throughput(run, step).tflops_per_gpu


def solve_at(resolved: ResolvedRun, row: PublishedRow, assumptions: Assumptions) -> tuple[float, float] | str:
    """(efficiency, step time) at which ``resolved`` projects ``row``'s figure, or why there is none: no figure,
    no interconnect figures for its GPU, or a figure the model cannot reach at that configuration."""
    run = resolved.run
    step = step_time(run, row)
    net = interconnect_for(run.cluster.gpu, run.cluster.nvlink_domain_size)
    if step is None or net is None:
        return "no figure" if step is None else f"no interconnect figures for gpu {run.cluster.gpu}"
    try:
        return solve_efficiency(build_inputs(resolved, net, assumptions), step, assumptions.backward_share), step
    except ValueError as err:
        return f"the model cannot reach this figure at this configuration: {err}"
