"""Derived parallel geometry: data-parallel sizes, nodes, microbatches, pipeline stages.

Megatron's process-group arithmetic, written out:

* world = tp * pp * cp * dp, so dp = world / (tp * pp * cp);
* the expert layout re-partitions the same tp * cp * dp ranks of a pipeline stage as
  ep * etp * edp, so edp (expert data parallel) = tp * cp * dp / (ep * etp);
* one optimizer step consumes gbs sequences as num_microbatches = gbs / (mbs * dp)
  microbatches per model replica.

Call :func:`derive_layout` only on a validated config (see :mod:`optbench.validate`).
"""

from __future__ import annotations

from dataclasses import dataclass

from optbench.config.schema import RunConfig


@dataclass(frozen=True)
class Layout:
    """Every size of the parallel layout, derived ones included."""

    world_size: int
    tp: int
    pp: int
    vpp: int
    """Virtual stages per pipeline rank (1 = no interleaving)."""
    cp: int
    ep: int
    etp: int
    dp: int
    edp: int
    """Expert data parallel size: replicas of each expert."""
    nodes: int
    gpus_per_node: int
    num_microbatches: int
    """Microbatches per model replica per optimizer step."""

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in PARALLEL_SIZES}


PARALLEL_SIZES = ("tp", "pp", "vpp", "cp", "ep", "etp", "dp", "edp")
"""The parallel sizes of a layout, as plans list them (:meth:`Layout.as_dict`)."""


def vpp_size(run: RunConfig) -> int:
    return run.parallel.vpp or 1


def gpus_per_node(run: RunConfig) -> int:
    """GPUs (processes) per node; the local executor puts every process on one node."""
    return run.cluster.gpus_per_node or run.parallel.num_gpus


def derive_layout(run: RunConfig) -> Layout:
    p = run.parallel
    per_node = gpus_per_node(run)
    dp = p.num_gpus // (p.tp * p.pp * p.cp)
    edp = (p.tp * p.cp * dp) // (p.ep * p.etp)
    return Layout(
        world_size=p.num_gpus,
        tp=p.tp,
        pp=p.pp,
        vpp=vpp_size(run),
        cp=p.cp,
        ep=p.ep,
        etp=p.etp,
        dp=dp,
        edp=edp,
        nodes=max(1, -(-p.num_gpus // per_node)),
        gpus_per_node=min(per_node, p.num_gpus),
        num_microbatches=run.train.gbs // (run.train.mbs * dp),
    )


def stage_decoder_layers(run: RunConfig) -> list[int]:
    """Decoder layers held by each virtual pipeline stage, in Megatron's stage order."""
    stages = run.parallel.pp * vpp_size(run)
    if run.parallel.pipeline_layout:
        return [stage.count("decoder") for stage in run.parallel.pipeline_layout]
    return [run.model.num_layers // stages] * stages
