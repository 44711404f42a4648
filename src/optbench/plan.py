"""The plan: what a run will do, computed before any GPU is touched.

``build_plan`` turns a validated run config into a JSON-able dict (written to
``results/plans/<recipe>/plan.json``) and ``format_summary`` renders it for humans.
Later stages add their own sections to the same dict (FLOPs, memory, Bridge overrides,
launch script, projection), so that a plan and a run can never disagree.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from optbench.accounting.params import parameter_counts
from optbench.accounting.plan_fields import accounting_fields, accounting_summary_lines
from optbench.bridge.adapter import bridge_setup
from optbench.compose.pipeline import balanced_layout_for, layout_follows_overrides
from optbench.config.data_path import prefix_status
from optbench.config.schema import OPTIMIZER_LABELS, RunConfig
from optbench.config.serialize import run_config_to_dict
from optbench.errors import Problem, UserError
from optbench.io import atomic_write_text, dumps_strict
from optbench.outputs import claim
from optbench.plan_format import PLAN_VERSION
from optbench.projection.plan_fields import projection_fields, projection_summary_lines
from optbench.redact import recorded_overrides, redact_config, redact_text, run_secrets
from optbench.resolve import ResolvedRun


def plan_path(run: RunConfig) -> Path:
    """Where the plan of a recipe is written (the recipe is one plain name: the plan stays in its folder)."""
    if not RECIPE_NAME.fullmatch(run.recipe or ""):
        raise UserError(Problem("recipe", f"'{run.recipe[:60]}' is not a recipe name; choose one with RECIPE=<name>"))
    return Path(run.results_dir) / "plans" / run.recipe / "plan.json"


RECIPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def gpu_label(run: RunConfig) -> str:
    """The GPU named by the cluster preset (auto: decided on the machine that runs)."""
    return run.cluster.gpu


def build_plan(resolved: ResolvedRun, overrides: Sequence[str] = (), side_by_side: bool = True) -> dict[str, Any]:
    """Every number a user needs to check a run before launching it (``side_by_side=False``: without the other
    matrix optimizers' projections, which a sweep's points leave out)."""
    run, layout = resolved.run, resolved.layout
    counts = parameter_counts(run.model)
    optimizer = asdict(run.optimizer)
    for section in ("muon", "adaptive_muon", "soap"):
        if optimizer[section] is None:
            optimizer.pop(section)
    # The Bridge recipe function and the overrides the in-container entry point applies.
    bridge = bridge_setup(run).as_dict() if run.engine == "megatron_bridge" else None
    plan = {
        "plan_version": PLAN_VERSION,
        "recipe": run.recipe,
        "description": run.description,
        "overrides": recorded_overrides(overrides),
        "engine": run.engine,
        "intent": run.intent,
        "cluster": run.cluster.name,
        "executor": run.cluster.executor,
        "world_size": layout.world_size,
        "nodes": layout.nodes,
        "gpus_per_node": layout.gpus_per_node,
        "gpu": gpu_label(run),
        "precision": run.precision.name,
        "layout": layout.as_dict(),
        "pipeline_stage_layers": list(resolved.stage_layers),
        "pipeline_layout_balanced": _layout_was_balanced(run, overrides),
        "gbs": run.train.gbs,
        "mbs": run.train.mbs,
        "seq_length": run.train.seq_length,
        "num_microbatches": layout.num_microbatches,
        "tokens_per_step": run.train.gbs * run.train.seq_length,
        "model": {
            "name": run.model.name,
            "architecture": run.model.architecture,
            "total_params": counts.total,
            "active_params": counts.active,
        },
        "optimizer": optimizer,
        "data": data_section(run),
        # FLOPs per token/step, Newton-Schulz FLOPs per TP mode, memory per GPU, peaks, implied TFLOP/s.
        **accounting_fields(run, layout, resolved.ns_stats, resolved.ns_flops_total, resolved.memory),
        # Projected step time, TFLOP/s and MFU; for Muon its AdamW twin and the overhead's causes.
        **projection_fields(resolved, overrides, side_by_side),
        "config": redact_config(run_config_to_dict(run)),
    }
    if bridge is not None:
        plan["bridge"] = bridge
    return plan


def data_section(run: RunConfig) -> dict[str, Any]:
    """What the run reads; for indexed data, whether each prefix exists on the machine making the plan."""
    d = run.data
    section: dict[str, Any] = {"kind": d.kind, "seed": d.seed}
    if d.kind == "indexed":
        section.update(split=d.split, tokenizer=d.tokenizer, prefixes=prefix_status(list(d.path)))
    return section


def missing_prefixes(plan: dict[str, Any]) -> list[str]:
    """The data prefixes of a plan that do not exist where it was made."""
    return [p["prefix"] for p in plan.get("data", {}).get("prefixes", []) if not p["exists_here"]]


def _layout_was_balanced(run: RunConfig, overrides: Sequence[str]) -> bool:
    """Whether compose replaced the recipe's pipeline layout because pp/vpp were typed (config.pipeline)."""
    layout = run.parallel.pipeline_layout
    return bool(layout) and layout_follows_overrides(overrides) and layout == balanced_layout_for(run)


def claim_results(run: RunConfig) -> Path:
    """The run's results folder, created and marked as optbench's (refused if it is not ours: optbench.outputs)."""
    return claim(run.results_dir, "results_dir", "results")


def write_plan(run: RunConfig, plan: dict[str, Any]) -> Path:
    """Atomically write plan.json (strict JSON, every known secret redacted); returns its path."""
    claim_results(run)
    return atomic_write_text(plan_path(run), redact_text(dumps_strict(plan, indent=2) + "\n", run_secrets(run)))


def _human(n: float, unit: str = "") -> str:
    for scale, suffix in ((1e12, " T"), (1e9, " B"), (1e6, " M"), (1e3, " k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{suffix}{unit}"
    return f"{n:.3g}{' ' + unit if unit else ''}"


def _optimizer_line(plan: dict[str, Any]) -> str:
    o = plan["optimizer"]
    text = f"{o['name']} lr {o['lr']:g} -> {o['min_lr']:g}, wd {o['weight_decay']:g}, clip {o['clip_grad']:g}"
    muon = o.get("muon")
    if muon:
        mode = "layer-wise" if muon["layer_wise"] else "replicated"
        overrides = (plan.get("bridge") or {}).get("overrides", ())
        names = [o.split("=", 1)[1] for o in overrides if o.startswith("optimizer.optimizer=")]
        if names:  # Megatron's spelling in the run's container: dist_muon up to Core 0.17, then muon + a flag
            flag = "optimizer.use_layer_wise_distributed_optimizer=true" in overrides
            mode += f" ({names[0]}{' + use_layer_wise_distributed_optimizer' if flag else ''})"
        text += (
            f"; {mode}, {muon['coefficients']} NS x{muon['ns_steps']}, {muon['scale_mode']} scale, "
            f"TP mode {muon['tp_mode']}, momentum {muon['momentum']:g}{' nesterov' if muon['nesterov'] else ''}"
        )
    elif o.get("soap"):
        soap = o["soap"]
        text += (f"; {'layer-wise' if soap['layer_wise'] else 'replicated'}, shampoo beta {soap['shampoo_beta']:g}, "
                 f"eigenbasis every {soap['precondition_frequency']} step(s), KL-Shampoo {'on' if soap['use_kl_shampoo'] else 'off'}")
        split = [f"{k}{v}" for k, v in plan["layout"].items() if k in ("tp", "etp") and v > 1]
        if split and plan["engine"] == "megatron_bridge":  # reproduce refuses this (validate.soap_problems)
            text += f"; warning: {'/'.join(split)} shards preconditioned alone, not SOAP on the full matrices"
    else:
        text += "; distributed optimizer" if o["use_distributed_optimizer"] else ""
    if o.get("adaptive_muon"):
        a = o["adaptive_muon"]
        text += f"; second moment {a['moment2_method']} beta2 {a['beta2']:g}"
    if o.get("scalar_optimizer", "adam") != "adam":
        text += f"; scalars: {o['scalar_optimizer']} betas ({o['lion_beta1']:g}, {o['lion_beta2']:g})"
    return text


def _devices_line(plan: dict[str, Any]) -> str:
    if plan["gpu"] == "auto":
        count = plan["world_size"]
        return (
            f"  devices     {count} process{'es' if count > 1 else ''} on this machine "
            "(CUDA GPUs if present, else the CPU; decided at run time)"
        )
    nodes = plan["nodes"]
    return (
        f"  GPUs        {plan['world_size']} = {nodes} node{'s' if nodes > 1 else ''} x "
        f"{plan['gpus_per_node']} {plan['gpu'].upper()}"
    )


def format_summary(plan: dict[str, Any]) -> str:
    """Readable multi-line summary of a plan."""
    lay = plan["layout"]
    stages = plan["pipeline_stage_layers"]
    lines = [
        f"Plan: {plan['recipe']} - {plan['description']}".rstrip(" -"),
        f"  engine      {plan['engine']} on cluster {plan['cluster']} ({plan['executor']} executor)",
        _devices_line(plan),
        f"  layout      TP{lay['tp']} PP{lay['pp']} VPP{lay['vpp']} CP{lay['cp']} EP{lay['ep']} ETP{lay['etp']}"
        f" | DP{lay['dp']} EDP{lay['edp']}",
    ]
    if len(stages) > 1:
        lines.append(f"  pipeline    {len(stages)} virtual stages, decoder layers per stage: {stages}")
        if plan.get("pipeline_layout_balanced"):
            lines.append(
                "              layout balanced for the typed pp/vpp (each rank's work evened, the output layer"
                " weighed by its FLOPs); parallel.pipeline_layout=[[...],...] sets your own"
            )
    lines += [
        f"  batch       GBS {plan['gbs']} = MBS {plan['mbs']} x DP {lay['dp']} x {plan['num_microbatches']} microbatches;"
        f" seq {plan['seq_length']}; {_human(plan['tokens_per_step'])} tokens/step",
        f"  model       {plan['model']['name']} ({plan['model']['architecture']}):"
        f" {_human(plan['model']['total_params'])} params, {_human(plan['model']['active_params'])} active",
        f"  optimizer   {_optimizer_line(plan)}",
        f"  precision   {plan['precision']}"
        + (" (the local engine computes in fp32 on a CPU, bf16 autocast on a GPU)" if plan["engine"] == "local" else ""),
    ]
    data = plan.get("data", {})
    if data.get("kind") == "indexed":
        prefixes = data["prefixes"]
        missing = missing_prefixes(plan)
        here = "all found on this machine" if not missing else f"{len(missing)} of {len(prefixes)} NOT found on this machine"
        lines.append(f"  data        indexed, {len(prefixes)} prefix(es), split {data['split']}: {here}")
    lines += accounting_summary_lines(plan)
    lines += projection_summary_lines(plan)
    bridge = plan.get("bridge")
    if bridge:
        lines.append(f"  intent      {intent_line(bridge, plan['optimizer']['name'])}")
        recipe = bridge["recipe"]
        args = ", ".join(f"{k}={v!r}" for k, v in recipe["kwargs"].items())
        lines.append(
            f"  bridge      {recipe['module']}.{recipe['function']}({args}) + {bridge['mixed_precision_preset']}"
            f" + {len(bridge['overrides'])} overrides (plan.json bridge.overrides)"
        )
        if recipe.get("hf_config"):
            lines.append(f"  hub config  {recipe['hf_config']} config.json, from the hub or a cache mounted at HF_HOME "
                         "(docs/cluster.md)")
    lines += format_launch_lines(plan)
    return "\n".join(lines)


def intent_line(bridge: dict[str, Any], optimizer: str = "muon") -> str:
    """What the Bridge run reproduces or changes, in one line."""
    intent, preset = bridge.get("intent", "train"), bridge.get("preset")
    if not preset:
        return f"{intent}: no NVIDIA preset for this model, GPU and precision; the Bridge recipe with our settings"
    source = f"NVIDIA's {preset['key']} preset ({preset.get('container', 'Megatron Bridge ' + preset['release'])}: {preset.get('case') or 'scripts/performance'})"
    if preset.get("adapted_from_adam"):
        label = OPTIMIZER_LABELS[optimizer]
        source += f" - no {label} preset for this model: Adam's, with our {label} settings"
    if intent == "train":
        return f"train: {source} with real routing, NaN checks and evaluation"
    departures = [d["field"] for d in preset.get("departures", [])]
    return f"reproduce: {source}; " + (f"departs in {', '.join(departures)}" if departures else "no departure")


def format_launch_lines(plan: dict[str, Any]) -> list[str]:
    """The plan's launch section (added by the launcher once the job is rendered): job script and resources."""
    launch = plan.get("launch")
    if not launch:
        return []
    lines = [f"  launch      {launch['summary']}"]
    if launch.get("job_script"):
        lines.append(f"  job script  {launch['job_script']}")
    return lines
