"""Our config, section by section, as Megatron Bridge overrides: (dotted key, typed value) pairs.

Each builder turns one part of :class:`~optbench.config.schema.RunConfig` into the ConfigContainer
fields that express it (parallel and pipeline layout, model shape, precision, optimizer with every Muon
field, DDP, schedule and evaluation, data and tokenizer, logger, checkpoint). The adapter
(:mod:`optbench.bridge.adapter`) puts NVIDIA's preset under them. Pure Python: nothing here imports
Bridge, Megatron Core or torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from optbench.bridge import muon_fields
from optbench.releases import presets, versions
from optbench.config.data_path import dataset_blend
from optbench.config.layout import vpp_size
from optbench.config.schema import RunConfig
from optbench.errors import Problem, UserError
from optbench.runs import checked_run_id

NS_PRECISION_ON_GPU = "medium"
"""optimizer.muon.fp32_matmul_prec=auto on a GPU: bf16 Newton-Schulz products, Bridge's default."""

TRAIN_TIMING_LOG_LEVEL = 1
"""intent=train: Megatron times the optimizer step only from timing level 1 (the callback reads that timer).
intent=reproduce keeps the preset's level 0: level 1 adds a device synchronisation per timer per step."""


def _checked_text(field: str, value: Optional[str]) -> Optional[str]:
    """Free text from the config that ends up in an override: no interpolation, no control characters."""
    if value is not None and ("${" in value or any(ord(ch) < 32 for ch in value)):
        raise UserError(Problem(field, "must not contain '${' or control characters (it is passed to Megatron Bridge)"))
    return value


# ---------------------------------------------------------------------------------------------
# Overrides, section by section (typed values; strings are made by bridge_overrides)
# ---------------------------------------------------------------------------------------------

Item = tuple[str, Any]


def _results_root(run: RunConfig) -> Path:
    return Path(run.results_dir).resolve()


def _parallel(run: RunConfig) -> list[Item]:
    p = run.parallel
    vpp = vpp_size(run)
    items: list[Item] = [
        ("model.tensor_model_parallel_size", p.tp),
        ("model.pipeline_model_parallel_size", p.pp),
        ("model.virtual_pipeline_model_parallel_size", vpp if vpp > 1 else None),
        ("model.context_parallel_size", p.cp),
        ("model.expert_model_parallel_size", p.ep),
        ("model.expert_tensor_parallel_size", p.etp),
        ("model.sequence_parallel", p.sequence_parallel),
        ("model.pipeline_model_parallel_layout", [list(stage) for stage in p.pipeline_layout] if p.pipeline_layout else None),
        ("model.recompute_granularity", p.recompute_granularity),
        ("model.recompute_modules", list(p.recompute_modules) if p.recompute_modules is not None else None),
        ("model.recompute_method", p.recompute_method),
        ("model.recompute_num_layers", p.recompute_num_layers),
        ("model.moe_token_dispatcher_type", p.moe_token_dispatcher),
    ]
    if p.moe_token_dispatcher == "flex":
        # As Bridge's apply_flex_dispatcher_backend: the flex dispatcher cannot overlap the shared expert.
        items += [
            ("model.moe_flex_dispatcher_backend", p.moe_flex_dispatcher_backend),
            ("model.moe_shared_expert_overlap", False),
        ]
    items += [
        ("model.cuda_graph_impl", p.cuda_graph_impl or ("transformer_engine" if p.cuda_graph_scope else "none")),
        ("model.cuda_graph_scope", list(p.cuda_graph_scope)),
        ("comm_overlap.tp_comm_overlap", p.tp_comm_overlap),
    ]
    return items


def _model(run: RunConfig) -> list[Item]:
    """The model's shape, in Megatron names, so that a changed model.* value reaches the run."""
    m = run.model
    items: list[Item] = [
        ("model.num_layers", m.num_layers),
        ("model.hidden_size", m.hidden_size),
        ("model.ffn_hidden_size", m.ffn_hidden_size),
        ("model.num_attention_heads", m.num_attention_heads),
        ("model.qk_layernorm", m.qk_layernorm),
    ]
    if m.multi_latent_attention:
        items += [
            ("model.q_lora_rank", m.q_lora_rank),
            ("model.kv_lora_rank", m.kv_lora_rank),
            ("model.qk_head_dim", m.qk_head_dim),
            ("model.qk_pos_emb_head_dim", m.qk_pos_emb_head_dim),
            ("model.v_head_dim", m.v_head_dim),
            ("model.rotary_scaling_factor", m.rotary_scaling_factor),
        ]
    else:
        items += [("model.num_query_groups", m.num_query_groups), ("model.kv_channels", m.kv_channels)]
    if m.num_moe_experts:
        dense = m.first_k_dense_layers
        items += [
            ("model.num_moe_experts", m.num_moe_experts),
            ("model.moe_ffn_hidden_size", m.moe_ffn_hidden_size),
            ("model.moe_shared_expert_intermediate_size", m.moe_shared_expert_intermediate_size or None),
            ("model.moe_router_topk", m.moe_router_topk),
            ("model.moe_layer_freq", [0] * dense + [1] * (m.num_layers - dense) if dense else 1),
            ("model.moe_router_score_function", m.moe_router_score_function),
            ("model.moe_router_topk_scaling_factor", m.moe_router_topk_scaling_factor),
            ("model.moe_router_num_groups", m.moe_router_num_groups),
            ("model.moe_router_group_topk", m.moe_router_group_topk),
            ("model.moe_router_enable_expert_bias", m.moe_router_enable_expert_bias),
            ("model.moe_aux_loss_coeff", m.moe_aux_loss_coeff),
        ]
    items += [
        ("model.vocab_size", m.vocab_size),
        ("model.make_vocab_size_divisible_by", m.make_vocab_size_divisible_by),
        ("model.mtp_num_layers", m.mtp_num_layers or None),
        ("model.share_embeddings_and_output_weights", m.share_embeddings_and_output_weights),
        ("model.rotary_base", m.rotary_base),
        ("model.layernorm_epsilon", m.layernorm_epsilon),
        ("model.init_method_std", m.init_method_std),
        ("model.seq_length", run.train.seq_length),
    ]
    return items


def _precision(run: RunConfig) -> list[Item]:
    """Field overrides on top of the preset; MixedPrecisionConfig.setup copies them to model, optimizer and DDP."""
    pr, o = run.precision, run.optimizer
    items: list[Item] = [("mixed_precision.fp8", pr.fp8)]
    if pr.fp8_recipe is not None:
        items.append(("mixed_precision.fp8_recipe", pr.fp8_recipe))
    items += [
        # fp8_param mirrors fp8_param_gather (MixedPrecisionConfig keeps them in sync; set both so order cannot matter).
        ("mixed_precision.fp8_param_gather", pr.fp8_param_gather),
        ("mixed_precision.fp8_param", pr.fp8_param_gather),
        ("mixed_precision.reuse_grad_buf_for_mxfp8_param_ag", pr.reuse_grad_buf_for_mxfp8_param_ag),
        # The preset says True; setup() would copy it over ddp.grad_reduce_in_fp32, so it must match ours.
        ("mixed_precision.grad_reduce_in_fp32", o.grad_reduce_in_fp32),
    ]
    return items


def _optimizer(run: RunConfig) -> list[Item]:
    o = run.optimizer
    container = versions.container_of(run)
    items: list[Item] = [
        *muon_fields.optimizer_name_items(run, container),
        ("optimizer.lr", o.lr),
        ("optimizer.min_lr", o.min_lr),
        ("optimizer.weight_decay", o.weight_decay),
        ("optimizer.clip_grad", o.clip_grad),
        ("optimizer.adam_beta1", o.adam_beta1),
        ("optimizer.adam_beta2", o.adam_beta2),
        ("optimizer.adam_eps", o.adam_eps),
        ("optimizer.use_distributed_optimizer", o.use_distributed_optimizer),
    ]
    if run.intent == "train":
        # The optimizer timer without a barrier: it measures this rank's optimizer step, not stragglers.
        items.append(("optimizer.barrier_with_L1_time", False))
    muon = o.muon
    if o.name == "muon" and muon is not None:
        precision = NS_PRECISION_ON_GPU if muon.fp32_matmul_prec == "auto" else muon.fp32_matmul_prec
        items += [
            *muon_fields.muon_items(run, container, precision),
            # DeepSeek-V3's recipe keeps Adam's moments in bf16 (precision-aware optimizer), which Megatron
            # allows for Adam only; Muon keeps fp32 state (found by the conformance test against real Bridge).
            ("optimizer.use_precision_aware_optimizer", False),
            *[(f"optimizer.{name}", "torch.float32") for name in ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")],
        ]
        if muon.qk_clip:  # MuonClip: a TransformerConfig setting; Bridge's train loop calls clip_qk after the step
            items += [
                ("model.qk_clip", True),
                ("model.qk_clip_threshold", muon.qk_clip_threshold),
                ("model.qk_clip_alpha", muon.qk_clip_alpha),
            ]
    return items


def _ddp(run: RunConfig) -> list[Item]:
    o = run.optimizer
    param_gather = o.overlap_param_gather or muon_fields.layer_wise_overlap(run)
    return [
        ("ddp.use_distributed_optimizer", o.use_distributed_optimizer),
        ("ddp.overlap_grad_reduce", o.overlap_grad_reduce),
        ("ddp.overlap_param_gather", param_gather),
        ("ddp.grad_reduce_in_fp32", o.grad_reduce_in_fp32),
        # CommOverlapConfig.setup copies its data-parallel settings over ddp (distributed optimizer only):
        # give it ours so that it cannot turn an overlap back on.
        ("comm_overlap.overlap_grad_reduce", o.overlap_grad_reduce),
        ("comm_overlap.overlap_param_gather", param_gather),
    ]


def _schedule(run: RunConfig) -> list[Item]:
    t, o = run.train, run.optimizer
    return [
        ("train.train_iters", t.iters),
        ("train.global_batch_size", t.gbs),
        ("train.micro_batch_size", t.mbs),
        ("rng.seed", t.seed),
        ("scheduler.lr_decay_style", "cosine"),
        ("scheduler.lr_warmup_iters", t.warmup_iters),
        ("scheduler.lr_decay_iters", t.lr_decay_iters or t.iters),
        # Megatron applies the scheduler's weight decay every step, not optimizer.weight_decay
        # (Bridge's helpers set 0.1 there and 0.033 here): both say what our config says.
        ("scheduler.start_weight_decay", o.weight_decay),
        ("scheduler.end_weight_decay", o.weight_decay),
        ("scheduler.weight_decay_incr_style", "constant"),
    ] + _evaluation(run)


def _evaluation(run: RunConfig) -> list[Item]:
    """train.eval_*: as configured; unset, intent=train evaluates with Bridge's defaults, reproduce keeps the preset's 0."""
    items = []
    for name in ("eval_interval", "eval_iters"):
        value = getattr(run.train, name)
        if value is None and run.intent == "train":
            value = presets.TRAIN_EVAL_DEFAULTS.get(f"train.{name}")
        if value is not None:
            items.append((f"train.{name}", value))
    return items


def _data(run: RunConfig) -> list[Item]:
    d, m = run.data, run.model
    items: list[Item] = [("dataset.sequence_length", run.train.seq_length), ("dataset.random_seed", d.seed)]
    if d.kind == "mock":
        return items + [
            ("dataset.blend", None),
            ("dataset.blend_per_split", None),
            ("tokenizer.tokenizer_type", "NullTokenizer"),
            ("tokenizer.tokenizer_model", None),
            ("tokenizer.vocab_size", m.vocab_size),
        ]
    if d.kind == "indexed":
        return items + [
            ("dataset.blend", dataset_blend(d.path)),
            ("dataset.blend_per_split", None),
            ("dataset.split", d.split),
            ("tokenizer.tokenizer_type", "HuggingFaceTokenizer"),
            ("tokenizer.tokenizer_model", _checked_text("data.tokenizer", d.tokenizer)),
        ]
    raise UserError(
        Problem("data", f"Megatron Bridge reads mock or indexed data, not '{d.kind}'; use data=mock or data=indexed")
    )


def job_run_id(run: RunConfig) -> str:
    """The run id a Bridge job names its folders with, fixed when the run was resolved."""
    if run.run_id is None:
        raise ValueError("a Bridge job's run id is fixed by optbench.resolve.resolve; resolve the run first")
    return checked_run_id(run.run_id)


def _logger(run: RunConfig) -> list[Item]:
    lg = run.logger
    results = _results_root(run)
    run_id = job_run_id(run)
    wandb_on = lg.wandb_mode != "disabled"
    return [
        ("logger.log_interval", run.train.log_interval),
        ("logger.log_throughput", lg.log_throughput),
        # Bridge sends its TFLOP/s to wandb only through the tensorboard writer.
        ("logger.log_throughput_to_tensorboard", lg.log_throughput),
        ("logger.tensorboard_dir", str(results / "runs" / run_id / "tensorboard")),
        ("logger.save_config_filepath", str(results / "runs" / run_id / "bridge_config.yaml")),
        *([("logger.timing_log_level", TRAIN_TIMING_LOG_LEVEL)] if run.intent == "train" else []),
        ("logger.wandb_project", _checked_text("logger.wandb_project", lg.wandb_project) if wandb_on else None),
        ("logger.wandb_entity", _checked_text("logger.wandb_entity", lg.wandb_entity) if wandb_on else None),
        ("logger.wandb_exp_name", run_id),
        ("logger.wandb_save_dir", str(results / "wandb")),
    ]


def checkpoint_dir(run: RunConfig) -> Path:
    """Where checkpoints of the run go: train.checkpoint_dir, else <results>/checkpoints/<run_id>."""
    if run.train.checkpoint_dir:
        return Path(_checked_text("train.checkpoint_dir", run.train.checkpoint_dir) or "").resolve()
    return _results_root(run) / "checkpoints" / job_run_id(run)


def _checkpoint(run: RunConfig) -> list[Item]:
    t = run.train
    directory = str(checkpoint_dir(run))
    saving = t.save_interval is not None
    return [
        # A throughput run (no save_interval) writes no checkpoint, not even a final one.
        ("checkpoint.save", directory if saving else None),
        ("checkpoint.save_interval", t.save_interval),
        ("checkpoint.async_save", t.async_save and saving),
        # Only resume=true loads: a fresh run never picks up a stale checkpoint silently.
        ("checkpoint.load", directory if run.resume else None),
    ]


SECTION_BUILDERS = (_parallel, _model, _precision, _optimizer, _ddp, _schedule, _data, _logger, _checkpoint)
"""Override groups, in the order they are applied."""


def our_items(run: RunConfig) -> list[Item]:
    """The overrides our config describes, section by section."""
    if run.engine != "megatron_bridge":
        raise UserError(Problem("engine", f"Bridge overrides exist for engine=megatron_bridge, not '{run.engine}'"))
    return [item for builder in SECTION_BUILDERS for item in builder(run)]
