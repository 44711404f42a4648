"""Where every parameter lives: pipeline stages, tensor/expert shards, and Megatron's global rank order.

Shared by the Newton-Schulz FLOPs per rank and the memory estimate, so both see the same model slice.

* Virtual pipeline stages follow ``parallel.pipeline_layout`` when given (embedding / decoder / mtp /
  loss entries), else an even split of the decoder layers with the embedding on the first stage and
  the final norm, output layer and MTP layers on the last. Pipeline rank ``r`` holds virtual stages
  ``r, r + pp, r + 2 pp, ...`` (Megatron's interleaved schedule). A stage with MTP layers also holds a
  copy of the input embedding (Megatron's ``GPTModel``: ``pre_process or mtp_process``); with tied
  embeddings the loss stage holds the embedding as its output layer.
* Tensor parallelism shards a parameter along its ``partition_dim`` over ``tp`` ranks (routed experts
  over ``etp``); expert parallelism deals the routed experts of every MoE layer out in contiguous
  blocks of ``num_experts / ep``.
* Global ranks follow Megatron Core's default order ``tp-cp-ep-dp-pp``
  (``parallel_state.RankGenerator``; the first name varies fastest). Dense parameters:
  ``rank = tp_r + tp * (cp_r + cp * (dp_r + dp * pp_r))``. Expert parameters use a second generator
  over the same ranks with sizes (etp, ep, edp, pp): ``rank = etp_r + etp * (ep_r + ep * (edp_r + edp * pp_r))``.
  The data-parallel group of dense parameters is DP x CP (group rank ``cp_r + cp * dp_r``), that of
  expert parameters the expert-data-parallel group (group rank ``edp_r``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from optbench.accounting.params import EMBEDDING, ParamSpec, model_parameters
from optbench.config.layout import Layout, stage_decoder_layers
from optbench.config.schema import ModelConfig, RunConfig


@dataclass(frozen=True)
class VirtualStage:
    """One virtual pipeline stage (model chunk)."""

    index: int
    """Position in Megatron's stage order (0 .. pp*vpp-1)."""
    pipeline_rank: int
    """Pipeline rank that runs it: index % pp."""
    decoder_layers: tuple[int, ...]
    """Decoder layer indices it holds."""
    embedding: bool
    """Holds the input embedding (first stage, or a stage with MTP layers)."""
    loss: bool
    """Holds the final norm, the output layer and the loss."""
    mtp_layers: tuple[int, ...]
    """MTP layers it holds, numbered after the decoder (num_layers + i)."""


class LocalParam(NamedTuple):
    """One parameter as one rank holds it (a named tuple: a Kimi K2 layout places some 50,000, and a frozen
    dataclass is several times slower to build)."""

    spec: ParamSpec
    """The unsharded parameter."""
    local_shape: tuple[int, ...]
    """Shape of this rank's shard."""
    shards: int
    """Ranks it is split over (TP, or ETP for routed experts); 1 when replicated."""
    stage: int
    """Virtual stage holding it."""

    numel: int
    """Elements of this rank's shard (kept: the per-rank work reads it for every parameter of every rank)."""


class ExpertSlice(Sequence[LocalParam]):
    """One EP rank's routed-expert shards on one pipeline rank, built when first read.

    Every EP rank holds as many experts of each MoE layer, shaped alike (validation requires
    ``num_moe_experts % ep == 0``), so most readers read one slice and price the others by it
    (:class:`optbench.accounting.ns_flops.DpGroupWork`); only a reader that needs every expert's name builds
    the rest. Kimi K2 on EP64 holds some 50,000 expert shards per layout, which a layout search would
    otherwise build for every point.
    """

    def __init__(
        self, inventory: tuple[ParamSpec, ...], runs: tuple[tuple[int, int], ...], first: int, width: int, etp: int
    ) -> None:
        self._inventory, self._runs, self._first, self._width, self._etp = inventory, runs, first, width, etp

    @cached_property
    def params(self) -> tuple[LocalParam, ...]:
        """The shards, in model order (layer by layer; within a layer, expert by expert)."""
        shards: dict[tuple, tuple[tuple[int, ...], int, int]] = {}
        out = []
        for stage, start in self._runs:
            begin = start + self._first
            for spec in self._inventory[begin : begin + self._width]:
                key = (spec.shape, spec.partition_dim)
                if key not in shards:
                    shards[key] = _shard(spec, self._etp)
                out.append(LocalParam(spec, *shards[key][:2], stage, shards[key][2]))
        return tuple(out)

    def _key(self) -> tuple:
        return self._runs, self._first, self._width, self._etp

    def __eq__(self, other: object) -> bool:
        """Equal when built from equal inventories by equal rules (without building either)."""
        if not isinstance(other, ExpertSlice):
            return NotImplemented
        same_inventory = self._inventory is other._inventory or self._inventory == other._inventory
        return same_inventory and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((len(self._inventory), self._key()))

    def __getitem__(self, index):  # type: ignore[override]
        return self.params[index]

    def __len__(self) -> int:
        return len(self.params)

    def __iter__(self) -> Iterator[LocalParam]:
        return iter(self.params)


@dataclass(frozen=True)
class PipelineRankParams:
    """The parameters of one pipeline rank."""

    dense: tuple[LocalParam, ...]
    """Non-expert parameters, as every TP rank of this pipeline rank holds them."""
    experts: tuple[ExpertSlice, ...]
    """Routed-expert parameters held by each EP rank (index = ep rank), ETP-sharded; alike in shape."""


def virtual_stages(run: RunConfig) -> tuple[VirtualStage, ...]:
    """Every virtual stage of the run, in Megatron's order."""
    pp = run.parallel.pp
    counts = stage_decoder_layers(run)
    layout = run.parallel.pipeline_layout
    stages, next_layer, next_mtp = [], 0, run.model.num_layers
    for index, count in enumerate(counts):
        if layout:
            entries = layout[index]
            embedding, loss, mtp = "embedding" in entries, "loss" in entries, entries.count("mtp")
        else:
            last = index == len(counts) - 1
            embedding, loss, mtp = index == 0, last, run.model.mtp_num_layers if last else 0
        stages.append(
            VirtualStage(
                index=index,
                pipeline_rank=index % pp,
                decoder_layers=tuple(range(next_layer, next_layer + count)),
                embedding=embedding or mtp > 0,
                loss=loss,
                mtp_layers=tuple(range(next_mtp, next_mtp + mtp)),
            )
        )
        next_layer += count
        next_mtp += mtp
    return tuple(stages)


def _shard(spec: ParamSpec, ways: int) -> tuple[tuple[int, ...], int, int]:
    """(local shape, shards, elements) of a parameter split ``ways`` ways along its partition dimension."""
    shape = list(spec.shape)
    if spec.partition_dim is None or ways == 1:
        return tuple(shape), 1, math.prod(shape)
    shape[spec.partition_dim] //= ways
    return tuple(shape), ways, math.prod(shape)


class _StageIndex:
    """Which virtual stages hold which parameters, looked up in constant time per parameter."""

    def __init__(self, stages: tuple[VirtualStage, ...], model: ModelConfig) -> None:
        self.by_layer: dict[int, list[int]] = {}
        for s in stages:
            for layer in (*s.decoder_layers, *s.mtp_layers):
                self.by_layer.setdefault(layer, []).append(s.index)
        self.embedding = [s.index for s in stages if s.embedding]
        if model.share_embeddings_and_output_weights:
            self.embedding += [s.index for s in stages if s.loss and not s.embedding]
        self.loss = [s.index for s in stages if s.loss]

    def stages_of(self, spec: ParamSpec) -> list[int]:
        """Virtual stages holding a parameter (the embedding may be held twice)."""
        if spec.layer is not None:
            return self.by_layer.get(spec.layer, [])
        if spec.kind == EMBEDDING:
            return self.embedding
        return self.loss  # output layer, decoder final norm


def _expert_run(specs: tuple[ParamSpec, ...], start: int, experts: int) -> int:
    """Length of the routed-expert run of one MoE layer that begins at ``specs[start]``.

    The inventory lists a layer's experts contiguously, expert 0 first, each with the same number of tensors
    (:func:`optbench.accounting.params._ffn`); this checks it at both ends rather than trusting it."""
    per_expert = 1
    while start + per_expert < len(specs) and specs[start + per_expert].expert == 0:
        per_expert += 1
    length = experts * per_expert
    last = specs[start + length - 1]
    if specs[start].expert != 0 or not last.is_expert or last.expert != experts - 1 or last.layer != specs[start].layer:
        raise AssertionError(f"the experts of layer {specs[start].layer} are not listed contiguously")
    return length


def _rank_params(run: RunConfig, stages: tuple[VirtualStage, ...]) -> tuple[PipelineRankParams, ...]:
    model, p = run.model, run.parallel
    experts = model.num_moe_experts or 0
    experts_per_rank = experts // p.ep or 1
    dense: list[list[LocalParam]] = [[] for _ in range(p.pp)]
    runs: list[list[tuple[int, int]]] = [[] for _ in range(p.pp)]  # (stage, start of a layer's expert run)
    index = _StageIndex(stages, model)
    shards: dict[tuple, tuple[tuple[int, ...], int, int]] = {}  # (shape, dim, ways) -> local shape, shards, numel
    specs = model_parameters(model, p.tp)
    width = 0  # inventory entries of one EP rank's experts of one layer
    position = 0
    while position < len(specs):
        spec = specs[position]
        if spec.is_expert:
            length = _expert_run(specs, position, experts)
            width = length // experts * experts_per_rank
            for stage in index.stages_of(spec):
                runs[stages[stage].pipeline_rank].append((stage, position))
            position += length
            continue
        key = (spec.shape, spec.partition_dim, p.tp)
        if key not in shards:
            shards[key] = _shard(spec, p.tp)
        local_shape, held_shards, numel = shards[key]
        for stage in index.stages_of(spec):
            dense[stages[stage].pipeline_rank].append(LocalParam(spec, local_shape, held_shards, stage, numel))
        position += 1
    return tuple(
        PipelineRankParams(
            dense=tuple(dense[r]),
            experts=tuple(ExpertSlice(specs, tuple(runs[r]), k * width, width, p.etp) for k in range(p.ep)),
        )
        for r in range(p.pp)
    )


@dataclass(frozen=True)
class Placement:
    """Where every parameter of a run lives: its virtual stages and what each pipeline rank holds.

    Built once per run (:func:`optbench.resolve.resolve`): a Kimi K2 layout places some 50,000
    parameter shards, and the Newton-Schulz work, the memory estimate and the projection all read them.
    """

    stages: tuple[VirtualStage, ...]
    """Every virtual stage, in Megatron's order."""
    ranks: tuple[PipelineRankParams, ...]
    """What each pipeline rank holds (index = pipeline rank)."""


def place(run: RunConfig) -> Placement:
    """The placement of a validated run's parameters."""
    stages = virtual_stages(run)
    return Placement(stages, _rank_params(run, stages))


@dataclass(frozen=True)
class DataParallelGroup:
    """One data-parallel group: the ranks that share (and all-reduce) the same parameters."""

    pp_rank: int
    """Pipeline rank of every member."""
    ranks: tuple[int, ...]
    """Global ranks, in group-rank order."""
    expert_rank: int | None
    """EP rank whose experts the group holds; None for the dense (DP x CP) group."""


def dense_dp_groups(layout: Layout) -> list[DataParallelGroup]:
    """The DP x CP groups of dense parameters: one per (pipeline rank, TP rank)."""
    tp, cp, dp = layout.tp, layout.cp, layout.dp
    groups = []
    for pp_r in range(layout.pp):
        for tp_r in range(tp):
            ranks = tuple(tp_r + tp * (cp_r + cp * (dp_r + dp * pp_r)) for dp_r in range(dp) for cp_r in range(cp))
            groups.append(DataParallelGroup(pp_r, ranks, None))
    return groups


def expert_dp_groups(layout: Layout) -> list[DataParallelGroup]:
    """The expert-data-parallel groups: one per (pipeline rank, EP rank, ETP rank)."""
    etp, ep, edp = layout.etp, layout.ep, layout.edp
    groups = []
    for pp_r in range(layout.pp):
        for ep_r in range(ep):
            for etp_r in range(etp):
                ranks = tuple(etp_r + etp * (ep_r + ep * (edp_r + edp * pp_r)) for edp_r in range(edp))
                groups.append(DataParallelGroup(pp_r, ranks, ep_r))
    return groups


def pipeline_rank_of(layout: Layout, rank: int) -> int:
    """Pipeline rank of a global rank (pp varies slowest in both generators)."""
    return rank // (layout.world_size // layout.pp)
