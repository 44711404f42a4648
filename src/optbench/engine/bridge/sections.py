"""Our config, section by section, as Megatron Bridge overrides: (dotted key, typed value) pairs.

Each builder turns one part of :class:`~optbench.config.schema.RunConfig` into the ConfigContainer
fields that express it (parallel and pipeline layout, model shape, precision, optimizer with every Muon
field, DDP, schedule and evaluation, data and tokenizer, logger, checkpoint). The adapter
(:mod:`optbench.engine.bridge.adapter`) puts NVIDIA's preset under them. Pure Python: nothing here imports
Bridge, Megatron Core or torch.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Optional

from optbench.releases import emerging_fields, presets, versions
from optbench.releases.graph_rules import cuda_graph_impl
from optbench.config.field_table import TABLE, bridge_items, bridge_name, value_at
from optbench.config.layout import vpp_size
from optbench.config.schema import MATRIX_OPTIMIZERS, RunConfig
from optbench.common.errors import Problem, UserError
from optbench.runs import checked_run_id

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
        *bridge_items(run, "parallel.tp", "parallel.pp"),
        (bridge_name("parallel.vpp"), vpp if vpp > 1 else None),
        *bridge_items(run, "parallel.cp", "parallel.ep"),
        # Megatron's ETP of a dense model is None ("as TP"): an ETP of 1 beside TP 4 would depart from the recipe.
        (bridge_name("parallel.etp"), p.etp if run.model.num_moe_experts else None),
        *bridge_items(
            run,
            "parallel.sequence_parallel",
            "parallel.pipeline_layout",
            "parallel.recompute_granularity",
            "parallel.recompute_modules",
            "parallel.recompute_method",
            "parallel.recompute_num_layers",
            "parallel.moe_token_dispatcher",
        ),
    ]
    if p.pipeline_layout:
        # Megatron Core refuses an explicit layout beside the account-for-embedding/loss split some recipes turn on
        # (Llama 3, Qwen3 235B-A22B: TransformerConfig raises "pipeline_model_parallel_layout cannot be set with
        # other pipeline layout arguments"); the layout already places the embedding and the loss.
        items += [(flag, False) for flag in presets.ACCOUNT_FLAGS]
    if p.moe_token_dispatcher == "flex":
        # As Bridge's apply_flex_dispatcher_backend: the flex dispatcher cannot overlap the shared expert.
        items += [
            *bridge_items(run, "parallel.moe_flex_dispatcher_backend"),
            ("model.moe_shared_expert_overlap", False),
        ]
    items += [
        (bridge_name("parallel.cuda_graph_impl"), cuda_graph_impl(run)),
        *bridge_items(run, "parallel.cuda_graph_scope", "parallel.tp_comm_overlap"),
    ]
    if p.ep_comm_overlap:  # only when on: the releases' CommOverlapConfig leaves it None, not False, when off
        items += bridge_items(run, "parallel.ep_comm_overlap")
    if p.megatron_fsdp:
        # Only when on, with what NVIDIA's launcher sets beside it (scripts/performance utils/overrides.py
        # _set_megatron_fsdp_overrides, Bridge 0.3-0.6): ZeRO-3 sharding, no averaging inside the collective, weights
        # built on the meta device. Bridge saves and loads Megatron FSDP checkpoints only as fsdp_dtensor.
        items += [
            *bridge_items(run, "parallel.megatron_fsdp"),
            ("ddp.data_parallel_sharding_strategy", "optim_grads_params"),
            ("ddp.average_in_collective", False),
            ("model.init_model_with_meta_device", True),
            ("checkpoint.ckpt_format", "fsdp_dtensor"),
        ]
    return items


ONLY_WHEN_ON = ("parallel.ep_comm_overlap", "precision.fp8_output_proj", "parallel.megatron_fsdp")
"""Switches emitted only when on (see _parallel, _precision: the FP8 output projection is a field of Core 0.18+
only). When a preset turns one on and the run turns it off, the preset's setting must not win:
:func:`optbench.engine.bridge.adapter._ours_under` writes the run's off in its place."""


def switched_off(run: RunConfig) -> dict[str, bool]:
    """The Bridge names of the ONLY_WHEN_ON switches the run turns off, each with its value (False)."""
    return {name: False for key in ONLY_WHEN_ON if not value_at(run, key)[1] for name in TABLE[key].bridge}


def _model(run: RunConfig) -> list[Item]:
    """The model's shape, in Megatron names, so that a changed model.* value reaches the run."""
    m = run.model
    fields = ["num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "qk_layernorm"]
    if m.multi_latent_attention:
        fields += [
            "q_lora_rank",
            "kv_lora_rank",
            "qk_head_dim",
            "qk_pos_emb_head_dim",
            "v_head_dim",
            "rotary_scaling_factor",
        ]
    else:
        fields += ["num_query_groups", "kv_channels"]
    items = bridge_items(run, *(f"model.{name}" for name in fields))
    if m.num_moe_experts:
        dense = m.first_k_dense_layers
        items += [
            *bridge_items(
                run,
                "model.num_moe_experts",
                "model.moe_ffn_hidden_size",
                "model.moe_shared_expert_intermediate_size",
                "model.moe_router_topk",
            ),
            (bridge_name("model.first_k_dense_layers"), [0] * dense + [1] * (m.num_layers - dense) if dense else 1),
            *bridge_items(
                run,
                "model.moe_router_score_function",
                "model.moe_router_topk_scaling_factor",
                "model.moe_router_num_groups",
                "model.moe_router_group_topk",
                "model.moe_router_enable_expert_bias",
                "model.moe_aux_loss_coeff",
            ),
        ]
    return (
        items
        + bridge_items(
            run,
            "model.vocab_size",
            "model.make_vocab_size_divisible_by",
            "model.mtp_num_layers",
            "model.share_embeddings_and_output_weights",
            "model.rotary_base",
            "model.layernorm_epsilon",
            "model.init_method_std",
        )
        + bridge_items(run, "train.seq_length", section="model")
    )


def _precision(run: RunConfig) -> list[Item]:
    """Field overrides on top of the preset; MixedPrecisionConfig.setup copies them to model, optimizer and DDP."""
    items = bridge_items(run, "precision.fp8")
    if run.precision.fp8_recipe is not None:
        items += bridge_items(run, "precision.fp8_recipe")
    if run.precision.fp8 is not None:
        items += bridge_items(run, "precision.fp8_dot_product_attention")
    if run.precision.fp8_output_proj:
        items += bridge_items(run, "precision.fp8_output_proj")
    if run.precision.fp4 is not None:
        items += bridge_items(run, "precision.fp4", "precision.fp4_recipe")
    if versions.has_field(versions.container_of(run), "mixed_precision.fp4_param_gather"):
        # A field of Bridge 0.4.2+ only, whose NVFP4 preset turns it on: written there whatever its value, so that an
        # off typed by the user reaches the run.
        items += bridge_items(run, "precision.fp4_param_gather", section="mixed_precision")
    # fp8_param mirrors fp8_param_gather (MixedPrecisionConfig keeps them in sync; the schema sets both so that
    # order cannot matter). grad_reduce_in_fp32: the preset says True and setup() would copy it over
    # ddp.grad_reduce_in_fp32, so it must match ours.
    return items + bridge_items(
        run,
        "precision.fp8_param_gather",
        "precision.reuse_grad_buf_for_mxfp8_param_ag",
        "optimizer.grad_reduce_in_fp32",
        section="mixed_precision",
    )


def _optimizer(run: RunConfig) -> list[Item]:
    o = run.optimizer
    container = versions.container_of(run)
    items: list[Item] = [
        *emerging_fields.optimizer_name_items(run, container),
        *bridge_items(
            run,
            "optimizer.lr",
            "optimizer.min_lr",
            "optimizer.weight_decay",
            "optimizer.clip_grad",
            "optimizer.adam_beta1",
            "optimizer.adam_beta2",
            "optimizer.adam_eps",
            "optimizer.use_distributed_optimizer",
            section="optimizer",
        ),
    ]
    if run.intent == "train":
        # The optimizer timer without a barrier: it measures this rank's optimizer step, not stragglers.
        items.append(("optimizer.barrier_with_L1_time", False))
    items += emerging_fields.own_items(run, container)
    if o.name in MATRIX_OPTIMIZERS:
        items += [
            # DeepSeek-V3's recipe keeps Adam's moments in bf16 (precision-aware optimizer), which Megatron
            # allows for Adam only; the emerging optimizers keep fp32 state (found by the conformance test).
            ("optimizer.use_precision_aware_optimizer", False),
            *[
                (f"optimizer.{name}", "torch.float32")
                for name in ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
            ],
        ]
    if o.muon_family and o.muon.qk_clip:  # MuonClip: a TransformerConfig setting; Bridge calls clip_qk after the step
        items += bridge_items(
            run, "optimizer.muon.qk_clip", "optimizer.muon.qk_clip_threshold", "optimizer.muon.qk_clip_alpha"
        )
    items += emerging_fields.scalar_items(run)
    return items


def _ddp(run: RunConfig) -> list[Item]:
    o = run.optimizer
    param_gather = o.overlap_param_gather or o.layer_wise_overlap
    ddp_gather, comm_gather = TABLE["optimizer.overlap_param_gather"].bridge
    return [
        *bridge_items(run, "optimizer.use_distributed_optimizer", "optimizer.overlap_grad_reduce", section="ddp"),
        (ddp_gather, param_gather),
        *bridge_items(run, "optimizer.grad_reduce_in_fp32", section="ddp"),
        # CommOverlapConfig.setup copies its data-parallel settings over ddp (distributed optimizer only):
        # give it ours so that it cannot turn an overlap back on.
        *bridge_items(run, "optimizer.overlap_grad_reduce", section="comm_overlap"),
        (comm_gather, param_gather),
    ]


def _schedule(run: RunConfig) -> list[Item]:
    t = run.train
    return [
        *bridge_items(run, "train.iters", "train.gbs", "train.mbs", "train.seed"),
        ("scheduler.lr_decay_style", "cosine"),
        *bridge_items(run, "train.warmup_iters"),
        (bridge_name("train.lr_decay_iters"), t.lr_decay_iters or t.iters),
        # Megatron applies the scheduler's weight decay every step, not optimizer.weight_decay
        # (Bridge's helpers set 0.1 there and 0.033 here): both say what our config says.
        *bridge_items(run, "optimizer.weight_decay", section="scheduler"),
        ("scheduler.weight_decay_incr_style", "constant"),
    ] + _evaluation(run)


def _evaluation(run: RunConfig) -> list[Item]:
    """train.eval_*: as configured; unset, intent=train evaluates with Bridge's defaults, reproduce keeps the preset's
    0."""
    items = []
    for key in ("train.eval_interval", "train.eval_iters"):
        name = bridge_name(key)
        value = value_at(run, key)[1]
        if value is None and run.intent == "train":
            value = presets.TRAIN_EVAL_DEFAULTS.get(name)
        if value is not None:
            items.append((name, value))
    return items


def _data(run: RunConfig) -> list[Item]:
    d, m = run.data, run.model
    has_field = partial(versions.has_field, versions.container_of(run))
    items = [(bridge_name("train.seq_length", has_field), run.train.seq_length)] + bridge_items(run, "data.seed")
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
            *bridge_items(run, "data.path"),
            ("dataset.blend_per_split", None),
            *bridge_items(run, "data.split"),
            ("tokenizer.tokenizer_type", "HuggingFaceTokenizer"),
            (bridge_name("data.tokenizer"), _checked_text("data.tokenizer", d.tokenizer)),
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
        # Bridge sends its TFLOP/s to wandb only through the tensorboard writer (log_throughput sets both).
        *bridge_items(run, "train.log_interval", "logger.log_throughput"),
        ("logger.tensorboard_dir", str(results / "runs" / run_id / "tensorboard")),
        ("logger.save_config_filepath", str(results / "runs" / run_id / "bridge_config.yaml")),
        *([("logger.timing_log_level", TRAIN_TIMING_LOG_LEVEL)] if run.intent == "train" else []),
        *[
            (bridge_name(key), _checked_text(key, value_at(run, key)[1]) if wandb_on else None)
            for key in ("logger.wandb_project", "logger.wandb_entity")
        ],
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
        *bridge_items(run, "train.save_interval"),
        (bridge_name("train.async_save"), t.async_save and saving),
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
