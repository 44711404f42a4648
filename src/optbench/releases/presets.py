"""NVIDIA's measured configurations (Megatron Bridge ``scripts/performance``), as data, and the two intents.

``src/optbench/data/bridge/presets-<release>.json`` is written by ``tools/nvidia_presets.py``, which runs
NVIDIA's own launcher and config code (``setup_experiment.py`` in dry run, ``run_script.py`` up to
``pretrain``) for every model, GPU, precision and optimizer NVIDIA publishes. Per case it holds:

* ``settings``: every ConfigContainer field where NVIDIA's config differs from the library recipe and
  mixed-precision preset our entry point starts from (routing forced to balance, fusions, HybridEP SMs,
  TE RNG tracker, manual GC, NaN checks off, eval off, gradient reduction in bf16, ...);
* ``recipe_values``: the library recipe's value of every other field our adapter sets, so that a plan
  can say where a run departs from what NVIDIA measured;
* ``job``: the Slurm job NVIDIA's launcher renders (environment, ``--segment``, NUMA binding, srun args).

Two intents (``intent=`` in the config):

* ``reproduce``: exactly NVIDIA's measured configuration: the preset's settings, with our recipe's own
  values equal to NVIDIA's (the plan lists any field a command-line change moved away from them);
* ``train``: the same layout, kernels and job, but what a real training run needs: routing not forced to
  balance, NaN checks on, evaluation on, and Megatron's optimizer timer (timing level 1).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

from optbench.releases import versions
from optbench.config.optimizers import REGISTRY
from optbench.config.schema import RunConfig
from optbench.common.data_files import read_json
from optbench.common.errors import Problem, UserError

RELEASE = "0.3.1"
"""The Megatron Bridge release the recipes' parallel/train presets were written from (container 26.02.01), and the
default of :func:`load`; every release's executed preset, this one included, is applied over them
(:mod:`optbench.compose.release_layout`)."""
FALLBACK = {"0.3.0": "0.3.1"}
"""Release -> the release whose preset serves a model NVIDIA's scripts of that release lack: Bridge 0.3.0's scripts
have no Kimi K2 (its preset arrives with 0.3.1), yet NVIDIA's blog measured Kimi K2 on nemo:26.02."""
DATA = versions.DATA


OURS = {
    "checkpoint.save": "checkpoints follow train.save_interval (NVIDIA's throughput runs save none; so do ours "
    "by default)",
    "checkpoint.load": "resume=true loads our run's checkpoint folder",
    "checkpoint.save_interval": "train.save_interval (no checkpoint is written without one, as in NVIDIA's runs)",
    "tokenizer.tokenizer_type": "mock data: a NullTokenizer of the model's vocabulary (NVIDIA's recipe names a "
    "tokenizer that mock data never reads; model.vocab_size, and so the FLOPs, are the model's either way)",
    "tokenizer.tokenizer_model": "as tokenizer.tokenizer_type",
    "tokenizer.vocab_size": "as tokenizer.tokenizer_type",
    "logger.tensorboard_dir": "Bridge sends its TFLOP/s to wandb only through the tensorboard writer; kept in "
    "the run folder",
    "logger.save_config_filepath": "NVIDIA's path inside its /nemo_run mount; ours is the run folder",
    "logger.wandb_project": "our wandb settings (NVIDIA's launcher passes none by default)",
    "logger.wandb_entity": "our wandb settings",
    "logger.wandb_exp_name": "our run id",
    "logger.wandb_save_dir": "our results folder",
    "logger.log_throughput_to_tensorboard": "with tensorboard: Bridge's TFLOP/s reach wandb this way",
    "logger.log_throughput": "Bridge prints TFLOP/s/GPU per iteration (what make table LOGS= parses)",
    "train.train_iters": "NVIDIA's launcher runs 50 iterations; ours run train.iters (100 in the GB300 recipes: "
    "more steady-state steps)",
    "scheduler.lr_decay_iters": "follows train.iters (NVIDIA: its 50 iterations)",
    "rng.seed": "train.seed",
    "dataset.random_seed": "data.seed",
}
"""Fields where ``reproduce`` keeps our value on purpose, each with its reason (paths, logging, run length).
The conformance test allows differences from NVIDIA's effective config in these fields only."""


def departure_reasons(run: RunConfig) -> dict[str, str]:
    """Every field the run's recipe departs from NVIDIA's preset on purpose -> why: the recipe's ``preset_departures``
    and ``preset_kept`` blocks (the fields a later release's preset changes and the recipe keeps)."""
    return {**run.preset_departures, **run.preset_kept}


TRAIN_SETTINGS: dict[str, Any] = {
    "model.moe_router_force_load_balancing": False,
    "ddp.check_for_nan_in_grad": True,
    "rerun_state_machine.check_for_nan_in_loss": True,
}
"""What ``train`` changes in a preset: real routing and NaN checks (evaluation: train.eval_interval/eval_iters)."""
TRAIN_EVAL_DEFAULTS = {"train.eval_iters": 32}
"""``train`` evaluates even when the config leaves eval unset: Bridge's recipe default (at the recipe's
eval_interval)."""


@dataclass(frozen=True)
class Preset:
    """One NVIDIA case: model/gpu/precision/optimizer."""

    key: str
    settings: dict[str, Any]
    recipe_values: dict[str, Any]
    job: dict[str, Any]
    num_gpus: int
    adapted_from_adam: bool
    """True when NVIDIA has no Muon preset for the model: its Adam preset, run with our Muon settings."""
    release: str = RELEASE
    """Megatron Bridge release the preset comes from."""
    source: str = ""
    """Where in that release: file and constant or function (read statically), or NVIDIA's executed launcher."""
    note: str = ""
    """What NVIDIA's launcher of that release does differently from its documentation (Bridge 0.6's Kimi K2 Adam)."""
    launcher_optimizer: str = ""
    """The optimizer NVIDIA's launcher actually trains when it is not the case's ("dist_muon" for Bridge 0.6's Kimi K2
    Adam): the settings are NVIDIA's own path for the case's optimizer, which its launcher never ran."""

    def nvidia_value(self, key: str) -> Any:
        """NVIDIA's value of a field (KeyError when the preset does not know it)."""
        return self.settings[key] if key in self.settings else self.recipe_values[key]

    def knows(self, key: str) -> bool:
        return key in self.settings or key in self.recipe_values

    @property
    def precision_aware_adam(self) -> bool:
        """Whether NVIDIA's case runs Adam with Megatron's precision-aware optimizer (Bridge's DeepSeek-V3 recipe does
        in every release, with BF16 moments; some other cases with FP32 ones)."""
        return self.knows(PRECISION_AWARE) and bool(self.nvidia_value(PRECISION_AWARE))

    def adam_moment_dtypes(self) -> tuple[str, str]:
        """Bridge's dtypes of Adam's two moments in this case (``torch.float32`` where it names none)."""
        first, second = (
            str(self.nvidia_value(key)) if self.knows(key) else "torch.float32"
            for key in ("optimizer.exp_avg_dtype", "optimizer.exp_avg_sq_dtype")
        )
        return first, second


PRECISION_AWARE = "optimizer.use_precision_aware_optimizer"
"""Megatron's switch for the precision-aware optimizer (Adam's state in the dtypes ``exp_avg_dtype`` and
``exp_avg_sq_dtype`` name), which Megatron Core takes only with the distributed optimizer."""


@lru_cache(maxsize=None)
def load(release: str = RELEASE) -> dict[str, Any]:
    """Presets of a release: presets-<release>.json, written by executing NVIDIA's launcher of that release."""
    return read_json(f"bridge/presets-{release}.json", ("provenance",))


def provenance(release: str = RELEASE) -> dict[str, Any]:
    return load(release)["provenance"]


def release_of(run: RunConfig) -> str:
    """The Bridge release whose presets apply to the run's container (26.02 and 26.02.01: the executed 0.3.1 ones)."""
    return versions.container_of(run).bridge


def release_of_container(name: str) -> str:
    return versions.containers()[name].bridge


LAUNCHER_OWN = frozenset({"launcher_args"})
"""Parts of an executed case that name the container itself (its image tag), not the configuration it ran."""


@lru_cache(maxsize=None)
def executed_configuration(container: str, key: str) -> Optional[str]:
    """NVIDIA's executed configuration of one case (``<model>/<gpu>/<precision>/<optimizer>``) in a container, as
    canonical JSON (its launcher's own arguments left out), or None where we executed none: two containers
    whose values are equal ran the very same configuration (layout, settings, kernels, job)."""
    container_entry = versions.containers().get(container)
    if container_entry is None:
        return None
    release = container_entry.bridge
    if not (DATA / f"presets-{release}.json").exists():
        return None
    entry = load(serving_release(release, key.split("/", 1)[0]))["presets"].get(key)
    if entry is None:
        return None
    return json.dumps({part: value for part, value in entry.items() if part not in LAUNCHER_OWN}, sort_keys=True)


def serving_release(release: str, model: str) -> str:
    """The release whose presets serve ``model`` in ``release`` (:data:`FALLBACK` where the release's scripts lack
    it)."""
    if release in FALLBACK and not any(k.startswith(model + "/") for k in load(release)["presets"]):
        return FALLBACK[release]
    return release


def case_key(model: str, gpu: str, precision: str, optimizer: str) -> str:
    """A case's key in ``presets-<bridge>.json``: ``<model>/<gpu>/<precision>/<optimizer>`` (NVIDIA's optimizer
    name)."""
    return f"{model}/{gpu}/{precision}/{optimizer}"


def _preset_optimizer(name: str) -> str:
    """Whose NVIDIA preset a run starts from (its registry entry's ``preset_optimizer``): NVIDIA publishes presets for
    adam and muon only; the others run on one of those layouts with their own fields from our config."""
    return REGISTRY[name].preset_optimizer if name in REGISTRY else name


def preset_key(run: RunConfig, optimizer: Optional[str] = None) -> str:
    opt = optimizer or _preset_optimizer(run.optimizer.name)
    return case_key(run.model.name, run.cluster.gpu, run.precision.name, opt)


def find_preset(run: RunConfig, release: Optional[str] = None) -> Optional[Preset]:
    """NVIDIA's preset for the run's model, GPU, precision and optimizer; for Muon without one, the Adam preset."""
    release = serving_release(release or release_of(run), run.model.name)
    presets = load(release)["presets"]
    key = preset_key(run)
    adapted = run.optimizer.name in REGISTRY and REGISTRY[run.optimizer.name].preset_adapted
    if key not in presets and _preset_optimizer(run.optimizer.name) == "muon":
        key, adapted = preset_key(run, "adam"), True
    entry = presets.get(key)
    if entry is None:
        return None
    return Preset(
        key,
        entry["settings"],
        entry.get("recipe_values", {}),
        entry.get("job", {}),
        entry["num_gpus"],
        adapted,
        release=release,
        source=entry.get("source", "NVIDIA's launcher, executed (tools/nvidia_presets.py)"),
        note=entry.get("note", ""),
        launcher_optimizer=entry.get("launcher_optimizer", ""),
    )


def preset_or_none(run: RunConfig) -> Optional[Preset]:
    """NVIDIA's preset of a Bridge run, or None: a local run, a GPU left to ``auto``, no preset for the case, or a
    container validation refuses in one line (never raises)."""
    if run.engine != "megatron_bridge" or run.cluster.gpu == "auto":
        return None
    try:
        return find_preset(run)
    except UserError:
        return None


def require_preset(run: RunConfig) -> Optional[Preset]:
    """The preset of a Bridge run (None without one); ``reproduce`` without a preset is a one-line error."""
    if run.engine != "megatron_bridge":
        return None
    if run.cluster.gpu == "auto" and run.intent == "reproduce":
        raise UserError(
            Problem(
                "cluster.gpu",
                "is auto: name this machine's GPU (e.g. cluster.gpu=b300) so that NVIDIA's preset for it applies, "
                "or use intent=train",
                ("intent",),
            )
        )
    release = release_of(run)
    preset = find_preset(run, release)
    if preset is None and run.intent == "reproduce":
        cases = load(release)["presets"]
        models = sorted({k.split("/")[0] for k in cases})
        known = sorted({"/".join(k.split("/")[1:3]) for k in cases if k.startswith(run.model.name + "/")})
        where = f"for {run.model.name}: {', '.join(known)}" if known else f"models with presets: {', '.join(models)}"
        raise UserError(
            Problem(
                "intent",
                f"NVIDIA measured no {preset_key(run)} in Megatron Bridge {release} ({run.cluster.container}; "
                f"{where}); use intent=train, or a GPU and precision NVIDIA measured",
                ("cluster.gpu", "precision"),
            )
        )
    return preset


LAYOUT_NAMES = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}
"""Megatron Core's short pipeline-layout notation (PipelineParallelLayerLayout.from_str)."""


def layout_from_string(text: str) -> list[list[str]]:
    """``'Et*4|(t*4|)*14tmL'`` -> one list of layer names per virtual stage."""

    def expand(s: str) -> str:
        while "(" in s:  # innermost group first: (body)*n
            s = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
        return re.sub(r"([EtmL])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)

    return [[LAYOUT_NAMES[ch] for ch in stage] for stage in expand(text).split("|")]


def normalised(value: Any) -> Any:
    """JSON form of a value, for comparing ours with the preset's (tuples are lists, layout strings expanded)."""
    if isinstance(value, str) and re.fullmatch(r"[EtmL|()*0-9]+", value) and "|" in value:
        return layout_from_string(value)
    return json.loads(json.dumps(value))


GRAPH_SCOPE, GRAPH_IMPL = "model.cuda_graph_scope", "model.cuda_graph_impl"
NONE_IS_EMPTY = (GRAPH_SCOPE,)
"""Fields where Bridge's None and [] are one setting (no graph scope: the effective configs agree, conformance-tested);
Bridge 0.6's flat recipes write None where we write []."""


def unheld_reason(entry: dict[str, Any]) -> Optional[str]:
    """Why our config cannot hold a preset entry of presets-<bridge>.json (None when it can): Megatron's own
    full-iteration CUDA graph (cuda_graph_impl local, Llama 3 70B's B200 BF16 preset), which our
    ``parallel.cuda_graph_impl`` does not offer; a plan of it is refused in one line (no published row runs it)."""
    values = {**entry.get("recipe_values", {}), **entry.get("settings", {})}
    if values.get(GRAPH_IMPL) == "local":
        return "Megatron's local full-iteration CUDA graph (cuda_graph_impl local), which our config does not hold"
    return None


NOT_EMITTED = {
    "comm_overlap.tp_comm_overlap_cfg.": (
        "NVIDIA's launcher assigns one of Bridge's named userbuffers_* TP-overlap objects (training/comm_overlap.py) "
        "whose nested SM counts and methods differ from the recipe's; an override cannot name an object, so the "
        "recipe's own TP-overlap configuration runs (the step model prices TP overlap on or off, not this tuning)"
    ),
}
"""Prefixes of preset settings no override reproduces, with why: each is one departure of the plan, never silent."""


def not_emitted(key: str) -> Optional[str]:
    """The prefix of :data:`NOT_EMITTED` that ``key`` falls under, or None."""
    return next((prefix for prefix in NOT_EMITTED if key.startswith(prefix)), None)


TP_OVERLAP_TUNING = "comm_overlap.tp_comm_overlap_cfg."


def tp_overlap_runs(run: RunConfig) -> bool:
    """Whether Bridge keeps TP overlap on for the run: it turns it off below TP 2 and without sequence parallelism
    (``CommOverlapConfig.setup``: "Disabling tensor parallel communication overlap due to TP size < 2", Bridge
    0.3-0.6), and then NVIDIA's TP-overlap tuning decides nothing."""
    return run.parallel.tp >= 2 and run.parallel.sequence_parallel


def unreproduced(preset: Preset, run: RunConfig) -> list[dict[str, Any]]:
    """One departure per :data:`NOT_EMITTED` prefix the preset sets, with its field count and reason (the TP-overlap
    tuning only where TP overlap runs)."""
    counts: dict[str, int] = {}
    for key in preset.settings:
        prefix = not_emitted(key)
        if prefix == TP_OVERLAP_TUNING and not tp_overlap_runs(run):
            continue
        if prefix:
            counts[prefix] = counts.get(prefix, 0) + 1
    return [
        {
            "field": prefix + "*",
            "ours": "the recipe's",
            "nvidia": f"{count} nested fields",
            "reason": NOT_EMITTED[prefix],
        }
        for prefix, count in counts.items()
    ]


LAYOUT = "model.pipeline_model_parallel_layout"
ACCOUNT_FLAGS = ("model.account_for_embedding_in_pipeline_split", "model.account_for_loss_in_pipeline_split")
RECIPE_SPLIT = (
    "NVIDIA's preset gives no layout: Bridge's recipe splits the layers itself (Llama 3 and Qwen3 "
    "recipes count the embedding and the loss as a layer each); ours is written out, with those two flags "
    "off, as Megatron requires beside a layout (make plan prints the stages)"
)
"""Why an explicit layout departs from a preset that has none."""


def departures(items: list[tuple[str, Any]], preset: Preset) -> list[dict[str, Any]]:
    """Our fields whose value differs from NVIDIA's (outside the documented list OURS)."""
    out = []
    for key, value in items:
        if key in OURS or not preset.knows(key):
            continue
        nvidia = preset.nvidia_value(key)
        if key in NONE_IS_EMPTY and value in (None, []) and nvidia in (None, []):
            continue
        if key == GRAPH_SCOPE and value in (None, []) and preset.nvidia_value(GRAPH_IMPL) == "none":
            continue  # no graphs: the scope NVIDIA's recipe leaves behind ("full") decides nothing
        if normalised(value) != normalised(nvidia):
            out.append({"field": key, "ours": normalised(value), "nvidia": nvidia})
            if (key == LAYOUT and nvidia is None) or key in ACCOUNT_FLAGS:
                out[-1]["reason"] = RECIPE_SPLIT
    return out


MUON_WORKAROUND = (
    "mixed_precision.fp8_param_gather",
    "mixed_precision.fp8_param",
    "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag",
)
"""What NVIDIA's Kimi K2 Muon preset turns off for dist_muon under MXFP8 (set_kimi_k2_common_configs)."""


MUON_DDP = ("ddp.use_distributed_optimizer", "ddp.overlap_param_gather")
"""dist_muon is its own (layer-wise) distributed optimizer: Megatron refuses the element-wise one and its param
gather."""


def is_muon_field(key: str) -> bool:
    """A field a Muon run sets differently from an Adam preset: the optimizer's own, and the MXFP8 workaround."""
    return key.startswith("optimizer.") or key in MUON_WORKAROUND or key in MUON_DDP


DERIVED = {
    "scheduler.lr_decay_steps": "Bridge derives it from scheduler.lr_decay_iters x GBS (train.iters differs, see OURS)",
    "scheduler.wd_incr_steps": "as scheduler.lr_decay_steps",
}
LAYER_WISE_MUON = {
    "optimizer.optimizer": "Megatron Core >= 0.18 spells NVIDIA's deprecated dist_muon as muon + "
    "use_layer_wise_distributed_optimizer=True (megatron.core.optimizer maps the one to the other; same optimizer)",
    "optimizer.use_layer_wise_distributed_optimizer": "as optimizer.optimizer",
}
"""Where our layer-wise Muon is written differently from NVIDIA's recipes of Bridge 0.5/0.6 (Core 0.18/0.19)."""
TRAIN_ONLY = {
    **{key: "intent=train: real routing and NaN checks" for key in TRAIN_SETTINGS},
    "train.eval_iters": "intent=train evaluates (the preset: eval_iters 0)",
    "validation.eval_iters": "intent=train evaluates (the preset: eval_iters 0; Bridge >= 0.4 keeps it in validation)",
    **{
        key: "intent=train keeps the model's published initialization, aux-loss coefficient and Adam eps "
        "(conf/model, conf/optimizer); reproduce takes the release's (release_layout.REPRODUCE_FIELDS)"
        for key in (
            "model.init_method_std",
            "model.embedding_init_method_std",
            "model.moe_aux_loss_coeff",
            "optimizer.adam_eps",
        )
    },
    "logger.timing_log_level": "intent=train: level 1 times the optimizer step (one device sync per timer per step)",
    "optimizer.barrier_with_L1_time": "intent=train: the optimizer timer measures this rank, without a barrier",
}
MUON_ON_ADAM_PRESET = (
    "ddp.align_param_gather",
    "ddp.bucket_size",
    "ddp.delay_wgrad_compute",
    "ddp.fp8_param_gather",
    "ddp.reuse_grad_buf_for_mxfp8_param_ag",
    "model.fp8_param",
)
"""Fields Bridge derives differently for dist_muon than for the distributed Adam of the preset it was adapted from."""


def is_respelling(key: str, adapted_from_adam: bool) -> bool:
    """Whether ``key`` differs from NVIDIA's recipe only in spelling (:data:`LAYER_WISE_MUON`)."""
    return key in LAYER_WISE_MUON and not adapted_from_adam


def derived_reason(key: str, intent: str, adapted_from_adam: bool, optimizer: str = "muon") -> Optional[str]:
    """Why an effective field may differ from NVIDIA's; None when nothing explains it (a conformance failure)."""
    if key in DERIVED:
        return DERIVED[key]
    if is_respelling(key, adapted_from_adam):
        return LAYER_WISE_MUON[key]
    if intent == "train" and key in TRAIN_ONLY:
        return TRAIN_ONLY[key]
    if adapted_from_adam and (is_muon_field(key) or key in MUON_ON_ADAM_PRESET):
        if optimizer == "muon":
            return (
                "Muon on NVIDIA's Adam preset (no Muon preset for this model): the optimizer and what Bridge "
                "derives from it"
            )
        return (
            f"{optimizer} on NVIDIA's Adam preset (NVIDIA publishes none for it): the optimizer and what "
            "Bridge derives from it"
        )
    return None


DTYPE_BYTES = {"torch.float32": 4, "torch.bfloat16": 2, "torch.float16": 2, "torch.uint8": 1}
"""Bytes per element of the optimizer-state dtypes Megatron's precision-aware optimizer takes (Bridge's names)."""


def adam_moment_bytes(run: RunConfig) -> int:
    """Bytes per element of each of AdamW's moments: the run's NVIDIA preset's ``exp_avg_dtype`` where it turns on
    Megatron's precision-aware optimizer (Bridge's DeepSeek-V3 recipe: BF16), else fp32. The emerging optimizers turn
    it off (optbench.engine.bridge.sections) and the local engine keeps fp32."""
    preset = None if run.optimizer.matrix_optimizer else preset_or_none(run)
    if preset is None or not preset.precision_aware_adam:
        return 4
    return max(DTYPE_BYTES.get(dtype, 4) for dtype in preset.adam_moment_dtypes())
