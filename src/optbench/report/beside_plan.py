"""Measured runs beside the projection their own plan made: a section of ``make table``.

A Bridge job's folder holds the plan.json the launcher wrote beside its config (``make gpu-smoke`` writes them
the same way), with ``make plan``'s projection of that exact setup on that GPU. This section sets each such run's
medians beside it: step time, optimizer time and its share of the step, model TFLOP/s per GPU; and, for each
setup measured with both Muon and AdamW, the gap between them, measured and projected. Nothing is recomputed:
the projection is the one printed before the run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from optbench.measured.runs import MeasuredRun, run_throughput
from optbench.common.tables import code, escaped, markdown_table
from optbench.projection.section import ProjectionSection, projection_from_json


@dataclass(frozen=True)
class BesidePlan:
    """One run and its plan's projection."""

    run_id: str
    optimizer: str
    setup: str
    """What the run and its twin share: model, GPU, layout, batch (the gap pairs runs by it)."""
    step_s: Optional[float]
    projected_step_s: float
    optimizer_s: Optional[float]
    projected_optimizer_s: Optional[float]
    tflops: Optional[float]
    projected_tflops: float


def _setup(plan: dict[str, Any]) -> str:
    layout = " ".join(f"{k.upper()}{v}" for k, v in plan["layout"].items() if k in ("tp", "pp", "cp", "ep", "dp"))
    return (
        f"{plan['model']['name']} on {plan['world_size']} x {plan['gpu']} {plan['precision']}, {layout}, "
        f"GBS {plan['gbs']} x {plan['seq_length']}"
    )


def beside_plan(runs: Sequence[MeasuredRun], warmup: int) -> list[BesidePlan]:
    """Every run whose folder holds a plan.json with an available projection."""
    rows = []
    for run in runs:
        path = Path(run.path) / "plan.json"
        if not path.is_file():
            continue
        try:
            plan = json.loads(path.read_text(encoding="utf-8"))
            projection = projection_from_json(plan["projection"])
            if not isinstance(projection, ProjectionSection):
                continue
            throughput = run_throughput(run, warmup)
            rows.append(
                BesidePlan(
                    run_id=run.run_id,
                    optimizer=run.optimizer,
                    setup=_setup(plan),
                    step_s=throughput.step_time_s.median if throughput.step_time_s else None,
                    projected_step_s=projection.step.step_time_s,
                    optimizer_s=(run.extra or {}).get("optimizer_time_s"),
                    projected_optimizer_s=projection.breakdown_s.get("optimizer"),
                    tflops=throughput.tflops_per_gpu.median if throughput.tflops_per_gpu else None,
                    projected_tflops=projection.step.tflops_per_gpu,
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a plan another version wrote: the run keeps its row in the main table
    return rows


def _f(value: Optional[float], digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _share(part: Optional[float], whole: Optional[float]) -> str:
    return "-" if part is None or not whole else f"{part / whole:.0%}"


def _gaps(rows: Sequence[BesidePlan]) -> list[list[str]]:
    out = []
    for setup in dict.fromkeys(r.setup for r in rows):
        pair = {r.optimizer: r for r in rows if r.setup == setup}
        muon, adamw = pair.get("muon"), pair.get("adamw")
        if muon and adamw and muon.step_s and adamw.step_s:
            out.append(
                [
                    escaped(setup),
                    f"{adamw.step_s / muon.step_s - 1:+.0%}",
                    f"{adamw.projected_step_s / muon.projected_step_s - 1:+.0%}",
                    f"{code(muon.run_id)}, {code(adamw.run_id)}",
                ]
            )
    return out


def section(rows: Sequence[BesidePlan]) -> list[str]:
    """The markdown section (empty without such a run)."""
    if not rows:
        return []
    out = [
        "",
        "## Measured runs beside their own plan's projection",
        "",
        "Each run's medians (after the warm-up) beside the projection `make plan` made of the same setup on the same "
        "GPU (its plan.json in the run folder). Optimizer share = optimizer time / step time. A run without "
        "Transformer Engine (`make gpu-smoke`) is not what the projection prices: docs/gpu.md says why it is off.",
        "",
    ]
    out += markdown_table(
        [
            "run",
            "optimizer",
            "setup",
            "step s",
            "projected",
            "optimizer s",
            "projected",
            "optimizer share",
            "projected",
            "model TFLOP/s/GPU",
            "projected",
        ],
        [
            [
                code(r.run_id),
                r.optimizer,
                escaped(r.setup),
                _f(r.step_s),
                _f(r.projected_step_s),
                _f(r.optimizer_s),
                _f(r.projected_optimizer_s),
                _share(r.optimizer_s, r.step_s),
                _share(r.projected_optimizer_s, r.projected_step_s),
                _f(r.tflops, 1),
                _f(r.projected_tflops, 1),
            ]
            for r in rows
        ],
    )
    gaps = _gaps(rows)
    if gaps:
        out += ["", "Muon vs AdamW on the same setup, model TFLOP/s per GPU:", ""]
        out += markdown_table(["setup", "measured", "projected", "runs"], gaps)
    return out
