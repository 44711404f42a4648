"""The plan: what a run will do, computed before any GPU is touched.

``build_plan`` turns a resolved run into a typed, frozen :class:`~optbench.plan.types.Plan` (written as
``results/plans/<recipe>/plan.json`` by :func:`write_plan`) and ``format_summary`` renders it for humans.
Every section (FLOPs, memory, projection, Bridge overrides) is computed from the one resolved run, and the
launcher adds its own with :meth:`Plan.with_launch`, so that a plan and a run can never disagree.
"""

from __future__ import annotations

import json

import re
from pathlib import Path
from typing import Sequence

from optbench.accounting.params import parameter_counts
from optbench.accounting.plan_fields import accounting_fields, accounting_summary_lines
from optbench.engine.bridge.adapter import BridgeSetup, bridge_setup
from optbench.compose.pipeline import balanced_layout_for, layout_follows_overrides
from optbench.config.data_path import prefix_status
from optbench.config.overrides import split_override
from optbench.config.optimizers import entry
from optbench.config.schema import MATRIX_OPTIMIZERS, OPTIMIZER_LABELS, RunConfig
from optbench.config.serialize import run_config_to_dict
from optbench.common.errors import Problem, UserError
from optbench.common.io import atomic_write_text, dumps_strict
from optbench.common.outputs import claim
from optbench.plan.counterparts import ComposedCounterparts
from optbench.plan.row_runs import COMPOSED_ROWS
from optbench.plan.types import Plan, PlanData, PlanModel
from optbench.projection.plan_fields import projection_summary_lines
from optbench.projection.project import project
from optbench.common.redact import clipped, recorded_overrides, redact_config, redact_text, run_secrets
from optbench.resolve import ResolvedRun


def plan_path(run: RunConfig) -> Path:
    """Where the plan of a recipe is written (the recipe is one plain name: the plan stays in its folder)."""
    if not RECIPE_NAME.fullmatch(run.recipe or ""):
        raise UserError(
            Problem("recipe", f"'{clipped(run.recipe, 60)}' is not a recipe name; choose one with RECIPE=<name>")
        )
    return Path(run.results_dir) / "plans" / run.recipe / "plan.json"


RECIPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def gpu_label(run: RunConfig) -> str:
    """The GPU named by the cluster preset (auto: decided on the machine that runs)."""
    return run.cluster.gpu


def compared_optimizers(text: str) -> tuple[str, ...]:
    """COMPARE (``<name>,<name>``) as optimizer names; a name that is not a matrix optimizer is a one-line error."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in MATRIX_OPTIMIZERS]
    if unknown:
        raise UserError(
            Problem(
                "COMPARE",
                f"{clipped(unknown[0], 40)!r} is not a matrix optimizer; name any of "
                f"{', '.join(MATRIX_OPTIMIZERS)}, comma-separated",
            )
        )
    return tuple(dict.fromkeys(names))


def build_plan(resolved: ResolvedRun, overrides: Sequence[str] = (), compare: Sequence[str] = ()) -> Plan:
    """Every number a user needs to check a run before launching it (``compare``: the other matrix optimizers
    projected beside a matrix-optimizer run's AdamW twin, COMPARE; each is one more composition)."""
    run, layout = resolved.run, resolved.layout
    if compare and not run.optimizer.matrix_optimizer:
        raise UserError(
            Problem(
                "COMPARE",
                f"projects matrix optimizers beside a matrix-optimizer run's AdamW twin; "
                f"{run.recipe} trains {run.optimizer.name}: plan a Muon recipe with it",
            )
        )
    counts = parameter_counts(run.model)
    return Plan(
        recipe=run.recipe,
        description=run.description,
        overrides=tuple(recorded_overrides(overrides)),
        engine=run.engine,
        intent=run.intent,
        cluster=run.cluster.name,
        executor=run.cluster.executor,
        gpu=gpu_label(run),
        precision=run.precision.name,
        layout=layout,
        pipeline_stage_layers=tuple(resolved.stage_layers),
        pipeline_layout_balanced=_layout_was_balanced(run, overrides),
        gbs=run.train.gbs,
        mbs=run.train.mbs,
        seq_length=run.train.seq_length,
        model=PlanModel(run.model.name, run.model.architecture, counts.total, counts.active),
        optimizer=run.optimizer,
        data=data_section(run),
        # FLOPs per token/step, Newton-Schulz FLOPs per TP mode, memory per GPU, peaks, implied TFLOP/s.
        accounting=accounting_fields(run, layout, resolved.ns_stats, resolved.ns_flops_total, resolved.memory),
        # Projected step time, TFLOP/s and MFU; for Muon its AdamW twin and the overhead's causes.
        projection=project(
            resolved, overrides, counterparts=ComposedCounterparts(), siblings=tuple(compare), row_runs=COMPOSED_ROWS
        ),
        config=redact_config(run_config_to_dict(run)),
        # The Bridge recipe function and the overrides the in-container entry point applies.
        bridge=bridge_setup(run) if run.engine == "megatron_bridge" else None,
    )


def data_section(run: RunConfig) -> PlanData:
    """What the run reads; for indexed data, whether each prefix exists on the machine making the plan."""
    d = run.data
    if d.kind != "indexed":
        return PlanData(d.kind, d.seed)
    return PlanData(d.kind, d.seed, d.split, d.tokenizer, tuple(prefix_status(list(d.path))))


def _layout_was_balanced(run: RunConfig, overrides: Sequence[str]) -> bool:
    """Whether compose replaced the recipe's pipeline layout because pp/vpp were typed (config.pipeline)."""
    layout = run.parallel.pipeline_layout
    return bool(layout) and layout_follows_overrides(overrides) and layout == balanced_layout_for(run)


def claim_results(run: RunConfig) -> Path:
    """The run's results folder, created and marked as optbench's (refused if it is not ours:
    optbench.common.outputs)."""
    return claim(run.results_dir, "results_dir", "results")


def replaced_plan_note(run: RunConfig, plan: Plan) -> str:
    """What writing ``plan`` replaces, for the printed plan.json line: each recipe keeps its latest plan only
    (results/plans/<recipe>/plan.json, which make table reads), so a plan of other overrides is said to go; "" when
    there is none or it had the same overrides (a re-plan)."""
    import shlex

    try:
        earlier = json.loads(plan_path(run).read_text())["overrides"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    if not isinstance(earlier, list) or not all(isinstance(o, str) for o in earlier):
        return ""
    # results_dir is where the plan is, not what it plans.
    earlier, now = ([o for o in typed if not o.startswith("results_dir=")] for typed in (earlier, plan.overrides))
    if earlier == now:
        return ""
    typed = shlex.join(earlier)
    typed = typed if len(typed) <= 100 else typed[:97] + "..."
    return f" (replaces the plan of {run.recipe} with {typed or 'no overrides'}: a recipe keeps its latest plan)"


def write_plan(run: RunConfig, plan: Plan) -> Path:
    """Atomically write plan.json (strict JSON, every known secret redacted); returns its path."""
    claim_results(run)
    return atomic_write_text(
        plan_path(run), redact_text(dumps_strict(plan.to_json(), indent=2) + "\n", run_secrets(run))
    )


def _human(n: float, unit: str = "") -> str:
    for scale, suffix in ((1e12, " T"), (1e9, " B"), (1e6, " M"), (1e3, " k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{suffix}{unit}"
    return f"{n:.3g}{' ' + unit if unit else ''}"


def _optimizer_line(plan: Plan) -> str:
    o = plan.optimizer
    text = f"{o.name} lr {o.lr:g} -> {o.min_lr:g}, wd {o.weight_decay:g}, clip {o.clip_grad:g}"
    own = entry(o.name)
    if own.describe is not None:
        overrides = plan.bridge.overrides if plan.bridge is not None else ()
        text += f"; {own.describe(o, [split_override(item) for item in overrides])}"
        split = [f"{k}{v}" for k, v in (("tp", plan.layout.tp), ("etp", plan.layout.etp)) if v > 1]
        if split and plan.engine == "megatron_bridge" and not own.tensor_parallel_aware:  # reproduce refuses it
            text += f"; warning: {'/'.join(split)} shards preconditioned alone, not {own.label} on the full matrices"
    elif o.use_distributed_optimizer:
        text += "; distributed optimizer"
    if o.scalar_optimizer != "adam":
        text += f"; scalars: {o.scalar_optimizer} betas ({o.lion_beta1:g}, {o.lion_beta2:g})"
    return text


def _devices_line(plan: Plan) -> str:
    lay = plan.layout
    if plan.gpu == "auto":
        count = lay.world_size
        return (
            f"  devices     {count} process{'es' if count > 1 else ''} on this machine "
            "(CUDA GPUs if present, else the CPU; decided at run time)"
        )
    return (
        f"  GPUs        {lay.world_size} = {lay.nodes} node{'s' if lay.nodes > 1 else ''} x "
        f"{lay.gpus_per_node} {plan.gpu.upper()}"
    )


def format_summary(plan: Plan) -> str:
    """Readable multi-line summary of a plan."""
    lay = plan.layout
    stages = list(plan.pipeline_stage_layers)
    lines = [
        f"Plan: {plan.recipe} - {plan.description}".rstrip(" -"),
        # The description is the recipe's own (its GPUs, precision, source): name what the command line changed.
        *(
            [f"  overrides   {' '.join(plan.overrides)} (on top of the recipe described above)"]
            if plan.overrides
            else []
        ),
        f"  engine      {plan.engine} on cluster {plan.cluster} ({plan.executor} executor)",
        _devices_line(plan),
        f"  layout      TP{lay.tp} PP{lay.pp} VPP{lay.vpp} CP{lay.cp} EP{lay.ep} ETP{lay.etp}"
        f" | DP{lay.dp} EDP{lay.edp}",
    ]
    if len(stages) > 1:
        lines.append(f"  pipeline    {len(stages)} virtual stages, decoder layers per stage: {stages}")
        if plan.pipeline_layout_balanced:
            lines.append(
                "              layout balanced for the typed pp/vpp (each rank's work evened, the output layer"
                " weighed by its FLOPs); parallel.pipeline_layout=[[...],...] sets your own"
            )
    model = plan.model
    lines += [
        f"  batch       GBS {plan.gbs} = MBS {plan.mbs} x DP {lay.dp} x {lay.num_microbatches} microbatches;"
        f" seq {plan.seq_length}; {_human(plan.tokens_per_step)} tokens/step",
        f"  model       {model.name} ({model.architecture}):"
        f" {_human(model.total_params)} params, {_human(model.active_params)} active",
        f"  optimizer   {_optimizer_line(plan)}",
        f"  precision   {plan.precision}"
        + (" (the local engine computes in fp32 on a CPU, bf16 autocast on a GPU)" if plan.engine == "local" else ""),
    ]
    data = plan.data
    if data.kind == "indexed":
        missing = data.missing_prefixes
        here = (
            "all found on this machine"
            if not missing
            else f"{len(missing)} of {len(data.prefixes)} NOT found on this machine"
        )
        lines.append(f"  data        indexed, {len(data.prefixes)} prefix(es), split {data.split}: {here}")
    preset = plan.bridge.preset if plan.bridge is not None else None
    executed_as = f"{preset['key']}, {preset['container']}" if preset and preset.get("as_executed") else ""
    lines += accounting_summary_lines(plan.accounting, plan.optimizer.name, executed_as)
    lines += projection_summary_lines(plan.projection, plan.optimizer.name)
    bridge = plan.bridge
    if bridge is not None:
        lines.append(f"  intent      {intent_line(bridge, plan.optimizer.name)}")
        recipe = bridge.recipe
        args = ", ".join(f"{k}={v!r}" for k, v in recipe.kwargs.items())
        lines.append(
            f"  bridge      {recipe.module}.{recipe.function}({args}) + {bridge.mixed_precision}"
            f" + {len(bridge.overrides)} overrides (plan.json bridge.overrides)"
        )
        if recipe.hf_config:
            lines.append(
                f"  hub config  {recipe.hf_config} config.json, from the hub or a cache mounted at HF_HOME "
                "(docs/cluster.md)"
            )
        lines += unverified_lines(bridge.unverified)
        lines += [
            f"  known issue {issue['id']}: {issue['effect']} ({issue['source']}; {issue['evidence']})"
            for issue in bridge.known_issues
        ]
    lines += format_launch_lines(plan)
    return "\n".join(lines)


LAUNCHER_FIELD = "optimizer (NVIDIA's launcher)"
"""The departure preset_summary names where NVIDIA's launcher trains another optimizer than its case's."""


def intent_line(bridge: BridgeSetup, optimizer: str = "muon") -> str:
    """What the Bridge run reproduces or changes, in one line."""
    intent, preset = bridge.intent, bridge.preset
    if not preset:
        return f"{intent}: no NVIDIA preset for this model, GPU and precision; the Bridge recipe with our settings"
    source = (
        f"NVIDIA's {preset['key']} preset ({preset.get('container', 'Megatron Bridge ' + preset['release'])}: "
        f"{preset.get('case') or 'scripts/performance'})"
    )
    if preset.get("adapted_from_adam"):
        label = OPTIMIZER_LABELS[optimizer]
        source += f" - no {label} preset for this model: Adam's, with our {label} settings"
    if intent == "train":
        changes = preset.get("train_changes") or {}
        checks = (
            "NaN checks"
            if changes.get("rerun_state_machine.check_for_nan_in_loss", True)
            else "the gradient NaN check (the loss NaN check stays off: full-iteration CUDA graphs require it)"
        )
        return f"train: {source} with real routing, {checks} and evaluation"
    departures = [d["field"] for d in preset.get("departures", []) if d["field"] != LAUNCHER_FIELD]
    respelled = [d["field"] for d in preset.get("respelled", [])]
    line = f"reproduce: {source}; " + (f"departs in {', '.join(departures)}" if departures else "no departure")
    launcher = next((d for d in preset.get("departures", []) if d["field"] == LAUNCHER_FIELD), None)
    if launcher is not None:
        line += (
            f"; NVIDIA's launcher trains {launcher['nvidia']} for this {launcher['ours']} case (its run_script.py "
            f"ignores --optimizer_type), so no NVIDIA run is this configuration: this is NVIDIA's own "
            f"{launcher['ours']} path"
        )
    if respelled:
        line += f" ({', '.join(respelled)}: NVIDIA's dist_muon as Megatron Core >= 0.18 spells it)"
    return line


def unverified_lines(unverified: dict | None) -> list[str]:
    """An unchecked container's lines: what the plan assumes, and each public note that applies, with its source."""
    if not unverified:
        return []
    lines = [
        f"  release     {unverified['container']} is a release we did not check: planned on "
        f"{unverified['assumed_from']}'s facts (Megatron Bridge {unverified['bridge']}, Megatron Core "
        f"{unverified['core']}); the job compares them with the container's own (docs/containers.md)"
    ]
    notes = unverified["notes"] or [
        {
            "container": unverified["container"],
            "topic": "notes",
            "change": "none of optbench/data/release_notes.csv applies to this model and GPU",
            "source": "optbench/data/release_notes.csv",
        }
    ]
    lines += [f"              {n['container']} {n['topic']}: {n['change']} ({n['source']})" for n in notes]
    return lines


def format_launch_lines(plan: Plan) -> list[str]:
    """The plan's launch section (added by the launcher once the job is rendered): job script and resources."""
    launch = plan.launch
    if not launch:
        return []
    lines = [f"  launch      {launch['summary']}"]
    if launch.get("job_script"):
        lines.append(f"  job script  {launch['job_script']}")
    return lines
