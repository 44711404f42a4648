"""What the blog's "upcoming" Muon techniques would each win, by the model, at the same efficiency.

Each scenario changes one input of the model and re-projects the Muon step with the calibrated
efficiency unchanged:

* ``param_gather_overlap``: the layer-wise all-gather of updated parameters is hidden behind the
  next forward, as AdamW's ``overlap_param_gather`` is (only its first bucket stays exposed);
* ``syrk``: X X^T and A A computed as one triangle (``ns_flops(..., syrk=True)``: 3 s^2 l + s^3
  per iteration instead of 4 s^2 l + 2 s^3) with one eager op fewer per iteration;
* ``cost_balanced``: parameters dealt to data-parallel ranks by modelled cost
  (:func:`optbench.accounting.assignment.cost_aware_owners`) instead of Megatron's size ping-pong;
* ``all_three``: the three together;
* ``no_launch_overhead`` (ours, not in the blog's list): Newton-Schulz batched over same-shape
  parameters or captured in a CUDA graph, so no parameter is launch-bound.
"""

from __future__ import annotations

from dataclasses import replace

from optbench.accounting.ns_flops import pingpong_by_numel
from optbench.accounting.throughput import step_throughput
from optbench.accounting.assignment import cost_aware_owners
from optbench.projection.assumptions import Assumptions
from optbench.projection.interconnect import Interconnect
from optbench.projection.section import WhatIf
from optbench.projection.step_model import evaluate
from optbench.projection.work import StepInputs, build_inputs
from optbench.resolve import ResolvedRun

SCENARIOS = {
    "param_gather_overlap": "parameter all-gather overlapped with the next forward",
    "syrk": "SYRK kernels for the symmetric products",
    "cost_balanced": "cost-based balancing of parameters over ranks",
    "all_three": "all three together",
    "no_launch_overhead": "no eager launch overhead (batched / graph-captured NS; ours)",
}
"""Scenario name -> what it changes."""


def scenario_inputs(
    resolved: ResolvedRun, net: Interconnect, a: Assumptions, name: str, baseline: StepInputs
) -> StepInputs:
    """The model inputs of one scenario (``baseline``: the run's own inputs, which some scenarios only edit)."""
    if name in ("syrk", "all_three"):
        owners = cost_aware_owners if name == "all_three" else pingpong_by_numel
        inputs = build_inputs(resolved, net, a, syrk=True, owners_fn=owners)
    elif name == "cost_balanced":
        inputs = build_inputs(resolved, net, a, owners_fn=cost_aware_owners)
    else:
        inputs = baseline
    if name in ("param_gather_overlap", "all_three"):
        inputs = replace(inputs, gather_overlapped=True)
    if name == "no_launch_overhead":
        inputs = replace(inputs, optimizer=tuple(replace(r, launch_s=0.0) for r in inputs.optimizer))
    return inputs


def what_ifs(
    resolved: ResolvedRun, net: Interconnect, a: Assumptions, efficiency: float, baseline: StepInputs, baseline_s: float
) -> dict[str, WhatIf]:
    """Projected step and model TFLOP/s per GPU of every scenario, with its win over the baseline."""
    run, ns_total = resolved.run, resolved.ns_flops_total
    out = {}
    base_tflops = step_throughput(run, baseline_s, ns_flops_total=ns_total).tflops_per_gpu
    for name, text in SCENARIOS.items():
        step = evaluate(scenario_inputs(resolved, net, a, name, baseline), efficiency, a.backward_share).total_s
        tflops = step_throughput(run, step, ns_flops_total=ns_total).tflops_per_gpu
        out[name] = WhatIf(
            text,
            round(step, 4),
            round(tflops, 1),
            round(baseline_s - step, 4),
            round(100 * (tflops / base_tflops - 1), 2),
        )
    return out
