"""Memoised :func:`optbench.projection.work.build_inputs` (a plan, its twin and its what-ifs share work)."""

from __future__ import annotations

from optbench.accounting.ns_flops import OwnersFn, pingpong_by_numel
from optbench.config.schema import RunConfig
from optbench.projection.assumptions import Assumptions
from optbench.projection.interconnect import Interconnect
from optbench.projection.work import StepInputs, build_inputs

_CACHE: dict[tuple, StepInputs] = {}


def run_key(run: RunConfig) -> tuple:
    """Everything of a run the step-time model reads (RunConfig itself is mutable, so unhashable)."""
    c = run.cluster
    return (
        repr(run.model),
        repr(run.parallel),
        repr(run.optimizer),
        repr(run.precision),
        repr(run.train),
        c.gpu,
        c.gpus_per_node,
        c.nvlink_domain_size,
    )


def inputs_for(
    run: RunConfig,
    net: Interconnect,
    a: Assumptions,
    syrk: bool = False,
    owners_fn: OwnersFn = pingpong_by_numel,
) -> StepInputs:
    """build_inputs, cached by run, interconnect, assumptions and what-if options."""
    key = (run_key(run), net, a, syrk, owners_fn)
    if key not in _CACHE:
        if len(_CACHE) >= 64:
            _CACHE.clear()
        _CACHE[key] = build_inputs(run, net, a, syrk, owners_fn)
    return _CACHE[key]
