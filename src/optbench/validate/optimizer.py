"""Validation rules of the optimizer: which settings sections each optimizer reads, and what Megatron refuses (or
drops silently) for the emerging optimizers, per release where releases differ; what differs between them is read
from their registry entries (:mod:`optbench.config.optimizers`).

:mod:`optbench.validate` runs them with the other rules between fields; each problem names the field to fix.
"""

from __future__ import annotations

from collections.abc import Iterable

from optbench.releases.emerging_fields import emerging_problems
from optbench.config.optimizers import REGISTRY, entry
from optbench.config.schema import MATRIX_OPTIMIZERS, OPTIMIZER_LABELS, RunConfig
from optbench.common.errors import Problem
from optbench.releases import versions
from optbench.releases.versions import behaviour, container_of
from optbench.validate.muon import muon_release_problems

MUON_REFUSES_DIST_OPTIMIZER = "muon_refuses_dist_optimizer"
"""Core up to 0.17 raises on Muon with the distributed optimizer; from 0.18 it takes it through a size-balanced
layer-wise layout (non-Muon parameters in the regular distributed optimizer) that the caller must build
(tools/bridge_versions.py reads which, and whether Bridge builds it)."""
BRIDGE_BUILDS_LAYER_WISE_LAYOUT = "bridge_builds_layer_wise_layout"


def _distributed_optimizer_reason(run: RunConfig, label: str, section: str) -> str:
    fix = f"set it false, optimizer.{section}.layer_wise=true shards {label}'s state by whole parameters"
    if run.engine == "megatron_bridge":
        container = container_of(run)
        if not behaviour(container, MUON_REFUSES_DIST_OPTIMIZER):
            why = (
                "which Megatron Bridge " + container.bridge + " does not build"
                if not behaviour(container, BRIDGE_BUILDS_LAYER_WISE_LAYOUT)
                else "whose optimizer memory and owners optbench does not model yet"
            )
            return (
                f"Megatron Core {container.core} ({container.name}) takes {label} with the element-wise distributed "
                f"optimizer only through its size-balanced layer-wise layout, {why}; {fix}"
            )
    return (
        f"{label} refuses the element-wise distributed optimizer (Megatron: 'muon with dist optimizer is not "
        f"supported'); {fix}"
    )


def _emerging_optimizer_problems(run: RunConfig) -> Iterable[Problem]:
    """What Megatron refuses for every emerging optimizer alike (Core 0.16-0.17 muon.py, >= 0.18 the emerging path)."""
    o = run.optimizer
    label, section = OPTIMIZER_LABELS[o.name], entry(o.name).sections[0]
    if o.use_distributed_optimizer:
        yield Problem("optimizer.use_distributed_optimizer", _distributed_optimizer_reason(run, label, section))
    if o.overlap_param_gather:
        own = " (the layer-wise optimizer's own is optimizer.muon.overlap_param_gather)" if o.muon_family else ""
        yield Problem(
            "optimizer.overlap_param_gather",
            f"overlaps the element-wise distributed optimizer's parameter all-gather, which {label} does not use; "
            f"set it false{own}",
        )
    if run.precision.params_dtype == "fp16" or run.precision.name == "fp16":
        yield Problem(
            "precision",
            f"{label} does not support fp16 (Megatron: 'muon with fp16 is not supported', 'emerging "
            "optimizer with fp16 is not supported'); use bf16",
            ("optimizer",),
        )
    layer_wise = o.matrix_section.layer_wise
    if layer_wise and run.precision.fp8_param_gather:
        yield Problem(
            "precision.fp8_param_gather",
            f"incompatible with the layer-wise {label} optimizer; set precision.fp8_param_gather=false",
            (f"optimizer.{section}.layer_wise", "precision"),
        )
    if layer_wise and run.precision.reuse_grad_buf_for_mxfp8_param_ag:
        yield Problem(
            "precision.reuse_grad_buf_for_mxfp8_param_ag",
            f"incompatible with the layer-wise {label} optimizer; set it false",
            (f"optimizer.{section}.layer_wise", "precision"),
        )
    if run.engine == "megatron_bridge":
        yield from emerging_problems(run)


def megatron_limits(run: RunConfig) -> Iterable[Problem]:
    """What the optimizer's registry entry says Megatron cannot do for it: precondition a tensor-parallel shard as the
    full matrix, or checkpoint state that is not parameter-shaped."""
    e, p = entry(run.optimizer.name), run.parallel
    if run.engine != "megatron_bridge":
        return
    split = [f"{name}={size}" for name, size in (("parallel.tp", p.tp), ("parallel.etp", p.etp or p.tp)) if size > 1]
    if not e.tensor_parallel_aware and split and run.intent == "reproduce":
        yield Problem(
            "optimizer.name",
            f"{e.label} in Megatron preconditions each tensor-parallel shard alone ({', '.join(split)}): another "
            f"optimizer than {e.label} on the full matrix; set parallel.tp=1 and parallel.etp=1, or intent=train to "
            "run it knowingly",
            ("parallel.tp", "parallel.etp"),
        )
    if e.unshardable_state and run.train.save_interval is not None:
        yield Problem(
            "train.save_interval",
            f"{e.unshardable_state} are not parameter-shaped, and Megatron's torch_dist checkpoint shards optimizer "
            "state like the parameters; set train.save_interval=null (no checkpoint)",
        )


SCALE_AFTER_MOMENT2_FROM = (0, 3)
"""Emerging-Optimizers from which AdaMuon applies Muon's scale again after its second moment (``scale_after_moment2``;
before, the scale cancels in O / sqrt(V))."""


def _scales_after_moment2(container: versions.Container) -> bool:
    return versions.emerging_optimizers_line(container) >= SCALE_AFTER_MOMENT2_FROM


def adamuon_scales_after_moment2(run: RunConfig) -> bool:
    """Whether the run's container (the local engine follows its Emerging-Optimizers too) scales AdaMuon's update."""
    return _scales_after_moment2(container_of(run))


def first_scaling_container() -> str:
    first = versions.first_with(_scales_after_moment2)
    return f"cluster.container={first.name}" if first else "none of the containers we know ships one yet"


def _fsdp_problems(run: RunConfig) -> Iterable[Problem]:
    """Megatron FSDP shards every parameter over DP x CP and runs only the element-wise distributed optimizer: Core
    builds the emerging optimizers (Muon and the others of the registry) on their own path, which has no FSDP branch
    (``megatron.core.optimizer.get_megatron_optimizer`` returns for them before it, Core 0.16-0.19), and Bridge turns
    the distributed optimizer on under FSDP whatever the config says."""
    if not run.parallel.megatron_fsdp:
        return
    o = run.optimizer
    if o.matrix_optimizer:
        yield Problem(
            "parallel.megatron_fsdp",
            f"Megatron FSDP runs Adam only: Megatron Core builds {OPTIMIZER_LABELS[o.name]} on its emerging-optimizer "
            "path, which has no FSDP branch (each rank would orthogonalize a shard); set parallel.megatron_fsdp=false "
            "or optimizer=adamw",
            ("optimizer",),
        )
    elif not o.use_distributed_optimizer:
        yield Problem(
            "optimizer.use_distributed_optimizer",
            "false under Megatron FSDP, which always runs the distributed optimizer (Megatron Bridge turns it on); set "
            "it true, or parallel.megatron_fsdp=false",
            ("parallel.megatron_fsdp",),
        )


def check_optimizer(run: RunConfig) -> Iterable[Problem]:
    o = run.optimizer
    wanted = entry(o.name).sections if o.name in REGISTRY else ()
    for section in MATRIX_OPTIMIZERS:  # each has a settings section of its name
        present = getattr(o, section) is not None
        if section in wanted and not present:
            yield Problem(
                f"optimizer.{section}",
                f"optimizer {o.name} needs its {section} settings; select the group with optimizer={o.name}",
            )
            return
        if present and section not in wanted:
            article = "an" if OPTIMIZER_LABELS[o.name][0] in "AEIOU" else "a"
            yield Problem(
                f"optimizer.{section}",
                f"{OPTIMIZER_LABELS[section]} settings "
                f"on {article} {OPTIMIZER_LABELS[o.name]} run; select optimizer={section} or drop them",
            )
    if o.scalar_optimizer != "adam" and not o.muon_family:
        yield Problem(
            "optimizer.scalar_optimizer",
            f"picks what Muon or AdaMuon does not take; {o.name} gives "
            "those parameters to Adam (Megatron routes them for the Muon family only): set it adam",
        )
    yield from _fsdp_problems(run)
    if o.matrix_optimizer:
        yield from _emerging_optimizer_problems(run)
        yield from megatron_limits(run)
    if not o.muon_family:
        return
    if o.muon.qk_clip and not run.model.multi_latent_attention and run.model.qk_layernorm:
        yield Problem(
            "optimizer.muon.qk_clip",
            f"QK-clip scales the query/key projections; {run.model.name} uses GQA with QK-norm, which normalises them "
            "again, so no logit changes (Megatron would run it silently); set it false or model.qk_layernorm=false",
            ("model",),
        )
    normuon = o.adaptive_muon is not None and o.adaptive_muon.moment2_method == "normuon"
    if normuon and run.train.save_interval is not None and run.engine == "megatron_bridge":
        yield Problem(
            "train.save_interval",
            "NorMuon's second moment is one row or column per matrix (Emerging-Optimizers' moment2_buffer, [m, 1] or "
            "[1, n]), and Megatron Core's torch_dist checkpoint asserts every optimizer state tensor has its "
            "parameter's shape (dist_checkpointing/optimizer.py, make_sharded_optimizer_tensor): the first save would "
            "stop the run; set train.save_interval=null, or optimizer.adaptive_muon.moment2_method=adamuon "
            "(parameter-shaped)",
            ("optimizer.adaptive_muon.moment2_method",),
        )
    if o.adaptive_muon is not None and o.muon.extra_scale_factor != 1.0 and not adamuon_scales_after_moment2(run):
        yield Problem(
            "optimizer.muon.extra_scale_factor",
            f"changes nothing for AdaMuon with Emerging-Optimizers {versions.emerging_optimizers(container_of(run))} "
            f"({container_of(run).name}): the scale multiplies the orthogonalized update, which the second moment "
            f"divides out again ({o.adaptive_muon.moment2_method}, up to eps); set it 1.0, or a container whose "
            "Emerging-Optimizers (0.3+) scales after the second moment: " + first_scaling_container(),
            ("optimizer.name", "cluster.container"),
        )
    if run.engine == "megatron_bridge":
        yield from muon_release_problems(run)
