"""The plan as a typed object: what ``make plan`` computed for one resolved run, frozen, and its JSON view.

:func:`optbench.plan.build_plan` builds a :class:`Plan` once; the summary, the launcher, the sweep and
``make table`` read its fields; :meth:`Plan.to_json` writes plan.json (format :data:`PLAN_VERSION`, in the
key order plan.json has always had) and :meth:`Plan.from_json` reads one back. The job in the container
reads only the contract part (the format version and the ``bridge`` section, :mod:`optbench.runs.plan_file`).

The accounting section is typed (:class:`~optbench.accounting.plan_section.AccountingSection`, its records
written as the same JSON). The projection section stays a JSON mapping inside the typed plan: it is written, and
its keys documented, by :mod:`optbench.projection.project`, and printed by :mod:`optbench.projection.plan_fields`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from optbench.accounting.plan_section import AccountingSection
from optbench.engine.bridge.adapter import BridgeSetup
from optbench.config.layout import PARALLEL_SIZES, Layout
from optbench.config.schema import MATRIX_OPTIMIZERS, OptimizerConfig
from optbench.runs.plan_file import PLAN_VERSION
from optbench.projection.section import Projection, projection_from_json


@dataclass(frozen=True)
class PlanModel:
    """The model the run trains."""

    name: str
    """Model config name (conf/model/<name>.yaml)."""
    architecture: str
    """Architecture family (e.g. deepseek_v3, qwen3_moe)."""
    total_params: int
    """Parameters of the whole model."""
    active_params: int
    """Parameters one token passes through (routed experts: top-k of them)."""


@dataclass(frozen=True)
class PlanData:
    """What the run reads."""

    kind: str
    """mock, text or indexed (data.kind)."""
    seed: int
    """Data seed."""
    split: Optional[str] = None
    """Train/valid/test split (indexed data only)."""
    tokenizer: Optional[str] = None
    """Tokenizer (indexed data only)."""
    prefixes: tuple[Mapping[str, Any], ...] = ()
    """Each indexed prefix with its weight, whether it exists on the planning machine, and its sizes."""

    def to_json(self) -> dict[str, Any]:
        section: dict[str, Any] = {"kind": self.kind, "seed": self.seed}
        if self.kind == "indexed":
            section.update(split=self.split, tokenizer=self.tokenizer, prefixes=[dict(p) for p in self.prefixes])
        return section

    @property
    def missing_prefixes(self) -> list[str]:
        """The prefixes that do not exist on the machine that made the plan."""
        return [p["prefix"] for p in self.prefixes if not p["exists_here"]]


@dataclass(frozen=True)
class Plan:
    """Every number a user needs to check a run before launching it (plan.json)."""

    recipe: str
    """The recipe (recipes/<recipe>.yaml)."""
    description: str
    """The recipe's one-line description."""
    overrides: tuple[str, ...]
    """The overrides as typed, secrets redacted."""
    engine: str
    """local or megatron_bridge."""
    intent: str
    """reproduce or train."""
    cluster: str
    """Cluster preset (conf/cluster/<name>.yaml)."""
    executor: str
    """local or slurm."""
    gpu: str
    """GPU of the cluster preset (auto: decided on the machine that runs)."""
    precision: str
    """Precision preset."""
    layout: Layout
    """Every size of the parallel layout, derived ones included."""
    pipeline_stage_layers: tuple[int, ...]
    """Decoder layers of each virtual stage, in Megatron's order."""
    pipeline_layout_balanced: bool
    """Whether compose replaced the recipe's pipeline layout because pp/vpp were typed."""
    gbs: int
    """Global batch size (sequences)."""
    mbs: int
    """Micro batch size (sequences)."""
    seq_length: int
    """Sequence length (tokens)."""
    model: PlanModel
    """The model and its parameter counts."""
    optimizer: OptimizerConfig
    """The optimizer as configured."""
    data: PlanData
    """What the run reads."""
    accounting: AccountingSection
    """FLOPs, Newton-Schulz FLOPs per TP mode, memory per GPU, peaks, implied throughput."""
    projection: Projection
    """Projected step time, TFLOP/s and MFU; for a matrix optimizer its AdamW twin and side-by-side siblings."""
    config: Mapping[str, Any]
    """The whole run config, secrets redacted."""
    bridge: Optional[BridgeSetup] = None
    """The Bridge recipe call and overrides the job applies (megatron_bridge only)."""
    launch: Optional[Mapping[str, Any]] = None
    """What the launcher did (added once the job is rendered)."""
    plan_version: int = PLAN_VERSION
    """The format of plan.json (optbench.runs.plan_file)."""

    @property
    def tokens_per_step(self) -> int:
        return self.gbs * self.seq_length

    def with_launch(self, launch: Mapping[str, Any]) -> Plan:
        """This plan with the launcher's section (a new plan: a plan is never changed)."""
        return replace(self, launch=dict(launch))

    def to_json(self) -> dict[str, Any]:
        """plan.json, in its documented key order."""
        optimizer = asdict(self.optimizer)
        for section in MATRIX_OPTIMIZERS:  # each matrix optimizer's settings section; a null one is left out
            if optimizer[section] is None:
                optimizer.pop(section)
        lay = self.layout
        out: dict[str, Any] = {
            "plan_version": self.plan_version,
            "recipe": self.recipe,
            "description": self.description,
            "overrides": list(self.overrides),
            "engine": self.engine,
            "intent": self.intent,
            "cluster": self.cluster,
            "executor": self.executor,
            "world_size": lay.world_size,
            "nodes": lay.nodes,
            "gpus_per_node": lay.gpus_per_node,
            "gpu": self.gpu,
            "precision": self.precision,
            "layout": lay.as_dict(),
            "pipeline_stage_layers": list(self.pipeline_stage_layers),
            "pipeline_layout_balanced": self.pipeline_layout_balanced,
            "gbs": self.gbs,
            "mbs": self.mbs,
            "seq_length": self.seq_length,
            "num_microbatches": lay.num_microbatches,
            "tokens_per_step": self.tokens_per_step,
            "model": asdict(self.model),
            "optimizer": optimizer,
            "data": self.data.to_json(),
            **self.accounting.to_json(),
            "projection": self.projection.to_json(),
            "config": self.config,
        }
        if self.bridge is not None:
            out["bridge"] = self.bridge.as_dict()
        if self.launch is not None:
            out["launch"] = self.launch
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        """A plan.json read back (KeyError or TypeError when it is not one this version writes)."""
        lay = data["layout"]
        layout = Layout(
            world_size=data["world_size"],
            nodes=data["nodes"],
            gpus_per_node=data["gpus_per_node"],
            num_microbatches=data["num_microbatches"],
            **{key: lay[key] for key in PARALLEL_SIZES},
        )
        try:
            optimizer = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(OptimizerConfig), data["optimizer"]))
        except OmegaConfBaseException as err:
            raise ValueError(f"optimizer: {err}".splitlines()[0]) from err
        section = data["data"]
        return cls(
            recipe=data["recipe"],
            description=data["description"],
            overrides=tuple(data["overrides"]),
            engine=data["engine"],
            intent=data["intent"],
            cluster=data["cluster"],
            executor=data["executor"],
            gpu=data["gpu"],
            precision=data["precision"],
            layout=layout,
            pipeline_stage_layers=tuple(data["pipeline_stage_layers"]),
            pipeline_layout_balanced=data["pipeline_layout_balanced"],
            gbs=data["gbs"],
            mbs=data["mbs"],
            seq_length=data["seq_length"],
            model=PlanModel(**data["model"]),
            optimizer=optimizer,  # type: ignore[arg-type]
            data=PlanData(
                section["kind"],
                section["seed"],
                section.get("split"),
                section.get("tokenizer"),
                tuple(section.get("prefixes", ())),
            ),
            accounting=AccountingSection.from_json(data),
            projection=projection_from_json(data["projection"]),
            config=data["config"],
            bridge=BridgeSetup.from_dict(data["bridge"]) if "bridge" in data else None,
            launch=data.get("launch"),
            plan_version=data["plan_version"],
        )
