"""Typed schema of a run: one dataclass per Hydra config group, plus the run itself.

Every YAML file under ``conf/`` and every recipe under ``recipes/`` is merged into
these dataclasses, so a misspelled key or a value of the wrong type is an error
that names the field, never a silent new field. Semantic rules that involve more
than one field (world size, expert layout, ...) live in :mod:`optbench.validate`.

This is the one table of fields: each leaf field is declared with
:func:`~optbench.config.field_spec.setting`, which gives it, beside its type and docstring, its domain, who
reads it (local / megatron_bridge / slurm) and its Megatron Bridge names; :mod:`optbench.config.field_table`
derives the domain checks, engine scopes, Bridge overrides and preset reading from these declarations.
The model and parallel sections live in :mod:`optbench.config.schema_model`, the optimizer sections in
:mod:`optbench.config.schema_optimizer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from optbench.config.frozen import Frozen
from optbench.config.domain_types import MAX_TEXT, Choice, Flag, Folder, Integer, Items, Real, Table, Text
from optbench.config.field_spec import (
    BRIDGE,
    BRIDGE_MIXED_PRECISION_PRESETS,
    ENV_NAME,
    IDENTIFIER,
    LOCAL,
    SEED,
    SLURM,
    SLURM_MEMORY,
    SLURM_NAME,
    SLURM_TIME,
    STEPS,
    WANDB_NAME,
    gpu_words,
    setting,
)
from optbench.config.schema_model import (  # noqa: F401  re-exported: the run's schema is one import
    ARCHITECTURES,
    DISPATCHERS,
    FLEX_BACKENDS,
    PIPELINE_LAYOUT_ENTRIES,
    RECOMPUTE_GRANULARITIES,
    ModelConfig,
    ParallelConfig,
)
from optbench.config.schema_optimizer import (  # noqa: F401  re-exported: the run's schema is one import
    MATRIX_FLOPS_LABELS,
    MATRIX_OPTIMIZERS,
    MOMENT2_METHODS,
    MUON_ASSIGNMENTS,
    MUON_COEFFICIENTS,
    MUON_FAMILY,
    MUON_MATMUL_PRECISIONS,
    MUON_SCALE_MODES,
    MUON_TP_MODES,
    OPTIMIZERS,
    OPTIMIZER_LABELS,
    SCALAR_OPTIMIZERS,
    AdaptiveMuonConfig,
    MuonConfig,
    OptimizerConfig,
)
from optbench.common.outputs import MAX_PATH

ENGINES = ("local", "megatron_bridge")
INTENTS = ("reproduce", "train")
"""reproduce: NVIDIA's measured Bridge configuration; train: the same with real routing, NaN checks and evaluation."""
PRECISIONS = ("bf16", "fp16", "fp8_cs", "mxfp8", "nvfp4")
DATA_KINDS = ("mock", "synthetic", "indexed")
WANDB_MODES = ("offline", "online", "disabled")
EXECUTORS = ("local", "slurm")


@dataclass
class PrecisionConfig(Frozen):
    """Mixed precision recipe and what it implies."""

    name: str = setting("???", Choice(PRECISIONS))
    """bf16, fp16, fp8_cs (FP8 current scaling), mxfp8 (Blackwell block scaling) or nvfp4 (Blackwell FP4)."""
    params_dtype: str = setting("bf16", Choice(("bf16", "fp16")))
    """Dtype of the model weights (bf16 or fp16)."""
    fp8: Optional[str] = setting(None, Choice(("hybrid", "e4m3")), bridge="mixed_precision.fp8")
    """Transformer Engine FP8 format (hybrid or e4m3); null for no FP8."""
    fp8_recipe: Optional[str] = setting(
        None,
        Choice(("delayed", "tensorwise", "mxfp8", "blockwise")),
        bridge="mixed_precision.fp8_recipe",
    )
    """tensorwise (current scaling) or mxfp8."""
    fp8_param_gather: bool = setting(
        False,
        Flag(),
        readers=BRIDGE,
        bridge=("mixed_precision.fp8_param_gather", "mixed_precision.fp8_param"),
        preset="every",
    )
    """Keep FP8 weight copies for the parameter all-gather (incompatible with layer-wise Muon)."""
    reuse_grad_buf_for_mxfp8_param_ag: bool = setting(
        False,
        Flag(),
        readers=BRIDGE,
        bridge="mixed_precision.reuse_grad_buf_for_mxfp8_param_ag",
        preset="every",
    )
    """Reuse the gradient buffer for the MXFP8 parameter all-gather (incompatible with layer-wise Muon)."""
    fp8_dot_product_attention: bool = setting(
        False, Flag(), readers=BRIDGE, bridge="mixed_precision.fp8_dot_product_attention", preset="every"
    )
    """Run the attention's score and value products (FlashAttention) in FP8 too (needs precision.fp8); NVIDIA's
    MXFP8 MoE presets set it from nemo:26.06."""
    fp8_output_proj: bool = setting(False, Flag(), readers=BRIDGE, bridge="model.fp8_output_proj", preset="every")
    """Keep the attention output projection's input in FP8 (needs precision.fp8_recipe=mxfp8; Megatron Core 0.18+,
    nemo:26.06+); NVIDIA's DeepSeek-V3 MXFP8 presets set it from nemo:26.06."""
    fp4: Optional[str] = setting(None, Choice(("e2m1",)), readers=BRIDGE, bridge="mixed_precision.fp4")
    """Transformer Engine FP4 format (e2m1); null for no FP4. Excludes precision.fp8 (Megatron Bridge: "fp4 and fp8
    cannot be used simultaneously")."""
    fp4_recipe: Optional[str] = setting(None, Choice(("nvfp4",)), readers=BRIDGE, bridge="mixed_precision.fp4_recipe")
    """nvfp4 (16-element blocks with FP8 scales, Transformer Engine's NVFP4BlockScaling)."""
    fp4_param_gather: bool = setting(
        False,
        Flag(),
        readers=BRIDGE,
        bridge=("mixed_precision.fp4_param_gather", "mixed_precision.fp4_param"),
        preset="every",
    )
    """Keep FP4 weight copies for the parameter all-gather (a field of Megatron Bridge 0.4.2+, nemo:26.04.01+, where
    its NVFP4 preset turns it on, and NVIDIA's Kimi K2 NVFP4 preset keeps it under layer-wise Muon)."""
    bridge_mixed_precision: str = setting("bf16_mixed", Choice(BRIDGE_MIXED_PRECISION_PRESETS), readers=BRIDGE)
    """Name of the Megatron Bridge mixed-precision preset this maps to."""
    peak: str = setting("bf16", Choice(("bf16", "fp8", "fp4")))
    """Which peak tensor throughput MFU divides by first: bf16, fp8 or fp4 (the others of the run's precision are
    reported too)."""


DEFAULT_CONTAINER = "nemo:26.08"
"""The NeMo container a run gets when it names none: the newest one checked against its real Megatron Bridge in CI
(tests/test_bridge_conformance.py holds it to optbench/data/bridge/containers.json). Its one definition: the cluster
configs leave cluster.container to it, and tests import it."""


@dataclass
class ClusterConfig(Frozen):
    """Where the run executes. Account and partition come from conf/local/<cluster>.yaml or the environment."""

    name: str = setting("???", IDENTIFIER)
    """Cluster preset id."""
    executor: str = setting("local", Choice(EXECUTORS))
    """local (this machine) or slurm."""
    gpu: str = setting("auto", Choice(gpu_words))
    """GPU type (a row of optbench/data/gpus.csv), or auto: this machine's GPU, else cpu."""
    gpus_per_node: Optional[int] = setting(None, Integer(1, 64))
    """GPUs per node (null on the local executor: one node holds every process)."""
    nvlink_domain_size: int = setting(8, Integer(1, 1152))
    """GPUs joined by NVLink (NVL72: 72; HGX: 8)."""
    container: str = setting(
        DEFAULT_CONTAINER,
        Text(32, r"nemo:\d\d\.\d\d(\.\d\d)?", "a NeMo container release such as nemo:26.06", min_len=1),
        readers=BRIDGE,
    )
    """NeMo container release (optbench/data/bridge/containers.json): picks the Megatron Bridge and Core field
    names the adapter emits and NVIDIA's preset of that release. The default is the newest container checked
    against its real Megatron Bridge in CI; nemo:26.02 reproduces the blog's runs."""
    unverified_container: bool = setting(False, Flag(), readers=BRIDGE)
    """Accept a cluster.container newer than the newest checked one: the plan is built on the newest checked
    release's facts, says so, prints what NVIDIA's public notes say changed (optbench/data/release_notes.csv) and
    takes the widest projection band (docs/containers.md)."""
    container_image: Optional[str] = setting(
        None,
        Text(512, r"\S+", "an image reference without spaces", min_len=1),
        readers=SLURM,
    )
    """Container image for Slurm (pyxis/enroot); the cluster presets derive it from cluster.container."""
    container_mounts: List[str] = setting(list, Items(Text(MAX_PATH * 2 + 64, min_len=1), 64), readers=SLURM)
    """host:container mounts."""
    account: Optional[str] = setting(
        None,
        Text(256, SLURM_NAME.pattern, SLURM_NAME.hint, min_len=1, secret=True),
        readers=SLURM,
    )
    """Slurm account (secret-ish: never written to results)."""
    partition: Optional[str] = setting(None, SLURM_NAME, readers=SLURM)
    """Slurm partition."""
    time: str = setting("01:00:00", SLURM_TIME, readers=SLURM)
    """Slurm time limit."""
    exclusive: bool = setting(True, Flag(), readers=SLURM)
    """Request whole nodes."""
    mem: str = setting("0", SLURM_MEMORY, readers=SLURM)
    """Slurm --mem (0 = all of the node's memory)."""
    srun_args: List[str] = setting(list, Items(Text(MAX_TEXT, min_len=1), 64), readers=SLURM)
    """Extra srun arguments."""
    env: Dict[str, str] = setting(
        dict,
        Table(Text(8192), 256, ENV_NAME, "an environment variable name (letters, digits, '_'; not first a digit)"),
        readers=BRIDGE | SLURM,
    )
    """Extra job environment variables."""


@dataclass
class TrainConfig(Frozen):
    """Batch geometry and schedule."""

    name: str = setting("???", IDENTIFIER)
    """Preset id."""
    gbs: int = setting(8, Integer(1, 1 << 20), bridge="train.global_batch_size", preset="every")
    """Global batch size in sequences."""
    mbs: int = setting(1, Integer(1, 65536), bridge="train.micro_batch_size", preset="every")
    """Micro batch size in sequences per model replica."""
    seq_length: int = setting(
        128,
        Integer(1, 1 << 20),
        bridge=("dataset.seq_length", "model.seq_length"),
        renamed_from="dataset.sequence_length",
    )
    """Tokens per sequence. (Bridge 0.6 made ``dataset.seq_length`` the dataset's field and copies it over
    ``sequence_length`` when it finalizes the config, so an override of the older name is lost there.)"""
    iters: int = setting(10, STEPS, bridge="train.train_iters")
    """Optimizer steps."""
    warmup_iters: int = setting(0, Integer(0, 1_000_000_000), bridge="scheduler.lr_warmup_iters")
    """Linear warmup steps before the cosine decay."""
    lr_decay_iters: Optional[int] = setting(None, STEPS, bridge="scheduler.lr_decay_iters")
    """Steps of the cosine decay (null: iters)."""
    seed: int = setting(1234, SEED, bridge="rng.seed")
    """Seed for init and data order."""
    log_interval: int = setting(1, STEPS, bridge="logger.log_interval")
    """Steps between log lines."""
    save_interval: Optional[int] = setting(None, STEPS, bridge="checkpoint.save_interval")
    """Steps between checkpoints (null: no periodic checkpoint)."""
    async_save: bool = setting(False, Flag(), readers=BRIDGE, bridge="checkpoint.async_save")
    """Asynchronous checkpoint save (Bridge only)."""
    checkpoint_dir: Optional[str] = setting(None, Folder("checkpoints"))
    """Where checkpoints go (null: results/checkpoints/<run_id>)."""
    eval_interval: Optional[int] = setting(None, STEPS, bridge="train.eval_interval")
    """Steps between validation passes (null: the engine's default; local engine: a tenth of the run,
    and always at the last step, when the data has a validation split)."""
    eval_iters: Optional[int] = setting(None, Integer(0, 1_000_000), bridge="train.eval_iters")
    """Global batches per validation pass (null: the engine's default; local engine: 4; 0: no validation)."""
    resume_step: Optional[int] = setting(None, STEPS, readers=LOCAL)
    """With resume=true: the checkpoint step to continue from (null: the one ``latest`` points to); the
    local engine keeps the last two complete checkpoints, so a corrupt newest one can be skipped."""


@dataclass
class DataConfig(Frozen):
    """Training data."""

    name: str = setting("???", IDENTIFIER)
    """Preset id."""
    kind: str = setting("synthetic", Choice(DATA_KINDS))
    """mock (random tokens, for throughput), synthetic (deterministic and learnable) or indexed (Megatron .bin/.idx)."""
    path: List[str] = setting(list, Items(Text(MAX_PATH, min_len=1), 1024), bridge="dataset.blend", transform="blend")
    """Megatron-indexed dataset prefixes (optionally weight, prefix, weight, prefix, ...)."""
    tokenizer: Optional[str] = setting(None, Text(MAX_PATH, min_len=1), bridge="tokenizer.tokenizer_model")
    """Tokenizer of indexed data: a Hugging Face tokenizer folder or tokenizer.json (the local engine reads
    local files only; Bridge also takes a hub id). Mock data uses Bridge's NullTokenizer."""
    split: str = setting(
        "98,2,0",
        Text(
            64, r"\d+(\.\d+)?([,/]\d+(\.\d+)?){0,2}", "train,valid,test shares such as '98,2,0' (quote it)", min_len=1
        ),
        bridge="dataset.split",
    )
    """Indexed data: train, validation and test shares of each prefix's documents (Megatron's split)."""
    vocab_size: Optional[int] = setting(None, Integer(1, 1 << 22), readers=LOCAL)
    """Vocabulary the data uses (null: the model's); synthetic streams use small ones."""
    seed: int = setting(1234, SEED, bridge="dataset.random_seed")
    """Generator seed."""
    valid_seed: Optional[int] = setting(None, SEED, readers=LOCAL)
    """Indexed data: seed of the validation split's document and sample order (null: ``seed``, as Megatron
    does). A fixed value gives runs with different ``seed`` the same validation samples (``make study``)."""


@dataclass
class LoggerConfig(Frozen):
    """Where metrics go besides results/runs/<run_id>/metrics.jsonl."""

    name: str = setting("???", IDENTIFIER)
    """Preset id."""
    wandb_mode: str = setting("offline", Choice(WANDB_MODES))
    """offline (default: results/wandb, sync later), online or disabled."""
    wandb_project: str = setting("optbench", WANDB_NAME, bridge="logger.wandb_project")
    """wandb project."""
    wandb_entity: Optional[str] = setting(None, WANDB_NAME, bridge="logger.wandb_entity")
    """wandb entity (team); null = the user's default."""
    wandb_group: Optional[str] = setting(None, WANDB_NAME)
    """wandb group = the comparison (null: <model>-<gpu>-<precision>)."""
    wandb_tags: List[str] = setting(list, Items(Text(64, min_len=1), 64))
    """Extra tags (model, optimizer, gpu and precision are always added)."""
    log_throughput: bool = setting(
        True,
        Flag(),
        readers=BRIDGE,
        bridge=("logger.log_throughput", "logger.log_throughput_to_tensorboard"),
    )
    """Ask Megatron Bridge to log throughput per iteration."""


PRESET_FIELD = r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+"
PRESET_FIELD_HINT = "a dotted field of Megatron Bridge's ConfigContainer, such as train.micro_batch_size"


@dataclass
class RunConfig(Frozen):
    """A recipe composed with its groups and overrides."""

    recipe: str = setting("???", IDENTIFIER)
    """Recipe name (file under recipes/)."""
    description: str = setting("", Text())
    """What the recipe reproduces."""
    preset_departures: Dict[str, str] = setting(
        dict, Table(Text(MAX_TEXT, min_len=1), 16, PRESET_FIELD, PRESET_FIELD_HINT), readers=BRIDGE
    )
    """Fields of NVIDIA's preset this recipe departs from on purpose -> why, a block of the recipe (plan.json's preset
    section gives the reason beside each; the conformance test allows exactly these)."""
    preset_kept: Dict[str, str] = setting(
        dict, Table(Text(MAX_TEXT, min_len=1), 16, PRESET_FIELD, PRESET_FIELD_HINT), readers=BRIDGE
    )
    """Fields this recipe keeps when a later release's NVIDIA preset changes them -> why."""
    compare_with: Optional[str] = setting(None, IDENTIFIER)
    """The AdamW recipe a matrix-optimizer run is compared with: its plan's AdamW twin is that recipe with the run's
    overrides but the ``optimizer.*`` ones (a recipe names its comparison; nothing is guessed from names). null: the
    run's own recipe with ``optimizer=adamw``."""
    engine: str = setting("local", Choice(ENGINES))
    """local (HF transformers proxies, CPU or one GPU) or megatron_bridge (NeMo container on a cluster)."""
    intent: str = setting("train", Choice(INTENTS))
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
    run_id: Optional[str] = setting(
        None,
        Text(128, r"[A-Za-z0-9][A-Za-z0-9._-]*", "a run id of letters, digits, '.', '_' and '-'", min_len=1),
    )
    """Run directory name under results/runs (null: <recipe>-<timestamp>)."""
    results_dir: str = setting("results", Folder())
    """Root of plans, runs and tables."""
    debug: bool = setting(False, Flag())
    """Show tracebacks instead of one-line errors."""
    dryrun: bool = setting(False, Flag())
    """Plan and render launch scripts without launching."""
    force: bool = setting(False, Flag())
    """Launch even when the memory estimate exceeds the GPU's HBM."""
    resume: bool = setting(False, Flag())
    """Resume from the latest checkpoint of run_id."""
    step_time_s: Optional[float] = setting(None, Real(0.0, 1e6, low_open=True))
    """Seconds per step to turn into TFLOP/s and MFU in the plan (null: only published step times that match the
    run)."""
