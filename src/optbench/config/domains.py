"""The domain of every field of the schema: what values mean something, checked before any work.

The schema (:mod:`optbench.config.schema`) gives each field a type; OmegaConf enforces it while
composing. This module gives each field its *domain* on top of the type: the range of a size, a
finite float with its bounds, the words of an enumeration, the shape of a Slurm time or a wandb
name, a folder that can hold results. :data:`DOMAINS` has one entry per leaf field of
:class:`~optbench.config.schema.RunConfig` (a test keeps the two in step), and :func:`check_domains`
walks a composed run and yields one :class:`~optbench.errors.Problem` per value outside its domain,
each naming the field, the value and what to type instead.

Upper bounds are generous for real clusters and models (32,768 GPUs, 1024 layers, 4096 experts)
and exist so that no input can make planning or validation take unbounded time or memory: planning
grows with the world size and with the routed-expert tensors (layers x experts, bounded jointly by
:data:`MAX_EXPERT_LAYERS` in validation), and at these bounds a plan takes under 6 s on a 2-core CPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields, is_dataclass
from typing import Any

from optbench.config import schema
from optbench.config.domain_types import (
    MAX_TEXT,
    Choice,
    Flag,
    Folder,
    Integer,
    Items,
    Real,
    Table,
    Text,
)
from optbench.errors import Problem
from optbench.outputs import MAX_PATH

MAX_EXPERT_LAYERS = 32768
"""Most routed-expert layers (num_layers x num_moe_experts; Kimi K2: 23,040) a plan enumerates."""


# Sizes shared by several fields.
LAYERS = Integer(1, 1024)
WIDTH = Integer(1, 1 << 20)
HEADS = Integer(1, 4096)
HEAD_DIM = Integer(1, 16384)
RANK = Integer(1, 65536)
STEPS = Integer(1, 1_000_000_000)
SEED = Integer(0, (1 << 32) - 1)
PARALLEL = Integer(1, 1024)
PROBABILITY = Real(0.0, 1.0, high_open=True)
IDENTIFIER = Text(64, r"[A-Za-z0-9][A-Za-z0-9_.-]*", "a name of letters, digits, '.', '_' and '-'", min_len=1)
WANDB_NAME = Text(128, r"[^/\\#?%:]+", "a wandb name (1-128 characters, none of / \\ # ? % :)", min_len=1)
SLURM_NAME = Text(256, r"[A-Za-z0-9_.,+-]+", "a Slurm name (letters, digits, '_', '.', ',', '+', '-')", min_len=1)
SLURM_TIME = Text(
    32,
    r"UNLIMITED|INFINITE|\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}",
    "a Slurm time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS",
    min_len=1,
)
SLURM_MEMORY = Text(16, r"\d+[KMGT]?", "a Slurm memory size such as 0 (all of the node), 500G or 64000M", min_len=1)
ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def _gpu_words() -> tuple[str, ...]:
    from optbench.hardware import gpu_catalog

    return ("auto", "cpu", *gpu_catalog())


BRIDGE_MIXED_PRECISION_PRESETS = (
    "bf16_mixed",
    "fp16_mixed",
    "bf16_with_fp8_delayed_scaling_mixed",
    "fp16_with_fp8_delayed_scaling_mixed",
    "bf16_with_mxfp8_mixed",
    "fp16_with_mxfp8_mixed",
    "bf16_with_fp8_current_scaling_mixed",
    "fp16_with_fp8_current_scaling_mixed",
    "bf16_with_fp8_subchannel_scaling_mixed",
    "fp16_with_fp8_subchannel_scaling_mixed",
    "bf16_with_nvfp4_mixed",
)
"""Megatron Bridge 0.3.1's registered mixed-precision presets (training/mixed_precision.py), generic ones only."""

RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
"""Megatron Core 0.16.1 TransformerConfig: allowed recompute_modules."""
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
"""Megatron Core 0.16.1 CudaGraphScope values for the transformer_engine implementation."""

DOMAINS: dict[str, Any] = {
    # run
    "recipe": IDENTIFIER,
    "description": Text(),
    "engine": Choice(schema.ENGINES),
    "intent": Choice(schema.INTENTS),
    "run_id": Text(128, r"[A-Za-z0-9][A-Za-z0-9._-]*", "a run id of letters, digits, '.', '_' and '-'", min_len=1),
    "results_dir": Folder(),
    "debug": Flag(),
    "dryrun": Flag(),
    "force": Flag(),
    "resume": Flag(),
    "step_time_s": Real(0.0, 1e6, low_open=True),
    # model
    "model.name": IDENTIFIER,
    "model.architecture": Choice(schema.ARCHITECTURES),
    "model.proxy_of": IDENTIFIER,
    "model.num_layers": LAYERS,
    "model.hidden_size": Integer(1, 65536),
    "model.ffn_hidden_size": WIDTH,
    "model.num_attention_heads": HEADS,
    "model.num_query_groups": HEADS,
    "model.kv_channels": HEAD_DIM,
    "model.qk_layernorm": Flag(),
    "model.multi_latent_attention": Flag(),
    "model.q_lora_rank": RANK,
    "model.kv_lora_rank": RANK,
    "model.qk_head_dim": HEAD_DIM,
    "model.qk_pos_emb_head_dim": HEAD_DIM,
    "model.v_head_dim": HEAD_DIM,
    "model.num_moe_experts": Integer(1, 4096),
    "model.moe_ffn_hidden_size": WIDTH,
    "model.moe_shared_expert_intermediate_size": Integer(0, 1 << 20),
    "model.moe_router_topk": Integer(1, 4096),
    "model.first_k_dense_layers": Integer(0, 1024),
    "model.moe_router_score_function": Choice(("softmax", "sigmoid")),
    "model.moe_router_topk_scaling_factor": Real(0.0, 1000.0, low_open=True),
    "model.moe_router_num_groups": Integer(1, 4096),
    "model.moe_router_group_topk": Integer(1, 4096),
    "model.moe_router_enable_expert_bias": Flag(),
    "model.norm_topk_prob": Flag(),
    "model.moe_aux_loss_coeff": Real(0.0, 100.0),
    "model.vocab_size": Integer(1, 1 << 22),
    "model.make_vocab_size_divisible_by": Integer(1, 65536),
    "model.mtp_num_layers": Integer(0, 16),
    "model.share_embeddings_and_output_weights": Flag(),
    "model.rotary_base": Real(0.0, 1e12, low_open=True),
    "model.rotary_scaling_factor": Real(0.0, 1024.0, low_open=True),
    "model.max_position_embeddings": Integer(1, 1 << 24),
    "model.layernorm_epsilon": Real(0.0, 1.0, low_open=True, high_open=True),
    "model.init_method_std": Real(0.0, 10.0, low_open=True),
    # parallel
    "parallel.name": IDENTIFIER,
    "parallel.num_gpus": Integer(1, 32768),
    "parallel.tp": PARALLEL,
    "parallel.pp": PARALLEL,
    "parallel.vpp": Integer(1, 256),
    "parallel.cp": PARALLEL,
    "parallel.ep": Integer(1, 4096),
    "parallel.etp": PARALLEL,
    "parallel.sequence_parallel": Flag(),
    "parallel.pipeline_layout": Items(Items(Choice(schema.PIPELINE_LAYOUT_ENTRIES), 1024 + 18), 4096),
    "parallel.recompute_granularity": Choice(schema.RECOMPUTE_GRANULARITIES),
    "parallel.recompute_modules": Items(Choice(RECOMPUTE_MODULES), len(RECOMPUTE_MODULES)),
    "parallel.recompute_method": Choice(("uniform", "block")),
    "parallel.recompute_num_layers": LAYERS,
    "parallel.moe_token_dispatcher": Choice(schema.DISPATCHERS),
    "parallel.moe_flex_dispatcher_backend": Choice(schema.FLEX_BACKENDS),
    "parallel.cuda_graph_scope": Items(Choice(CUDA_GRAPH_SCOPES), len(CUDA_GRAPH_SCOPES)),
    "parallel.tp_comm_overlap": Flag(),
    "parallel.cuda_graph_impl": Choice(("none", "transformer_engine", "local", "full_iteration")),
    # optimizer
    "optimizer.name": Choice(schema.OPTIMIZERS),
    "optimizer.lr": Real(0.0, 10.0, low_open=True),
    "optimizer.min_lr": Real(0.0, 10.0),
    "optimizer.weight_decay": Real(0.0, 10.0),
    "optimizer.clip_grad": Real(0.0, 1e6),
    "optimizer.adam_beta1": PROBABILITY,
    "optimizer.adam_beta2": PROBABILITY,
    "optimizer.adam_eps": Real(0.0, 1.0, low_open=True),
    "optimizer.use_distributed_optimizer": Flag(),
    "optimizer.overlap_grad_reduce": Flag(),
    "optimizer.overlap_param_gather": Flag(),
    "optimizer.grad_reduce_in_fp32": Flag(),
    "optimizer.muon.momentum": PROBABILITY,
    "optimizer.muon.nesterov": Flag(),
    "optimizer.muon.ns_steps": Integer(1, 100),
    "optimizer.muon.coefficients": Choice(schema.MUON_COEFFICIENTS),
    "optimizer.muon.scale_mode": Choice(schema.MUON_SCALE_MODES),
    "optimizer.muon.extra_scale_factor": Real(0.0, 100.0, low_open=True),
    "optimizer.muon.fp32_matmul_prec": Choice(schema.MUON_MATMUL_PRECISIONS),
    "optimizer.muon.tp_mode": Choice(schema.MUON_TP_MODES),
    "optimizer.muon.split_qkv": Flag(),
    "optimizer.muon.layer_wise": Flag(),
    "optimizer.muon.assignment": Choice(schema.MUON_ASSIGNMENTS),
    "optimizer.muon.syrk": Flag(),
    "optimizer.muon.overlap_param_gather": Flag(),
    "optimizer.muon.qk_clip": Flag(),
    "optimizer.muon.qk_clip_threshold": Real(0.0, 1e6, low_open=True),
    "optimizer.muon.qk_clip_alpha": Real(0.0, 1.0),
    # precision
    "precision.name": Choice(schema.PRECISIONS),
    "precision.params_dtype": Choice(("bf16", "fp16")),
    "precision.fp8": Choice(("hybrid", "e4m3")),
    "precision.fp8_recipe": Choice(("delayed", "tensorwise", "mxfp8", "blockwise")),
    "precision.fp8_param_gather": Flag(),
    "precision.reuse_grad_buf_for_mxfp8_param_ag": Flag(),
    "precision.bridge_mixed_precision": Choice(BRIDGE_MIXED_PRECISION_PRESETS),
    "precision.peak": Choice(("bf16", "fp8")),
    # cluster
    "cluster.name": IDENTIFIER,
    "cluster.executor": Choice(schema.EXECUTORS),
    "cluster.gpu": Choice(_gpu_words),
    "cluster.gpus_per_node": Integer(1, 64),
    "cluster.nvlink_domain_size": Integer(1, 1152),
    "cluster.container": Text(32, r"nemo:\d\d\.\d\d(\.\d\d)?", "a NeMo container release such as nemo:26.06", min_len=1),
    "cluster.container_image": Text(512, r"\S+", "an image reference without spaces", min_len=1),
    "cluster.container_mounts": Items(Text(MAX_PATH * 2 + 64, min_len=1), 64),
    "cluster.account": Text(256, SLURM_NAME.pattern, SLURM_NAME.hint, min_len=1, secret=True),
    "cluster.partition": SLURM_NAME,
    "cluster.time": SLURM_TIME,
    "cluster.exclusive": Flag(),
    "cluster.mem": SLURM_MEMORY,
    "cluster.srun_args": Items(Text(MAX_TEXT, min_len=1), 64),
    "cluster.env": Table(Text(8192), 256, ENV_NAME, "an environment variable name (letters, digits, '_'; not first a digit)"),
    # train
    "train.name": IDENTIFIER,
    "train.gbs": Integer(1, 1 << 20),
    "train.mbs": Integer(1, 65536),
    "train.seq_length": Integer(1, 1 << 20),
    "train.iters": STEPS,
    "train.warmup_iters": Integer(0, 1_000_000_000),
    "train.lr_decay_iters": STEPS,
    "train.seed": SEED,
    "train.log_interval": STEPS,
    "train.save_interval": STEPS,
    "train.async_save": Flag(),
    "train.checkpoint_dir": Folder("checkpoints"),
    "train.resume_step": STEPS,
    "train.eval_interval": STEPS,
    "train.eval_iters": Integer(0, 1_000_000),
    # data
    "data.name": IDENTIFIER,
    "data.kind": Choice(schema.DATA_KINDS),
    "data.path": Items(Text(MAX_PATH, min_len=1), 1024),
    "data.tokenizer": Text(MAX_PATH, min_len=1),
    "data.vocab_size": Integer(1, 1 << 22),
    "data.split": Text(64, r"\d+(\.\d+)?([,/]\d+(\.\d+)?){0,2}", "train,valid,test shares such as '98,2,0' (quote it)", min_len=1),
    "data.seed": SEED,
    # logger
    "logger.name": IDENTIFIER,
    "logger.wandb_mode": Choice(schema.WANDB_MODES),
    "logger.wandb_project": WANDB_NAME,
    "logger.wandb_entity": WANDB_NAME,
    "logger.wandb_group": WANDB_NAME,
    "logger.wandb_tags": Items(Text(64, min_len=1), 64),
    "logger.log_throughput": Flag(),
}


def leaf_fields(node: type = schema.RunConfig, prefix: str = "") -> list[str]:
    """Dotted names of every leaf field of the schema (nested dataclasses expanded)."""
    import typing

    names = []
    hints = typing.get_type_hints(node)
    for f in fields(node):
        candidates = typing.get_args(hints[f.name]) or (hints[f.name],)
        nested = next((c for c in candidates if is_dataclass(c)), None)
        name = f"{prefix}{f.name}"
        names += leaf_fields(nested, f"{name}.") if nested is not None else [name]
    return names


def value_at(run: Any, key: str) -> tuple[bool, Any]:
    """(found, value) of a dotted field of a run; not found when a parent section is null."""
    node = run
    for part in key.split("."):
        if node is None:
            return False, None
        node = getattr(node, part)
    return True, node


def check_domains(run: schema.RunConfig) -> Iterable[Problem]:
    """One problem per field whose value lies outside its domain (null is fine where the schema allows it)."""
    for key, domain in DOMAINS.items():
        found, value = value_at(run, key)
        if found and value is not None:
            yield from domain.problems(key, value)
