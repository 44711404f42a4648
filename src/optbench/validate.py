"""Pre-flight validation: every rule Megatron (or our local engine) would enforce later, checked
before anything is launched, each failure one line that names the field and the fix.

Checks run in dependency order: value ranges and enumerations first, then the world-size
arithmetic, and the rules that need a valid data-parallel size only when it is valid.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from optbench.config import schema
from optbench.config.layout import gpus_per_node, vpp_size
from optbench.config.schema import RunConfig
from optbench.errors import Problem, UserError
from optbench.hardware import gpu_catalog

Check = Callable[[RunConfig], Iterable[Problem]]


def _choice(field: str, value: object, allowed: Iterable[str]) -> Iterable[Problem]:
    allowed = tuple(allowed)
    if value not in allowed:
        yield Problem(field, f"'{value}' is not one of {', '.join(allowed)}")


def _positive(field: str, value: int | float | None, minimum: int | float = 1) -> Iterable[Problem]:
    if value is not None and value < minimum:
        yield Problem(field, f"must be at least {minimum}, got {value}")


def check_choices(run: RunConfig) -> Iterable[Problem]:
    yield from _choice("engine", run.engine, schema.ENGINES)
    yield from _choice("model.architecture", run.model.architecture, schema.ARCHITECTURES)
    yield from _choice("optimizer.name", run.optimizer.name, schema.OPTIMIZERS)
    yield from _choice("precision.name", run.precision.name, schema.PRECISIONS)
    yield from _choice("precision.params_dtype", run.precision.params_dtype, ("bf16", "fp16"))
    yield from _choice("precision.peak", run.precision.peak, ("bf16", "fp8"))
    yield from _choice("parallel.moe_token_dispatcher", run.parallel.moe_token_dispatcher, schema.DISPATCHERS)
    if run.parallel.moe_flex_dispatcher_backend is not None:
        yield from _choice(
            "parallel.moe_flex_dispatcher_backend", run.parallel.moe_flex_dispatcher_backend, schema.FLEX_BACKENDS
        )
    if run.parallel.recompute_granularity is not None:
        yield from _choice(
            "parallel.recompute_granularity", run.parallel.recompute_granularity, schema.RECOMPUTE_GRANULARITIES
        )
    yield from _choice("data.kind", run.data.kind, schema.DATA_KINDS)
    yield from _choice("logger.wandb_mode", run.logger.wandb_mode, schema.WANDB_MODES)
    yield from _choice("cluster.executor", run.cluster.executor, schema.EXECUTORS)
    known_gpus = ("auto", "cpu", *gpu_catalog())
    yield from _choice("cluster.gpu", run.cluster.gpu, known_gpus)
    muon = run.optimizer.muon
    if muon is not None:
        yield from _choice("optimizer.muon.coefficients", muon.coefficients, schema.MUON_COEFFICIENTS)
        yield from _choice("optimizer.muon.scale_mode", muon.scale_mode, schema.MUON_SCALE_MODES)
        yield from _choice("optimizer.muon.fp32_matmul_prec", muon.fp32_matmul_prec, schema.MUON_MATMUL_PRECISIONS)
        yield from _choice("optimizer.muon.tp_mode", muon.tp_mode, schema.MUON_TP_MODES)
        yield from _choice("optimizer.muon.assignment", muon.assignment, schema.MUON_ASSIGNMENTS)


def check_ranges(run: RunConfig) -> Iterable[Problem]:
    p, t, m = run.parallel, run.train, run.model
    for name in ("num_gpus", "tp", "pp", "cp", "ep", "etp"):
        yield from _positive(f"parallel.{name}", getattr(p, name))
    yield from _positive("parallel.vpp", p.vpp)
    for name in ("gbs", "mbs", "seq_length", "iters", "log_interval"):
        yield from _positive(f"train.{name}", getattr(t, name))
    yield from _positive("train.warmup_iters", t.warmup_iters, 0)
    yield from _positive("train.lr_decay_iters", t.lr_decay_iters)
    yield from _positive("train.save_interval", t.save_interval)
    for name in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size", "make_vocab_size_divisible_by"):
        yield from _positive(f"model.{name}", getattr(m, name))
    yield from _positive("model.mtp_num_layers", m.mtp_num_layers, 0)
    yield from _positive("cluster.gpus_per_node", run.cluster.gpus_per_node)
    if run.step_time_s is not None and run.step_time_s <= 0:
        yield Problem("step_time_s", f"must be a positive number of seconds, got {run.step_time_s}")
    o = run.optimizer
    if o.lr <= 0:
        yield Problem("optimizer.lr", f"must be positive, got {o.lr}")
    if not 0 <= o.min_lr <= o.lr:
        yield Problem("optimizer.min_lr", f"must lie in [0, optimizer.lr={o.lr}], got {o.min_lr}")
    for name in ("adam_beta1", "adam_beta2"):
        if not 0 <= getattr(o, name) < 1:
            yield Problem(f"optimizer.{name}", f"must lie in [0, 1), got {getattr(o, name)}")
    if o.muon is not None:
        if o.muon.ns_steps < 1:
            yield Problem("optimizer.muon.ns_steps", f"must be at least 1, got {o.muon.ns_steps}")
        if not 0 <= o.muon.momentum < 1:
            yield Problem("optimizer.muon.momentum", f"must lie in [0, 1), got {o.muon.momentum}")
        if o.muon.extra_scale_factor <= 0:
            yield Problem("optimizer.muon.extra_scale_factor", f"must be positive, got {o.muon.extra_scale_factor}")


def check_model(run: RunConfig) -> Iterable[Problem]:
    m = run.model
    if m.multi_latent_attention:
        for name in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            if not getattr(m, name):
                yield Problem(f"model.{name}", "multi-latent attention needs it; give a positive size")
    else:
        if not m.kv_channels or not m.num_query_groups:
            yield Problem("model.kv_channels", "GQA attention needs kv_channels and num_query_groups")
        elif m.num_attention_heads % m.num_query_groups:
            yield Problem(
                "model.num_query_groups",
                f"{m.num_attention_heads} heads do not split into {m.num_query_groups} query groups",
            )
    if m.num_moe_experts:
        if not m.moe_ffn_hidden_size:
            yield Problem("model.moe_ffn_hidden_size", "a MoE model needs the expert FFN width")
        if not 1 <= m.moe_router_topk <= m.num_moe_experts:
            yield Problem("model.moe_router_topk", f"must lie in [1, {m.num_moe_experts}] experts")
        if not 0 <= m.first_k_dense_layers <= m.num_layers:
            yield Problem("model.first_k_dense_layers", f"must lie in [0, num_layers={m.num_layers}]")


def check_world(run: RunConfig) -> Iterable[Problem]:
    """world = tp*pp*cp*dp = nodes*gpus_per_node."""
    p = run.parallel
    model_parallel = p.tp * p.pp * p.cp
    if p.num_gpus % model_parallel:
        yield Problem(
            "parallel.num_gpus",
            f"{p.num_gpus} GPUs is not a multiple of tp*pp*cp = {p.tp}*{p.pp}*{p.cp} = {model_parallel}; "
            "choose num_gpus, tp, pp and cp so that dp = num_gpus/(tp*pp*cp) is a whole number",
        )
    per_node = gpus_per_node(run)
    if run.cluster.gpus_per_node and p.num_gpus > per_node and p.num_gpus % per_node:
        yield Problem(
            "parallel.num_gpus",
            f"{p.num_gpus} GPUs do not fill whole {run.cluster.name} nodes of {per_node} GPUs; "
            f"use a multiple of {per_node}",
        )


def _dp(run: RunConfig) -> int:
    p = run.parallel
    return p.num_gpus // (p.tp * p.pp * p.cp)


def check_tensor_parallel(run: RunConfig) -> Iterable[Problem]:
    p, m = run.parallel, run.model
    if m.num_attention_heads % p.tp:
        yield Problem("parallel.tp", f"{m.num_attention_heads} attention heads are not divisible by tp={p.tp}")
    if m.num_query_groups and m.num_query_groups % p.tp:
        yield Problem("parallel.tp", f"{m.num_query_groups} query groups are not divisible by tp={p.tp}")
    if m.first_k_dense_layers and m.ffn_hidden_size % p.tp:
        yield Problem("parallel.tp", f"dense FFN width {m.ffn_hidden_size} is not divisible by tp={p.tp}")
    if m.num_moe_experts and m.moe_ffn_hidden_size and m.moe_ffn_hidden_size % p.etp:
        yield Problem("parallel.etp", f"expert FFN width {m.moe_ffn_hidden_size} is not divisible by etp={p.etp}")
    seq = run.train.seq_length
    if p.sequence_parallel and p.tp > 1 and seq % p.tp:
        yield Problem("train.seq_length", f"{seq} is not divisible by tp={p.tp} under sequence parallelism")
    if p.cp > 1 and seq % (2 * p.cp):
        yield Problem(
            "train.seq_length", f"{seq} is not divisible by 2*cp={2 * p.cp} (load-balanced causal context parallelism)"
        )
    if m.num_moe_experts and p.tp > 1 and p.ep > 1 and not p.sequence_parallel:
        yield Problem(
            "parallel.sequence_parallel",
            "Megatron requires sequence parallelism for MoE with tp > 1 and ep > 1; set parallel.sequence_parallel=true",
        )


def check_experts(run: RunConfig) -> Iterable[Problem]:
    p, m = run.parallel, run.model
    if not m.num_moe_experts:
        if p.ep > 1 or p.etp > 1:
            yield Problem("parallel.ep", f"model {m.name} has no experts; set parallel.ep=1 parallel.etp=1")
        return
    if m.num_moe_experts % p.ep:
        yield Problem("parallel.ep", f"{m.num_moe_experts} experts are not divisible by ep={p.ep}")
    dense_ranks = p.tp * p.cp * _dp(run)
    if dense_ranks % (p.ep * p.etp):
        options = [e for e in range(1, dense_ranks + 1) if dense_ranks % (e * p.etp) == 0 and m.num_moe_experts % e == 0]
        yield Problem(
            "parallel.ep",
            f"ep*etp = {p.ep}*{p.etp} must divide tp*cp*dp = {p.tp}*{p.cp}*{_dp(run)} = {dense_ranks} "
            f"(Megatron's expert layout rule); valid ep here: {', '.join(map(str, options))}",
        )


def check_pipeline(run: RunConfig) -> Iterable[Problem]:
    p, m = run.parallel, run.model
    vpp = vpp_size(run)
    if p.vpp is not None and p.vpp > 1 and p.pp == 1:
        yield Problem("parallel.vpp", "virtual pipeline stages need pp > 1; set parallel.vpp=null or raise parallel.pp")
    stages = p.pp * vpp
    layout = p.pipeline_layout
    if not layout:
        if m.num_layers % stages:
            yield Problem(
                "parallel.pipeline_layout",
                f"{m.num_layers} layers do not split evenly over pp*vpp = {p.pp}*{vpp} = {stages} stages; "
                "give a parallel.pipeline_layout that places every layer once, or change pp/vpp",
            )
        return
    if len(layout) != stages:
        yield Problem(
            "parallel.pipeline_layout", f"has {len(layout)} stages but pp*vpp = {p.pp}*{vpp} = {stages}; give one per stage"
        )
    entries = [e for stage in layout for e in stage]
    unknown = sorted(set(entries) - set(schema.PIPELINE_LAYOUT_ENTRIES))
    if unknown:
        yield Problem(
            "parallel.pipeline_layout",
            f"unknown entries {unknown}; use {', '.join(schema.PIPELINE_LAYOUT_ENTRIES)}",
        )
    decoders = entries.count("decoder")
    if decoders != m.num_layers:
        yield Problem(
            "parallel.pipeline_layout",
            f"places {decoders} decoder layers but the model has {m.num_layers}; place every layer exactly once",
        )
    if entries.count("embedding") != 1 or "embedding" not in layout[0]:
        yield Problem("parallel.pipeline_layout", "needs exactly one 'embedding', in the first stage")
    if entries.count("loss") != 1 or "loss" not in layout[-1]:
        yield Problem("parallel.pipeline_layout", "needs exactly one 'loss', in the last stage")
    if entries.count("mtp") != m.mtp_num_layers or any("mtp" in stage for stage in layout[:-1]):
        yield Problem(
            "parallel.pipeline_layout",
            f"needs {m.mtp_num_layers} 'mtp' entries (model.mtp_num_layers), all in the last stage",
        )


def check_batch(run: RunConfig) -> Iterable[Problem]:
    t, dp = run.train, _dp(run)
    if t.gbs % (t.mbs * dp):
        yield Problem(
            "train.gbs",
            f"{t.gbs} is not a multiple of mbs*dp = {t.mbs}*{dp} = {t.mbs * dp}; "
            f"use e.g. train.gbs={max(1, t.gbs // (t.mbs * dp)) * t.mbs * dp}",
        )


def check_optimizer(run: RunConfig) -> Iterable[Problem]:
    o = run.optimizer
    if o.name == "muon" and o.muon is None:
        yield Problem("optimizer.muon", "optimizer muon needs its settings; select the group with optimizer=muon")
        return
    if o.name == "adamw" and o.muon is not None:
        yield Problem("optimizer.muon", "Muon settings on an AdamW run; select optimizer=muon or drop them")
    if o.name != "muon" or o.muon is None:
        return
    if o.use_distributed_optimizer:
        yield Problem(
            "optimizer.use_distributed_optimizer",
            "Muon refuses the element-wise distributed optimizer (Megatron: 'muon with dist optimizer is not "
            "supported'); set it false, optimizer.muon.layer_wise=true shards Muon's state by whole parameters",
        )
    if o.overlap_param_gather:
        yield Problem(
            "optimizer.overlap_param_gather",
            "Muon has no overlapped parameter all-gather (Bridge sets it false for Muon); set it false",
        )
    if run.precision.params_dtype == "fp16" or run.precision.name == "fp16":
        yield Problem("precision", "Muon does not support fp16 (Megatron: 'muon with fp16 is not supported'); use bf16")
    if o.muon.layer_wise and run.precision.fp8_param_gather:
        yield Problem(
            "precision.fp8_param_gather",
            "incompatible with the layer-wise Muon optimizer; set precision.fp8_param_gather=false",
        )
    if o.muon.layer_wise and run.precision.reuse_grad_buf_for_mxfp8_param_ag:
        yield Problem(
            "precision.reuse_grad_buf_for_mxfp8_param_ag",
            "incompatible with the layer-wise Muon optimizer; set it false",
        )
    if run.engine == "megatron_bridge":
        if o.muon.coefficients != "quintic":
            yield Problem(
                "optimizer.muon.coefficients",
                "Megatron Core 0.16.1 runs the quintic set only (no config field for others); "
                "use quintic, or engine=local for the simple set",
            )
        if o.muon.assignment != "pingpong":
            yield Problem(
                "optimizer.muon.assignment",
                "Megatron's layer-wise optimizer assigns by size ping-pong only; cost_aware runs on engine=local",
            )
        if o.muon.syrk:
            yield Problem(
                "optimizer.muon.syrk", "Megatron Core 0.16.1 has no SYRK Newton-Schulz kernel; syrk=true runs on engine=local"
            )


def check_precision(run: RunConfig) -> Iterable[Problem]:
    fp8 = run.precision.fp8 is not None
    gpu = run.cluster.gpu
    if run.engine == "local" and fp8:
        yield Problem("precision", f"the local engine runs bf16/fp32 only, not {run.precision.name}; use precision=bf16")
        return
    spec = gpu_catalog().get(gpu)
    if spec is None:
        return
    if run.precision.fp8_recipe == "mxfp8" and not spec.mxfp8:
        yield Problem(
            "precision",
            f"mxfp8 needs a Blackwell GPU (SM 10.x); {gpu} ({spec.arch}, SM {spec.compute_capability}) has no MXFP8; "
            "use precision=fp8_cs or precision=bf16",
        )


def check_engine(run: RunConfig) -> Iterable[Problem]:
    p = run.parallel
    if run.engine == "local":
        if (p.tp, p.pp, p.cp, p.ep, p.etp) != (1, 1, 1, 1, 1):
            yield Problem(
                "parallel",
                f"the local engine runs data parallel only, got tp={p.tp} pp={p.pp} cp={p.cp} ep={p.ep} etp={p.etp}; "
                "use parallel=single (and parallel.num_gpus=N for N processes) or engine=megatron_bridge",
            )
        if run.cluster.executor != "local":
            yield Problem("cluster", f"the local engine runs on this machine; use cluster=local, not {run.cluster.name}")
        if run.model.mtp_num_layers:
            yield Problem("model.mtp_num_layers", "Hugging Face's DeepSeek-V3 classes have no MTP layer; set it to 0")
        if run.data.kind == "indexed":
            yield Problem("data", "the local engine reads mock and synthetic data only; use data=synthetic")
    if run.data.kind == "indexed" and not run.data.path:
        yield Problem("data.path", "indexed data needs dataset prefixes, e.g. data.path=[/data/corpus_text_document]")
    if run.data.kind == "indexed" and not run.data.tokenizer:
        yield Problem("data.tokenizer", "indexed data needs the tokenizer it was built with (path or HF id)")
    if p.moe_token_dispatcher == "flex" and p.moe_flex_dispatcher_backend is None:
        yield Problem("parallel.moe_flex_dispatcher_backend", "the flex dispatcher needs a backend: deepep or hybridep")
    if p.recompute_granularity == "full" and (p.recompute_method is None or not p.recompute_num_layers):
        yield Problem(
            "parallel.recompute_method", "full recompute needs recompute_method (uniform/block) and recompute_num_layers"
        )


def check_memory(run: RunConfig) -> Iterable[Problem]:
    """The per-GPU memory estimate must fit the GPU's HBM (``force=true`` launches anyway)."""
    if run.force or run.cluster.gpu not in gpu_catalog():
        return
    from optbench.accounting.memory import estimate_memory  # the estimate needs a valid layout

    estimate = estimate_memory(run)
    if estimate.fits:
        return
    term = estimate.largest_term
    yield Problem(
        "parallel",
        f"estimated memory per GPU {estimate.total_gb:.0f} GB exceeds the {estimate.hbm_gb:g} GB HBM of "
        f"{run.cluster.gpu} (pipeline rank {estimate.worst_pipeline_rank}; largest term: {term} "
        f"{estimate.breakdown_gb[term]:.0f} GB; estimate +-{100 * estimate.expected_error:.0f} %); use more GPUs, "
        "more pp or ep, recompute or a smaller train.mbs, or set force=true to launch anyway",
    )


BASIC_CHECKS: tuple[Check, ...] = (check_choices, check_ranges, check_model, check_world)
"""Checks that need nothing but the config."""
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


def collect_problems(run: RunConfig) -> list[Problem]:
    """Every problem with a run, in dependency order."""
    problems = [problem for check in BASIC_CHECKS for problem in check(run)]
    if problems:
        return problems
    problems = [problem for check in LAYOUT_CHECKS for problem in check(run)]
    if problems:
        return problems
    return list(check_memory(run))


def validate(run: RunConfig) -> None:
    """Raise a :class:`UserError` listing every problem, one line each; return quietly when valid."""
    problems = collect_problems(run)
    if problems:
        raise UserError(problems)
