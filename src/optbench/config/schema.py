"""Typed schema of a run: one dataclass per Hydra config group, plus the run itself.

Every YAML file under ``conf/`` and every recipe under ``recipes/`` is merged into
these dataclasses, so a misspelled key or a value of the wrong type is an error
that names the field, never a silent new field. Semantic rules that involve more
than one field (world size, expert layout, ...) live in :mod:`optbench.validate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

ENGINES = ("local", "megatron_bridge")
INTENTS = ("reproduce", "train")
"""reproduce: NVIDIA's measured Bridge configuration; train: the same with real routing, NaN checks and evaluation."""
OPTIMIZERS = ("adamw", "muon")
MUON_COEFFICIENTS = ("quintic", "simple")
MUON_SCALE_MODES = ("spectral", "shape_scaling", "unit_rms_norm")
MUON_MATMUL_PRECISIONS = ("auto", "medium", "high", "highest")
MUON_TP_MODES = ("blockwise", "duplicated", "distributed")
MUON_ASSIGNMENTS = ("pingpong", "cost_aware")
PRECISIONS = ("bf16", "fp16", "fp8_cs", "mxfp8")
ARCHITECTURES = ("deepseek_v3", "qwen3_moe")
DISPATCHERS = ("alltoall", "allgather", "flex")
FLEX_BACKENDS = ("deepep", "hybridep")
RECOMPUTE_GRANULARITIES = ("selective", "full")
DATA_KINDS = ("mock", "synthetic", "indexed")
WANDB_MODES = ("offline", "online", "disabled")
EXECUTORS = ("local", "slurm")
PIPELINE_LAYOUT_ENTRIES = ("embedding", "decoder", "mtp", "loss")


@dataclass
class ModelConfig:
    """Model shape, in Megatron Core's vocabulary (FACTS.md section 4)."""

    name: str = "???"
    """Model id, e.g. kimi_k2 or qwen3_moe_tiny."""
    architecture: str = "???"
    """deepseek_v3 (MLA + MoE with shared expert; Kimi K2, DeepSeek-V3) or qwen3_moe (GQA + MoE)."""
    proxy_of: Optional[str] = None
    """For a small local proxy: the full-size model whose architecture it mirrors."""
    num_layers: int = 1
    """Transformer layers, MTP layers excluded."""
    hidden_size: int = 64
    """Model width h."""
    ffn_hidden_size: int = 256
    """FFN width of the dense (non-MoE) layers."""
    num_attention_heads: int = 4
    """Query heads."""
    num_query_groups: Optional[int] = None
    """GQA key/value groups (null for MLA)."""
    kv_channels: Optional[int] = None
    """GQA head dimension (null for MLA)."""
    qk_layernorm: bool = False
    """RMSNorm on queries and keys (Qwen3, Kimi K2)."""
    multi_latent_attention: bool = False
    """Use MLA projections instead of GQA."""
    q_lora_rank: Optional[int] = None
    """MLA query down-projection rank (null: a single full query projection)."""
    kv_lora_rank: Optional[int] = None
    """MLA key/value down-projection rank."""
    qk_head_dim: Optional[int] = None
    """MLA per-head query/key dimension without the rotary part."""
    qk_pos_emb_head_dim: Optional[int] = None
    """MLA per-head rotary dimension (shared key)."""
    v_head_dim: Optional[int] = None
    """MLA per-head value dimension."""
    num_moe_experts: Optional[int] = None
    """Routed experts per MoE layer (null: dense model)."""
    moe_ffn_hidden_size: Optional[int] = None
    """FFN width of one routed expert."""
    moe_shared_expert_intermediate_size: int = 0
    """Total FFN width of the shared experts (0: none)."""
    moe_router_topk: int = 1
    """Experts each token is routed to."""
    first_k_dense_layers: int = 0
    """Leading layers with a dense FFN instead of MoE (Megatron's moe_layer_freq = [0]*k + [1]*(L-k))."""
    moe_router_score_function: str = "softmax"
    """softmax or sigmoid."""
    moe_router_topk_scaling_factor: Optional[float] = None
    """Scale applied to the top-k routing weights (Kimi K2: 2.827)."""
    moe_router_num_groups: Optional[int] = None
    """Device-limited routing groups (DeepSeek-V3: 8)."""
    moe_router_group_topk: Optional[int] = None
    """Groups each token may use (DeepSeek-V3: 4)."""
    moe_router_enable_expert_bias: bool = False
    """Aux-loss-free load balancing bias (DeepSeek-V3 / Kimi K2)."""
    norm_topk_prob: bool = True
    """Renormalise the top-k routing weights to sum to one."""
    moe_aux_loss_coeff: float = 0.0
    """Load-balancing auxiliary loss coefficient (Megatron moe_aux_loss_coeff; Qwen3-MoE: 1e-3; 0: none)."""
    vocab_size: int = 256
    """Tokenizer vocabulary before padding."""
    make_vocab_size_divisible_by: int = 128
    """Megatron pads the vocabulary to a multiple of this times TP (Kimi K2 and DeepSeek-V3: 1280)."""
    mtp_num_layers: int = 0
    """Multi-token-prediction layers (DeepSeek-V3: 1)."""
    share_embeddings_and_output_weights: bool = False
    """Tie input embedding and output layer."""
    rotary_base: float = 10000.0
    """RoPE base."""
    rotary_scaling_factor: Optional[float] = None
    """YaRN scaling factor (Kimi K2: 32; null: plain RoPE)."""
    max_position_embeddings: int = 4096
    """Longest sequence the positional encoding is built for."""
    layernorm_epsilon: float = 1e-6
    """RMSNorm epsilon."""
    init_method_std: float = 0.02
    """Standard deviation of the random weight init."""


@dataclass
class ParallelConfig:
    """Parallel layout; dp is derived as num_gpus / (tp * pp * cp)."""

    name: str = "???"
    """Layout id, e.g. kimi_k2_gb300_256 or single."""
    num_gpus: int = 1
    """World size (GPUs, or processes on the local engine)."""
    tp: int = 1
    """Tensor parallel size."""
    pp: int = 1
    """Pipeline parallel size."""
    vpp: Optional[int] = None
    """Virtual pipeline stages per pipeline rank (interleaved schedule); null = 1."""
    cp: int = 1
    """Context parallel size."""
    ep: int = 1
    """Expert parallel size."""
    etp: int = 1
    """Expert tensor parallel size."""
    sequence_parallel: bool = False
    """Shard activations along the sequence inside TP regions."""
    pipeline_layout: Optional[List[List[str]]] = None
    """Megatron pipeline layout: one list per virtual stage of embedding / decoder / mtp / loss."""
    recompute_granularity: Optional[str] = None
    """null, selective or full activation recompute."""
    recompute_modules: Optional[List[str]] = None
    """Modules recomputed under selective recompute (e.g. mla_up_proj)."""
    recompute_method: Optional[str] = None
    """uniform or block, for full recompute."""
    recompute_num_layers: Optional[int] = None
    """Layers per recompute unit, for full recompute."""
    moe_token_dispatcher: str = "alltoall"
    """alltoall, allgather or flex."""
    moe_flex_dispatcher_backend: Optional[str] = None
    """deepep or hybridep when moe_token_dispatcher is flex."""
    cuda_graph_scope: List[str] = field(default_factory=list)
    """Transformer Engine CUDA graph scopes (e.g. moe_router, moe_preprocess); empty = off."""
    cuda_graph_impl: Optional[str] = None
    """CUDA graph implementation: null = transformer_engine when cuda_graph_scope is set, else none;
    full_iteration = one graph per training iteration (NVIDIA's presets from Bridge 0.5, nemo:26.06)."""
    tp_comm_overlap: bool = False
    """Overlap TP communication with GEMMs (userbuffers)."""


@dataclass
class MuonConfig:
    """Muon as Megatron Core 0.16.1 implements it (FACTS.md section 5); defaults as the Kimi K2 recipe."""

    momentum: float = 0.95
    """Momentum beta (Megatron muon_momentum)."""
    nesterov: bool = True
    """Nesterov momentum (muon_use_nesterov)."""
    ns_steps: int = 5
    """Newton-Schulz iterations (muon_num_ns_steps)."""
    coefficients: str = "quintic"
    """quintic (Megatron: one tuple per step) or simple (Keller Jordan / torch.optim.Muon)."""
    scale_mode: str = "spectral"
    """spectral sqrt(max(M,N)), shape_scaling sqrt(max(1,M/N)) or unit_rms_norm sqrt(M/N) (muon_scale_mode)."""
    extra_scale_factor: float = 1.0
    """Extra factor on the update (muon_extra_scale_factor; 0.2 with spectral = Moonlight's rule)."""
    fp32_matmul_prec: str = "auto"
    """Newton-Schulz product precision: medium (bf16), high (tf32), highest (fp32); auto = medium on GPU, highest on CPU."""
    tp_mode: str = "blockwise"
    """Tensor-parallel Newton-Schulz: blockwise, duplicated or distributed (muon_tp_mode)."""
    split_qkv: bool = True
    """Orthogonalize Q, K and V blocks of a fused QKV weight separately (muon_split_qkv)."""
    layer_wise: bool = True
    """Layer-wise distributed optimizer (dist_muon up to Core 0.17; muon + use_layer_wise_distributed_optimizer
    from Core 0.18): each DP rank owns whole parameters."""
    overlap_param_gather: bool = False
    """Layer-wise optimizer: all-gather the updated parameters asynchronously, overlapped with the next
    forward pass (Megatron Core 0.17+, nemo:26.04 and newer; Core 0.16 gathers them in the step)."""
    assignment: str = "pingpong"
    """Owner assignment for layer_wise: pingpong (Megatron) or cost_aware (ours; local engine only)."""
    syrk: bool = False
    """Compute the symmetric Newton-Schulz products (X X^T, A A) one triangle block at a time (ours; local engine only)."""
    qk_clip: bool = False
    """MuonClip's QK-clip (Kimi K2): after each step scale the query/key weights of heads whose max attention
    logit exceeded qk_clip_threshold (Megatron Core model.qk_clip; MLA models)."""
    qk_clip_threshold: float = 100.0
    """QK-clip threshold tau on the pre-softmax logit (Megatron qk_clip_threshold)."""
    qk_clip_alpha: float = 0.5
    """Share of the scaling put on the query side: q *= eta**alpha, k *= eta**(1-alpha) (Megatron qk_clip_alpha)."""


@dataclass
class OptimizerConfig:
    """Optimizer; AdamW fields also drive Muon's AdamW side (norms, embeddings, output)."""

    name: str = "???"
    """adamw or muon."""
    lr: float = 3e-4
    """Peak learning rate."""
    min_lr: float = 3e-5
    """Learning rate at the end of the cosine decay."""
    weight_decay: float = 0.1
    """Decoupled weight decay."""
    clip_grad: float = 1.0
    """Global gradient-norm clip (0 disables)."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.95
    """AdamW beta2."""
    adam_eps: float = 1e-8
    """AdamW epsilon."""
    use_distributed_optimizer: bool = True
    """Element-wise distributed optimizer (ZeRO-1); Muon requires false."""
    overlap_grad_reduce: bool = True
    """Overlap the gradient reduction with the backward pass."""
    overlap_param_gather: bool = True
    """Overlap the parameter all-gather with the next forward; Muon requires false."""
    grad_reduce_in_fp32: bool = False
    """Reduce gradients in fp32 (Kimi K2 Muon recipe: true)."""
    muon: Optional[MuonConfig] = None
    """Muon settings; null for AdamW."""


@dataclass
class PrecisionConfig:
    """Mixed precision recipe and what it implies."""

    name: str = "???"
    """bf16, fp16, fp8_cs (FP8 current scaling) or mxfp8 (Blackwell block scaling)."""
    params_dtype: str = "bf16"
    """Dtype of the model weights (bf16 or fp16)."""
    fp8: Optional[str] = None
    """Transformer Engine FP8 format (hybrid or e4m3); null for no FP8."""
    fp8_recipe: Optional[str] = None
    """tensorwise (current scaling) or mxfp8."""
    fp8_param_gather: bool = False
    """Keep FP8 weight copies for the parameter all-gather (incompatible with layer-wise Muon)."""
    reuse_grad_buf_for_mxfp8_param_ag: bool = False
    """Reuse the gradient buffer for the MXFP8 parameter all-gather (incompatible with layer-wise Muon)."""
    bridge_mixed_precision: str = "bf16_mixed"
    """Name of the Megatron Bridge mixed-precision preset this maps to."""
    peak: str = "bf16"
    """Which peak tensor throughput MFU divides by first: bf16 or fp8 (the other is reported too)."""


@dataclass
class ClusterConfig:
    """Where the run executes. Account and partition come from conf/local/<cluster>.yaml or the environment."""

    name: str = "???"
    """Cluster preset id."""
    executor: str = "local"
    """local (this machine) or slurm."""
    gpu: str = "auto"
    """GPU type (a row of optbench/data/gpus.csv), or auto: this machine's GPU, else cpu."""
    gpus_per_node: Optional[int] = None
    """GPUs per node (null on the local executor: one node holds every process)."""
    nvlink_domain_size: int = 8
    """GPUs joined by NVLink (NVL72: 72; HGX: 8)."""
    container: str = "nemo:26.08"
    """NeMo container release (optbench/data/bridge/containers.json): picks the Megatron Bridge and Core field
    names the adapter emits and NVIDIA's preset of that release. The default is the newest container checked
    against its real Megatron Bridge in CI; nemo:26.02 reproduces the blog's runs."""
    container_image: Optional[str] = None
    """Container image for Slurm (pyxis/enroot); the cluster presets derive it from cluster.container."""
    container_mounts: List[str] = field(default_factory=list)
    """host:container mounts."""
    account: Optional[str] = None
    """Slurm account (secret-ish: never written to results)."""
    partition: Optional[str] = None
    """Slurm partition."""
    time: str = "01:00:00"
    """Slurm time limit."""
    exclusive: bool = True
    """Request whole nodes."""
    mem: str = "0"
    """Slurm --mem (0 = all of the node's memory)."""
    srun_args: List[str] = field(default_factory=list)
    """Extra srun arguments."""
    env: Dict[str, str] = field(default_factory=dict)
    """Extra job environment variables."""


@dataclass
class TrainConfig:
    """Batch geometry and schedule."""

    name: str = "???"
    """Preset id."""
    gbs: int = 8
    """Global batch size in sequences."""
    mbs: int = 1
    """Micro batch size in sequences per model replica."""
    seq_length: int = 128
    """Tokens per sequence."""
    iters: int = 10
    """Optimizer steps."""
    warmup_iters: int = 0
    """Linear warmup steps before the cosine decay."""
    lr_decay_iters: Optional[int] = None
    """Steps of the cosine decay (null: iters)."""
    seed: int = 1234
    """Seed for init and data order."""
    log_interval: int = 1
    """Steps between log lines."""
    save_interval: Optional[int] = None
    """Steps between checkpoints (null: no periodic checkpoint)."""
    async_save: bool = False
    """Asynchronous checkpoint save (Bridge only)."""
    checkpoint_dir: Optional[str] = None
    """Where checkpoints go (null: results/checkpoints/<run_id>)."""
    eval_interval: Optional[int] = None
    """Steps between validation passes (null: the engine's default; local engine: a tenth of the run,
    and always at the last step, when the data has a validation split)."""
    eval_iters: Optional[int] = None
    """Global batches per validation pass (null: the engine's default; local engine: 4; 0: no validation)."""
    resume_step: Optional[int] = None
    """With resume=true: the checkpoint step to continue from (null: the one ``latest`` points to); the
    local engine keeps the last two complete checkpoints, so a corrupt newest one can be skipped."""


@dataclass
class DataConfig:
    """Training data."""

    name: str = "???"
    """Preset id."""
    kind: str = "synthetic"
    """mock (random tokens, for throughput), synthetic (deterministic and learnable) or indexed (Megatron .bin/.idx)."""
    path: List[str] = field(default_factory=list)
    """Megatron-indexed dataset prefixes (optionally weight, prefix, weight, prefix, ...)."""
    tokenizer: Optional[str] = None
    """Tokenizer of indexed data: a Hugging Face tokenizer folder or tokenizer.json (the local engine reads
    local files only; Bridge also takes a hub id). Mock data uses Bridge's NullTokenizer."""
    split: str = "98,2,0"
    """Indexed data: train, validation and test shares of each prefix's documents (Megatron's split)."""
    vocab_size: Optional[int] = None
    """Vocabulary the data uses (null: the model's); synthetic streams use small ones."""
    seed: int = 1234
    """Generator seed."""


@dataclass
class LoggerConfig:
    """Where metrics go besides results/runs/<run_id>/metrics.jsonl."""

    name: str = "???"
    """Preset id."""
    wandb_mode: str = "offline"
    """offline (default: results/wandb, sync later), online or disabled."""
    wandb_project: str = "optbench"
    """wandb project."""
    wandb_entity: Optional[str] = None
    """wandb entity (team); null = the user's default."""
    wandb_group: Optional[str] = None
    """wandb group = the comparison (null: <model>-<gpu>-<precision>)."""
    wandb_tags: List[str] = field(default_factory=list)
    """Extra tags (model, optimizer, gpu and precision are always added)."""
    log_throughput: bool = True
    """Ask Megatron Bridge to log throughput per iteration."""


@dataclass
class RunConfig:
    """A recipe composed with its groups and overrides."""

    recipe: str = "???"
    """Recipe name (file under recipes/)."""
    description: str = ""
    """What the recipe reproduces."""
    engine: str = "local"
    """local (HF transformers proxies, CPU or one GPU) or megatron_bridge (NeMo container on a cluster)."""
    intent: str = "train"
    """megatron_bridge only. reproduce: exactly NVIDIA's measured configuration (Bridge's scripts/performance preset:
    forced load balance, NaN checks and eval off); train: the same layout, kernels and job with real routing, NaN
    checks and evaluation on. The published-recipe default is reproduce."""
    model: ModelConfig = field(default_factory=ModelConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    run_id: Optional[str] = None
    """Run directory name under results/runs (null: <recipe>-<timestamp>)."""
    results_dir: str = "results"
    """Root of plans, runs and tables."""
    debug: bool = False
    """Show tracebacks instead of one-line errors."""
    dryrun: bool = False
    """Plan and render launch scripts without launching."""
    force: bool = False
    """Launch even when the memory estimate exceeds the GPU's HBM."""
    resume: bool = False
    """Resume from the latest checkpoint of run_id."""
    step_time_s: Optional[float] = None
    """Seconds per step to turn into TFLOP/s and MFU in the plan (null: only published step times that match the run)."""
