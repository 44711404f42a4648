"""Pre-flight validation: every rule Megatron (or our local engine) would enforce later, checked
before anything is launched, each failure one line that names the field and the fix.

Checks run in dependency order: every field's own domain first (:mod:`optbench.config.domains`:
ranges, finite floats, enumerations, folders, bounded sizes), then rules between fields and the
world-size arithmetic, and the rules that need a valid data-parallel size only when it is valid.
A problem that several fields decide lists them as ``related``, so that the error line can name
the one the user typed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from optbench.engine.bridge.adapter import executed_by_nvidia
from optbench.common.checkout import repo_root
from optbench.releases.graph_rules import graph_problems, recompute_problems
from optbench.releases.moe_rules import moe_problems
from optbench.releases.precision_rules import precision_problems
from optbench.config.data_path import split_weights
from optbench.config.domains import MAX_EXPERT_LAYERS, check_domains
from optbench.config.layout import gpus_per_node
from optbench.config.schema import RunConfig
from optbench.common.errors import Problem, UserError
from optbench.catalog.hardware import gpu_catalog
from optbench.releases.versions import container_of
from optbench.resolve import ResolvedRun, resolve
from optbench.validate.layout import (
    PARALLEL_SIZES,
    check_batch,
    check_experts,
    check_pipeline,
    check_tensor_parallel,
)
from optbench.validate.optimizer import check_optimizer

Check = Callable[[RunConfig], Iterable[Problem]]


def check_fields(run: RunConfig) -> Iterable[Problem]:
    """Rules between fields that need no layout: learning rates, routing, Newton-Schulz, batch."""
    o, m, t = run.optimizer, run.model, run.train
    if m.num_moe_experts and m.num_layers * m.num_moe_experts > MAX_EXPERT_LAYERS:
        yield Problem(
            "model.num_moe_experts",
            f"{m.num_layers} layers x {m.num_moe_experts} experts = {m.num_layers * m.num_moe_experts:,} routed-expert "
            f"layers; the planner handles at most {MAX_EXPERT_LAYERS:,} (Kimi K2: 23,040); use fewer layers or experts",
            ("model.num_layers",),
        )
    if run.intent == "reproduce" and run.engine != "megatron_bridge":
        yield Problem(
            "intent",
            "reproduce applies NVIDIA's Megatron Bridge presets; the local engine trains (intent=train)",
            ("engine",),
        )
    if run.compare_with is not None and not (repo_root() / "recipes" / f"{run.compare_with}.yaml").is_file():
        yield Problem(
            "compare_with",
            f"{run.compare_with!r} is not a recipe (a file under recipes/); `make recipes` lists "
            "them, or compare_with=null compares with this recipe under optimizer=adamw",
        )
    if o.min_lr > o.lr:
        yield Problem("optimizer.min_lr", f"must not exceed optimizer.lr={o.lr:g}, got {o.min_lr:g}", ("optimizer.lr",))
    if o.muon_family and o.muon.coefficients == "cubic5" and o.muon.ns_steps != 5:
        yield Problem(
            "optimizer.muon.ns_steps",
            f"must be 5 with the cubic5 coefficients (a fixed five-step schedule, "
            f"as Emerging-Optimizers 0.4.0 requires), got {o.muon.ns_steps}",
            ("optimizer.muon.coefficients",),
        )
    if o.muon_family and o.muon.coefficients == "quintic" and o.muon.ns_steps % 5:
        yield Problem(
            "optimizer.muon.ns_steps",
            f"must be a multiple of 5 with the quintic coefficients (one tuple per step, as Emerging-Optimizers "
            f"requires), got {o.muon.ns_steps}; use 5 or 10, or optimizer.muon.coefficients=simple",
            ("optimizer.muon.coefficients",),
        )
    groups, group_topk = m.moe_router_num_groups, m.moe_router_group_topk
    if m.num_moe_experts and groups:
        if m.num_moe_experts % groups:
            yield Problem(
                "model.moe_router_num_groups",
                f"{m.num_moe_experts} experts do not split into {groups} routing groups; use a divisor of the experts",
                ("model.num_moe_experts",),
            )
        elif group_topk and (group_topk > groups or m.moe_router_topk > group_topk * (m.num_moe_experts // groups)):
            yield Problem(
                "model.moe_router_group_topk",
                f"{group_topk} of {groups} groups of {m.num_moe_experts // groups} experts cannot hold "
                f"top-{m.moe_router_topk}; raise it (at most the number of groups) or lower model.moe_router_topk",
                ("model.moe_router_num_groups", "model.moe_router_topk"),
            )
    p = run.parallel
    if p.recompute_num_layers and p.recompute_num_layers > m.num_layers:
        yield Problem(
            "parallel.recompute_num_layers", f"must not exceed the model's {m.num_layers} layers", ("model.num_layers",)
        )
    if run.data.kind == "indexed":
        try:
            split_weights(run.data.split)
        except UserError as err:
            yield from err.problems
    if t.mbs > t.gbs:
        yield Problem("train.mbs", f"must not exceed train.gbs={t.gbs}, got {t.mbs}", ("train.gbs",))


def check_model(run: RunConfig) -> Iterable[Problem]:
    m = run.model
    if m.multi_latent_attention:
        for name in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            if not getattr(m, name):
                yield Problem(
                    f"model.{name}",
                    "multi-latent attention needs it; give a positive size",
                    ("model.multi_latent_attention",),
                )
    else:
        if not m.kv_channels or not m.num_query_groups:
            yield Problem(
                "model.kv_channels",
                "GQA attention needs kv_channels and num_query_groups",
                ("model.num_query_groups", "model.multi_latent_attention"),
            )
        elif m.num_attention_heads % m.num_query_groups:
            yield Problem(
                "model.num_query_groups",
                f"{m.num_attention_heads} heads do not split into {m.num_query_groups} query groups",
                ("model.num_attention_heads",),
            )
    if m.num_moe_experts:
        if not m.moe_ffn_hidden_size:
            yield Problem(
                "model.moe_ffn_hidden_size", "a MoE model needs the expert FFN width", ("model.num_moe_experts",)
            )
        if not 1 <= m.moe_router_topk <= m.num_moe_experts:
            yield Problem(
                "model.moe_router_topk", f"must lie in [1, {m.num_moe_experts}] experts", ("model.num_moe_experts",)
            )
        if not 0 <= m.first_k_dense_layers <= m.num_layers:
            yield Problem(
                "model.first_k_dense_layers", f"must lie in [0, num_layers={m.num_layers}]", ("model.num_layers",)
            )


def check_world(run: RunConfig) -> Iterable[Problem]:
    """world = tp*pp*cp*dp = nodes*gpus_per_node."""
    p = run.parallel
    model_parallel = p.tp * p.pp * p.cp
    if p.num_gpus % model_parallel:
        yield Problem(
            "parallel.num_gpus",
            f"{p.num_gpus} GPUs is not a multiple of tp*pp*cp = {p.tp}*{p.pp}*{p.cp} = {model_parallel}; "
            "choose num_gpus, tp, pp and cp so that dp = num_gpus/(tp*pp*cp) is a whole number",
            PARALLEL_SIZES[1:],
        )
    per_node = gpus_per_node(run)
    if run.cluster.gpus_per_node and p.num_gpus > per_node and p.num_gpus % per_node:
        yield Problem(
            "parallel.num_gpus",
            f"{p.num_gpus} GPUs do not fill whole {run.cluster.name} nodes of {per_node} GPUs; "
            f"use a multiple of {per_node}",
            ("cluster",),
        )


def check_precision(run: RunConfig) -> Iterable[Problem]:
    fp8 = run.precision.fp8 is not None
    fp4 = run.precision.fp4 is not None
    gpu = run.cluster.gpu
    if run.engine == "local" and (fp8 or fp4):
        yield Problem(
            "precision",
            f"the local engine runs bf16/fp32 only, not {run.precision.name}; use precision=bf16",
            ("engine", "recipe"),
        )
        return
    if run.precision.fp8_dot_product_attention and not fp8:
        yield Problem(
            "precision.fp8_dot_product_attention",
            f"FP8 attention needs an FP8 recipe and precision={run.precision.name} has none; set it false or use "
            "precision=fp8_cs or precision=mxfp8",
        )
    spec = gpu_catalog().get(gpu)
    if spec is None:
        return
    if fp4 and "fp4" not in spec.peak_tflops:
        yield Problem(
            "precision",
            f"nvfp4 needs a Blackwell GPU with a published FP4 peak (optbench/data/gpus.csv, its MFU denominator); "
            f"{gpu} has none; use precision=mxfp8, or add {gpu}'s peak_fp4_tflops with its source",
            ("cluster",),
        )
    if run.precision.fp8_recipe == "mxfp8" and not spec.mxfp8:
        yield Problem(
            "precision",
            f"mxfp8 needs a Blackwell GPU (SM 10.x); {gpu} ({spec.arch}, SM {spec.compute_capability}) has no MXFP8; "
            "use precision=fp8_cs or precision=bf16",
            ("cluster",),
        )


NEMO_IMAGE = re.compile(r"(?:^|/)(nemo:\S+)$")
"""An image of NVIDIA's NeMo repository (nvcr.io/nvidia/nemo:<tag>); other images are the user's own builds."""


def _image_problems(run: RunConfig) -> Iterable[Problem]:
    """A NeMo image whose tag names another release than cluster.container: the plan would target one
    Megatron Bridge and the job run another."""
    image = run.cluster.container_image or ""
    match = NEMO_IMAGE.search(image)
    if run.cluster.executor == "slurm" and match and match.group(1) != run.cluster.container:
        yield Problem(
            "cluster.container_image",
            f"{match.group(1)} is another release than cluster.container={run.cluster.container}; set "
            f"cluster.container={match.group(1)} instead (the image follows it), or give your own image's name",
        )


def check_engine(run: RunConfig) -> Iterable[Problem]:
    p = run.parallel
    if run.engine == "megatron_bridge":
        from optbench.engine.bridge.adapter import BRIDGE_MODELS, bridge_model

        try:
            container = container_of(run)
            yield from moe_problems(run, container)
            yield from graph_problems(run, container)
            yield from recompute_problems(run)
            yield from precision_problems(run, container)
        except UserError as err:
            yield from err.problems
        yield from _image_problems(run)

        if bridge_model(run) is None:
            yield Problem(
                "model",
                f"no Megatron Bridge recipe for model '{run.model.name}' or the model it is a proxy of "
                f"({', '.join(BRIDGE_MODELS)} have one); use engine=local",
                ("engine",),
            )
    if run.engine == "local":
        if (p.tp, p.pp, p.cp, p.ep, p.etp) != (1, 1, 1, 1, 1):
            yield Problem(
                "parallel",
                f"the local engine runs data parallel only, got tp={p.tp} pp={p.pp} cp={p.cp} ep={p.ep} etp={p.etp}; "
                "use parallel=single (and parallel.num_gpus=N for N processes) or engine=megatron_bridge",
                ("engine",),
            )
        if run.cluster.executor != "local":
            yield Problem(
                "cluster",
                f"the local engine runs on this machine; use cluster=local, not {run.cluster.name}",
                ("engine",),
            )
        if run.model.mtp_num_layers:
            yield Problem(
                "model.mtp_num_layers",
                "Hugging Face's DeepSeek-V3 classes have no MTP layer; set it to 0",
                ("engine", "model"),
            )
    if run.data.kind == "indexed" and not run.data.path:
        yield Problem(
            "data.path", "indexed data needs dataset prefixes, e.g. data.path=[/data/corpus_text_document]", ("data",)
        )
    if run.data.kind == "indexed" and not run.data.tokenizer:
        yield Problem("data.tokenizer", "indexed data needs the tokenizer it was built with (path or HF id)", ("data",))
    if p.moe_token_dispatcher == "flex" and p.moe_flex_dispatcher_backend is None:
        yield Problem(
            "parallel.moe_flex_dispatcher_backend",
            "the flex dispatcher needs a backend: deepep or hybridep",
            ("parallel.moe_token_dispatcher",),
        )
    if p.recompute_granularity == "full" and (p.recompute_method is None or not p.recompute_num_layers):
        yield Problem(
            "parallel.recompute_method",
            "full recompute needs recompute_method (uniform/block) and recompute_num_layers",
            ("parallel.recompute_granularity", "parallel.recompute_num_layers"),
        )


def above(value: float, limit: float) -> str:
    """``value`` in whole units, with as many decimals (up to 3) as it takes not to read as ``limit``: an
    estimate of 288.2 GB is "288.2", not "288 GB exceeds the 288 GB HBM"."""
    for digits in range(3):
        text = f"{value:.{digits}f}"
        if float(text) > limit:
            return text
    return f"{value:.3f}"


def check_memory(resolved: ResolvedRun) -> Iterable[Problem]:
    """The per-GPU memory estimate must fit the GPU's HBM (``force=true`` launches anyway)."""
    run = resolved.run
    if run.force or run.cluster.gpu not in gpu_catalog():
        return  # the estimate is not computed: a forced run (a published row, a search point) may never need it
    estimate = resolved.memory
    if estimate.fits or executed_by_nvidia(run):
        return  # what NVIDIA ran fits, whatever our estimate says; the plan says both
    term = estimate.largest_term
    total = above(estimate.total_gb, estimate.hbm_gb)
    yield Problem(
        "parallel",
        f"estimated memory per GPU {total} GB exceeds the {estimate.hbm_gb:g} GB HBM of "
        f"{run.cluster.gpu} (pipeline rank {estimate.worst_pipeline_rank}; largest term: {term} "
        f"{estimate.breakdown_gb[term]:.0f} GB; estimate +-{100 * estimate.expected_error:.0f} %); use more GPUs, "
        "more pp or ep, recompute or a smaller train.mbs, or set force=true to launch anyway",
        ("train", "model", "precision", "optimizer", "cluster", "force"),
    )


BASIC_CHECKS: tuple[Check, ...] = (check_domains,)
"""Each field on its own."""
FIELD_CHECKS: tuple[Check, ...] = (check_fields, check_model, check_world)
"""Rules between fields that need nothing but the config."""
LAYOUT_CHECKS: tuple[Check, ...] = (
    check_tensor_parallel,
    check_experts,
    check_pipeline,
    check_batch,
    check_optimizer,
    check_precision,
    check_engine,
)
"""Checks that need a whole-number data-parallel size."""


def _checked(
    run: RunConfig, run_id: str | None, like: ResolvedRun | None = None
) -> tuple[list[Problem], ResolvedRun | None]:
    """Every problem with a run, in dependency order: a stage runs only when the ones before found nothing.
    The run is resolved once its config checks pass; the memory check reads the resolved run."""
    for stage in (BASIC_CHECKS, FIELD_CHECKS, LAYOUT_CHECKS):
        problems = [problem for check in stage for problem in check(run)]
        if problems:
            return problems, None
    resolved = resolve(run, run_id, like)
    return list(check_memory(resolved)), resolved


def collect_problems(run: RunConfig) -> list[Problem]:
    """Every problem with a run (see :func:`validate`)."""
    return _checked(run, None)[0]


def validate(run: RunConfig, run_id: str | None = None, like: ResolvedRun | None = None) -> ResolvedRun:
    """Raise a :class:`UserError` listing every problem, one line each; return the resolved run when valid.

    ``run_id`` and ``like`` (a resolved run whose placement this one may share): see
    :func:`optbench.resolve.resolve`.
    """
    problems, resolved = _checked(run, run_id, like)
    if problems:
        raise UserError(problems)
    assert resolved is not None
    return resolved
